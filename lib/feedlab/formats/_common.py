"""Shared pieces of the storage formats: the manifest, sample checks, checksums, the Dataset base.

Every SR dataset returns ``(lr, hr)`` as uint8 HWC numpy arrays (or torch
uint8 HWC tensors with ``as_tensor=True``, via ``torch.from_numpy``: no copy).
Readers that hold a file handle (LMDB, HDF5, Zarr, memory maps) open it lazily
in the process that reads, and reopen it when the process id changes, so a
handle is never shared across ``fork`` into DataLoader workers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from feedlab.errors import (
    ChecksumError,
    DeadlineError,
    FormatError,  # noqa: F401  (re-exported: formats raise it)
    SampleError,
    sample_error,
)
from feedlab.files import (  # noqa: F401  (re-exported: writers and data_prep use them here)
    ORPHAN_MIN_AGE_S,
    JSONFileError,
    current_umask,
    load_json,
    max_file_bytes,
    open_regular,
    read_regular,
    release,
    remove,
    replace_path,
    sweep_orphans,
    tmp_sibling,
    tree_bytes,
)
from feedlab.formats._io import atomic_output, write_json_atomic  # noqa: F401  (re-exported)
from feedlab.formats._manifest import CHECKSUMS, manifest_problem, plain_name  # noqa: F401  (re-exported)

_remove = remove   # noqa: E305  (the old private name, for older callers)
MANIFEST = "manifest.json"
MANIFEST_MAX_BYTES = 64 << 20   # a manifest is a few kB; a larger one is not ours




def read_manifest(root: str | os.PathLike) -> dict:
    """The manifest of a data set, or ``{}`` when it has none. A manifest that is not
    valid JSON raises :class:`FormatError` naming the file."""
    path = Path(root) / MANIFEST
    if not path.exists():
        return {}
    try:
        man = load_json(path, limit=MANIFEST_MAX_BYTES)
    except JSONFileError as exc:   # bad UTF-8 or nested too deeply too (attack54 FAIL 1)
        raise FormatError(f"{path} is not valid JSON ({exc.reason}): rebuild the set with "
                          "`python -m data_prep sr --out ...` (or restore the file)") from None
    if not isinstance(man, dict):
        raise FormatError(f"{path} holds {type(man).__name__}, not a manifest object: rebuild the set")
    why = manifest_problem(man)
    if why:
        raise FormatError(f"{path}: {why}: the manifest is damaged or not data_prep's; rebuild the set "
                          "(python -m data_prep sr|classify --out NEW_DIR) or restore the file")
    return man


def check_sample(lr: np.ndarray, hr: np.ndarray) -> None:
    if lr.dtype != np.uint8 or hr.dtype != np.uint8:
        raise TypeError(f"samples must be uint8, got lr {lr.dtype}, hr {hr.dtype}")
    if lr.ndim != 3 or hr.ndim != 3 or lr.shape[2] != 3 or hr.shape[2] != 3:
        raise ValueError(f"samples must be HWC RGB, got lr {lr.shape}, hr {hr.shape}")


def first_shapes(samples: Sequence) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if len(samples) == 0:
        raise ValueError("no samples to write")
    lr, hr = samples[0]
    lr, hr = np.asarray(lr), np.asarray(hr)
    check_sample(lr, hr)
    return lr.shape, hr.shape


def iter_checked(samples: Iterable, lr_shape, hr_shape, n: int | None = None,
                 fmt: str = "write") -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Iterate samples as contiguous uint8 arrays, insisting on one shape. With ``n``
    (default ``len(samples)`` when it has one), more than ``n`` samples or fewer raise:
    an endless iterator cannot fill the disk."""
    if n is None and hasattr(samples, "__len__"):
        n = len(samples)
    i = -1
    for i, (lr, hr) in enumerate(samples):
        if n is not None and i >= n:
            raise ValueError(f"{fmt}: len(samples) was {n} but iteration gave more")
        lr = np.ascontiguousarray(lr)
        hr = np.ascontiguousarray(hr)
        if lr.shape != tuple(lr_shape) or hr.shape != tuple(hr_shape) or lr.dtype != np.uint8 or hr.dtype != np.uint8:
            raise ValueError(
                f"sample {i}: lr {lr.shape} {lr.dtype}, hr {hr.shape} {hr.dtype}; "
                f"expected uint8 {tuple(lr_shape)} and {tuple(hr_shape)}"
            )
        yield lr, hr
    if n is not None and i + 1 != n:
        raise ValueError(f"{fmt}: len(samples) was {n} but iteration gave {i + 1}")


