"""Every process we start, in one room: started in a session (and process group) of its own and marked, tracked
while it runs, and stopped whole (SIGTERM, a grace, SIGKILL) at its limit, at a stall, when interrupted or when a
signal stops us; the one home of this, for every launcher (the peers' venv runs, every install, the doctor's
``--what-if`` child, the ranks' launcher) and of the signal handling of every command line. The installer runs it
before feedlab is installed: the standard library only here.

* :func:`start` — ``subprocess.Popen`` in a session of its own, with ``FEEDLAB_GROUPS`` naming its token in its
  environment (inherited by everything it starts), tracked until :func:`stop`.
* :func:`members` — the processes of a group: its process group, and every process whose environment carries its
  token (a daemon that left with ``setsid`` or a double fork is found there; no cgroup needed).
* :func:`stop` / :func:`stop_all` — SIGTERM (and SIGCONT) to all of them, SIGKILL to what is left after the grace.
* :func:`run_group` — ``subprocess.run`` on top of these, output read from files (no pipe a leftover could hold).
* :func:`descendants`, :func:`stop_pids` — this process's descendants (read from /proc), and a list of pids stopped
  the same way (the runner's kernel and its workers, :mod:`feedlab.run_limit`).
* :func:`signals_raise` / :class:`Signalled` (from :mod:`feedlab.signal_scope`, re-exported) — SIGTERM and
  SIGHUP raise like SIGINT, so everything unwinds, in the process that installed them only; :func:`on_stop`
  registers what is undone then (this process's temporaries, :mod:`feedlab.files`); :func:`stopped`: the line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterable

from feedlab import startup
from feedlab.signal_scope import (  # noqa: F401 (re-exported: the command lines' stop, one home)
    Signalled,
    dropped_signals_raised,
    exit_code,
    own,
    signals_deferred,
    signals_held,
    signals_raise,
)

TOKENS = "FEEDLAB_GROUPS"   # the tokens of the groups a process was started in, ':'-separated
GRACE_S = 3.0               # between SIGTERM and SIGKILL: a peer's resource tracker unlinks its semaphores
_LIVE: dict[int, "Group"] = {}   # the groups started and not yet stopped, by leader pid
_ON_STOP: list[Callable[[], None]] = []


class Stalled(subprocess.TimeoutExpired):
    """The child made no progress (no :func:`beat`) for ``timeout`` seconds."""


class Group:
    """A started command: ``proc`` (its ``Popen``, the leader of its session), ``token`` (in its environment)."""

    def __init__(self, proc: subprocess.Popen, token: str):
        self.proc, self.token, self.pid = proc, token, proc.pid

    def members(self) -> list[int]:
        return members(self)

    def stop(self, grace_s: float = GRACE_S, also: Callable[[], Iterable[int]] | None = None) -> int:
        return stop(self, grace_s, also)


def _prctl():
    """libc's ``prctl`` (Linux), or None. Looked up before a fork: after it, in a parent with threads, the child
    must not dlopen."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError, ImportError):  # pragma: no cover - not Linux
        return None


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """This process adopts the orphans of its descendants (Linux ``PR_SET_CHILD_SUBREAPER``): a daemon a
    child started (``setsid``, a double fork, with whatever environment: a cleared one drops the token)
    reparents here instead of to init, so :func:`descendants` finds it and it is stopped with the rest.
    Returns whether it took (False off Linux). For a command line's own process only: the orphans it
    adopts are its to reap."""
    prctl = _prctl()
    return bool(prctl) and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def marked_env(env: dict | None, token: str) -> dict:
    """``env`` (default: ours) with ``token`` added to :data:`TOKENS`."""
    env = dict(os.environ if env is None else env)
    env[TOKENS] = ":".join(filter(None, [env.get(TOKENS, ""), token]))
    return env


