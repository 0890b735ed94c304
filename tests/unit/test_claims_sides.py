"""report.claims.sides / pairs read the invariants an experiment wrote on its rows (issue 45): a record whose rows
carry order, pixels, cache, window and epochs (not applicable where they have no meaning) reaches a verdict
through results.csv; the same record without them reads "not known", never a verdict."""

from __future__ import annotations

from feedlab import like_for_like as L
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
