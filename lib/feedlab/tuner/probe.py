"""The tuner's stage probe: what one sample costs in each stage of the user's own loop, and what each
candidate setting is predicted to give from those costs (the doctor's model, :func:`feedlab.doctor.predict.predict`).

One short look, no more (the measured passes decide; this only chooses what to measure):

* fetch (the dataset's ``__getitem__`` / ``__getitems__``) and collate, timed in the main process by the
  stage instrument (``doctor.wrap.timed_in_main``): wall and CPU per sample, so the share of a fetch spent
  *waiting* (storage, network: wall beyond CPU) is known;
* the user's step and the copy to the device on two full batches;
* a one-worker pass of the user's loader: the main process's CPU to receive a batch, the worker's CPU beyond
  fetch and collate (the hand-over), the worker's memory (USS) and how it grows per sample fetched (a dataset
  that is copied on access); a dataset that cannot be sent to a worker is said so here, once.

Nothing is kept but per-sample numbers: the probe's batches are dropped before the trials run.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import queue as queue_mod
import time
from dataclasses import dataclass, field

import numpy as np

from feedlab import monitor, stage, timing
from feedlab import pipeline as pl
from feedlab.doctor import predict as PR
from feedlab.doctor.costs import CostTable, Machine, Stage
from feedlab.doctor.guard import HUNG_HINT, deadline, user_call
from feedlab.doctor.wrap import batch_len, stage_costs, timed_in_main, to_device
from feedlab.errors import one_line
from feedlab.pipeline.shm import CheckedDataLoader

PROBE_S = 0.4          # seconds of fetch + collate in the main process the probe aims at (at least 3 batches)
WORKER_BATCHES = 6     # batches of the one-worker pass after its prefetch


@dataclass
class Probe:
    """Per-sample seconds of each stage (wall, CPU), the worker's memory, and the machine."""
    batch_size: int
    samples: int
    epoch_batches: int
    fetch: tuple[float, float]
    collate: tuple[float, float]
    step: tuple[float, float]
    h2d: float
    handover: float = 0.0                 # worker CPU per sample beyond fetch + collate
    receive: float = 0.0                  # main-process CPU per sample to take a batch from a worker
    worker_uss: float | None = None       # bytes, one worker after the probe's batches
    uss_growth: float = 0.0               # bytes per sample a worker fetched (copy on access)
    batch_bytes: int = 0
    cores: int = 1
    free_cores: float = 1.0
    threads: int = 1
    device: str = "cpu"
    picklable: bool = True
    seconds: float = 0.0
    busy: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def io_share(self) -> float:
        """The share of a fetch spent waiting (wall beyond CPU): 0 for pure compute, near 1 for a remote read."""
        w, c = self.fetch
        return max(0.0, min(1.0, 1.0 - c / w)) if w > 0 else 0.0

    def ceiling(self) -> float | None:
        """samples/s of the step alone (with its copy): what no loader change can pass; None without a step."""
        t = self.step[0] + self.h2d
        return 1.0 / t if self.step[0] > 0 and t > 0 else None

    def table(self) -> CostTable:
        """The doctor's cost table of the user's loader (as ``doctor.user`` builds it), on a machine of
        ``free_cores`` cores (what other programs left during the probe)."""
        B, T = self.batch_size, self.threads
        # a worker waiting on storage holds no core: the model sees the cores as the waiting workers do (each
        # busy only 1 − io_share of its time); the real cores bound the CPU in predict()
        d = max(0.03, 1.0 - self.io_share)
        free = max(0.5, self.free_cores)
        m = Machine(max(self.cores, round(self.cores / d)), free / d, self.device.startswith("cuda"), {0: T}, {}, 1.0)
        t = CostTable(m)
        t[("read", "user", "user")] = Stage("fetch", "your dataset", [self.fetch[0]], [self.fetch[1]])
        t[("decode", "user", "user")] = Stage("decode", "inside fetch", [0.0], [0.0])
        t[("transform", "user", "user")] = Stage("transform", "inside fetch", [0.0], [0.0])
        t[("collate", "user", B)] = Stage("collate", "your collate_fn", [self.collate[0]], [self.collate[1]])
        t[("collate_worker", "user", B)] = Stage("collate", "in a worker", [self.collate[0]], [self.collate[1]])
        t[("handover_worker", "user", B)] = Stage("handover", "worker side", [self.handover], [self.handover])
        t[("receive", "user", B)] = Stage("receive", "main side", [self.receive], [self.receive])
        t[("h2d", "user", B, False, T)] = Stage("h2d", "to the device", [self.h2d], [self.h2d])
        t[("model", B, T)] = Stage("model", "your step", [self.step[0]], [self.step[1]])
        return t

    def predict(self, settings: dict) -> float | None:
        """Predicted samples/s of the user's loop with ``settings`` (``num_workers``, or ``threads`` for the
        threads kind), capped by the step alone."""
        if "threads" in settings:
            rate = self._threads(int(settings["threads"]))
        else:
            spec = pl.PipelineSpec(format="user", decode="user", collate="user", batch_size=self.batch_size,
                                   num_workers=int(settings.get("num_workers", 0)), device=self.device)
            p = PR.predict(self.table(), spec)
            rate = p["predicted_samples_per_s"] if p else None
            if rate is not None and spec.num_workers > 0:      # every stage's CPU on the real free cores
                cpu = self.fetch[1] + self.collate[1] + self.handover + self.receive + self.step[1] + self.h2d
                rate = min(rate, max(0.5, self.free_cores) / cpu) if cpu > 0 else rate
        top = self.ceiling()
        return None if rate is None else (min(rate, top) if top else rate)

    def _threads(self, n: int) -> float:
        """Threads of the training process: ``n`` fetches wait side by side, their CPU part (assumed to hold
        the GIL: the pessimistic case; a fetch that releases it does better, which the trials show) runs one
        at a time beside the step's, all on ``free_cores``."""
        fw, fc = self.fetch
        cw, cc = self.collate
        per = fw + cw
        gil = fc + cc
        terms = [n / per if per > 0 else math.inf, 1.0 / gil if gil > 0 else math.inf]
        cpu = gil + self.step[1] + self.h2d
        terms.append(max(0.5, self.free_cores) / cpu if cpu > 0 else math.inf)
        return float(min(terms))

    def worker_memory(self, workers: int, epochs: int) -> float | None:
        """A worker's projected USS after an epoch (one epoch: it fetched 1/``workers`` of the samples;
        several: it fetches every sample in time), times ``workers``; None where not measured."""
        if not self.worker_uss or workers <= 0:
            return 0.0 if workers <= 0 else None
        touched = self.samples if epochs > 1 else self.samples / workers
        return workers * (self.worker_uss + max(0.0, self.uss_growth) * touched)


