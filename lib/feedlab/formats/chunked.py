"""Base for stores that hold whole arrays (N,H,W,3): Zarr and the memory-mapped .npy."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ._common import SRDataset
from .chunks import ChunkBatchSampler, ChunkSampler, group_by_chunk


def _own(a: np.ndarray) -> np.ndarray:
    return a if (a.flags.owndata and a.flags.writeable) else a.copy()


def _take_into(src: np.ndarray, rows: np.ndarray, dst: np.ndarray) -> None:
    """``dst[:] = src[rows]`` without a temporary (``rows`` already bounds-checked)."""
    if dst.flags.c_contiguous:
        np.take(src, rows, axis=0, out=dst, mode="clip")
    else:
        dst[...] = src[rows]


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
        """One read per chunk touched (a chunk-aligned batch is a single slice), gathered
        straight into the batch: ``np.take(..., out=, mode="clip")`` (indices are checked
        first; the default ``mode="raise"`` makes numpy buffer ``out``, an extra copy)."""
        lr_b, hr_b = self._batch_out(len(indices), out)
        idx = self._indices(indices)
        try:
            for lo, hi, pos, rows in group_by_chunk(idx, self.chunk_len):
                lr, hr = self._read_rows(lo, hi)
                p0, k = int(pos[0]), len(pos)
                if int(pos[-1]) - p0 == k - 1:  # pos is sorted (stable grouping): a run of batch slots
                    _take_into(lr, rows, lr_b[p0:p0 + k])
                    _take_into(hr, rows, hr_b[p0:p0 + k])
                else:  # this chunk's samples are interleaved with another chunk's in the batch
                    lr_b[pos] = lr[rows]
                    hr_b[pos] = hr[rows]
        except Exception as exc:
            self._raise_batch_error(idx, exc)
        self._verify_batch(idx, lr_b, hr_b)
        return lr_b, hr_b

    def __getitems__(self, indices: Sequence[int]) -> list:
        lr_b, hr_b = self.read_batch(indices)
        return [self._wrap(lr_b[k], hr_b[k]) for k in range(len(indices))]

    def chunk_batch_sampler(self, batch_size: int | None = None, shuffle: bool = True, seed: int = 0,
                            drop_last: bool = False) -> ChunkBatchSampler:
        return ChunkBatchSampler(self._n, self.chunk_len, batch_size, shuffle, seed, drop_last)

    def chunk_sampler(self, shuffle: bool = True, seed: int = 0) -> ChunkSampler:
        return ChunkSampler(self._n, self.chunk_len, shuffle, seed)
