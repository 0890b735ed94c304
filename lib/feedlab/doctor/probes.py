"""Small measurements the doctor builds its cost table from: a timed call, the machine's
effective cores, what a DataLoader worker and the main process spend per batch, worker
start-up."""

from __future__ import annotations

import math
import multiprocessing as mp
import time
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from feedlab import monitor
from feedlab.budget import FINISH_S, seconds_to_deadline
from feedlab.errors import progress
from feedlab.pipeline.ring import RingLoader
from feedlab.pipeline.shm import CheckedDataLoader  # out of /dev/shm: one line, no torch_* left
from feedlab.timing import PHASES, main_threads_for, run_epoch, time_callable

from .costs import Machine

MIN_ROUND_S = 0.05   # a timed round of a stage lasts at least this long (a fast call is run several times)
MAX_NUMBER = 200     # … but no more calls a round than this


def calls_per_round(one_s: float, min_round_s: float = MIN_ROUND_S) -> int:
    """Calls of a ``one_s``-second call that make a round of at least ``min_round_s`` (1 … MAX_NUMBER). A
    stage priced from three single calls of a millisecond moved ±30% between runs: one descheduling, one
    burst of page faults in one call is a third of the sample (notebook 10's ``format=npy_mmap`` step,
    predicted 13,605 then 27,028 samples/s; #46)."""
    if min_round_s <= 0 or not one_s or one_s >= min_round_s:
        return 1
    return int(max(1, min(MAX_NUMBER, math.ceil(min_round_s / max(one_s, 1e-7)))))


def timed(fn: Callable[[], Any], per: int, warmup: int, repeats: int, device=None,
          setup: Callable[[], Any] | None = None, min_round_s: float = MIN_ROUND_S) -> tuple[list[float], list[float]]:
    """(wall, cpu) seconds per unit (``per`` units per call) for each timed round. A fast call is run
    several times a round (:func:`calls_per_round`, sized by one untimed call after the warm-up); with
    ``setup`` (run before every round, e.g. an eviction) one call a round."""
    number = 1
    if setup is None and min_round_s > 0:
        for _ in range(max(0, warmup)):
            fn()
        t0 = time.perf_counter()
        fn()
        number = calls_per_round(time.perf_counter() - t0, min_round_s)
        warmup = 0   # warmed up above
    cpu: list[float] = []

    def call():
        c0 = time.process_time()
        for _ in range(number):
            fn()
        cpu.append(time.process_time() - c0)
        progress()

    wall = time_callable(call, warmup=warmup, repeats=repeats, device=device, setup=setup)
    cpu = cpu[len(cpu) - repeats:]
    return [w / (per * number) for w in wall], [c / (per * number) for c in cpu]


def stream_stages(stages, items, warmup: int, repeats: int,
                  min_round_s: float = 2 * MIN_ROUND_S) -> tuple[dict[str, tuple[list, list]], list]:
    """(wall, cpu) seconds per item of each stage of a chain, timed as a loop runs it: one item through
    every stage before the next (``stages``: ``(name, fn)`` in order, each ``fn`` taking the previous
    one's output; ``items`` go into the first). Each stage timed alone over the whole list first ran
    13-16% less CPU per sample than the DataLoader loop that interleaves them (PNG + PIL, notebook 10's
    start on cpu-2c: 3,223 against 2,779 samples per CPU-second; docs/DOCTOR.md), the 0-worker
    over-prediction. At least one warm-up pass (it sizes the rounds: each timed round passes over the items
    as often as makes ``min_round_s``; 128 samples of ``npy_mmap`` are 4 ms, one descheduling in it a quarter of
    the cost). Returns the per-stage lists (one value per timed repeat) and the last outputs."""
    out: dict[str, tuple[list, list]] = {name: ([], []) for name, _ in stages}
    last: list = []
    n = max(1, len(items))
    cycles = 1   # passes over the items a timed round makes: a round lasts at least min_round_s
    for r in range(max(1, warmup) + repeats):
        acc = {name: [0.0, 0.0] for name, _ in stages}
        t_round = time.perf_counter()
        for _ in range(cycles if r >= max(1, warmup) else 1):
            last = []
            for x in items:
                for name, fn in stages:
                    t0, c0 = time.perf_counter(), time.process_time()
                    x = fn(x)
                    a = acc[name]
                    a[0] += time.perf_counter() - t0
                    a[1] += time.process_time() - c0
                last.append(x)
        progress()
        if r == max(1, warmup) - 1:   # the last warm-up pass sizes the timed rounds
            cycles = calls_per_round(time.perf_counter() - t_round, min_round_s)
        if r >= max(1, warmup):
            for name, (w, c) in acc.items():
                out[name][0].append(w / (n * cycles))
                out[name][1].append(c / (n * cycles))
    return out, last


