"""Whether a signal reached the watching process (the doctor or tuner the user started) or only the working
process that runs the script (:mod:`feedlab.doctor.script_watch`): one byte shared across the fork. A script
that SIGTERMs itself, or a ``kill -INT`` on the pid the user sees running their script, ends the working
process by a signal nobody sent the command: said so (:func:`outside_line`), never "terminated" or
"interrupted" as if the command had been stopped (attack52 D07, K01, K02)."""

from __future__ import annotations

import mmap
import signal
import time

_MARK: dict[str, mmap.mmap] = {}
#: seconds the working process waits for the watcher's handler to mark a signal a group sent both at once
WATCHER_WAIT_S = 0.5


def arm() -> None:
    """Before the fork: the shared byte (an anonymous shared map), cleared."""
    m = _MARK.get("m")
    if m is None:
        m = _MARK["m"] = mmap.mmap(-1, 1)
    m[0] = 0


def mark(sig: int) -> None:
    """In the watching process's handler: a signal reached the command itself."""
    m = _MARK.get("m")
    if m is not None:
        m[0] = int(sig) & 0xFF


def reached_watcher(wait_s: float = WATCHER_WAIT_S) -> bool | None:
    """In the working process: whether the watching process got a signal (waiting up to ``wait_s`` for its
    handler: a group's signal reaches both at once); None where no watcher armed the mark (not forked)."""
    m = _MARK.get("m")
    if m is None:
        return None
    end = time.monotonic() + wait_s
    while not m[0] and time.monotonic() < end:
        time.sleep(0.02)
    return bool(m[0])


def outside_line(path, sig: int, where: str, batches: int) -> str:
    """The one line for a working process ended by a signal that never reached the command."""
    name = signal.Signals(sig).name
    return (f"--script {path}: its process got {name}{where} after {batches} batches from outside the command (the "
            "script itself, or a kill by its pid): no signal reached the command; send signals to the command, "
            "or let the script end by itself")
