"""Tables and readings of notebook 13, computed from one run's rows and status dicts. A ratio between
feedlab's best and the best peer is judged only where both sides share order, pixels, batch size, workers,
cache and a long enough window (:mod:`feedlab.like_for_like`); the table shows each side's values. feedlab's
side is its row at the worker count the best peer ran (its best row only where it has none, which then
reads "not like for like"); warm and cold are each judged. A rate is the median of its windows with its
spread: the IQR of three windows or more, else the 95% interval of the window's mean batch time.
Every verdict is the one judge's (:func:`feedlab.like_for_like.verdict`): the two sides' invariants, then
whether each was measured fairly (a busy window, a rate short of its stated precision), then the ratio's
interval against the >= 1 target; :func:`verdicts` is what the record keeps for the generators to read."""

from __future__ import annotations

import math
from dataclasses import asdict

import pandas as pd

from feedlab.like_for_like import differences, verdict, workers_of

from . import BASELINE, FEEDLAB, PEERS
from .measure import EXPERIMENT
from .published import LABEL, NONE_PUBLISHED, PUBLISHED, per_vcpu
from .sides import TARGET, as_record, pixel_error, shared, side, sides_of_record, verdicts, words  # noqa: F401

STAGE = {"sr": "read + batch assembly (no decode)", "cls": "JPEG decode + crop/resize/flip"}


def _rows(df, name, kind, metric, workers=None, cache="warm"):
    d = df[(df.variant == name) & (df.kind == kind) & (df.metric == metric)]
    if workers is not None and "num_workers" in d:
        d = d[d.num_workers == workers]
    if cache is not None and "cache" in d:
        d = d[d.cache == cache]
    return d


def _med(df, name, kind, metric, workers=None, cache="warm"):
    d = _rows(df, name, kind, metric, workers, cache)
    if d.empty:
        return float("nan"), float("nan"), float("nan")
    v = d.value
    return float(v.median()), float(v.quantile(0.25)), float(v.quantile(0.75))


def _rate(df, name, kind, workers, cache) -> dict:
    """The median rate of the windows of one setting with its spread (``low``, ``high``, ``spread``: the
    IQR of 3 windows or more, else the 95% interval of the median window's mean batch time), the windows'
    timed batches and seconds (their least) and the windows' count."""
    m, lo, hi = _med(df, name, kind, "samples_per_s", workers, cache)
    n = len(_rows(df, name, kind, "samples_per_s", workers, cache))
    hw = _med(df, name, kind, "rate_half_width", workers, cache)[0]
    unbounded = n < 3 and hw == hw and hw >= 1
    if unbounded:   # the mean batch time's interval reaches 0 s: no upper bound on the rate (never m / ~0)
        lo, hi, spread = m / (1 + hw), float("nan"), f"95% interval of {n} window(s): ±{hw:.0%}, no upper bound"
    elif n < 3 and hw == hw:
        lo, hi, spread = m / (1 + hw), m / (1 - hw), f"95% interval of {n} window(s)"
    else:
        spread = f"IQR of {n} windows"
    precise = _rows(df, name, kind, "precise", workers, cache).value
    if len(precise) and precise.min() < 1:
        spread += ", imprecise (a window reached its cap first)"
    tb = _rows(df, name, kind, "timed_batches", workers, cache).value
    ws = _rows(df, name, kind, "window_s", workers, cache).value
    load = _rows(df, name, kind, "other_load", workers, cache).value
    kind_ = "imprecise" if unbounded else None if not len(precise) else "steady" if precise.min() >= 1 else "imprecise"
    return {"median": m, "low": lo, "high": hi, "spread": spread, "windows": n,
            "timed_batches": float(tb.min()) if len(tb) else None, "window_s": float(ws.min()) if len(ws) else None,
            "half_width": hw if hw == hw else None, "rate_kind": kind_,
            "other_load": float(load.max()) if len(load) else None}


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
                "shuffle": info["shuffle"], "parallelism": info["parallelism"],
                "interpreter": info.get("interpreter", ""), "pixel_error": pixel_error(info.get("check")),
                "samples": info.get("samples"), "batch_size": _batch_size(df, info["name"], info["kind"]),
                "cold_left_out": info.get("cold_left_out", ""),
                "notes": "\n".join(info.get("notes") or [])}   # its warnings, one line each (measure.run_peer)
        runs = info.get("runs") or []
        if not runs:
            rows.append({**base, "num_workers": None})
            continue
        for r in runs:
            w = r["num_workers"]
            row = {**base, "num_workers": w, "run_ok": r["ok"], "error": r.get("error", ""),
                   "pipeline": r.get("pipeline", ""),   # feedlab's best: the spec the doctor advised
                   "epochs_per_window": r.get("epochs_per_window")}
            if r["ok"] and not df.empty:
                warm = _rate(df, info["name"], info["kind"], w, "warm")
                cold = _rate(df, info["name"], info["kind"], w, "cold")
                row.update(samples_per_s=warm["median"], q25=warm["low"], q75=warm["high"], spread=warm["spread"],
                           windows=warm["windows"], timed_batches=warm["timed_batches"], window_s=warm["window_s"],
                           half_width=warm["half_width"], rate_kind=warm["rate_kind"], other_load=warm["other_load"],
                           cold_samples_per_s=cold["median"], cold_low=cold["low"], cold_high=cold["high"],
                           cold_timed_batches=cold["timed_batches"], cold_window_s=cold["window_s"],
                           cold_windows=cold["windows"], cold_half_width=cold["half_width"],
                           cold_rate_kind=cold["rate_kind"], cold_other_load=cold["other_load"],
                           max_window_s=(info.get("window") or {}).get("max_s"),
                           first_batch_s=_med(df, info["name"], info["kind"], "first_batch_s", w, None)[0],
                           peak_rss_mib=_med(df, info["name"], info["kind"], "peak_rss_mib", w)[0],
                           cpu_saturation=_med(df, info["name"], info["kind"], "cpu_saturation", w)[0],
                           cpu_ms_per_sample=_med(df, info["name"], info["kind"], "cpu_ms_per_sample", w)[0])
            rows.append(row)
    return pd.DataFrame(rows)


