"""Write-up 001: "Bottlenecks in Pytorch training" (ToTensor, GIL, io wait, pinned memory, workers)."""

from __future__ import annotations

import math

from feedlab.report.claims.core import (  # noqa: F401
    NOT_FAIR,
    NOT_RUN,
    NOT_TESTABLE,
    Claim,
    NoData,
    Outcome,
    Unfair,
    at_least,
    at_most,
    by_int,
    verdict,
)
from feedlab.report.claims.fair import STEADY, TIMING, rows_of
from feedlab.report.claims.pairs import grid_verdicts, judged_outcome, level_unjudged, worst_and_median
from feedlab.report.claims.sides import pair_verdicts, ratio_outcome

NB01, NB03, NB05, NB07, NB11 = ("01_worker_scaling", "03_pinned_memory_by_input_size", "05_storage_formats",
                                "07_totensor_vs_fast_collate", "11_worker_hygiene")


def _pieces(run):
    """Per (image_size, batch_size): the stock path's pieces, timed alone (ms)."""
    return run.wide(["image_size", "batch_size"], "variant", kind="piece", metric="ms_per_batch")


def transpose_share(run) -> Outcome:
    p = _pieces(run)
    share = (p["transpose"] / p.sum(axis=1))
    lo, hi = share.idxmin(), share.idxmax()
    return _pieces_outcome(run, p, at_least(float(share.median()), 0.65, 0.4),
                           f"transpose {100 * share.median():.0f}% of the stock path (median of {len(share)} image × "
                           f"batch sizes; {100 * share.min():.0f}% at {lo[0]}² × {lo[1]}, {100 * share.max():.0f}% at "
                           f"{hi[0]}² × {hi[1]})")


def _pieces_outcome(run, p, status: str, ours: str) -> Outcome:
    """The grade of a share of the pieces only where every piece's timed window gives a time (the one judge's
    window rule and precision, as 07's collate ratio gets): else not tested fairly, the share measured (audit 53
    F3: 2.5–103 ms windows, repeats ±119%, graded "partly")."""
    sides = tuple((dict(kind="piece", variant=v, image_size=int(i), batch_size=int(b)), f"{v} at {i}²×{b}")
                  for i, b in p.index for v in p.columns)
    why = level_unjudged(run, sides, metric="ms_per_batch")
    return Outcome(NOT_FAIR, ours, why) if why else Outcome(status, ours)


def transpose_largest(run) -> Outcome:
    p = _pieces(run)
    top = p.idxmax(axis=1)
    n_t = int((top == "transpose").sum())
    other = top[top != "transpose"]
    where = ", ".join(f"{s}²×{b}: {v}" for (s, b), v in list(other.items())[:4])
    return _pieces_outcome(run, p, verdict(n_t == len(top), 2 * n_t >= len(top)),
                           f"transpose is the largest piece at {n_t} of {len(top)} image × batch sizes"
                           + (f"; elsewhere e.g. {where}" if where else ""))


def fast_collate(run) -> Outcome:
    s = run.wide(["image_size", "batch_size"], "variant", kind="collate", metric="ms_per_batch")
    r = s["totensor"] / s["fast_nchw"]
    pairs = [tuple(dict(kind="collate", variant=v, image_size=int(i), batch_size=int(b)) for v in ("totensor", "fast_nchw"))
             for i, b in r.index]
    # every grid point's two sides by the one judge; the worst point against ×1.5, the median against ×1
    return worst_and_median(run, pairs, [float(x) for x in r], 1.5, 1.0, labels=("ToTensor", "fast collate"),
                            metric="ms_per_batch",
                            ours=f"uint8 fast collate {r.median():.1f}× faster than ToTensor + default_collate "
                            f"(median; {r.min():.1f}–{r.max():.1f}× over {len(r)} image × batch sizes)")


def too_many_workers(run) -> Outcome:
    s = by_int(run.get("samples_per_s_loader"))
    if not s:
        raise NoData("no rate of the loader alone at any worker count (the worker ladder was left out)")
    cores = run.cores
    if cores is None:
        raise NoData("no core count in the fingerprint")
    if not any(w > cores for w in s):
        return Outcome(NOT_RUN, "—", f"no worker count above this machine's {cores} cores was run "
                       f"(max {max(s)}; re-run 01 with one above the cores)")
    where = dict(experiment="throughput_vs_workers", model="none")
    # the best within the cores and the best beyond them over EVERY count measured: a filter that drops a side
    # before the choice judges a subset (audit 53 F2: the imprecise 2 workers, fastest of all, left out and 4 vs
    # 0 workers judged); the chosen sides then go through the one judge and the steady precondition as they are
    within = {w: v for w, v in s.items() if w <= cores}
    beyond = {w: v for w, v in s.items() if w > cores}
    if not within:
        raise NoData(f"no worker count at or below this machine's {cores} cores was run (re-run 01 with one)")
    r = max(beyond.values()) / max(within.values())
    used = (max(within, key=within.get), max(beyond, key=beyond.get))
    settings = tuple(dict(where, num_workers=w) for w in used)
    # the best beyond the cores over the best within them, by the one judge (the worker count is the change)
    vs = pair_verdicts(run, settings[1], settings[0], r, 0.95, 1.05, changes=("workers",), lower_is_better=True,
                       labels=(f"{used[1]} workers", f"{used[0]} workers"))
    return ratio_outcome(vs, f"best rate with more workers than the {cores} cores = {r:.2f}× the best within them "
                         f"({used[1]} vs {used[0]} workers, PNG loader alone; best of every count measured)",
                         "throughput measured; context switches themselves not counted", settings)


