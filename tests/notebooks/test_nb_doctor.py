"""10_doctor as nbval ran it (smoke, see nbrun.py): a bounding stage, advice, measured steps, its own error."""

import pytest

from feedlab.doctor import BOUND_STAGES, VERDICTS
from feedlab.doctor.verdict import TOO_BUSY

from nbrun import recorded, smoke


@pytest.mark.notebook
def test_10_doctor_smoke():
    res, df, out = recorded("10_doctor")
    bs = smoke("10_doctor")["batch_size"]
    assert res["profile"] == "smoke" and res["batch_size"] == bs
    # the loop's verdict, or "too busy to judge" where the loop was measured busy (a busy laptop), with why
    assert res["bound_stage"] in BOUND_STAGES and (res["verdict"] in VERDICTS or (
        res["verdict"] == TOO_BUSY and (res.get("loop") or {}).get("busy")))
    start = res["start"]
    assert (start["format"], start["decode"], start["collate"], start["num_workers"], start["batch_size"]) == \
        ("png", "pil", "totensor", 0, bs)
    assert len(res["steps"]) >= 1 and res["steps"][0]["kept"]
    for s in res["steps"]:
        assert s["measured"] > 0 and s["predicted"] > 0
    for s in res["steps"][1:]:
        # a step measured slower than the one before is never kept as a gain
        assert s["kept"] == (s["measured_gain"] >= 1.0)
    assert [r["num_workers"] for r in res["end_to_end"]] == [0, 1]
    assert all("error" in r for r in res["end_to_end"])
    # an error figure, or none where every setting was measured beside another program's load (too busy to judge)
    assert res["max_abs_error"] is None or res["max_abs_error"] >= 0
    for a in res["advice"]:
        assert a["expected_gain"] > 1
    cal = res["calibration"]   # the error of every worker count and step, and the start's repeat
    assert len(cal["rows"]) == len(res["end_to_end"]) + len(res["steps"])
    assert cal["max_abs_error"] == pytest.approx(res["max_abs_error"])
    assert all(r["within_20pct"] == (abs(r["error"]) <= 0.2) for r in cal["rows"])
    assert len(cal["baseline"]["measurements"]) >= 2 and cal["baseline"]["spread"] >= 0
    meas = df[df.metric == "samples_per_s"]
    assert (meas.value > 0).all()
    assert set(meas.step) == set(range(len(res["steps"])))
    assert (meas.groupby("step").size() == 2).all()  # smoke repeats
    assert (out / "advice_steps.png").is_file() and (out / "calibration.png").is_file()