def _batch_size(df: pd.DataFrame, name: str, kind: str) -> int | None:
    if df.empty or "batch_size" not in df:
        return None
    b = df[(df.variant == name) & (df.kind == kind)].batch_size.dropna()
    return int(b.iloc[0]) if len(b) else None


def _best(tab: pd.DataFrame, kind: str, names) -> dict | None:
    d = tab[(tab.kind == kind) & tab.contender.isin(names) & (tab.check_ok == True)  # noqa: E712
            & (tab.get("run_ok", False) == True)]  # noqa: E712
    d = d[d.samples_per_s.notna()] if "samples_per_s" in d else d.iloc[0:0]
    if d.empty:
        return None
    r = d.loc[d.samples_per_s.idxmax()]
    return r.to_dict()


def missing_peers(tab: pd.DataFrame, kind: str, field=None) -> dict[str, str]:
    """``{label: why}`` of the peers of the field without a checked, timed run on ``kind`` in this table:
    not installed (the reason, :func:`feedlab.peers.venvs.why_missing` for a venv peer), left out by the
    run's own time limit, failed its output check, or its run failed. The field: ``field`` (names), default
    every registered contender but feedlab's best with a ``kind`` pipeline."""
    names = list(field) if field is not None else list(PEERS)
    names = [n for n in names if n != FEEDLAB and (n not in PEERS or kind in PEERS[n].kinds)]
    d = tab[tab.kind == kind]
    out = {}
    for name in names:
        rows = d[d.contender == name]
        label = PEERS[name].label if name in PEERS else name
        if rows.empty:
            out[label] = "not run"
            continue
        first = rows.iloc[0]
        if not bool(first.available):
            out[label] = unavailable_words(first.reason)
        elif first.check_ok is not True and first.check_ok != True:  # noqa: E712
            out[label] = "failed the output check"
        elif "run_ok" not in rows or not (rows.run_ok == True).any():  # noqa: E712
            errs = [e for e in rows["error"] if isinstance(e, str) and e] if "error" in rows else []
            out[label] = f"run failed: {errs[0]}" if errs else "no timed run"
    return out


