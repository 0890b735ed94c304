"""15_the_cure: steady windows with nothing silently mixed, the baseline then the doctor's advice
one change at a time (slower changes undone), and the target judged only where it was measured."""

import math
import time

import numpy as np
import pytest
import torch

from feedlab.doctor import Doctor, Effort, StageSplit
from feedlab.experiments import cure as C
from feedlab.pipeline import PipelineSpec
from feedlab.timing import EpochTiming

SPEC = PipelineSpec(format="fake", decode="fake", collate="totensor", batch_size=8, device="cpu")


def _et(waits, steps, sizes=8):
    ph = np.zeros((len(waits), 4))
    ph[:, 0], ph[:, 2] = waits, steps
    return EpochTiming(ph, np.full(len(waits), sizes), float(ph.sum()), 0.0, {})


def test_plan_skips_the_prefetch_and_times_enough_batches():
    assert C.timed_plan(SPEC, 50) == (1, 51)                          # no workers: the first batch
    assert C.timed_plan(SPEC.replace(num_workers=4, prefetch_factor=2), 50) == (9, 59)


def test_steady_window_leaves_start_up_out():
    et = _et([1.0, 0.5] + [0.01] * 10, [0.02] * 12)                  # a slow start-up, then steady
    w = C.steady_window(et, skip=2)
    assert w["samples_per_s"] == pytest.approx(80 / 0.3)
    assert w["data_wait_share"] == pytest.approx(0.1 / 0.3)
    assert math.isnan(w["gpu_busy"]) and w["timed_batches"] == 10


def test_steady_window_takes_the_meters_steady_busy_fraction():
    et = _et([0.0] * 4, [0.1] * 4)
    assert C.steady_window(et, skip=1, busy={"gpu_busy": 0.5, "gpu_busy_steady": 0.9})["gpu_busy"] == 0.9


def test_too_short_a_pass_is_refused_not_mixed():
    with pytest.raises(ValueError, match="none left to time"):
        C.steady_window(_et([0.1, 0.1], [0.1, 0.1]), skip=2)


WINDOW = {"timed_batches": 60, "window_s": 2.0, "half_width": 0.01,   # a steady window at its precision,
          "order": "global", "pixel_error": 0.0, "cache": "warm"}       # with the invariants recorded


def _steps(wait, busy, kept=True, batch=128, all_cores=False):
    base = {"kind": "baseline", "q25": 90, "q75": 110, "bound_stage": "decode", "kept": True, **WINDOW}
    steps = [{**base, "label": "baseline, 2 workers", "samples_per_s": 100.0, "data_wait_share": 0.8, "gpu_busy": 0.1,
              "config": {"batch_size": 128, "num_workers": 2}}]
    if all_cores:
        steps.append({**base, "label": "baseline, 16 workers", "samples_per_s": 600.0, "data_wait_share": 0.3,
                      "gpu_busy": 0.9, "config": {"batch_size": 128, "num_workers": 16}})
    steps.append({"label": "format=npy_mmap", "kind": "advice", "samples_per_s": 900.0, "q25": 880, "q75": 950,
                  "data_wait_share": wait, "gpu_busy": busy, "bound_stage": "model", "kept": kept,
                  "against": steps[-1]["label"], "gain": 9.0, "config": {"batch_size": batch, "num_workers": 16},
                  **WINDOW})
    return steps


def test_target_met_missed_and_not_measured():
    v = C.target_verdict(_steps(0.02, 0.96), cuda=True)
    assert v["gpu_idle_verdict"] == "met" and v["gpu_idle"] == pytest.approx(0.04)
    v = C.target_verdict(_steps(0.2, 0.91), cuda=True)   # 9% idle: the GPU's target missed, whatever the host waited
    assert v["data_wait"] == "missed" and v["gpu_idle_verdict"] == "missed"
    v = C.target_verdict(_steps(0.02, math.nan), cuda=False)
    assert v["data_wait"] == "met" and v["gpu_idle_verdict"] == "not measured here" and "CUDA" in v["reason"]
    # an undone step is not the doctor's pipeline: the verdict falls on the last kept one
    assert C.target_verdict(_steps(0.02, 0.95, kept=False), cuda=True)["label"] == "baseline, 2 workers"


