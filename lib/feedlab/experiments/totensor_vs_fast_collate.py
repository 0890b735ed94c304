"""ToTensor + default_collate against a uint8 fast collate (notebook 07_totensor_vs_fast_collate).

Every variant turns the same list of HWC uint8 images (what a decoder hands
back) into one batch; the clock covers only that step.

==========================  =================================================
``totensor``                 ``ToTensor()`` per image, then ``default_collate``
                             (:func:`feedlab.collate.totensor_collate`)
``fast_nchw``                :class:`feedlab.collate.FastCollate` ('nchw'):
                             one transposing copy per image into a uint8 batch
``fast_channels_last``       the same with ``'channels_last'``: a plain copy
``memcpy_ceiling``           each image's bytes into a preallocated slot
                             (:func:`feedlab.collate.memcpy_ceiling`): no
                             collate can beat it on this machine
==========================  =================================================

Where the stock path's time goes is timed piece by piece, each piece on its
own inputs prepared outside the clock:

* ``transpose``: HWC -> CHW and ``.contiguous()`` (uint8), per image;
* ``to_float``: uint8 -> float32 and the division by 255, per CHW image;
* ``stack``: ``default_collate`` of the float CHW images (one more copy, 4×
  the bytes of a uint8 batch).

All of it runs on ``threads`` torch threads (1 by default: DataLoader
workers run with one thread each).
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from feedlab.experiments import _finding_titles as FT
from feedlab.like_for_like import MET, MISSED, NOT_APPLICABLE, WITHIN, invariants
from feedlab.plots import PALETTE, errorbar_series, legend_outside
from feedlab.report.claims.core import NoData, Run
from feedlab.report.stage_judge import collate_verdict
from feedlab.results import Results, summarize
from feedlab.timing import autorange_number, time_callable

EXPERIMENT = "totensor_vs_fast_collate"
VARIANTS = ("totensor", "fast_nchw", "fast_channels_last", "memcpy_ceiling")
PIECES = ("transpose", "to_float", "stack")
LABELS = {"totensor": "ToTensor + default_collate", "fast_nchw": "FastCollate (NCHW)",
          "fast_channels_last": "FastCollate (channels_last)", "memcpy_ceiling": "memcpy ceiling",
          "transpose": "HWC→CHW transpose + contiguous", "to_float": "uint8→float ÷255",
          "stack": "default_collate stack"}


def make_images(batch_size: int, size: int, channels: int = 3, seed: int = 0) -> list[np.ndarray]:
    """``batch_size`` distinct HWC uint8 images (separate allocations, as decoders return them)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (size, size, channels), dtype=np.uint8) for _ in range(batch_size)]


@contextmanager
def torch_threads(n: int | None):
    import torch

    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def collate_callables(images: list[np.ndarray]) -> dict[str, callable]:
    """The four whole-batch variants as zero-argument callables over ``images``."""
    from feedlab.collate import FastCollate, memcpy_ceiling, totensor_collate

    nchw = FastCollate("nchw")
    cl = FastCollate("channels_last")
    out = np.empty((len(images),) + images[0].shape, dtype=np.uint8)
    out.fill(0)  # fault the pages in: the ceiling is a copy, not first-touch
    return {
        "totensor": lambda: totensor_collate(images),
        "fast_nchw": lambda: nchw(images),
        "fast_channels_last": lambda: cl(images),
        "memcpy_ceiling": lambda: memcpy_ceiling(images, out),
    }


def piece_callables(images: list[np.ndarray]) -> dict[str, callable]:
    """The stock path split into its three pieces, each with its own ready inputs."""
    import torch
    from torch.utils.data import default_collate

    chw_u8 = [torch.from_numpy(x.transpose(2, 0, 1)).contiguous() for x in images]
    chw_f = [t.to(dtype=torch.float32).div(255) for t in chw_u8]

    def transpose():
        return [torch.from_numpy(x.transpose(2, 0, 1)).contiguous() for x in images]

    def to_float():
        return [t.to(dtype=torch.float32).div(255) for t in chw_u8]

    def stack():
        return default_collate(chw_f)

    return {"transpose": transpose, "to_float": to_float, "stack": stack}


def check_equal(images: list[np.ndarray]) -> float:
    """The fast variants must give the stock batch (after the deferred float conversion); returns the largest
    mean |diff| against it on the 0–255 scale (0.0: the check passed bit for bit; else it raises)."""
    import torch

    from feedlab.collate import to_float

    calls = collate_callables(images)
    ref = calls["totensor"]()
    for name in ("fast_nchw", "fast_channels_last"):
        got = to_float(calls[name]())
        if not torch.equal(got.contiguous(), ref):
            raise AssertionError(f"{name} does not reproduce ToTensor + default_collate")
    return 0.0


