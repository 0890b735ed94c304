"""12_beyond's readings, titles, figures and payload, from the frames its four tests record.

Each function reads only what :mod:`feedlab.experiments.beyond` measured in the run (``Results.frame()``
of the memory, latency, stall, batched-fetch and sharded-read tests); the notebook holds the calls.
"""

from __future__ import annotations

import math

import numpy as np

from feedlab.plots import integer_axis, legend_outside
from feedlab.results import summarize

FETCH_LABELS = {"__getitems__": "one __getitems__ call per batch", "__getitem__": "one __getitem__ call per sample"}
SHARDS, FILES = "wds shards (sequential)", "npy per-sample files (random)"


def _worker_growth(growth: dict) -> float:
    return max([v for k, v in growth.items() if k != "main"], default=math.nan)


def first_batch(ldf):
    """Median/IQR of the first batch's latency per (variant, epoch)."""
    return summarize(ldf[ldf.metric == "first_batch_s"], ["variant", "epoch"])


def later_epochs(ldf) -> dict:
    """``{persistent_workers: median first-batch s}`` over the epochs after the first."""
    fb = summarize(ldf[ldf.metric == "first_batch_s"], ["persistent_workers", "epoch"])
    return {bool(k): float(v) for k, v in fb[fb.epoch > 0].groupby("persistent_workers")["median"].median().items()}


def stall_shares(sdf) -> dict[int, float]:
    """Per prefetch_factor: the share of batches that wait more than half the longest wait."""
    waits = sdf[sdf.metric == "data_wait_s"]
    return {int(pf): float((w.value > 0.5 * w.value.max()).mean()) for pf, w in waits.groupby("prefetch_factor")}


def fetch_ratios(bdf) -> dict[tuple[str, int], float]:
    """``{(format, workers): __getitems__ ÷ __getitem__}`` (medians)."""
    out = {}
    for (fmt, w), g in bdf.groupby(["format", "num_workers"]):
        m = g.groupby("fetch").value.median()
        out[(fmt, int(w))] = float(m["__getitems__"] / m["__getitem__"])
    return out


def shard_ratios(rdf) -> dict[str, float]:
    """``{cache: shards ÷ random per-sample files}`` (medians)."""
    out = {}
    for cache, g in rdf.groupby("cache"):
        m = g.groupby("variant").value.median()
        out[cache] = float(m[SHARDS] / m[FILES])
    return out


# ---------------------------------------------------------------- titles that state the finding
def memory_title(growth: dict) -> str:
    wl, wn = _worker_growth(growth["list"]), _worker_growth(growth["numpy"])
    return f"Worker memory over one epoch: +{wl:.1f} MiB with a list of str, +{wn:.1f} MiB with a numpy S-array"


def first_batch_title(ldf, workers: int) -> str:
    later = later_epochs(ldf)
    if len(later) < 2:
        return f"Time to the first batch of each epoch ({workers} workers)"
    return (f"Later epochs' first batch: {later[False] * 1e3:.0f} ms restarting {workers} workers, "
            f"{later[True] * 1e3:.0f} ms persistent")


def stall_title(sdf, slow_factor: float, workers: int) -> str:
    shares = stall_shares(sdf)
    lo, hi = min(shares.values()), max(shares.values())
    span = f"{100 * lo:.0f}%" if round(100 * lo) == round(100 * hi) else f"{100 * lo:.0f}–{100 * hi:.0f}%"
    return (f"Worker 0 {slow_factor:g}× slower ({workers} workers): {span} of batches wait over half the longest "
            f"wait, at prefetch_factor {', '.join(str(k) for k in sorted(shares))}")


def fetch_title(bdf, batch_size: int) -> str:
    r = list(fetch_ratios(bdf).values())
    span = f"×{min(r):.2f}" if len(r) == 1 else f"×{min(r):.2f}–×{max(r):.2f}"
    return f"__getitems__ per batch: {span} the per-sample fetch (batch {batch_size})"


def shard_title(rdf, workers: int) -> str:
    r = shard_ratios(rdf)
    return "Tar shards ÷ random per-sample files: " + ", ".join(f"×{v:.2f} {c}" for c, v in r.items())


# ---------------------------------------------------------------- figures
def plot_memory(axes, mdf) -> None:
    for ax, variant in zip(axes, ["list", "numpy"]):
        d = mdf[(mdf.variant == variant) & (mdf.metric == "uss")]
        for role, g in d.groupby("role"):
            g = g.sort_values("progress")
            ax.plot(g.progress, g.value - g.value.iloc[0], marker="o", markersize=3,
                    label=f"{role} (USS at start {g.value.iloc[0]:.0f} MiB)")
        ax.set_title(f"index = {'Python list of str' if variant == 'list' else 'numpy S-array'}", loc="left")
        ax.set_xlabel("fraction of the epoch done")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("USS growth since the first sample, MiB\n(one epoch, single run)")