def test_a_larger_batch_or_other_epochs_make_the_credit_not_like_for_like():
    assert C.target_verdict(_steps(0.02, 0.96), cuda=True)["not_like_for_like"] == []
    v = C.target_verdict(_steps(0.02, 0.96, batch=256), cuda=True)
    assert v["not_like_for_like"] == ["batch size: 128 vs 256"]
    line = C.readings(_steps(0.02, 0.96, batch=256), cuda=True)[-1]
    assert "not like for like (batch size: 128 vs 256): measured, not judged" in line
    ring = _steps(0.02, 0.96, all_cores=True)
    ring[1]["epoch_batches"], ring[2]["epoch_batches"] = 0, 16   # the ring cycles epochs of 16 batches
    assert C.cure_differences(ring) == ["epochs: one epoch for the whole pass vs 16 batches per epoch "
                                        "(format=npy_mmap against baseline, 16 workers)"]
    ring[2]["epoch_batches"] = 0   # two DataLoaders, each one epoch for its pass (their warm-ups may differ)
    assert C.cure_differences(ring) == []


def test_a_window_neither_long_nor_precise_makes_the_credit_not_like_for_like():
    steps = _steps(0.02, 0.96)
    assert C.cure_differences(steps) == []     # an older record: no windows recorded, none judged
    for s in steps:
        s.update(timed_batches=50, window_s=3.0, half_width=0.09)
    assert C.cure_differences(steps) == []     # 50 batches: long enough whatever its precision
    steps[-1].update(timed_batches=15, half_width=0.03)
    assert C.cure_differences(steps) == []     # short but known to ±3%
    steps[-1].update(half_width=0.08)
    assert C.cure_differences(steps) == ["window: format=npy_mmap timed 15 batches < 50 (±8% > ±5%)"]


def test_a_precision_timed_pass_stops_once_its_rate_is_known():
    doc = Doctor(None, SPEC, max_workers=2, effort=Effort(repeats=1, samples=8, e2e_batches=2, cold=False),
                 splits=lambda f, d: StageSplit(Store(0.003)), model="none")
    doc.measure(alternatives=False)
    m = C.measure(doc, SPEC, repeats=2, min_timed=200, precision=0.5)   # a steady sleep: known after its second
    assert all(10 <= t < 200 for t in m["runs"]["timed_batches"]) and m["timed_batches"] < 200
    assert m["half_width"] <= 0.5 and 1.0 <= m["window_s"] < 3.0
    capped = C.measure(doc, SPEC, repeats=1, min_timed=12, precision=1e-9)   # never that precise: the cap,
    assert capped["timed_batches"] > 12 and capped["half_width"] > 1e-9     # once its window has a second
    assert 1.0 <= capped["window_s"] < 1.5       # 12 batches of ~25 ms are 0.3 s: the like-for-like window
    fixed = C.measure(doc, SPEC, repeats=1, min_timed=12)                   # no precision: exactly min_timed
    assert fixed["timed_batches"] == 12 and fixed["half_width"] is None


def test_readings_and_title_credit_the_doctor_from_the_all_core_baseline():
    lines = C.readings(_steps(0.02, math.nan), cuda=False)
    assert "×9.00 the first baseline" not in lines[1] and "×9.00 the all-core baseline" in lines[1]
    assert "not measured (no CUDA device)" in lines[1] and "batch size held at 128" in lines[2]
    assert "target with the doctor's pipeline (format=npy_mmap)" in lines[-1] and ": met" in lines[-1]
    allc = _steps(0.02, 0.96, all_cores=True)
    assert "×1.50 the all-core baseline" in C.readings(allc, cuda=True)[2]
    assert C.title(allc, cuda=True) == ("The doctor's changes: ×1.5 the all-core PNG baseline, GPU busy 90% → 96%; "
                                        "every core ×6.0 over baseline, 2 workers")
    # the host waited with the GPU's queue full: the reading says how long the GPU itself idled
    busy_waiting = C.readings(_steps(0.26, 0.97), cuda=True)[-1]
    assert "GPU idle 3% of the steady window (target ≤ 5%): met" in busy_waiting
    assert "the GPU itself was idle 3%" in busy_waiting
    assert "itself" not in C.readings(_steps(0.02, 0.97), cuda=True)[-1]