def measure(batch_sizes, image_sizes, repeats: int = 5, warmup: int = 1, threads: int | None = 1,
            pieces: bool = True, min_round_s: float = 0.02) -> Results:
    """ms per batch for every (image size, batch size, variant), and the stock path's pieces.

    Each repeat is one round of ``number`` calls (chosen so a round lasts at least
    ``min_round_s``); variants are interleaved per repeat.
    """
    res = Results()
    with torch_threads(threads):
        for size in image_sizes:
            for bs in batch_sizes:
                images = make_images(bs, size)
                px = check_equal(images[: min(bs, 4)])   # the pixels every variant's rows record
                calls = collate_callables(images)
                if pieces:
                    calls.update({f"piece:{k}": v for k, v in piece_callables(images).items()})
                numbers = {k: autorange_number(fn, min_round_s) for k, fn in calls.items()}
                samples: dict[str, list[float]] = {k: [] for k in calls}
                for _ in range(repeats):
                    for k, fn in calls.items():
                        samples[k] += time_callable(fn, warmup=warmup, repeats=1, number=numbers[k])
                mb = bs * size * size * 3 / 1e6
                for k, s in samples.items():
                    kind = "piece" if k.startswith("piece:") else "collate"
                    name = k.split(":", 1)[-1]
                    params = dict(batch_size=bs, image_size=size, kind=kind, threads=threads or 0,
                                  batch_mb_uint8=round(mb, 4), timed_batches=numbers[k],
                                  num_workers=0)   # every side runs in this process: the judge compares it
                    for r, v in enumerate(s):   # in-memory arrays: no sampler order, no cache (issue 45)
                        inv = invariants(order=NOT_APPLICABLE, pixel_error=px, cache=NOT_APPLICABLE,
                                         window_s=v * numbers[k], epoch_batches=NOT_APPLICABLE)
                        res.add(EXPERIMENT, name, "ms_per_batch", v * 1e3, "ms", r, **params, **inv)
                        res.add(EXPERIMENT, name, "gb_per_s_uint8", mb / 1e3 / v, "GB/s", r, **params, **inv)
    return res


def summary(df):
    """Median/IQR of ms per batch per (kind, variant, image size, batch size), with
    ``speedup_vs_totensor`` (stock median ÷ this median)."""
    d = df[df["metric"] == "ms_per_batch"]
    s = summarize(d, ["kind", "variant", "image_size", "batch_size"])
    stock = s[s["variant"] == "totensor"].set_index(["image_size", "batch_size"])["median"]
    s["speedup_vs_totensor"] = [stock.get((i, b), np.nan) / m for i, b, m in
                                s[["image_size", "batch_size", "median"]].itertuples(index=False)]
    return s


def plot_scaling(axes, s) -> None:
    """One axis per image size: ms per batch vs batch size, one line per variant (IQR bars)."""
    sizes = sorted(s["image_size"].unique())
    for ax, size in zip(axes, sizes):
        part = s[(s["kind"] == "collate") & (s["image_size"] == size)]
        for v in VARIANTS:
            pv = part[part["variant"] == v].sort_values("batch_size")
            if len(pv):
                errorbar_series(ax, pv["batch_size"].to_numpy(), pv["median"], pv["q25"], pv["q75"],
                                label=LABELS[v])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{size}×{size}×3 uint8 images")
        ax.set_xlabel("batch size")
    axes[0].set_ylabel("ms per batch (median, IQR)")
    legend_outside(axes[len(sizes) - 1], "right", fontsize=8)  # beside the last panel, off the lines


def plot_split(ax, s, batch_size: int, legend: bool = True) -> None:
    """Stacked pieces of the stock path beside the measured whole and the fast variants."""
    sizes = sorted(s["image_size"].unique())
    x = np.arange(len(sizes))
    piece_colors = {"transpose": PALETTE[3], "to_float": PALETTE[1], "stack": PALETTE[4]}
    bottom = np.zeros(len(sizes))
    w = 0.2
    for p in PIECES:
        vals = np.array([_med(s, "piece", p, sz, batch_size) for sz in sizes])
        ax.bar(x - 1.5 * w, vals, w, bottom=bottom, color=piece_colors[p], label=f"stock piece: {LABELS[p]}")
        bottom += vals
    for j, v in enumerate(VARIANTS):
        part = s[(s["kind"] == "collate") & (s["variant"] == v) & (s["batch_size"] == batch_size)]
        part = part.set_index("image_size").reindex(sizes)
        med = part["median"].to_numpy(dtype=float)
        err = np.clip(np.vstack([med - part["q25"].to_numpy(dtype=float),
                                 part["q75"].to_numpy(dtype=float) - med]), 0, None)
        ax.bar(x + (j - 0.5) * w, med, w, yerr=err, capsize=2, label=LABELS[v],
               color=["#444444", PALETTE[0], PALETTE[2], "#aaaaaa"][j])
    ax.set_xticks(x)
    ax.set_xticklabels([f"{sz}²" for sz in sizes])
    ax.set_xlabel("image size")
    ax.set_ylabel(f"ms per batch of {batch_size} (median, IQR)")
    if legend:
        ax.legend(fontsize=7)


