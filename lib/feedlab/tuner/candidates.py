"""What the tuner may change, where it applies, within which limits, and how a setting becomes a loader and
a line to paste.

A setting is a small dict against the user's start: ``{"num_workers": 6}``, ``{"num_workers": 2,
"persistent_workers": True}``, ``{"kind": "threads", "threads": 8}``. Each applies only where it can:

* ``num_workers`` 0 … the cores, and above them (doubling, up to :data:`MAX_WORKERS`) where a fetch waits
  (its wall time beyond its CPU time: storage latency, a network read);
* ``persistent_workers`` for several epochs (workers kept between epochs), ``pin_memory`` on CUDA;
* threads of the training process instead of worker processes (:class:`feedlab.tuner.threads.ThreadedLoader`);
  always priced, measured where predicted to compete, and the only kind left where the dataset cannot be
  pickled for the loader's process context;
* ``prefetch_factor`` 4 where fetch times are irregular (a queue deeper than 2 per worker absorbs a slow one).

Kept as they are, and why (:data:`KEPT`): the batch size, the model and the precision (the recipe); the
multiprocessing context (it changes start-up only, which a steady window leaves out; a context that cannot
pickle the dataset sends the tuner to threads); the batched fetch (``__getitems__``: the DataLoader and the
threads kind already call it where the dataset has it); the shared-memory ring (it fills feedlab's own
fixed-size uint8 slots: ``feedlab-doctor --data`` prices it for feedlab's pipelines, not for a user's
collate). Limits: each worker's projected memory (USS, measured in the probe, grown by what it copies per
sample) × workers within ``ram_share`` of the RAM available, and the batches in flight within half of /dev/shm.
"""

from __future__ import annotations

import math
import shutil

from feedlab import stage
from feedlab.pipeline.shm import CheckedDataLoader  # workers out of /dev/shm: one line, no torch_* files left

from .probe import Probe
from .threads import ThreadedLoader

MAX_WORKERS = 32
IO_WAIT = 0.3        # a fetch waiting this share of its wall time or more: workers above the cores, threads
KEPT = {
    "batch size, model, precision": "the recipe: never changed by the tuner",
    "multiprocessing context": "changes start-up only (left out of a steady window); kept unless it cannot pickle "
                               "the dataset (then threads)",
    "batched fetch (__getitems__)": "already called by the DataLoader and the threads kind where the dataset has it",
    "shared-memory ring": "fills feedlab's own uint8 slots; priced by feedlab-doctor --data for feedlab's pipelines",
}


def name_of(settings: dict) -> str:
    """``num_workers=4, persistent_workers=True``; ``start`` for no change; threads as ``threads=8``."""
    if not settings:
        return "start"
    if settings.get("kind") == "threads":
        return f"threads={settings['threads']}"
    return ", ".join(f"{k}={v}" for k, v in settings.items())


def start_settings(loader) -> dict:
    """The user's own settings in the tuner's words (what a setting's name is read against)."""
    out = {"num_workers": int(loader.num_workers)}
    if loader.num_workers:
        out.update(prefetch_factor=loader.prefetch_factor, persistent_workers=bool(loader.persistent_workers))
    out["pin_memory"] = bool(loader.pin_memory)
    return out


