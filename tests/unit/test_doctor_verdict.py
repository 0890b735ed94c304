"""One verdict a run (#46): the verdict is the loop's measured data-wait share, median over windows (a burst
moves one window, not the verdict); the step is priced by its median with its spread; the stage-by-stage
diagnosis explains, never prints a second, different verdict, and says why where it reads the other way."""

from __future__ import annotations

from feedlab.doctor.answer import answer_lines, render_user
from feedlab.doctor.verdict import one_verdict, step_price, wait_share


def test_a_burst_moves_one_window_not_the_verdict():
    waits, steps = [0.003] * 16, [0.007] * 16        # 30% waiting: data-bound
    steps[5] = 0.5                                    # one slow step (a checkpoint, a log flush)
    loop = wait_share(waits, steps, workers=0)
    assert loop["verdict"] == "data-bound" and abs(loop["share"] - 0.3) < 1e-9
    assert loop["mean_share"] < 0.2 and loop["bursts"] == 1      # the window's mean would have flipped it
    waits, steps = [0.001] * 16, [0.009] * 16        # 10% waiting: compute-bound
    waits[3] = 0.6                                    # one slow batch (a cold file)
    loop = wait_share(waits, steps, workers=0)
    assert loop["verdict"] == "compute-bound" and loop["mean_share"] > 0.2


def test_a_worker_cycle_is_read_whole():
    # two workers: the loop waits once every two batches and not between; a per-batch median would read 0%
    waits = [0.0, 0.02] * 8
    steps = [0.01] * 16
    loop = wait_share(waits, steps, workers=2)
    assert loop["window_batches"] == 2 and loop["verdict"] == "data-bound" and abs(loop["share"] - 0.5) < 1e-9


def test_the_step_is_priced_by_its_median_with_its_spread():
    steps = [0.0018 * 8] * 15 + [0.5]                 # 1.8 ms a sample, one 0.5 s burst
    p = step_price(steps, [8] * 16, cpus=[0.0018 * 8] * 16)
    assert abs(p["s_per_sample"] - 0.0018) < 1e-12 and p["mean_s_per_sample"] > 0.005
    assert p["spread"] == 0.0 and p["batches"] == 16 and abs(p["cpu_s_per_sample"] - 0.0018) < 1e-12
    assert step_price([0.1], [0]) is None             # no batch of known size: no price


def _rep(**kw):
    rep = {"kind": "user", "verdict": "compute-bound", "bound_stage": "model", "binding_term": "main process",
           "batch_size": 8, "num_workers": 0, "device": "cpu", "cores": 2, "effective_cores": 2.0,
           "predicted_samples_per_s": 100.0, "measured_samples_per_s": 70.0, "advice": [], "notes": [],
           "stages": [{"stage": "model", "variant": "your step", "measurable": True, "note": "",
                       "s_per_sample": 0.01}],
           "end_to_end": [{"num_workers": 0, "predicted_samples_per_s": 100.0, "bound_stage": "model",
                           "samples_per_s": 70.0, "error": 0.43}], "headroom": None}
    rep.update(kw)
    return rep


def test_the_stages_never_print_a_second_verdict():
    loop = dict(wait_share([0.003] * 16, [0.007] * 16), source="your loader as built, end to end")
    rep = one_verdict(_rep(), loop)
    assert rep["verdict"] == "data-bound" and rep["predicted_verdict"] == "compute-bound"
    text = render_user(rep)
    assert text.count("VERDICT") == 1 and "VERDICT: data-bound" in text
    assert "compute-bound" not in text.split("VERDICT: data-bound")[1].split("\n")[0]
    assert "reads compute-bound (bounded by model)" in rep["verdict_note"] and "measured verdict stands" in text


def test_where_they_disagree_the_reason_is_named():
    waits, steps = [0.003] * 16, [0.007] * 16
    steps[2] = 0.5
    rep = one_verdict(_rep(), dict(wait_share(waits, steps), source="x"), busy=True)
    assert "burst" in rep["verdict_note"] and "busy window" in rep["verdict_note"]
    agree = one_verdict(_rep(verdict="data-bound"), dict(wait_share([0.003] * 16, [0.007] * 16), source="x"))
    assert agree["verdict_note"] is None


def test_under_script_the_diagnosis_explains_the_verdict_above():
    script = {"verdict": "data-bound", "data_wait_fraction": 0.27}
    rep = one_verdict(_rep(script=script), {"verdict": "data-bound", "share": 0.27, "mean_share": 0.27,
                                            "windows": 5, "bursts": 0, "source": "your script"})
    lines = answer_lines(rep)
    assert not any("VERDICT" in ln for ln in lines)
    assert lines[0].startswith("the stage-by-stage diagnosis of the verdict above (data-bound)")


