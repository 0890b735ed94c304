"""What ``--script`` records inside the script's process: each batch's data wait and step, per DataLoader.

A DataLoader is known by its settings (:func:`loader_settings`, and its sampler's kind), not by the object:
a script that builds a new DataLoader every epoch (``for ep in range(100): for b in DataLoader(...)``, a
common shape) is one loader to the doctor, its batches counted across every loader built so. Counted per
object, each new loader started at 0, none reached the window, and every batch was progress: the doctor ran
the whole training (attack48 S04b: 8 batches a loader, ``--deadline 10``, still running at 120 s). The window
is ``max_batches`` of one loader; loaders of ever-changing settings are stopped too, once every iterator
wrapped has delivered :data:`ALL_LOADERS_FACTOR` × ``max_batches`` batches in all.

* :class:`Recorder` — the recording (a :class:`~feedlab.doctor.script_watch.Progress`), told to the watching
  process event by event; ``wrap`` is what ``DataLoader.__iter__`` returns while the script runs.
* :class:`Enough` — raised from inside the instrumented loader at the window (the doctor's stop).
"""

from __future__ import annotations

import json
import os
import signal
import time
import weakref
from typing import Any

from .guard import Hung, deadline
from .script_watch import Progress, quiet_exit
from .wrap import batch_len

#: every iterator wrapped delivered this many times ``max_batches`` in all: stopped (no one loader reached it)
ALL_LOADERS_FACTOR = 2


def stopped_pids(procs) -> list[int]:
    """The pids among ``procs`` (psutil processes) that are stopped (a SIGSTOP, a SIGTSTP, a debugger)."""
    out = []
    for p in procs:
        try:
            if p.status() in ("stopped", "tracing-stop"):
                out.append(p.pid)
        except Exception:   # gone meanwhile
            pass
    return out


def held_workers() -> list[int]:
    """The pids of this process's children (its DataLoader workers) that are stopped now; [] where psutil
    cannot tell."""
    try:
        import psutil

        return stopped_pids(psutil.Process().children(recursive=True))
    except Exception:   # psutil missing, or /proc unreadable: no worker is named
        return []


#: the faults torch's C handler in a DataLoader worker catches, prints a line and a NUL byte for, then re-raises
FAULT_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGFPE")


class DefaultFaultSignals:
    """A DataLoader's ``worker_init_fn`` under ``--script``: in the worker, SIGSEGV/SIGBUS/SIGFPE back to their
    default action (torch's C handler printed ``ERROR: Unexpected segmentation fault encountered in worker.`` and a
    NUL byte before the doctor's own line: attack55 W3, K31b), then the script's own ``worker_init_fn``, which still
    runs. A class, not a closure: a ``spawn`` worker gets it pickled."""

    def __init__(self, inner=None):
        self.inner = inner

    def __call__(self, worker_id: int) -> None:
        for name in FAULT_SIGNALS:
            sig = getattr(signal, name, None)
            if sig is not None:
                signal.signal(sig, signal.SIG_DFL)
        if self.inner is not None:
            self.inner(worker_id)


def default_fault_signals(loader) -> None:
    """Give ``loader``'s workers (where it has any) :class:`DefaultFaultSignals` around its own ``worker_init_fn``
    (once); a loader that refuses the attribute is left as it is."""
    inner = getattr(loader, "worker_init_fn", None)
    if getattr(loader, "num_workers", 0) and not isinstance(inner, DefaultFaultSignals):
        try:
            loader.worker_init_fn = DefaultFaultSignals(inner)
        except (AttributeError, ValueError, TypeError):   # a subclass that guards its attributes
            pass


class Enough(BaseException):
    """Raised from inside the instrumented loader once enough batches were seen; its message says how many."""


def loader_settings(loader) -> dict[str, Any]:
    """The settings of a DataLoader, read from the object."""
    ds = loader.dataset
    try:
        n = len(ds)
    except TypeError:
        n = None
    return {"batch_size": getattr(loader, "batch_size", None), "num_workers": loader.num_workers,
            "pin_memory": bool(loader.pin_memory), "prefetch_factor": loader.prefetch_factor,
            "persistent_workers": bool(loader.persistent_workers), "timeout": loader.timeout,
            "drop_last": bool(loader.drop_last), "dataset": type(ds).__name__, "dataset_len": n,
            "collate_fn": getattr(loader.collate_fn, "__name__", type(loader.collate_fn).__name__)}


def loader_identity(loader, settings: dict) -> str:
    """What makes two DataLoader objects the same loader to the doctor: equal settings and the same kind of
    sampler (a training loader, shuffled, and an evaluation loader of the same shape stay apart)."""
    sampler = type(getattr(loader, "sampler", None)).__name__
    return json.dumps({**settings, "sampler": sampler}, sort_keys=True, default=str)