def unavailable_words(reason) -> str:
    """Why a contender has no row: left out by the run's limit, its conversion or its venv's run failed (each
    as it says), else not installed (its check's reason: the import that failed and the install line, or
    :func:`feedlab.peers.venvs.why_missing`)."""
    reason = str(reason or "")
    if reason.startswith(("left out by", "conversion failed")):
        return reason
    if reason.startswith("its venv's run"):
        return f"run failed: {reason}"
    return f"not installed: {reason}"


def _at_workers(tab: pd.DataFrame, kind: str, name: str, workers) -> dict | None:
    """``name``'s checked, timed row on ``kind`` whose workers that ran are ``workers``."""
    d = tab[(tab.kind == kind) & (tab.contender == name) & (tab.check_ok == True)  # noqa: E712
            & (tab.get("run_ok", False) == True)]  # noqa: E712
    d = d[d.samples_per_s.notna()] if "samples_per_s" in d else d.iloc[0:0]
    for _, r in d.iterrows():
        row = r.to_dict()
        if workers_of(row.get("pipeline"), row.get("num_workers")) == workers:
            return row
    return None


def ratios(tab: pd.DataFrame, field=None) -> dict:
    """Per data set: feedlab's best ÷ the best peer (every other contender that passed its check, at its
    best worker count, warm cache), feedlab's side at the workers that peer ran (its best row where it has
    none: then not like for like), warm and cold each judged; with the ratio's spread from each side's, and
    the peers of the field (:func:`missing_peers`) that were not in it."""
    out = {}
    for kind in sorted(set(tab.kind)):
        names = set(tab[tab.kind == kind].contender)
        peer = _best(tab, kind, sorted(names - {FEEDLAB}))
        fb = None
        if peer is not None:
            fb = _at_workers(tab, kind, FEEDLAB, workers_of(peer.get("pipeline"), peer.get("num_workers")))
        fb = fb or _best(tab, kind, [FEEDLAB])
        missing = missing_peers(tab, kind, field)
        if fb is None or peer is None:
            out[kind] = {"ratio": None, "why_missing": "feedlab best" if fb is None else "no peer passed",
                         "missing_peers": missing, "complete_field": not missing}
            continue
        r = fb["samples_per_s"] / peer["samples_per_s"]
        lo, hi = _ratio(fb["q25"], peer["q75"]), _ratio(fb["q75"], peer["q25"])   # None: a side unbounded
        a, b = side(fb), side(peer)
        cold = _ratio(fb.get("cold_samples_per_s"), peer.get("cold_samples_per_s"))
        v = verdict(a, b, r, target=TARGET, lo=lo, hi=hi)
        entry = {"ratio": r, "ratio_low": lo, "ratio_high": hi, "verdict": words(v), "judged": as_record(v),
                 "cold_ratio": cold, "differs": differences(a, b), "sides": [asdict(a), asdict(b)],
                 "feedlab": {**{k: fb.get(k) for k in ("contender", "num_workers", "samples_per_s", "q25", "q75",
                                                        "cpu_ms_per_sample", "first_batch_s", "peak_rss_mib")},
                             "pipeline": fb.get("pipeline") or ""},   # the spec the doctor advised
                 "best_peer": {k: peer.get(k) for k in ("contender", "label", "num_workers", "samples_per_s", "q25",
                                                        "q75", "cpu_ms_per_sample", "first_batch_s",
                                                        "peak_rss_mib")},
                 "missing_peers": missing, "complete_field": not missing}
        if cold is not None:
            ca, cb = side(fb, "cold"), side(peer, "cold")
            clo = _ratio(fb.get("cold_low"), peer.get("cold_high"))
            chi = _ratio(fb.get("cold_high"), peer.get("cold_low"))
            cv = verdict(ca, cb, cold, target=TARGET, lo=clo, hi=chi)
            entry.update(cold_ratio_low=clo, cold_ratio_high=chi, cold_differs=differences(ca, cb),
                         cold_sides=[asdict(ca), asdict(cb)], cold_verdict=words(cv), cold_judged=as_record(cv))
        out[kind] = entry
    return out


def _ratio(x, y) -> float | None:
    ok = all(v is not None and v == v and v > 0 for v in (x, y))
    return x / y if ok else None


