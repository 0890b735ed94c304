"""The runner passes each -p key only to the notebooks that take it, says which measure
built-in data and why, and starts kernels that have no transport warning to print."""

from __future__ import annotations

import nbformat
import pytest

from feedlab import run

NOTEBOOKS = {p.stem[:2]: p for p in run.list_notebooks()}


def test_data_root_declined_by_builtin_data_notebooks_with_the_reason():
    lines: list[str] = []
    chosen = [NOTEBOOKS[k] for k in ("02", "03", "04", "07")]
    plan = run.plan_parameters(chosen, {"data_root": "/d", "repeats": 2}, log=lines.append)
    assert plan[NOTEBOOKS["02"]] == {"data_root": "/d", "repeats": 2}
    for k in ("03", "04", "07"):
        assert plan[NOTEBOOKS[k]] == {"repeats": 2}
        line = next(x for x in lines if x.startswith(NOTEBOOKS[k].stem))
        assert "measures built-in data" in line and "no data_root parameter" not in line
    assert len(lines) == 3


def test_every_notebook_takes_data_root_or_says_why_not():
    for nb in NOTEBOOKS.values():
        if "data_root" not in run.notebook_parameters(nb):
            assert run.builtin_data_reason(nb) != "it has no data_root parameter", \
                f"{nb.name}: no data_root and no metadata.feedlab.builtin_data saying why"


def test_key_no_notebook_takes_is_an_error_and_partial_keys_are_named():
    with pytest.raises(SystemExit, match="no selected notebook has a parameter 'batchsizes'"):
        run.plan_parameters([NOTEBOOKS["01"]], {"batchsizes": [8]}, log=lambda _m: None)
    lines: list[str] = []
    run.plan_parameters([NOTEBOOKS["01"], NOTEBOOKS["04"]], {"batch_sizes": [8]}, log=lines.append)
    assert lines == [f"-p batch_sizes: not a parameter of {NOTEBOOKS['04'].stem} (not passed there)"]


def test_kernel_keeps_real_warnings_and_has_no_tcp_warning(tmp_path, capfd):
    import papermill as pm

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import warnings\nwarnings.warn('a real warning')\nprint('ran')")]
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    src, out = tmp_path / "a.ipynb", tmp_path / "b.ipynb"
    nbformat.write(nb, src)
    pm.execute_notebook(str(src), str(out), kernel_name="python3", progress_bar=False, **run.kernel_options())
    outputs = nbformat.read(out, as_version=4).cells[0].outputs
    assert any("a real warning" in o.get("text", "") for o in outputs)
    assert any("ran" in o.get("text", "") for o in outputs)
    assert "without encryption" not in capfd.readouterr().err


def test_executed_records_name_files_relative_to_the_repository(tmp_path):
    import json

    from feedlab import run
    from feedlab.paths import REPO_ROOT
    from feedlab.results import record_results

    nb = tmp_path / "x.executed.ipynb"
    nb.write_text(json.dumps({"metadata": {"papermill": {"input_path": f"{REPO_ROOT}/notebooks/x.ipynb"}},
                              "cells": [{"outputs": [{"text": f"data: {REPO_ROOT}/data/sr64\n"}]}]}))
    run.scrub_paths(nb)
    text = nb.read_text()
    assert str(REPO_ROOT) not in text and '"notebooks/x.ipynb"' in text and "data: data/sr64" in text
    record_results({"root": f"{REPO_ROOT}/data/sr64"}, tmp_path)
    assert json.loads((tmp_path / "results.json").read_text())["root"] == "data/sr64"


def test_main_gives_the_caller_its_environment_back(monkeypatch):
    """run.main set FEEDLAB_PROFILE for its kernels and left it set: a later --profile-less run in the same
    process (the test suite) ran as gpu and was refused on a CPU machine."""
    import os

    monkeypatch.delenv("FEEDLAB_PROFILE", raising=False)
    monkeypatch.delenv("FEEDLAB_CORES", raising=False)
    assert run.main(["--dry-run", "--profile", "gpu", "--cores", "16", "--only", "04"]) == 0
    assert "FEEDLAB_PROFILE" not in os.environ and "FEEDLAB_CORES" not in os.environ
