"""One-stage effects by the one judge: a stage timed alone (07's collate, 06's decode ahead of training, 03's
host→device copy, 12's first batch of an epoch) compared on both sides' recorded invariants and windows
(:func:`feedlab.like_for_like.verdict`), so the README's top effects (:mod:`feedlab.report.summary`) and 07's
target line (:mod:`feedlab.report.targets`) credit a one-stage ratio only where the judge accepts its sides;
otherwise they print it measured, not judged, with the judge's words (audit 45 V6/V7)."""

from __future__ import annotations

from feedlab.like_for_like import Side, Verdict, verdict
from feedlab.report.claims import sides
from feedlab.report.claims.core import NoData, Run
from feedlab.report.claims.fair import rows_of
from feedlab.report.claims.pairs import grid_verdicts


def collate_verdict(run: Run, variant: str, speedup: float, target: float = 1.0) -> Verdict:
    """07's stock collate time over ``variant``'s at the record's reference batch (``reference`` "BxHxWx3"), by the
    one judge on the rows' own invariants and windows (``ms_per_batch``); against ``target`` (×1: told apart)."""
    ref = str(run.payload.get("reference") or "")
    try:
        bs, size = (int(x) for x in ref.split("x")[:2])
    except ValueError:
        raise NoData(f"the record's reference batch {ref!r} is not BxHxWx3") from None
    one = lambda v: dict(variant=v, batch_size=bs, image_size=size)  # noqa: E731
    return grid_verdicts(run, [(one("totensor"), one(variant))], speedup, target, metric="ms_per_batch",
                         labels=("ToTensor + default_collate", variant))[0]


def out_of_band_verdict(run: Run, backend: str, gain: float) -> Verdict:
    """06's pre-resized JPEGs' decode over decode + resize of the native ones (``backend``), by the one judge on
    the rows' own invariants (the claim 002-out-of-band reads the same two settings for Pillow)."""
    resize = dict(op="decode_resize", image_set="jpeg_native", variant=backend)
    to = rows_of(run, resize)
    size = to["resize_to"].dropna() if "resize_to" in to.columns else to.iloc[0:0]
    if not len(size):
        raise NoData("resize_to not recorded on the decode + resize rows")
    once = dict(op="decode", image_set=f"jpeg_{int(size.iloc[0])}", variant=backend)
    return grid_verdicts(run, [(once, resize)], gain, 1.0, metric="img_per_s",
                         labels=("decode of pre-resized JPEGs", "decode + resize"))[0]


def copy_verdict(run: Run, ratio: float) -> Verdict:
    """03's largest host→device copy, pinned over pageable (its time per copy), by the one judge."""
    rows = rows_of(run, dict(direction="host_to_device", metric="us_per_copy"))
    if rows.empty or "bytes" not in rows.columns:
        raise NoData("no host→device copy rows in results.csv")
    big = float(rows["bytes"].max())
    one = lambda v: dict(variant=v, direction="host_to_device", bytes=big)  # noqa: E731
    return grid_verdicts(run, [(one("pageable"), one("pinned"))], ratio, 1.0, metric="us_per_copy",
                         labels=("pageable copies", "pinned copies"))[0]


def first_batch_verdict(run: Run, ratio: float) -> Verdict:
    """12's first batch of later epochs without and with persistent workers, by the one judge: each side is single
    first batches (one batch a window, its time the window), as many as the record holds."""
    def side(on: bool) -> Side:
        rows = rows_of(run, dict(metric="first_batch_s", persistent_workers=on))
        if "epoch" in rows.columns:
            rows = rows[rows["epoch"] > 0]
        if rows.empty:
            raise NoData("no first_batch_s rows of later epochs in results.csv")
        workers = rows["num_workers"].iloc[0] if "num_workers" in rows.columns else None
        return Side(f"persistent_workers={on}", workers=None if workers is None else int(workers),
                    batch_size=None, timed_batches=1, window_s=float(rows["value"].median()),
                    repeats=len(rows), busy=sides.run_busy(run))
    return verdict(side(False), side(True), ratio)
