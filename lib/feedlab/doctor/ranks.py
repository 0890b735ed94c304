"""``feedlab.doctor --ranks R``: workers per rank, predicted from the measured stage costs.

R ranks on this machine split its cores (``feedlab.ranks.core_shares``: ``cores // R``
each). A rank is priced as a machine of its own: ``share`` cores, and for ``k`` busy
processes of its own the CPU that ``R`` such ranks obtain together divided among them
(the machine's measured capacity at ``R * min(k, share)`` processes, ÷ R). The stage
costs are the table's (measured in one process); ``predict.predict`` does the rest.
A prediction, not a measurement: ``python -m feedlab.bench --ranks R`` measures it.
"""

from __future__ import annotations

from .costs import CostTable, Machine
from .predict import predict


def rank_machine(m: Machine, ranks: int) -> Machine:
    share = max(1, m.cores // ranks)
    cap = {k: m.cap(ranks * min(k, share)) / ranks for k in range(1, share + 2)}
    threads = dict(m.main_threads) if m.cuda else {w: max(1, share - w) for w in range(share + 1)}
    return Machine(cores=share, effective_cores=cap[share], cuda=m.cuda, main_threads=threads, capacity=cap,
                   stage_speed=m.measured_at())


def advise_ranks(table: CostTable, spec, ranks: int) -> dict:
    """Predicted per-rank and aggregate samples/s for 0…share workers per rank; the best."""
    if ranks < 1:
        raise ValueError(f"--ranks {ranks}: need >= 1")
    m = rank_machine(table.machine, ranks)
    per_rank = CostTable(m, table.stages)
    rows = []
    for w in range(m.cores + 1):
        p = predict(per_rank, spec.replace(num_workers=w))
        if p is not None:
            rows.append({"workers_per_rank": w, "rank_samples_per_s": p["predicted_samples_per_s"],
                         "aggregate_samples_per_s": ranks * p["predicted_samples_per_s"],
                         "bound_stage": p["bound_stage"], "binding_term": p["binding_term"]})
    best = max(rows, key=lambda r: r["rank_samples_per_s"]) if rows else None
    return {"ranks": ranks, "cores_per_rank": m.cores, "rows": rows, "best": best,
            "note": f"predicted, not measured: python -m feedlab.bench --ranks {ranks} --num-workers W measures it"}


def render_ranks(adv: dict) -> list[str]:
    lines = [f"ranks: {adv['ranks']} ranks × {adv['cores_per_rank']} cores each ({adv['note']})"]
    for r in adv["rows"]:
        lines.append(f"  {r['workers_per_rank']:>2} workers per rank: {r['rank_samples_per_s']:,.0f} samples/s per rank, "
                     f"{r['aggregate_samples_per_s']:,.0f} in all; bound by {r['bound_stage']}")
    if adv["best"]:
        b = adv["best"]
        lines.append(f"  advice: {b['workers_per_rank']} workers per rank "
                     f"(predicted {b['aggregate_samples_per_s']:,.0f} samples/s over {adv['ranks']} ranks)")
    return lines
