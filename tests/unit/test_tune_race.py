"""feedlab.tuner.race: a candidate whose interval already excludes it ends its window early and gets no further
pass; one already decided needs no longer window; the start is measured in full; an early end needs two looks."""

import dataclasses
import math
import time

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from feedlab.doctor import trials as TR
from feedlab.tuner import race as RC

FAST = dict(half_width=0.05, min_window_s=0.4, max_window_s=0.6, deadline_s=10.0, min_batches=10)


class _Quiet:
    def summary(self):
        return {"available": True, "busy": False, "other_fraction": 0.0, "other_cpu_cores": 0.0, "usable_cores": 2}


def _trial(name, rate, hw=0.02, kind="steady"):
    return TR.Trial(name, {}, rates=[rate], median=rate, lo=rate, hi=rate, half_width=hw, passes=1,
                    timed_batches=60, window_s=1.2, rate_kind=kind, batch_size=8, workers=0, order="global",
                    epoch_batches=100)


def test_a_candidate_under_the_start_by_the_target_or_below_the_leader_is_excluded():
    start, lead = _trial("start", 100.0), _trial("threads=4", 300.0, hw=0.05)
    assert "under ×1.05" in RC.excluded_by(98.0, 0.02, start, lead)          # ×0.98 at most ×1.01: never a pick
    assert "below threads=4" in RC.excluded_by(200.0, 0.1, start, lead)      # 220 < 285
    assert RC.excluded_by(280.0, 0.1, start, lead) is None                    # 308 reaches the leader's 285
    assert RC.excluded_by(104.0, 0.05, start, None) is None                   # ×1.04 ±5%: could still be ×1.05
    assert RC.excluded_by(10.0, math.inf, start, lead) is None                # no precision yet: never excluded


def test_a_candidate_is_decided_only_over_the_start_and_above_every_other():
    start = _trial("start", 100.0, hw=0.04)
    assert "×3.00" in RC.decided(300.0, 0.1, start, [_trial("num_workers=2", 200.0)])
    assert RC.decided(300.0, 0.1, start, [_trial("num_workers=2", 280.0)]) is None   # 270 ≤ 285.6: not above it
    assert RC.decided(104.0, 0.01, start, []) is None                               # ×1.04: not over ×1.05
    assert RC.decided(300.0, 0.1, None, []) is None                                 # no start: nothing to decide


def test_an_early_end_needs_two_looks_a_quarter_window_and_starts_afresh_each_pass():
    done = {"start": _trial("start", 100.0)}
    rule = RC.Rule("slow", done, "start", {}, 1.05, min_window_s=1.0, min_batches=50, half_width=0.05)
    assert rule(50.0, 0.05, 10, 0.1) is None            # under a quarter of the window: not yet
    assert rule(50.0, 0.05, 15, 0.3) is None            # the first look that excludes it
    assert rule(50.0, 0.05, 20, 0.4).startswith("excluded after 0.40 s")
    assert rule(50.0, 0.05, 10, 0.3) is None and rule.excluded is None   # a new pass: nothing carried over
    fast = RC.Rule("fast", done, "start", {}, 1.05, min_window_s=1.0, min_batches=50, half_width=0.05)
    assert fast(400.0, 0.2, 40, 1.1) is None            # 40 batches < 50 and ±20%: the window is not a rate yet
    assert fast(400.0, 0.2, 55, 1.2) is None
    assert fast(400.0, 0.2, 60, 1.3).startswith("decided") and fast.excluded is None


class _Slow(Dataset):
    def __len__(self):
        return 4000

    def __getitem__(self, i):
        time.sleep(0.0005)
        return torch.tensor([float(i)])


def test_race_stops_a_clearly_slower_candidate_early_and_measures_the_start_in_full():
    fast = TensorDataset(torch.rand(20000, 1))
    cands = [TR.Candidate("start", lambda: DataLoader(fast, batch_size=8)),
             TR.Candidate("slow", lambda: DataLoader(_Slow(), batch_size=8), {"num_workers": 0})]
    out = RC.race(cands, passes=2, load_window=_Quiet, **FAST)
    start, slow = out.trials
    assert [t.name for t in out.trials] == ["start", "slow"] and start.passes == 2 and start.stopped is None
    assert start.window_s >= FAST["min_window_s"]
    assert "slow" in out.excluded and "under ×1.05" in out.excluded["slow"]
    assert slow.passes == 1 and slow.window_s < FAST["min_window_s"] and slow.rate_kind == "imprecise"
    assert slow.stopped.startswith("excluded after")


