"""Notebook 09: where one SRCNN epoch goes, batch 8…128, before and after the fixes.

The baseline is the write-up's loader (PNG files, PIL decode, ToTensor +
default_collate); the fixed one reads LMDB and collates with
:class:`feedlab.collate.FastCollate` (uint8 batch, float conversion on the
device). Both run the same grid of batch size × workers × pin_memory through
:func:`feedlab.experiments.loader_grid.run_grid`.
"""

from __future__ import annotations

from typing import Sequence

from feedlab.experiments._grid_spend import ends, extremes_first
from feedlab.experiments.loader_grid import default_device, grid, metric_summary, run_grid, split_applicable
from feedlab.plots import finding_title, workers_label
from feedlab.results import Results, summary_median

PIPELINES = {"baseline": ("png", "totensor"), "fixed": ("lmdb", "fast")}


def plan(batch_sizes: Sequence[int], worker_counts: Sequence[int], pin_memory: Sequence[bool],
         model: str = "auto", device=None):
    """(settings to run, [(setting, why skipped)]) for both pipelines, in the order a budget spends on them:
    the baseline and the fixed pipeline side by side at each batch size, the smallest and largest first
    (the ends the claims and the title compare; a budget leaves out the middle)."""
    settings = []
    for b in extremes_first(batch_sizes):
        for fmt, collate in PIPELINES.values():
            settings += grid(format=fmt, collate=collate, batch_size=b,
                             num_workers=list(worker_counts), pin_memory=list(pin_memory), model=model)

    return split_applicable(settings, device if device is not None else default_device())


def run(data_root, settings, repeats: int = 3, max_samples: int | None = None, device=None, warmup: int = 1,
        log=None, **sizing) -> Results:
    """``sizing``: ``min_timed_batches`` / ``time_budget_s`` / ``rate_precision`` / ``rate_cap_s`` (steady epochs)
    and ``budget``, see ``run_grid``."""
    sizes = [s.batch_size for s in settings]   # both pipelines at the batch ends: never left out for the budget
    return run_grid(data_root, settings, repeats=repeats, max_samples=max_samples, device=device,
                    warmup=warmup, experiment="batch_size_breakdown", log=log, essential=ends(sizes), **sizing)


def pipeline_of(fmt: str, collate: str) -> str:
    for name, (f, c) in PIPELINES.items():
        if (f, c) == (fmt, collate):
            return name
    return f"{fmt}+{collate}"


# ------------------------------------------------------------ readings, title, payload (notebook 09)

def _key(pipeline, w, pin, b) -> str:
    return f"{pipeline}_w{int(w)}_pin{int(pin)}_b{int(b)}"


def gains(ms_sum, batch_sizes: Sequence[int]) -> dict[str, float]:
    """``{"w<workers>_pin<0|1>_b<batch>": baseline ms/sample ÷ fixed ms/sample}`` for every worker
    count and pin_memory setting in ``ms_sum`` (a summary by pipeline, num_workers, pin_memory, batch_size)."""
    out = {}
    for w in sorted({int(x) for x in ms_sum["num_workers"]}):
        for pin in sorted({bool(x) for x in ms_sum["pin_memory"]}):
            for b in batch_sizes:
                try:
                    base = summary_median(ms_sum, pipeline="baseline", num_workers=w, pin_memory=pin, batch_size=b)
                    fixed = summary_median(ms_sum, pipeline="fixed", num_workers=w, pin_memory=pin, batch_size=b)
                except KeyError:   # a side left out (a budget): no gain there
                    continue
                out[f"w{w}_pin{int(pin)}_b{b}"] = base / fixed
    return out


def title(gain: dict[str, float]) -> str:
    """The fixed pipeline's best gain per sample: ``LMDB + FastCollate: ×2.1 the PNG baseline's speed
    at 2 workers, batch 128`` (pin_memory named when it was on)."""
    if not gain:
        return "baseline (PNG + ToTensor) vs fixed (LMDB + FastCollate)"
    key = max(gain, key=gain.get)
    w, rest = key[1:].split("_pin")
    pin, b = rest.split("_b")
    at = f"{workers_label(w)}, batch {b}" + (", pinned" if pin == "1" else "")
    return finding_title("LMDB + FastCollate", gain[key], "PNG baseline's speed per sample", at)