def write_blocks(samples, lr_shape, hr_shape, block: int, sink, fmt: str) -> None:
    """Copy ``samples`` into ``(block, ...)`` staging arrays and hand each full block
    (and the short last one) to ``sink(start, lr_block, hr_block)``: one large write per
    block instead of one per sample. Raises if ``len(samples)`` lied."""
    n = len(samples)
    block_lr = np.empty((block, *lr_shape), np.uint8)
    block_hr = np.empty((block, *hr_shape), np.uint8)
    start = k = 0
    for lr, hr in iter_checked(samples, lr_shape, hr_shape, n, fmt):
        block_lr[k] = lr
        block_hr[k] = hr
        k += 1
        if k == block:
            sink(start, block_lr, block_hr)
            start, k = start + k, 0
    if k:
        sink(start, block_lr[:k], block_hr[:k])
    if start + k != n:
        raise ValueError(f"{fmt}: len(samples) was {n} but iteration gave {start + k}")


def _crc32c():
    import google_crc32c  # a dependency of zarr; SSE4.2 / ARMv8 CRC instructions

    return google_crc32c.value


def checksum_rows(batch: np.ndarray) -> np.ndarray:
    """crc32c of each sample of a (N, ...) uint8 batch, as uint32 (N,)."""
    value = _crc32c()
    batch = np.ascontiguousarray(batch)
    return np.fromiter((value(row) for row in batch.reshape(len(batch), -1)), np.uint32, len(batch))


def verify_default() -> bool:
    """Checksums are verified on read unless ``FEEDLAB_VERIFY=0``."""
    return os.environ.get("FEEDLAB_VERIFY", "1").strip().lower() not in ("0", "false", "no", "off")


