"""Run a notebook with papermill under the smoke profile and read back what it recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from feedlab.paths import NOTEBOOKS_DIR


def run_notebook(name: str, tmp_path: Path, **params) -> tuple[dict, pd.DataFrame]:
    """Execute ``notebooks/<name>.ipynb`` into ``tmp_path`` (its out_dir is ``tmp_path/out``);
    return ``results.json`` and ``results.csv``, having checked the fingerprint was written."""
    import papermill as pm

    from feedlab.run import kernel_options

    out = tmp_path / "out"
    pm.execute_notebook(str(NOTEBOOKS_DIR / f"{name}.ipynb"), str(tmp_path / "executed.ipynb"),
                        parameters={"profile": "smoke", "out_dir": str(out), **params},
                        kernel_name="python3", progress_bar=False,
                        **kernel_options())
    payload = json.loads((out / "results.json").read_text())
    df = pd.read_csv(out / "results.csv")
    assert (out / "fingerprint.json").is_file()
    return payload, df