def _nbytes(batch) -> int:
    import torch

    if isinstance(batch, torch.Tensor):
        return int(batch.element_size() * batch.nelement())
    if isinstance(batch, np.ndarray):
        return int(batch.nbytes)
    if isinstance(batch, dict):
        return sum(_nbytes(v) for v in batch.values())
    if isinstance(batch, (list, tuple)):
        return sum(_nbytes(v) for v in batch)
    return 0


def _isolation(loader, limit):
    q: queue_mod.SimpleQueue = queue_mod.SimpleQueue()
    iso = timed_in_main(loader, q)
    B = loader.batch_size or getattr(loader.batch_sampler, "batch_size", None)
    kept, t0, n, it = [], time.perf_counter(), 0, iter(iso)
    try:
        while n < len(iso) and (n < 3 or time.perf_counter() - t0 < PROBE_S):
            with deadline(limit, f"batch {n} of your loader (the tuner's probe)", HUNG_HINT):
                b = user_call("your loader (fetch + collate)", next, it)
            n += 1
            if len(kept) < 2 and batch_len(b) == B:
                kept.append(b)
    finally:
        del it
    costs = stage_costs(q)
    med = lambda xs: float(np.median(xs)) if xs else 0.0  # noqa: E731
    return kept, (med(costs["fetch"][0]), med(costs["fetch"][1])), (med(costs["collate"][0]),
                                                                    med(costs["collate"][1]))


