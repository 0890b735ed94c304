"""Is a contender's output the source's samples, all of them, once each?

SR: every returned ``(lr, hr)`` pair is hashed (SHA-1 of both images' bytes,
NHWC) and the multiset is compared with the source's: missing, unexpected and
repeated pairs are counted, so a loader that drops, repeats, pads or corrupts
samples fails. Classification (random crops cannot be compared pixel by pixel):
with ``augment=False`` each returned image is compared with a reference —
Pillow decode, bilinear resize to ``size × size`` — by mean absolute difference
(``tolerance`` grey levels: resamplers differ by a few levels, a wrong image
by tens), and the returned ``ids`` must be every source index exactly once with
its label. :func:`count_epoch` checks counts and identities of any epoch,
augmented ones included, cheaply enough to run on timed epochs.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import numpy as np

from ._common import stop_workers
from .base import Source, Spec

CLS_TOLERANCE = 20.0  # mean |difference| in grey levels (0..255) allowed against the reference
# (reduced-scale DCT decoding + a resize differs from Pillow's antialiased resize by up to ~16 levels on
# 32-64 px images; a different image by more, and it is also caught by the nearest-reference test)


def to_nhwc_uint8(x) -> np.ndarray:
    """A batch of images (numpy or torch; NHWC or NCHW; uint8, or float in [0, 1]) as NHWC uint8."""
    a = x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else np.asarray(x)
    if a.ndim != 4:
        raise ValueError(f"expected a 4-d image batch, got shape {a.shape}")
    if a.shape[-1] not in (1, 3) and a.shape[1] in (1, 3):
        a = a.transpose(0, 2, 3, 1)
    if np.issubdtype(a.dtype, np.floating):
        a = np.clip(np.rint(a.astype(np.float64) * 255.0), 0, 255).astype(np.uint8)
    elif a.dtype != np.uint8:  # an integer type wider than the source: values must still fit
        if a.size and (a.min() < 0 or a.max() > 255):
            raise ValueError(f"image values outside 0..255 in a {a.dtype} batch")
        a = a.astype(np.uint8)
    return np.ascontiguousarray(a)


def _flat(x) -> np.ndarray:
    a = x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else np.asarray(x)
    return a.reshape(-1).astype(np.int64)


def pair_digest(lr: np.ndarray, hr: np.ndarray) -> str:
    h = hashlib.sha1(np.ascontiguousarray(lr).tobytes())
    h.update(np.ascontiguousarray(hr).tobytes())
    return h.hexdigest()


def source_digests(source: Source) -> Counter:
    return Counter(pair_digest(source.lr[i], source.hr[i]) for i in range(source.n))


def reference_image(source: Source, i: int, size: int) -> np.ndarray:
    from PIL import Image

    with Image.open(source.paths[i]) as im:
        return np.asarray(im.convert("RGB").resize((size, size), Image.BILINEAR))


def _thumb(img: np.ndarray) -> np.ndarray:
    """An 8x8 block-mean thumbnail (float32) of an HWC image."""
    h, w = img.shape[0] // 8 * 8, img.shape[1] // 8 * 8
    a = img[:h, :w].astype(np.float32)
    return a.reshape(8, h // 8, 8, w // 8, -1).mean(axis=(1, 3))


def _summary(expected: int, got: Counter, want: Counter) -> dict:
    missing = sum((want - got).values())
    unexpected = sum((got - want).values())
    return {"expected": expected, "returned": int(sum(got.values())), "missing": int(missing),
            "unexpected": int(unexpected), "repeated": int(sum(v - 1 for v in got.values() if v > 1))}


def verify_sr(batches, source: Source) -> dict:
    """Hash every pair of one epoch of ``batches`` and compare with the source."""
    got: Counter = Counter()
    for lr, hr in ((b[0], b[1]) for b in batches):
        lr, hr = to_nhwc_uint8(lr), to_nhwc_uint8(hr)
        if len(lr) != len(hr):
            raise ValueError(f"lr batch of {len(lr)} beside hr batch of {len(hr)}")
        for k in range(len(lr)):
            got[pair_digest(lr[k], hr[k])] += 1
    out = _summary(source.n, got, source_digests(source))
    out["ok"] = out["missing"] == 0 and out["unexpected"] == 0 and out["returned"] == source.n
    out["method"] = "sha1 of every (lr, hr) pair against the source"
    return out


_REFERENCES: dict[tuple, tuple[list, np.ndarray]] = {}


def references(source: Source, size: int) -> tuple[list, np.ndarray]:
    """Every source image's reference decode at ``size`` and its 8x8 thumbnail, computed once per source
    (files, count, size and the files' sizes and times) in this process: each contender is checked against
    the same references without decoding them again."""
    stats = tuple((str(p), st.st_size, st.st_mtime_ns) for p in source.paths for st in [Path(p).stat()])
    key = (hash(stats), int(size))
    if key not in _REFERENCES:
        refs = [reference_image(source, i, size) for i in range(source.n)]
        _REFERENCES.clear()   # one source at a time: no growth over a long session
        _REFERENCES[key] = (refs, np.stack([_thumb(r) for r in refs]))
    return _REFERENCES[key]


def verify_cls(batches, source: Source, size: int, pixels: bool = True, tolerance: float = CLS_TOLERANCE) -> dict:
    """One un-augmented epoch: ids once each, labels right, pixels near the reference."""
    ids_seen: Counter = Counter()
    thumbs = None
    if pixels:  # 8x8 thumbnails of every reference: is each image nearest to its own?
        refs, thumbs = references(source, size)
    not_nearest = 0
    bad_label = 0
    worst = 0.0
    mads = []
    for b in batches:
        imgs, labels, ids = to_nhwc_uint8(b[0]), _flat(b[1]), _flat(b[2])
        if not (len(imgs) == len(labels) == len(ids)):
            raise ValueError(f"batch of {len(imgs)} images, {len(labels)} labels, {len(ids)} ids")
        for k, i in enumerate(ids.tolist()):
            ids_seen[i] += 1
            if not 0 <= i < source.n or labels[k] != source.labels[i]:
                bad_label += 1
                continue
            if pixels:
                if imgs[k].shape != (size, size, 3):
                    mads.append(float("inf"))
                    continue
                ref = refs[i]
                mads.append(float(np.abs(imgs[k].astype(np.int16) - ref.astype(np.int16)).mean()))
                d = np.abs(thumbs - _thumb(imgs[k])).mean(axis=(1, 2, 3))
                not_nearest += int(d[i] > d.min())
    want = Counter(range(source.n))
    out = _summary(source.n, ids_seen, want)
    worst = max(mads) if mads else float("nan")
    out.update({"wrong_label": int(bad_label), "pixels_checked": bool(pixels), "tolerance": tolerance,
                "max_mean_abs_diff": worst, "median_mean_abs_diff": float(np.median(mads)) if mads else float("nan"),
                "over_tolerance": int(sum(m > tolerance for m in mads)), "not_nearest": not_nearest})
    out["ok"] = (out["missing"] == 0 and out["unexpected"] == 0 and out["returned"] == source.n
                 and bad_label == 0 and out["over_tolerance"] == 0 and not_nearest == 0)
    out["method"] = ("un-augmented decode + resize vs Pillow reference (mean |diff| <= "
                     f"{tolerance:g}, and nearest to its own reference), ids once each, labels" if pixels else "ids once each, labels (pixels not comparable)")
    return out


def verify(peer, source: Source, work, spec: Spec) -> dict:
    """Run one un-timed epoch of ``peer`` with augmentation off and check it."""
    spec = spec.with_(augment=False)
    batches = peer.loader(source, work, spec)
    try:
        if source.kind == "sr":
            return verify_sr(batches, source)
        pixels = getattr(peer._impl(), "VERIFY_PIXELS", True)
        return verify_cls(batches, source, spec.size, pixels=pixels)
    finally:   # its workers stopped before the timed loader forks its own (_common.stop_workers)
        stop_workers(batches)


class EpochCounter:
    """Counts samples (and, for classification, identities) of a timed epoch as batches pass."""

    def __init__(self, kind: str):
        self.kind = kind
        self.samples = 0
        self.ids: list[np.ndarray] = []

    def add(self, batch) -> None:
        first = batch[0]
        self.samples += int(first.shape[0])
        if self.kind == "cls":
            self.ids.append(_flat(batch[2]))

    def result(self, n: int) -> dict:
        out = {"samples": self.samples, "expected": n, "ok": self.samples == n}
        if self.kind == "cls":
            ids = np.concatenate(self.ids) if self.ids else np.zeros(0, np.int64)
            out["distinct_ids"] = int(len(np.unique(ids)))
            out["ok"] = out["ok"] and out["distinct_ids"] == n
        return out
