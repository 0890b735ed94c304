"""Chunk-aligned sampling for chunked stores (Zarr, a memory-mapped .npy, HDF5 blocks).

Random single-sample reads from a chunked store decode a whole chunk per
sample. Reading whole chunks in shuffled chunk order, shuffled within each
chunk, keeps most of the randomness and reads every chunk once per epoch.

``ChunkBatchSampler`` yields lists of indices (use it as a DataLoader
``batch_sampler``; a batch never spans two chunks, so a dataset's
``__getitems__`` reads exactly one chunk slice per batch). ``ChunkSampler``
yields the same order one index at a time (a DataLoader ``sampler``).
Each epoch visits every index exactly once; successive ``__iter__`` calls use
successive epochs (``set_epoch`` overrides), so orders differ between epochs
and are reproducible for a seed.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
from torch.utils.data import Sampler


class ChunkBatchSampler(Sampler[list[int]]):
    def __init__(self, n: int, chunk_len: int, batch_size: int | None = None, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False):
        if n < 0 or chunk_len <= 0:
            raise ValueError(f"need n >= 0 and chunk_len > 0, got n={n}, chunk_len={chunk_len}")
        if batch_size is not None and batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.n = int(n)
        self.chunk_len = int(chunk_len)
        self.batch_size = None if batch_size is None else int(batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.epoch = 0

    @classmethod
    def for_dataset(cls, dataset, **kw) -> "ChunkBatchSampler":
        """Aligned to ``dataset.chunk_len`` (Zarr chunk, or the npy_mmap block)."""
        return cls(len(dataset), dataset.chunk_len, **kw)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    @property
    def n_chunks(self) -> int:
        return -(-self.n // self.chunk_len)

    def _chunk_sizes(self):
        return [min(self.chunk_len, self.n - c * self.chunk_len) for c in range(self.n_chunks)]

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        self.epoch += 1
        order = rng.permutation(self.n_chunks) if self.shuffle else np.arange(self.n_chunks)
        for c in order:
            lo = int(c) * self.chunk_len
            hi = min(lo + self.chunk_len, self.n)
            idx = (rng.permutation(hi - lo) + lo) if self.shuffle else np.arange(lo, hi)
            idx = idx.tolist()
            if self.batch_size is None:
                yield idx
                continue
            for s in range(0, len(idx), self.batch_size):
                b = idx[s:s + self.batch_size]
                if len(b) < self.batch_size and self.drop_last:
                    break
                yield b

    def __len__(self) -> int:
        if self.batch_size is None:
            return self.n_chunks
        if self.drop_last:
            return sum(s // self.batch_size for s in self._chunk_sizes())
        return sum(-(-s // self.batch_size) for s in self._chunk_sizes())


class ChunkSampler(Sampler[int]):
    """The order of ``ChunkBatchSampler`` (whole chunks), one index at a time."""

    def __init__(self, n: int, chunk_len: int, shuffle: bool = True, seed: int = 0):
        self._batches = ChunkBatchSampler(n, chunk_len, None, shuffle, seed)

    @classmethod
    def for_dataset(cls, dataset, **kw) -> "ChunkSampler":
        return cls(len(dataset), dataset.chunk_len, **kw)

    def set_epoch(self, epoch: int) -> None:
        self._batches.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        for b in self._batches:
            yield from b

    def __len__(self) -> int:
        return self._batches.n


def group_by_chunk(indices, chunk_len: int):
    """Yield ``(lo, hi, positions, rows)``: for each chunk the indices touch, the row
    span ``[lo, hi)`` to read once, the positions in ``indices`` it serves, and
    the rows within the span."""
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size == 0:
        return
    lo, hi = int(idx.min()), int(idx.max()) + 1
    if lo // chunk_len == (hi - 1) // chunk_len:  # one chunk (a chunk-aligned batch): no sort
        yield lo, hi, np.arange(idx.size), idx - lo
        return
    chunk = idx // chunk_len
    order = np.argsort(chunk, kind="stable")
    sorted_chunks = chunk[order]
    bounds = np.flatnonzero(np.diff(sorted_chunks)) + 1
    for pos in np.split(order, bounds):
        members = idx[pos]
        lo = int(members.min())
        hi = int(members.max()) + 1
        yield lo, hi, pos, members - lo
