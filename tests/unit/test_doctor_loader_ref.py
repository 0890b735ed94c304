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
