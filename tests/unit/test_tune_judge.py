"""16's heuristics against the grid's best by the one judge (report.tune_judge): "fails" only where the judge says
missed on the two grid rows; an imprecise side with too few passes, or a share inside the pair's spread, is named
"not judged", never a failure (audit54 N6); the copy of a recorded line is printed again from the record."""

from __future__ import annotations

from feedlab.report.claims.core import Run
from feedlab.report.tune_judge import heuristic_line, recorded_line


def _row(name, rate, hw=0.01, passes=3, kind="steady", spread=0.0):
    return {"name": name, "settings": {"num_workers": 0 if name == "num_workers=0" else 2}, "median": rate,
            "rates": [rate * (1 - spread), rate, rate * (1 + spread)][:passes], "half_width": hw, "passes": passes,
            "rate_kind": kind, "timed_batches": 60, "window_s": 2.0, "batch_size": 32, "order": "global",
            "epoch_batches": 0, "workers": 0 if name == "num_workers=0" else 2, "busy": None, "error": None}


def _record(key, best, default):
    return {"key": key, "best": best["name"], "grid": [best, default],
            "heuristic_names": {"pytorch_default": default["name"], "cores": best["name"],
                                "cores_minus_1": best["name"]},
            "shares": {"pytorch_default": default["median"] / best["median"], "cores": 1.0, "cores_minus_1": 1.0}}


def test_a_heuristic_fails_only_where_the_one_judge_says_missed():
    clear = _record("storage", _row("threads=8", 1000.0), _row("num_workers=0", 120.0))
    assert heuristic_line([clear], "pytorch_default", 0.90) == \
        "PyTorch's default (0 workers) fails where it gives under 0.90 of the best: storage (0.12)"
    # compute: a 2-pass imprecise best (±6.8%) against 0 workers at 0.87 — the target line's "not tested fairly"
    vague = _record("compute", _row("start", 1000.0, hw=0.068, passes=2, kind="imprecise"),
                    _row("num_workers=0", 870.0))
    line = heuristic_line([clear, vague], "pytorch_default", 0.90)
    assert line.startswith("PyTorch's default (0 workers) fails where it gives under 0.90 of the best: storage "
                           "(0.12); not judged against 0.90: compute (0.87: not tested fairly: start's rate is "
                           "imprecise"), line
    assert "compute (0.87)" not in line
    assert heuristic_line([clear], "cores", 0.90) == "workers = cores is within 0.90 of the best in every scenario " \
                                                     "measured"


def test_a_recorded_heuristic_line_is_printed_again_from_the_record():
    vague = _record("compute", _row("start", 1000.0, hw=0.068, passes=2, kind="imprecise"),
                    _row("num_workers=0", 870.0))
    run = Run({"scenarios": [vague]}, fingerprint={})
    old = "PyTorch's default (0 workers) fails where it gives under 0.90 of the best: compute (0.87)"
    new = recorded_line(old, run)
    assert new.startswith("PyTorch's default (0 workers) is not judged against 0.90 of the best: compute (0.87: "
                          "not tested fairly"), new
    assert recorded_line("another line", run) == "another line"