def test_one_verdict_rule_for_every_kind_of_run():
    """--script, --loader and --data read their verdict by one rule: the loop's data-wait share against
    DATA_BOUND_FRACTION, median over windows (doctor.verdict)."""
    from types import SimpleNamespace

    from feedlab.doctor.diagnosis import loop_share
    from feedlab.doctor.script import summarize  # noqa: F401  (the --script reader imports the same rule)
    from feedlab.doctor.verdict import DATA_BOUND_FRACTION, verdict_of
    from feedlab.pipeline import PipelineSpec

    assert verdict_of(DATA_BOUND_FRACTION) == "data-bound" and verdict_of(DATA_BOUND_FRACTION - 1e-9) == "compute-bound"
    assert verdict_of(None) is None and verdict_of(float("nan")) is None
    spec = PipelineSpec(num_workers=2, device="cpu")
    waits, steps = [0.0, 0.02] * 8, [0.01] * 16
    doc = SimpleNamespace(device="cpu", e2e={spec: {"waits": waits, "steps": steps, "steady": 1.0}})
    assert loop_share(doc, spec) == wait_share(waits, steps, workers=2)   # --data: the same reading as --loader's
    assert loop_share(doc, spec.replace(num_workers=1)) is None           # not measured end to end: no loop


def test_data_reports_the_loop_verdict_and_says_when_it_is_only_predicted():
    from feedlab.doctor.verdict import Loop, verdict_of_report

    rep = _rep(kind="data")
    v = verdict_of_report(rep)
    assert v.verdict == "compute-bound" and not v.measured and v.loop is None
    assert answer_lines(rep)[0].startswith("VERDICT: compute-bound (predicted from the stages; the loop was not measured)")
    one_verdict(rep, dict(wait_share([0.003] * 16, [0.007] * 16), source="feedlab's pipeline as specified, end to end"))
    v = verdict_of_report(rep)
    assert v.measured and v.verdict == "data-bound" and v.predicted == "compute-bound"
    assert isinstance(v.loop, Loop) and abs(v.loop.share - 0.3) < 1e-9 and v.loop.windows == 16
    assert rep["loop"] == v.loop.as_dict()                       # --json carries the same reading, as a dict
    line = answer_lines(rep)[0]
    assert line.startswith("VERDICT: data-bound — your loop waited for data 30% of the time (measured: feedlab's "
                           "pipeline as specified, end to end")


def test_no_input_pipeline_change_will_help_only_under_five_percent_measured():
    """The sentence's one rule (doctor.verdict.no_change_helps): the headspace measured under 5%, never a
    prediction, however large the predicted headroom."""
    from feedlab.doctor.answer import no_change_line
    from feedlab.doctor.verdict import NO_CHANGE_SHARE, no_change_helps

    assert NO_CHANGE_SHARE == 0.05
    assert [no_change_helps(x) for x in (0.0, 0.049, 0.05, 0.3, None, float("nan"))] == [
        True, True, False, False, False, False]
    step = 0.01                                           # the step alone: 100 samples/s
    assert no_change_line(_rep(measured_samples_per_s=96.0))              # 4% outside the step
    assert no_change_line(_rep(measured_samples_per_s=94.0)) is None      # 6%: a change may help
    rep = _rep(measured_samples_per_s=None, headroom=0.1, predicted_samples_per_s=100.0)
    assert no_change_line(rep) is None                    # nothing measured end to end: never said
    rep = _rep(stages=[{"stage": "decode", "s_per_sample": step}], measured_samples_per_s=99.0)
    assert no_change_line(rep) is None                    # no measured step: never said
    text = render_user(_rep(measured_samples_per_s=96.0, advice=[{"setting": "num_workers", "value": 2,
                                                                   "expected_gain": 3.0}]))
    assert "no input-pipeline change will help: 4%" in text and "num_workers = 2" not in text


def test_a_loop_measured_busy_reads_too_busy_to_judge_never_a_verdict():
    """#46: a ``--data`` loop measured while another program took the CPU printed "VERDICT: data-bound" (97%)
    beside a table that flagged the same setting busy. Now the one verdict is "too busy to judge", naming why,
    with the share kept as a reading; no headspace advice or "no change will help" follows from it."""
    loop = dict(wait_share([0.003] * 16, [0.007] * 16), source="feedlab's pipeline as specified, end to end")
    rep = one_verdict(_rep(), loop, busy=True, loop_busy="other programs used 1.38 of 2 usable cores")
    assert rep["verdict"] == "too busy to judge" and rep["loop"]["busy"].startswith("other programs used 1.38")
    assert rep["verdict_note"] is None                       # no "the measured verdict stands" over a busy loop
    text = render_user(rep)
    line = next(ln for ln in text.splitlines() if ln.startswith("VERDICT"))
    assert text.count("VERDICT") == 1 and line.startswith("VERDICT: too busy to judge")
    assert "1.38 of 2 usable cores" in line and "data-bound" not in line and "compute-bound" not in line
    assert "no input-pipeline change will help" not in text and "input-bound" not in text   # no headspace words
    quiet = one_verdict(_rep(), dict(loop))
    assert "input-bound" in render_user(quiet)   # the same report, quiet, reads its headspace (the test can fail)                  # the same loop, quiet: the measured verdict
    assert quiet["verdict"] == "data-bound" and "busy" not in quiet["loop"]
