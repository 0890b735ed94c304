"""Notebook 05's stores and loops: what each row reads, and how (re-exported by
:mod:`feedlab.experiments.storage_formats`, which times them).

``open_format`` opens a format's store (its first ``samples``; ``zarr`` hides batched
reads behind :class:`PerSample`), ``loaders_for`` lists the loops a format is read by,
``make_loader`` builds one (``plain``, ``batched``, ``chunk``, ``dl_w<N>``), ``read_epoch``
times a pass that does nothing else, and ``_shutdown`` / ``_close`` release workers and
every per-process handle (so an eviction can take the pages).
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Sequence

import torch
from torch.utils.data import DataLoader, Dataset

from feedlab import cache, formats
from feedlab.formats._common import LazyHandle
from feedlab.loaders import BatchReadLoader, ChunkLoader, plain_loop
from feedlab.timing import PhaseTimer, owned_iterator

FORMAT_NAMES = ("png", "hdf5", "zarr", "zarr_chunk", "npy", "npy_mmap", "pt", "lmdb", "lmdb_raw")
# the store each row reads (zarr_chunk is the zarr store read chunk-aligned)
STORE = {"zarr_chunk": "zarr"}
BATCHED = ("lmdb", "lmdb_raw", "hdf5", "npy_mmap")
CHUNKED = ("zarr_chunk", "npy_mmap", "hdf5")
# files under the set's root that each store occupies (for eviction)
STORE_PATHS = {"png": ("hr", "lr"), "lmdb": ("lmdb",), "lmdb_raw": ("lmdb_raw",), "hdf5": ("sr.h5",),
               "zarr": ("sr.zarr",), "npy": ("npy",), "npy_mmap": ("npy_mmap",), "pt": ("pt",)}


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

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i):
        return self.base[i]


def store_of(fmt: str) -> str:
    return STORE.get(fmt, fmt)


def store_files(root, fmt: str) -> list[Path]:
    root = Path(root)
    return cache.files_under(*(root / p for p in STORE_PATHS[store_of(fmt)]))


def open_format(root, fmt: str, samples: int | None = None, verify: bool = False):
    """The store ``fmt`` reads, its first ``samples``; ``verify``: the per-sample checksum
    check on read (off: read speed alone)."""
    store = store_of(fmt)
    if fmt == "zarr":
        ds = PerSample(formats.open_dataset(root, "zarr", cache_chunk=False, verify=verify))
        return Head(ds, samples)
    return Head(formats.open_dataset(root, store, verify=verify), samples)


def loaders_for(fmt: str, worker_counts: Sequence[int]) -> list[str]:
    if fmt == "zarr_chunk":
        return ["chunk", "dl_w0", "dl_w1", *[f"dl_w{w}" for w in worker_counts]]
    out = ["plain", "dl_w0", "dl_w1", *[f"dl_w{w}" for w in worker_counts]]
    if fmt in BATCHED:
        out.append("batched")
    if fmt in CHUNKED:
        out.append("chunk")
    return list(dict.fromkeys(out))


class SortedBatches:
    """Each batch of ``sampler`` with its indices sorted: the same set of samples (order
    within a batch does not matter to SGD), but contiguous blocks become one read
    (HDF5 ``read_direct`` of an aligned block)."""

    def __init__(self, sampler):
        self.sampler = sampler

    def __iter__(self):
        for b in self.sampler:
            yield sorted(b)

    def __len__(self) -> int:
        return len(self.sampler)


def make_loader(ds, fmt: str, loader: str, batch_size: int, seed: int = 0, collate_fn=None):
    if loader == "plain":
        return plain_loop(ds, batch_size, collate=collate_fn, seed=seed)
    if loader == "batched":
        return BatchReadLoader(ds, batch_size, seed=seed)
    if loader == "chunk":
        if getattr(ds, "chunk_len", None):
            return ChunkLoader(ds, batch_size, seed=seed)
        from feedlab.formats.chunks import ChunkBatchSampler

        # no chunks (contiguous HDF5): blocks of batch_size in shuffled order, sorted within
        return BatchReadLoader(ds, batch_size, seed=seed, batch_sampler=SortedBatches(
            ChunkBatchSampler(len(ds), batch_size, batch_size, seed=seed)))
    if loader.startswith("dl_w"):
        w = int(loader[4:])
        kw = dict(num_workers=w, persistent_workers=w > 0, collate_fn=collate_fn)
        if fmt == "zarr_chunk":  # the chunk sampler: one slice per batch
            from feedlab.formats.chunks import ChunkBatchSampler

            return DataLoader(ds, batch_sampler=ChunkBatchSampler(len(ds), ds.chunk_len, batch_size,
                                                                  seed=seed), **kw)
        g = torch.Generator()
        g.manual_seed(seed)
        return DataLoader(ds, batch_size=batch_size, shuffle=True, generator=g, **kw)
    raise ValueError(f"unknown loader {loader!r}")


def num_workers_of(loader: str) -> int:
    return int(loader[4:]) if loader.startswith("dl_w") else 0


def read_epoch(loader) -> tuple[float, int, int]:
    """One pass, nothing else: (seconds blocked in next(), samples, batches)."""
    timer = PhaseTimer("cpu")
    n = 0
    with owned_iterator(loader) as it:
        while True:
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


def _shutdown(loader) -> None:
    it = getattr(loader, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()


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
