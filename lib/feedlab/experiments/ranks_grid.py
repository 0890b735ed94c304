"""Notebook 14, part 1: ranks × workers per rank on a fixed core budget.

Each setting is one launch of ``feedlab.scale.ranks.launch``: ``R`` ranks split the budget's
cores between them (each rank pinned to its share; its workers inherit it) and each
reads its share of the epoch (``DistributedSampler``, or whole chunks for a chunked
store: ``feedlab.scale.shards``) with ``w`` workers. The epochs after
warm-up are the repeats. Rows: per-rank samples/s and data-wait share, the aggregate
(all samples ÷ the slowest rank's wall), the reshuffle cost, the launch wall.
"""

from __future__ import annotations

from feedlab import pipeline as pl
from feedlab.doctor.measure import Doctor, Effort
from feedlab.doctor.ranks import advise_ranks, calibrate, measured_aggregates  # noqa: F401  (re-exported)
from feedlab.formats import FORMATS
from feedlab.results import Results
from feedlab.scale.pagecache import page_cache_share
from feedlab.scale.ranks import launch

EXP = "ranks_workers"


def settings(rank_counts, worker_counts, cores: int, device: str = "cpu", gpus: int = 0):
    """``[(R, w)]`` to run and ``[(R, w, why)]`` left out: a rank needs a core of its own
    (and a GPU of its own with CUDA); ``R * (1 + w)`` processes beyond the budget are kept
    (oversubscription is part of the question) but recorded as such in the rows."""
    run, skipped = [], []
    for r in sorted(set(int(x) for x in rank_counts)):
        for w in sorted(set(int(x) for x in worker_counts)):
            if r > cores:
                skipped.append((r, w, f"{r} ranks > {cores} cores"))
            elif device.startswith("cuda") and r > gpus:
                skipped.append((r, w, f"{r} ranks > {gpus} GPUs"))
            else:
                run.append((r, w))
    return run, skipped


def run_grid(data, spec: pl.PipelineSpec, rank_counts, worker_counts, cores: list[int], epochs: int,
             warmup: int, log=print) -> tuple[Results, list[dict]]:
    import torch

    device = pl.resolve_device(spec.device)
    gpus = torch.cuda.device_count() if device.startswith("cuda") else 0
    todo, skipped = settings(rank_counts, worker_counts, len(cores), device, gpus)
    res, info = Results(), [{"ranks": r, "workers_per_rank": w, "ran": False, "reason": why}
                            for r, w, why in skipped]
    for r, w in todo:
        s = spec.replace(num_workers=w, persistent_workers=w > 0)
        try:
            out = launch(r, data, s, epochs=epochs, warmup=warmup, cores=cores)
        except (ChildProcessError, OSError) as exc:
            info.append({"ranks": r, "workers_per_rank": w, "ran": False, "reason": str(exc)})
            log(f"{r} ranks × {w} workers: failed: {exc}")
            continue
        procs = r * (1 + w)
        common = dict(ranks=r, workers_per_rank=w, processes=procs, core_budget=len(cores),
                      oversubscribed=procs > len(cores), backend=out["backend"], format=s.format,
                      batch_size=s.batch_size, model=s.model, device=out["device"])
        var = f"R{r} w{w}"
        res.add_samples(EXP, var, "aggregate_samples_per_s", out["aggregate_runs"], "samples/s", rank="all", **common)
        for row in out["rows"]:
            k = row["epoch"] - warmup
            for m, unit in (("samples_per_s", "samples/s"), ("data_wait_fraction", "fraction"),
                            ("reshuffle_s", "s"), ("wall_s", "s")):
                res.add(EXP, var, m, row[m], unit, repeat=k, rank=row["rank"], **common)
        slow = out["slowest_rank_per_epoch"]
        info.append({"ranks": r, "workers_per_rank": w, "ran": True, "reason": "", "launch_s": out["launch_s"],
                     "slowest_rank_per_epoch": slow})
        log(f"{r} ranks × {w} workers: {out['aggregate_samples_per_s']:.0f} samples/s aggregate, "
            f"launch {out['launch_s']:.1f} s")
    return res, info


