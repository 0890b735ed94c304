"""Notebook 09 run with a budget too small for its grid and rates timed to a precision: it leaves out the
batch size between the ends (never the ends a claim reads), its table and its budget note say so, and the
record carries what was left out and the precision each rate was timed to (issue 31)."""

from __future__ import annotations

import json

import nbformat
import pandas as pd
import pytest

CELL_LIMIT_S = 240   # papermill's limit on each cell (each ends in seconds when it works)


@pytest.fixture()
def executed(sr_root, tmp_path):
    import papermill as pm

    from feedlab import run
    from feedlab.paths import NOTEBOOKS_DIR

    out_dir = tmp_path / "o"
    out = tmp_path / "09.ipynb"
    pm.execute_notebook(str(NOTEBOOKS_DIR / "09_batch_size_breakdown.ipynb"), str(out), kernel_name="python3",
                        progress_bar=False, execution_timeout=CELL_LIMIT_S, cwd=str(tmp_path),
                        parameters={"profile": "smoke", "data_root": str(sr_root), "out_dir": str(out_dir),
                                    "batch_sizes": "[4, 6, 8]", "budget_s": 0.001, "rate_precision": 0.5,
                                    "rate_cap_s": 2.0, "min_timed_batches": 10},
                        **run.kernel_options())
    return nbformat.read(out, as_version=4), out_dir


def test_a_notebook_over_its_budget_names_what_it_left_out_and_keeps_the_ends(executed):
    nb, out_dir = executed
    payload = json.loads((out_dir / "results.json").read_text())
    left = {row["setting"] for row in payload["left_out"]}
    assert left == {"batch_size_breakdown: png/pil totensor b6 w2 model=srcnn_small",
                    "batch_size_breakdown: lmdb/lz4 fast b6 w2 model=srcnn_small"}
    assert payload["batch_sizes"] == [4, 8]                      # the ends ran whatever the budget said
    assert payload["budget"]["budget_s"] == 0.001 and payload["rate_precision"] == 0.5
    text = "\n".join(o.get("text", "") + json.dumps(o.get("data", {})) for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", []))
    assert "left out to stay inside this notebook's budget" in text      # the budget's note
    assert text.count("b6 w2") >= 2                                      # the table of settings left out
    df = pd.read_csv(out_dir / "results.csv")
    rates = df[df.metric == "steady_samples_per_s"]
    assert (rates["rate_target"] == 0.5).all() and rates["rate_half_width"].notna().all()
    assert (rates["rate_low"] <= rates["value"]).all() and (rates["value"] <= rates["rate_high"]).all()
    assert (out_dir / "setting_costs.json").is_file()
