"""ImageFolder of JPEGs as written by ``data_prep classify``: ``root/<class>/<name>.jpg``.

Returns ``(image, label)``: HWC uint8 numpy (or tensor with ``as_tensor=True``)
and the class index (classes sorted by folder name, as torchvision does).
Images have varying sizes, so batching them needs a resize/crop transform
(``transform=`` is applied to the decoded array before ``as_tensor``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch.utils.data import Dataset

from feedlab.files import read_regular

from ._decoding import DecoderState, cannot_decode, file_of
from .images import bad_link

IMAGE_EXTS = (".jpg", ".jpeg", ".png")


def scan(root) -> tuple[list[str], list[tuple[Path, int]]]:
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"imagefolder: no folder {root}")
    seen = {os.path.realpath(root)}
    for d in sorted(root.iterdir()):   # a class folder linked back into the set, or nowhere: one line naming it
        problem = None if d.name.startswith(".") else bad_link(root, d, seen)
        if problem:
            raise problem
        seen.add(os.path.realpath(d))
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    samples = []
    for label, name in enumerate(classes):
        for f in sorted((root / name).iterdir()):
            problem = bad_link(root, f) if f.suffix.lower() in IMAGE_EXTS else None
            if problem:
                raise problem
            if f.suffix.lower() in IMAGE_EXTS and f.is_file():
                samples.append((f, label))
    return classes, samples


class ImageFolderDataset(DecoderState, Dataset):
    fmt = "imagefolder"

    def __init__(self, root, decode: str | Callable = "pil", as_tensor: bool = False,
                 transform: Callable[[np.ndarray], np.ndarray] | None = None):
        self.root = Path(root)
        self._use_decoder(decode)
        self.as_tensor = bool(as_tensor)
        self.transform = transform
        self.classes, self.samples = scan(self.root)
        if not self.samples:
            raise FileNotFoundError(f"imagefolder: no images in class folders under {self.root}")
        self.targets = [label for _p, label in self.samples]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i):
        path, label = self.samples[i]
        img = self._named_decode(read_regular(path), path)
        if self.transform is not None:
            img = self.transform(img)
        if self.as_tensor:
            img = np.ascontiguousarray(img)
            if not img.flags.writeable:  # e.g. a view of Pillow's bytes
                img = img.copy()
            img = torch.from_numpy(img)
        return img, label

    def read_raw(self, i: int):
        """``(encoded bytes, label)`` of sample ``i``."""
        path, label = self.samples[i]
        return read_regular(path), label

    def decode_raw(self, raw):
        return self._named_decode(raw[0]), raw[1]

    def _named_decode(self, data, path: Path | None = None) -> np.ndarray:
        """The image in ``data``; one that does not decode is one line naming its file (``path``, else
        the file with these bytes) and what to do."""
        try:
            return self._decode(data)
        except Exception as exc:  # the decoder's error, whatever it is: the file named, one line
            paths = [p for p, _label in self.samples]
            raise cannot_decode("imagefolder", self.root, path or file_of(paths, data), exc) from None

    def store_files(self, indices):
        return [self.samples[int(i)][0] for i in indices]

    def __repr__(self) -> str:
        return f"ImageFolderDataset(root={str(self.root)!r}, n={len(self)}, classes={len(self.classes)})"


def bytes_on_disk(root) -> int:
    _c, samples = scan(root)
    return sum(os.stat(p).st_size for p, _l in samples)
