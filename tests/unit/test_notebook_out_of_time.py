"""A budgeted notebook with no time left before its runner's limit for any grid (the H100 loan of 2026-11-26:
01's worker ladder spent the time, its batch-size table ran nothing, and the next cell raised
``KeyError: 'metric'``). It ends, names every setting it left out, and its claims say what was not measured."""

from __future__ import annotations

import json
import time

import nbformat
import pytest

CELL_LIMIT_S = 240


def _execute(nb_name, sr_root, tmp_path, monkeypatch):
    import papermill as pm

    from feedlab import run
    from feedlab.budget import DEADLINE_ENV, FINISH_S
    from feedlab.paths import NOTEBOOKS_DIR

    monkeypatch.setenv(DEADLINE_ENV, str(time.time() + FINISH_S + 1))   # the kernel inherits it: a second for grids
    out_dir = tmp_path / "o"
    out = tmp_path / "out.ipynb"
    pm.execute_notebook(str(NOTEBOOKS_DIR / f"{nb_name}.ipynb"), str(out), kernel_name="python3",
                        progress_bar=False, execution_timeout=CELL_LIMIT_S, cwd=str(tmp_path),
                        parameters={"profile": "smoke", "data_root": str(sr_root), "out_dir": str(out_dir)},
                        **run.kernel_options())
    nb = nbformat.read(out, as_version=4)
    stderr = [o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("name") == "stderr"]
    assert not any("Warning" in t or "Traceback" in t for t in stderr), stderr   # no raw warning for a reader
    shown = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "nan" not in shown and "no CUDA" not in shown   # nothing made up from rows that were never measured
    return nb, out_dir


def test_a_notebook_with_no_time_for_its_grids_ends_and_names_what_it_left_out(sr_root, tmp_path, monkeypatch):
    nb, out_dir = _execute("01_worker_scaling", sr_root, tmp_path, monkeypatch)
    payload = json.loads((out_dir / "results.json").read_text())
    left = {row["setting"] for row in payload["left_out"]}
    assert any("batch_size_table" in s for s in left), left            # the table's settings, named
    text = "\n".join(o.get("text", "") + json.dumps(o.get("data", {})) for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", []))
    assert "no time left before the run's limit" in text
    assert "batch-size table: not measured" in text


@pytest.mark.parametrize("nb_name", ["02_lmdb_vs_png", "09_batch_size_breakdown"])
def test_other_budgeted_notebooks_end_with_no_time_for_their_grids(nb_name, sr_root, tmp_path, monkeypatch):
    nb, out_dir = _execute(nb_name, sr_root, tmp_path, monkeypatch)
    payload = json.loads((out_dir / "results.json").read_text())
    assert payload["left_out"] and all("run's limit" in row["why"] for row in payload["left_out"])