class Recorder(Progress):
    """Per DataLoader (:func:`loader_identity`): data wait and step seconds of each batch, and its size;
    each change also told to ``tell`` (a :class:`~feedlab.doctor.script_watch.Wire` to the watching
    process, or nothing)."""

    def __init__(self, max_batches: int, batch_deadline_s: float | None, tell=None):
        super().__init__()
        self.max_batches, self.limit = int(max_batches), batch_deadline_s
        self.owner = os.getpid()                 # the process that started the doctor: the one that speaks
        self.tell = tell or (lambda *ev: None)
        self.keys: dict[str, int] = {}
        self.total = 0                           # batches delivered by every iterator wrapped

    def stopping(self, why: str, error: bool = False) -> None:
        if self.stop is None:
            self.tell("stop", why, error)
        super().stopping(why, error)

    def park(self) -> None:
        """The script caught the doctor's stop and asked for another batch: wait here for
        the watchdog to end the process (a forked copy ends at once, silently)."""
        if os.getpid() != self.owner:
            quiet_exit(0)
        self.parked = True
        self.tell("parked")
        while True:
            time.sleep(1)

    def _rec(self, loader) -> tuple[int, dict]:
        settings = loader_settings(loader)
        key = self.keys.setdefault(loader_identity(loader, settings), len(self.keys))
        if key not in self.loaders:
            self.loaders[key] = {"loader": loader, "settings": settings, "wait": [], "step": [], "step_cpu": [],
                                 "n": [], "iters": 0, "empty": 0, "built": 0, "last": None}
            self.tell("loader", key, settings)
        rec = self.loaders[key]
        if rec["last"] is None or rec["last"]() is not loader:   # built anew with the same settings (each epoch)
            rec["built"] += 1
            rec["last"] = weakref.ref(loader)   # not kept alive here (its workers go with it)
        return key, rec

    def _enough(self, rec: dict) -> str | None:
        """Why the script is stopped before its next batch, or None."""
        if len(rec["wait"]) >= self.max_batches:
            built = (f", over {rec['built']} DataLoaders of the same settings (your script builds a new one as it "
                     "goes)" if rec["built"] > 1 else "")
            return f"stopped after {self.max_batches} batches{built}"
        if self.total >= ALL_LOADERS_FACTOR * self.max_batches:
            return (f"stopped after {self.total} batches of {len(self.loaders)} DataLoaders of different settings, "
                    f"none of which reached {self.max_batches}")
        return None

    def wrap(self, loader, it):
        if self.stop is not None:
            self.park()
        key, rec = self._rec(loader)
        rec["iters"] += 1
        self.tell("iter", key)
        t_last = c_last = None
        limit = (loader.timeout or self.limit) if self.limit else None
        while True:
            t0, c0 = time.perf_counter(), time.process_time()
            if t_last is not None:
                rec["step"].append(t0 - t_last)
                rec["step_cpu"].append(c0 - c_last)
                self.tell("step", key, t0 - t_last, c0 - c_last)
            why = self._enough(rec)
            if why is not None:
                if os.getpid() != self.owner:
                    quiet_exit(0)            # a forked copy of the script: stopped without a word
                self.stopping(why)
                raise Enough(why)
            # progress is a batch delivered or a step taken: asking again after a batch is a step;
            # the first ask of a pass is not (an empty loader asked again and again is no progress)
            self.waiting = limit or 0.0
            if t_last is not None:
                self.t_progress = time.monotonic()
            self.tell("ask", key, self.waiting, t_last is not None)
            try:
                with deadline(limit, f"batch {len(rec['wait'])} of your script's DataLoader",
                              "a sample that never returns hangs training too"):
                    try:
                        batch = next(it)
                    except StopIteration:
                        if t_last is None:
                            rec["empty"] += 1
                            self.dry += 1
                            self.tell("empty", key)
                        return
            except Hung as hung:
                held = held_workers()   # a worker stopped from outside, not a sample that hangs (attack55 W2, K30)
                line = (f"batch {len(rec['wait'])} of your script's DataLoader did not return within {limit:g} s: its "
                        f"DataLoader worker (pid {', '.join(map(str, held))}) is stopped (SIGSTOP or SIGTSTP from "
                        "outside the command?)") if held else str(hung)
                self.stopping(line, error=True)
                if held:
                    raise Hung(line) from None
                raise
            finally:
                self.waiting = None
                self.tell("asked")
            t_last, c_last = time.perf_counter(), time.process_time()
            rec["wait"].append(t_last - t0)
            rec["n"].append(batch_len(batch) or 0)
            self.total, self.dry = self.total + 1, 0
            self.t_progress = time.monotonic()
            self.tell("got", key, t_last - t0, rec["n"][-1])
            yield batch