def _med(s, kind, variant, size, bs) -> float:
    m = s[(s["kind"] == kind) & (s["variant"] == variant) & (s["image_size"] == size) & (s["batch_size"] == bs)]
    return float(m["median"].iloc[0]) if len(m) else float("nan")


TARGET_FAST = 4.0  # the fast collate at least 4× the stock ToTensor + default_collate path


def reference(image_sizes, batch_sizes) -> tuple[int, int]:
    """``(image size, batch size)`` the readings quote: 96² and 128 where measured, else the largest."""
    return (96 if 96 in image_sizes else list(image_sizes)[-1], 128 if 128 in batch_sizes else list(batch_sizes)[-1])


def target_words(frame, reference_text: str, variant: str, ratio: float) -> str:
    """The fast collate's target as the docs judge it (:func:`feedlab.report.stage_judge.collate_verdict`, the one
    judge on the rows' own invariants and windows): "meets"/"misses" only where it judged both sides, else
    measured, not judged, with why. ``frame``: the run's rows (None: none given, not judged)."""
    if frame is None:
        return f"{ratio:.1f}× (measured, not judged: no rows given to the judge)"
    try:
        v = collate_verdict(Run({"reference": reference_text}, frame=frame), variant, ratio, TARGET_FAST)
    except NoData as e:
        return f"{ratio:.1f}× (measured, not judged: {e})"
    word = {MET: "meets", MISSED: "misses", WITHIN: f"not told apart from the target: {v}"}.get(v.word)
    return f"{ratio:.1f}× ({word or f'measured, not judged: {v}'})"


def readings(s, image_sizes, batch_sizes, frame=None) -> tuple[list[str], dict]:
    """The printed findings at the reference setting, and the numbers they state (the payload's). ``frame``: the
    run's rows, which the target line is judged on (:func:`target_words`, the docs' judge)."""
    size, bs = reference(image_sizes, batch_sizes)
    ref = f"{bs}x{size}x{size}x3"

    def med(kind, v):
        return _med(s, kind, v, size, bs)

    stock = med("collate", "totensor")
    ratios = {v: stock / med("collate", v) for v in ("fast_nchw", "fast_channels_last", "memcpy_ceiling")}
    pieces = {p: med("piece", p) for p in PIECES}
    total = sum(pieces.values())
    shares = {p: v / total for p, v in pieces.items()}
    ceil = med("collate", "memcpy_ceiling")

    lines = [
        f"{bs} × {size}²×3: {LABELS['totensor']} {stock:.2f} ms; "
        + "; ".join(f"{LABELS[v]} {med('collate', v):.2f} ms ({r:.1f}×)" for v, r in ratios.items()),
        f"Target fast ≥ {TARGET_FAST:g}× stock: NCHW {target_words(frame, ref, 'fast_nchw', ratios['fast_nchw'])}, "
        f"channels_last {target_words(frame, ref, 'fast_channels_last', ratios['fast_channels_last'])}.",
        f"Stock pieces timed alone sum to {total:.2f} ms (whole path measured: {stock:.2f} ms): "
        + ", ".join(f"{LABELS[p]} {100 * sh:.0f}%" for p, sh in shares.items()),
        f"Memcpy ceiling {ceil:.3f} ms: FastCollate NCHW is {med('collate', 'fast_nchw') / ceil:.1f}× it, "
        f"channels_last {med('collate', 'fast_channels_last') / ceil:.1f}×.",
    ]
    numbers = {"reference": ref, "stock_ms": stock, "speedup": ratios, "stock_piece_ms": pieces,
               "stock_piece_share": shares, "memcpy_ceiling_ms": ceil}
    return lines, numbers


def payload(P, numbers: dict) -> dict:
    """What 07 records and the claims ledger reads (``results.json``)."""
    return {"notebook": "07_totensor_vs_fast_collate", "profile": P.profile,
            "image_sizes": P.image_sizes, "batch_sizes": P.batch_sizes, "threads": P.threads, **numbers}


def titles(s, image_sizes, batch_sizes, split_batch_size: int, threads) -> dict:
    """The two figures' titles, each stating its finding from the medians drawn."""
    size, bs = reference(image_sizes, batch_sizes)
    scaling = FT.collate_title(_med(s, "collate", "fast_channels_last", size, bs), _med(s, "collate", "totensor", size, bs),
                               bs, size, threads, "FastCollate (channels_last)")
    pieces = {LABELS[p]: _med(s, "piece", p, size, split_batch_size) for p in PIECES}
    total = sum(pieces.values())
    split = FT.split_title({k: v / total for k, v in pieces.items()}, split_batch_size)
    return {"scaling": scaling, "split": split + " (left bar: its pieces timed separately)"}
