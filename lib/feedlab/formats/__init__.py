"""Storage formats for the SR patch set, behind one registry.

>>> ds = open_dataset(root, "lmdb")           # (lr, hr) uint8 HWC numpy per index
>>> ds = open_dataset(root, "png", decode="pil", as_tensor=True)
>>> write("hdf5", root, samples)              # samples: sized sequence of (lr, hr)

SR formats (``SR_FORMATS``): png, lmdb, lmdb_raw, hdf5, zarr, npy, npy_mmap, pt.
``PACKABLE`` are those ``data_prep pack`` writes (all but png, the source).
Classification formats: jpeg / imagefolder (``(image, label)``); ``images``: any folder of
images, no labels. Each entry says what its reader can do (see :class:`FormatSpec`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from feedlab.files import check_regular_tree

from . import hdf5_store, imagefolder, images, lmdb_store, npy_store, png, pt_store, zarr_store
from ._common import FormatError, SRDataset, raw_nbytes, read_manifest, tree_bytes
from .chunks import ChunkBatchSampler, ChunkSampler
from .hdf5_store import Hdf5Dataset
from .imagefolder import ImageFolderDataset
from .images import ImagesDataset
from .lmdb_store import LmdbDataset, LmdbRawDataset
from .npy_store import NpyDataset, NpyMmapDataset
from .png import PngDataset
from .pt_store import PtDataset
from .zarr_store import ZarrDataset, ZarrRandomDataset

ZarrChunkSampler = ChunkBatchSampler


@dataclass(frozen=True)
class FormatSpec:
    """One storage format: how to open, write and size it, and what its reader can do.

    Capabilities (read by the doctor and the experiments, so they never name a format):

    * ``batched``: the dataset's ``read_batch(indices, out=)`` fills preallocated batch
      arrays faster than one sample at a time;
    * ``chunked``: the store is cut in chunks (``dataset.chunk_len``,
      ``chunk_batch_sampler()``) and chunk-aligned batches are the fast way to read it;
    * ``raw_split``: ``read_raw(i)`` returns the stored bytes and ``decode_raw(raw)``
      turns them into arrays, so read and decode can be timed apart (otherwise
      ``read_raw`` already returns arrays and ``decode_raw`` is the identity);
    * ``mmap``: samples are read from a memory map (no system call per sample);
    * ``image_codec``: ``"png"`` / ``"jpeg"`` when the store holds encoded images and
      takes a ``decode=`` backend (``feedlab.decode``), else ``None``.
    """

    name: str
    kind: str                      # "sr" (lr, hr) pairs, "cls" (image, label), "img" (image)
    dataset: Callable              # (root, **opts) -> Dataset
    writer: Callable | None        # (root, samples, **opts) -> Path
    bytes_on_disk: Callable        # (root) -> int
    path: str                      # what it occupies under root
    doc: str
    batched: bool = False
    chunked: bool = False
    raw_split: bool = False
    mmap: bool = False
    image_codec: str | None = None
    default_decode: str = "none"   # the decode_raw a reader of this format does by default
    packable: bool = True          # written by ``data_prep pack`` (False: the source, or read-only)

    def capabilities(self) -> dict:
        return {"batched": self.batched, "chunked": self.chunked, "raw_split": self.raw_split,
                "mmap": self.mmap, "image_codec": self.image_codec}


FORMATS: dict[str, FormatSpec] = {}


def register(spec: FormatSpec, replace: bool = False) -> FormatSpec:
    """Add a format to the registry: everything that iterates formats (the doctor,
    bench, ``storage_formats``) then sees it. A store is its module plus this call."""
    if spec.name in FORMATS and not replace:
        raise ValueError(f"format {spec.name!r} is already registered")
    FORMATS[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    FORMATS.pop(name, None)


for _spec in (
    FormatSpec("png", "sr", PngDataset, png.write, png.bytes_on_disk, "hr/ + lr/",
               "PNG pair per sample, decoded per access", batched=True, raw_split=True,
               image_codec="png", default_decode="pil", packable=False),
    FormatSpec("lmdb", "sr", LmdbDataset, lmdb_store.write, lmdb_store.bytes_on_disk, "lmdb/",
               "LMDB, header + lz4.frame payload per key", batched=True, raw_split=True, mmap=True,
               default_decode="lz4"),
    FormatSpec("lmdb_raw", "sr", LmdbRawDataset, lmdb_store.write_raw, lmdb_store.bytes_on_disk_raw,
               "lmdb_raw/", "LMDB, header + raw payload per key", batched=True, raw_split=True, mmap=True,
               default_decode="copy"),
    FormatSpec("hdf5", "sr", Hdf5Dataset, hdf5_store.write, hdf5_store.bytes_on_disk, "sr.h5",
               "HDF5 file, datasets lr/hr (N,H,W,3)", batched=True),
    FormatSpec("zarr", "sr", ZarrDataset, zarr_store.write, zarr_store.bytes_on_disk, "sr.zarr/",
               "Zarr v3 group, arrays lr/hr chunked along samples", batched=True, chunked=True),
    FormatSpec("npy", "sr", NpyDataset, npy_store.write, npy_store.bytes_on_disk, "npy/",
               "one .npy per sample and side", raw_split=True, default_decode="np.load"),
    FormatSpec("npy_mmap", "sr", NpyMmapDataset, npy_store.write_mmap, npy_store.bytes_on_disk_mmap,
               "npy_mmap/", "one memory-mapped .npy per side", batched=True, chunked=True, mmap=True),
    FormatSpec("pt", "sr", PtDataset, pt_store.write, pt_store.bytes_on_disk, "pt/",
               "torch.save dict per sample, weights_only load", raw_split=True, default_decode="torch.load"),
    FormatSpec("jpeg", "cls", ImageFolderDataset, None, imagefolder.bytes_on_disk, "<class>/*.jpg",
               "ImageFolder of JPEGs (classification set)", raw_split=True, image_codec="jpeg",
               default_decode="pil", packable=False),
    FormatSpec("imagefolder", "cls", ImageFolderDataset, None, imagefolder.bytes_on_disk,
               "<class>/*.jpg", "alias of jpeg", raw_split=True, image_codec="jpeg", default_decode="pil",
               packable=False),
    FormatSpec("images", "img", ImagesDataset, None, images.bytes_on_disk, "**/*.jpg|png",
               "any folder of images, any nesting, no labels", raw_split=True, image_codec="jpeg",
               default_decode="pil", packable=False),
):
    register(_spec)

SR_FORMATS = tuple(n for n, s in FORMATS.items() if s.kind == "sr")
PACKABLE = tuple(n for n in SR_FORMATS if FORMATS[n].packable)


def sr_formats() -> tuple[str, ...]:
    """The SR formats registered now (``SR_FORMATS`` plus any registered later)."""
    return tuple(n for n, s in FORMATS.items() if s.kind == "sr")


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
    spec = get_format(fmt)
    for part in spec.path.split("+"):
        if part.strip():
            check_regular_tree(Path(root) / part.strip())  # a FIFO in the store: one line, never a hang
    ds = spec.dataset(Path(root), **opts)
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


def present(root, kind: str = "sr") -> list[str]:
    """Formats of ``kind`` with data under ``root`` (non-empty), in registry order."""
    out = []
    for name, spec in FORMATS.items():
        if spec.kind != kind or name == "imagefolder":
            continue
        try:
            if spec.bytes_on_disk(Path(root)) > 0:
                out.append(name)
        except (OSError, ValueError):
            continue
    return out


def guess_format(root) -> str:
    """The format of a folder given as data: an SR set (``png``, its source), an ImageFolder
    (class sub-folders of images) or else any folder of images (``images``)."""
    root = Path(root)
    if (root / "hr").is_dir() and (root / "lr").is_dir():
        return "png"
    for name in SR_FORMATS:
        try:
            if FORMATS[name].bytes_on_disk(root) > 0:
                return name
        except (OSError, ValueError):
            continue
    subdirs = [d for d in root.iterdir() if d.is_dir() and not d.name.startswith(".")] if root.is_dir() else []
    if subdirs and all(any(f.suffix.lower() in images.IMAGE_EXTS for f in d.iterdir() if f.is_file())
                       for d in subdirs):
        return "imagefolder"
    return "images"


__all__ = [
    "FORMATS", "SR_FORMATS", "PACKABLE", "FormatSpec", "register", "unregister", "sr_formats", "present",
    "guess_format", "ImagesDataset", "raw_nbytes", "FormatError", "UnknownFormatError",
    "open_dataset", "write", "bytes_on_disk", "get_format", "read_manifest", "tree_bytes",
    "SRDataset", "PngDataset", "LmdbDataset", "LmdbRawDataset", "Hdf5Dataset", "ZarrDataset",
    "ZarrRandomDataset", "NpyDataset", "NpyMmapDataset", "PtDataset", "ImageFolderDataset",
    "ChunkBatchSampler", "ChunkSampler", "ZarrChunkSampler",
]
