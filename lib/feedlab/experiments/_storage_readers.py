"""Notebook 05's settings, stores and loops (re-exported by
:mod:`feedlab.experiments.storage_formats`, which times them).

Every setting is a :class:`feedlab.pipeline.PipelineSpec` of ``(format, loader, num_workers)``
built from the registries: the formats (``feedlab.formats``) and the loader kinds
(``feedlab.pipeline.kinds``); a format's capabilities decide which kinds apply (``settings``).
A new format appears here by its store and its one registration. ``open_format`` opens a
setting's store (its first ``samples``; Zarr read by any kind that is not chunk- or
batch-aligned (``PER_SAMPLE_KINDS``) hides its batched reads behind :class:`PerSample`: one ``arr[i]`` per sample),
``make_loader`` builds the loader through ``pipeline.make_loader``, ``read_epoch`` times a pass
that does nothing else, ``read_steady`` a steady window of such reads (warm-up left out, epochs chained
by :class:`Cycling` where the set is short, timed to a stated precision: ``pipeline.rates.SteadyStop``), ``_shutdown`` / ``_close`` release workers and every per-process handle
(so an eviction can take the pages). ``loader_words`` says what a setting's loader is, in words.
"""

from __future__ import annotations

import gc
import math
from pathlib import Path
from typing import Sequence

from torch.utils.data import Dataset

from feedlab import cache, formats
from feedlab.experiments.loader_grid import grid
from feedlab.formats._common import LazyHandle
from feedlab.pipeline import MIN_TIMED_BATCHES, PipelineSpec, SteadyStop
from feedlab.pipeline import make_loader as _pipeline_loader
from feedlab.pipeline.kinds import LOADER_KINDS
from feedlab.timing import PhaseTimer, owned_iterator

#: the collate every setting uses: a uint8 copy into the batch (slot-filling kinds require one)
COLLATE = "fast"
#: kinds that ask the dataset for one sample at a time: Zarr read by them is read one ``arr[i]``
#: per sample ("random ids"); every other kind reads whole batches (``read_batch``)
PER_SAMPLE_KINDS = ("dataloader", "plain")


class Head(Dataset):
    """The first ``n`` samples of a dataset; forwards the batched paths."""

    def __init__(self, base, n: int | None):
        self.base = base
        self.n = len(base) if n is None else min(int(n), len(base))
        for attr in ("lr_shape", "hr_shape", "chunk_len"):
            if hasattr(base, attr):
                setattr(self, attr, getattr(base, attr))
        if hasattr(base, "__getitems__"):
            self.__getitems__ = base.__getitems__
        if hasattr(base, "read_batch"):
            self.read_batch = base.read_batch

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return self.base[i]


class PerSample(Dataset):
    """Hides batched reads: DataLoader and plain_loop then call ``__getitem__`` per index
    (Zarr "random ids": one independent ``arr[i]`` per sample)."""

    def __init__(self, base):
        self.base = base
        for attr in ("lr_shape", "hr_shape"):
            if hasattr(base, attr):
                setattr(self, attr, getattr(base, attr))

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i):
        return self.base[i]


def kinds_for(fmt: str, loaders: Sequence[str] | None = None) -> list[str]:
    """The loader kinds that can read format ``fmt`` (its capabilities against each kind's
    requirements), in registry order; ``loaders`` limits them."""
    caps = formats.get_format(fmt).capabilities()
    return [k for k, kind in LOADER_KINDS.items() if (loaders is None or k in loaders)
            and all(caps.get(c) for c in kind.requires)]


def settings(fmts: Sequence[str], worker_counts: Sequence[int], batch_size: int,
             loaders: Sequence[str] | None = None) -> list[PipelineSpec]:
    """Every ``(format, loader, num_workers)`` 05 times: per format, each kind it can feed
    (:func:`kinds_for`); the DataLoader with 0, 1 and each of ``worker_counts`` workers, the
    other multi-process kinds with each of ``worker_counts``, the single-process kinds alone.
    A setting whose ``problems()`` are not empty is left out."""
    out: list[PipelineSpec] = []
    for fmt in fmts:
        for kind in kinds_for(fmt, loaders):
            w = LOADER_KINDS[kind].workers
            counts = [0] if w == "none" else sorted({0, 1, *worker_counts}) if w == "any" else \
                sorted({int(n) for n in worker_counts if int(n) >= 1})
            if not counts:
                continue
            out += [s for s in grid(format=fmt, loader=kind, num_workers=counts, batch_size=batch_size,
                                    collate=COLLATE, persistent_workers=False, device="cpu")]
    return [s.replace(persistent_workers=s.num_workers > 0) for s in out
            if not s.replace(persistent_workers=s.num_workers > 0).problems("cpu")]


