"""The invariants an experiment writes on every row it measures (issue 45), from what its code path did: the one
judge (:func:`feedlab.like_for_like.verdict`) reads them back from ``results.csv`` on both sides of a claim.

:func:`pixel_error_of` is the cheap pixel check: the first few samples of a store, decoded as the experiment
decodes them, against the reference decode (the PNG store through Pillow; a classification store's own
files through Pillow), as the largest per-sample mean
|diff| (0–255); :func:`grid_invariants` is what :func:`feedlab.experiments.loader_grid.run_grid` writes on each
row (the loader's order, those pixels, a warm cache, the timed window's seconds, one loader epoch per pass).
The convention (``not applicable``, ``not checked``) is :func:`feedlab.like_for_like.invariants`'."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from feedlab import decode, formats
from feedlab.like_for_like import NOT_CHECKED, invariants

CHECKED_SAMPLES = 4          # samples the pixel check decodes on each side (cheap: a few ms)
REFERENCE = ("png", "pil")   # the reference decode: the PNG store through Pillow (sr); Pillow on the files (cls)


def _images(item) -> list[np.ndarray]:
    parts = item if isinstance(item, (tuple, list)) else (item,)
    return [np.asarray(p) for p in parts if getattr(p, "ndim", 0) >= 2 and np.asarray(p).dtype == np.uint8]


@lru_cache(maxsize=32)
def _pixel_error(root: str, fmt: str, decode: str | None, n: int) -> float | str:
    try:
        spec = formats.get_format(fmt)
        opts = {"decode": decode} if spec.image_codec is not None and decode else {}
        ds = formats.open_dataset(root, fmt, **opts)
        ref_fmt = REFERENCE[0] if spec.kind == "sr" else fmt   # a classification store: its own files
        if formats.get_format(ref_fmt).image_codec is None:
            return NOT_CHECKED
        ref = formats.open_dataset(root, ref_fmt, decode=REFERENCE[1])
    except Exception:   # a store with no PNG beside it, or one that cannot be opened raw: the check did not run
        return NOT_CHECKED
    worst = 0.0
    for i in range(min(n, len(ds), len(ref))):
        got, want = _images(ds[i]), _images(ref[i])
        if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want)):
            return NOT_CHECKED   # not the same images (a store of other samples): nothing to compare
        for g, w in zip(got, want):
            worst = max(worst, float(np.abs(g.astype(np.int16) - w.astype(np.int16)).mean()))
    return worst


def pixel_error_of(root, fmt: str, decode: str | None = None, n: int = CHECKED_SAMPLES) -> float | str:
    """The largest mean |diff| (0–255) over the first ``n`` samples of ``fmt`` under ``root`` (decoded by
    ``decode``, default the format's) against the PNG store through Pillow; :data:`NOT_CHECKED` where the two
    stores cannot be compared (the judge reads it as not known)."""
    decode = None if decode in (None, "", "auto", "none") else str(decode)
    return _pixel_error(str(Path(root)), str(fmt), decode, int(n))


def decode_pixel_error(backend: str, datas, resize_to: int | None = None, n: int = CHECKED_SAMPLES) -> float | str:
    """The largest mean |diff| (0–255) of ``backend``'s decode (and resize to ``resize_to``) of the first ``n``
    encoded images ``datas`` against Pillow's full decode (and resize, no reduced-scale draft): 06's pixel
    check; :data:`NOT_CHECKED` where a side cannot decode them here or gives another shape."""
    worst = 0.0
    try:
        for d in list(datas)[:n]:
            if resize_to:
                got = decode.decode_resize(d, resize_to, backend)
                want = decode.decode_resize(d, resize_to, "pil", use_draft=False)
            else:
                got, want = decode.decoder(backend)(d), decode.decoder("pil")(d)
            got, want = np.asarray(got), np.asarray(want)
            if got.shape != want.shape:
                return NOT_CHECKED
            worst = max(worst, float(np.abs(got.astype(np.int16) - want.astype(np.int16)).mean()))
    except Exception:   # a backend not installed here, or one that cannot read this kind: not checked
        return NOT_CHECKED
    return worst


def order_of_loader(loader: str | None, shuffle: bool = True, sampler=None) -> str:
    """The order class (:data:`feedlab.like_for_like.ORDERS`) the loader kind draws in: ``chunk`` reads each
    batch from one chunk; any other kind with ``shuffle`` (or a ``RandomSampler``) a global permutation per
    epoch; without, storage order."""
    if loader == "chunk":
        return "chunk"
    if sampler is not None:
        return "global" if "Random" in type(sampler).__name__ else "sequential"
    return "global" if shuffle else "sequential"


def timed_window_s(et, warm: int, kind: str) -> float:
    """The wall seconds behind :func:`feedlab.pipeline.rate_of`'s rate of the timed epoch ``et`` (its ``kind``):
    its batches after the first ``warm`` for a steady rate, else the whole epoch (a start-up inclusive rate)."""
    return float(et.wall_s - (float(np.sum(et.phases_s[:warm])) if kind == "steady" else 0.0))


def grid_invariants(spec, root, et, warm: int, kind: str, *, pixels: float | str | None = None) -> dict:
    """:func:`~feedlab.experiments.loader_grid.run_grid`'s row invariants for ``spec`` timed as ``et`` (its rate's
    ``kind``; a steady one leaves the first ``warm`` batches out): its loader's order (shuffled; chunk for a chunk loader), the pixel check of its
    format and decode (``pixels`` where the caller ran it), a warm cache (the grid's warm-up epoch and a cycled
    set read it first), the timed window, and one loader epoch holding the whole timed pass (``epoch_batches``
    0: the grid cycles a small set inside one sampler epoch)."""
    px = pixel_error_of(root, spec.format, getattr(spec, "decode_backend", None)) if pixels is None else pixels
    return invariants(order=order_of_loader(getattr(spec, "loader", None)), pixel_error=px, cache="warm",
                      window_s=timed_window_s(et, warm, kind), epoch_batches=0)