def start(cmd, env: dict | None = None, die_with_parent: int | None = None, **popen_kw) -> Group:
    """``subprocess.Popen(cmd, ...)`` in a session of its own (a Ctrl-C in the terminal reaches only us: we stop
    it), marked with a fresh token, tracked until :func:`stop`. ``die_with_parent``: the signal it gets when we
    die (``PR_SET_PDEATHSIG``: even a SIGKILL of ours then reaches it)."""
    token = os.urandom(8).hex()
    prctl = _prctl() if die_with_parent else None
    pre = (lambda: prctl(1, int(die_with_parent))) if prctl else None
    proc = subprocess.Popen(cmd, env=marked_env(env, token), start_new_session=True, preexec_fn=pre, **popen_kw)
    group = Group(proc, token)
    _LIVE[proc.pid] = group
    return group


def _pids() -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def _stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, ppid, pgid)`` of ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            rest = fh.read().rsplit(b")", 1)[1].split()
        return rest[0].decode(), int(rest[1]), int(rest[2])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def carrying(token: str) -> list[int]:
    """The processes (other than this one) whose environment carries ``token`` in :data:`TOKENS`: a group's
    members wherever they went (a new session, a double fork). Processes we may not read are not ours. A process
    in the middle of an ``exec`` shows an empty environment for an instant: those are read once more after
    :data:`EXEC_PAUSE_S` (a daemon caught between ``setsid`` and its program is not missed)."""
    want, out, empty = token.encode(), [], []
    for pid in _pids():
        if pid == os.getpid():
            continue
        env = _environ(pid)
        if env == b"":
            empty.append(pid)
        elif env is not None and _carries(env, want):
            out.append(pid)
    if empty:
        time.sleep(EXEC_PAUSE_S)
        out += [pid for pid in empty if _carries(_environ(pid) or b"", want)]
    return sorted(out)


EXEC_PAUSE_S = 0.02