def _spin_window(start, seconds: float, ready, out) -> None:
    """Spin from the shared ``start`` (a ``time.monotonic`` instant, the same clock in
    every process) to ``start + seconds``; put the CPU seconds used inside that window."""
    ready.release()
    while start.value <= 0:          # the parent sets the instant once every child is ready
        time.sleep(0.001)
    t0 = start.value
    while time.monotonic() < t0:
        time.sleep(max(0.0, min(0.001, t0 - time.monotonic())))
    c0 = time.process_time()
    t_end = t0 + seconds
    x = 0
    while time.monotonic() < t_end:
        for i in range(2000):
            x += i
    out.put(time.process_time() - c0)


def capacity_of(used_cpu_s, window_s: float, k: int, cores: int | None = None) -> float:
    """CPU-seconds per second that ``k`` processes obtained together: the CPU they used
    inside one common window of ``window_s`` seconds, never more than ``min(k, cores)``
    (more is a clock error: a window not shared by all of them)."""
    cap = float(sum(used_cpu_s)) / float(window_s) if window_s > 0 else 0.0
    top = float(k) if cores is None else float(min(k, cores))
    return max(0.0, min(cap, top))


def cpu_capacity(ks, seconds: float = 0.25, repeats: int = 2) -> dict[int, float]:
    """CPU-seconds per second that ``k`` processes spinning together obtain, for each
    ``k`` in ``ks`` (median of ``repeats``): ``min(k, cores)`` on an idle machine.

    The ``k`` processes are started first and spin over one common window (from a
    shared instant to ``seconds`` later): timing each from its own start would add up
    CPU used over a longer, staggered span (3 processes on 2 cores read 2.35)."""
    ctx = mp.get_context("fork")
    cores = monitor.usable_cores()
    out = {}
    for k in sorted(set(int(k) for k in ks)):
        vals = []
        for _ in range(repeats):
            q, ready = ctx.Queue(), ctx.Semaphore(0)
            start = ctx.Value("d", 0.0)
            procs = [ctx.Process(target=_spin_window, args=(start, seconds, ready, q)) for _ in range(k)]
            for p in procs:
                p.start()
            for _p in procs:
                ready.acquire()
            start.value = time.monotonic() + 0.01
            used = [q.get() for _ in procs]
            for p in procs:
                p.join()
            vals.append(capacity_of(used, seconds, k, cores))
        out[k] = float(np.median(vals))
    return out


def round_fits(round_s: float) -> bool:
    """Whether another round of end-to-end passes that takes ``round_s`` fits before the runner's limit
    (:func:`feedlab.budget.seconds_to_deadline`) with as much again left for what follows it (the
    notebook's advice steps) and its finish; always, where no runner set a limit."""
    return seconds_to_deadline() - FINISH_S >= 2 * round_s


def capacity_ks(num_workers: int, main_threads: int = 1, cores: int | None = None) -> list[int]:
    """The process counts whose CPU capacity is sampled before a pass with ``W`` workers and
    ``T`` main threads: one, ``W - 1`` to ``W + 1`` (a worker beside the others, and the main
    process beside them), and the far end of what the predictor reads, ``W + T`` (the main
    process's threads beside the workers; :mod:`feedlab.doctor.predict`), that end no further than
    ``cores + 1`` (or ``W + 1``), and the core count itself where ``W + T`` passes it (:meth:`Machine.cap`
    interpolates between them, exact where capacity is ``min(k, cores)``). Every count from 1 to
    ``W + 1`` once made ~1,100 forks a round of 0..16 workers; every count to ``W + T`` with
    CUDA's 16 main threads made ~400 a pass, and notebook 10's diagnosis ran past 245 s on the
    H100 machine (2026-11-26)."""
    w, t = max(0, int(num_workers)), max(1, int(main_threads))
    # W + 1 always (the pass's own speed reads it, also with more workers than cores)
    top = w + t if cores is None else max(w + 1, min(w + t, int(cores) + 1))
    ks = {1, *range(max(1, w - 1), w + 2), top}
    if cores is not None and w + 1 < int(cores) < top:
        ks.add(int(cores))
    return sorted(ks)


