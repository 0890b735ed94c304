"""A notebook's own time limit, for a borrowed machine whose commands are cut at 10 minutes.

An outer ``timeout`` kills the runner and everything it had: the notebook that was running
comes home as nothing, not even where it was. With ``python -m feedlab.run --limit-s N``
the runner stops the notebook itself after N seconds: the kernel and its workers are
stopped, and the partly executed notebook (papermill saves it after every cell) is kept
under ``runs/failed/<name>/`` with ``STOPPED.json`` — the cell it was in, the seconds each
finished cell took — and goes into ``--tar`` beside the finished results (as
``runs/failed/<machine>/<name>/``). The next run is sized from that record instead of a
guess (docs/GPU_RUN.md). A stopped notebook is never a result: nothing of it lands in
``figures/`` (a limit that comes after its last cell has finished keeps the run whole).

* :func:`limit` — raises :class:`NotebookLimit` in the main thread after ``seconds``.
* :func:`stop_processes` — stops the processes taken at the alarm (the kernel, its workers, what they started).
* :func:`stopped_record` — what a partly executed notebook says about where it stopped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from feedlab import procgroup
from feedlab.errors import deadline
from feedlab.files import load_json
from feedlab.results import atomic_write


class NotebookLimit(KeyboardInterrupt):
    """The notebook ran past ``--limit-s``. A KeyboardInterrupt, so that it leaves asyncio's
    tasks at once (asyncio keeps any other exception on the task it hit, and the kernel
    client's background tasks are never awaited: the limit would be lost or wait for the cell
    to end). ``snapshot``: the partly executed notebook as saved at the alarm; ``procs``: the
    runner's descendants then (the kernel, its workers, anything they started)."""

    def __init__(self, seconds: float, snapshot=None, procs=()):
        super().__init__(f"stopped at its limit of {seconds:g} s")
        self.seconds, self.snapshot, self.procs = seconds, snapshot, list(procs)


def descendants() -> list:
    """This process's descendants now, as psutil processes (the kernel client's clean-up shuts
    the kernel down before the runner can look; something started in its own session is then
    no longer below the runner: take them at the alarm). The walk is :func:`feedlab.procgroup.descendants`."""
    try:
        import psutil

        out = []
        for pid in procgroup.descendants():
            try:
                out.append(psutil.Process(pid))
            except psutil.Error:  # ended since it was listed
                pass
        return out
    except Exception:  # pragma: no cover - psutil is a dependency; /proc unreadable
        return []


@contextmanager
def limit(seconds: float | None, snapshot=None, stop=None) -> Iterator[None]:
    """Raise :class:`NotebookLimit` in the main thread once ``seconds`` have passed (None or
    <= 0: no limit). One of :func:`feedlab.errors.deadline`'s timers (SIGALRM has that one
    owner: a deadline around this one keeps its own time). ``snapshot()`` is called at the alarm, before
    anything unwinds (the kernel client's clean-up interrupts the running cell and marks it
    finished): its value rides on the exception, with the descendants then. ``stop(procs)``
    is called next, with those descendants, before anything unwinds: a kernel stopped there
    is not shut down by the client's clean-up, whose shutdown would close the kernel's sockets
    under the cell's reply (ipykernel then prints a ``ZMQError: Socket operation on
    non-socket`` traceback wall on every stopped run; the runner's STOPPED line says it all)."""
    if not seconds or seconds <= 0:
        yield
        return

    def _alarm(_d) -> BaseException:
        try:
            taken = snapshot() if snapshot is not None else None
        except Exception:  # a half-written file: the record says it could not read one
            taken = None
        procs = descendants()
        if stop is not None:
            stop(procs)
        return NotebookLimit(seconds, taken, procs)

    with deadline(seconds, "the notebook", fire=_alarm):
        yield


def stop_processes(procs, grace_s: float = 3.0) -> int:
    """Stop ``procs`` (psutil processes or pids) that are still running: SIGTERM, then SIGKILL to
    whatever is left after ``grace_s`` (:func:`feedlab.procgroup.stop_pids`). Returns how many were still running."""
    return procgroup.stop_pids([getattr(p, "pid", p) for p in procs], grace_s)


def read_notebook(executed: Path) -> dict | None:
    """The executed notebook as papermill last saved it, or None (not saved yet, half-written)."""
    try:
        return load_json(Path(executed))
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
        rec["note"] = "before its first cell ran (no partly executed notebook had been saved)"
        return rec
    code = [(i, c) for i, c in enumerate(nb.get("cells", [])) if c.get("cell_type") == "code"]
    rec["cells"] = len(code)
    for i, cell in code:
        meta = cell.get("metadata", {}).get("papermill", {})
        status = meta.get("status")
        if status == "completed" and meta.get("duration") is not None:
            rec["finished"] += 1
            rec["cell_seconds"][str(i)] = round(float(meta["duration"]), 2)
        elif status == "running":
            src = cell.get("source", "")
            first = (src if isinstance(src, str) else "".join(src)).strip().splitlines()
            rec["stopped_in"] = {"cell": i, "first_line": first[0][:120] if first else ""}
            if meta.get("start_time"):
                rec["stopped_in"]["started"] = meta["start_time"]
            break
    if rec["stopped_in"] is None:
        rec["note"] = ("after its last cell (kernel shut-down or saving)" if code and rec["finished"] == len(code)
                       else "before its first cell ran (kernel start-up)" if rec["finished"] == 0
                       else "between cells")
    return rec


def all_cells_finished(rec: dict) -> bool:
    """The limit came after the notebook's last cell had finished: the run is whole."""
    return bool(rec.get("cells")) and rec.get("finished") == rec.get("cells")


def mark_stopped_cell(executed: Path, rec: dict) -> None:
    """The kept notebook says which cell was cut (papermill's clean-up marks every cell
    completed on its way out): that cell's status becomes ``stopped at the limit``."""
    where = rec.get("stopped_in")
    nb = read_notebook(executed)
    if not where or nb is None or where["cell"] >= len(nb.get("cells", [])):
        return
    meta = nb["cells"][where["cell"]].setdefault("metadata", {}).setdefault("papermill", {})
    meta["status"] = "stopped at the limit"
    meta["duration"] = None
    atomic_write(executed, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def describe(name: str, rec: dict) -> str:
    """One line for the runner's log."""
    where = rec.get("stopped_in")
    place = f"in cell {where['cell']} ({where['first_line']!r})" if where else rec.get("note", "between cells")
    done = (f"{rec['finished']} of {rec['cells']} code cells finished" if rec.get("cells") is not None
            else "no cell finished")
    slow = sorted(rec.get("cell_seconds", {}).items(), key=lambda kv: -kv[1])[:3]
    slow_s = ", ".join(f"cell {k} {v:.0f} s" for k, v in slow)
    return f"{name} stopped at its limit of {rec['limit_s']:g} s {place}; {done}" + (f" (slowest: {slow_s})" if slow else "")


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
    seconds (or than its own limit, if shorter) would be left for it (do not start it)."""
    if deadline_s is None:
        return limit_s
    left = deadline_s - elapsed_s - STOP_MARGIN_S
    if left < (MIN_START_S if limit_s is None else min(MIN_START_S, limit_s)):
        return 0
    left = float(int(left))  # whole seconds: the log and STOPPED.json read "limit of 127 s"
    return left if limit_s is None else min(limit_s, left)


