"""NumPy files, two layouts.

* ``npy/``: one ``.npy`` per sample and side (``hr_000000.npy``, ``lr_000000.npy``),
  read with ``np.load(allow_pickle=False)``.
* ``npy_mmap/``: one array per side (``hr.npy`` (N,H,W,3), ``lr.npy``), opened
  with ``np.load(mmap_mode="r")`` lazily per process; ``chunk_len`` sets the
  block the chunk samplers align to (there are no real chunks: any span is one
  slice of the map).
"""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import numpy as np

from ._common import (
    LazyHandle,
    SRDataset,
    atomic_output,
    count_from_manifest_or_files,
    files_in,
    first_shapes,
    iter_checked,
    open_regular,
    read_files,
    tree_bytes,
    write_blocks,
)
from .chunked import ChunkedSRDataset, _take_into

NPY_DIR = "npy"
MMAP_DIR = "npy_mmap"


def npy_name(side: str, i: int) -> str:
    return f"{side}_{i:06d}.npy"


def write(root, samples, **_opts) -> Path:
    root = Path(root)
    final = root / NPY_DIR
    lr_shape, hr_shape = first_shapes(samples)
    with atomic_output(final, is_dir=True) as tmp:
        for i, (lr, hr) in enumerate(iter_checked(samples, lr_shape, hr_shape)):
            np.save(tmp / npy_name("lr", i), lr, allow_pickle=False)
            np.save(tmp / npy_name("hr", i), hr, allow_pickle=False)
    return final


def _reserve(fh, nbytes: int, path: Path) -> None:
    """Reserve ``nbytes`` on disk up front where the file system can, so a full disk is
    an error now, not a SIGBUS later (writes through a sparse map of a full disk fault)."""
    try:
        os.posix_fallocate(fh.fileno(), 0, nbytes)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise OSError(exc.errno, f"npy_mmap: cannot reserve {nbytes / 2**20:.1f} MiB for {path.name} "
                          f"({os.strerror(exc.errno)}): free space or pack the set elsewhere", str(path)) from None
        # EOPNOTSUPP / EINVAL: no fallocate on this file system; plain writes still fail cleanly
    except AttributeError:  # pragma: no cover - no posix_fallocate on this platform
        pass


def write_mmap(root, samples, block: int = 256, **_opts) -> Path:
    """Write ``lr.npy`` and ``hr.npy`` (N,H,W,3) with plain writes, one block of samples at
    a time, into space reserved first: a full disk raises ``OSError`` (the temporary folder
    is removed), never a SIGBUS."""
    root = Path(root)
    final = root / MMAP_DIR
    lr_shape, hr_shape = first_shapes(samples)
    n = len(samples)
    with atomic_output(final, is_dir=True) as tmp:
        with open(tmp / "lr.npy", "wb") as f_lr, open(tmp / "hr.npy", "wb") as f_hr:
            for fh, shape in ((f_lr, lr_shape), (f_hr, hr_shape)):
                header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.uint8)), "fortran_order": False,
                          "shape": (n, *shape)}
                np.lib.format.write_array_header_1_0(fh, header)
                _reserve(fh, fh.tell() + n * int(np.prod(shape)), Path(fh.name))

            def _sink(_start, lr_b, hr_b):
                f_lr.write(memoryview(np.ascontiguousarray(lr_b)).cast("B"))
                f_hr.write(memoryview(np.ascontiguousarray(hr_b)).cast("B"))

            write_blocks(samples, lr_shape, hr_shape, block, _sink, "npy_mmap")
            f_lr.flush()
            f_hr.flush()
            os.fsync(f_lr.fileno())
            os.fsync(f_hr.fileno())
    return final


class NpyDataset(SRDataset):
    fmt = "npy"

    def __init__(self, root, as_tensor: bool = False):
        super().__init__(root, as_tensor)
        self.dir = self.root / NPY_DIR
        if not self.dir.is_dir():
            raise FileNotFoundError(f"npy: no {NPY_DIR}/ under {self.root}")
        self._n = count_from_manifest_or_files(self.root, self.dir, "hr_*.npy")
        if self._n:
            lr, hr = self._read(0)
            self.lr_shape, self.hr_shape = lr.shape, hr.shape

    def _sample_path(self, i: int) -> str:
        return str(self.dir / npy_name("{lr,hr}", i))

    def _read(self, i: int):
        with open_regular(self.dir / npy_name("lr", i)) as fh:
            lr = np.load(fh, allow_pickle=False)
        with open_regular(self.dir / npy_name("hr", i)) as fh:
            hr = np.load(fh, allow_pickle=False)
        return lr, hr

    decode_name = "np.load"

    def read_raw(self, i: int):
        i = self._index(i)
        return read_files((self.dir / npy_name("lr", i), self.dir / npy_name("hr", i)))

    def decode_raw(self, raw):
        return (np.load(io.BytesIO(raw[0]), allow_pickle=False), np.load(io.BytesIO(raw[1]), allow_pickle=False))

    def store_files(self, indices):
        return [self.dir / npy_name(side, int(i)) for i in indices for side in ("lr", "hr")]


class _MmapOpener:
    def __init__(self, path: str):
        self.path = path

    def __call__(self):
        d = Path(self.path)
        # plain ndarray views of the maps (the view keeps the map open): indexing a
        # np.memmap subclass pays __array_finalize__ / __array_wrap__ on every result
        return (np.asarray(np.load(d / "lr.npy", mmap_mode="r", allow_pickle=False)),
                np.asarray(np.load(d / "hr.npy", mmap_mode="r", allow_pickle=False)))


class NpyMmapDataset(ChunkedSRDataset):
    fmt = "npy_mmap"

    def __init__(self, root, as_tensor: bool = False, chunk_len: int = 128):
        super().__init__(root, as_tensor, cache_chunk=False)
        self.dir = self.root / MMAP_DIR
        if not (self.dir / "hr.npy").is_file():
            raise FileNotFoundError(f"npy_mmap: no {MMAP_DIR}/hr.npy under {self.root}")
        self._maps = LazyHandle(_MmapOpener(str(self.dir)))
        lr, hr = _MmapOpener(str(self.dir))()
        self._n = int(hr.shape[0])
        self.lr_shape, self.hr_shape = tuple(lr.shape[1:]), tuple(hr.shape[1:])
        del lr, hr
        self.chunk_len = int(chunk_len)

    def _read_rows(self, lo: int, hi: int):
        lr, hr = self._maps.get()
        return lr[lo:hi], hr[lo:hi]  # views of the map; read_batch copies them into the batch

    def _read_one(self, i: int):
        lr, hr = self._maps.get()
        return lr[i], hr[i]

    def read_batch(self, indices, out=None):
        """The whole map is addressable: one gather per side, straight from the mapped
        pages into the batch slots, in the order given (no chunk grouping needed). The
        map stays open across batches and epochs (reopened only after a fork)."""
        lr_b, hr_b = self._batch_out(len(indices), out)
        idx = self._indices(indices)
        try:
            lr, hr = self._maps.get()
            _take_into(lr, idx, lr_b)
            _take_into(hr, idx, hr_b)
        except Exception as exc:
            self._raise_batch_error(idx, exc)
        self._verify_batch(idx, lr_b, hr_b)
        return lr_b, hr_b

    def store_files(self, indices):
        return files_in(self.dir)


def bytes_on_disk(root) -> int:
    return tree_bytes(Path(root) / NPY_DIR)


def bytes_on_disk_mmap(root) -> int:
    return tree_bytes(Path(root) / MMAP_DIR)