class Store:
    def __init__(self, sleep):
        self.sleep, self.decode_name = sleep, "fake"

    def __len__(self):
        return 24   # fewer than the timed batches need: the sampler cycles it

    def read_raw(self, i):
        return b"x" * 16

    def decode_raw(self, raw):
        time.sleep(self.sleep)
        return np.full((8, 8, 3), 7, np.uint8), np.full((16, 16, 3), 9, np.uint8)


def test_cure_measures_the_baseline_then_follows_the_advice():
    doc = Doctor(None, SPEC, max_workers=2, effort=Effort(repeats=1, samples=8, e2e_batches=2, cold=False),
                 splits=lambda f, d: StageSplit(Store(0.002)), model="none")
    doc.measure(alternatives=False)
    res, steps = C.cure(doc, SPEC, worker_counts=[0], max_steps=1, repeats=2, min_timed=6)
    assert steps[0]["kind"] == "baseline" and steps[0]["timed_batches"] == 6
    assert all(s["rate_kind"] == "steady" and s["samples_per_s"] > 0 for s in steps)
    df = res.frame()
    assert set(df["metric"]) == {"samples_per_s", "data_wait_share"}     # no GPU: busy not recorded
    assert (df[df.metric == "samples_per_s"].groupby("variant").size() == 2).all()
    for s in steps[1:]:
        assert s["kind"] == "advice" and s["kept"] == (s["gain"] >= 1.0)
        assert s["label"].split("=")[0] != "batch_size"   # the recipe's batch size is held
    assert steps[0]["epoch_batches"] == 0   # one sampler epoch holds the whole pass
    assert torch.get_num_threads() >= 1


def test_workload_is_measured_on_cuda_and_named_on_a_cpu(monkeypatch, tmp_path):
    from feedlab.experiments import loader_grid

    seen = {}

    def fake(root, device, batch_size, num_workers, fmt):
        seen.update(device=device, fmt=fmt, workers=num_workers)
        return {"model": "srcnn_wide", "gpu_bound": True, "reading": "GPU workload: srcnn_wide"}

    monkeypatch.setattr(loader_grid, "gpu_workload", fake)
    assert C.workload("auto", "cuda", tmp_path, 128, 16)["model"] == "srcnn_wide"
    assert seen == {"device": "cuda", "fmt": "png", "workers": 16}   # no npy_mmap packed: the baseline's format
    w = C.workload("auto", "cpu", tmp_path)
    assert w["model"] == "srcnn_small" and "not measured" in w["reading"]


def test_cycled_gives_total_batches_over_several_epochs():
    class Two:
        num_workers = 3
        epochs = 0

        def __len__(self):
            return 2

        def __iter__(self):
            Two.epochs += 1
            return iter([Two.epochs * 10, Two.epochs * 10 + 1])

    c = C.Cycled(Two(), 5)
    assert len(c) == 5 and c.num_workers == 3
    assert list(c) == [10, 11, 20, 21, 30]


def test_measure_runs_a_kind_that_takes_no_sampler(monkeypatch):
    """The ring and the thread loader shuffle per epoch and take no sampler: the steady pass
    cycles their epochs instead (the H100 run failed here: 'ring takes no DataLoader options')."""
    import feedlab.pipeline as P

    doc = Doctor(None, SPEC, max_workers=2, effort=Effort(repeats=1, samples=8, e2e_batches=2, cold=False),
                 splits=lambda f, d: StageSplit(Store(0.0)), model="none")
    doc.measure(alternatives=False)
    real, seen = P.make_loader, []

    def no_sampler(ds, spec, **kw):
        seen.append(sorted(kw))
        return real(ds, spec.replace(loader="plain"), **kw)   # plain also refuses a sampler

    monkeypatch.setattr(P, "make_loader", no_sampler)
    m = C.measure(doc, SPEC.replace(loader="threads", num_workers=2), repeats=1, min_timed=12)
    assert seen == [["drop_last", "seed"]]
    assert m["samples_per_s"] > 0 and m["runs"]["timed_batches"] == [12]


