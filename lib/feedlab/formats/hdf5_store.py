"""HDF5: one file ``sr.h5`` with datasets ``hr`` (N,H,W,3) and ``lr`` (N,h,w,3), uint8.

Stored contiguous and uncompressed by default (fastest ``read_direct``);
``chunks=k`` stores chunks of ``k`` samples instead.

The file is opened lazily in the process that reads and reopened after a
fork, so each DataLoader worker has its own handle. ``open_in_parent=True``
opens it once in ``__init__`` and keeps that handle in every forked worker:
deliberately unsafe (HDF5 handles are not fork-safe), kept for the
concurrency notebook that shows what goes wrong. It also cannot be pickled
for the ``spawn`` start method.

Deadlines: a read blocked inside HDF5's C library (it retries a read that a signal interrupts), e.g.
on a hung network mount, never answers the SIGALRM of :func:`feedlab.errors.deadline`. From the
command line the doctor bounds it from a second process
(:func:`feedlab.doctor.script_watch.watch_deadline`: one line, its processes stopped); a library
caller's deadline cannot, and says nothing until the read returns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import h5py
import numpy as np

from ._common import FormatError, LazyHandle, SRDataset, atomic_output, files_in, first_shapes, tree_bytes, write_blocks

FILENAME = "sr.h5"
WRITE_BLOCK = 512


def write(root, samples, chunks: int | None = None, compression: str | None = None, **_opts) -> Path:
    root = Path(root)
    final = root / FILENAME
    lr_shape, hr_shape = first_shapes(samples)
    n = len(samples)
    with atomic_output(final, is_dir=False) as tmp:
        with h5py.File(tmp, "w", libver="latest") as f:
            kw = {}
            if chunks:
                kw["chunks"] = True  # replaced per dataset below
            if compression:
                kw["compression"] = compression
            dsets = {}
            for name, shape in (("lr", lr_shape), ("hr", hr_shape)):
                opts = dict(kw)
                if chunks or compression:
                    opts["chunks"] = (min(int(chunks or 1), n), *shape)
                dsets[name] = f.create_dataset(name, shape=(n, *shape), dtype=np.uint8, **opts)
            f.attrs["count"] = n
            def _sink(start, lr_b, hr_b):
                dsets["lr"][start:start + len(lr_b)] = lr_b
                dsets["hr"][start:start + len(hr_b)] = hr_b

            write_blocks(samples, lr_shape, hr_shape, WRITE_BLOCK, _sink, "hdf5")
    return final


class _Open:
    """An open file and its two datasets (looking a dataset up by name costs ~100 µs)."""

    def __init__(self, path: str):
        self.file = h5py.File(path, "r")
        self.lr = self.file["lr"]
        self.hr = self.file["hr"]

    def close(self) -> None:
        self.file.close()


class _Opener:
    def __init__(self, path: str):
        self.path = path

    def __call__(self):
        return _Open(self.path)


class Hdf5Dataset(SRDataset):
    fmt = "hdf5"

    def __init__(self, root, as_tensor: bool = False, open_in_parent: bool = False):
        super().__init__(root, as_tensor)
        self.path = self.root / FILENAME
        if not self.path.is_file():
            raise FileNotFoundError(f"hdf5: no {FILENAME} under {self.root}")
        self.open_in_parent = bool(open_in_parent)
        try:
            f = h5py.File(self.path, "r")
        except OSError as exc:   # truncated, not HDF5: h5py's text names no file
            raise FormatError(f"{self.path}: not a readable HDF5 file ({exc}): repack it with "
                              f"`python -m data_prep pack {self.root} --to hdf5`") from None
        with f:
            self._n = int(f["hr"].shape[0])
            self.hr_shape = tuple(f["hr"].shape[1:])
            self.lr_shape = tuple(f["lr"].shape[1:])
        self._handle = LazyHandle(_Opener(str(self.path)))
        self._parent_file = _Open(str(self.path)) if self.open_in_parent else None

    def _file(self):
        if self._parent_file is not None:
            return self._parent_file  # deliberately shared across fork
        return self._handle.get()

    def _read(self, i: int):
        # plain integer indexing takes h5py's fast path (~10x cheaper than read_direct
        # with a selection for one small sample)
        f = self._file()
        return f.lr[i], f.hr[i]

    def read_batch(self, indices: Sequence[int], out=None):
        """One read per run of consecutive indices (a contiguous block is one call)."""
        lr_b, hr_b = self._batch_out(len(indices), out)
        idx = [self._index(i) for i in indices]
        try:
            f = self._file()
            lr_d, hr_d = f.lr, f.hr
            k = 0
            while k < len(idx):
                j = k + 1
                while j < len(idx) and idx[j] == idx[j - 1] + 1:
                    j += 1
                if j - k == 1:
                    lr_b[k] = lr_d[idx[k]]
                    hr_b[k] = hr_d[idx[k]]
                else:
                    src = np.s_[idx[k]:idx[k] + (j - k)]
                    lr_d.read_direct(lr_b, src, np.s_[k:j])
                    hr_d.read_direct(hr_b, src, np.s_[k:j])
                k = j
        except Exception as exc:
            self._raise_batch_error(idx, exc)
        self._verify_batch(idx, lr_b, hr_b)
        return lr_b, hr_b

    def store_files(self, indices):
        return files_in(self.path)

    def close(self) -> None:
        self._handle.close()
        if self._parent_file is not None:
            self._parent_file.close()
            self._parent_file = None


def bytes_on_disk(root) -> int:
    return tree_bytes(Path(root) / FILENAME)
