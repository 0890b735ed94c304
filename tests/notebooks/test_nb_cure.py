"""15_the_cure as nbval ran it (smoke, see nbrun.py): the baseline then the doctor's advice, each trained in steady
state, with the data-wait share, and the target judged only where it could be measured."""

import pytest

from nbrun import recorded


@pytest.mark.notebook
def test_15_the_cure_smoke():
    res, df, out = recorded("15_the_cure")
    steps = res["steps"]
    assert res["profile"] == "smoke" and steps[0]["kind"] == "baseline"
    assert [s["config"]["num_workers"] for s in steps if s["kind"] == "baseline"] == res["worker_counts"]
    for s in steps:
        assert s["samples_per_s"] > 0 and 0 <= s["data_wait_share"] <= 1 and s["rate_kind"] == "steady"
        assert s["timed_batches"] == res["min_timed"]
        # what the one judge reads on both sides of a step (audit54 N8): recorded, never left to "not known"
        assert s["order"] == "global" and s["cache"] == "warm" and s["pixel_error"] == 0.0, s
    for s in steps:
        if s["kind"] == "advice":
            assert s["kept"] == (s["gain"] >= 1.0)
        assert s["config"]["batch_size"] == res["batch_size"]   # the recipe's batch size is held
    assert res["target"]["data_wait"] in ("met", "missed")
    if not res["cuda"]:
        assert res["target"]["gpu_idle_verdict"] == "not measured here"
        assert "gpu_busy" not in set(df.metric)
    assert (out / "cure_steps.png").is_file()