def test_plot_shows_an_undone_step_as_a_hatched_swatch():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def step(label, rate, kept=True):
        return {"label": label, "samples_per_s": rate, "q25": rate * 0.9, "q75": rate * 1.1, "kept": kept,
                "data_wait_share": 0.3, "gpu_busy": 0.8}

    fig, axes = plt.subplots(1, 2)
    C.plot(axes, [step("baseline, 2 workers", 100.0), step("loader=ring", 50.0, kept=False)], cuda=True)
    swatches = axes[0].get_legend().get_patches()
    assert [p.get_hatch() for p in swatches] == [None, "//"]
    assert axes[1].get_legend()._ncols == 2                     # four entries in two rows, none overlapping
    plt.close(fig)


def test_a_stored_run_with_null_gpu_busy_and_no_config_is_read_not_crashed():
    """results.json stores NaN as null (strict JSON); an older run's steps may lack their config."""
    steps = _steps(0.02, None)
    steps[0].pop("config")
    v = C.target_verdict(steps, cuda=True)
    assert v["gpu_idle_verdict"] == "not measured here" and C.all_core_baseline(steps) is not None


def test_the_readme_judges_an_old_cure_record_by_todays_like_for_like_rule():
    """The h100 record of 7dc3393 advised batch_size=256 and printed a met target: the README's
    line for it is generated today, so it names what differs and gives no verdict."""
    from pathlib import Path

    from feedlab.report.readme import _reading

    folder = Path(__file__).parent / "fixtures" / "cure_h100_7dc3393"   # that record, kept when 8e73a35's replaced it
    lines = [x for x in _reading(Path(folder), "15_the_cure") if x.startswith("target with")]
    assert len(lines) == 1
    assert "not like for like (batch size: 128 vs 256)" in lines[0] and ": met" not in lines[0]


def test_an_old_cure_records_step_lines_carry_todays_credit_and_like_for_like_check():
    """The h100 record (7dc3393) credited each advised step from the 2-worker baseline and advised a batch of
    256: the README's lines add the all-core credit and say which steps are not like for like."""
    from feedlab.report import targets
    from feedlab.report.claims.core import Run

    steps = [
        {"label": "baseline, 2 workers", "kind": "baseline", "samples_per_s": 100.0, "config": {"num_workers": 2, "batch_size": 128}},
        {"label": "baseline, 16 workers", "kind": "baseline", "samples_per_s": 400.0, "config": {"num_workers": 16, "batch_size": 128}},
        {"label": "batch_size=256", "kind": "advice", "samples_per_s": 500.0, "config": {"num_workers": 16, "batch_size": 256}},
        {"label": "collate=fast", "kind": "advice", "samples_per_s": 480.0, "config": {"num_workers": 16, "batch_size": 128}},
    ]
    run = Run({"steps": steps}, fingerprint={})
    f = lambda line: targets.cure_step_line(line, targets.CURE, run)  # noqa: E731
    assert f("baseline, 16 workers: 400 samples/s (×4.00 the first baseline)").endswith("the first baseline)")
    big = f("batch_size=256: 500 samples/s (×5.00 the first baseline)")
    assert "×1.25 the all-core baseline (baseline, 16 workers)" in big
    assert big.endswith("not like for like with the all-core baseline (batch size: 128 vs 256)")
    same = f("collate=fast: 480 samples/s (×4.80 the first baseline)")
    assert "×1.20 the all-core baseline" in same and "not like for like" not in same
    assert f("target with the doctor's pipeline (collate=fast): x") == "target with the doctor's pipeline (collate=fast): x"


def test_a_setting_is_judged_by_one_pass_its_own_batches_beside_its_own_precision():
    """A pass precise at 10 batches and one of 50 imprecise batches both meet the window rule: the record takes
    one pass's numbers (never the fewest batches of one beside the widest interval of the other)."""
    both = {"timed_batches": [10, 50], "window_s": [2.0, 9.0], "half_width": [0.04, 0.06]}
    assert C.worst_pass(both) == (10, 2.0, 0.04)
    short = {"timed_batches": [10, 12, 50], "window_s": [2.0, 2.5, 9.0], "half_width": [0.04, 0.08, 0.06]}
    assert C.worst_pass(short) == (12, 2.5, 0.08)      # the pass that misses the rule
    steps = _steps(0.02, 0.96)
    for s, (n, w, h) in zip(steps, (C.worst_pass(both), C.worst_pass(both))):
        s.update(timed_batches=n, window_s=w, half_width=h)
    assert C.cure_differences(steps) == []


