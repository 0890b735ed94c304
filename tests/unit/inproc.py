"""A command line run in this process: ``main(argv)`` as ``python -m <module>`` runs it.

A subprocess costs about 2 s of CPU before the command does anything (torch's import), and most
command-line tests check what the command decides, not the process: a refusal (a bad flag, a bad
manifest, a missing file) or a small run whose output is read. :func:`run_cli` gives what
``subprocess.run([sys.executable, "-m", module, *argv])`` gives: the exit status (``SystemExit``'s
code; a message is printed to stderr with status 1, as the interpreter does), stdout and stderr. An
exception the command lets out is raised here and fails the test, as a traceback on a subprocess's
stderr would. What needs the process stays a subprocess: hangs and deadlines, signals, FIFOs, a
SIGBUS, ranks, ``--script`` runs, environment read at import (``FEEDLAB_DATA``), another checkout's
code; and every command keeps real ``python -m`` runs in the suite (test_doctor_job, test_doctor_user,
test_hostile_hand, test_nothing_lost, test_data_prep).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import subprocess
import sys
from pathlib import Path
from unittest import mock


def _no_exit_here(code: int, since: int = 0) -> None:
    from feedlab.errors import deadlines_fired

    if deadlines_fired() > since:
        raise AssertionError("a deadline fired in a command run in-process: as a process of its own it may end "
                             "itself (errors.leave_stuck, os._exit); test this case in a subprocess")


def _main_of(module: str):
    mod = importlib.import_module(module)
    if hasattr(mod, "__path__"):  # a package: python -m runs its __main__
        mod = importlib.import_module(f"{module}.__main__")
    return mod.main


def run_cli(module: str, *argv: str, cwd: Path | None = None, user_path: Path | None = None
            ) -> subprocess.CompletedProcess:
    """``python -m module *argv`` in this process, in ``cwd``. ``user_path`` is put first on ``sys.path``
    (as ``PYTHONPATH`` would: the user's modules a ``--loader`` names), and the modules imported from it
    are forgotten afterwards (the next test's module of the same name is its own)."""
    main = _main_of(module)
    out, err = io.StringIO(), io.StringIO()
    before = set(sys.modules)
    saved_path = list(sys.path)   # a command may put its folder on the path (the doctor's --loader does)
    with contextlib.ExitStack() as stack:
        stack.callback(sys.path.__setitem__, slice(None), saved_path)
        # a deadline that fires here would end the test process (errors.leave_stuck's os._exit): say so instead
        stack.enter_context(mock.patch("feedlab.errors.leave_stuck", _no_exit_here))
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        if user_path is not None:
            sys.path.insert(0, str(user_path))
            stack.callback(sys.path.remove, str(user_path))
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        try:
            rc = main(list(argv))
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                rc = exc.code
            else:  # the interpreter prints a message and exits 1
                print(exc.code, file=sys.stderr)
                rc = 1
    if user_path is not None:
        root = Path(user_path).resolve()
        for name in set(sys.modules) - before:
            f = getattr(sys.modules[name], "__file__", None)
            if f and Path(f).resolve().is_relative_to(root):
                del sys.modules[name]
    return subprocess.CompletedProcess([sys.executable, "-m", module, *argv], rc or 0, out.getvalue(),
                                       err.getvalue())