def ratio_table(rat: dict) -> pd.DataFrame:
    """The ratios as a table, one row per data set; ``field`` says whether every peer ran, and
    ``missing_peers`` names those that did not (with why), in the row itself."""
    rows = []
    for kind, r in rat.items():
        miss = r.get("missing_peers") or {}
        rows.append({"kind": kind, "ratio": r.get("ratio"), "ratio_low": r.get("ratio_low"),
                     "ratio_high": r.get("ratio_high"), "verdict": r.get("verdict", r.get("why_missing", "")),
                     "best_peer": (r.get("best_peer") or {}).get("label", ""),
                     "cold_ratio": r.get("cold_ratio"), "cold_verdict": r.get("cold_verdict", ""),
                     "feedlab / peer": shared(r.get("sides") or []),
                     "field": field_words(miss),
                     "missing_peers": "; ".join(f"{k} ({v})" for k, v in miss.items())})
    return pd.DataFrame(rows)


def field_words(missing: dict) -> str:
    """Which peers the best peer was chosen from: "every peer", else every installed one and those not."""
    if not missing:
        return "every peer"
    return f"every peer but {len(missing)}: " + "; ".join(f"{k} ({v})" for k, v in missing.items())


def published_table(tab: pd.DataFrame, cores: int) -> pd.DataFrame:
    """Each peer's own published throughput per vCPU (:mod:`feedlab.peers.published`: published, not
    measured here) beside this run's best rate of that peer per core of this machine, and per busy
    CPU-second (1000 / cpu_ms_per_sample). A peer with no published figure gets one row saying so."""
    rows = []
    for pub in PUBLISHED + [{"peer": p, "kind": None, "what": why} for p, why in NONE_PUBLISHED.items()]:
        name = pub["peer"]
        kinds = [pub["kind"]] if pub["kind"] else [k for k in sorted(set(tab.kind)) if k in PEERS[name].kinds]
        for kind in kinds:
            best = _best(tab, kind, [name])
            cpu_ms = best.get("cpu_ms_per_sample") if best else None
            rate = best["samples_per_s"] if best else None
            row = {"peer": PEERS[name].label, "kind": kind, "published": pub["what"],
                   "published_images_per_s": pub.get("images_per_s"), "published_vcpus": pub.get("vcpus"),
                   "published_per_vcpu": per_vcpu(pub) if "vcpus" in pub else None,
                   "published_source": pub.get("source", ""), "published_note": LABEL if "vcpus" in pub else "",
                   "measured_samples_per_s": rate, "measured_num_workers": best["num_workers"] if best else None,
                   "cores": cores, "measured_per_core": rate / max(1, cores) if rate is not None else None,
                   "measured_per_cpu_s": (1000.0 / cpu_ms if cpu_ms is not None and not math.isnan(cpu_ms)
                                          and cpu_ms > 0 else None)}
            p = row["published_per_vcpu"]
            row["measured_over_published"] = (row["measured_per_core"] / p
                                              if p and row["measured_per_core"] is not None else None)
            rows.append(row)
    return pd.DataFrame(rows)


