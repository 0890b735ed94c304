"""Resize once ahead, measured on a sample: decode + transform at the stored size against the same images
stored at the size the transform gives (re-encoded in their own codec, in memory), each timed in rounds.

A stage-level measurement (the loop's gain from it is predicted from the stage costs, and said so), never
printed without its numbers; where the stored images already are the training size there is nothing to say.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from PIL import Image

from .costs import CostKey, CostTable, Stage
from .predict import predict
from .probes import timed

CODECS = ((b"\xff\xd8", "JPEG"), (b"\x89PNG", "PNG"))


def _image(x) -> np.ndarray | None:
    """The image of a sample (an HWC/HW array, or the first such array of a tuple)."""
    if isinstance(x, np.ndarray) and x.ndim in (2, 3):
        return x
    if isinstance(x, (tuple, list)):
        return next((i for i in map(_image, x) if i is not None), None)
    return None


def _encoded(raw) -> tuple[bytes, Any] | None:
    """(the encoded image bytes of ``raw``, a function that puts other bytes in their place)."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return bytes(raw), lambda b: b
    if isinstance(raw, tuple) and raw and isinstance(raw[0], (bytes, bytearray, memoryview)):
        return bytes(raw[0]), lambda b: (b, *raw[1:])
    return None


def _codec(data: bytes) -> str | None:
    return next((name for magic, name in CODECS if data.startswith(magic)), None)


def resize_ahead(split, indices, warmup: int = 1, repeats: int = 3) -> dict | None:
    """Decode + transform of ``indices`` as stored, against the same images re-encoded at the transform's
    output size: ``stored_s`` and ``ahead_s`` (seconds per sample, medians of the rounds), ``gain`` on those
    stages, the two sizes, ``samples``. None where it does not apply (no transform, a store that is not
    encoded images, images already at the training size)."""
    if split.transform is None:
        return None
    raws = [split.read(i) for i in indices]
    ahead, sizes = [], None
    for raw in raws:
        enc = _encoded(raw)
        codec = _codec(enc[0]) if enc else None
        if codec is None:
            return None
        src, out = _image(split.decode(raw)), _image(split.transform(split.decode(raw)))
        if src is None or out is None:
            return None
        sizes = sizes or (src.shape[:2], out.shape[:2])
        if src.shape[:2] == out.shape[:2]:
            return None   # stored at the training size already
        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(out)).save(buf, format=codec, **({"quality": 95} if codec == "JPEG"
                                                                                else {}))
        ahead.append(enc[1](buf.getvalue()))

    def run(items):
        return lambda: [split.transform(split.decode(r)) for r in items]

    n = len(raws)
    stored, _ = timed(run(raws), n, warmup, repeats)
    done, _ = timed(run(ahead), n, warmup, repeats)
    s, a = float(np.median(stored)), float(np.median(done))
    return {"stored_s": s, "ahead_s": a, "gain": s / a if a > 0 else None, "stored_size": list(sizes[0]),
            "train_size": list(sizes[1]), "samples": n}


def ahead_words(r: dict) -> str:
    """"decode + transform 4.10 ms a sample at the stored 480×640, 0.31 ms at the training 96×96 (×13.2 on
    those stages, measured on 16 samples)"."""
    h, w = r["stored_size"]
    th, tw = r["train_size"]
    return (f"decode + transform {r['stored_s'] * 1e3:,.2f} ms a sample at the stored {h}×{w}, "
            f"{r['ahead_s'] * 1e3:,.2f} ms at the training {th}×{tw} (×{r['gain']:.2f} on those stages, measured "
            f"on {r['samples']} samples)")


def loop_gain(table, spec, r: dict) -> float | None:
    """The loop's gain predicted from the stage costs with decode + transform priced as measured ahead (the
    loop itself not measured: said so wherever it is printed)."""
    fmt, dec = spec.format, spec.decode_backend
    base = predict(table, spec)
    stages = dict(table.stages)
    d, t = table.get(CostKey("decode", fmt, dec)), table.get(CostKey("transform", fmt, dec))
    if base is None or d is None or t is None or not (d.t + t.t) > 0:
        return None
    f = r["ahead_s"] / r["stored_s"]
    stages[CostKey("decode", fmt, dec)] = Stage("decode", "ahead", [d.t * f], [d.c * f])
    stages[CostKey("transform", fmt, dec)] = Stage("transform", "ahead", [t.t * f], [t.c * f])
    new = predict(CostTable(table.machine, stages), spec)
    return new["predicted_samples_per_s"] / base["predicted_samples_per_s"] if new else None