def _step_costs(step, kept, device, limit) -> tuple[tuple[float, float], float]:
    if not kept:
        return (0.0, 0.0), 0.0
    B = batch_len(kept[0]) or 1
    t0 = time.perf_counter()
    for b in kept:
        to_device(b, device)
    h2d = (time.perf_counter() - t0) / (len(kept) * B)
    if step is None:
        return (0.0, 0.0), h2d
    on_dev = [to_device(b, device) for b in kept]
    user_call("your step(batch)", step, on_dev[0], limit_s=limit)
    walls, cpus = [], []
    for _ in range(2):
        for b in on_dev:
            timing.sync_device(device)
            t0, c0 = time.perf_counter(), time.process_time()
            user_call("your step(batch)", step, b, limit_s=limit)
            timing.sync_device(device)
            walls.append((time.perf_counter() - t0) / B)
            cpus.append((time.process_time() - c0) / B)
    return (float(np.median(walls)), float(np.median(cpus))), h2d


def _worker_pass(loader, probe: Probe, limit) -> None:
    """A one-worker pass: receive CPU in the main process, hand-over CPU and memory in the worker."""
    import psutil

    me = psutil.Process()
    before = {p.pid for p in me.children()}
    one = stage.rebuild(loader, num_workers=1, loader_class=CheckedDataLoader)   # out of /dev/shm: one line
    it = None
    try:
        with deadline(limit, "starting one worker of your loader (the tuner's probe)", HUNG_HINT):
            it = iter(one)
            next(it)
        kids = [p for p in me.children() if p.pid not in before]
        if not kids:
            return
        w = kids[0]
        for _ in range(2):      # what the worker prefetched meanwhile
            with deadline(limit, "a batch from one worker (the tuner's probe)", HUNG_HINT):
                next(it)
        uss0, cpu0 = w.memory_full_info().uss, sum(w.cpu_times()[:2])
        c0 = time.process_time()
        n = 0
        for _ in range(WORKER_BATCHES):
            with deadline(limit, "a batch from one worker (the tuner's probe)", HUNG_HINT):
                try:
                    n += batch_len(next(it)) or 0
                except StopIteration:
                    break
        if n:
            probe.receive = (time.process_time() - c0) / n
            work = (sum(w.cpu_times()[:2]) - cpu0) / n
            probe.handover = max(0.0, work - probe.fetch[1] - probe.collate[1])
            uss1 = w.memory_full_info().uss
            probe.worker_uss, probe.uss_growth = float(uss1), max(0.0, (uss1 - uss0) / n)
    except (psutil.Error, StopIteration):
        pass
    except Exception as exc:   # the dataset cannot reach a worker (pickling for spawn/forkserver), or its fetch
        text = one_line(exc)
        if "pickl" in text.lower() or "can't get attribute" in text.lower() or "lambda" in text.lower():
            probe.picklable = False
            probe.notes.append(f"your dataset cannot be pickled for a worker process ({type(exc).__name__}: {text}); "
                               "worker processes are left out, threads tried instead")
        else:
            raise
    finally:
        if it is not None:
            stage.stop(one, it)


def probe(loader, step=None, device: str = "cpu", deadline_s: float | None = 120.0,
          load_window=monitor.LoadWindow) -> Probe:
    """The stage probe of the user's ``loader`` (this module's docstring)."""
    import torch

    t0 = time.perf_counter()
    window = load_window()
    kept, fetch, collate = _isolation(loader, deadline_s)
    step_c, h2d = _step_costs(step, kept, device, deadline_s)
    B = int(loader.batch_size or getattr(loader.batch_sampler, "batch_size", None)
            or (batch_len(kept[0]) if kept else 1) or 1)
    p = Probe(B, len(loader.dataset), len(loader), fetch, collate, step_c, h2d,
              batch_bytes=_nbytes(kept[0]) if kept else 0, cores=monitor.usable_cores(),
              threads=torch.get_num_threads(), device=str(device))
    del kept
    ctx = loader.multiprocessing_context or mp.get_context()
    ctx = mp.get_context(ctx) if isinstance(ctx, str) else ctx
    if ctx.get_start_method() != "fork":
        p.notes.append(f"your loader starts workers by {ctx.get_start_method()} (the dataset is pickled into each)")
    _worker_pass(loader, p, deadline_s)
    s = window.summary()
    if s.get("available"):
        p.free_cores = max(0.5, float(s["usable_cores"]) - float(s.get("other_cpu_cores", 0.0)))
        if s.get("busy"):
            p.busy = (f"other processes used {s['other_cpu_cores']:.2f} of {s['usable_cores']} usable cores "
                      f"({s['other_fraction']:.0%}) during the probe")
    else:
        p.free_cores = float(p.cores)
    p.seconds = time.perf_counter() - t0
    return p
