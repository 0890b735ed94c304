"""report.claims.sides / pairs read the invariants an experiment wrote on its rows (issue 45): a record whose rows
carry order, pixels, cache, window and epochs (not applicable where they have no meaning) reaches a verdict
through results.csv; the same record without them reads "not known", never a verdict."""

from __future__ import annotations

from feedlab import like_for_like as L
from feedlab.report.claims import sides
from feedlab.report.claims.core import Run
from feedlab.report.claims.pairs import grid_verdicts
from feedlab.report.claims.sides import side_of_rows
from feedlab.results import Results

FP = {"other_load": None}


def _record(tmp_path, with_invariants: bool) -> Run:
    res = Results()
    for pin, rate in ((True, 2000.0), (False, 1000.0)):
        for r in range(3):
            inv = (L.invariants(order=L.NOT_APPLICABLE, pixel_error=L.NOT_APPLICABLE, cache="warm",
                                window_s=1.5, epoch_batches=L.NOT_APPLICABLE) if with_invariants else {})
            res.add("h2d_copy", f"pin={pin}", "samples_per_s", rate * (1 + 0.01 * r), "samples/s", r,
                    batch_size=64, num_workers=0, pin_memory=pin, timed_batches=120, rate_kind="steady", **inv)
    res.write(tmp_path, fingerprint=FP)
    return Run(payload={}, out_dir=tmp_path)


def test_not_applicable_survives_the_csv_and_a_recorded_pair_reaches_a_verdict(tmp_path):
    run = _record(tmp_path, True)
    side, rate, _ = side_of_rows(run, {"experiment": "h2d_copy", "pin_memory": True}, "pinned")
    assert (side.order, side.pixel_error, side.cache, side.epoch_batches, side.window_s) == (
        L.NOT_APPLICABLE, L.NOT_APPLICABLE, "warm", L.NOT_APPLICABLE, 1.5)
    v, _ = grid_verdicts(run, [({"experiment": "h2d_copy", "pin_memory": True},
                                {"experiment": "h2d_copy", "pin_memory": False})], 2.0, 1.5,
                         labels=("pinned", "pageable"))
    assert v.judged and v.word == L.MET, v


def test_the_same_record_without_invariants_reads_not_known(tmp_path):
    run = _record(tmp_path, False)
    v, _ = grid_verdicts(run, [({"experiment": "h2d_copy", "pin_memory": True},
                                {"experiment": "h2d_copy", "pin_memory": False})], 2.0, 1.5,
                         labels=("pinned", "pageable"))
    assert not v.judged and "not known" in v.why, v


def _print_record(tmp_path, windows: dict[str, float], repeats: int = 7, spread: float = 0.01) -> Run:
    """04-like rows: ms per batch of two modes, ``repeats`` blocks of 200 batches each (``windows``: one block's
    seconds), the values within ±``spread``."""
    res = Results()
    for mode, w in windows.items():
        for r in range(repeats):
            ms = w / 200 * 1e3 * (1 + spread * (-1) ** r)
            res.add("print_overhead", mode, "ms_per_batch", ms, "ms", r, sink="pty", batch_size=32, num_workers=0,
                    timed_batches=200, **L.invariants(order=L.NOT_APPLICABLE, pixel_error=L.NOT_APPLICABLE,
                                                      cache=L.NOT_APPLICABLE, window_s=ms * 200 / 1e3,
                                                      epoch_batches=L.NOT_APPLICABLE))
    res.write(tmp_path, fingerprint=FP)
    return Run(payload={}, out_dir=tmp_path)


def test_side_of_rows_pools_a_micro_benchmarks_repeats_and_the_verdict_says_so(tmp_path):
    run = _print_record(tmp_path, {"print": 0.2, "none": 0.18})
    pair = tuple(dict(experiment="print_overhead", variant=v) for v in ("print", "none"))
    side, _, _ = side_of_rows(run, pair[0], "print", metric="ms_per_batch")
    assert side.repeats == 7 and abs(side.pooled_s - 0.2 * 7.01) < 1e-6 and side.repeat_half_width < 0.02
    assert side.window_short() is None and side.pooled()
    full, _ = grid_verdicts(run, [pair], 1.11, 37.0, 2.0, metric="ms_per_batch", labels=("print", "none"))
    assert full.judged and "window pooled over 7 repeats" in full.why, full


def test_side_of_rows_refuses_a_pool_under_a_second_or_of_rows_that_are_not_one_settings_repeats(tmp_path):
    run = _print_record(tmp_path, {"print": 0.045, "none": 0.041})      # 04's committed 7 × ~45 ms
    side, _, _ = side_of_rows(run, {"experiment": "print_overhead", "variant": "print"}, "print",
                              metric="ms_per_batch")
    assert "in all < 1 s" in side.window_short()
    mixed, _, _ = side_of_rows(run, {"experiment": "print_overhead"}, "both modes", metric="ms_per_batch")
    assert mixed.pooled_s is None and "pooled" not in (mixed.window_short() or "")   # 14 rows, 7 repeat numbers


def test_ladder_words_labels_a_best_whose_window_gives_no_rate():
    """audit56 N12: 01's "best N at W workers (R× over 1 worker)" applies the window rule as GPU_READINGS does:
    a best timed in a window under a second is labelled and its ratio is measured, not judged (window …)."""
    import pandas as pd

    from feedlab.report.stage_judge import ladder_line

    rows = [dict(experiment="throughput_vs_workers", model="none", num_workers=w, batch_size=32, repeat=r,
                 metric="samples_per_s", value=v * (1 + 0.01 * r), rate_kind="steady", rate_half_width=0.02,
                 timed_batches=60, window_s=win)
            for w, v, win in ((1, 110.0, 2.0), (15, 1300.0, 0.15)) for r in range(3)]
    run = Run({}, fingerprint={}, frame=pd.DataFrame(rows))
    tag, tail = sides.ladder_words(run, "none", 15, 1)
    assert tag == " (window too short to judge)", tag
    assert tail.startswith(": measured, not judged (window: 15 workers timed 150.0 ms < 1 s"), tail
    old = "(b) loader alone: 100 samples/s at 0 workers, 110 at 1, best 1313 at 15 workers (11.94× over 1 worker)."
    new = ladder_line(old, run)
    assert new.startswith("(b) loader alone: 100 samples/s at 0 workers, 110 at 1, best 1313 at 15 workers (window "
                          "too short to judge) (11.94× over 1 worker: measured, not judged (window: 15 workers"), new
    assert ladder_line(new, run) == new
    long = Run({}, fingerprint={}, frame=pd.DataFrame(rows).assign(window_s=2.0))
    assert sides.ladder_words(long, "none", 15, 1) == ("", "")
