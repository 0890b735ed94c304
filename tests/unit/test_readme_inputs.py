"""feedlab.report.readme_inputs: a committed result that cannot be read as written is one line naming it, found
before `python -m feedlab.report.readme` (or `report.compare`) draws or writes anything."""

from __future__ import annotations

import json

import pytest

from feedlab.report.readme_inputs import input_problems

FP = {"cpu_usable": 2, "gpus": [], "git": {"commit": "abcdef123456", "dirty": False}}


def _record(figs, fp):
    rec = figs / "04_x" / "cpu-2c"
    rec.mkdir(parents=True)
    (rec / "results.json").write_text("{}")
    (rec / "fingerprint.json").write_text(json.dumps(fp))
    return rec


@pytest.mark.parametrize("git, field", [({"commit": 12345}, "git.commit"),
                                        ({"commit": "abc", "dirty": True, "tree": 5}, "git.tree"),
                                        ({"commit": "abc", "dirty": "yes"}, "git.dirty")])
def test_a_git_field_of_the_wrong_shape_is_one_line_naming_the_file_and_the_field(tmp_path, git, field):
    """attack56 B53/B54: git.commit = 12345 or git.tree = 5 gave a TypeError traceback from fingerprint_line."""
    rec = _record(tmp_path, FP)
    assert input_problems(tmp_path) == []
    (rec / "fingerprint.json").write_text(json.dumps({**FP, "git": git}))
    got = input_problems(tmp_path)
    assert len(got) == 1 and got[0].startswith(f"{tmp_path / '04_x/cpu-2c/fingerprint.json'}: {field} is "), got


@pytest.mark.parametrize("cells", [5, [1], "abc"])
def test_an_executed_notebook_whose_cells_are_no_list_of_objects_is_one_line_naming_it(tmp_path, cells):
    """attack56 B59: `"cells": 5` reached figure_names as a TypeError traceback, through report.readme."""
    rec = _record(tmp_path, FP)
    executed = rec / "04_x.executed.ipynb"
    executed.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": "# x"}]}))
    assert input_problems(tmp_path) == []
    executed.write_text(json.dumps({"cells": cells}))
    got = input_problems(tmp_path)
    assert len(got) == 1 and got[0].startswith(f"{executed}: cells "), got


@pytest.mark.parametrize("cell, why", [({"cell_type": "code", "source": 5, "outputs": []}, "cell 1's source holds int"),
                                       ({"cell_type": 3, "source": ""}, "cell 1's cell_type is 3"),
                                       ({"cell_type": "code", "source": "", "outputs": 7}, "cell 1's outputs is not"),
                                       ({"cell_type": "code", "source": "", "outputs": [{"text": 5}]},
                                        "cell 1's output text holds int")])
def test_an_executed_notebook_cell_of_the_wrong_shape_is_one_line_naming_it(tmp_path, cell, why):
    """attack57 K4: a cell whose source is 5 passed the cells check and reached nbformat.read in report.readme as a
    34-line traceback; each cell's type, source and outputs are checked before anything is written."""
    rec = _record(tmp_path, FP)
    executed = rec / "04_x.executed.ipynb"
    executed.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": ["# x\n", "y"]}, cell]}))
    got = input_problems(tmp_path)
    assert len(got) == 1 and got[0].startswith(f"{executed}: {why}"), got


@pytest.mark.parametrize("top, why", [({"nbformat": "four"}, "nbformat is 'four'"),
                                      ({"nbformat": 4, "nbformat_minor": "5"}, "nbformat is 4 (minor '5')"),
                                      ({"nbformat": 4, "nbformat_minor": 5, "meta": [1]}, "cell 0's metadata holds")])
def test_an_executed_notebook_of_another_nbformat_or_cell_metadata_is_one_line_naming_it(tmp_path, top, why):
    """attack58 W2 (K13): `nbformat: "four"` reached nbformat.read in report.readme: `Unsupported nbformat version
    four`, naming no file, after the README was already written."""
    rec = _record(tmp_path, FP)
    executed = rec / "04_x.executed.ipynb"
    cell = {"cell_type": "markdown", "source": "# x", "metadata": top.pop("meta", {})}
    executed.write_text(json.dumps({"cells": [cell], **top}))
    got = input_problems(tmp_path)
    assert len(got) == 1 and got[0].startswith(f"{executed}: {why}"), got
