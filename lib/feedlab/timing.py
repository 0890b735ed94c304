"""Clocks for the input pipeline.

* :func:`time_callable` — warm-up, then N timed calls (seconds per call).
* :class:`PhaseTimer` — per batch: ``data_wait`` (blocked in ``next(loader)``),
  ``h2d`` (host-to-device copy and the uint8→float conversion), ``forward``,
  ``backward`` (backward + optimizer step). CUDA events on a GPU,
  ``time.perf_counter`` on the CPU. Its own cost per batch is measured by
  :func:`timer_overhead_per_batch`, so every table can state it.
* :func:`run_epoch` — one pass over a loader with an optional model step,
  timed by phase; returns :class:`EpochTiming`.
* :func:`stage_times` — a loader's fetch and collate by the stage instrument (:mod:`feedlab.stage`).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from feedlab import stage
from feedlab.gpu_decode import is_encoded

PHASES = ("data_wait", "h2d", "forward", "backward")

perf_counter = time.perf_counter


class torch_threads:
    """Run a block with ``n`` intra-op torch threads, restoring the previous number after.
    ``n=None`` changes nothing."""

    def __init__(self, n: int | None) -> None:
        self.n = n

    def __enter__(self):
        import torch

        self.before = torch.get_num_threads()
        if self.n is not None and self.n != self.before:
            torch.set_num_threads(int(self.n))
        return self

    def __exit__(self, *exc) -> None:
        import torch

        if torch.get_num_threads() != self.before:
            torch.set_num_threads(self.before)


def main_threads_for(loader, device) -> int | None:
    """How many intra-op threads the training process should use beside ``loader``.

    On a CPU device with worker processes, the workers already keep cores busy; an
    OpenMP team in the main process then waits for cores at every parallel region
    (measured here: the uint8→float conversion of a 128×3×64×64 batch took 14 ms with
    2 threads beside busy workers, 4 ms with 1). So leave the workers their cores:
    ``max(1, cores - num_workers)``. With CUDA, or with no workers, keep torch's choice.
    """
    workers = int(getattr(loader, "num_workers", 0) or 0)
    if workers == 0 or str(device).startswith("cuda"):
        return None
    try:
        import os

        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        import os

        cores = os.cpu_count() or 1
    return max(1, cores - workers)


def sync_device(device) -> None:
    """Wait for the device's queued work (a no-op off CUDA). Every clock read that
    brackets device work goes through here (the doctor's and the peers' loops too, as
    ``timing.sync_device``), so a test can stand in a fake device."""
    if device is not None and str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


@contextmanager
def owned_iterator(loader):
    """``with owned_iterator(loader) as it:`` — an iterator over ``loader`` whose workers are
    stopped at once if the block raises. Left to itself, torch's re-raised worker error keeps
    the iterator alive in a reference cycle and each worker is joined only after a timeout
    (seconds per worker); every loop feedlab owns goes through here or :func:`run_epoch`."""
    it = iter(loader)
    try:
        yield it
    except BaseException:
        close_iterator(loader, it, final=True)
        raise


def close_iterator(loader, it, final: bool = False) -> None:
    """Stop the workers of a DataLoader iterator that was left before its end.

    A loader with ``persistent_workers=True`` keeps its iterator and calls ``_reset``
    on it at the next ``iter(loader)``, which drains what the workers prefetched and
    resumes them: shutting that iterator down by hand closes its queues, and the next
    epoch then fails with ``ValueError: Queue ... is closed``. So only iterators that
    the loader will not reuse are shut down here (promptly, instead of at garbage
    collection); persistent ones are left to the loader, unless ``final`` says the loader
    itself is done with (then its workers are stopped and the loader forgets the iterator).
    """
    if it is None or not hasattr(it, "_shutdown_workers"):
        return
    if getattr(loader, "persistent_workers", False) and getattr(loader, "_iterator", None) is it:
        if not final:
            return
        loader._iterator = None
    it._shutdown_workers()


def stage_times(loader, max_batches: int | None = None) -> dict[str, list[tuple[float, float, int]]]:
    """``loader``'s fetch and collate timed by the stage instrument (:mod:`feedlab.stage`) in this process
    (rebuilt with ``num_workers=0``): ``{"fetch": [(wall, cpu, n), ...], "collate": [...]}``, one per call."""
    rec = stage.Records()
    ld = stage.rebuild(loader, stage.TimedFetch(loader.dataset, rec), stage.TimedCollate(loader.collate_fn, rec),
                       num_workers=0)
    for k, _ in enumerate(ld):
        if max_batches is not None and k + 1 >= max_batches:
            break
    return rec.by_stage


def time_callable(fn: Callable[[], Any], warmup: int = 1, repeats: int = 5, number: int = 1,
                  device=None, setup: Callable[[], Any] | None = None) -> list[float]:
    """Seconds per call of ``fn``: ``warmup`` untimed rounds, then ``repeats`` timed
    rounds of ``number`` calls each (the mean within a round is one sample).

    ``setup`` runs before every round, outside the clock (e.g. evicting a cache).
    With a CUDA ``device`` the clock is synchronised around each round.
    """
    if repeats < 1 or number < 1:
        raise ValueError("repeats and number must be >= 1")
    for _ in range(max(0, warmup)):
        if setup:
            setup()
        for _ in range(number):
            fn()
    sync_device(device)
    out = []
    for _ in range(repeats):
        if setup:
            setup()
        sync_device(device)
        t0 = perf_counter()
        for _ in range(number):
            fn()
        sync_device(device)
        out.append((perf_counter() - t0) / number)
    return out


def autorange_number(fn: Callable[[], Any], min_time_s: float = 0.05, max_number: int = 100_000,
                     device=None) -> int:
    """How many calls make one round last at least ``min_time_s`` (like timeit.autorange),
    never more than ``max_number``.

    With a CUDA ``device`` each trial is synchronised before and after: an asynchronous
    call (a ``non_blocking`` copy, a kernel launch) returns once it is queued, so an
    unsynchronised trial would time the queuing alone, double the count until the
    device's queue filled, and the timed rounds would then run thousands of real calls.
    """
    if max_number < 1:
        raise ValueError("max_number must be >= 1")
    number = 1
    while True:
        sync_device(device)
        t0 = perf_counter()
        for _ in range(number):
            fn()
        sync_device(device)
        if perf_counter() - t0 >= min_time_s or number >= max_number:
            return number
        number = min(number * 2, max_number)


class PhaseTimer:
    """Marks the boundaries of each batch's phases.

    Call ``start_batch()`` before ``next(loader)``, then ``mark('data_wait')``,
    ``mark('h2d')``, ``mark('forward')``, ``mark('backward')`` after each phase.
    Phases not marked in a batch count as zero. On CUDA the device phases are
    timed with events (read once, at ``finish()``), so timing never forces a sync
    inside the loop.
    """

    def __init__(self, device="cpu", capacity: int = 1024) -> None:
        self.device = str(device)
        self.cuda = self.device.startswith("cuda")
        self._host = np.zeros((capacity, len(PHASES) + 1), dtype=np.float64)
        self._events: list[list] = []
        self._marked = np.zeros((capacity, len(PHASES)), dtype=bool)
        self.n = 0
        self._finished: np.ndarray | None = None
        if self.cuda:
            import torch

            self._Event = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731

    def _grow(self) -> None:
        self._host = np.concatenate([self._host, np.zeros_like(self._host)])
        self._marked = np.concatenate([self._marked, np.zeros_like(self._marked)])

    def start_batch(self) -> None:
        if self.n >= len(self._host):
            self._grow()
        self._host[self.n, 0] = perf_counter()
        if self.cuda:
            self._events.append([None] * (len(PHASES) + 1))

    def mark(self, phase: str) -> None:
        i = PHASES.index(phase)
        self._host[self.n, i + 1] = perf_counter()
        self._marked[self.n, i] = True
        if self.cuda and phase != "data_wait":
            ev = self._Event()
            ev.record()
            self._events[self.n][i + 1] = ev
        elif self.cuda:  # the reference point for device phases
            ev = self._Event()
            ev.record()
            self._events[self.n][1] = ev

    def end_batch(self) -> None:
        self.n += 1

    def finish(self) -> np.ndarray:
        """Seconds per (batch, phase), shape (n, 4)."""
        n = self.n
        marks = self._host[:n].copy()
        # carry the previous boundary forward over phases that were not marked
        for i in range(1, marks.shape[1]):
            missing = ~self._marked[:n, i - 1]
            marks[missing, i] = marks[missing, i - 1]
        out = np.diff(marks, axis=1)
        if self.cuda and n:
            import torch

            torch.cuda.synchronize()
            for b in range(n):
                evs = self._events[b]
                prev = evs[1]
                for i in range(2, len(PHASES) + 1):
                    if evs[i] is not None and prev is not None:
                        out[b, i - 1] = prev.elapsed_time(evs[i]) / 1e3
                        prev = evs[i]
                    else:
                        out[b, i - 1] = 0.0
        self._finished = out
        return out


def timer_overhead_per_batch(device="cpu", batches: int = 5000) -> float:
    """Seconds the PhaseTimer itself adds to one batch (all four phases marked)."""
    def loop(use_timer: bool) -> float:
        timer = PhaseTimer(device, capacity=batches)
        t0 = perf_counter()
        for _ in range(batches):
            if use_timer:
                timer.start_batch()
                timer.mark("data_wait")
                timer.mark("h2d")
                timer.mark("forward")
                timer.mark("backward")
                timer.end_batch()
        return perf_counter() - t0

    loop(True)
    with_timer = min(loop(True) for _ in range(3))
    without = min(loop(False) for _ in range(3))
    return max(0.0, (with_timer - without) / batches)


@dataclass
class EpochTiming:
    """What one timed pass over a loader measured."""

    phases_s: np.ndarray          # (batches, 4) seconds per phase
    batch_sizes: np.ndarray       # samples in each batch
    wall_s: float                 # first next() to last step done
    first_batch_s: float          # iter() to the first batch in hand (worker start-up included)
    extra: dict = field(default_factory=dict)

    @property
    def batches(self) -> int:
        return int(len(self.batch_sizes))

    @property
    def samples(self) -> int:
        return int(self.batch_sizes.sum())

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.wall_s if self.wall_s > 0 else float("nan")

    @property
    def data_wait_s(self) -> float:
        return float(self.phases_s[:, 0].sum())

    @property
    def data_wait_fraction(self) -> float:
        return self.data_wait_s / self.wall_s if self.wall_s > 0 else float("nan")

    def phase_means(self, skip_first: int = 1) -> dict[str, float]:
        """Mean seconds per batch for each phase (the first batch, which waits for
        workers to start, is left out unless it is the only one)."""
        p = self.phases_s[skip_first:] if len(self.phases_s) > skip_first else self.phases_s
        return {name: float(p[:, i].mean()) for i, name in enumerate(PHASES)}

    def as_dict(self) -> dict:
        return {"samples": self.samples, "batches": self.batches, "wall_s": float(self.wall_s),
                "samples_per_s": float(self.samples_per_s), "data_wait_s": self.data_wait_s,
                "data_wait_fraction": float(self.data_wait_fraction),
                "first_batch_s": float(self.first_batch_s),
                **{f"{k}_s_per_batch": v for k, v in self.phase_means().items()}, **self.extra}


def _split_batch(batch):
    if isinstance(batch, (list, tuple)) and len(batch) == 2:
        return batch[0], batch[1]
    return batch, None


def to_device_float(t, device, non_blocking: bool):
    import torch

    if is_encoded(t):  # decode=cuda: the batch's bytes are decoded on the device, one call per batch
        t = t.decode_to(device)
    if not isinstance(t, torch.Tensor):
        return t
    t = t.to(device, non_blocking=non_blocking)
    if t.dtype == torch.uint8:
        t = t.float().div_(255.0)
    return t


def run_epoch(loader: Iterable, model=None, device="cpu", optimizer=None,
              loss_fn: Callable | None = None, max_batches: int | None = None,
              non_blocking: bool = True, timer: PhaseTimer | None = None,
              on_batch: Callable[[int, Any], None] | None = None,
              main_threads: int | str | None = "auto", busy=None, time_budget_s: float | None = None,
              min_batches: int = 0, stop: Callable[[int, float], bool] | None = None) -> EpochTiming:
    """One timed pass over ``loader``.

    Each batch is ``(inputs, targets)`` (or a single tensor). The inputs/targets
    go to ``device`` (uint8 tensors become float in [0, 1] there). With a ``model``,
    the one training step follows (:func:`feedlab.models.forward`, and with an
    ``optimizer`` :func:`feedlab.models.backward_step`; the loss is chosen as
    :func:`feedlab.models.step_loss` says), so the loader's prefetching overlaps real compute. ``on_batch(i, batch)`` is called
    after the step (used e.g. to print, to measure what printing costs).
    ``main_threads``: intra-op torch threads in this process for the epoch; ``"auto"``
    applies :func:`main_threads_for` (fewer threads beside CPU workers), ``None``
    leaves torch's setting. The number used is in ``EpochTiming.extra``.
    ``busy``: a :class:`feedlab.gpu_busy.BusyMeter`; its window is this loop (iter() to the
    last step done) and its events bracket each batch's device work (copy + step).
    ``time_budget_s``: stop once this many seconds have passed since the first batch was
    asked for and at least ``min_batches`` batches ran (``max_batches`` still caps).
    ``stop(batches_done, perf_counter())``, called after each batch, ends the pass when it says so
    (:class:`feedlab.pipeline.rates.SteadyStop`: once the steady rate is known to a stated precision).
    """
    import torch

    threads = main_threads_for(loader, device) if main_threads == "auto" else main_threads
    with torch_threads(threads):
        et = _run_epoch(loader, model, device, optimizer, loss_fn, max_batches, non_blocking,
                        timer, on_batch, busy, time_budget_s, min_batches, stop)
    et.extra["main_threads"] = int(threads or torch.get_num_threads())
    return et


def _run_epoch(loader, model, device, optimizer, loss_fn, max_batches, non_blocking, timer,
               on_batch, busy=None, time_budget_s=None, min_batches=0, stop=None) -> EpochTiming:
    from feedlab.models import backward_step, forward

    timer = timer or PhaseTimer(device)
    sizes = []
    t_iter = perf_counter()
    it = iter(loader)
    first_batch_s = float("nan")
    t_start = None
    i = 0
    stopped_early = False
    if busy is not None:
        busy.start_window()
    try:  # an error mid-epoch (a worker raised, an interrupt): stop the workers now, not
        # after torch's 5 s join timeouts once a reference cycle is collected
        while max_batches is None or i < max_batches:
            if (time_budget_s is not None and t_start is not None and i >= min_batches
                    and perf_counter() - t_start >= time_budget_s):
                stopped_early = True
                break
            timer.start_batch()
            try:
                batch = next(it)
            except StopIteration:
                break
            timer.mark("data_wait")
            if t_start is None:
                t_start = float(timer._host[timer.n, 0])
                first_batch_s = perf_counter() - t_iter
            x, y = _split_batch(batch)
            sizes.append(len(x))
            if busy is not None:
                busy.step_begin()
            x = to_device_float(x, device, non_blocking)
            y = to_device_float(y, device, non_blocking)
            timer.mark("h2d")
            if model is not None:  # the one step, feedlab.models', split at the phase marks
                loss = forward(model, x, y, loss_fn)
                timer.mark("forward")
                if optimizer is not None:
                    backward_step(loss, optimizer)
                    timer.mark("backward")
            if busy is not None:
                busy.step_end()
            if on_batch is not None:
                on_batch(i, batch)
            timer.end_batch()
            i += 1
            if stop is not None and stop(i, perf_counter()):
                stopped_early = True
                break
    except BaseException:
        close_iterator(loader, it, final=True)
        raise
    sync_device(device)
    end = perf_counter()
    if busy is not None:
        busy.stop()  # the loop's window ends here, before the workers are shut down
    if max_batches is not None or stopped_early:
        close_iterator(loader, it)
    phases = timer.finish()
    wall = end - t_start if t_start is not None else 0.0
    return EpochTiming(phases_s=phases, batch_sizes=np.asarray(sizes, dtype=np.int64),
                       wall_s=wall, first_batch_s=first_batch_s)