def _environ(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _carries(env: bytes, want: bytes) -> bool:
    key = TOKENS.encode() + b"="
    return any(var.startswith(key) and want in var.split(b"=", 1)[1].split(b":") for var in env.split(b"\0"))


def members(group: Group) -> list[int]:
    """The live processes of ``group``: those in its process group, and those that carry its token."""
    pids = [p for p in _pids() if (_stat(p) or ("Z", 0, 0))[2] == group.pid and p != os.getpid()]
    return sorted({p for p in [*pids, *carrying(group.token)] if _alive(p)})


def _signal(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        for s in (sig, signal.SIGCONT):  # a stopped process acts on its SIGTERM once continued
            try:
                os.kill(pid, s)
            except (ProcessLookupError, PermissionError):
                pass


def _reap(group: Group, wait: float) -> None:
    if group.proc.returncode is None:
        try:
            group.proc.wait(timeout=max(0.0, wait))
        except subprocess.TimeoutExpired:
            pass


def stop(group: Group, grace_s: float = GRACE_S, also: Callable[[], Iterable[int]] | None = None) -> int:
    """Stop ``group`` whole: SIGTERM to every member (and to ``also()``, pids found another way), then SIGKILL to
    whatever is left after ``grace_s``; the leader reaped, the group no longer tracked. Returns how many processes
    were running."""
    found = set()
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        pids = [*members(group), *(also() if also else ())]
        if group.proc.returncode is None:
            pids.append(group.pid)
        pids = [p for p in set(pids) if _alive(p)]
        found.update(pids)
        if not pids:
            break
        _signal(pids, sig)
        end = time.monotonic() + wait
        while time.monotonic() < end:
            _reap(group, min(0.1, end - time.monotonic()))
            if not [p for p in pids if _alive(p)]:
                break
            time.sleep(0.02)
    _reap(group, 5.0)
    _LIVE.pop(group.pid, None)
    return len(found)


def stop_all(grace_s: float = GRACE_S) -> int:
    """Stop every group started here and not yet stopped (a signal stops us); then what :func:`on_stop`
    registered. Returns how many processes were running."""
    n = sum(stop(g, grace_s) for g in list(_LIVE.values()))
    for fn in list(_ON_STOP):
        try:
            fn()
        except Exception:  # a clean-up that fails must not hide the line that says why we stop
            pass
    return n


def on_stop(fn: Callable[[], None]) -> None:
    """Call ``fn`` when a signal stops us (:func:`stop_all`); registered once."""
    if fn not in _ON_STOP:
        _ON_STOP.append(fn)


def descendants(pid: int | None = None) -> list[int]:
    """The descendants of ``pid`` (default: this process) now, from /proc (children before grandchildren).
    Raises ``OSError`` where /proc cannot be listed."""
    root = os.getpid() if pid is None else pid
    kids: dict[int, list[int]] = {}
    for p in _pids():
        st = _stat(p)
        if st is not None:
            kids.setdefault(st[1], []).append(p)
    out, todo = [], [root]
    while todo:
        for c in sorted(kids.get(todo.pop(0), [])):
            out.append(c)
            todo.append(c)
    return out


def stop_pids(pids: Iterable[int], grace_s: float = GRACE_S) -> int:
    """Stop ``pids`` that are still running: SIGTERM, then SIGKILL after ``grace_s``. Returns how many ran."""
    alive = [p for p in set(pids) if _alive(p)]
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        left = [p for p in alive if _alive(p)]
        if not left:
            break
        _signal(left, sig)
        end = time.monotonic() + wait
        while time.monotonic() < end and [p for p in left if _alive(p)]:
            _reap_children()
            time.sleep(0.02)
    return len(alive)


def _reap_children() -> None:
    """Reap our own children that ended (a zombie stays 'alive' to nobody, but holds its pid)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def stopped(prog: str, exc: BaseException, what: str = "", out=None) -> int:
    """What a command line does when a signal or Ctrl-C (``exc``) stops it: every group it started is stopped,
    what :func:`on_stop` registered is undone (its temporaries), and one line says so. Returns the exit status
    (128+n; 130 for Ctrl-C)."""
    with signals_held():
        n = stop_all()
    why = str(exc) if isinstance(exc, Signalled) else "interrupted"
    said = what or (f"stopped {n} process{'es' if n != 1 else ''} it had started" if n else "")
    print(f"{prog}: {why}" + (f": {said}" if said else ""), file=out or sys.stderr, flush=True)
    if startup.command_name() is not None:   # a command line's own process (never a test's, a notebook's)
        startup.exiting(exit_code(exc))
    return exit_code(exc)


def run_group(cmd, input: str = "", timeout: float | None = None, env=None, stall_s: float | None = None,
              beat_file: Path | None = None, grace_s: float = 2.0, **_kw) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, input=..., capture_output=True, text=True, timeout=...)`` in a group of its own
    (:func:`start`): at the limit (``TimeoutExpired``), after ``stall_s`` s without a touch of ``beat_file``
    (:class:`Stalled`), when interrupted or on SIGTERM/SIGHUP (:class:`Signalled`), the whole group is stopped,
    the child's children and escaped daemons too; whatever it left running when it exits is killed."""
    with tempfile.TemporaryFile() as fin, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        fin.write(input.encode())
        fin.seek(0)
        group = start(cmd, stdin=fin, stdout=out, stderr=err, env=env)
        t0 = time.time()
        try:
            with signals_raise():
                while True:
                    try:
                        code = group.proc.wait(timeout=0.5)
                        break
                    except subprocess.TimeoutExpired:
                        pass
                    now = time.time()
                    if timeout is not None and now - t0 > timeout:
                        raise subprocess.TimeoutExpired(cmd, timeout)
                    try:
                        last = max(t0, beat_file.stat().st_mtime) if beat_file is not None else now
                    except OSError:
                        last = t0
                    if stall_s and now - last > stall_s:
                        raise Stalled(cmd, stall_s)
        except BaseException:
            stop(group, grace_s)
            raise
        stop(group, 0.0)   # whatever the child left running (a daemon, a grandchild) ends with it
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(cmd, code, out.read().decode("utf-8", "replace"),
                                           err.read().decode("utf-8", "replace"))
