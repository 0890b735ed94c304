"""procgroup: every process we start, in one room (issue 47): a group started, marked and stopped whole, a
daemon that left with setsid / a double fork found by its mark, a signal that stops us stops what we started
with one line, and SIGALRM with one owner.

Every test sets its own deadline and checks that nothing is left in its process session, /dev/shm or its
temporary folder (:func:`leaves_nothing`)."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from leftovers import shm_held

from feedlab import procgroup
from feedlab.errors import DeadlineError, deadline

REPO = Path(__file__).resolve().parents[2]
LIB = REPO / "lib" / "feedlab"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "lib"), str(REPO)])}

# a command that leaves a daemon behind: a double fork into a session of its own (setsid), pid written to $1
DAEMON = """#!/bin/sh
setsid sh -c 'sleep 300 & echo $! > "$0"' "$1" &
wait
{tail}
"""


def _script(tmp: Path, tail: str = "sleep 300") -> Path:
    p = tmp / "leaves-a-daemon.sh"
    p.write_text(DAEMON.format(tail=tail))
    p.chmod(0o755)
    return p


def _pid_in(path: Path, wait_s: float = 10.0) -> int:
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        try:
            return int(path.read_text().strip())
        except (OSError, ValueError):
            time.sleep(0.02)
    raise AssertionError(f"{path} was never written")


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _gone(pids, wait_s: float = 10.0) -> list[int]:
    end = time.monotonic() + wait_s
    while [p for p in pids if _running(p)] and time.monotonic() < end:
        time.sleep(0.05)
    return [p for p in pids if _running(p)]


def _session() -> set[int]:
    """The processes of this test's session (and of sessions marked with a group token of ours) but this one."""
    sid = os.getsid(0)
    out = set()
    for n in os.listdir("/proc"):
        if n.isdigit() and int(n) != os.getpid():
            try:
                if os.getsid(int(n)) == sid and _running(int(n)):
                    out.add(int(n))
            except OSError:
                pass
    return out


_shm_mapped = shm_held   # /dev/shm names some process has open or mapped now (tests/unit/leftovers.py)


def _shm() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


