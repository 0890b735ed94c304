"""feedlab's own fast paths, as the doctor advises them.

Like for like with the peers (:mod:`feedlab.like_for_like`): the same sample order, the same pixels,
exactly the worker count asked.

SR: the memory-mapped ``.npy`` pair (``data_prep pack --to npy_mmap``, the format the doctor
advises for these pairs in notebook 10), read by the pipeline the doctor advises for this data
and worker count (:func:`advised_spec`): the doctor measures the store (stage costs, collates, the
DataLoader's and the ring's hand-over, the one-process loader kinds) and the spec it predicts
fastest, among the loader kinds and uint8 collates that run exactly this many workers (a
one-process kind at 0 only) and keep a global permutation per epoch when shuffled (the ``chunk``
kind, each batch from one contiguous chunk, is left out: its order is not a peer's), is built by
``pipeline.make_loader``. No loader of its own: the row is the doctor's advice, by construction,
and says which spec it chose (``doctor_choice``).

Classification: the JPEG files read as they are; per sample simplejpeg reads
the header, the random-resized-crop box is drawn (torchvision's rule), the
JPEG is decoded at full scale (the pixels of a full decode, as DALI's and Pillow's; ``Spec`` has no
switch for it: :data:`REDUCED_SCALE` set True decodes at the smallest DCT scale that keeps the box at
least ``size`` pixels, faster and about 10 grey levels off the reference, so not like for like),
cropped, resized (Pillow, bilinear), flipped, and written into its slot of a preallocated uint8
NHWC batch. Without simplejpeg, Pillow decodes.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch
from torch.utils.data import Dataset

from feedlab import formats
from feedlab import pipeline as pl
from feedlab.collate import alloc_batch
from feedlab.doctor import Doctor, Effort
from feedlab.doctor import predict as PR
from feedlab.pipeline import PipelineSpec
from feedlab.pipeline.loaders import index_batches

from ._common import SRPairs
from .base import Conversion, Source, Spec, rrc_box, timed_conversion

REDUCED_SCALE = False   # True: libjpeg-turbo's 1/2, 1/4, 1/8 decode (not the peers' pixels)
# loader kinds whose order is not a global permutation per epoch (each batch from one contiguous chunk)
NOT_GLOBAL = ("chunk",)


def convert(source: Source, work) -> Conversion:
    if source.kind == "cls":
        return Conversion(0.0, source.source_bytes(), str(source.root), "reads the source JPEGs")
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
        img = (sj.decode_jpeg(data, "RGB", min_height=min(need_h, h), min_width=min(need_w, w)) if REDUCED_SCALE
               else sj.decode_jpeg(data, "RGB"))
    else:
        if REDUCED_SCALE:
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
            out = alloc_batch((n, s, s, 3), shared=True, pin=False)
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


_CHOICES: dict[tuple, object] = {}


def advised_spec(work, workers: int, batch_size: int, fmt: str = "npy_mmap", shuffle: bool = True):
    """The spec the doctor advises for the store under ``work`` with exactly ``workers`` workers:
    the doctor measures it (a small budget, outside any timed epoch) and every single change it
    can price among loader kinds and collates that keep that worker count and, ``shuffle``d, a global
    permutation (no :data:`NOT_GLOBAL` kind) is predicted (``doctor.predict``); the fastest, if faster
    than the start, wins. Cached per (store, workers, batch, order)."""
    key = (str(work), int(workers), int(batch_size), fmt, bool(shuffle))
    if key not in _CHOICES:
        start = PipelineSpec(format=fmt, collate="fast_cl", transform="none", batch_size=int(batch_size),
                             num_workers=int(workers), model="none", device="cpu")
        doc = Doctor(work, start, max_workers=int(workers),
                     effort=Effort(repeats=2, warmup=1, samples=64, e2e_batches=8, cold=False), alt_formats=[])
        doc.measure()
        best, rate = start, (PR.predict(doc.table, start) or {}).get("predicted_samples_per_s", 0.0)
        for setting, value, new in PR.candidates(doc.table, start, int(workers)):
            if setting not in ("loader", "collate") or new.num_workers != workers or (
                    shuffle and new.loader in NOT_GLOBAL):
                continue
            p = PR.predict(doc.table, new)
            if p and p["predicted_samples_per_s"] > rate:
                best, rate = new, p["predicted_samples_per_s"]
        _CHOICES[key] = best
    return _CHOICES[key]


def loader(source: Source, work, spec: Spec):
    batches = EpochBatches(source.n, spec.batch_size, spec.shuffle, spec.seed)
    if source.kind == "sr":
        best = advised_spec(work, spec.workers, spec.batch_size, shuffle=spec.shuffle)
        ld = pl.make_loader(pl.open_dataset(work, best, verify=False), best, seed=spec.seed, shuffle=spec.shuffle)
        ld.doctor_choice = best.label()   # which spec the doctor chose: the row says it
        return ld
    ds = JpegBatches(source, spec.size, spec.augment, spec.seed, shared=spec.workers > 0)
    if spec.workers == 0:
        return _InProcess(ds, batches)
    from torch.utils.data import default_convert

    # workers read whole batches (the dataset yields them): kind "dataloader" with automatic batching off
    wspec = pl.PipelineSpec(batch_size=spec.batch_size, num_workers=spec.workers, persistent_workers=True,
                           prefetch_factor=2, device="cpu")
    return pl.make_loader(ds, wspec, shuffle=False, collate_fn=default_convert, sampler=batches, batch_size=None)
