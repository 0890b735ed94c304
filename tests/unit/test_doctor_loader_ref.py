"""`feedlab-doctor --loader mypkg.data:make_loader`, as the README writes it, imports from the folder it is
run in: the console script does not put that folder on the path as `python -m` does."""

from __future__ import annotations

import sys

import pytest

from feedlab.doctor import __main__ as M


def test_a_loader_in_the_current_folder_imports_without_pythonpath(tmp_path, monkeypatch):
    pkg = tmp_path / "mypkg_readme_example"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "data.py").write_text("def make_loader():\n    return [1, 2, 3]\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    fn = M._load_callable("mypkg_readme_example.data:make_loader", "--loader")
    assert fn() == [1, 2, 3]
    with pytest.raises(SystemExit, match="is its folder on PYTHONPATH"):
        M._load_callable("no_such_pkg_here.data:make_loader", "--loader")
    sys.modules.pop("mypkg_readme_example.data", None)
    sys.modules.pop("mypkg_readme_example", None)


def test_a_missing_function_and_a_file_path_are_told_apart_from_a_module_that_does_not_import(tmp_path, monkeypatch):
    """attack52 B11, B12: `--loader work.s.mk:nonexistent` and `--loader work/s/mk.py:make_ok` both said "cannot
    import it …; is its folder on PYTHONPATH?": the first module imports (the name is wrong), the second is a path."""
    pkg = tmp_path / "mypkg_loader_ref2"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mk.py").write_text("def make_ok():\n    return [1]\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))   # the folder it puts first is taken off again
    with pytest.raises(SystemExit) as e:
        M._load_callable("mypkg_loader_ref2.mk:make_nothing", "--loader")
    assert "mypkg_loader_ref2.mk imports, but has no make_nothing" in str(e.value), e.value
    assert "PYTHONPATH" not in str(e.value)
    with pytest.raises(SystemExit) as e:
        M._load_callable("./mypkg_loader_ref2/mk.py:make_ok", "--loader")
    assert "give the module, not its file: mypkg_loader_ref2.mk:make_ok" in str(e.value), e.value
    assert M._load_callable("mypkg_loader_ref2.mk:make_ok", "--loader")() == [1]
    sys.modules.pop("mypkg_loader_ref2.mk", None)
    sys.modules.pop("mypkg_loader_ref2", None)
