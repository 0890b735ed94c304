"""Any folder of images, as it is: ``root/**/*.{jpg,jpeg,png,...}``, no labels.

The doctor (and :func:`feedlab.pipeline.open_dataset`) accept such a folder directly, so
a user's own photos can be diagnosed without converting them. Each sample is one HWC
uint8 image; sizes may differ, so batching needs the ``center_crop`` transform.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Callable

import numpy as np
from torch.utils.data import Dataset

from feedlab.errors import shown
from feedlab.files import read_regular

from ._decoding import DecoderState, cannot_decode, file_of

IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


class LinkError(ValueError):
    """A link in a folder of images that leads nowhere, or back into the folder; one line naming it."""


def bad_link(root: Path, path: Path, seen: set[str] | None = None) -> LinkError | None:
    """One :class:`LinkError` line when ``path`` (under ``root``) is a link whose target does not exist, a loop of
    links, or (a folder) leads to a folder already in ``seen`` (the real paths read so far: a loop, or the same
    images twice); None otherwise (an ordinary file or folder, a link to a fine one)."""
    if not path.is_symlink():
        return None
    try:
        name = shown(path.relative_to(root))
    except ValueError:
        name = shown(path)
    where = f"{name} under {shown(root)} is a link to {shown(os.readlink(path))}"
    try:
        st = os.stat(path)
    except OSError as exc:
        what = "a loop of links" if exc.errno == errno.ELOOP else "which does not exist"
        return LinkError(f"{where}, {what}: remove the link or point it at the file it stands for")
    if stat.S_ISDIR(st.st_mode) and seen is not None and os.path.realpath(path) in seen:
        return LinkError(f"{where}, a folder already read (a loop, or the same images twice): remove the link")
    return None


def scan_images(root) -> list[Path]:
    """Image files under ``root`` at any depth, sorted; hidden folders skipped; a linked folder followed once. A
    link that leads nowhere, loops, or leads back to a folder already read is one :class:`LinkError` line."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"images: no folder {root}")
    out, seen = [], {os.path.realpath(root)}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        keep = []
        for d in sorted(d for d in dirnames if not d.startswith(".")):
            problem = bad_link(root, Path(dirpath) / d, seen)
            if problem:
                raise problem
            seen.add(os.path.realpath(Path(dirpath) / d))
            keep.append(d)
        dirnames[:] = keep
        for f in sorted(filenames):
            if Path(f).suffix.lower() in IMAGE_EXTS:
                problem = bad_link(root, Path(dirpath) / f)
                if problem:
                    raise problem
                out.append(Path(dirpath) / f)
    return out


class ImagesDataset(DecoderState, Dataset):
    fmt = "images"

    def __init__(self, root, decode: str | Callable = "pil", as_tensor: bool = False):
        self.root = Path(root)
        self._use_decoder(decode)
        self.as_tensor = bool(as_tensor)
        self.paths = scan_images(self.root)
        if not self.paths:
            raise FileNotFoundError(f"images: no image files ({', '.join(IMAGE_EXTS)}) under {self.root}")

    def __len__(self) -> int:
        return len(self.paths)

    def read_raw(self, i: int) -> bytes:
        return read_regular(self.paths[i])

    def decode_raw(self, raw, path: Path | None = None) -> np.ndarray:
        """The image in ``raw``; one that does not decode is one line naming its file (``path``, else
        the file with these bytes) and what to do."""
        try:
            return self._decode(raw)
        except Exception as exc:  # the decoder's error, whatever it is: the file named, one line
            raise cannot_decode("images", self.root, path or file_of(self.paths, raw), exc) from None

    def store_files(self, indices):
        return [self.paths[int(i)] for i in indices]

    def __getitem__(self, i):
        img = self.decode_raw(self.read_raw(i), self.paths[i])
        if self.as_tensor:
            import torch

            return torch.from_numpy(np.ascontiguousarray(img).copy())
        return img

    def __repr__(self) -> str:
        return f"ImagesDataset(root={str(self.root)!r}, n={len(self)})"


def bytes_on_disk(root) -> int:
    return sum(os.stat(p).st_size for p in scan_images(root))
