"""The ``--script`` watchdog: what counts as progress, when a script is overdue, and who ends it.

A script can hold the doctor in three ways: it asks for no batch (a step or its own code that never
returns, no DataLoader, an empty one in a step-based loop), it catches the doctor's stop and asks for
more, or it does not end after the stop. *Progress* is a batch delivered or a step taken (the script
came back for the next batch after one was delivered); an empty pass over a loader is neither, so a
``while step < N: for b in loader:`` over an empty data set is overdue at ``--deadline``, and said so.

Two watchdogs read the same :class:`Progress` through :func:`overdue`:

* :class:`Watchdog`, a thread of the script's own process, for a library caller: it needs the GIL, so
  a script stuck in C code that holds it (a catastrophic regular expression) is out of its reach;
* :func:`watch_child`, for the command line: the script runs in a forked child that tells this
  process what it measured through a pipe (:class:`Wire`, one JSON line an event); this process
  holds no lock the script can take, ends the script's process tree when it is overdue, and
  prints the report from what the child told it. Signals (TERM, HUP, INT) sent to this process go on
  to the child; the child's exit status is this process's.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from feedlab.files import mp_temp_dir, remove
from feedlab.pipeline.shm import FIX as SHM_FIX
from feedlab.pipeline.shm import is_shm_failure, shm_names, sweep_orphans_since
from feedlab.procgroup import become_subreaper, descendants, own
from feedlab.run_limit import stop_processes

from .watch_lines import SIGNAL_GRACE_S, ignored_line, killed_line, stuck_line  # noqa: F401 (stuck_line: re-exported)
from .watch_mark import arm as arm_mark
from .watch_mark import mark as mark_signal

_real_exit = os._exit
_shared: dict[str, str] = {}   # multiprocessing's temporary folder, shared with the child (fork_watched)
_SHM = "/dev/shm"
_shm_before: set[str] = set()   # /dev/shm's names at the fork: what was there is never this run's to remove


def shm_hint(exc: BaseException) -> str:
    """``; use <the fix>`` where ``exc`` is DataLoader workers out of shared memory (:mod:`feedlab.pipeline.shm`)."""
    return f"; the DataLoader's workers ran out of {_SHM}: use {SHM_FIX}" if is_shm_failure(exc) else ""


def _sweep_torch_shm() -> list[str]:
    """``torch_<pid>_*`` files new in /dev/shm since the fork whose process is gone and that no process holds
    (a worker of the child out of space, or stopped mid-batch): removed, so they do not stay until reboot
    (:func:`feedlab.pipeline.shm.sweep_orphans_since`, the one sweeper)."""
    return sweep_orphans_since(_shm_before)


def quiet_exit(code: int) -> None:
    """End this process now, its buffered output written (a forked copy of the script, or
    the doctor after its last line)."""
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # a closed or broken stream: nothing more can be said on it
            pass
    _real_exit(code)


class Progress:
    """What a watchdog reads: the last progress, the wait under way (its own deadline), the doctor's
    stop, a caught stop, and per loader (keyed by a number) its settings and batches."""

    def __init__(self):
        self.t_progress = time.monotonic()       # the last batch delivered or step taken (or the start)
        self.waiting: float | None = None        # while a batch is asked for: that wait's own deadline (0: none)
        self.stop: tuple[str, bool] | None = None   # (why, an error?) once the doctor stopped the script
        self.t_stop: float | None = None
        self.parked = False                      # the script caught the stop and asked for more
        self.fired: str | None = None            # the script ended itself from a thread (os._exit): why
        self.done = False                        # the script phase is over: nothing more to watch
        self.dry = 0                             # passes over a loader that yielded nothing since the last batch
        self.loaders: dict = {}

    def stopping(self, why: str, error: bool = False) -> None:
        if self.stop is None:
            self.stop, self.t_stop = (why, error), time.monotonic()

    def main(self) -> dict | None:
        """The loader that delivered the most batches (the training loader)."""
        recs = [r for r in self.loaders.values() if r["wait"]]
        return max(recs, key=lambda r: len(r["wait"])) if recs else None

    def batches(self) -> int:
        main = self.main()
        return len(main["wait"]) if main else 0

    def empty(self) -> dict | None:
        """A loader the script went over and that delivered no batch at all (an empty data set), or None."""
        recs = [r for r in self.loaders.values() if r["empty"] and not r["wait"]]
        return max(recs, key=lambda r: r["empty"]) if recs else None

    def apply(self, ev: list) -> None:
        """One event a child told (:class:`Wire`), applied as the child applied it."""
        kind, now = ev[0], time.monotonic()
        if kind == "loader":
            self.loaders[ev[1]] = {"settings": ev[2], "wait": [], "step": [], "step_cpu": [], "n": [], "iters": 0,
                                   "empty": 0}
        elif kind == "iter":
            self.loaders[ev[1]]["iters"] += 1
        elif kind == "empty":
            self.loaders[ev[1]]["empty"] += 1
            self.dry += 1
        elif kind == "ask":
            self.waiting = ev[2]
            if ev[3]:
                self.t_progress = now
        elif kind == "got":
            rec = self.loaders[ev[1]]
            rec["wait"].append(ev[2])
            rec["n"].append(ev[3])
            self.t_progress, self.waiting, self.dry = now, None, 0
        elif kind == "asked":
            self.waiting = None
        elif kind == "step":
            self.loaders[ev[1]]["step"].append(ev[2])
            self.loaders[ev[1]]["step_cpu"].append(ev[3])
        elif kind == "stop":
            self.stopping(ev[1], bool(ev[2]))
        elif kind == "parked":
            self.parked = True
        elif kind == "fire":
            self.fired = ev[1]
        elif kind == "done":
            self.done = True


def overdue(p: Progress, limit: float | None, now: float | None = None) -> str | None:
    """Why the script must be ended now (``caught``, ``late``, ``idle``, or what it said as it
    ended itself from a thread), or None."""
    now = time.monotonic() if now is None else now
    if p.fired:
        return p.fired
    if p.parked:
        return "caught"
    if not limit:
        return None
    if p.t_stop is not None:
        return "late" if now - p.t_stop > limit else None
    return "idle" if now - p.t_progress > limit + (p.waiting or 0.0) else None


class Wire:
    """The child's side: each event one JSON line on a pipe, written only by the process that
    started the script (a forked copy of it, a DataLoader worker: never)."""

    def __init__(self, fd: int):
        self.fd, self.owner = fd, os.getpid()

    def __call__(self, *ev) -> None:
        if os.getpid() != self.owner:
            return
        try:
            os.write(self.fd, (json.dumps(ev, default=str) + "\n").encode())
        except OSError:   # the watching process is gone: the child dies with it (PDEATHSIG)
            pass


class Watchdog(threading.Thread):
    """The in-process watchdog (a library caller's): ends the script the doctor cannot stop by an
    exception (:func:`overdue`). ``end(why)`` reports and ends the process; :meth:`close` stands it
    down once the script has ended."""

    def __init__(self, rec: Progress, deadline_s: float | None, end: Callable[[str], None]):
        super().__init__(name="feedlab-doctor-watchdog", daemon=True)
        self.rec, self.limit, self.end = rec, deadline_s, end
        self.done, self.lock = threading.Event(), threading.Lock()

    def run(self) -> None:
        while not self.done.wait(0.1):
            why = overdue(self.rec, self.limit)
            if why is not None:
                self.fire(why)

    def fire(self, why: str) -> None:
        self.lock.acquire()          # once: a second caller waits here for the end of the process
        try:
            self.end(why)
        finally:
            quiet_exit(2)

    def close(self) -> None:
        self.done.set()
        self.lock.acquire()          # held for good by a watchdog that is ending the process


def _die_with_parent() -> None:
    """The child ends when the watching process does (Linux ``PR_SET_PDEATHSIG``; elsewhere nothing)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def fork_watched() -> tuple[int, int]:
    """Fork: returns ``(0, write fd)`` in the child (which runs the script) and ``(child pid, read fd)``
    in this process (which then calls :func:`watch_child`). multiprocessing's temporary folder is made
    here, before the fork, so the child's DataLoader workers share it and the watching process removes
    it when it ends a child that could not clean up (:func:`watch_child`); a registered temporary, so one a
    SIGKILL left is swept by a later run (:func:`feedlab.files.mp_temp_dir`). The child takes over the command's
    signal handling (:func:`feedlab.procgroup.own`): it does the command's work, a signal stops it with its line."""
    _shared["mp_tmp"] = str(mp_temp_dir())
    try:
        _shm_before.update(shm_names())
    except OSError:
        pass
    for f in (sys.stdout, sys.stderr):   # nothing buffered is printed twice
        try:
            f.flush()
        except Exception:  # a closed stream: nothing to print twice
            pass
    r, w = os.pipe()
    arm_mark()   # whether a signal reached this process, or only the child's (doctor.watch_mark)
    pid = os.fork()
    if pid == 0:
        own()   # the command's signal handling is this process's now (a forked worker's ends by the signal)
        os.close(r)
        _die_with_parent()
        return 0, w
    os.close(w)
    become_subreaper()   # a daemon the script leaves (setsid, a cleared environment) is adopted here, then stopped
    return pid, r


def _below(pid: int) -> list[int]:
    try:
        return descendants(pid)
    except OSError:   # /proc cannot be listed: the child alone
        return []


def _end(code: int) -> None:
    """This process's end: multiprocessing's temporary folder (shared with the child, see
    :func:`fork_watched`) removed, then :func:`quiet_exit`."""
    _stop_adopted()
    if _shared.get("mp_tmp"):
        remove(Path(_shared["mp_tmp"]))
    _sweep_torch_shm()
    quiet_exit(code)


def _stop_adopted(settle_s: float = 1.0) -> None:
    """The orphans this process adopted (:func:`fork_watched`) are stopped; a resource tracker that
    is ending on its own (its writers gone) gets ``settle_s`` to clean up first."""
    end = time.monotonic() + settle_s
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:   # adopted orphans that ended: reaped
                pass
        except ChildProcessError:
            pass
        left = _below(os.getpid())
        if not left or time.monotonic() > end:
            break
        time.sleep(0.05)
    if left:
        stop_processes(left, grace_s=2.0)


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def watch_child(pid: int, fd: int, p: Progress, limit: float | None,
                end: Callable[[str, list[int]], int]) -> None:
    """Watch the child ``pid`` that runs the script, reading its events from ``fd`` into ``p``, until
    it exits (then this process exits with its status) or is overdue (:func:`overdue`): then ``end(why,
    its descendants)`` reports (the child and its descendants are stopped here first) and this process
    exits with what ``end`` returns. Never returns."""
    watch(pid, fd, p.apply, lambda now: None if p.done else overdue(p, limit, now), end)


#: seconds past a deadline's own time before the watching process ends a child that did not answer it
BACKSTOP_GRACE_S = 5.0


class DeadlineWire(threading.Thread):
    """The child's side of :func:`watch_deadline`: every ``every_s`` it tells the watching process when
    the open deadline ``d`` (:func:`feedlab.errors.deadline`) is due and what ``where()`` says is under
    way. It needs the GIL: a main thread stuck in C code that holds it silences it, which the watching
    process reads as overdue too. ``done()``: the deadline's part is over."""

    def __init__(self, fd: int, d, where: Callable[[], str], every_s: float = 0.25):
        super().__init__(name="feedlab-deadline-wire", daemon=True)
        self.wire, self.d, self.where, self.every = Wire(fd), d, where, every_s
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            self.wire("due", self.d.due if self.d.armed else None, self.where())

    def done(self) -> None:
        self.stopped.set()
        self.wire("done")


def watch_deadline(pid: int, fd: int, limit: float, end: Callable[[str, list[int]], int],
                   grace_s: float = BACKSTOP_GRACE_S, first: str = "the run") -> None:
    """The watching side of :class:`DeadlineWire`: the child ``pid`` is overdue ``grace_s`` past its
    deadline's due time (the deadline did not fire: a read blocked inside C code, HDF5's or LMDB's on a
    hung mount), or when it has said nothing for ``limit + grace_s`` (C code holding the GIL); then
    ``end(what was under way, its descendants)`` says so (``first`` until the child said). Never returns."""
    seen = {"due": None, "t": time.monotonic(), "where": first, "done": False}

    def apply(ev: list) -> None:
        if ev[0] == "done":
            seen["done"] = True
        else:
            seen.update(due=ev[1], where=ev[2], t=time.monotonic())

    def late(now: float) -> str | None:
        if seen["done"]:
            return None
        talking = now - seen["t"] < 1.0   # the wire speaks, so the main thread lets the GIL go: held up in C code
        if (talking and seen["due"] is not None and now > seen["due"] + grace_s) or now - seen["t"] > limit + grace_s:
            return seen["where"] or "the run"
        return None

    watch(pid, fd, apply, late, end)


def watch(pid: int, fd: int, apply: Callable[[list], None], late: Callable[[float], str | None],
          end: Callable[[str, list[int]], int]) -> None:
    """The watching loop: events from ``fd`` to ``apply``; the child's exit is this process's; signals
    go on to the child; ``late(now)`` saying why ends the child and its tree, then ``end(why, its
    descendants)`` gives this process's exit status. Never returns."""
    pending: list[int] = []
    signalled: dict[int, list] = {}   # signal → [first seen, forwarded]

    def on_signal(sig, _frame):
        mark_signal(sig)
        pending.append(sig)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        if signal.getsignal(sig) is not signal.SIG_IGN:   # under nohup a hang-up stays ignored, as the child's
            signal.signal(sig, on_signal)
    buf = b""
    while True:
        if select.select([fd], [], [], 0.1)[0]:
            chunk = os.read(fd, 1 << 16)
            if not chunk:   # every writer closed: the child is ending
                time.sleep(0.05)
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for ln in lines:
                try:
                    apply(json.loads(ln))
                except (ValueError, KeyError, IndexError):   # a line cut short by a kill: nothing to apply
                    pass
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            if code < 0 and -code not in signalled and -code not in pending:   # not a signal we were sent: said
                print(killed_line(-code, len(_below(os.getpid()))), file=sys.stderr, flush=True)
            _end(_exit_code(status))
        now = time.monotonic()
        for sig in pending:   # a terminal's Ctrl-C reaches the child too: forwarded only if it goes on
            if sig not in signalled:
                signalled[sig] = [now, sig != signal.SIGINT]
                if sig != signal.SIGINT:
                    os.kill(pid, sig)
        pending.clear()
        for sig, st in signalled.items():
            if not st[1] and now - st[0] > 1.0:
                os.kill(pid, sig)
                st[1] = True
            if now - st[0] > SIGNAL_GRACE_S:   # the child did not end on the signal: its tree is stopped
                kids = _below(pid)
                stop_processes([pid, *kids], grace_s=2.0)
                print(ignored_line(sig, len(kids)), file=sys.stderr, flush=True)
                _end(128 + sig)
        why = None if signalled else late(now)
        if why is not None:
            kids = _below(pid)
            os.kill(pid, signal.SIGKILL)   # the script (it may hold the GIL in C code: no handler runs)
            os.waitpid(pid, 0)
            stop_processes(kids, grace_s=2.0)
            _end(end(why, kids))
