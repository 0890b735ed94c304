"""Measured before advised (#46): a change is advice only once measured on the user's loop against the start
(interleaved trials, judged by the one judge); inside the start's spread or slower it reads "tried: no gain"
with its number; a busy side is not a gain; the answer names the best measured change and the share of the
headspace it recovers, and says "no input-pipeline change will help" only under 5% measured."""

from __future__ import annotations

from feedlab.doctor import advice as AD
from feedlab.doctor import answer as A
from feedlab.doctor.trials import Trial


def _trial(name, rates, busy=None, settings=None):
    return Trial(name, settings or {}, rates=list(rates), median=sorted(rates)[len(rates) // 2], lo=min(rates),
                 hi=max(rates), half_width=0.02, passes=len(rates), timed_batches=60, window_s=1.5,
                 other_load=[0.01] * len(rates), busy=busy, rate_kind="steady", batch_size=8, workers=0,
                 order="global permutation per epoch", epoch_batches=100)


def _fake(results):
    """A stand-in for trials.measure: one Trial per candidate, by name."""
    def measure(cands, **kw):
        return [_trial(c.name, results[c.name], settings=c.settings, busy=results.get(c.name + " busy"))
                for c in cands]
    return measure


ADVICE = [{"setting": "num_workers", "value": 2, "expected_gain": 1.71},
          {"setting": "num_workers", "value": 1, "expected_gain": 1.40},
          {"setting": "pin_memory", "value": True, "expected_gain": 1.10},
          {"setting": "format", "value": "npy", "expected_gain": 3.0}]


def test_only_the_best_predicted_change_per_applicable_setting_is_tried():
    todo = AD.to_try(ADVICE, ("num_workers", "pin_memory"))
    assert [(a["setting"], a["value"]) for a in todo] == [("num_workers", 2), ("pin_memory", True)]


def test_a_change_measured_slower_or_within_spread_is_tried_no_gain_never_advice():
    todo = AD.to_try(ADVICE, ("num_workers", "pin_memory"))
    got = AD.measure_changes(lambda: None, [(a, lambda: None) for a in todo], measure=_fake({
        "the start": [100, 101, 99], "num_workers=2": [82, 80, 85], "pin_memory=True": [101, 100, 102]}))
    rows = {r["setting"]: r for r in got["tried"]}
    assert not rows["num_workers"]["advised"] and rows["num_workers"]["words"].startswith("tried: no gain (×0.82)")
    assert not rows["pin_memory"]["advised"] and rows["pin_memory"]["words"].startswith("tried: no gain")
    rep = AD.apply({"advice": list(ADVICE)}, got)
    assert rep["advice"] == [] and len(rep["tried"]) == 2


def test_a_change_measured_faster_is_advice_with_its_measured_gain():
    todo = AD.to_try(ADVICE, ("num_workers",))
    got = AD.measure_changes(lambda: None, [(a, lambda: None) for a in todo], measure=_fake({
        "the start": [100, 101, 99], "num_workers=2": [131, 130, 133]}))
    rep = AD.apply({"advice": list(ADVICE)}, got)
    assert [(a["setting"], a["value"]) for a in rep["advice"]] == [("num_workers", 2)]
    assert abs(rep["advice"][0]["measured_gain"] - 1.31) < 1e-9 and rep["advice"][0]["measured_words"].startswith("×1.31")


def test_a_side_measured_busy_is_not_a_gain():
    todo = AD.to_try(ADVICE, ("num_workers",))
    got = AD.measure_changes(lambda: None, [(a, lambda: None) for a in todo], measure=_fake({
        "the start": [100, 101, 99], "num_workers=2": [150, 151, 152], "num_workers=2 busy": "other load 40%"}))
    assert got["tried"][0]["judged"] == "not tested fairly" and not got["tried"][0]["advised"]


def _rep(measured, step_s, tried, advice):
    return {"verdict": "data-bound", "bound_stage": "fetch", "binding_term": "workers", "num_workers": 0,
            "batch_size": 8, "device": "cpu", "measured_samples_per_s": measured, "predicted_samples_per_s": measured,
            "end_to_end": [], "stages": [{"stage": "model", "variant": "your step", "s_per_sample": step_s}],
            "advice": advice, "tried": tried, "headroom": None, "notes": []}


def test_the_answer_names_the_best_measured_change_and_the_headspace_it_recovers():
    todo = AD.to_try(ADVICE, ("num_workers", "pin_memory"))
    got = AD.measure_changes(lambda: None, [(a, lambda: None) for a in todo], measure=_fake({
        "the start": [100, 101, 99], "num_workers=2": [131, 130, 133], "pin_memory=True": [99, 100, 98]}))
    rep = AD.apply(_rep(100.0, 1 / 200, None, list(ADVICE)), got)     # the step alone 200/s: at most ×2
    lines = A.answer_lines(rep)
    assert any(x.startswith("what to change (each alone, measured on your loop") for x in lines)
    assert any(x.startswith("  1. num_workers = 2: ×1.31") for x in lines)
    assert any("the best measured change: num_workers = 2, ×1.31" in x and "31% of the headspace (most ×2.00)" in x
               for x in lines)
    assert any("tried on your loop, not advised: pin_memory = True: tried: no gain (×0.99" in x for x in lines)
    assert not any("no input-pipeline change will help" in x for x in lines)
    assert not any("format = npy" in x for x in lines)     # predicted for another loader: never advice here


def test_no_change_will_help_only_where_the_headspace_measured_under_five_percent():
    lines = A.answer_lines(_rep(97.0, 1 / 100, [], list(ADVICE)))
    assert any(x.startswith("no input-pipeline change will help: 3% of the loop") for x in lines)
    lines = A.answer_lines(_rep(80.0, 1 / 100, [], list(ADVICE)))
    assert not any("no input-pipeline change will help" in x for x in lines)
    assert any("20% of the loop is outside the step; no change measured a gain" in x for x in lines)


def test_a_busy_trial_says_so_once():
    row = {"setting": "format", "value": "npy", "expected_gain": 3.0, "advised": False,
           "words": "not tested fairly (the start measured on a busy machine twice)", "judged": "not tested fairly"}
    line = AD.tried_line(row)
    assert line.count("busy machine") == 1 and "×3.00 predicted" in line