def worker_ladder(probe: Probe, max_workers: int | None = None) -> list[int]:
    """0 … the cores (each count to 4, then a ladder), and above them by doubling where the fetch waits (up to
    what would hide the wait)."""
    C = max(1, probe.cores)
    top = C
    if probe.io_share >= IO_WAIT:
        top = min(MAX_WORKERS, max(2 * C, math.ceil(C / max(0.03, 1.0 - probe.io_share))))
    if max_workers is not None:
        top = min(top, int(max_workers))
    # every count to 4, then powers of two, three quarters of the cores, cores − 1 and the cores (16 cores: 0 1 2 3 4
    # 8 12 15 16, not all 17: an exhaustive grid over them stays inside a GPU loan)
    ws = {w for w in {0, 1, 2, 3, 4, (3 * C) // 4, C - 1, C} | {2 ** k for k in range(C.bit_length())}
          if 0 <= w <= min(C, top)}
    w = C
    while w < top:
        w *= 2
        ws.add(min(w, top))
    return sorted(ws)


def thread_ladder(probe: Probe, max_workers: int | None = None) -> list[int]:
    top = max(worker_ladder(probe, max_workers)[-1], 2 * max(1, probe.cores))
    out, t = [], 2
    while t <= top:
        out.append(t)
        t *= 2
    return out or [2]


def limits(probe: Probe, workers: int, epochs: int, ram_bytes: float | None, prefetch: int = 2) -> str | None:
    """Why ``workers`` worker processes are over a limit, or None."""
    if workers <= 0:
        return None
    mem = probe.worker_memory(workers, epochs)
    if ram_bytes is not None and mem is not None and mem > ram_bytes:
        return (f"{workers} workers × {mem / workers / 2**20:.0f} MiB each (measured USS, grown by what a worker "
                f"copies per sample) = {mem / 2**20:.0f} MiB, over the {ram_bytes / 2**20:.0f} MiB allowed")
    try:
        free = shutil.disk_usage("/dev/shm").free
    except OSError:
        return None
    flight = probe.batch_bytes * workers * prefetch
    if flight > free / 2:
        return (f"{workers} workers × {prefetch} batches in flight × {probe.batch_bytes / 2**20:.1f} MiB = "
                f"{flight / 2**20:.0f} MiB, over half of /dev/shm's {free / 2**20:.0f} MiB free")
    return None


def grid(probe: Probe, loader, epochs: int = 1, ram_bytes: float | None = None,
         max_workers: int | None = None) -> tuple[list[dict], list[dict]]:
    """Every setting the tuner may try on this loader (``[settings]``), and those left out with why
    (``[{"settings", "why"}]``)."""
    cuda = probe.device.startswith("cuda")
    extra: dict = {}
    if epochs > 1:
        extra["persistent_workers"] = True
    if cuda and not loader.pin_memory:
        extra["pin_memory"] = True
    out, left = [], []
    for w in worker_ladder(probe, max_workers):
        s = {"num_workers": w, **(extra if w else {})}
        if w and not probe.picklable:
            left.append({"settings": s, "why": "your dataset cannot be pickled for the loader's process context"})
            continue
        why = limits(probe, w, epochs, ram_bytes, int(loader.prefetch_factor or 2))
        (left.append({"settings": s, "why": why}) if why else out.append(s))
    out += [{"kind": "threads", "threads": t} for t in thread_ladder(probe, max_workers)]
    return out, left


def exhaustive(probe: Probe, loader, max_workers: int | None = None) -> list[dict]:
    """Every setting a user could pick by hand in the tuner's space, for an exhaustive search (notebook 16's
    ground truth): each worker count of the ladder with and without persistent workers (pinned on CUDA, as the
    tuner pins), and each thread count.
    A setting at its DataLoader default leaves the key out (so it is named as the tuner names it)."""
    pin = {"pin_memory": True} if probe.device.startswith("cuda") and not loader.pin_memory else {}
    out: list[dict] = []
    for w in worker_ladder(probe, max_workers):
        if w and not probe.picklable:
            continue
        out.append({"num_workers": w, **(pin if w else {})})
        if w:
            out.append({"num_workers": w, "persistent_workers": True, **pin})
    return out + [{"kind": "threads", "threads": t} for t in thread_ladder(probe, max_workers)]


def same(settings: dict, start: dict) -> bool:
    """Whether ``settings`` leaves the user's loader as it is."""
    if settings.get("kind") == "threads":
        return False
    return all(start.get(k) == v for k, v in settings.items())


def changed(settings: dict, start: dict) -> dict:
    """What ``settings`` changes against the start (``{}``: nothing)."""
    if settings.get("kind") == "threads":
        return dict(settings)
    return {k: v for k, v in settings.items() if start.get(k) != v}


def build(loader, settings: dict):
    """A fresh loader: the user's ``loader`` with ``settings`` (dataset, sampler, collate, order and batch
    size kept by ``stage.rebuild``)."""
    if settings.get("kind") == "threads":
        return ThreadedLoader(loader, threads=int(settings["threads"]))
    w = int(settings.get("num_workers", loader.num_workers))
    return stage.rebuild(loader, num_workers=w, pin_memory=settings.get("pin_memory"), loader_class=CheckedDataLoader,
                         prefetch_factor=settings.get("prefetch_factor"),
                         persistent_workers=settings.get("persistent_workers") if w else None)


def paste_line(loader, settings: dict) -> str:
    """The user's ``DataLoader(...)`` call with what changed (the rest of the call as it is)."""
    B = loader.batch_size or getattr(loader.batch_sampler, "batch_size", None)
    if not settings:
        return "keep your DataLoader(...) as it is"
    if settings.get("kind") == "threads":
        return (f"loader = feedlab.tuner.ThreadedLoader(DataLoader(dataset, batch_size={B}, ...), "
                f"threads={settings['threads']})  # your DataLoader call as it is, num_workers=0")
    args = ", ".join(f"{k}={v!r}" for k, v in settings.items())
    return f"DataLoader(dataset, batch_size={B}, ..., {args})  # the rest of your call as it is"