MODE_WORDS = {"read": "reading alone", "train": "with a training step", "cold": "cold page cache"}

#: the order of kinds within a tier: one process (a batch per read, whole chunks, a sample at a time),
#: the DataLoader with 1 then more workers, the ring, threads, the DataLoader without workers last
_KIND_ORDER = ("batched", "chunk", "plain", "dataloader", "ring", "threads")
#: the formats the write-ups' claims compare (PNG standing in for their ImageFolder), first in their tier
CLAIM_FORMATS = ("png", "hdf5", "zarr")


def priority(spec: PipelineSpec) -> tuple:
    """A setting's place within its tier (:data:`_KIND_ORDER`; the DataLoader by 1 then more workers,
    without workers after every other kind)."""
    if spec.loader == "dataloader" and not spec.num_workers:
        return (len(_KIND_ORDER) + 1, 0)
    return (_KIND_ORDER.index(spec.loader) if spec.loader in _KIND_ORDER else len(_KIND_ORDER), spec.num_workers)


def tier(mode: str, spec: PipelineSpec, most: int) -> int:
    """How telling a timed setting is, 0 first: 0 the batch- and chunk-aligned readers (the targets
    against the ceiling and the baseline, Zarr by chunks); 1 what the write-ups' claims compare on PNG,
    HDF5 and Zarr (a sample at a time, the DataLoader with 1 and with the most workers, reading alone and
    with a training step); 2 a sample at a time and 1 worker on the other formats; 3 the most workers and
    the ring; 4 the other training steps and the cold cache; 5 threads and the DataLoader without workers."""
    dl = spec.loader == "dataloader"
    one_or_most = dl and spec.num_workers in (1, most) and spec.num_workers > 0
    if mode == "read" and spec.loader in ("batched", "chunk"):
        return 0
    if spec.format in CLAIM_FORMATS and ((mode == "read" and (spec.loader == "plain" or one_or_most))
                                         or (mode == "train" and dl and spec.num_workers == most > 0)):
        return 1
    if mode == "read" and (spec.loader == "plain" or (dl and spec.num_workers == 1)):
        return 2
    if mode == "read" and ((dl and spec.num_workers == most > 0) or spec.loader == "ring"):
        return 3
    return 4 if mode in ("train", "cold") else 5


def plan(grid_: Sequence[PipelineSpec], fmts: Sequence[str], batch_size: int, with_model: bool, cold: bool,
         most: int) -> list[tuple[str, PipelineSpec]]:
    """``(mode, spec)`` in the order a budget should spend on them (:func:`tier`, reads before training
    steps, then :func:`priority`, then the formats' order): every setting read alone; with ``with_model`` the single-process kinds and the
    DataLoader with ``most`` workers with a training step; with ``cold`` one single-process kind per
    format (whole chunks where it has them) after an eviction."""
    todo = [("read", s) for s in grid_]
    if with_model:
        todo += [("train", s) for s in grid_ if (s.num_workers == 0 and s.loader != "dataloader")
                 or (s.loader == "dataloader" and s.num_workers == most)]
    if cold:
        for fmt in fmts:
            kinds = [k for k in ("chunk", "plain") if k in kinds_for(fmt)]
            if kinds:
                todo.append(("cold", PipelineSpec(format=fmt, loader=kinds[0], collate=COLLATE,
                                                  batch_size=batch_size, device="cpu")))
    order = list(fmts)
    # within a tier every read comes before a training step: a step's window costs tens of reads' on a CPU
    return sorted(todo, key=lambda t: (tier(t[0], t[1], most), t[0] == "train", priority(t[1]),
                                       order.index(t[1].format) if t[1].format in order else len(order)))


