"""10's readings and payload from a synthetic report and steps: kept and undone steps, the overall gain."""

import json
from types import SimpleNamespace

from feedlab.experiments import doctor_steps as DS
from feedlab.pipeline import PipelineSpec

START = PipelineSpec(format="png", decode="pil", collate="totensor", batch_size=64, num_workers=0)
REPORT = {"verdict": "data-bound", "bound_stage": "decode", "predicted_samples_per_s": 900.0, "cores": 2,
          "effective_cores": 1.9, "end_to_end": {}, "advice": [], "shm": {}}


def _step(k, label, pred, meas, kept=True):
    return {"step": k, "label": label, "config": {}, "predicted": pred, "measured": meas, "measured_q25": meas * 0.95,
            "measured_q75": meas * 1.05, "bound_stage": "decode", "kept": kept, "predicted_gain": pred / 900.0,
            "measured_gain": meas / 1000.0, "error": pred / meas - 1}


STEPS = [_step(0, "start", 900.0, 1000.0), _step(1, "num_workers=2", 1800.0, 2000.0),
         _step(2, "collate=fast", 4000.0, 1500.0, kept=False)]
CALIB = DS.calibration_summary([], {"note": "measured once"})


def test_the_overall_gain_is_the_last_kept_step():
    assert DS.overall_gain(STEPS) == (2.0, 2.0)


def test_readings_name_the_start_each_step_and_the_overall_gain():
    lines = DS.readings(REPORT, STEPS, START, CALIB)
    assert lines[0].startswith("Start (") and "data-bound, bounded by decode" in lines[0]
    assert "the verdict predicted from the stages (its loop not measured)" in lines[0]
    assert any("step num_workers=2" in x and "; kept;" in x for x in lines)
    assert any("step collate=fast" in x and "measured SLOWER: undone" in x for x in lines)
    assert any("measured ×2.00 over the start, against ×2.00 predicted (100%" in x for x in lines)
    assert lines[-1] == "The advice raised throughput in this run."


def test_the_start_line_pairs_step_0s_prediction_with_its_own_measurement():
    """The start's predicted and measured rates are one pass's (step 0's), not the doctor's end-to-end prediction
    beside step 0's measurement (two different measurements, audit53 S1)."""
    lines = DS.readings({**REPORT, "predicted_samples_per_s": 1234.0}, STEPS, START, CALIB)
    assert "predicted 900 samples/s, measured 1,000 (step 0's pass)" in lines[0], lines[0]
    assert "1,234" not in lines[0]


def test_no_gain_is_said_plainly_and_a_shm_warning_is_shown():
    flat = [_step(0, "start", 900.0, 1000.0), _step(1, "num_workers=2", 1800.0, 1010.0)]
    lines = DS.readings({**REPORT, "shm": {"warning": "/dev/shm is 64 MiB"}}, flat, START, CALIB)
    assert "did NOT measurably raise" in lines[-2] and lines[-1] == "Shared memory: /dev/shm is 64 MiB"


def test_payload_holds_what_the_claims_and_gpu_readings_read():
    P = SimpleNamespace(profile="quick", batch_size=64, model="none")
    doc = SimpleNamespace(device="cpu", cuda=False)
    p = DS.payload(P, doc, REPORT, START, STEPS, CALIB)
    assert p["measured_gain_total"] == 2.0 and p["predicted_gain_total"] == 2.0
    assert [s["label"] for s in p["steps"]] == ["start", "num_workers=2", "collate=fast"]
    assert set(p["steps"][0]) == set(DS.STEP_KEYS)
    json.dumps(p)


def _frame(batch_of_last=64, repeats=3):
    import pandas as pd

    rows = []
    for s, bs, w in ((STEPS[0], 64, 0), (STEPS[1], batch_of_last, 2)):
        for r in range(repeats):
            rows.append(dict(experiment="doctor_steps", variant=s["label"], metric="samples_per_s",
                             value=s["measured"] * (1 + r / 100), repeat=r, rate_kind="steady", timed_batches=200,
                             batch_size=bs, num_workers=w, model="none", device="cpu", loader="dataloader",
                             order="global", pixel_error=0.0, cache="warm"))
    return pd.DataFrame(rows)


