"""What kind each loader-grid rate is (issue 20): ``steady`` or ``startup_inclusive``.

Rows of :func:`feedlab.experiments.loader_grid.run_grid` carry ``rate_kind``,
``timed_batches`` and ``warmup_batches``; plots and readings use steady rows only
(:func:`steady_rows`), a note names what they show (:func:`rate_kind_note`), and results
committed before the columns existed are classified from their ``batches`` rows
(:func:`label_rate_kinds`). Re-exported by ``loader_grid``.
"""

from __future__ import annotations

import numpy as np

from feedlab.pipeline import MIN_TIMED_BATCHES, SPEC_FIELDS

RATE_METRICS = ("steady_samples_per_s", "ms_per_sample")


STEADY_KINDS = ("steady", "imprecise")  # imprecise: steady after warm-up, its interval wider than asked


def steady_rows(df):
    """The rows a plot or reading may use as steady rates: those of ``rate_kind`` ``steady`` or
    ``imprecise`` (a steady rate whose interval was still wider than asked at its cap: drawn, and named
    by :func:`rate_kind_note`; the claims do not count it steady) when the frame has any; a frame with none (a smoke run) is returned whole, every row
    still labelled ``startup_inclusive`` (say so with :func:`rate_kind_note`). A frame
    from before the column existed is returned as it is."""
    if "rate_kind" not in df.columns:
        return df
    steady = df[df["rate_kind"].isin(STEADY_KINDS)]
    return steady if len(steady) else df


def rate_kind_note(df) -> str:
    """One line naming what the frame's rates are: steady (with the fewest timed batches
    after warm-up), start-up inclusive, or which settings were left out for being so."""
    if "rate_kind" not in df.columns or df.empty:
        return "rates: unlabelled (results from before rate_kind)"
    kinds = set(df["rate_kind"].dropna())
    if kinds <= set(STEADY_KINDS):
        note = (f"rates: steady (≥ {int(df['timed_batches'].min())} timed batches after warm-up of "
                f"num_workers × prefetch_factor + 1 batches)")
        if "rate_target" in df.columns and df["rate_target"].notna().any():
            note += (f", each timed until its 95% interval was within ±{100 * float(df['rate_target'].max()):g}% "
                     f"(reached: median ±{100 * float(df['rate_half_width'].median()):.1f}%, "
                     f"widest ±{100 * float(df['rate_half_width'].max()):.1f}%)")
        if "imprecise" in kinds:
            note += "; IMPRECISE (capped before that precision, not steady for the claims): " + _settings(
                df[df["rate_kind"] == "imprecise"])
        return note
    if not kinds & set(STEADY_KINDS):
        return ("rates: START-UP INCLUSIVE (epochs too short for a steady rate: worker start-up and "
                "prefetched batches included); not a steady throughput")
    return "rates: steady; left out as start-up inclusive: " + _settings(df[~df["rate_kind"].isin(STEADY_KINDS)])


def _settings(rows) -> str:
    cols = [c for c in ("format", "batch_size", "num_workers", "model") if c in rows.columns]
    return "; ".join(sorted({", ".join(f"{c}={r[c]}" for c in cols) for _, r in rows.iterrows()}))


def label_rate_kinds(df, min_timed: int = MIN_TIMED_BATCHES):
    """A results frame with ``rate_kind``, ``timed_batches`` and ``warmup_batches`` filled in from
    its own ``batches`` rows where it lacks them (results committed before the columns existed):
    warm-up = ``num_workers × prefetch_factor + 1`` (1 with no workers), timed = batches − warm-up,
    steady iff timed ≥ ``min_timed``. Rows already labelled keep their labels; rows of a
    (setting, repeat) with no ``batches`` row (not a loader-grid experiment) stay unlabelled (NaN).
    ``legacy_whole_epoch`` marks the rows whose committed ``steady_samples_per_s`` was the old
    silent fallback (batches ≤ num_workers × prefetch_factor + 1: the whole-epoch rate)."""
    out = df.copy()
    for col in ("rate_kind", "timed_batches", "warmup_batches"):
        if col not in out.columns:
            out[col] = np.nan
    out["rate_kind"] = out["rate_kind"].astype(object)
    todo = out["rate_kind"].isna()
    b = out[(out["metric"] == "batches") & todo]
    if b.empty:
        out["legacy_whole_epoch"] = False
        return out
    keys = [c for c in ("experiment", "variant", "repeat", *SPEC_FIELDS) if c in out.columns]
    w = pd_numeric(b["num_workers"]).fillna(0).astype(int)
    pf = pd_numeric(b.get("prefetch_factor", 2)).fillna(2).astype(int).where(lambda x: x > 0, 2)
    warm = np.where(w > 0, w * pf + 1, 1)
    timed = np.maximum(0, b["value"].astype(int).to_numpy() - warm)
    lab = b[keys].assign(_warm=warm, _timed=timed, _kind=np.where(timed >= min_timed, "steady", "startup_inclusive"),
                         _legacy=b["value"].to_numpy() <= warm)
    merged = out.merge(lab.drop_duplicates(keys), on=keys, how="left")  # one label per (setting, repeat)
    take = merged["rate_kind"].isna() & merged["_kind"].notna()
    merged.loc[take, "rate_kind"] = merged.loc[take, "_kind"]
    merged.loc[take, "timed_batches"] = merged.loc[take, "_timed"]
    merged.loc[take, "warmup_batches"] = merged.loc[take, "_warm"]
    merged["legacy_whole_epoch"] = merged["_legacy"].fillna(False).astype(bool)
    return merged.drop(columns=["_warm", "_timed", "_kind", "_legacy"])


def pd_numeric(x):
    import pandas as pd

    return pd.to_numeric(x, errors="coerce") if hasattr(x, "__len__") else pd.Series(x)


__all__ = ["RATE_METRICS", "STEADY_KINDS", "steady_rows", "rate_kind_note", "label_rate_kinds"]
