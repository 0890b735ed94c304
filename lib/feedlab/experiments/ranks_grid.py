"""Notebook 14, part 1: ranks × workers per rank on a fixed core budget.

Each setting is one launch of ``feedlab.ranks.launch``: ``R`` ranks split the budget's
cores between them (each rank pinned to its share; its workers inherit it) and each
reads its ``DistributedSampler`` share of the epoch with ``w`` workers. The epochs after
warm-up are the repeats. Rows: per-rank samples/s and data-wait share, the aggregate
(all samples ÷ the slowest rank's wall), the reshuffle cost, the launch wall.
"""

from __future__ import annotations

from feedlab import pipeline as P
from feedlab.ranks import launch
from feedlab.results import Results

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


def run_grid(data, spec: P.PipelineSpec, rank_counts, worker_counts, cores: list[int], epochs: int,
             warmup: int, log=print) -> tuple[Results, list[dict]]:
    import torch

    device = P.resolve_device(spec.device)
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
