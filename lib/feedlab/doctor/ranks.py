"""``feedlab.doctor --ranks R``: workers per rank, predicted from the measured stage costs.

R ranks on this machine split its cores (``feedlab.scale.ranks.core_shares``: ``cores // R``
each). A rank is priced as a machine of its own: ``share`` cores, and for ``k`` busy
processes of its own the CPU that ``R`` such ranks obtain together divided among them
(the machine's measured capacity at ``R * min(k, share)`` processes, ÷ R). The stage
costs are the table's (measured in one process); ``predict.predict`` does the rest.
A prediction, not a measurement: ``python -m feedlab.bench --ranks R`` measures it, and
notebook 14 measures the grid beside the advice; :func:`calibrate` turns the two into a
verdict (predicted vs measured aggregate, each setting slower than predicted named).
"""

from __future__ import annotations

import re

from feedlab import like_for_like as lfl

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
            "note": f"predicted, not measured: `python -m feedlab.bench --ranks {ranks} --num-workers W` measures "
                    "it; notebook 14 checks this advice against its measured grid"}


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


def calibrate(advices: list[dict], measured: dict, tol: float = 0.20) -> dict:
    """The doctor's advice against a measured grid.

    ``advices``: :func:`advise_ranks` results (one per rank count); ``measured``:
    ``{(ranks, workers_per_rank): {"median", "q25", "q75"}}`` of the aggregate samples/s.
    Each measured setting the doctor priced gets ``ratio`` = measured ÷ predicted and a
    status: ``slower than predicted`` below ``1 - tol``, ``faster than predicted`` above
    ``1 + tol``, else ``as predicted``. The advice (the rank count and workers with the
    highest predicted aggregate) holds when the one judge finds its measured aggregate at least ``1 - tol``
    of the measured best setting (:func:`advice_holds`). Returns ``rows``, ``advised``, ``best``, ``holds``
    (None when the advised setting was not measured) and the ``lines`` to print."""
    rows = []
    for adv in advices:
        for r in adv["rows"]:
            key = (adv["ranks"], r["workers_per_rank"])
            m = measured.get(key)
            if m is None:
                continue
            ratio = m["median"] / r["aggregate_samples_per_s"] if r["aggregate_samples_per_s"] > 0 else float("nan")
            status = ("not predicted" if ratio != ratio else "slower than predicted" if ratio < 1 - tol
                      else "faster than predicted" if ratio > 1 + tol else "as predicted")
            rows.append({"ranks": key[0], "workers_per_rank": key[1], "predicted": r["aggregate_samples_per_s"],
                         "measured": m["median"], "q25": m.get("q25"), "q75": m.get("q75"), "ratio": ratio,
                         "status": status})
    bests = [(a["ranks"], a["best"]) for a in advices if a.get("best")]
    out = {"rows": rows, "tolerance": tol, "advised": None, "best": None, "holds": None, "lines": []}
    lines = out["lines"]
    if not bests or not measured:
        lines.append("Doctor's advice vs measured: nothing to compare (no advice or no measured setting).")
        return out
    R, b = max(bests, key=lambda x: x[1]["aggregate_samples_per_s"])
    out["advised"] = (R, b["workers_per_rank"])
    best = max(measured, key=lambda k: measured[k]["median"])
    out["best"] = best
    mb = measured[best]["median"]
    if not mb > 0:
        lines.append("Doctor's advice vs measured: no measured setting delivered a sample; nothing to compare.")
        return out
    head = (f"Doctor's advice {R} rank(s) × {b['workers_per_rank']} workers (predicted "
            f"{b['aggregate_samples_per_s']:,.0f} samples/s) vs the measured best {best[0]} rank(s) × {best[1]} "
            f"workers ({mb:,.0f} samples/s), tolerance {100 * tol:.0f}%: ")
    ma = measured.get(out["advised"])
    if ma is None:
        lines.append(head + "the advised setting was not measured here (add it to rank_counts / worker_counts).")
    else:
        out["holds"], words = advice_holds(measured, out["advised"], best, tol)
        lines.append(head + f"the advice measured {ma['median']:,.0f} samples/s ({100 * ma['median'] / mb:.0f}% of "
                     f"the best, ×{ma['median'] / b['aggregate_samples_per_s']:.2f} of its prediction): {words}")
    for r in rows:
        if r["status"] != "as predicted":
            lines.append(f"  {r['ranks']} rank(s) × {r['workers_per_rank']} workers: {r['status']} — measured "
                         f"{r['measured']:,.0f} vs predicted {r['predicted']:,.0f} samples/s (×{r['ratio']:.2f}).")
    n_ok = sum(r["status"] == "as predicted" for r in rows)
    n_pred = sum(r["status"] != "not predicted" for r in rows)
    lines.append(f"  {n_ok} of {n_pred} measured settings within {100 * tol:.0f}% of the doctor's prediction.")
    return out