class SRDataset(Dataset):
    """Base of the SR readers: ``(lr, hr)`` uint8 HWC per index.

    Subclasses implement ``_read(i) -> (lr, hr)`` and may override
    ``read_batch`` with a faster path. ``__getitems__`` (used by DataLoader
    for batched fetching since torch 2.1) returns a list of samples so the
    default collate still works.

    Every read is checked against the set's per-sample crc32c table
    (``crc32c.npy`` beside ``manifest.json``, written by ``data_prep``) when it
    exists and ``verify`` is true (default; ``FEEDLAB_VERIFY=0`` or
    ``open_dataset(..., verify=False)`` turn it off for benchmarks): a flipped byte
    raises :class:`feedlab.errors.ChecksumError` naming the sample. A read that
    fails raises :class:`feedlab.errors.SampleError` naming the index and path.
    """

    fmt = "?"
    lr_shape: tuple[int, int, int]
    hr_shape: tuple[int, int, int]

    def __init__(self, root: str | os.PathLike, as_tensor: bool = False):
        self.root = Path(root)
        self.as_tensor = bool(as_tensor)
        self._n = 0
        self.verify = verify_default()
        self._crc_table = None  # loaded on first verified read (False: none on disk)

    def __len__(self) -> int:
        return self._n

    # -- naming and checking -------------------------------------------------------
    def _sample_path(self, i: int) -> str:
        """Where sample ``i`` lives (a file, or a store and key), for error messages."""
        for attr in ("path", "dir"):
            p = self.__dict__.get(attr)
            if p is not None:
                return str(p)
        return str(self.root)

    def _checksums(self):
        table = self.__dict__.get("_crc_table")
        if table is None:
            path = self.root / CHECKSUMS
            table = False
            if path.exists():
                with open_regular(path) as fh:
                    try:
                        table = np.load(fh, allow_pickle=False)
                    except (ValueError, EOFError) as exc:   # truncated, foreign, or a pickle: named, one line
                        raise FormatError(f"{path}: not a readable checksum table ({(str(exc).splitlines() or [type(exc).__name__])[0][:80]}): "
                                          "rebuild the set or delete that file") from None
                if not isinstance(table, np.ndarray) or table.shape != (self._n, 2) or table.dtype != np.uint32:
                    raise FormatError(f"{path}: checksum table {getattr(table, 'shape', type(table).__name__)} "
                                      f"{getattr(table, 'dtype', '')}, expected "
                                      f"({self._n}, 2) uint32: rebuild the set or delete that file")
            self._crc_table = table
        return None if table is False else table

    def _verify_batch(self, idx, lr_b: np.ndarray, hr_b: np.ndarray) -> None:
        if not self.__dict__.get("verify", True):
            return
        table = self._checksums()
        if table is None or len(lr_b) == 0:
            return
        want = table[np.asarray(idx, dtype=np.intp)]
        bad = (checksum_rows(lr_b) != want[:, 0]) | (checksum_rows(hr_b) != want[:, 1])
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            i = int(np.asarray(idx).reshape(-1)[k])
            raise ChecksumError(
                f"{self.fmt}: sample {i} ({self._sample_path(i)}) does not match its checksum "
                f"({int(bad.sum())} of {len(bad)} in this batch): the store is corrupt or stale; "
                f"`python -m data_prep verify {self.root}` lists every bad sample, "
                f"`python -m data_prep pack {self.root} --to {self.fmt}` rewrites it")

    def _read_error(self, i: int, exc: BaseException):
        if isinstance(exc, (SampleError, IndexError, MemoryError, DeadlineError)):  # a deadline: its own line
            return exc
        return sample_error(self.fmt, i, self._sample_path(i), exc)

    def _raise_batch_error(self, idx, exc: BaseException):
        """A batched read failed: find the sample that fails alone and name it. A deadline that
        fired is raised as it is: reading the batch again, sample by sample, would wait on the
        read that never returned with no deadline left."""
        if isinstance(exc, (SampleError, IndexError, MemoryError, DeadlineError)):
            raise exc
        for i in np.asarray(idx).reshape(-1).tolist():
            try:
                self._read(int(i))
            except Exception as one:
                raise self._read_error(int(i), one) from one
        first = int(np.asarray(idx).reshape(-1)[0]) if len(idx) else -1
        raise self._read_error(first, exc) from exc

    def _checked_read(self, i: int):
        try:
            lr, hr = self._read(i)
        except Exception as exc:
            raise self._read_error(i, exc) from exc
        if self.__dict__.get("verify", True) and self._checksums() is not None:
            self._verify_batch([i], np.asarray(lr)[None], np.asarray(hr)[None])
        return lr, hr

    # -- indexing -----------------------------------------------------------------
    def _index(self, i: int) -> int:
        i = int(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"{self.fmt}: index {i} out of range for {self._n} samples")
        return i

    def _indices(self, indices) -> np.ndarray:
        """``indices`` as an intp array, negatives wrapped, bounds checked (vectorised ``_index``)."""
        idx = np.asarray(indices, dtype=np.intp).reshape(-1)
        if idx.size:
            if idx.min() < 0:
                idx = np.where(idx < 0, idx + self._n, idx)
            lo, hi = int(idx.min()), int(idx.max())
            if lo < 0 or hi >= self._n:
                bad = lo if lo < 0 else hi
                raise IndexError(f"{self.fmt}: index {bad} out of range for {self._n} samples")
        return idx

    def _wrap(self, lr: np.ndarray, hr: np.ndarray):
        if self.as_tensor:
            # torch refuses to share read-only memory silently: copy only then
            if not lr.flags.writeable:
                lr = lr.copy()
            if not hr.flags.writeable:
                hr = hr.copy()
            return torch.from_numpy(lr), torch.from_numpy(hr)
        return lr, hr

    def _read(self, i: int) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
        raise NotImplementedError

    def __getitem__(self, i):
        return self._wrap(*self._checked_read(self._index(i)))

    def __getitems__(self, indices: Sequence[int]) -> list:
        return [self._wrap(*self._checked_read(self._index(i))) for i in indices]

    def read_batch(self, indices: Sequence[int], out: tuple[np.ndarray, np.ndarray] | None = None):
        """Read ``indices`` into preallocated NHWC uint8 batch arrays.

        ``out=(lr_batch, hr_batch)`` is filled in place (its first dimension
        must be at least ``len(indices)``); without it, new arrays are made.
        Returns the two arrays trimmed to ``len(indices)``.
        """
        lr_b, hr_b = self._batch_out(len(indices), out)
        for k, i in enumerate(indices):
            lr, hr = self._checked_read(self._index(i))
            lr_b[k] = lr
            hr_b[k] = hr
        return lr_b, hr_b

    def _batch_out(self, n: int, out):
        if out is None:
            return (np.empty((n, *self.lr_shape), np.uint8), np.empty((n, *self.hr_shape), np.uint8))
        lr_b, hr_b = out
        return lr_b[:n], hr_b[:n]

    # ---- the stage split: what the doctor and the experiments use (public, per store)
    #: what ``decode_raw`` does, in a word (a decoder name, "lz4", "np.load", "none")
    decode_name = "none"

    def read_raw(self, i: int):
        """Sample ``i`` as stored, decoded as little as this store allows (the *read*
        stage). Stores whose reading and decoding are one call return the arrays."""
        return self._read(self._index(i))

    def decode_raw(self, raw):
        """``(lr, hr)`` from what :meth:`read_raw` returned (the *decode* stage)."""
        return raw

    def store_files(self, indices: Sequence[int]) -> list[Path] | None:
        """The files holding ``indices`` (to evict them for a cold read); None: unknown."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(root={str(self.root)!r}, n={self._n})"


def raw_nbytes(raw) -> int:
    """Bytes held by what a store's ``read_raw`` returned (bytes, arrays, or tuples of them)."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return len(raw)
    if isinstance(raw, np.ndarray):
        return int(raw.nbytes)
    if isinstance(raw, torch.Tensor):
        return int(raw.numel() * raw.element_size())
    if isinstance(raw, (tuple, list)):
        return sum(raw_nbytes(r) for r in raw)
    return 0


