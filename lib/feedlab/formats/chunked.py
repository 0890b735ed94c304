"""Base for stores that hold whole arrays (N,H,W,3): Zarr and the memory-mapped .npy."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ._common import SRDataset
from .chunks import ChunkBatchSampler, ChunkSampler, group_by_chunk


def _own(a: np.ndarray) -> np.ndarray:
    return a if (a.flags.owndata and a.flags.writeable) else a.copy()


class ChunkedSRDataset(SRDataset):
    """Subclasses set ``chunk_len`` and implement ``_read_rows(lo, hi)`` (and
    optionally ``_read_one(i)``), each returning arrays ``(lr, hr)``."""

    chunk_len: int = 128

    def __init__(self, root, as_tensor: bool = False, cache_chunk: bool = False):
        super().__init__(root, as_tensor)
        self.cache_chunk = bool(cache_chunk)
        self._cached = (-1, None, None)

    def _read_rows(self, lo: int, hi: int):  # pragma: no cover
        raise NotImplementedError

    def _read_one(self, i: int):
        lr, hr = self._read_rows(i, i + 1)
        return lr[0], hr[0]

    def read_chunk(self, c: int):
        """Rows of chunk ``c`` as ``(lr, hr)`` arrays (N_c,H,W,3)."""
        lo = int(c) * self.chunk_len
        if not 0 <= lo < self._n:
            raise IndexError(f"{self.fmt}: chunk {c} out of range")
        return self._read_rows(lo, min(lo + self.chunk_len, self._n))

    def _read(self, i: int):
        if not self.cache_chunk:
            lr, hr = self._read_one(i)
            # a view (of a memory map or a decoded chunk) is copied so it pins nothing
            return _own(lr), _own(hr)
        c = i // self.chunk_len
        if self._cached[0] != c:
            lr, hr = self.read_chunk(c)
            self._cached = (c, lr, hr)
        _, lr, hr = self._cached
        r = i - c * self.chunk_len
        return lr[r].copy(), hr[r].copy()

    def read_batch(self, indices: Sequence[int], out=None):
        """One read per chunk touched (a chunk-aligned batch is a single slice)."""
        lr_b, hr_b = self._batch_out(len(indices), out)
        idx = [self._index(i) for i in indices]
        for lo, hi, pos, rows in group_by_chunk(idx, self.chunk_len):
            lr, hr = self._read_rows(lo, hi)
            if len(pos) == hi - lo and np.array_equal(pos, np.arange(pos[0], pos[0] + len(pos))) \
                    and np.array_equal(rows, np.arange(hi - lo)):
                lr_b[pos[0]:pos[0] + len(pos)] = lr  # in order: one block copy
                hr_b[pos[0]:pos[0] + len(pos)] = hr
            else:
                lr_b[pos] = lr[rows]
                hr_b[pos] = hr[rows]
        return lr_b, hr_b

    def __getitems__(self, indices: Sequence[int]) -> list:
        lr_b, hr_b = self.read_batch(indices)
        return [self._wrap(lr_b[k], hr_b[k]) for k in range(len(indices))]

    def chunk_batch_sampler(self, batch_size: int | None = None, shuffle: bool = True, seed: int = 0,
                            drop_last: bool = False) -> ChunkBatchSampler:
        return ChunkBatchSampler(self._n, self.chunk_len, batch_size, shuffle, seed, drop_last)

    def chunk_sampler(self, shuffle: bool = True, seed: int = 0) -> ChunkSampler:
        return ChunkSampler(self._n, self.chunk_len, shuffle, seed)