def test_once_more_only_where_the_judge_has_not_told_them_apart(monkeypatch):
    calls = []

    def fake(cands, **kw):
        calls.append([c.name for c in cands])
        return [_trial(c.name, 100.0 if c.name == "start" else 108.0, hw=0.01) for c in cands]

    monkeypatch.setattr(RC.TR, "measure", fake)
    cands = [TR.Candidate("start", list), TR.Candidate("threads=2", list, {"kind": "threads", "threads": 2})]
    met = RC.Raced([_trial("start", 100.0, 0.04, "steady"), _trial("threads=2", 400.0)])
    RC.once_more(met, cands, max_window_s=2.0)
    assert calls == [] and not met.notes                                  # ×4: met, a longer window changes nothing
    # ×4 on an imprecise start of one pass is not yet judged (like_for_like.precision_problem): measured once more
    unsure = RC.Raced([_trial("start", 100.0, 0.04, "imprecise"), _trial("threads=2", 400.0)])
    RC.once_more(unsure, cands, max_window_s=2.0)
    assert calls == [["start", "threads=2"]] and "once more" in unsure.notes[0]
    calls.clear()
    within = RC.Raced([_trial("start", 100.0, 0.04, "imprecise"), _trial("threads=2", 106.0)])
    RC.once_more(within, cands, max_window_s=2.0)
    assert calls == [["start", "threads=2"]] and "once more" in within.notes[0]
    assert within.trials[0].passes == 2 and within.trials[0].rate_kind == "steady"
    excluded = RC.Raced([_trial("start", 100.0, 0.04, "imprecise"), _trial("threads=2", 106.0)],
                        excluded={"threads=2": "excluded after 0.3 s"})
    RC.once_more(excluded, cands, max_window_s=2.0)
    assert len(calls) == 1                                                # an excluded trial is never the best


def test_the_first_window_is_capped_at_the_shortest_a_verdict_accepts():
    fast = TensorDataset(torch.rand(200000, 1))
    cands = [TR.Candidate("start", lambda: DataLoader(fast, batch_size=8))]
    kw = dict(half_width=1e-6, min_window_s=0.2, max_window_s=5.0, deadline_s=10.0, min_batches=10, load_window=_Quiet)
    (t,) = RC.race(cands, passes=1, first_cap_s=0.2, **kw).trials       # never precise: ends at its cap
    assert 0.2 <= t.window_s < 1.0 and t.rate_kind == "imprecise" and t.timed_batches >= 10


def test_a_merged_trial_counts_the_batches_of_its_imprecise_passes():
    steady = _trial("a", 100.0, hw=0.02)
    steady.timed_batches = 30
    loose = _trial("a", 104.0, hw=0.06, kind="imprecise")
    m = RC.merge(steady, loose)
    assert m.passes == 2 and m.rate_kind == "imprecise" and m.half_width == 0.06 and m.timed_batches == 60
    assert m.median == 102.0 and m.side().window_short() is None          # each pass a rate: so is the trial
    again = RC.merge(loose, steady, longer=True)                          # the longer window's precision stands
    assert again.rate_kind == "steady" and again.half_width == 0.02 and again.timed_batches == 60


def test_once_more_measures_an_undecided_pair_up_to_the_repeats_an_imprecise_side_needs(monkeypatch):
    """An imprecise side is judged only from lfl.MIN_REPEATS passes (like_for_like.precision_problem): a pair of
    one pass each is measured twice more, a pair of two once more; the note says how many."""
    asked = []

    def fake(cands, passes=1, **kw):
        asked.append(passes)
        return [dataclasses.replace(_trial(c.name, 100.0 if c.name == "start" else 106.0, hw=0.01), passes=passes,
                                    rates=[100.0 if c.name == "start" else 106.0] * passes) for c in cands]

    monkeypatch.setattr(RC.TR, "measure", fake)
    cands = [TR.Candidate("start", list), TR.Candidate("threads=2", list, {"kind": "threads", "threads": 2})]
    one = RC.Raced([_trial("start", 100.0, 0.04, "imprecise"), _trial("threads=2", 106.0)])
    RC.once_more(one, cands, max_window_s=2.0)
    assert asked == [RC.lfl.MIN_REPEATS - 1] and one.trials[0].passes == RC.lfl.MIN_REPEATS
    assert f"{RC.lfl.MIN_REPEATS - 1} passes each" in one.notes[0]
    two = RC.Raced([dataclasses.replace(_trial("start", 100.0, 0.04, "imprecise"), rates=[100.0, 101.0], passes=2),
                    dataclasses.replace(_trial("threads=2", 106.0), rates=[106.0, 105.0], passes=2)])
    RC.once_more(two, cands, max_window_s=2.0)
    assert asked[-1] == 1 and "1 pass each" in two.notes[0]
