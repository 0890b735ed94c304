"""feedlab.errors.leave_stuck ends a command line held by a thread stuck in what timed out, and never a
library caller (a kernel, pytest, a user's script that called a ``main``): it returns there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

STUCK = """
import sys, threading, time
from feedlab import errors, files
sys.argv[0] = {argv0!r}
made = files.mp_folder_owned()   # multiprocessing's folder, removed at exit: by leave_stuck too (attack59 F1)
assert str(made).startswith({tmp!r}), made
threading.Thread(target=time.sleep, args=(30,), daemon=True).start()   # a read stuck in what timed out
since = errors.deadlines_fired()
try:
    with errors.deadline(0.2, "a read"):
        time.sleep(5)
except errors.DeadlineError:
    pass
errors.leave_stuck(2, since=since)
print("the caller goes on", flush=True)
"""


@pytest.mark.parametrize("argv0, ended", [("-c", False), ("my_training.py", False), ("feedlab-bench", True)])
def test_leave_stuck_ends_only_a_command_line(argv0, ended):
    """Either way nothing is left in $TMPDIR: os._exit runs no exit hook, so leave_stuck removes our
    temporaries itself (attack59 F1: the doctor's multiprocessing folder was left). $TMPDIR is short, so
    multiprocessing's sockets fit in it and its folder is made there (a long one moves it to /tmp)."""
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="fl-", dir="/tmp"))
    try:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "lib"), TMPDIR=str(tmp))
        r = subprocess.run([sys.executable, "-c", STUCK.format(argv0=argv0, tmp=str(tmp))], capture_output=True, text=True,
                           env=env, timeout=60)
        if ended:                                  # the positive control: a command line ends at once
            assert r.returncode == 2 and "goes on" not in r.stdout, (r.returncode, r.stdout, r.stderr[-1500:])
        else:
            assert r.returncode == 0 and "the caller goes on" in r.stdout, (r.returncode, r.stderr[-1500:])
        assert list(tmp.iterdir()) == []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_command_line_is_told_from_a_library_caller(monkeypatch):
    from feedlab import errors

    assert not errors.command_line()           # pytest: a library caller
    monkeypatch.setattr(sys, "argv", ["/usr/bin/feedlab-doctor", "--data", "x"])
    assert errors.command_line()


NON_FINITE = r"""
import contextlib, io, sys
from feedlab.doctor.__main__ import main as doctor
from feedlab.tuner.__main__ import main as tuner
from feedlab.run import main as run
from feedlab.bench import main as bench
from feedlab.installer import main as installer
from data_prep.__main__ import main as data_prep
cases = [(doctor, ["--script", "x.py", "--deadline", "nan"], "--deadline"),
         (doctor, ["--script", "x.py", "--deadline", "1e309"], "--deadline"),
         (doctor, ["--data", "d", "--what-if", "--what-if-limit", "inf"], "--what-if-limit"),
         (tuner, ["--script", "x.py", "--deadline", "nan"], "--deadline"),
         (tuner, ["--script", "x.py", "--budget", "inf"], "--budget"),
         (run, ["--only", "04", "--dry-run", "--limit-s", "nan"], "--limit-s"),
         (run, ["--only", "04", "--dry-run", "--deadline-s", "inf"], "--deadline-s"),
         (bench, ["--timeout", "nan"], "--timeout"),
         (installer, ["--timeout", "inf", "--", "x"], "--timeout"),
         (data_prep, ["verify", "d", "--timeout=-inf"], "--timeout")]
for main, argv, flag in cases:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
    lines = [ln for ln in err.getvalue().splitlines() if "error" in ln]
    print(rc, flag, lines[-1] if lines else "")
"""


def test_every_seconds_option_refuses_nan_and_inf_in_one_line(tmp_path):
    """nan and inf once passed ``<= 0`` and left a run with no deadline at all (doctor, tuner, runner)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'lib'}{os.pathsep}{ROOT}", "TMPDIR": str(tmp_path)}
    p = subprocess.Popen([sys.executable, "-c", NON_FINITE], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=90)
    finally:
        p.kill()
    rows = out.splitlines()
    assert len(rows) == 10, out + err[-2000:]
    for row in rows:
        rc, flag, line = row.split(" ", 2)
        assert rc == "2" and flag in line and "a finite number of seconds" in line, row
    assert not list(tmp_path.iterdir()), "the refusals ran nothing and wrote nothing"
    assert subprocess.run(["pgrep", "-s", str(p.pid)], capture_output=True).returncode == 1, "left in its session"


def test_a_semaphore_that_dev_shm_refuses_is_named_in_the_one_line(monkeypatch):
    # attack49 M02: a read-only /dev/shm gave `error: [Errno 30] Read-only file system`, naming nothing
    import errno
    import multiprocessing
    import multiprocessing.synchronize as sync

    from feedlab.errors import one_line

    class Refused:
        def __init__(self, *a, **k):
            raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(sync._multiprocessing, "SemLock", Refused)
    with pytest.raises(OSError) as e:
        multiprocessing.get_context("fork").Lock()
    line = one_line(e.value)
    assert line.startswith("[Errno 30] Read-only file system: multiprocessing could not make a semaphore in /dev/shm")
    assert "\n" not in line
    assert one_line(OSError(errno.EROFS, "Read-only file system")) == "[Errno 30] Read-only file system"


def test_a_huge_finite_number_of_seconds_is_one_line_and_never_overflows_the_timer():
    """attack58 D55: `bench --timeout 1e300` (and 1e10) ended in an OverflowError traceback from setitimer; the
    doctor's `--deadline 1e308` blamed the user's make_loader(). Every seconds option refuses past MAX_SECONDS in
    one line, and a deadline given in code is armed no further than it."""
    import argparse

    from feedlab import errors

    for text in ("1e300", "1e10"):
        for parse in (errors.seconds, errors.seconds_or_zero):
            with pytest.raises(argparse.ArgumentTypeError, match=r"up to 1e\+09"):
                parse(text)
    assert errors.seconds("1e9") == 1e9 and errors.seconds_or_zero("0") == 0.0
    with errors.deadline(1e300, "a deadline far away"):   # armed, clamped: no OverflowError
        pass


LINGER = """
import sys, threading, time
from feedlab import errors
sys.argv[0] = "feedlab-doctor"
threading.Thread(target=time.sleep, args=(30,), name="user-poller").start()   # not a daemon: exit would wait
print("report", flush=True)
errors.leave_threads(0, "python -m feedlab.doctor")
"""


def test_leave_threads_ends_a_command_line_its_users_thread_would_hold_for_ever():
    """attack61 F2: a non-daemon thread started by the user's module kept the doctor alive after its report."""
    import time

    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", LINGER], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "lib")))
    assert r.returncode == 0 and r.stdout.strip() == "report" and time.monotonic() - t0 < 20
    assert "1 thread(s) your code started are still running (user-poller)" in r.stderr, r.stderr
