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


def _package(tmp_path, monkeypatch, name: str, **modules: str):
    """A package ``name`` under ``tmp_path`` holding ``modules`` (module name -> source), importable from the
    current folder (as ``python -m`` finds it), the path restored after the test."""
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for mod, src in modules.items():
        (pkg / f"{mod}.py").write_text(src)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return pkg


def test_a_module_that_raises_while_it_imports_is_one_line_naming_where_for_the_doctor_and_the_tuner(tmp_path,
                                                                                                 monkeypatch):
    """attack60 F1: `tuner --loader work.s.bad_import:make`, whose module raises at import, printed a 27-line
    traceback; the doctor and the tuner now share one loader (doctor.guard.load_callable) that names it."""
    from feedlab.tuner.__main__ import main as tuner

    pkg = _package(tmp_path, monkeypatch, "mypkg_loader_ref3", bad="x = 1\nraise RuntimeError('boom at import')\n")
    for call in (lambda: M._load_callable("mypkg_loader_ref3.bad:make", "--loader"),
                 lambda: tuner(["--loader", "mypkg_loader_ref3.bad:make"])):
        with pytest.raises(SystemExit) as e:
            call()
        line = str(e.value)
        assert "importing mypkg_loader_ref3.bad raised RuntimeError: boom at import at bad.py:2" in line, line
        assert "\n" not in line and "PYTHONPATH" not in line
        sys.modules.pop("mypkg_loader_ref3.bad", None)
    assert str(e.value).startswith("python -m feedlab.tuner: error: --loader")
    (pkg / "ex3.py").write_text("import sys\nsys.exit(3)\n")   # attack61 A2: rc 3 and not a word
    with pytest.raises(SystemExit) as e:
        M._load_callable("mypkg_loader_ref3.ex3:make", "--loader")
    assert e.value.code != 3 and "importing mypkg_loader_ref3.ex3 called sys.exit(3) at ex3.py:2" in str(e.value)
    (pkg / "syn.py").write_text("x = 1\ndef make(:\n    pass\n")   # attack60 B2: a SyntaxError names its line
    with pytest.raises(SystemExit) as e:
        M._load_callable("mypkg_loader_ref3.syn:make", "--loader")
    assert "importing mypkg_loader_ref3.syn raised SyntaxError" in str(e.value) and "at syn.py:2" in str(e.value)


def test_a_module_that_never_finishes_importing_is_stopped_at_the_deadline(tmp_path, monkeypatch):
    """attack60 F2: `doctor/tuner --loader work.s.slow_import:make --deadline 5`, whose module sleeps at import,
    waited for ever; the import is one of the waits the deadline bounds."""
    import time

    from feedlab.doctor.guard import Hung, load_callable

    _package(tmp_path, monkeypatch, "mypkg_loader_ref4", slow="import time\ntime.sleep(1e6)\n")
    t0 = time.monotonic()
    with pytest.raises(Hung) as e:
        load_callable("mypkg_loader_ref4.slow:make", "--loader", limit_s=0.5)
    assert time.monotonic() - t0 < 10
    line = str(e.value)
    assert line.startswith("--loader mypkg_loader_ref4.slow:make: importing mypkg_loader_ref4.slow did not return "
                           "within 0.5 s") and "\n" not in line, line
    assert "mypkg_loader_ref4.slow" not in sys.modules


def test_the_doctors_trace_that_is_a_fifo_is_refused_before_the_diagnosis(tmp_path, capsys):
    """attack61 W4: `doctor --data … --trace work/ff` (a FIFO) ran the whole diagnosis (over 90 s) first."""
    import os

    fifo = tmp_path / "ff"
    os.mkfifo(fifo)
    with pytest.raises(SystemExit) as e:
        M.main(["--data", str(tmp_path / "nope"), "--trace", str(fifo)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"--trace {fifo} is a FIFO, not a regular file" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ff"]


def test_a_make_that_exits_and_a_module_missing_its_dependency_are_one_line(tmp_path, monkeypatch):
    """attack61 F1 (A15): a make() that calls sys.exit(0) ended the doctor silently with rc 0; W1 (A5): a module
    whose own dependency is missing was told "is its folder on PYTHONPATH?"."""
    from feedlab.doctor.guard import UserCodeError, user_call

    with pytest.raises(UserCodeError, match=r"your make_loader\(\) called sys.exit\(0\): it must return"):
        user_call("your make_loader()", lambda: sys.exit(0))
    _package(tmp_path, monkeypatch, "mypkg_loader_ref5", dep="import no_such_dependency_here\n")
    with pytest.raises(SystemExit) as e:
        M._load_callable("mypkg_loader_ref5.dep:make", "--loader")
    assert "needs no_such_dependency_here, which is not installed here" in str(e.value), e.value
    assert str(e.value).startswith("python -m feedlab.doctor: error: --loader")
