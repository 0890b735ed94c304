"""Every answer states the most a loader change can give (the step alone, loading removed, over the
pipeline end to end) in the field's words, shows each advised change as a share of it, and advises
no loader change on a job the step bounds."""

from __future__ import annotations

import pytest

from feedlab.doctor import answer as A


def _rep(step_s_per_sample, measured, advice=None, verdict="data-bound"):
    return {"verdict": verdict, "bound_stage": "decode", "binding_term": "decode", "num_workers": 2,
            "measured_samples_per_s": measured, "predicted_samples_per_s": measured, "end_to_end": [],
            "stages": [{"stage": "decode", "s_per_sample": 0.001},
                       {"stage": "model", "s_per_sample": step_s_per_sample}],
            "advice": advice or [{"setting": "num_workers", "value": 8, "expected_gain": 1.5}],
            "data": "DIR", "cuda": False}


def test_the_field_words_follow_the_share_outside_the_step():
    assert [A.field_words(s) for s in (0.0, 0.049, 0.05, 0.19, 0.2, 0.9)] == [
        "not input-bound", "not input-bound", "moderately input-bound", "moderately input-bound",
        "highly input-bound", "highly input-bound"]


def test_a_starving_job_reads_its_headspace_and_each_change_as_a_share_of_it():
    rep = _rep(1 / 1000, 400.0)   # the step alone: 1,000 samples/s; end to end 400
    h = A.headspace(rep)
    assert round(h.most, 2) == 2.5 and h.words == "highly input-bound" and round(h.input_share, 2) == 0.6
    assert not h.no_change and A.headspace(_rep(1 / 1000, 960.0)).no_change   # 4% outside the step
    lines = A.answer_lines(rep)
    assert any(x.startswith("the most any loader change can give here: ×2.50") and "highly input-bound" in x
               for x in lines)
    assert any("num_workers = 8: ×1.50 predicted, 33% of the most possible" in x for x in lines)


def test_a_job_the_step_bounds_gets_no_loader_change_however_much_it_was_predicted():
    rep = _rep(1 / 100, 98.0, advice=[{"setting": "num_workers", "value": 0, "expected_gain": 2.37}],
               verdict="compute-bound")
    lines = A.answer_lines(rep)
    assert any("not input-bound: 2% of the loop is outside the step" in x for x in lines)
    assert not any("num_workers = 0" in x for x in lines)
    assert any(x.startswith("what to change: no single change") for x in lines)


def test_without_a_step_there_is_no_headspace_line():
    rep = _rep(None, 400.0)
    rep["stages"] = [r for r in rep["stages"] if r["stage"] != "model"]
    assert A.headspace(rep) is None and not any("the most any" in x for x in A.answer_lines(rep))


def test_a_change_predicted_inside_the_predictions_own_error_is_not_advised():
    """The committed run advised num_workers=0 at ×1.50 with a 44% prediction error; it measured ×0.99–1.04."""
    rep = _rep(1 / 1000, 400.0, advice=[{"setting": "num_workers", "value": 0, "expected_gain": 1.40},
                                        {"setting": "format", "value": "npy_mmap", "expected_gain": 3.0},
                                        {"setting": "collate", "value": "fast", "expected_gain": 1.2,
                                         "measured_gain": 1.25}])
    rep["calibration"] = {"max_abs_error": 0.44}
    lines = A.answer_lines(rep)
    assert not any("num_workers = 0:" in x for x in lines)
    assert any("format = npy_mmap: ×3.00 predicted" in x for x in lines)
    assert any("collate = fast: ×1.25 measured" in x for x in lines)        # measured: advised whatever the error
    assert any(x.startswith("not advised, predicted within this run's own prediction error (±44%: the largest over "
                            "every rate it predicted and measured") and "): num_workers = 0 (×1.40)" in x for x in lines)


def test_the_own_error_that_holds_advice_back_is_the_worst_case_over_every_rate_measured():
    """audit56 S12: advice was held back at ±34% (the steady rates of the worker counts) while the same run's epoch
    rates erred by 42%: the threshold is the largest error over every rate predicted and measured, and says so."""
    rep = _rep(1 / 1000, 400.0, advice=[{"setting": "num_workers", "value": 0, "expected_gain": 1.40}])
    rep["calibration"] = {"max_abs_error": 0.34}
    rep["end_to_end"] = [{"num_workers": 2, "error": 0.34, "epoch_error": -0.42}]
    assert A.own_error(rep) == pytest.approx(0.42)
    line = next(x for x in A.answer_lines(rep) if x.startswith("not advised"))
    assert "(±42%: the largest over every rate it predicted and measured, the steady and epoch rates of 1 worker count)" \
        in line, line
    rep["end_to_end"][0]["too_busy"] = True   # a busy count's figure is not an error: the calibration's alone
    assert A.own_error(rep) == pytest.approx(0.34)
