"""feedlab.signal_scope: the handlers a command's signal scope installs act in the process that installed them only
(a DataLoader worker forked from it ends by the signal without a word), a fork that goes on working takes them
over (``own``), and a command line's stop puts torch's SIGCHLD handler back to the default before it raises
(attack51 F3/N03, F4/N09)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from feedlab import signal_scope

REPO = Path(__file__).resolve().parents[2]


def _fork_and_signal(sig: int, take_over: bool) -> int:
    """Fork inside the scope; the child (taking the handlers over or not) sends ``sig`` to itself: exit 7 where
    that raised (a traceback in a real worker), 0 where nothing happened; its exit status (negative: the signal)."""
    pid = os.fork()
    if pid == 0:   # the child: never returns into pytest
        try:
            if take_over:
                signal_scope.own()
            os.kill(os.getpid(), sig)
            time.sleep(0.5)
            os._exit(0)
        except BaseException:  # noqa: BLE001 (what the handler raised in the child)
            os._exit(7)
        finally:
            os._exit(9)
    end = time.monotonic() + 10
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("the forked child did not end within 10 s")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_forked_worker_ends_by_the_signal_without_raising_and_a_fork_that_owns_raises(sig):
    """A DataLoader worker forked while the scope is in place (as the group signal lands, or ending its epoch) ran
    the inherited handler: Signalled / KeyboardInterrupt in the worker, a multiprocessing traceback after the
    command's stop line. Now it ends by the signal itself; a fork that took the handling over still raises."""
    with signal_scope.signals_raise():
        assert _fork_and_signal(sig, take_over=False) == -sig
        assert _fork_and_signal(sig, take_over=True) == 7
        try:   # and in this process (the owner) the signal still stops us by an exception
            signal.raise_signal(sig)
            raise AssertionError(f"{signal.Signals(sig).name} did not raise in the owner")
        except KeyboardInterrupt as exc:
            assert signal_scope.exit_code(exc) == 128 + sig


def test_a_command_lines_stop_is_not_raised_over_by_a_sigchld_handler_its_workers_death_runs(tmp_path):
    """A group SIGTERM to a command line ends its (forked) workers too; torch's SIGCHLD handler then raised
    "DataLoader worker (pid N) is killed by signal: Terminated." while the stop unwound (a traceback in place of
    the stop line, or 'Exception ignored in __del__'): the probe, shaped as ``python -m feedlab.doctor``, has such
    a handler and a forked worker, and the whole group is sent SIGTERM."""
    code = textwrap.dedent("""
        import os, signal, sys, time
        sys.argv[0] = "-m"
        sys.orig_argv = [sys.executable, "-m", "feedlab.doctor"]
        import feedlab
        from feedlab import procgroup

        def torch_like(signum, frame):   # torch's _set_SIGCHLD_handler: a worker that died is an error
            raise RuntimeError("DataLoader worker is killed by signal")

        signal.signal(signal.SIGCHLD, torch_like)
        try:
            with procgroup.signals_raise():
                pid = os.fork()
                if pid == 0:
                    try:
                        time.sleep(20)
                    finally:
                        os._exit(3)   # the worker raised instead of ending by the signal
                time.sleep(0.2)
                os.killpg(0, signal.SIGTERM)
                time.sleep(20)
        except procgroup.Signalled as exc:
            time.sleep(0.3)   # the worker's death reaches us while the stop unwinds
            _, status = os.waitpid(pid, 0)
            print("stopped", exc.code, os.waitstatus_to_exitcode(status))
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60,
                       start_new_session=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert p.stdout.strip() == "stopped 143 -15" and "Traceback" not in p.stderr, (p.stdout, p.stderr[-1500:])
    assert list(tmp_path.iterdir()) == []


def _teardown_probe(tmp_path, signals: int, last: bool = False):
    """A command line shaped as ``python -m feedlab.bench`` whose work (in cli_errors) ends with exit status 3 and
    whose teardown is slow: an exit hook registered at import, as torch's, or (``last``) one that runs after every
    hook of ours, as the interpreter's own finalization (torch's C++ teardown) does. ``signals`` SIGTERMs are sent
    in that slow part. Returns its exit status and stderr."""
    code = textwrap.dedent("""
        import atexit, sys, time

        def slow_exit():   # torch's and multiprocessing's exit hooks; or (LAST) the C++ teardown after them
            print("teardown", flush=True)
            time.sleep(0.6)

        if LAST:
            atexit.register(slow_exit)
        sys.argv[0] = "-m"
        sys.orig_argv = [sys.executable, "-m", "feedlab.bench"]
        import feedlab
        from feedlab.errors import cli_errors

        if not LAST:
            atexit.register(slow_exit)
        with cli_errors("python -m feedlab.bench"):
            print("work done", flush=True)
        sys.exit(3)
    """).replace("LAST", str(last))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=REPO, start_new_session=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        assert p.stdout.readline() == "work done\n"
        assert p.stdout.readline() == "teardown\n"
        for _ in range(signals):
            p.send_signal(signal.SIGTERM)
            time.sleep(0.1)
        _out, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    return p.returncode, err


def test_a_signal_in_a_command_lines_teardown_keeps_the_works_exit_status_with_one_line(tmp_path):
    """attack56 W3 (S52, S53): a SIGTERM or SIGHUP after the work was done (data_prep verify said `done`, the
    doctor printed the tuner's answer) ended the interpreter's teardown by the default action: rc 143/129 and no
    word, the work's own exit status lost. Now one line and the work's status in the exit hooks (a second signal
    ends it at once), and the work's status in the interpreter's finalization after them."""
    from feedlab.errors import deadline

    with deadline(25, "a command line's teardown under SIGTERM"):
        one = _teardown_probe(tmp_path, 1)
        two = _teardown_probe(tmp_path, 2)
        final = _teardown_probe(tmp_path, 1, last=True)
    assert final == (3, ""), final   # past the last hook of ours Python can say nothing: ignored, the status kept
    line = "python -m feedlab.bench: SIGTERM came after the work was done: its exit status is kept"
    assert one[0] == 3 and one[1].strip() == line, one
    assert two[0] == 143 and two[1].strip() == line, two
    assert list(tmp_path.iterdir()) == []   # the probe is its own session: nothing of it left but its status
