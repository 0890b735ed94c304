"""The one lines of a watched run (:mod:`feedlab.doctor.script_watch`): one that did not answer its deadline, a
script that did not end on a forwarded signal, a working process killed from outside (the out-of-memory killer),
a DataLoader worker of the script killed or crashed."""

from __future__ import annotations

import os
import re
import signal
import sys

#: seconds a signal forwarded to the script's process may take to end it before its tree is stopped
SIGNAL_GRACE_S = 10.0


def stuck_line(prog: str, what: str, limit: float, kids: list[int], option: str = "--deadline") -> str:
    """The one line :func:`watch_deadline`'s ``end`` prints for a run that did not answer its deadline
    (``option``: the flag that sets it)."""
    started = f" and the {len(kids)} process(es) it started" if kids else ""
    return (f"{prog}: error: {what}: no progress within {limit:g} s ({option}), and the deadline could not "
            "interrupt it: a call blocked inside C code (an HDF5 or LMDB read on a hung or very slow mount?); "
            f"stopped it{started}; check the mount, or give {option} S if it is only slow")


def ignored_line(sig: int, kids: int) -> str:
    """The one line of a run whose script did not end on the signal forwarded to it (stopped here)."""
    started = f" and the {kids} process(es) it started" if kids else ""
    return (f"{_prog()}: {signal.Signals(sig).name}: your script did not end on it within {SIGNAL_GRACE_S:g} s "
            f"(it ignores or catches the signal); stopped it{started}")


def killed_line(sig: int, kids: int) -> str:
    """The one line of a run whose working process was ended by a signal this process was not sent: from
    outside (the kernel's out-of-memory killer, a ``kill -9``), or a crash of its own (SIGSEGV, SIGBUS from a
    file cut short under a memory map, SIGABRT from C++); its exit status is still 128+n."""
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    left = f"; stopping the {kids} process(es) it left" if kids else ""
    if sig in CRASHES:
        return f"{_prog()}: the process doing the run crashed with {name}{left}"
    if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
        hint = " (the out-of-memory killer, or a kill -9?)" if sig == signal.SIGKILL else ""
        return f"{_prog()}: the process doing the run was killed by {name} from outside{hint}{left}"
    # any other signal whose default action ends a process (SIGUSR1, SIGALRM, SIGPIPE …) is sent, not a crash
    # (attack53 K09: a script that SIGUSR1s itself was "crashed")
    return (f"{_prog()}: the process doing the run was ended by {name} from outside the command (the script "
            f"itself, or a kill by its pid: no signal reached the command){left}")


#: the signals a process gets from its own fault (a bad access, an abort, a trap): "crashed"; any other is sent
CRASHES = frozenset(getattr(signal, n) for n in ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGFPE", "SIGILL", "SIGSYS",
                                                 "SIGTRAP") if hasattr(signal, n))


_WORKER_DIED = re.compile(r"DataLoader worker \(pid(?:\(s\))? ([\d, ]+)\) (?:is killed by signal: ([^.]+)|exited "
                          r"unexpectedly)")


def worker_died_line(exc: BaseException, path, where: str, n: int, who: str | None = None) -> str | None:
    """The line for torch's "DataLoader worker (pid N) is killed by signal: Terminated." (or "… exited
    unexpectedly"): which signal, and that the command did not send it (attack53 K05); None for anything else.
    ``who``: what the line is about (default ``--script PATH``; ``doctor --loader``: "your loader")."""
    head = who or f"--script {path}"
    m = _WORKER_DIED.search(str(exc)) if isinstance(exc, RuntimeError) else None
    if m is None:
        return None
    pids, said = m.group(1).strip(), m.group(2)
    if said is None:
        return (f"{head}: its DataLoader worker(s) (pid(s) {pids}) exited unexpectedly{where} after {n} "
                "batches, without a Python error (a native abort in the worker, os._exit, or a kill from outside: torch "
                "does not say which; run with num_workers=0 to see a crash in your dataset)")
    names = {signal.strsignal(s): s for s in signal.Signals if signal.strsignal(s)}
    sig = names.get(said.strip())
    name = sig.name if sig else f"a signal ({said.strip()})"
    if sig in CRASHES:
        return (f"{head}: its DataLoader worker (pid {pids}) crashed with {name}{where} after {n} batches "
                "(a fault in native code the worker ran: a decoder, an extension?)")
    return (f"{head}: its DataLoader worker (pid {pids}) was killed by {name}{where} after {n} batches, "
            "from outside the command (a kill by its pid, or the out-of-memory killer?): the command sent none")


def _prog() -> str:
    """This command's name as a user typed it: ``python -m feedlab.bench``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = str(getattr(spec, "name", "") or "").removesuffix(".__main__")
    return f"python -m {name}" if name else os.path.basename(sys.argv[0] if sys.argv else "") or "feedlab"


__all__ = ["SIGNAL_GRACE_S", "CRASHES", "worker_died_line", "stuck_line", "ignored_line", "killed_line"]
