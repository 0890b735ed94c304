"""Any folder of images, as it is: ``root/**/*.{jpg,jpeg,png,...}``, no labels.

The doctor (and :func:`feedlab.pipeline.open_dataset`) accept such a folder directly, so
a user's own photos can be diagnosed without converting them. Each sample is one HWC
uint8 image; sizes may differ, so batching needs the ``center_crop`` transform.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np
from torch.utils.data import Dataset

from feedlab.files import read_regular

from ._decoding import DecoderState, cannot_decode, file_of

IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


def scan_images(root) -> list[Path]:
    """Image files under ``root`` at any depth, sorted; hidden folders skipped."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"images: no folder {root}")
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        out.extend(Path(dirpath) / f for f in sorted(filenames) if Path(f).suffix.lower() in IMAGE_EXTS)
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
