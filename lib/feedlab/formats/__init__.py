"""Storage formats for the SR patch set, behind one registry.

>>> ds = open_dataset(root, "lmdb")           # (lr, hr) uint8 HWC numpy per index
>>> ds = open_dataset(root, "png", decode="pil", as_tensor=True)
>>> write("hdf5", root, samples)              # samples: sized sequence of (lr, hr)

SR formats (``SR_FORMATS``): png, lmdb, lmdb_raw, hdf5, zarr, npy, npy_mmap, pt.
``PACKABLE`` are those ``data_prep pack`` writes (all but png, the source).
Classification formats: jpeg / imagefolder (``(image, label)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import hdf5_store, imagefolder, lmdb_store, npy_store, png, pt_store, zarr_store
from ._common import FormatError, SRDataset, read_manifest, tree_bytes
from .chunks import ChunkBatchSampler, ChunkSampler
from .hdf5_store import Hdf5Dataset
from .imagefolder import ImageFolderDataset
from .lmdb_store import LmdbDataset, LmdbRawDataset
from .npy_store import NpyDataset, NpyMmapDataset
from .png import PngDataset
from .pt_store import PtDataset
from .zarr_store import ZarrDataset, ZarrRandomDataset

ZarrChunkSampler = ChunkBatchSampler


@dataclass(frozen=True)
class FormatSpec:
    name: str
    kind: str                      # "sr" or "cls"
    dataset: Callable              # (root, **opts) -> Dataset
    writer: Callable | None        # (root, samples, **opts) -> Path
    bytes_on_disk: Callable        # (root) -> int
    path: str                      # what it occupies under root
    doc: str


FORMATS: dict[str, FormatSpec] = {
    "png": FormatSpec("png", "sr", PngDataset, png.write, png.bytes_on_disk, "hr/ + lr/",
                      "PNG pair per sample, decoded per access"),
    "lmdb": FormatSpec("lmdb", "sr", LmdbDataset, lmdb_store.write, lmdb_store.bytes_on_disk, "lmdb/",
                       "LMDB, header + lz4.frame payload per key"),
    "lmdb_raw": FormatSpec("lmdb_raw", "sr", LmdbRawDataset, lmdb_store.write_raw, lmdb_store.bytes_on_disk_raw,
                           "lmdb_raw/", "LMDB, header + raw payload per key"),
    "hdf5": FormatSpec("hdf5", "sr", Hdf5Dataset, hdf5_store.write, hdf5_store.bytes_on_disk, "sr.h5",
                       "HDF5 file, datasets lr/hr (N,H,W,3)"),
    "zarr": FormatSpec("zarr", "sr", ZarrDataset, zarr_store.write, zarr_store.bytes_on_disk, "sr.zarr/",
                       "Zarr v3 group, arrays lr/hr chunked along samples"),
    "npy": FormatSpec("npy", "sr", NpyDataset, npy_store.write, npy_store.bytes_on_disk, "npy/",
                      "one .npy per sample and side"),
    "npy_mmap": FormatSpec("npy_mmap", "sr", NpyMmapDataset, npy_store.write_mmap, npy_store.bytes_on_disk_mmap,
                           "npy_mmap/", "one memory-mapped .npy per side"),
    "pt": FormatSpec("pt", "sr", PtDataset, pt_store.write, pt_store.bytes_on_disk, "pt/",
                     "torch.save dict per sample, weights_only load"),
    "jpeg": FormatSpec("jpeg", "cls", ImageFolderDataset, None, imagefolder.bytes_on_disk, "<class>/*.jpg",
                       "ImageFolder of JPEGs (classification set)"),
    "imagefolder": FormatSpec("imagefolder", "cls", ImageFolderDataset, None, imagefolder.bytes_on_disk,
                              "<class>/*.jpg", "alias of jpeg"),
}

SR_FORMATS = tuple(n for n, s in FORMATS.items() if s.kind == "sr")
PACKABLE = tuple(n for n in SR_FORMATS if n != "png")


class UnknownFormatError(ValueError):
    pass


def get_format(fmt: str) -> FormatSpec:
    try:
        return FORMATS[fmt]
    except KeyError:
        raise UnknownFormatError(
            f"unknown format {fmt!r}; supported: {', '.join(FORMATS)}") from None


def open_dataset(root, fmt: str, **opts):
    """The Dataset for ``fmt`` under ``root``; ``opts`` go to its constructor
    (``as_tensor``, ``decode`` for png/jpeg, ``open_in_parent`` for hdf5,
    ``cache_chunk`` for zarr, ``chunk_len`` for npy_mmap); ``verify=False`` skips the
    per-sample checksum check on read."""
    verify = opts.pop("verify", None)
    ds = get_format(fmt).dataset(Path(root), **opts)
    if verify is not None and hasattr(ds, "verify"):
        ds.verify = bool(verify)  # checksums on read (default on; off for benchmarks)
    return ds


def write(fmt: str, root, samples, **opts) -> Path:
    """Write ``samples`` (a sized sequence of ``(lr, hr)`` uint8 HWC arrays) as ``fmt``
    under ``root``; built under a temporary name and renamed when complete."""
    spec = get_format(fmt)
    if spec.writer is None:
        raise UnknownFormatError(f"format {fmt!r} is read-only here (written by data_prep classify)")
    return spec.writer(Path(root), samples, **opts)


def bytes_on_disk(root, fmt: str) -> int:
    return get_format(fmt).bytes_on_disk(Path(root))


__all__ = [
    "FORMATS", "SR_FORMATS", "PACKABLE", "FormatSpec", "FormatError", "UnknownFormatError",
    "open_dataset", "write", "bytes_on_disk", "get_format", "read_manifest", "tree_bytes",
    "SRDataset", "PngDataset", "LmdbDataset", "LmdbRawDataset", "Hdf5Dataset", "ZarrDataset",
    "ZarrRandomDataset", "NpyDataset", "NpyMmapDataset", "PtDataset", "ImageFolderDataset",
    "ChunkBatchSampler", "ChunkSampler", "ZarrChunkSampler",
]