def _f(x, fmt="{:,.0f}") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def readings(rat: dict, tab: pd.DataFrame) -> list[str]:
    """Sentences computed from the ratios; where a peer wins, the stage and the CPU cost per sample."""
    lines = []
    for kind, r in rat.items():
        miss = r.get("missing_peers") or {}
        without = (f" The best of every peer but {len(miss)}: " + "; ".join(f"{k} ({v})" for k, v in miss.items())
                   + "." if miss else " The best of every peer of the field (each measured on this data set).")
        if r.get("ratio") is None:
            lines.append(f"{kind}: no ratio ({r['why_missing']} has no checked, timed run).{without}")
            continue
        fb, p = r["feedlab"], r["best_peer"]
        chosen = f", the doctor's advice: {fb['pipeline']}" if fb.get("pipeline") else ""
        s = (f"{kind}: feedlab best ({workers_of(fb.get('pipeline'), fb['num_workers'])} workers{chosen}) {_f(fb['samples_per_s'])} samples/s "
             f"(spread {_f(fb['q25'])}–{_f(fb['q75'])}) vs the best peer, {p['label']} ({int(p['num_workers'])} workers) "
             f"{_f(p['samples_per_s'])} (spread {_f(p['q25'])}–{_f(p['q75'])}): ratio {r['ratio']:.2f} "
             f"(from the spreads {_f(r['ratio_low'], '{:.2f}')}–{_f(r['ratio_high'], '{:.2f}')}); target >= {TARGET:g}: "
             f"{r['verdict']}.")
        if r.get("cold_ratio") is not None:
            s += f" Cold page cache: ratio {r['cold_ratio']:.2f}"
            if r.get("cold_ratio_low") is not None and r.get("cold_ratio_high") is not None:
                s += f" (from the spreads {_f(r['cold_ratio_low'], '{:.2f}')}–{_f(r['cold_ratio_high'], '{:.2f}')})"
            s += f": {r['cold_verdict']}." if r.get("cold_verdict") else "."
        if r.get("sides"):
            s += f" Each side (feedlab / peer): {shared(r['sides'])}."
        if r["ratio"] < 1.0:
            a, b = fb["cpu_ms_per_sample"], p["cpu_ms_per_sample"]
            if not (math.isnan(a) or math.isnan(b)):
                if b < 0.9 * a:
                    s += (f" {p['label']} spends less CPU per sample ({b:.3f} vs {a:.3f} ms): its "
                          f"{STAGE[kind]} stage is cheaper.")
                else:
                    s += (f" {p['label']} spends as much or more CPU per sample ({b:.3f} vs {a:.3f} ms) and wins "
                          f"by running the {STAGE[kind]} stage on more cores at once.")
        lines.append(s + without)
    out = tab[~tab.available.astype(bool)]
    budget = out.reason.astype(str).str.startswith("left out by")
    for row in out[~budget].drop_duplicates(["kind", "contender"]).itertuples():
        lines.append(f"{row.kind}: {row.label}: {unavailable_words(row.reason)}")
    if budget.any():
        lines.append("left out by this run's time limit: "
                     + ", ".join(f"{r.label} on {r.kind}" for r in out[budget].itertuples()) + ".")
    if "cold_left_out" in tab:
        warm_only = tab[tab.cold_left_out.fillna("").astype(str).str.len() > 0].drop_duplicates(["kind", "contender"])
        if len(warm_only):
            lines.append(f"timed warm only ({warm_only.cold_left_out.iloc[0]}): "
                         + ", ".join(f"{r.label} on {r.kind}" for r in warm_only.itertuples()) + ".")
    if "notes" in tab:   # a contender's warnings, each once, as lines (never raw under the cell)
        for row in tab[tab.notes.fillna("").astype(str).str.len() > 0].drop_duplicates(["kind", "contender"]).itertuples():
            lines.extend(f"{row.kind}: {row.label} warned: {note}" for note in str(row.notes).splitlines())
    failed = tab[(tab.available.astype(bool)) & (tab.check_ok == False)]  # noqa: E712
    for row in failed.drop_duplicates(["kind", "contender"]).itertuples():
        lines.append(f"{row.kind}: {row.label} failed the output check ({row.check}); it is not ranked.")
    return lines


def environments(infos: list[dict]) -> dict[str, dict]:
    """Where each contender ran, for the record: ``{name: {"interpreter", "python", "versions"}}`` (a peer in
    its own venv: that venv's whole freeze; in this kernel: the packages of its imports with torch,
    torchvision, numpy and Pillow). Two records whose rates differ can then be told apart by what changed."""
    out: dict[str, dict] = {}
    for info in infos:
        name = info.get("name")
        if name and name not in out and (info.get("versions") or info.get("interpreter")):
            out[name] = {"interpreter": info.get("executable") or info.get("interpreter", ""),
                         "python": info.get("python", ""), "versions": dict(info.get("versions") or {})}
    return dict(sorted(out.items()))


def rows_frame(res) -> pd.DataFrame:
    df = res.frame() if len(res) else pd.DataFrame(columns=["experiment", "variant", "kind", "metric", "value"])
    return df[df.experiment == EXPERIMENT] if not df.empty else df


__all__ = ["BASELINE", "FEEDLAB", "STAGE", "TARGET", "field_words", "missing_peers", "pixel_error", "published_table",
           "ratio_table", "ratios", "readings", "rows_frame", "shared", "side", "sides_of_record", "table",
           "unavailable_words", "verdicts", "words"]
