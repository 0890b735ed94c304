"""Tables and readings of notebook 13, computed from one run's rows and status dicts."""

from __future__ import annotations

import math

import pandas as pd

from . import BASELINE, FEEDLAB
from .measure import EXPERIMENT

STAGE = {"sr": "read + batch assembly (no decode)", "cls": "JPEG decode + crop/resize/flip"}


def _med(df, name, kind, metric, workers=None, cache="warm"):
    d = df[(df.variant == name) & (df.kind == kind) & (df.metric == metric)]
    if workers is not None and "num_workers" in d:
        d = d[d.num_workers == workers]
    if cache is not None and "cache" in d:
        d = d[d.cache == cache]
    if d.empty:
        return float("nan"), float("nan"), float("nan")
    v = d.value
    return float(v.median()), float(v.quantile(0.25)), float(v.quantile(0.75))


def table(infos: list[dict], df: pd.DataFrame) -> pd.DataFrame:
    """One row per (data set, contender, worker count); unavailable contenders keep one row with the reason."""
    rows = []
    for info in infos:
        base = {"kind": info["kind"], "contender": info["name"], "label": info["label"],
                "available": info["available"], "reason": info.get("reason", ""),
                "convert_s": info.get("convert_s", float("nan")),
                "bytes_on_disk": info.get("bytes_on_disk", float("nan")),
                "check_ok": (info.get("check") or {}).get("ok"),
                "check": (info.get("check") or {}).get("method", (info.get("check") or {}).get("error", "")),
                "shuffle": info["shuffle"], "parallelism": info["parallelism"]}
        runs = info.get("runs") or []
        if not runs:
            rows.append({**base, "num_workers": None})
            continue
        for r in runs:
            w = r["num_workers"]
            row = {**base, "num_workers": w, "run_ok": r["ok"], "error": r.get("error", "")}
            if r["ok"] and not df.empty:
                m, lo, hi = _med(df, info["name"], info["kind"], "samples_per_s", w)
                row.update(samples_per_s=m, q25=lo, q75=hi,
                           cold_samples_per_s=_med(df, info["name"], info["kind"], "samples_per_s", w, "cold")[0],
                           first_batch_s=_med(df, info["name"], info["kind"], "first_batch_s", w, None)[0],
                           peak_rss_mib=_med(df, info["name"], info["kind"], "peak_rss_mib", w)[0],
                           cpu_saturation=_med(df, info["name"], info["kind"], "cpu_saturation", w)[0],
                           cpu_ms_per_sample=_med(df, info["name"], info["kind"], "cpu_ms_per_sample", w)[0])
            rows.append(row)
    return pd.DataFrame(rows)


def _best(tab: pd.DataFrame, kind: str, names) -> dict | None:
    d = tab[(tab.kind == kind) & tab.contender.isin(names) & (tab.check_ok == True)  # noqa: E712
            & (tab.get("run_ok", False) == True)]  # noqa: E712
    d = d[d.samples_per_s.notna()] if "samples_per_s" in d else d.iloc[0:0]
    if d.empty:
        return None
    r = d.loc[d.samples_per_s.idxmax()]
    return r.to_dict()


def ratios(tab: pd.DataFrame) -> dict:
    """Per data set: feedlab's best ÷ the best peer (every other contender that passed its check),
    each at its best worker count, warm cache; with the ratio's spread from the IQRs."""
    out = {}
    for kind in sorted(set(tab.kind)):
        names = set(tab[tab.kind == kind].contender)
        fb = _best(tab, kind, [FEEDLAB])
        peer = _best(tab, kind, sorted(names - {FEEDLAB}))
        if fb is None or peer is None:
            out[kind] = {"ratio": None, "why_missing": "feedlab best" if fb is None else "no peer passed"}
            continue
        r = fb["samples_per_s"] / peer["samples_per_s"]
        lo, hi = fb["q25"] / peer["q75"], fb["q75"] / peer["q25"]
        verdict = ("met (>= 1.0)" if lo >= 1.0 else "not met" if hi < 1.0 else "within this run's spread of 1.0")
        out[kind] = {"ratio": r, "ratio_low": lo, "ratio_high": hi, "verdict": verdict,
                     "feedlab": {k: fb[k] for k in ("contender", "num_workers", "samples_per_s", "q25", "q75",
                                                     "cpu_ms_per_sample", "first_batch_s", "peak_rss_mib")},
                     "best_peer": {k: peer[k] for k in ("contender", "label", "num_workers", "samples_per_s", "q25",
                                                        "q75", "cpu_ms_per_sample", "first_batch_s",
                                                        "peak_rss_mib")}}
    return out


def _f(x, fmt="{:,.0f}") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def readings(rat: dict, tab: pd.DataFrame) -> list[str]:
    """Sentences computed from the ratios; where a peer wins, the stage and the CPU cost per sample."""
    lines = []
    for kind, r in rat.items():
        if r.get("ratio") is None:
            lines.append(f"{kind}: no ratio ({r['why_missing']} has no checked, timed run).")
            continue
        fb, p = r["feedlab"], r["best_peer"]
        s = (f"{kind}: feedlab best ({int(fb['num_workers'])} workers) {_f(fb['samples_per_s'])} samples/s "
             f"(IQR {_f(fb['q25'])}–{_f(fb['q75'])}) vs the best peer, {p['label']} ({int(p['num_workers'])} workers) "
             f"{_f(p['samples_per_s'])} (IQR {_f(p['q25'])}–{_f(p['q75'])}): ratio {r['ratio']:.2f} "
             f"(from the IQRs {r['ratio_low']:.2f}–{r['ratio_high']:.2f}); target >= 1.0: {r['verdict']}.")
        if r["ratio"] < 1.0:
            a, b = fb["cpu_ms_per_sample"], p["cpu_ms_per_sample"]
            if not (math.isnan(a) or math.isnan(b)):
                if b < 0.9 * a:
                    s += (f" {p['label']} spends less CPU per sample ({b:.3f} vs {a:.3f} ms): its "
                          f"{STAGE[kind]} stage is cheaper.")
                else:
                    s += (f" {p['label']} spends as much or more CPU per sample ({b:.3f} vs {a:.3f} ms) and wins "
                          f"by running the {STAGE[kind]} stage on more cores at once.")
        lines.append(s)
    unavailable = tab[~tab.available.astype(bool)].drop_duplicates("contender")
    for row in unavailable.itertuples():
        lines.append(f"unavailable: {row.label} — {row.reason}")
    failed = tab[(tab.available.astype(bool)) & (tab.check_ok == False)]  # noqa: E712
    for row in failed.drop_duplicates(["kind", "contender"]).itertuples():
        lines.append(f"{row.kind}: {row.label} failed the output check ({row.check}); it is not ranked.")
    return lines


def rows_frame(res) -> pd.DataFrame:
    df = res.frame() if len(res) else pd.DataFrame(columns=["experiment", "variant", "kind", "metric", "value"])
    return df[df.experiment == EXPERIMENT] if not df.empty else df


__all__ = ["BASELINE", "FEEDLAB", "STAGE", "ratios", "readings", "rows_frame", "table"]
