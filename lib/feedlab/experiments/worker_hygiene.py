"""Worker hygiene: do DataLoader worker processes go away when an epoch stops early?

Three ways an epoch ends before its last batch, each checked the same way:
the worker pids are read from the live iterator, the epoch is cut short, the
iterator is dropped (``del`` + ``gc.collect()``), and we poll, with a bounded
wait, until none of those pids is alive (a zombie counts as alive: nobody
reaped it).

* ``break``     — ``break`` out of the loop after a few batches;
* ``worker_error`` — ``__getitem__`` raises inside a worker; the DataLoader
  re-raises it in the main process, where we catch it;
* ``keyboard_interrupt`` — a ``KeyboardInterrupt`` in the main loop, raised
  directly or delivered as a real SIGINT to this process;
* ``held_traceback`` — the interrupt again, but a reference to the traceback
  is kept (as IPython keeps ``sys.last_traceback`` after an uncaught error):
  the frames keep the iterator, so the workers stay until it is released.

Also measured here: the first-batch latency of each epoch with and without
``persistent_workers``, and throughput against ``prefetch_factor``.
"""

from __future__ import annotations

import gc
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch
from torch.utils.data import DataLoader, Dataset

from feedlab.results import Results
from feedlab.timing import close_iterator, run_epoch

SCENARIOS = ("break", "worker_error", "keyboard_interrupt", "held_traceback")


class WorkerFailure(RuntimeError):
    """Raised on purpose inside a worker."""


class FailingDataset(Dataset):
    """Wraps a dataset; reading index ``fail_at`` raises :class:`WorkerFailure`."""

    def __init__(self, base: Dataset, fail_at: int):
        self.base = base
        self.fail_at = int(fail_at)

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i):
        if int(i) == self.fail_at:
            raise WorkerFailure(f"deliberate failure reading index {i}")
        return self.base[i]


class CountingDataset(Dataset):
    """``n`` small tensors, each costing ``work_s`` of sleep (no CPU): a stand-in
    when the point is process lifetimes, not decode speed."""

    def __init__(self, n: int = 64, work_s: float = 0.0):
        self.n = int(n)
        self.work_s = float(work_s)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if self.work_s:
            time.sleep(self.work_s)
        return torch.full((4,), float(i))


def live_pids(pids) -> list[int]:
    """Those of ``pids`` that still exist (zombies included: they were not reaped)."""
    import psutil

    alive = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            p.status()
            alive.append(pid)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            # psutil raises ZombieProcess for some queries only; a zombie that
            # reports a status is counted above
            continue
    return alive