def plot_stalls(axes, sdf) -> None:
    wait_sum = summarize(sdf[sdf.metric == "data_wait_s"], ["prefetch_factor", "batch"])
    for ax, pf in zip(axes, sorted(wait_sum.prefetch_factor.unique())):
        g = wait_sum[wait_sum.prefetch_factor == pf].sort_values("batch")
        ax.errorbar(g.batch, g["median"] * 1e3, yerr=[(g["median"] - g.q25) * 1e3, (g.q75 - g["median"]) * 1e3],
                    marker="o", markersize=3.5, capsize=2, linewidth=1.2)
        ax.set_title(f"prefetch_factor={pf}", loc="left")
        ax.set_xlabel("batch")
        integer_axis(ax, "x")
    axes[0].set_ylabel("data wait, ms\n(median, bar = IQR over repeats)")


def _paired_bars(ax, groups, names, label) -> None:
    for k, (key, g) in enumerate(groups):
        x = np.array([names.index(n) for n in g["_name"]]) + (k - 0.5) * 0.38
        ax.bar(x, g["median"], 0.38, label=label(key))
        ax.errorbar(x, g["median"], yerr=[(g["median"] - g.q25).clip(lower=0), (g.q75 - g["median"]).clip(lower=0)],
                    fmt="none", ecolor="#333", capsize=3)
    ax.set_xticks(np.arange(len(names)))
    ax.set_xticklabels(names)
    ax.set_ylabel("samples/s (median, IQR bars)")


def plot_fetch(ax, bdf) -> None:
    bs = summarize(bdf, ["format", "fetch", "num_workers"])
    bs["_name"] = [f"{f}\n{w} workers" for f, w in zip(bs.format, bs.num_workers)]
    names = list(dict.fromkeys(bs["_name"]))
    _paired_bars(ax, bs.groupby("fetch", sort=False), names, lambda m: FETCH_LABELS.get(m, f"fetch: {m}"))
    legend_outside(ax, "right")


def plot_shards(ax, rdf) -> None:
    rs = summarize(rdf, ["variant", "cache"]).assign(_name=lambda d: d.variant)
    _paired_bars(ax, rs.groupby("cache", sort=False), list(dict.fromkeys(rs.variant)), lambda c: f"{c} page cache")
    ax.legend()


# ---------------------------------------------------------------- readings and payload
def readings(growth: dict, ldf, sdf, bdf, rdf, n_items: int) -> list[str]:
    wl, wn = _worker_growth(growth["list"]), _worker_growth(growth["numpy"])
    out = [f"1. Over one epoch of {n_items:,} indexed items, the largest worker USS growth was {wl:.1f} MiB with a "
           f"list of str and {wn:.1f} MiB with a numpy S-array. "
           + ("The list index shows the copy-on-access growth." if wl > 4 * max(wn, 1) else
              "This Python/torch did not show a clear copy-on-access growth at this size.")]
    later = later_epochs(ldf)
    if len(later) == 2:
        out.append(f"2. First batch of epochs after the first: {later[False] * 1e3:.0f} ms without persistent "
                   f"workers, {later[True] * 1e3:.0f} ms with them (×{later[False] / later[True]:.1f}).")
    thr = summarize(sdf[sdf.metric == "samples_per_s"], ["prefetch_factor"])
    shares = stall_shares(sdf)
    for r in thr.itertuples():
        out.append(f"   prefetch_factor={r.prefetch_factor}: {r.median:,.0f} samples/s; "
                   f"{100 * shares[int(r.prefetch_factor)]:.0f}% of batches wait over half the longest wait")
    for (fmt, w), g in bdf.groupby(["format", "num_workers"]):
        m = g.groupby("fetch").value.median()
        out.append(f"3. {fmt}, {w} workers: __getitems__ {m['__getitems__']:,.0f} vs __getitem__ "
                   f"{m['__getitem__']:,.0f} samples/s (×{m['__getitems__'] / m['__getitem__']:.2f})")
    for cache, g in rdf.groupby("cache"):
        m = g.groupby("variant").value.median()
        a, b = m[SHARDS], m[FILES]
        out.append(f"4. {cache} cache: shards {a:,.0f} vs random per-sample files {b:,.0f} samples/s (×{a / b:.2f})")
    return out


def payload(P, growth: dict, ldf, sdf, bdf, rdf, getitems: bool, cold) -> dict:
    """What 12 records and the claims ledger reads (``results.json``)."""
    thr = summarize(sdf[sdf.metric == "samples_per_s"], ["prefetch_factor"])
    return {"notebook": "12_beyond", "profile": P.profile, "num_workers": P.num_workers,
            "batch_size": P.batch_size, "n_items": P.n_items, "uss_growth_mib": growth,
            "getitems_used_by_dataloader": getitems,
            "first_batch_s": {f"{r.variant}/epoch{r.epoch}": r.median for r in first_batch(ldf).itertuples()},
            "stall_samples_per_s": {int(r.prefetch_factor): r.median for r in thr.itertuples()},
            "batched_fetch": {f"{r.format}/{r.fetch}/w{r.num_workers}": r.median
                              for r in summarize(bdf, ["format", "fetch", "num_workers"]).itertuples()},
            "sharded_reads": {f"{r.variant}/{r.cache}": r.median for r in summarize(rdf, ["variant", "cache"]).itertuples()},
            "cold_cache": cold}
