"""feedlab's own fast paths, as the doctor advises them.

SR: the memory-mapped ``.npy`` pair (``data_prep pack --to npy_mmap``) read a
whole batch at a time by ``read_batch`` straight into uint8 batch buffers (one
gather per side, no per-sample arrays, no collate). With 0 workers the
single-process :class:`~feedlab.loaders.BatchReadLoader` refills two reused
buffers; with workers each worker reads whole batches into shared memory
(DataLoader over index batches, ``batch_size=None``, persistent workers).

Classification: the JPEG files read as they are; per sample simplejpeg reads
the header, the random-resized-crop box is drawn (torchvision's rule), the
JPEG is decoded at the smallest DCT scale that keeps the box at least
``size`` pixels (libjpeg-turbo's 1/2, 1/4, 1/8 decode), cropped, resized
(Pillow, bilinear), flipped, and written into its slot of a preallocated uint8
NHWC batch. Without simplejpeg, Pillow's ``draft`` does the reduced decode.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from feedlab.collate import _alloc
from feedlab.loaders import BatchReadLoader, index_batches

from ._common import SRPairs
from .base import Conversion, Source, Spec, rrc_box, timed_conversion


def convert(source: Source, work) -> Conversion:
    if source.kind == "cls":
        return Conversion(0.0, source.source_bytes(), str(source.root), "reads the source JPEGs")
    from feedlab import formats

    return timed_conversion(work, lambda tmp: formats.write("npy_mmap", tmp, SRPairs(source)),
                            "npy_mmap: lr.npy + hr.npy")


def data_files(source: Source, work):
    if source.kind == "cls":
        return list(source.paths)
    return [work / "npy_mmap" / "lr.npy", work / "npy_mmap" / "hr.npy"]


class EpochBatches:
    """Re-iterable index batches: a new permutation per ``iter`` (one per epoch)."""

    def __init__(self, n: int, batch_size: int, shuffle: bool, seed: int):
        self.n, self.batch_size, self.shuffle, self.seed = n, batch_size, shuffle, seed
        self.epoch = 0

    def __len__(self) -> int:
        return -(-self.n // self.batch_size)

    def __iter__(self):
        out = index_batches(self.n, self.batch_size, self.shuffle, self.seed, self.epoch)
        self.epoch += 1
        return iter(out)


class SRBatches(Dataset):
    """``ds[list of indices]`` -> one batch read into shared-memory tensors (for workers)."""

    def __init__(self, root):
        from feedlab.formats import open_dataset

        self.ds = open_dataset(root, "npy_mmap")

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, idx):
        n = len(idx)
        lr = _alloc((n, *self.ds.lr_shape), shared=True, pin=False)
        hr = _alloc((n, *self.ds.hr_shape), shared=True, pin=False)
        self.ds.read_batch(idx, out=(lr.numpy(), hr.numpy()))
        return lr, hr


def _decode_crop(data: bytes, size: int, rng, augment: bool, sj) -> np.ndarray:
    """Reduced-scale decode of the crop box, resized to ``size``; HWC uint8."""
    from PIL import Image

    if sj is not None:
        h, w, _, _ = sj.decode_jpeg_header(data)
    else:
        im = Image.open(__import__("io").BytesIO(data))
        w, h = im.size
    top, left, ch, cw = rrc_box(h, w, rng) if augment else (0, 0, h, w)
    # smallest full-image size that keeps the box >= size on both sides
    need_h, need_w = math.ceil(size * h / ch), math.ceil(size * w / cw)
    if sj is not None:
        img = sj.decode_jpeg(data, "RGB", min_height=min(need_h, h), min_width=min(need_w, w))
    else:
        im.draft("RGB", (min(need_w, w), min(need_h, h)))
        img = np.asarray(im.convert("RGB"))
    fy, fx = img.shape[0] / h, img.shape[1] / w
    y0, x0 = int(top * fy), int(left * fx)
    y1, x1 = max(y0 + 1, int(round((top + ch) * fy))), max(x0 + 1, int(round((left + cw) * fx)))
    crop = Image.fromarray(np.ascontiguousarray(img[y0:y1, x0:x1]))
    out = np.asarray(crop.resize((size, size), Image.BILINEAR))
    if augment and rng.random() < 0.5:
        out = out[:, ::-1]
    return out


class JpegBatches(Dataset):
    """``ds[list of indices]`` -> ``(images NHWC uint8, labels, ids)``, decoded into one buffer."""

    def __init__(self, source: Source, size: int, augment: bool, seed: int, shared: bool):
        self.paths = [str(p) for p in source.paths]
        self.labels = torch.from_numpy(source.labels)
        self.size, self.augment, self.seed, self.shared = size, augment, seed, shared
        self._rng = None
        self._buf = None

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, idx):
        try:
            import simplejpeg as sj
        except ImportError:
            sj = None
        if self._rng is None:
            self._rng = np.random.default_rng([self.seed, os.getpid()])
        n, s = len(idx), self.size
        if self.shared:
            out = _alloc((n, s, s, 3), shared=True, pin=False)
        else:  # one process: refill one buffer (the consumer is done with a batch before the next)
            if self._buf is None or len(self._buf) < n:
                self._buf = torch.empty((n, s, s, 3), dtype=torch.uint8)
            out = self._buf[:n]
        dst = out.numpy()
        for k, i in enumerate(idx):
            with open(self.paths[i], "rb") as fh:
                dst[k] = _decode_crop(fh.read(), s, self._rng, self.augment, sj)
        ids = torch.as_tensor(idx, dtype=torch.int64)
        return out, self.labels[ids], ids


class _InProcess:
    def __init__(self, ds, batches):
        self.ds, self.batches = ds, batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        for idx in self.batches:
            yield self.ds[idx]


def loader(source: Source, work, spec: Spec):
    batches = EpochBatches(source.n, spec.batch_size, spec.shuffle, spec.seed)
    if source.kind == "sr":
        if spec.workers == 0:
            from feedlab.formats import open_dataset

            return BatchReadLoader(open_dataset(work, "npy_mmap"), spec.batch_size, shuffle=spec.shuffle,
                                   seed=spec.seed, reuse_buffers=True)
        ds = SRBatches(work)
    else:
        ds = JpegBatches(source, spec.size, spec.augment, spec.seed, shared=spec.workers > 0)
        if spec.workers == 0:
            return _InProcess(ds, batches)
    return DataLoader(ds, sampler=batches, batch_size=None, num_workers=spec.workers,
                      persistent_workers=True, prefetch_factor=2)