def test_a_gain_inside_the_pairs_precision_is_not_kept():
    """Review: the cure kept any change at ×1.00 or more, though each rate was known to ±3–5%."""
    from feedlab.pipeline.rates import gain_resolved
    assert gain_resolved(1.03, 0.04, 0.03) is False          # ±5% together: ×1.03 is not told apart
    assert gain_resolved(1.10, 0.04, 0.03) is True
    assert gain_resolved(0.90, 0.04, 0.03) is True           # resolved, and slower
    assert gain_resolved(1.10, None, 0.03) is None           # no stated precision: not judged by it
    steps = _steps(0.02, math.nan, kept=False)
    steps[-1].update(gain=1.03, resolved=False, half_width=0.04, against_half_width=0.03)
    line = next(x for x in C.readings(steps, cuda=False) if x.startswith("format=npy_mmap"))
    assert "not told apart from baseline, 2 workers (×1.03, inside the pair's ±5.0%): undone" in line
    steps[-1].update(gain=0.8, resolved=True)
    line = next(x for x in C.readings(steps, cuda=False) if x.startswith("format=npy_mmap"))
    assert "measured slower than baseline, 2 workers (×0.80): undone" in line
    steps[-1].update(gain=0.98, resolved=False)              # slower, but inside the precision: not told apart
    line = next(x for x in C.readings(steps, cuda=False) if x.startswith("format=npy_mmap"))
    assert "not told apart from baseline, 2 workers (×0.98" in line



def test_measure_runs_warmup_passes_only_where_asked(monkeypatch):
    """A timed pass leaves its own start-up batches out: with ``warmup=0`` (the quick profile) no untimed
    pass runs before it, with 1 one of the skipped batches and 2 more; the timed passes are the same either way."""
    doc = Doctor(None, SPEC, max_workers=0, effort=Effort(repeats=1, samples=8, e2e_batches=2, cold=False),
                 splits=lambda f, d: StageSplit(Store(0.0)), model="none")   # the passes need no stage costs
    real, calls = C.run_epoch, []

    def counting(loader, *a, max_batches=None, **kw):
        calls.append((max_batches, "stop" in kw))
        return real(loader, *a, max_batches=max_batches, **kw)

    monkeypatch.setattr(C, "run_epoch", counting)
    skip, total = C.timed_plan(SPEC.replace(device=doc.device), 6)
    for warmup in (0, 1):
        calls.clear()
        m = C.measure(doc, SPEC, repeats=2, min_timed=6, warmup=warmup)
        assert [c for c in calls if not c[1]] == [(skip + 2, False)] * warmup   # the untimed passes
        assert [c[0] for c in calls if c[1]] == [total, total]                  # the timed ones, unchanged
        assert m["runs"]["timed_batches"] == [6, 6] and m["samples_per_s"] > 0


def test_a_cure_step_records_what_it_shares_with_the_step_it_is_judged_against(sr_root):
    """audit54 N8: 15's steps recorded no order, pixels or cache, so every step (a format change above all) read
    "not like for like". Each setting now records them: the loader's order, its format's pixels against the
    reference decode, a cache warmed by reading every sample first."""
    from types import SimpleNamespace

    from feedlab.like_for_like import NOT_CHECKED

    doc = SimpleNamespace(root=sr_root)
    png = C.invariants_of(doc, SPEC.replace(format="png", decode="pil"))
    mmap = C.invariants_of(doc, SPEC.replace(format="npy_mmap", decode="none"))
    assert png == {"order": "global", "pixel_error": 0.0, "cache": "warm"}
    assert mmap["pixel_error"] == 0.0 and mmap["order"] == png["order"]
    assert C.invariants_of(SimpleNamespace(root=None), SPEC)["pixel_error"] == NOT_CHECKED
    a = {"label": "a", "config": SPEC.as_dict(), **png, "samples_per_s": 100.0, "half_width": 0.02,
         "timed_batches": 60, "window_s": 2.0, "rate_kind": "steady", "runs": {"samples_per_s": [100.0] * 3}}
    b = {**a, "label": "b", **mmap, "samples_per_s": 200.0, "against": "a", "kind": "advice",
         "config": SPEC.replace(format="npy_mmap", decode="none").as_dict()}
    from feedlab.report.cure_judge import step_verdict

    v = step_verdict(b, a)
    assert v.word != "not like for like", v.why