def child_pids() -> set[int]:
    """Pids of this process's live children (recursive)."""
    import psutil

    try:
        return {p.pid for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return set()


def iterator_worker_pids(it) -> list[int]:
    """Worker pids of a multi-process DataLoader iterator ([] for num_workers=0)."""
    return [w.pid for w in getattr(it, "_workers", []) if w.pid is not None]


def wait_gone(pids, timeout_s: float = 10.0, poll_s: float = 0.01) -> tuple[list[int], float]:
    """Poll until none of ``pids`` is alive or ``timeout_s`` passes.
    Returns (pids still alive, seconds waited)."""
    t0 = time.perf_counter()
    alive = live_pids(pids)
    while alive and time.perf_counter() - t0 < timeout_s:
        time.sleep(poll_s)
        alive = live_pids(alive)
    return alive, time.perf_counter() - t0


@dataclass
class HygieneOutcome:
    scenario: str
    num_workers: int
    workers_started: int
    raised: str                     # the exception type seen by the main loop ("" if none)
    alive_after_stop: int           # workers alive right after the loop stopped
    alive_after_del: int            # ... after ``del iterator`` + gc (held traceback: still held)
    leftover: list[int] = field(default_factory=list)  # still alive after release + bounded wait
    cleanup_s: float = 0.0          # release → last worker gone
    batches_seen: int = 0
    exitcodes: list = field(default_factory=list)  # exit codes as the parent saw them
    terminate_calls: int = 0        # workers torch terminated after a 5 s join timed out

    @property
    def terminated(self) -> int:
        """Workers that did not exit on their own: ``Process.terminate()`` was called on them
        after their join timed out. Their exit code cannot show it: torch installs a SIGTERM
        handler in each worker that exits with 0."""
        return self.terminate_calls

    @property
    def clean(self) -> bool:
        return not self.leftover

    def as_dict(self) -> dict:
        d = asdict(self)
        d["leftover_count"] = len(self.leftover)
        d["clean"] = self.clean
        d["terminated"] = self.terminated
        return d


@contextmanager
def count_terminations():
    """Within the block, count ``Process.terminate()`` calls (``terms[0]``): DataLoader
    calls it on a worker whose join timed out (5 s). A worker's exit code cannot tell:
    torch's SIGTERM handler inside the worker exits with 0."""
    import multiprocessing.process as mpp

    terms = [0]
    original = mpp.BaseProcess.terminate

    def counting(self):
        terms[0] += 1
        return original(self)

    mpp.BaseProcess.terminate = counting
    try:
        yield terms
    finally:
        mpp.BaseProcess.terminate = original


ERROR_LOOPS = ("plain", "feedlab", "fix")


def _plain_loop(loader) -> None:
    for _ in loader:  # the exception leaves with this frame, and the iterator, in a cycle
        pass


def _fixed_loop(loader) -> None:
    """The documented fix for a hand-written loop: shut the iterator down on error."""
    it = iter(loader)
    try:
        for _ in it:
            pass
    except BaseException:
        close_iterator(loader, it, final=True)
        raise


def error_cleanup(loop: str, num_workers: int = 2, batch_size: int = 4, fail_at: int = 8,
                  timeout_s: float = 30.0) -> dict:
    """A worker raises; the loop ``loop`` (``plain``: ``for batch in loader`` in a function;
    ``feedlab``: :func:`feedlab.timing.run_epoch`; ``fix``: the plain loop with the iterator
    shut down on error) lets the exception out. Then ``gc.collect()``, as happens sooner or
    later: seconds until every worker is gone, and how many had to be terminated after a
    join timeout. In the plain loop the re-raised exception holds the iterator in a reference
    cycle; the collector closes the queues' feeder threads (weakref callbacks) before the
    iterator's ``__del__`` sends the workers their stop signal, so each join times out."""
    runner = {"plain": _plain_loop, "feedlab": lambda ld: run_epoch(ld, None, "cpu"),
              "fix": _fixed_loop}[loop]
    before = child_pids()
    loader = DataLoader(FailingDataset(CountingDataset(max(64, 2 * fail_at), 0.001), fail_at),
                        batch_size=batch_size, num_workers=num_workers)
    raised = ""
    with count_terminations() as terms:
        try:
            runner(loader)
        except WorkerFailure as exc:
            raised = type(exc).__name__
        workers = sorted(child_pids() - before)
        t0 = time.perf_counter()
        gc.collect()
        leftover, _ = wait_gone(workers, timeout_s=timeout_s)
        cleanup_s = time.perf_counter() - t0
    del loader
    return {"loop": loop, "raised": raised, "workers_alive_at_error": len(workers), "cleanup_s": cleanup_s,
            "terminated": terms[0], "leftover": len(leftover)}


def error_cleanup_table(num_workers: int = 2, repeats: int = 3, loops=ERROR_LOOPS) -> Results:
    """:func:`error_cleanup` ``repeats`` times per loop; rows cleanup_s and terminated. A loop whose run
    waited out the DataLoader's join timeout (a worker terminated: torch's fixed 5 s a worker) is not run
    again: its seconds are that constant, and a repeat would spend it once more to read it again
    (:func:`_timed_out`)."""
    res = Results()
    for loop in loops:
        for r in range(repeats):
            o = error_cleanup(loop, num_workers=num_workers)
            res.add("error_cleanup", loop, "cleanup_s", o["cleanup_s"], "s", r, loop=loop, num_workers=num_workers)
            res.add("error_cleanup", loop, "terminated", o["terminated"], "processes", r, loop=loop,
                    num_workers=num_workers)
            res.add("error_cleanup", loop, "leftover", o["leftover"], "processes", r, loop=loop,
                    num_workers=num_workers)
            if _timed_out(o["terminated"]):
                break
    return res


def _timed_out(terminated: int) -> bool:
    """Whether a run waited out the DataLoader's join timeout: a worker it had to terminate
    (:func:`count_terminations`) is one the shutdown waited ``MP_STATUS_CHECK_INTERVAL`` (5 s) for."""
    return terminated > 0


class _SigintAsKeyboardInterrupt:
    """Within the block, SIGINT raises KeyboardInterrupt (Python's default),
    whatever handler was installed (a Jupyter kernel installs its own).
    Only possible in the main thread; elsewhere it is a no-op and
    ``usable`` is False."""

    def __enter__(self):
        self.usable = threading.current_thread() is threading.main_thread()
        if self.usable:
            self._old = signal.signal(signal.SIGINT, signal.default_int_handler)
        return self

    def __exit__(self, *exc):
        if self.usable:
            signal.signal(signal.SIGINT, self._old)


def _interrupt(how: str) -> None:
    if how == "signal":
        signal.raise_signal(signal.SIGINT)
        # the handler runs between bytecodes; give it one
        time.sleep(0.01)
        raise RuntimeError("SIGINT was delivered but no KeyboardInterrupt followed")
    raise KeyboardInterrupt("raised by feedlab.experiments.worker_hygiene")


def _drive(it, stop_after: int, action: Callable[[], None] | None, seen: list[int]) -> None:
    for _ in it:
        seen[0] += 1
        if seen[0] >= stop_after:
            if action is None:
                break
            action()


def run_scenario(scenario: str, dataset: Dataset, num_workers: int = 2, batch_size: int = 4,
                 stop_after: int = 2, interrupt: str = "raise", timeout_s: float = 10.0,
                 **loader_kw) -> HygieneOutcome:
    """Run one early-stop ``scenario`` (one of :data:`SCENARIOS`) and report
    which workers were left behind. ``interrupt`` is ``"raise"`` (raise
    KeyboardInterrupt in the loop) or ``"signal"`` (send SIGINT to this process;
    main thread only)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario {scenario!r}: one of {SCENARIOS}")
    if scenario == "worker_error":
        dataset = FailingDataset(dataset, fail_at=stop_after * batch_size)
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, **loader_kw)
    it = iter(loader)
    pids = iterator_worker_pids(it)
    procs = list(getattr(it, "_workers", []))  # Process handles: exit codes, no ref to the iterator
    raised = ""
    seen = [0]
    held = None
    with count_terminations() as terms:
        with _SigintAsKeyboardInterrupt() as sig:
            how = interrupt if sig.usable else "raise"
            try:
                if scenario == "break":
                    _drive(it, stop_after, None, seen)
                elif scenario == "worker_error":
                    _drive(it, 10 ** 9, None, seen)
                else:
                    _drive(it, stop_after, lambda: _interrupt(how), seen)
            except (KeyboardInterrupt, WorkerFailure) as exc:
                raised = type(exc).__name__
                if scenario == "held_traceback":
                    held = exc.__traceback__  # what IPython's sys.last_traceback does
        alive_after_stop = len(live_pids(pids))
        t_release = time.perf_counter()
        del it
        gc.collect()
        alive_after_del = len(live_pids(pids))
        if held is not None:
            # the traceback's frames still reference the iterator, so its workers live on
            del held
            gc.collect()
        leftover, _ = wait_gone(pids, timeout_s=timeout_s)
        cleanup_s = time.perf_counter() - t_release
    exitcodes = [p.exitcode for p in procs]
    del loader, procs
    return HygieneOutcome(scenario=scenario, num_workers=num_workers, workers_started=len(pids),
                          raised=raised, alive_after_stop=alive_after_stop,
                          alive_after_del=alive_after_del, leftover=leftover,
                          cleanup_s=cleanup_s, batches_seen=seen[0], exitcodes=exitcodes,
                          terminate_calls=terms[0])


def hygiene_table(dataset_factory: Callable[[], Dataset], num_workers: int = 2, repeats: int = 3,
                  batch_size: int = 4, scenarios=SCENARIOS, interrupt: str = "raise") -> Results:
    """Every scenario ``repeats`` times; rows: workers_started, alive_after_stop,
    alive_after_del, leftover, cleanup_s. A scenario whose run waited out the join timeout
    (a worker terminated) runs once, as in :func:`error_cleanup_table`."""
    res = Results()
    for sc in scenarios:
        for r in range(repeats):
            o = run_scenario(sc, dataset_factory(), num_workers=num_workers, batch_size=batch_size,
                             interrupt=interrupt)
            params = dict(scenario=sc, num_workers=num_workers, raised=o.raised or "none")
            res.add("worker_hygiene", sc, "workers_started", o.workers_started, "processes", r, **params)
            res.add("worker_hygiene", sc, "alive_after_stop", o.alive_after_stop, "processes", r, **params)
            res.add("worker_hygiene", sc, "alive_after_del", o.alive_after_del, "processes", r, **params)
            res.add("worker_hygiene", sc, "leftover", len(o.leftover), "processes", r, **params)
            res.add("worker_hygiene", sc, "terminated", o.terminated, "processes", r, **params)
            res.add("worker_hygiene", sc, "cleanup_s", o.cleanup_s, "s", r, **params)
            if _timed_out(o.terminated):
                break
    return res


def epoch_first_batch_latency(dataset: Dataset, num_workers: int, batch_size: int, epochs: int,
                              persistent_workers: bool, max_batches: int | None = None,
                              prefetch_factor: int | None = None) -> list[float]:
    """Seconds from ``iter(loader)`` to the first batch, for each of ``epochs``
    consecutive epochs of one DataLoader (epoch 0 always starts its workers)."""
    kw = {}
    if num_workers > 0:
        kw["persistent_workers"] = persistent_workers
        if prefetch_factor is not None:
            kw["prefetch_factor"] = prefetch_factor
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, shuffle=True,
                        generator=torch.Generator().manual_seed(0), **kw)
    out = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        it = iter(loader)
        next(it)
        out.append(time.perf_counter() - t0)
        for b, _batch in enumerate(it, start=1):
            if max_batches is not None and b + 1 >= max_batches:
                break
        del it
    del loader
    gc.collect()
    return out


def persistent_workers_table(dataset_factory: Callable[[], Dataset], num_workers: int, batch_size: int,
                             epochs: int = 4, repeats: int = 3, max_batches: int | None = None) -> Results:
    """First-batch latency per epoch index, persistent vs not; one row per
    (persistent_workers, epoch, repeat)."""
    res = Results()
    for persistent in (False, True):
        for r in range(repeats):
            lat = epoch_first_batch_latency(dataset_factory(), num_workers, batch_size, epochs,
                                            persistent, max_batches=max_batches)
            for e, v in enumerate(lat):
                res.add("persistent_workers", f"persistent={persistent}", "first_batch_s", v, "s", r,
                        persistent_workers=persistent, epoch=e, num_workers=num_workers,
                        batch_size=batch_size)
    return res


def interrupt_methods_available() -> dict[str, bool]:
    """Which ways of interrupting work in this thread."""
    return {"raise": True, "signal": threading.current_thread() is threading.main_thread()
            and sys.platform != "win32"}


# the figure, reading and payload of notebook 11 (a companion module keeps this one short)
from feedlab.experiments._hygiene_readings import (  # noqa: E402
    payload,
    plot_persistent_and_prefetch,
    readings,
    title,
)

__all__ = ["SCENARIOS", "FailingDataset", "CountingDataset", "HygieneOutcome", "run_scenario",
           "hygiene_table", "epoch_first_batch_latency", "persistent_workers_table", "live_pids",
           "child_pids", "iterator_worker_pids", "wait_gone", "WorkerFailure",
           "interrupt_methods_available", "count_terminations", "error_cleanup", "error_cleanup_table",
           "ERROR_LOOPS", "readings", "title", "plot_persistent_and_prefetch", "payload"]