def measure_machine(device: str, max_workers: int, cores: int | None = None) -> Machine:
    import torch


    cores = monitor.usable_cores() if cores is None else int(cores)
    threads = {}
    for w in range(0, max_workers + 1):
        t = main_threads_for(SimpleNamespace(num_workers=w), device)
        threads[w] = int(t if t is not None else torch.get_num_threads())
    cap = cpu_capacity(list(range(1, max_workers + 2)) + [cores])
    return Machine(cores, cap.get(cores, max(cap.values())), str(device).startswith("cuda"), threads, cap)


# ---------------------------------------------------------------- inside a worker


class _CollateProbe:
    """Items collated inside a worker, each batch returned with its worker-side clocks."""

    def __init__(self, items, collate, batches: int):
        self.items, self.collate, self.n = items, collate, batches

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, k):
        c0, t0 = time.process_time(), time.perf_counter()
        batch = self.collate(self.items)
        t1, c1 = time.perf_counter(), time.process_time()
        return batch, np.array([t0, t1, c0, c1])


def probe_worker(items, collate, batches: int = 16) -> dict[str, list[float]]:
    """Collate ``items`` in a one-worker DataLoader, ``batches`` times: per batch, the
    collate in the worker (wall, cpu), the worker's CPU per batch beyond the collate
    (the hand-over: sending a shared-memory batch), and the main process's CPU to
    receive it (process time of the loop, which otherwise only waits)."""
    loader = CheckedDataLoader(_CollateProbe(items, collate, batches), batch_size=None, num_workers=1,
                        prefetch_factor=2)
    stamps = []
    it = iter(loader)
    first = next(it)
    stamps.append(first[1])
    del first
    c0, t0 = time.process_time(), time.perf_counter()
    for _batch, st in it:
        stamps.append(st)
        del _batch
    main_cpu, main_wall = time.process_time() - c0, time.perf_counter() - t0
    del it, loader
    s = np.array(stamps)
    collate_wall = (s[1:, 1] - s[1:, 0]).tolist()
    collate_cpu = (s[1:, 3] - s[1:, 2]).tolist()
    cycle_cpu = np.diff(s[:, 2])          # CPU between the starts of consecutive batches
    hand = np.clip(cycle_cpu - (s[:-1, 3] - s[:-1, 2]), 0, None).tolist()
    n = max(1, len(s) - 1)
    return {"collate_wall": collate_wall, "collate_cpu": collate_cpu, "handover_cpu": hand,
            "receive_cpu": [main_cpu / n], "receive_wall": [main_wall / n]}


class _Tiny:
    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i):
        return i


def startup_s(workers: int, repeats: int = 3) -> list[float]:
    """Seconds from ``iter(loader)`` to a first trivial batch with ``workers`` fresh workers."""
    out = []
    for _ in range(repeats):
        loader = CheckedDataLoader(_Tiny(), batch_size=1, num_workers=workers)
        t0 = time.perf_counter()
        it = iter(loader)
        next(it)
        out.append(time.perf_counter() - t0)
        del it, loader
        progress()
    return out


def _split_xy(batch):
    if isinstance(batch, (list, tuple)) and len(batch) == 2:
        return batch[0], batch[1]
    return batch, None


def batch_nbytes(batch) -> int:
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.numel() * batch.element_size()
    if isinstance(batch, (list, tuple)):
        return sum(batch_nbytes(b) for b in batch)
    return 0


