"""10_doctor through papermill (smoke): a bounding stage, advice, and measured steps."""

import json

import pandas as pd
import pytest

from feedlab.doctor import BOUND_STAGES, VERDICTS
from feedlab.paths import NOTEBOOKS_DIR


@pytest.mark.notebook
def test_10_doctor_smoke(tmp_path):
    import papermill

    papermill.execute_notebook(str(NOTEBOOKS_DIR / "10_doctor.ipynb"), str(tmp_path / "out.ipynb"),
                               parameters={"profile": "smoke", "out_dir": str(tmp_path), "batch_size": 16},
                               kernel_name="python3", progress_bar=False)
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["profile"] == "smoke" and res["batch_size"] == 16
    assert res["bound_stage"] in BOUND_STAGES and res["verdict"] in VERDICTS
    assert res["start"] == {"fmt": "png", "decode": "pil", "collate": "totensor", "num_workers": 0,
                            "batch_size": 16, "pin_memory": False}
    assert len(res["steps"]) >= 1
    for s in res["steps"]:
        assert s["measured"] > 0 and s["predicted"] > 0
    for a in res["advice"]:
        assert a["expected_gain"] > 1
    df = pd.read_csv(tmp_path / "results.csv")
    meas = df[df.metric == "samples_per_s"]
    assert (meas.value > 0).all()
    assert set(meas.step) == set(range(len(res["steps"])))
    assert (meas.groupby("step").size() == 2).all()  # smoke repeats
    assert (tmp_path / "advice_steps.png").is_file()
