"""Zarr (v3 format, zarr-python 3 API): ``sr.zarr/`` group with arrays ``hr`` and ``lr``.

Arrays are (N,H,W,3) uint8, chunked along the sample axis only
(``chunk_len`` samples per chunk, default 128), uncompressed by default
(``compress=True`` uses zarr's default codec).

* ``ZarrRandomDataset``: one ``arr[i]`` per sample: each read decodes a whole
  chunk to return one sample (the slow path the write-up measured).
* ``ZarrDataset(cache_chunk=True)`` keeps the last chunk read; with a
  ``ChunkSampler`` each chunk is then read once per epoch.
* ``__getitems__`` / ``read_batch`` group indices by chunk and read each
  chunk span once: with ``ChunkBatchSampler`` as ``batch_sampler`` one batch
  is one slice.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import zarr

from feedlab.errors import SampleError
from feedlab.files import kind_of

from ._common import LazyHandle, atomic_output, files_in, first_shapes, tree_bytes, write_blocks
from .chunked import ChunkedSRDataset

DIRNAME = "sr.zarr"
DEFAULT_CHUNK = 128


def write(root, samples, chunk_len: int = DEFAULT_CHUNK, compress: bool = False, **_opts) -> Path:
    root = Path(root)
    final = root / DIRNAME
    lr_shape, hr_shape = first_shapes(samples)
    n = len(samples)
    if int(chunk_len) < 1:
        raise ValueError(f"zarr: chunk_len must be >= 1, got {chunk_len}")
    chunk_len = min(int(chunk_len), n)
    with atomic_output(final, is_dir=True) as tmp:
        group = zarr.open_group(str(tmp), mode="w", zarr_format=3)
        group.attrs["count"] = n
        group.attrs["chunk_len"] = chunk_len
        comp = "auto" if compress else None
        arrs = {
            name: group.create_array(name, shape=(n, *shape), chunks=(chunk_len, *shape), dtype="uint8",
                                     compressors=comp, fill_value=0,
                                     config={"write_empty_chunks": True})  # every chunk on disk
            for name, shape in (("lr", lr_shape), ("hr", hr_shape))
        }
        def _sink(start, lr_b, hr_b):  # whole, aligned chunks: one write each
            arrs["lr"][start:start + len(lr_b)] = lr_b
            arrs["hr"][start:start + len(hr_b)] = hr_b

        write_blocks(samples, lr_shape, hr_shape, chunk_len, _sink, "zarr")
    return final


class _Opener:
    def __init__(self, path: str):
        self.path = path

    def __call__(self):
        g = zarr.open_group(self.path, mode="r")
        return g["lr"], g["hr"]


class ZarrDataset(ChunkedSRDataset):
    fmt = "zarr"

    def __init__(self, root, as_tensor: bool = False, cache_chunk: bool = False):
        super().__init__(root, as_tensor, cache_chunk=cache_chunk)
        self.path = self.root / DIRNAME
        if not (self.path / "zarr.json").is_file():
            raise FileNotFoundError(f"zarr: no {DIRNAME} group under {self.root}")
        self._arrays = LazyHandle(_Opener(str(self.path)))
        lr, hr = _Opener(str(self.path))()
        self._n = int(hr.shape[0])
        self.lr_shape, self.hr_shape = tuple(lr.shape[1:]), tuple(hr.shape[1:])
        self.chunk_len = int(hr.chunks[0])

    def _chunk_file(self, name: str, c: int) -> Path:
        arr = self._arrays.get()[0 if name == "lr" else 1]
        return self.path / name / arr.metadata.encode_chunk_key((c, 0, 0, 0))

    def _check_chunks(self, lo: int, hi: int) -> None:
        """zarr reads an absent chunk as ``fill_value`` (zeros): every chunk of this store
        was written, so an absent one is an error naming it; so is a chunk that is not a
        regular file (a FIFO would block zarr's IO thread for ever), wherever it lies in the
        store (``open_dataset`` stats only the first entries of a large one)."""
        for c in range(lo // self.chunk_len, (hi - 1) // self.chunk_len + 1):
            for name in ("lr", "hr"):
                f = self._chunk_file(name, c)
                try:
                    mode = os.stat(f).st_mode
                except FileNotFoundError:
                    mode = None
                if mode is None or not stat.S_ISREG(mode):
                    first, last = c * self.chunk_len, min((c + 1) * self.chunk_len, self._n) - 1
                    what = "missing" if mode is None else f"{kind_of(mode)}, not a regular file"
                    raise SampleError(f"zarr: chunk {c} of {name} (samples {first}–{last}) is {what}: {f}; "
                                      f"repack with `python -m data_prep pack {self.root} --to zarr`")

    def _sample_path(self, i: int) -> str:
        try:
            return str(self._chunk_file("hr", i // self.chunk_len))
        except Exception:
            return str(self.path)

    def _read_rows(self, lo: int, hi: int):
        self._check_chunks(lo, hi)
        lr, hr = self._arrays.get()
        return lr[lo:hi], hr[lo:hi]

    def _read_one(self, i: int):
        self._check_chunks(i, i + 1)
        lr, hr = self._arrays.get()
        return lr[i], hr[i]

    def store_files(self, indices):
        return files_in(self.path)


class ZarrRandomDataset(ZarrDataset):
    """One independent ``arr[i]`` per sample, no chunk cache (the baseline)."""

    def __init__(self, root, as_tensor: bool = False):
        super().__init__(root, as_tensor=as_tensor, cache_chunk=False)


def bytes_on_disk(root) -> int:
    return tree_bytes(Path(root) / DIRNAME)