@pytest.fixture()
def leaves_nothing(tmp_path, monkeypatch):
    """The test's own temporary folder as TMPDIR; afterwards nothing new in this session, nothing new and
    unowned in /dev/shm, nothing in the temporary folder."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    before_procs, before_shm = _session(), _shm()
    yield tmp
    left = _gone(_session() - before_procs, 10.0)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "a process was left in the test's session"
    new = _shm() - before_shm
    assert not (new - _shm_mapped()), f"left in /dev/shm: {sorted(new - _shm_mapped())}"
    assert not list(tmp.iterdir()), f"left in the temporary folder: {list(tmp.iterdir())}"


def test_a_daemon_that_escaped_with_setsid_is_stopped_with_the_group_at_its_limit(tmp_path, leaves_nothing):
    """The command double-forks a ``sleep`` into a session of its own: at the limit it is stopped too
    (before: only the process group was killed; the daemon ran on with PPID 1)."""
    pidfile = tmp_path / "daemon.pid"
    with deadline(60, "run_group at its limit"):
        with pytest.raises(subprocess.TimeoutExpired):
            procgroup.run_group([str(_script(tmp_path)), str(pidfile)], timeout=1.0)
    daemon = _pid_in(pidfile)
    assert not _gone([daemon], 5.0), "the setsid daemon outlived its group"


def test_a_daemon_left_by_a_command_that_exits_is_stopped_when_it_exits(tmp_path, leaves_nothing):
    pidfile = tmp_path / "daemon.pid"
    with deadline(60, "run_group of a command that leaves a daemon"):
        r = procgroup.run_group([str(_script(tmp_path, tail="echo done")), str(pidfile)], timeout=30)
    assert r.returncode == 0 and r.stdout.strip() == "done"
    assert not _gone([_pid_in(pidfile)], 5.0), "the daemon outlived the command that started it"


def test_members_are_the_group_and_what_carries_its_mark_and_stop_takes_them_all(tmp_path, leaves_nothing):
    pidfile = tmp_path / "daemon.pid"
    with deadline(60, "a started group"):
        group = procgroup.start([str(_script(tmp_path)), str(pidfile)])
        daemon = _pid_in(pidfile)
        assert group.pid in group.members() and daemon in group.members()
        assert procgroup.carrying(group.token) and daemon in procgroup.carrying(group.token)
        assert group.stop(grace_s=2.0) >= 2
    assert group.proc.returncode is not None and not _gone([daemon], 5.0)
    assert group.pid not in procgroup._LIVE


def test_a_term_ignoring_member_is_killed_after_the_grace(tmp_path, leaves_nothing):
    with deadline(60, "a TERM-ignoring group"):
        group = procgroup.start(["sh", "-c", "trap '' TERM; sleep 300 & wait"])
        time.sleep(0.3)
        t0 = time.monotonic()
        group.stop(grace_s=1.0)
        took = time.monotonic() - t0
    assert 0.9 <= took < 8.0 and not group.members()


DRIVER = """
import sys
from feedlab import procgroup
from feedlab.errors import cli_errors
with cli_errors("driver"):
    procgroup.run_group([sys.argv[1], sys.argv[2]], timeout=120)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_stops_what_we_started_with_one_line(tmp_path, sig, leaves_nothing):
    """SIGTERM, SIGINT and SIGHUP to a command line running a group: one line naming the signal, exit 128+n
    (130 for Ctrl-C), the group and its escaped daemon stopped (before: SIGTERM and SIGHUP ended the command
    alone; its child and the daemon ran on)."""
    pidfile = tmp_path / "daemon.pid"
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.Popen([sys.executable, str(driver), str(_script(tmp_path)), str(pidfile)], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        daemon = _pid_in(pidfile, 30.0)
        os.kill(proc.pid, sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == (130 if sig == signal.SIGINT else 128 + sig), err
    assert len(lines) == 1 and lines[0].startswith("driver: "), err
    assert (sig.name in lines[0]) if sig != signal.SIGINT else ("interrupted" in lines[0])
    assert not _gone([daemon], 5.0), "the daemon outlived the signalled command"


class _StopsOnce(KeyboardInterrupt):   # the runner's RunnerStopped: its handler ignores the signal after one
    def __init__(self, signum):
        self.signum = signum


@pytest.mark.parametrize("case", ["signals_raise", "a handler that stops once"])
def test_a_signal_raised_inside_a_weakref_callback_is_raised_again_after_it_and_prints_nothing(capfd, case):
    """A signal's exception raised where Python can only print and drop it (a weakref callback: the CI run of
    2026-11-28 had SIGHUP land in ``WeakValueDictionary``'s, and ``data_prep pack`` went on to exit 0 with a
    traceback) is raised again in the code after the callback, the same exception, even where the handler now
    ignores that signal (the runner's stops once); nothing is printed for it; every handler and hook put back."""
    import contextlib
    import weakref

    class Thing:
        pass

    once = case != "signals_raise"
    exc = _StopsOnce(signal.SIGHUP) if once else procgroup.Signalled(signal.SIGHUP)
    thing, hook, handler = Thing(), sys.unraisablehook, signal.getsignal(signal.SIGHUP)
    try:
        with pytest.raises(type(exc)) as raised:
            with deadline(10, "the signal raised again"), (
                    procgroup.dropped_signals_raised() if once else procgroup.signals_raise()):
                if once:
                    signal.signal(signal.SIGHUP, signal.SIG_IGN)
                ref = weakref.ref(thing, lambda _r: (_ for _ in ()).throw(exc))
                del thing                      # the callback raises; Python drops it to sys.unraisablehook
                assert ref() is None
                end = time.monotonic() + 5
                while time.monotonic() < end:  # raised here
                    time.sleep(0.01)
    finally:
        left = signal.getsignal(signal.SIGHUP)
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGHUP, handler)
    assert raised.value is exc
    assert "Exception ignored" not in capfd.readouterr().err
    assert sys.unraisablehook is hook
    assert left == (signal.SIG_IGN if once else handler)   # the one-go handler put back what it took


def test_a_dropped_signal_is_raised_on_the_way_out_where_the_body_ends_first_and_never_sent_after():
    """The review of 2026-11-28: a body that ended within the 50 ms before the signal was sent again left the late
    signal to whatever handler was put back (SIG_DFL: the process died with no line). Now the dropped exception is
    raised on the way out, inside, and the late signal is never sent."""
    import weakref

    class Thing:
        pass

    hits: list[int] = []
    before = signal.signal(signal.SIGHUP, lambda n, _f: hits.append(n))   # what a late signal would reach
    try:
        thing, exc = Thing(), procgroup.Signalled(signal.SIGHUP)
        with pytest.raises(procgroup.Signalled) as raised:
            with procgroup.dropped_signals_raised():
                ref = weakref.ref(thing, lambda _r: (_ for _ in ()).throw(exc))
                del thing                      # dropped; the body ends at once
                assert ref() is None
        assert raised.value is exc
        time.sleep(0.3)                        # past the 50 ms the re-send waits
        assert hits == [] and signal.getsignal(signal.SIGHUP) is not None
    finally:
        signal.signal(signal.SIGHUP, before)


def test_descendants_and_stop_pids_take_a_tree(tmp_path, leaves_nothing):
    with deadline(30, "a tree of three"):
        proc = subprocess.Popen(["sh", "-c", "sh -c 'sleep 300' & sleep 300 & wait"])
        end = time.monotonic() + 10
        while len(procgroup.descendants()) < 4 and time.monotonic() < end:
            time.sleep(0.05)
        tree = procgroup.descendants()
        assert proc.pid in tree and len(tree) >= 4
        assert procgroup.stop_pids(tree, grace_s=2.0) >= 4
        proc.wait(5)
    assert not _gone(tree, 5.0)


# ---------------------------------------------------------------- one timer


def test_a_deadline_inside_a_notebook_limit_keeps_the_limit():
    """SIGALRM has one owner: a deadline that ends inside ``run_limit.limit`` leaves the limit's timer
    running (before: the deadline's exit cleared the timer and the notebook ran on past its limit)."""
    from feedlab.run_limit import NotebookLimit, limit

    t0 = time.monotonic()
    with deadline(30, "the test"):
        with pytest.raises(NotebookLimit):
            with limit(0.5):
                with deadline(10, "an inner wait"):
                    pass
                time.sleep(5)
    assert time.monotonic() - t0 < 3


def test_a_limit_inside_a_deadline_keeps_the_deadline():
    from feedlab.run_limit import limit

    t0 = time.monotonic()
    with pytest.raises(DeadlineError):
        with deadline(0.5, "the outer wait"):
            with limit(30):
                pass
            time.sleep(5)
    assert time.monotonic() - t0 < 3


def _calls(path: Path, names: set[str]) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in names:
            out.append(f"{path.relative_to(REPO)}:{node.lineno} {node.attr}")
        if isinstance(node, ast.keyword) and node.arg == "start_new_session":
            out.append(f"{path.relative_to(REPO)}:{node.value.lineno} start_new_session")
    return out


def test_one_room_starts_groups_and_one_owns_sigalrm():
    """Groups are started only by procgroup (no ``start_new_session`` or ``killpg`` elsewhere), and SIGALRM's
    timer is set only by errors (run_limit's limit is one of its deadlines)."""
    groups, alarms = [], []
    for p in sorted([*LIB.rglob("*.py"), *(REPO / "data_prep").rglob("*.py")]):
        if p.name != "procgroup.py":
            groups += _calls(p, {"killpg", "setsid"})
        if p.name != "errors.py":
            alarms += _calls(p, {"setitimer", "SIGALRM", "alarm"})
    assert not groups, "process groups started or stopped outside procgroup: " + "; ".join(groups)
    alarms = [a for a in alarms if "start_new_session" not in a]
    assert not alarms, "SIGALRM set outside errors: " + "; ".join(alarms)


def test_signals_deferred_lets_the_step_end_then_the_signal_acts_once():
    """A signal inside ``signals_deferred`` is noted (the step ends whole), acted on once on the way out, by the
    handler that was in place before; two of the same signal inside are one."""
    seen: list[str] = []

    def handler(signum, _frame):
        seen.append(f"handled {signal.Signals(signum).name}")

    old = signal.signal(signal.SIGHUP, handler)
    try:
        with procgroup.signals_deferred():
            os.kill(os.getpid(), signal.SIGHUP)
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.05)
            seen.append("step ended")
        assert seen == ["step ended", "handled SIGHUP"]
    finally:
        signal.signal(signal.SIGHUP, old)


