"""PNG pairs as written by ``data_prep sr``: ``hr/000000.png`` and ``lr/000000.png``.

This is the baseline the write-ups start from (one file per image, decoded per
access). The decoder is selectable: ``decode="pil"`` (default) or any backend
name ``feedlab.decode.available_backends()`` lists, or a callable
``fn(data: bytes) -> HWC uint8 array``. Without ``feedlab.decode`` installed,
only ``"pil"`` (and callables) work.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

from ._common import (
    SRDataset,
    atomic_output,
    count_from_manifest_or_files,
    first_shapes,
    iter_checked,
    read_files,
    read_regular,
    tree_bytes,
)
from ._decoding import DecoderState, resolve_decoder  # noqa: F401  (resolve_decoder: re-exported)

NAME_WIDTH = 6
PNG_COMPRESS_LEVEL = 6


def sample_name(i: int, ext: str = "png") -> str:
    return f"{i:0{NAME_WIDTH}d}.{ext}"


def _pil_decode(data: bytes, out: np.ndarray | None = None) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        if im.mode != "RGB":
            im = im.convert("RGB")
        if out is not None and out.shape == (im.height, im.width, 3):
            np.copyto(out, np.asarray(im))
            return out
        return np.array(im)  # writable (np.asarray would wrap read-only bytes)


def encode_png(arr: np.ndarray) -> bytes:
    """Deterministic PNG bytes of an RGB uint8 array (fixed compression level)."""
    buf = io.BytesIO()
    Image.fromarray(arr, "RGB").save(buf, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
    return buf.getvalue()


def read_png_rgb(path: str | os.PathLike) -> np.ndarray:
    return _pil_decode(read_regular(path))


class PngDataset(DecoderState, SRDataset):
    fmt = "png"

    def __init__(self, root, decode: str | Callable = "pil", as_tensor: bool = False):
        super().__init__(root, as_tensor)
        self._use_decoder(decode)
        self.hr_dir = self.root / "hr"
        self.lr_dir = self.root / "lr"
        if not self.hr_dir.is_dir() or not self.lr_dir.is_dir():
            raise FileNotFoundError(f"png: no hr/ and lr/ folders under {self.root}")
        self._n = count_from_manifest_or_files(self.root, self.hr_dir, "*.png")
        self.lr_shape = self.hr_shape = None
        if self._n:
            lr, hr = self._checked_read(0)
            self.lr_shape, self.hr_shape = lr.shape, hr.shape

    def _read(self, i: int):
        name = sample_name(i)
        shapes = getattr(self, "lr_shape", None) is not None
        lr = self._decode(read_regular(self.lr_dir / name), np.empty(self.lr_shape, np.uint8) if shapes else None)
        hr = self._decode(read_regular(self.hr_dir / name), np.empty(self.hr_shape, np.uint8) if shapes else None)
        return lr, hr

    def read_raw(self, i: int):
        name = sample_name(self._index(i))
        return read_files((self.lr_dir / name, self.hr_dir / name))

    def decode_raw(self, raw):
        return self._decode(raw[0]), self._decode(raw[1])

    def store_files(self, indices):
        return [d / sample_name(int(i)) for i in indices for d in (self.lr_dir, self.hr_dir)]

    def read_batch(self, indices, out=None):
        """Decode straight into the batch slots (backends that support ``out``)."""
        lr_b, hr_b = self._batch_out(len(indices), out)
        idx = [self._index(i) for i in indices]
        for k, i in enumerate(idx):
            name = sample_name(i)
            try:
                r = self._decode(read_regular(self.lr_dir / name), lr_b[k])
                if r is not lr_b[k]:
                    lr_b[k] = r
                r = self._decode(read_regular(self.hr_dir / name), hr_b[k])
                if r is not hr_b[k]:
                    hr_b[k] = r
            except Exception as exc:
                raise self._read_error(i, exc) from exc
        self._verify_batch(idx, lr_b, hr_b)
        return lr_b, hr_b

    def _sample_path(self, i: int) -> str:
        name = sample_name(i)
        return f"{self.lr_dir / name} / {self.hr_dir / name}"


def write(root, samples, **_opts) -> Path:
    """Write ``hr/`` and ``lr/`` PNG folders (each built in a temp dir, then renamed)."""
    root = Path(root)
    lr_shape, hr_shape = first_shapes(samples)
    with atomic_output(root / "hr", is_dir=True) as hr_tmp, atomic_output(root / "lr", is_dir=True) as lr_tmp:
        for i, (lr, hr) in enumerate(iter_checked(samples, lr_shape, hr_shape)):
            (hr_tmp / sample_name(i)).write_bytes(encode_png(hr))
            (lr_tmp / sample_name(i)).write_bytes(encode_png(lr))
    return root


def bytes_on_disk(root) -> int:
    root = Path(root)
    return tree_bytes(root / "hr") + tree_bytes(root / "lr")


def open_dataset(root, **opts) -> PngDataset:
    return PngDataset(root, **opts)
