"""Every committed notebook follows the house rules (docs/NOTEBOOKS.md)."""

from __future__ import annotations

import re

import nbformat
import pytest

from feedlab.paths import NOTEBOOKS_DIR
from feedlab.profiles import load_profiles
from feedlab.run import list_notebooks

NOTEBOOKS = list_notebooks()


def test_there_are_notebooks():
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOKS_DIR}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_clean_and_parameterized(path):
    nb = nbformat.read(path, as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: {len(tagged)} cells tagged 'parameters'"
    params = tagged[0].source
    code = [c for c in nb.cells if c.cell_type == "code"]
    reads_data = any("P.data_root" in c.source for c in code)
    for name in ("profile", "out_dir") + (("data_root",) if reads_data else ()):
        assert re.search(rf"^{name}\s*(:[^=]*)?=", params, re.M), f"{path.name}: parameter {name} missing"
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), \
        f"{path.name}: stored outputs; commit notebooks clean"
    text = "\n".join(c.source for c in nb.cells)
    assert not re.search(r"['\"](/work/|/tmp/|/root/|/home/)", text), f"{path.name}: machine path"
    assert "record_results" in text, f"{path.name}: no record-results cell"
    assert nb.cells[0].cell_type == "markdown", f"{path.name}: first cell should state the question"
    assert nb.cells[1] is tagged[0], f"{path.name}: the parameters cell should come first after the title"
    assert any(c.cell_type == "markdown" and c.source.lstrip().startswith("## Reading") for c in nb.cells), \
        f"{path.name}: no '## Reading' section"


def test_every_notebook_has_a_profile_section():
    table = load_profiles()
    missing = [p.stem for p in NOTEBOOKS if p.stem not in table]
    assert not missing, f"notebooks/profiles.yaml lacks sections for {missing}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_papermill_sees_every_parameter(path):
    """papermill's parser drops a line it cannot read (e.g. an '=' in a comment):
    such a parameter could not be overridden from the runner."""
    import papermill as pm

    nb = nbformat.read(path, as_version=4)
    src = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", [])).source
    names = {line.split("=")[0].split(":")[0].strip() for line in src.splitlines() if re.match(r"^\w+\s*(:[^=]*)?=", line)}
    seen = set(pm.inspect_notebook(str(path)))
    assert names <= seen, f"{path.name}: papermill cannot read {sorted(names - seen)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_parameter_is_read_by_a_later_cell(path):
    """A parameter no cell reads is silently lost: ``-p min_window_s 2`` on notebook 10 ran at the profile's 1 s
    because the resolve call did not pass it on (P.min_window_s is the profile's, not the parameter)."""
    import ast

    nb = nbformat.read(path, as_version=4)
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    names = [t.target.id for t in ast.parse(params.source).body
             if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)]
    read = {n.id for c in nb.cells if c.cell_type == "code" and c is not params
            for n in ast.walk(ast.parse(c.source)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    assert not [n for n in names if n not in read], \
        f"{path.name}: parameters no later cell reads: {[n for n in names if n not in read]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_pack_hints_use_the_real_flag(path):
    """A hint telling users to run `data_prep pack` must use the flag pack takes (--to)."""
    text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
    for hint in re.findall(r"data_prep pack [^`\"]*", text):
        assert "--formats" not in hint, f"{path.name}: {hint!r}: pack takes --to"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_papermill_shows_a_type_for_every_parameter(path):
    """`papermill --help-notebook` prints 'Unknown type' for a parameter without an annotation."""
    import papermill as pm

    untyped = [name for name, p in pm.inspect_notebook(str(path)).items()
               if p["inferred_type_name"] in ("None", "", None)]
    assert not untyped, f"{path.name}: give {untyped} a type annotation (name: int = None)"