def as_spec(setting, batch_size: int | None = None) -> PipelineSpec:
    """A setting as a spec: a ``PipelineSpec`` as it is, or a format name read by the DataLoader."""
    if isinstance(setting, PipelineSpec):
        return setting if batch_size is None else setting.replace(batch_size=batch_size)
    return PipelineSpec(format=setting, collate=COLLATE, batch_size=batch_size or 64, device="cpu")


def variant(spec: PipelineSpec) -> str:
    """The key a setting's rows and payload entries carry. It is the key the claims ledger and
    the committed results read (``format/loader``, Zarr read chunk by chunk as ``zarr_chunk``,
    the DataLoader by its worker count), so runs before and after the loader-kind registry
    compare; readers never see it (:func:`loader_words`, :func:`setting_words`)."""
    fmt = "zarr_chunk" if (spec.format == "zarr" and spec.loader == "chunk") else spec.format
    if spec.loader == "dataloader":
        return f"{fmt}/dl_w{spec.num_workers}"
    if spec.num_workers:
        return f"{fmt}/{spec.loader}_w{spec.num_workers}"
    return f"{fmt}/{spec.loader}"


#: a loader kind in words: what a reader of a table or a legend reads
KIND_WORDS = {"plain": "one process, a sample at a time", "batched": "one process, a batch per read",
              "chunk": "one process, whole chunks", "ring": "a shared-memory ring",
              "threads": "one process, threads filling batch slots"}


def loader_words(loader: str, num_workers: int = 0) -> str:
    """``("dataloader", 2)`` → "DataLoader, 2 workers"; ``("chunk", 0)`` → "one process, whole chunks"."""
    n = int(num_workers)
    if loader == "dataloader":
        return f"DataLoader, {n} worker{'s' if n != 1 else ''}" if n else "DataLoader, no workers"
    if loader == "threads":
        return f"one process, {n} thread{'s' if n != 1 else ''} filling batch slots"
    words = KIND_WORDS.get(loader, loader)
    return f"{words}, {n} worker{'s' if n != 1 else ''}" if n else words


def setting_words(spec: PipelineSpec) -> str:
    """A setting in words: "zarr, one process, whole chunks"."""
    return f"{spec.format}, {loader_words(spec.loader, spec.num_workers)}"


def store_files(root, fmt: str) -> list[Path]:
    """The files of format ``fmt``'s store under ``root`` (the store says which: ``store_files``)."""
    ds = formats.open_dataset(root, fmt, verify=False)
    try:
        files = ds.store_files(range(len(ds)))
    finally:
        _close(ds)
    return cache.files_under(*files) if files else []


def open_format(root, setting, samples: int | None = None, verify: bool = False):
    """The store a setting reads, its first ``samples``; ``verify``: the per-sample checksum
    check on read (off: read speed alone). Zarr read by a per-sample kind (``PER_SAMPLE_KINDS``)
    is read one ``arr[i]`` at a time (no chunk cache)."""
    spec = as_spec(setting)
    if spec.format == "zarr" and spec.loader in PER_SAMPLE_KINDS:
        ds = PerSample(formats.open_dataset(root, "zarr", cache_chunk=False, verify=verify))
        return Head(ds, samples)
    return Head(formats.open_dataset(root, spec.format, verify=verify), samples)


def make_loader(ds, spec: PipelineSpec, seed: int = 0, collate_fn=None):
    """The setting's loader over ``ds``, built through the loader-kind registry."""
    return _pipeline_loader(ds, spec, seed=seed, collate_fn=collate_fn)


def read_epoch(loader, max_batches: int | None = None) -> tuple[float, int, int]:
    """One pass (or its first ``max_batches``), nothing else: (seconds blocked in next(), samples, batches).
    Not :func:`feedlab.timing.run_epoch`, which copies each batch to the device as float (CPU time in the
    main process that would stand in the reader's measurement)."""
    timer = PhaseTimer("cpu")
    n = nb = 0
    with owned_iterator(loader) as it:
        while max_batches is None or nb < max_batches:
            nb += 1
            timer.start_batch()
            try:
                batch = next(it)
            except StopIteration:
                break
            timer.mark("data_wait")
            n += len(batch[0])
            timer.end_batch()
    phases = timer.finish()
    return float(phases[:, 0].sum()), n, int(len(phases))


