"""An executed record shows the figures its run saved: the kernel draws inline whatever MPLBACKEND the
caller exported (the GPU runbook exported Agg, and five h100 records held their figures only as files),
and a record made that way gets the files it wrote shown in the cells that saved them."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest


@pytest.fixture
def runner(tmp_path, monkeypatch):
    from feedlab import paths
    from feedlab import run as R

    monkeypatch.setattr(paths, "SCRATCH_DIR", tmp_path / "runs")
    monkeypatch.setenv("FEEDLAB_MACHINE", "box-1c")
    return R


def test_the_kernel_draws_inline_though_the_caller_exported_agg(tmp_path, monkeypatch, runner):
    import papermill

    monkeypatch.setenv("MPLBACKEND", "Agg")
    seen = {}

    def execute(nb, executed, parameters, **kw):
        seen["backend"] = os.environ.get("MPLBACKEND")
        Path(executed).write_text('{"cells": []}')

    monkeypatch.setattr(papermill, "execute_notebook", execute)
    monkeypatch.setattr("feedlab.findings.add_findings", lambda executed: None)
    nb = next(p for p in runner.list_notebooks() if p.stem == "04_print_overhead")
    runner.run_notebook(nb, "quick", {}, tmp_path / "figs")
    assert seen["backend"] == "module://matplotlib_inline.backend_inline"
    assert os.environ["MPLBACKEND"] == "Agg"  # the caller's value again afterwards


def _cell(source, outputs=()):
    return {"cell_type": "code", "source": source, "outputs": list(outputs), "metadata": {},
            "execution_count": 1}


def test_figure_files_a_cell_saved_but_did_not_display_are_shown_in_that_cell(tmp_path):
    from feedlab.run_record import show_figure_files

    shown = {"output_type": "display_data", "data": {"image/png": "AAAA"}, "metadata": {}}
    cells = [_cell('save_figure(fig, P.out_dir, "speed")\n'), _cell("print(1)"),
             _cell('save_figure(fig, P.out_dir, "kept")', [shown]), _cell('save_figure(fig, d, "absent")')]
    nb = tmp_path / "x.executed.ipynb"
    nb.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    (tmp_path / "speed.png").write_bytes(b"\x89PNG speed")
    (tmp_path / "kept.png").write_bytes(b"\x89PNG kept")
    assert show_figure_files(nb) == ["speed"]
    out = json.loads(nb.read_text())["cells"]
    assert out[0]["outputs"][0]["metadata"]["feedlab"]["shown_from_file"] == "speed.png"
    assert out[0]["outputs"][0]["data"]["image/png"] == "iVBORyBzcGVlZA=="  # the file's own bytes
    assert out[1]["outputs"] == [] and out[2]["outputs"] == [shown] and out[3]["outputs"] == []
    assert show_figure_files(nb) == []  # once only


@pytest.mark.parametrize("cells", [5, [1], "abc"])
def test_show_figure_files_names_a_notebook_whose_cells_are_no_list_of_objects(tmp_path, cells):
    """attack56 B59's shape: `"cells": 5` is one line naming the file, never a TypeError; the file is left as it is."""
    from feedlab.run_record import show_figure_files

    nb = tmp_path / "x.executed.ipynb"
    nb.write_text(json.dumps({"cells": cells}))
    before = nb.read_bytes()
    with pytest.raises(ValueError, match=rf"^{re.escape(str(nb))}: cells "):
        show_figure_files(nb)
    assert nb.read_bytes() == before