def test_the_overall_gain_goes_through_the_one_judge_where_the_steps_rows_are_given():
    """10's advice is credited only like for like: the worker count may change, a batch size may not (10 on the
    H100 kept batch_size=256); a gain judged like for like keeps its words."""
    steps = [dict(s, config={"batch_size": 64, "num_workers": 0 if s["step"] == 0 else 2}) for s in STEPS]
    lines = DS.readings(REPORT, steps, START, CALIB, frame=_frame())
    assert any(x.startswith("Overall (kept steps): measured ×2.00") and "(100% of the promised gain delivered; met)"
               in x for x in lines), lines
    assert lines[-1] == "The advice raised throughput in this run."
    lines = DS.readings(REPORT, steps, START, CALIB, frame=_frame(batch_of_last=256))
    assert any("not like for like (batch size: 256 vs 64" in x and "measured, not credited" in x for x in lines)
    assert lines[-1].startswith("The advice's gain is not credited in this run: not like for like (batch size")


def test_the_start_reads_the_reports_one_verdict_measured_on_its_loop():
    """10's start line takes the doctor's one verdict (the loop's measured share), never the stages' reading."""
    rep = {**REPORT, "verdict": "compute-bound", "predicted_verdict": "data-bound",
           "loop": {"share": 0.12, "mean_share": 0.12, "windows": 6, "window_batches": 1, "bursts": 0,
                    "verdict": "compute-bound", "source": "feedlab's pipeline as specified, end to end"}}
    line = DS.readings(rep, STEPS, START, CALIB)[0]
    assert "compute-bound, bounded by decode; the verdict from its loop's measured data wait (12%)" in line
    assert "data-bound" not in line


def test_a_step_measured_once_is_undone_but_never_said_slower_and_shows_no_one_value_iqr():
    """audit54 N3: 10 h100's step 4 printed "IQR 10,338–10,338 … measured SLOWER: undone" from one measurement; the
    one judge cannot read a rate measured once, so the step is undone without a verdict, and no spread is shown."""
    import pandas as pd

    once = dict(STEPS[2], measured_q25=1500.0, measured_q75=1500.0)
    steps = [STEPS[0], STEPS[1], once]
    rows = [dict(experiment="doctor_steps", variant="collate=fast", metric="samples_per_s", value=1500.0, repeat=0,
                 rate_kind="steady", timed_batches=200, batch_size=64, num_workers=2, loader="dataloader")]
    lines = DS.readings(REPORT, steps, START, CALIB, frame=pd.concat([_frame(), pd.DataFrame(rows)]))
    line = next(x for x in lines if "step collate=fast" in x)
    assert "(1,500 samples/s, one measurement, no spread)" in line and "IQR" not in line, line
    assert "undone (measured slower, not judged: collate=fast measured once" in line and "SLOWER" not in line
    # with a spread of repeats that the judge reads, the words stand
    assert any("step collate=fast" in x and "measured SLOWER: undone" in x for x in DS.readings(REPORT, STEPS, START,
                                                                                                 CALIB))


def test_a_calibration_row_is_marked_by_the_one_judge_where_its_marks_are_given():
    """audit54 N2: "ok / MISSED by" per row only where the judge reads the row's setting; else "not judged"."""
    rows = DS.calibration_rows({"end_to_end": [{"num_workers": 2, "samples_per_s": 1000.0,
                                                "predicted_samples_per_s": 1300.0}]}, [])
    summary = DS.calibration_summary(rows, {"note": "measured once"})
    assert "error +30% (MISSED by 10 points)" in DS.calibration_lines(summary)[0]
    line = DS.calibration_lines(summary, {"2 workers": "not judged: 2 workers' timed window was not recorded"})[0]
    assert line.endswith("error +30% (not judged: 2 workers' timed window was not recorded)"), line
    head = DS.calibration_lines(summary, {"2 workers": "not judged: 2 workers' timed window was not recorded"})[1]
    assert "NOT met" not in head and "not judged, 1 of 1 settings not read" in head, head
    assert "NOT met on 1 of 1" in DS.calibration_lines(summary)[1]