def readings(ms_sum, wait_sum, batch_sizes: Sequence[int], *, has_gpu_busy: bool, has_gpu_util: bool,
             nvml_note: str = "") -> list[str]:
    """Notebook 09's reading: per worker count and pin_memory the baseline's batch-size trend, then per
    batch size the fixed pipeline's speed over the baseline's and the data-wait share of each; then what
    was not run or measured."""
    if ms_sum.empty:   # every setting left out (the run's limit): nothing measured, nothing inferred about CUDA
        return ["not measured (every setting left out before the run's limit: see the table of settings left out)"]
    b0, b1 = min(batch_sizes), max(batch_sizes)
    g = gains(ms_sum, batch_sizes)
    lines = []
    pins = sorted({bool(x) for x in ms_sum["pin_memory"]})
    for w in sorted({int(x) for x in ms_sum["num_workers"]}):
        for pin in pins:
            sel = dict(num_workers=w, pin_memory=pin)
            try:
                base0 = summary_median(ms_sum, pipeline="baseline", batch_size=b0, **sel)
                base1 = summary_median(ms_sum, pipeline="baseline", batch_size=b1, **sel)
                lines.append(f"{workers_label(w)}, pin_memory={pin}: baseline {base0:.2f} ms/sample at batch {b0}, "
                             f"{base1:.2f} at {b1} ({base0 / base1:.2f}× from the batch size).")
            except KeyError:
                lines.append(f"{workers_label(w)}, pin_memory={pin}: baseline at batch {b0} or {b1} not measured "
                             "(left out: see the table of settings left out).")
            for b in batch_sizes:
                if f"w{w}_pin{int(pin)}_b{b}" not in g:
                    lines.append(f"   batch {b}: not measured on both pipelines (left out)")
                    continue
                fw = summary_median(wait_sum, pipeline="fixed", batch_size=b, **sel)
                bw = summary_median(wait_sum, pipeline="baseline", batch_size=b, **sel)
                lines.append(f"   batch {b}: fixed pipeline runs at {g[f'w{w}_pin{int(pin)}_b{b}']:.2f}× the baseline "
                             f"speed per sample; waiting for data {100 * bw:.0f}% → {100 * fw:.0f}% of the time")
    if True not in pins:
        lines.append("pin_memory=True was not run: no CUDA here, and the DataLoader ignores pinning without it.")
    if not has_gpu_busy:
        lines.append("GPU busy could not be measured on this run (no CUDA).")
    elif not has_gpu_util:
        lines.append(f"NVML utilisation: {nvml_note}")
    return lines


def timer_reading(overhead_s: float, smallest_s: float) -> str:
    """The phase timer's own cost against the smallest batch time timed (target ≤ 1%)."""
    return (f"The phase timer itself costs {overhead_s * 1e6:.1f} µs per batch: {100 * overhead_s / smallest_s:.3f}% "
            f"of the smallest batch time timed here ({smallest_s * 1e3:.2f} ms; target ≤ 1%).")


def payload(*, profile: str, device, model: str, df, ms_sum, gain: dict, skipped, overhead_s: float,
            min_timed_batches, time_budget_s, workload=None, spend: dict | None = None) -> dict:
    """Notebook 09's recorded results (the keys tests/notebooks and feedlab.report.claims read). ``df`` carries
    the ``pipeline`` column (:func:`pipeline_of`); ``spend``: :func:`~feedlab.experiments._grid_spend.spend_record`."""
    keys = ["pipeline", "num_workers", "pin_memory", "batch_size"]
    has_util = bool((df["metric"] == "nvml_util").any())
    has_busy = bool((df["metric"] == "gpu_busy").any())

    def keyed(summary):
        return {_key(r.pipeline, r.num_workers, r.pin_memory, r.batch_size): float(r.median)
                for r in summary.itertuples()}

    return {
        "timer_overhead_s_per_batch": overhead_s,
        "notebook": "09_batch_size_breakdown", "profile": profile, "device": str(device), "model": model,
        "batch_sizes": sorted(int(b) for b in df["batch_size"].unique()),
        "worker_counts": sorted(int(w) for w in df["num_workers"].unique()),
        "pin_memory_run": sorted(bool(p) for p in df["pin_memory"].unique()),
        "pin_memory_not_applicable": [s.label("format", "batch_size", "num_workers", "pin_memory")
                                      for s, _ in skipped],
        "pipelines": sorted(df["pipeline"].unique().tolist()),
        "fixed_over_baseline": gain,
        "ms_per_sample": keyed(ms_sum),
        "gpu_util_measured": has_util,
        # fair-measurement readings (issue 20): what each rate is, the GPU-busy meter, the workload chosen
        "rate_kinds": {_key(*k): sorted(g["rate_kind"].unique().tolist()) for k, g in df.groupby(keys)},
        "min_timed_batches": min_timed_batches, "time_budget_s": time_budget_s,
        "gpu_busy": keyed(metric_summary(df, "gpu_busy", keys)) if has_busy else {},
        "nvml_util": keyed(metric_summary(df, "nvml_util", keys)) if has_util else {},
        "gpu_workload": workload,
        **(spend or {}),
    }


__all__ = ["PIPELINES", "plan", "run", "pipeline_of", "gains", "title", "readings", "timer_reading", "payload"]