def _sps(run, key):
    return float(run.get("samples_per_s", key, "median"))


def chunks_warm(run) -> Outcome:
    warm = _sps(run, "read/zarr_chunk/chunk") / _sps(run, "read/zarr/plain")
    try:
        cold = _sps(run, "cold/zarr_chunk/chunk") / _sps(run, "cold/zarr/plain")
    except NoData:
        cold = float("nan")
    measured_cold = not math.isnan(cold)
    measured = (f"Zarr read in chunk order over random ids, one process: {warm:.0f}× with a warm page "
                f"cache" + (f", {cold:.0f}× cold" if measured_cold else ""))
    # 001 (docs/WRITEUPS.md): "chunking does not help under shuffling with a warm page cache" — a claim about
    # chunked storage read in a shuffled order; the run sets one Zarr call per sample against one per chunk
    raise Unfair("the run times Zarr's call per sample against its call per chunk (the cost of a call), not "
                 "chunked against unchunked storage read in the same shuffled order with a warm page cache, "
                 f"which the claim is about — measured, not judged: {measured}")


def daemon_workers(run) -> Outcome:
    sc = run.get("scenarios")
    left = {k: v["leftover"] for k, v in sc.items() if v.get("leftover", 0) > 0}
    outlive = {k: v["alive_after_del"] for k, v in sc.items() if v.get("alive_after_del", 0) > 0}
    return Outcome(verdict(bool(left), bool(outlive)), f"{len(left)} of {len(sc)} ways of stopping a loop left workers behind after a bounded "
                   f"wait; workers outlived `del` in: {', '.join(outlive) or 'none'}")


def pinned_faster_copy(run) -> Outcome:
    r = float(run.get("h2d_pinned_gbps")) / float(run.get("h2d_pageable_gbps"))
    copies = rows_of(run, dict(direction="host_to_device", metric="gb_per_s"))
    top = copies["bytes"].max() if "bytes" in copies.columns and not copies.empty else None
    pairs = [tuple(dict(variant=v, direction="host_to_device", **({} if top is None else {"bytes": float(top)}))
                   for v in ("pinned", "pageable"))]
    vs = grid_verdicts(run, pairs, r, 1.2, 1.0, metric="gb_per_s", labels=("pinned copy", "pageable copy"))
    return judged_outcome(vs, f"pinned host→device copy {r:.2f}× pageable (largest transfer)", settings=pairs[0])


CLAIMS = (
    Claim("001-transpose-80", "001", "ToTensor's HWC→CHW transpose (+ contiguous) takes most of the loading time.",
          "'this transpose takes 80% of the loading time/CPU'", NB07,
          "transpose share of the stock path, median over the grid: reproduced ≥ 65%, partly ≥ 40%",
          transpose_share, fair=TIMING),
    Claim("001-transpose-largest", "001", "The transpose is the single costliest piece of the stock path.",
          "transpose = 80%, hence the largest", NB07,
          "reproduced at every image × batch size, partly at half of them or more", transpose_largest,
          fair=TIMING),
    Claim("001-fast-collate", "001", "A numpy uint8 collate (Apex's fast_collate) avoids the cost.",
          "fast_collate 'bypasses this problem' (no number)", NB07,
          "reproduced if ≥ 1.5× faster at every grid point, partly if faster at the median", fast_collate,
          fair=TIMING),
    Claim("001-too-many-workers", "001", "Too many workers cost context switches and lose throughput.",
          "'excessive workers … too frequent context switch' (no number)", NB01,
          "best rate above the core count ÷ best at or below it: reproduced ≤ 0.95, partly ≤ 1.05",
          too_many_workers, fair=(STEADY, *TIMING)),
    Claim("001-chunks-warm-cache", "001", "Chunked storage stops paying once the page cache holds the data.",
          "chunks are 'useless' with a page cache, maybe useful at first load", NB05,
          "chunk-order over random-id gain, warm: reproduced < 1.2×, partly < half the cold gain",
          chunks_warm, fair=TIMING),
    Claim("001-daemon-workers", "001", "Daemonic workers are cleaned up only on a graceful exit; otherwise "
          "they linger.", "'this is where all the <defunct> generated' (unsure)", NB11,
          "reproduced if a stop leaves workers after a bounded wait; partly if they outlive `del`", daemon_workers),
    Claim("001-pinned-dma", "001", "Pinned host memory makes host→GPU copies faster (DMA).",
          "pinned memory allows DMA (no number)", NB03, "pinned ÷ pageable bandwidth: reproduced ≥ 1.2, partly ≥ 1.0",
          pinned_faster_copy, ("gpu",), TIMING),
)