class Cycling:
    """``loader`` epoch after epoch (each epoch its own shuffle), without end: the timed pass stops
    itself (a steady window longer than one epoch of a small set). Carries ``num_workers``."""

    def __init__(self, loader):
        self.loader = loader
        self.num_workers = getattr(loader, "num_workers", 0)
        self.epochs = 0

    def __iter__(self):
        while True:
            self.epochs += 1
            got = False
            for batch in self.loader:
                got = True
                yield batch
            if not got:
                raise ValueError("the loader yields no batch: use a smaller batch_size or more samples")


def steady_stop(warmup: int, min_timed: int, precision: float | None, cap_s: float) -> SteadyStop:
    """The stop of a steady window: ``min_timed`` timed batches after ``warmup`` and a second of them, then
    until the 95% interval of the mean batch time is within ``precision`` (None: at the floor), or ``cap_s``."""
    if precision is None:
        return SteadyStop(warmup, min_timed=min_timed, half_width=float("inf"), min_window_s=0.0,
                          max_window_s=cap_s, max_timed=min_timed)
    # the interval by batch means: 10 blocks of 2 or more, or 5 where the floor is under 20 batches
    # a floor under MIN_TIMED_BATCHES lets a precise window stop early; an imprecise one runs on to
    # MIN_TIMED_BATCHES before its cap may end it (a 3 s cap had cut slow reads at 18 batches, neither long nor precise)
    return SteadyStop(warmup, min_timed=min_timed, half_width=precision, max_window_s=cap_s,
                      blocks=10 if min_timed >= 20 else 5, min_capped=MIN_TIMED_BATCHES)


def window_kind(stop: SteadyStop, timed: int) -> str:
    """``steady`` (timed after the warm-up to the precision asked, over ≥ :data:`MIN_TIMED_BATCHES` batches
    or over the stop's floor where a precision was asked and reached: the like-for-like rule's window),
    ``imprecise`` (the cap came before the precision) or ``startup_inclusive`` (too few timed batches)."""
    stop.finish()   # the whole window as timed
    asked = math.isfinite(stop.half_width)
    if timed < MIN_TIMED_BATCHES and not (asked and stop.precise and timed >= stop.min_timed):
        return "startup_inclusive"
    return "steady" if stop.precise else "imprecise"


def read_steady(loader, stop: SteadyStop, max_batches: int = 1_000_000) -> dict:
    """A steady window of reads, nothing else: ``stop.warmup`` batches left out (worker start-up, the
    prefetch drained), then batches (epochs chained, :class:`Cycling`) until ``stop`` says; the
    seconds blocked in ``next()``, samples and batches of the timed ones, the window's wall seconds,
    its rate kind (:func:`window_kind`) and the precision reached (``rate_half_width``)."""
    from time import perf_counter

    warm, done, wait, n, t_first = stop.warmup, 0, 0.0, 0, None
    with owned_iterator(Cycling(loader)) as it:
        while done < max_batches:
            t0 = perf_counter()
            batch = next(it)
            t1 = perf_counter()
            done += 1
            if done == warm:
                t_first = t1
            elif done > warm:
                wait += t1 - t0
                n += len(batch[0])
            if stop(done, t1):
                break
    timed = max(0, done - warm)
    end = stop.ends[-1] if stop.ends else 0.0
    window = end - t_first if t_first is not None else 0.0
    return dict(wait_s=wait, samples=n, batches=timed, warmup_batches=warm, window_s=window,
                rate_kind=window_kind(stop, timed), rate_half_width=stop.achieved)


def _shutdown(loader) -> None:
    it = getattr(loader, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()
    close = getattr(loader, "close", None)
    if close is not None:
        close()


def _close(ds) -> None:
    base = ds
    while hasattr(base, "base"):
        base = base.base
    close = getattr(base, "close", None)
    if close is not None:
        close()
    # readers whose close() leaves a lazily opened map (npy_mmap) still hold its pages:
    # drop every per-process handle, so that an eviction can take them
    for handle in list(vars(base).values()):
        if isinstance(handle, LazyHandle):
            handle.close()
    gc.collect()