def test_signals_deferred_raises_the_signals_exception_after_the_step(tmp_path):
    """Under ``signals_raise`` (the command lines): the Signalled comes after the step, not inside it."""
    done = []
    with pytest.raises(procgroup.Signalled):
        with procgroup.signals_raise():
            with procgroup.signals_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                done.append("step")
    assert done == ["step"]


_EXITING_PROBE = """
import os, signal, sys, time
sys.argv[0] = "-m"
sys.orig_argv = [sys.executable, "-m", "feedlab.bench"]
import feedlab
from feedlab import procgroup
signal.signal(signal.SIGCHLD, lambda *a: print("torch's SIGCHLD handler ran", file=sys.stderr))
try:
    with procgroup.signals_raise():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
except KeyboardInterrupt as exc:
    code = procgroup.stopped("python -m feedlab.bench", exc)
print("stopped", flush=True)
assert signal.getsignal(signal.SIGCHLD) is signal.SIG_DFL
time.sleep(30)                                      # the interpreter's exit, as long as it takes
"""


def test_after_its_stop_line_a_command_takes_one_more_signal_quietly_and_ends_at_the_next(tmp_path):
    """attack51 F3/F4: after the stop line, a wrapper's forwarded signal (or a second Ctrl-C) became a
    KeyboardInterrupt traceback in the interpreter's shutdown, and torch's SIGCHLD handler raised "DataLoader
    worker … killed by signal" from the exit's finalizers. Now: one line only, the next signal noted, the one
    after ends the process at once with the stop's own code."""
    import textwrap

    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_EXITING_PROBE)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert p.stdout.readline().strip() == "stopped", p.communicate(timeout=30)
        p.send_signal(signal.SIGINT)
        time.sleep(0.3)
        assert p.poll() is None            # the first further signal: taken quietly
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert p.returncode == 143 and lines == ["python -m feedlab.bench: terminated (SIGTERM)"], (p.returncode, err)


def test_carrying_reads_again_a_process_caught_mid_exec(monkeypatch):
    """A process in the middle of an exec shows an empty environment for an instant (CI: the setsid daemon of
    test_runner missed 1 time in 5): carrying reads the empty ones once more, and finds the token then."""
    from feedlab import procgroup

    mark = f"{procgroup.TOKENS}=other:abc".encode()
    reads = {101: [b"", b"HOME=/x\0" + mark], 102: [b"HOME=/y\0" + mark], 103: [b"", b""], 104: [None]}
    monkeypatch.setattr(procgroup, "_pids", lambda: list(reads))
    monkeypatch.setattr(procgroup, "_environ", lambda pid: reads[pid].pop(0))
    monkeypatch.setattr(procgroup, "EXEC_PAUSE_S", 0)
    assert procgroup.carrying("abc") == [101, 102]
    assert reads[101] == [] and reads[103] == []      # each empty one read exactly twice