def readings(df) -> list[str]:
    """Lines computed from the rows: the best setting per rank count and overall, the
    straggler gap (slowest ÷ fastest rank wall, median over epochs), the reshuffle cost."""
    import numpy as np

    out = []
    if "metric" not in df:  # no setting ran at all: the frame has no columns
        return ["No setting ran; the table above says why."]
    agg = df[(df.metric == "aggregate_samples_per_s")]
    if agg.empty:
        return ["No setting ran; the table above says why."]
    med = agg.groupby(["ranks", "workers_per_rank"]).value.median()
    for r, g in med.groupby(level=0):
        (_, w), v = g.idxmax(), g.max()
        out.append(f"{r} rank(s): best at {w} workers per rank, {v:,.0f} samples/s aggregate "
                   f"(median over epochs; {len(g)} worker counts tried)")
    (rb, wb), vb = med.idxmax(), med.max()
    out.append(f"Best on this budget: {rb} rank(s) × {wb} workers, {vb:,.0f} samples/s.")
    walls = df[(df.metric == "wall_s")]
    gaps = []
    for (r, w, k), g in walls.groupby(["ranks", "workers_per_rank", "repeat"]):
        if r > 1 and g.value.min() > 0:
            gaps.append(g.value.max() / g.value.min())
    if gaps:
        out.append(f"Straggler gap (slowest ÷ fastest rank wall per epoch, ranks > 1): median x{np.median(gaps):.2f}, "
                   f"max x{max(gaps):.2f} over {len(gaps)} epochs.")
    rs = df[df.metric == "reshuffle_s"].value
    if len(rs):
        out.append(f"set_epoch + drawing the order: median {1e3 * rs.median():.3f} ms per rank per epoch.")
    return out


# ---------------------------------------------------------------- shared page cache between ranks

EXP_CACHE = "ranks_page_cache"


def page_cache_format(present=None) -> str | None:
    """The store the page-cache part reads: the first registered SR format that is both
    ``chunked`` and ``mmap`` (chosen by capability), else None."""
    for name, fs in FORMATS.items():
        if fs.kind == "sr" and fs.chunked and fs.mmap and (present is None or name in present):
            return name
    return None


def run_page_cache(data, spec: pl.PipelineSpec, ranks: int, cores: list[int], seed: int = 0,
                   splits=("chunks", "samples"), log=print) -> tuple[Results, list[dict]]:
    """``rank_pagecache.page_cache_share`` for each split (cache evicted first every time).
    Rows: per rank the cold and warm samples/s and the Rss / Pss of the store's maps; per run
    the resident bytes and the bytes requested. Returns ``(results, outs)``."""
    res, outs = Results(), []
    for split in splits:
        try:
            out = page_cache_share(data, spec, ranks, seed=seed, split=split, cores=cores)
        except (ChildProcessError, OSError, ValueError) as exc:
            log(f"page cache, split by {split}: failed: {exc}")
            outs.append({"split": split, "error": str(exc)})
            continue
        common = dict(ranks=ranks, split=out["split"], format=out["format"], file_bytes=out["file_bytes"],
                      evicted=out["evicted"])
        var = f"R{ranks} {out['split']}"
        for m in ("requested_bytes_total", "resident_bytes_after_cold", "resident_bytes_after_warm",
                  "map_rss_sum", "map_pss_sum"):
            if out[m] is not None:
                res.add(EXP_CACHE, var, m, out[m], "bytes", rank="all", **common)
        for r in out["per_rank"]:
            for m, unit in (("cold_samples_per_s", "samples/s"), ("warm_samples_per_s", "samples/s"),
                            ("map_rss", "bytes"), ("map_pss", "bytes"), ("rss", "bytes"), ("pss", "bytes")):
                if r.get(m) is not None:
                    res.add(EXP_CACHE, var, m, r[m], unit, rank=r["rank"], **common)
        outs.append(out)
    return res, outs


# ---------------------------------------------------------------- the doctor's advice, checked


def doctor_check(data, spec: pl.PipelineSpec, rank_counts, worker_counts, cores: list[int], df, tol: float = 0.20,
                 repeats: int = 2, samples: int = 32, log=print) -> dict:
    """The doctor's stage table measured here (one process, warm cache), its ``--ranks`` advice
    for each rank count of the grid, and ``doctor.ranks.calibrate`` against the grid's
    measured aggregates (``df``: the grid's rows) with tolerance ``tol``."""
    effort = Effort(repeats=repeats, warmup=1, samples=samples, e2e_batches=4, cold=False)
    doc = Doctor(data, spec, max_workers=max([int(w) for w in worker_counts] + [0]), effort=effort,
                 log=lambda m: None)
    doc.measure(alternatives=False)
    advices = [advise_ranks(doc.table, spec, int(r)) for r in sorted(set(int(x) for x in rank_counts))
               if int(r) <= doc.table.machine.cores]
    out = calibrate(advices, measured_aggregates(df), tol)
    out["advices"] = advices
    for line in out["lines"]:
        log(line)
    return out
