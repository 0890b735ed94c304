"""feedlab.doctor.trials: candidates measured interleaved on the user's own loop, and the one judge of a change."""

import multiprocessing as mp
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from feedlab import like_for_like as lfl
from feedlab.doctor import trials as T

FAST = dict(passes=2, min_window_s=0.05, max_window_s=0.3, deadline_s=10.0)


def _ds(n=4000):
    return TensorDataset(torch.arange(n, dtype=torch.float32).reshape(-1, 1))


def _loader(**kw):
    return lambda: DataLoader(_ds(), batch_size=8, **kw)


class _Quiet:
    def summary(self):
        return {"available": True, "busy": False, "other_fraction": 0.01, "other_cpu_cores": 0.02, "usable_cores": 2}


class _Busy:
    def summary(self):
        return {"available": True, "busy": True, "other_fraction": 0.6, "other_cpu_cores": 1.2, "usable_cores": 2}


def test_measure_interleaves_and_records_what_the_sides_share():
    order = []

    def cand(name):
        def make():
            order.append(name)
            return _loader()()
        return T.Candidate(name, make, {} if name == "start" else {"x": name})

    trials = T.measure([cand("start"), cand("b"), cand("c")], load_window=_Quiet, **FAST)
    assert order == ["start", "b", "c", "b", "c", "start"]     # rotated each pass
    for t in trials:
        assert t.error is None and t.busy is None and t.passes == 2 and len(t.rates) == 2
        assert t.lo <= t.median <= t.hi and t.rate_kind in ("steady", "imprecise")
        assert t.batch_size == 8 and t.workers == 0 and t.order == "sequential" and t.epoch_batches == 500
        assert t.timed_batches >= T.MIN_TIMED and t.other_load == [0.01, 0.01]
    assert trials[1].settings == {"x": "b"}
    side = trials[0].side()
    assert side.batch_size == 8 and side.cache == "warm" and side.repeats == 2 and side.pixel_error == 0.0


def test_a_step_runs_on_every_batch_and_bounds_the_rate():
    seen = []

    def step(b):
        seen.append(len(b[0]))
        time.sleep(0.002)

    (t,) = T.measure([T.Candidate("start", _loader())], step=step, load_window=_Quiet, **FAST)
    assert seen and set(seen) == {8}
    assert t.median < 8 / 0.002   # the step is inside the user's loop