def loop_h2d(batch, device, threads: int, pin: bool = False, batches: int = 8, warmup: int = 2,
             repeats: int = 3) -> tuple[list[float], list[float]]:
    """(wall, cpu) seconds per sample of the training loop's own h2d phase (``timing.run_epoch``:
    the copy to ``device`` and uint8→float), over ``batches`` distinct copies of ``batch`` with
    ``threads`` intra-op threads. Timed inside the loop, not on one batch in a tight loop: the
    loop allocates each batch's float tensors while the previous batch's are still held, so on
    a CPU the conversion pays the page faults of fresh memory (×3–5 the tight loop's time on a
    2-core box), and on CUDA the copies queue as they do in training. ``warmup`` passes first."""
    import torch


    x, y = _split_xy(batch)

    def copy(t):
        if not isinstance(t, torch.Tensor):
            return t
        c = t.clone(memory_format=torch.preserve_format)
        return c.pin_memory() if pin else c

    data = [(copy(x), copy(y)) if y is not None else copy(x) for _ in range(max(2, int(batches)))]
    n = sum(len(_split_xy(b)[0]) for b in data[1:])
    col = PHASES.index("h2d")
    wall: list[float] = []
    cpu: list[float] = []
    for r in range(int(warmup) + int(repeats)):
        c0 = time.process_time()
        et = run_epoch(data, None, device, None, main_threads=threads)
        c1 = time.process_time()
        if r >= warmup:
            h = float(et.phases_s[1:, col].sum())   # the first batch is the loop's own warm-up
            wall.append(h / n)
            busy = float(et.phases_s[1:].sum()) or h
            cpu.append((c1 - c0) * (h / busy) / n if busy > 0 else h / n)
    return wall, cpu


class _Items:
    """A list of samples as a map-style data set (what a ring worker reads with ``dataset[i]``)."""

    def __init__(self, items):
        self.items = list(items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i):
        return self.items[int(i) % len(self.items)]


def ring_unfit(sample) -> str | None:
    """Why the shared-memory ring (``loader="ring"``) cannot carry ``sample``, or None: it carries an
    ``(lr, hr)`` pair of uint8 arrays per sample (an image folder's sample is one image)."""
    def what(x) -> str:
        shape = getattr(x, "shape", None)
        return f"{type(x).__name__}{tuple(shape) if shape is not None else ''}"

    if not isinstance(sample, (tuple, list)) or len(sample) != 2:
        return f"the ring carries (lr, hr) pairs of uint8 arrays; a sample of this data is one {what(sample)}"
    for part in sample:
        arr = np.asarray(part)
        if arr.ndim == 0 or arr.dtype != np.uint8:
            return (f"the ring carries (lr, hr) pairs of uint8 arrays; a sample of this data is "
                    f"({what(sample[0])}, {what(sample[1])})")
    return None


def probe_ring(items: list, batch_size: int, batches: int = 12, skip: int = 3, workers: int = 1,
               loader_cls=None) -> dict:
    """The ring's hand-over measured: one worker fills slots of a shared-memory ring
    (``feedlab.pipeline.ring.RingLoader``) with ``items``; the main process's CPU time
    (``time.thread_time``) per sample to receive each of ``batches`` batches after ``skip``.
    Returns ``receive_cpu`` (s per sample, one value per batch) and ``bytes_per_sample``."""
    loader_cls = RingLoader if loader_cls is None else loader_cls
    n = max(len(items), batch_size) * (skip + batches + 1)
    ds = _Items([items[k % len(items)] for k in range(min(n, len(items) * 4 or 1))])
    ld = loader_cls(ds, batch_size, num_workers=workers, shuffle=False, drop_last=True)
    per: list[float] = []
    nbytes = 0
    seen = 0
    try:
        while seen < skip + batches:
            it = iter(ld)
            while seen < skip + batches:
                c0 = time.thread_time()
                try:
                    batch = next(it)
                except StopIteration:
                    break
                c1 = time.thread_time()
                if seen >= skip:
                    per.append((c1 - c0) / batch_size)
                    nbytes = sum(int(np.asarray(b).nbytes) for b in batch)
                seen += 1
            close = getattr(it, "close", None)
            if close is not None:
                close()
    finally:
        close = getattr(ld, "close", None)
        if close is not None:
            close()
    return {"receive_cpu": per, "bytes_per_sample": nbytes / batch_size if batch_size else 0.0}
