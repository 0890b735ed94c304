"""15_the_cure through papermill (smoke): the baseline then the doctor's advice, each trained in steady
state, with the data-wait share, and the target judged only where it could be measured."""

import pytest

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from nbrun import run_notebook  # noqa: E402


@pytest.mark.notebook
def test_15_the_cure_smoke(tmp_path):
    res, df = run_notebook("15_the_cure", tmp_path)
    steps = res["steps"]
    assert res["profile"] == "smoke" and steps[0]["kind"] == "baseline"
    assert [s["config"]["num_workers"] for s in steps if s["kind"] == "baseline"] == res["worker_counts"]
    for s in steps:
        assert s["samples_per_s"] > 0 and 0 <= s["data_wait_share"] <= 1 and s["rate_kind"] == "steady"
        assert s["timed_batches"] == res["min_timed"]
    for s in steps:
        if s["kind"] == "advice":
            assert s["kept"] == (s["gain"] >= 1.0)
    assert res["target"]["data_wait"] in ("met", "missed")
    if not res["cuda"]:
        assert res["target"]["gpu_busy_verdict"] == "not measured here"
        assert "gpu_busy" not in set(df.metric)
    assert (tmp_path / "out" / "cure_steps.png").is_file()