def _trial(name, rates, hw=0.01, **kw):
    kw.setdefault("workers", 0)
    t = T.Trial(name, kw.pop("settings", {}), rates=list(rates), median=sorted(rates)[len(rates) // 2],
                lo=min(rates), hi=max(rates), half_width=hw, passes=len(rates), timed_batches=60, window_s=1.2,
                rate_kind="steady", batch_size=8, order="global", epoch_batches=100, **kw)
    return t


def test_judge_a_clear_gain_is_met_with_its_interval():
    start = _trial("start", [100, 101, 99])
    more = _trial("num_workers=2", [200, 204, 198], workers=2, settings={"num_workers": 2})
    v = T.judge(start, more)
    assert v.word == lfl.MET and 1.9 < v.ratio < 2.1 and v.lo < v.ratio < v.hi
    assert T.gain_words(v).startswith("×2.0")


def test_judge_inside_the_spread_or_slower_is_tried_no_gain():
    start = _trial("start", [100, 110, 90])
    same = _trial("prefetch_factor=4", [104, 95, 108], settings={"prefetch_factor": 4})
    slower = _trial("num_workers=2", [60, 62, 61], workers=2, settings={"num_workers": 2})
    assert T.judge(start, same).word == lfl.WITHIN
    assert T.judge(start, slower).word == lfl.MISSED
    for v in (T.judge(start, same), T.judge(start, slower)):
        assert T.gain_words(v).startswith(T.NO_GAIN)


def test_judge_a_setting_the_change_does_not_name_is_not_like_for_like():
    start = _trial("start", [100, 101, 99])
    other = _trial("pin_memory=True", [200, 201, 199], workers=2, settings={"pin_memory": True})
    assert T.judge(start, other).word == lfl.NOT_LIKE


def test_a_busy_machine_is_measured_again_once_then_never_judged():
    made = []

    def make():
        made.append(1)
        return _loader()()

    trials = T.measure([T.Candidate("start", make), T.Candidate("b", make, {"x": 1})], load_window=_Busy, **FAST)
    assert all(t.busy and "busy" in t.busy for t in trials)
    assert len(made) == 4                                   # each: the pass, once more, then marked busy
    v = T.judge(*trials)
    assert v.word == lfl.NOT_FAIR and "busy" in v.why
    assert not trials[0].ok


def test_a_raising_factory_is_one_line_and_the_others_are_measured():
    def broken():
        raise OSError("no such file: /data/x")

    start, bad = T.measure([T.Candidate("start", _loader()), T.Candidate("bad", broken, {"x": 1})],
                           load_window=_Quiet, **FAST)
    assert start.ok and start.passes == 2
    assert bad.error and "\n" not in bad.error and "OSError" in bad.error and "bad" in bad.error
    assert T.judge(start, bad).word == lfl.NOT_FAIR


def test_a_hanging_step_ends_at_the_deadline_in_one_line():
    def step(b):
        time.sleep(30)

    t0 = time.perf_counter()
    (t,) = T.measure([T.Candidate("start", _loader())], step=step, load_window=_Quiet,
                     **{**FAST, "deadline_s": 0.5})
    assert time.perf_counter() - t0 < 5
    assert t.error and "did not return within" in t.error and "\n" not in t.error


class _Unpicklable(Dataset):
    def __init__(self):
        self.fn = lambda i: torch.tensor([float(i)])

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return self.fn(i)


def test_a_dataset_that_cannot_be_pickled_for_a_process_context_says_so():
    make = lambda: DataLoader(_Unpicklable(), batch_size=8, num_workers=1,  # noqa: E731
                              multiprocessing_context=mp.get_context("spawn"))
    (t,) = T.measure([T.Candidate("num_workers=1 (spawn)", make, {"num_workers": 1})], load_window=_Quiet, **FAST)
    assert t.error and "\n" not in t.error and "pickl" in t.error.lower() and "threads" in t.error


def test_too_little_data_for_a_window_is_one_line():
    make = lambda: DataLoader(TensorDataset(torch.zeros(0, 1)), batch_size=8)  # noqa: E731
    (t,) = T.measure([T.Candidate("start", make)], load_window=_Quiet, **FAST)
    assert t.error and "give it more data" in t.error


@pytest.mark.parametrize("passes", [1, 3])
def test_the_budget_stops_new_passes(passes):
    (t,) = T.measure([T.Candidate("start", _loader())], load_window=_Quiet, budget_s=0.0,
                     **{**FAST, "passes": passes})
    assert t.passes == 1            # every candidate gets its first pass; none after the budget


def test_a_recipe_change_is_measured_but_never_credited():
    start = _trial("start", [100, 101, 99])
    bigger = _trial("batch_size=64", [300, 301, 299], settings={"batch_size": 64}, recipe=True)
    v = T.judge(start, bigger)
    assert v.word == lfl.NOT_LIKE and "recipe" in v.why


def test_a_precise_short_pass_beside_a_long_imprecise_one_keeps_the_trial_like_for_like():
    """Two passes, one precise at 35 batches, one imprecise (±6%) at 60: each is a rate by the like-for-like rule,
    so the trial is too (its batches are the imprecise pass's; the grid of notebook 16 read 'not like for like')."""
    t = T.Trial("num_workers=0", {})
    base = dict(workers=0, order="global", batch_size=8, epoch_batches=100, other=0.0)
    T._summarise(t, [dict(rate=850.0, timed=35, window_s=1.2, half_width=0.03, precise=True, **base),
                     dict(rate=860.0, timed=60, window_s=1.5, half_width=0.06, precise=False, **base)])
    assert t.timed_batches == 60 and t.rate_kind == "imprecise" and t.half_width == 0.06
    assert t.side().window_short() is None


def test_an_early_rule_ends_a_pass_and_says_why():
    """Candidate.early (the tuner's race): told the rate so far every 5 timed batches from 10; a reason ends the pass."""
    seen = []

    def early(rate, hw, timed, window):
        seen.append(timed)
        return "enough" if timed >= 20 else None

    t = T.measure([T.Candidate("a", _loader(), early=early)], passes=1, min_window_s=5.0, max_window_s=10.0,
                  deadline_s=10.0, load_window=_Quiet)[0]
    assert seen == [10, 15, 20] and t.stopped == "enough" and t.timed_batches == 20 and t.rate_kind == "imprecise"