def read_files(paths, limit: int | None = None) -> tuple[bytes, ...]:
    """The bytes of each path: regular files only, each at most ``limit`` bytes (default
    ``max_file_bytes()``); a FIFO or device is refused at once, naming it (``_io.open_regular``)."""
    return tuple(read_regular(p, limit) for p in paths)


def files_in(*paths) -> list[Path]:
    """Every regular file at or under ``paths`` (a store that is one or a few files)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            out.extend(q for q in sorted(p.rglob("*")) if q.is_file())
    return out


class LazyHandle:
    """Per-process lazy opener: ``get()`` reopens after a fork (pid change)."""

    def __init__(self, opener):
        self._opener = opener
        self._obj = None
        self._pid = None

    def get(self):
        pid = os.getpid()
        if self._obj is None or self._pid != pid:
            # never close a handle inherited from the parent: its owner does
            self._obj = self._opener()
            self._pid = pid
        return self._obj

    def close(self) -> None:
        if self._obj is not None and self._pid == os.getpid():
            close = getattr(self._obj, "close", None)
            if close is not None:
                close()
        self._obj = None
        self._pid = None

    def __getstate__(self):
        # pickled into spawned workers without the open handle
        return {"_opener": self._opener, "_obj": None, "_pid": None}

    def __setstate__(self, state):
        self.__dict__.update(state)


def count_from_manifest_or_files(root: Path, pattern_dir: Path, glob: str) -> int:
    man = read_manifest(root)
    if "count" in man:
        return int(man["count"])
    return sum(1 for _ in pattern_dir.glob(glob))