INVARIANTS = ("batch_size", "order", "cache", "pixel_error", "window_s", "timed_batches", "rate_kind", "half_width")


def measured_aggregates(df) -> dict:
    """``{(ranks, workers_per_rank): {median, q25, q75, repeats, …}}`` of the grid's aggregate samples/s, with
    each invariant the rows record as one value (:data:`INVARIANTS`; not recorded: left out, read as not known)."""
    agg = df[df.metric == "aggregate_samples_per_s"] if len(df) else df
    out = {}
    if len(agg):
        for (r, w), g in agg.groupby(["ranks", "workers_per_rank"]):
            q25, med, q75 = g.value.quantile([0.25, 0.5, 0.75])
            m = {"median": float(med), "q25": float(q25), "q75": float(q75)}
            if "repeat" in g:
                m["repeats"] = int(g["repeat"].nunique())
            for k in INVARIANTS:
                vals = g[k].dropna().unique() if k in g else []
                if len(vals) == 1:
                    m[k] = vals[0].item() if hasattr(vals[0], "item") else vals[0]
            out[(int(r), int(w))] = m
    return out


def _side(key: tuple, m: dict) -> lfl.Side:
    return lfl.Side(f"{key[0]} rank(s) × {key[1]} workers", workers=key[1], repeats=m.get("repeats"),
                    **{k: m.get(k) for k in INVARIANTS})


def advice_holds(measured: dict, advised: tuple, best: tuple, tol: float) -> tuple[bool | None, str]:
    """``(holds, words)``: the advised setting's aggregate over the measured best's, against ``1 - tol``, by the one
    judge on both settings' recorded invariants (window, repeats, order, cache, pixels; not recorded: not known) —
    the interval from their IQRs; the advice that is the best holds where its rate stands by the precision rule
    (audit54 N9: 14's "holds" was a point share of two medians whose windows the record does not hold)."""
    ma, mb = measured[advised], measured[best]
    a, b = _side(advised, ma), _side(best, mb)
    if advised == best:
        v = lfl.reread(lfl.Verdict(lfl.MET, "it is the best", 1.0, 1.0, 1.0, 1 - tol), a, a)
    else:
        q = [ma.get("q25"), ma.get("q75"), mb.get("q25"), mb.get("q75")]
        lo, hi = (q[0] / q[3], q[1] / q[2]) if all(x and x > 0 for x in q) else (None, None)
        v = lfl.verdict(a, b, ma["median"] / mb["median"], target=1 - tol, lo=lo, hi=hi, changes=("workers",))
    if v.word == lfl.MET:
        return True, "holds."
    if v.word == lfl.MISSED:
        return False, "does not hold."
    return None, f"measured, not judged: {v}."


_ADVICE = re.compile(r"^(Doctor's advice (\d+) rank\(s\) × (\d+) workers .* vs the measured best (\d+) rank\(s\) × "
                     r"(\d+) workers .*, tolerance (\d+)%: the advice measured .* of its prediction\)): "
                     r"(holds\.|does not hold\.)$")


def recorded_advice_line(line: str, frame) -> str:
    """14's recorded "…: holds." / "does not hold." read again by :func:`advice_holds` on the record's rows, the
    recorded words kept in view where today's differ; any other line as recorded."""
    m = _ADVICE.match(line)
    if not m:
        return line
    measured = measured_aggregates(frame)
    advised, best = (int(m.group(2)), int(m.group(3))), (int(m.group(4)), int(m.group(5)))
    if advised not in measured or best not in measured:
        return line
    _, words = advice_holds(measured, advised, best, int(m.group(6)) / 100)
    return line if words == m.group(7) else f"{m.group(1)}: {words} [recorded by the notebook: {m.group(7)}]"
