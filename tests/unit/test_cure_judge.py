"""The cure's steps judged by the one judge (feedlab.report.cure_judge): "steady" only at the stated precision,
an undone step on an imprecise rate or other epochs is not told apart / not like for like (never "slower"), and a
target the baseline already met says so."""

from __future__ import annotations

from feedlab.like_for_like import NOT_LIKE, WITHIN
from feedlab.paths import FIGURES_DIR
from feedlab.report import cure_judge as J
from feedlab.report.claims.core import Run

WIN = {"timed_batches": 60, "window_s": 2.0, "epoch_batches": 0, "runs": {"samples_per_s": [1, 2, 3]},
       "order": "global", "pixel_error": 0.0, "cache": "warm"}


def _step(label, rate, hw, kind="advice", against=None, workers=16, batch=128, **kw):
    return {"label": label, "kind": kind, "samples_per_s": rate, "half_width": hw, "against": against,
            "config": {"batch_size": batch, "num_workers": workers}, "rate_kind": "steady", "kept": True,
            "data_wait_share": 0.02, "gpu_busy": float("nan"), **WIN, **kw}


def test_steady_only_at_the_stated_precision():
    assert J.step_kind({"half_width": 0.52, "rate_kind": "steady"}, 0.05) == "imprecise"
    assert J.step_kind({"half_width": 0.04, "rate_kind": "steady"}, 0.05) == "steady"
    assert J.precision_words({"half_width": 0.20}, 0.05) == "imprecise: ±20% > the ±5% asked"
    assert J.step_side({"half_width": 0.2, "rate_kind": "steady"}, 0.05).rate_kind == "imprecise"


def test_an_undone_step_on_other_epochs_is_not_like_for_like_not_slower():
    base = _step("collate=fast", 1000.0, 0.02)
    ring = _step("loader=ring", 890.0, 0.52, against="collate=fast", gain=0.89, kept=False, epoch_batches=32)
    tail = J.step_tail(ring, [base, ring], 0.05)
    assert f"{NOT_LIKE} (epochs: 32 batches per epoch vs one epoch" in tail and "undone, not credited" in tail
    assert "slower" not in tail


def test_a_gain_inside_the_pairs_precision_is_not_told_apart():
    base = _step("a", 1000.0, 0.03)
    b = _step("b", 1020.0, 0.03, against="a", gain=1.02, kept=False)
    v = J.step_verdict(b, base, 0.05)
    assert v.word == WITHIN and "not told apart from a" in J.step_tail(b, [base, b], 0.05)


def test_a_target_the_baseline_already_met_says_so():
    base = _step("baseline, 2 workers", 100.0, 0.01, kind="baseline", workers=2, data_wait_share=0.002)
    last = _step("num_workers=0", 160.0, 0.01, against="baseline, 2 workers", gain=1.6, workers=0,
                 data_wait_share=0.03)
    line = J.cure_target_line([base, last], cuda=False, precision=0.05)
    assert ": met" in line and "the baseline (baseline, 2 workers) already met the target (0.2%)" in line


def test_the_committed_cure_records_read_by_todays_rules():
    """h100: the ring's ±52% pass over 32-batch epochs is not like for like with collate=fast (it read "measured
    slower: undone"); every imprecise pass says so. cpu-2c: the baseline's 0.2% data wait already met the target."""
    h100 = FIGURES_DIR / "15_the_cure" / "h100-16c"
    if (h100 / "results.json").is_file():
        run = Run(out_dir=h100)
        line = J.cure_step_line("loader=ring: 16,259 samples/s; measured slower than collate=fast (×0.89): undone",
                                None, run)
        if any(s.get("label") == "loader=ring" and (s.get("epoch_batches") or 0) > 0 for s in run.payload["steps"]):
            assert "measured slower" not in line and NOT_LIKE in line, line
        for s in run.payload["steps"]:
            if J.step_kind(s, run.payload.get("precision")) == "imprecise":
                assert "imprecise" in J.cure_step_line(f"{s['label']}: x", None, run), s["label"]
    cpu = FIGURES_DIR / "15_the_cure" / "cpu-2c"
    if (cpu / "results.json").is_file():
        run = Run(out_dir=cpu)
        v = J.target_verdict(run.payload["steps"], cuda=False, precision=run.payload.get("precision"))
        base = J.all_core_baseline(run.payload["steps"])
        if v.get("judged") and base["data_wait_share"] <= J.TARGET_DATA_WAIT:
            assert v["baseline_met"].startswith("the baseline (")


def test_a_step_line_says_its_tail_once_and_one_pass_by_its_precision():
    """A record's line that already has "faster than … kept" gets today's tail once, not twice; "IQR 235–235" (the
    quartiles of one pass) reads as that pass's precision; the readings of a one-pass step say the same."""
    from feedlab.experiments.cure import readings

    one = {"runs": {"samples_per_s": [235.1]}}
    base = _step("baseline, 2 workers", 175.9, 0.033, kind="baseline", workers=2, q25=175.9, q75=175.9, **one)
    w0 = _step("num_workers=0", 235.1, 0.046, against="baseline, 2 workers", workers=0, q25=235.1, q75=235.1,
               gain=235.1 / 175.9, against_half_width=0.033, **one)
    for s in (base, w0):
        s.update(bound_stage="model", runs={"samples_per_s": [s["samples_per_s"]]})
    run = Run(payload={"steps": [base, w0]})
    old = ("num_workers=0: 235 samples/s (IQR 235–235; ×1.34 the all-core baseline), data wait 13% of the loop; "
           "the doctor predicts the model stage bounds it; faster than baseline, 2 workers (×1.34): kept")
    line = J.cure_step_line(old, None, run)
    assert line.count("faster than baseline, 2 workers") == 1, line
    assert "IQR 235–235" not in line and "one pass, ±4.6%" in line, line
    printed = readings([base, w0], cuda=False)
    assert all("IQR" not in r for r in printed[:2]) and "one pass, ±4.6%" in printed[1], printed
    assert printed[1].count("faster than") == 1, printed[1]
    three = dict(w0, runs={"samples_per_s": [230.0, 235.1, 240.0]}, q25=232.0, q75=238.0)
    assert J.spread_words(three) == "IQR 232–238 over 3 passes"


def test_a_step_that_records_no_order_pixels_or_cache_reads_not_known_never_equal():
    """audit54 N8: step_side typed order "global", pixels 0.0 and cache "warm" for every step; 15's record holds none
    of them, and a format change (png → npy_mmap) changes exactly those: not like for like, never credited."""
    bare = {k: v for k, v in WIN.items() if k not in ("order", "pixel_error", "cache")}
    base = {**_step("baseline, 2 workers", 100.0, 0.01, kind="baseline", workers=2), **bare}
    for k in ("order", "pixel_error", "cache"):
        base.pop(k, None)
    step = {**_step("format=npy_mmap", 200.0, 0.01, against=base["label"]), **bare}
    for k in ("order", "pixel_error", "cache"):
        step.pop(k, None)
    side = J.step_side(step)
    assert side.order is None and side.pixel_error is None and side.cache is None
    v = J.step_verdict(step, base)
    assert v.word == "not like for like" and "order, cache, pixels against the reference decode (not known)" in v.why
    assert J.step_verdict({**step, **WIN}, {**base, **WIN}).word == "met"
