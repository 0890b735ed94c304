"""A notebook's own time limit, for a borrowed machine whose commands are cut at 10 minutes.

An outer ``timeout`` kills the runner and everything it had: the notebook that was running
comes home as nothing, not even where it was. With ``python -m feedlab.run --limit-s N``
the runner stops the notebook itself after N seconds: the kernel and its workers are
stopped, and the partly executed notebook (papermill saves it after every cell) is kept
under ``runs/failed/<name>/`` with ``STOPPED.json`` — the cell it was in, the seconds each
finished cell took — and goes into ``--tar`` beside the finished results. The next run is
sized from that record instead of a guess (docs/GPU_RUN.md). A stopped notebook is never a
result: nothing of it lands in ``figures/``.

* :func:`limit` — raises :class:`NotebookLimit` in the main thread after ``seconds``.
* :func:`stop_new_processes` — stops the processes started since a snapshot (the kernel, its workers).
* :func:`stopped_record` — what a partly executed notebook says about where it stopped.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class NotebookLimit(BaseException):
    """The notebook ran past ``--limit-s``. A BaseException, as KeyboardInterrupt is: the
    kernel client's tasks must not take it for a cell's error and carry on."""

    def __init__(self, seconds: float, snapshot=None):
        super().__init__(f"stopped at its limit of {seconds:g} s")
        self.seconds, self.snapshot = seconds, snapshot


@contextmanager
def limit(seconds: float | None, snapshot=None) -> Iterator[None]:
    """Raise :class:`NotebookLimit` in the main thread once ``seconds`` have passed (None or
    <= 0: no limit). SIGALRM's timer, restored on the way out. ``snapshot()`` is called at
    the alarm, before anything unwinds (the kernel client's clean-up interrupts the running
    cell and marks it finished): its value rides on the exception."""
    if not seconds or seconds <= 0:
        yield
        return

    def _alarm(_signum, _frame):
        try:
            taken = snapshot() if snapshot is not None else None
        except Exception:  # a half-written file: the record says it could not read one
            taken = None
        raise NotebookLimit(seconds, taken)

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, float(seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def child_pids() -> set[int]:
    """This process's descendants now (psutil; empty without it)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency
        return set()
    return {p.pid for p in psutil.Process().children(recursive=True)}


def stop_new_processes(before: set[int], grace_s: float = 3.0) -> int:
    """Stop this process's descendants that were not in ``before``: SIGTERM, then SIGKILL to
    whatever is left after ``grace_s``. Returns how many were stopped."""
    import psutil

    try:
        procs = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    except psutil.Error:
        return 0
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _gone, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace_s)
    return len(procs)


def read_notebook(executed: Path) -> dict | None:
    """The executed notebook as papermill last saved it, or None (not saved yet, half-written)."""
    try:
        return json.loads(Path(executed).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def stopped_record(nb: dict | None, limit_s: float, elapsed_s: float) -> dict:
    """Where a partly executed notebook stopped (``nb``: as papermill saved it when the limit
    came): ``cells`` (code cells), ``finished``, the ``stopped_in`` cell (its index among all
    cells, its first line and how long it had run) and each finished cell's seconds
    (papermill's per-cell metadata)."""
    rec: dict = {"limit_s": limit_s, "elapsed_s": round(elapsed_s, 1), "cells": None, "finished": 0,
                 "stopped_in": None, "cell_seconds": {}}
    if nb is None:
        rec["note"] = "no partly executed notebook had been saved when the limit came"
        return rec
    code = [(i, c) for i, c in enumerate(nb.get("cells", [])) if c.get("cell_type") == "code"]
    rec["cells"] = len(code)
    for i, cell in code:
        meta = cell.get("metadata", {}).get("papermill", {})
        status = meta.get("status")
        if status == "completed" and meta.get("duration") is not None:
            rec["finished"] += 1
            rec["cell_seconds"][str(i)] = round(float(meta["duration"]), 2)
        elif status == "running" or (rec["stopped_in"] is None and status != "completed"):
            src = cell.get("source", "")
            first = (src if isinstance(src, str) else "".join(src)).strip().splitlines()
            rec["stopped_in"] = {"cell": i, "first_line": first[0][:120] if first else ""}
            if status == "running":
                started = meta.get("start_time")
                if started:
                    rec["stopped_in"]["started"] = started
                break
    return rec


def describe(name: str, rec: dict) -> str:
    """One line for the runner's log."""
    where = rec.get("stopped_in") or {}
    cell = f"cell {where['cell']} ({where['first_line']!r})" if where else "before its first cell"
    slow = sorted(rec.get("cell_seconds", {}).items(), key=lambda kv: -kv[1])[:3]
    slow_s = ", ".join(f"cell {k} {v:.0f} s" for k, v in slow)
    return (f"{name} stopped at its limit of {rec['limit_s']:g} s in {cell}; "
            f"{rec['finished']} of {rec['cells']} code cells finished" + (f" (slowest: {slow_s})" if slow else ""))


def quiet_abandoned_tasks() -> int:
    """The kernel client's cell task, cut off by the limit, ends with the interrupted cell's
    error that nobody reads; asyncio would print 'Task exception was never retrieved' and a
    traceback wall when the task is collected (at the latest, when the runner exits). Read
    those errors here, so the one line the runner prints is all that is said. Returns how many."""
    import asyncio
    import gc

    n = 0
    for obj in gc.get_objects():
        # type(), not isinstance(): a lazy proxy's __class__ property may warn or import
        if issubclass(type(obj), asyncio.Future) and obj.done() and not obj.cancelled():
            try:
                if obj.exception() is not None:
                    n += 1
            except Exception:  # pragma: no cover - a future of another loop in a strange state
                pass
    return n


class NotebookStopped(Exception):
    """A notebook ran past ``--limit-s``; ``kept`` is its partly executed folder (or None)."""

    def __init__(self, line: str, kept: Path | None):
        super().__init__(line)
        self.kept = kept


MIN_START_S = 30.0  # a notebook is not started with less left under --deadline-s
STOP_MARGIN_S = 20.0  # what stopping a notebook and rewriting the tar may take


def notebook_limits(notebooks: list[Path], limit_s: list[float] | None) -> dict[Path, float | None]:
    """``--limit-s``: none, one value for every notebook, or one per notebook in order."""
    if not limit_s:
        return {nb: None for nb in notebooks}
    if len(limit_s) == 1:
        return {nb: limit_s[0] for nb in notebooks}
    if len(limit_s) != len(notebooks):
        raise ValueError(f"--limit-s has {len(limit_s)} values for {len(notebooks)} notebooks "
                         f"({', '.join(nb.stem for nb in notebooks)}): give one, or one per notebook")
    return dict(zip(notebooks, limit_s))


def within_deadline(limit_s: float | None, deadline_s: float | None, elapsed_s: float) -> float | None:
    """The limit a notebook runs with when ``elapsed_s`` of ``deadline_s`` are gone: its own,
    cut to what is left less :data:`STOP_MARGIN_S`; 0 when fewer than :data:`MIN_START_S`
    seconds would be left for it (do not start it)."""
    if deadline_s is None:
        return limit_s
    left = deadline_s - elapsed_s - STOP_MARGIN_S
    if left < MIN_START_S:
        return 0
    return left if limit_s is None else min(limit_s, left)


