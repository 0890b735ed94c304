"""Notebook 01: what do DataLoader workers buy, and where does it stop?

(a) :class:`SleepDataset` — items that only sleep — and :func:`fetch_timeline`
    record which worker fetched which item, when (``perf_counter`` is
    CLOCK_MONOTONIC on Linux, one clock for every process), drawn by
    :func:`plot_timeline` as a Gantt chart.
(b) :func:`throughput_vs_workers` — samples/s for num_workers 0..max on the
    PNG pairs, loader alone and feeding a model (via the shared loader grid).
(c) :func:`batch_size_table` — epoch time and the fraction of it spent blocked
    on data, against batch size, for a few worker counts.
"""

from __future__ import annotations

import os
import time
from typing import Sequence

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from feedlab import machines
from feedlab.experiments._grid_spend import claim_workers, ends, extremes_first, turned_ladder
from feedlab.experiments.loader_grid import default_device, grid, metric_summary, run_grid, steady_rows
from feedlab.like_for_like import NOT_APPLICABLE, invariants
from feedlab.plots import PALETTE, finding_title, workers_label
from feedlab.report.claims.core import Run
from feedlab.report.claims.sides import ladder_words
from feedlab.results import Results, summary_median
from feedlab.timing import owned_iterator

# ------------------------------------------------------------------ (a) timeline

TIMELINE_COLUMNS = ("item", "worker", "pid", "start", "end")


class SleepDataset(Dataset):
    """``n`` items; each ``__getitem__`` sleeps ``sleep_s`` and returns a float64
    row ``(index, worker id (-1 = main process), pid, start, end)``."""

    def __init__(self, n: int, sleep_s: float):
        self.n = int(n)
        self.sleep_s = float(sleep_s)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        t0 = time.perf_counter()
        time.sleep(self.sleep_s)
        t1 = time.perf_counter()
        info = get_worker_info()
        wid = -1 if info is None else info.id
        return torch.tensor([float(i), float(wid), float(os.getpid()), t0, t1], dtype=torch.float64)


def fetch_timeline(n_items: int, sleep_s: float, num_workers: int, batch_size: int, seed: int = 0):
    """One epoch over a :class:`SleepDataset`; returns (items frame, batches frame, wall seconds).

    Items: item, worker, pid, start, end, batch (seconds from ``iter()``).
    Batches: batch, arrival (when the main loop had it), size.
    """
    import warnings

    import pandas as pd

    with warnings.catch_warnings():
        # torch warns when workers outnumber cores; sleeping items use no CPU
        warnings.filterwarnings("ignore", message=".*worker processes in total.*")
        loader = DataLoader(SleepDataset(n_items, sleep_s), batch_size=batch_size, shuffle=True,
                            num_workers=num_workers, generator=torch.Generator().manual_seed(seed))
        t0 = time.perf_counter()
        rows, arrivals = [], []
        with owned_iterator(loader) as it:
            for b, batch in enumerate(it):
                arrivals.append((b, time.perf_counter() - t0, len(batch)))
                for r in batch.numpy():
                    rows.append((int(r[0]), int(r[1]), int(r[2]), r[3] - t0, r[4] - t0, b))
    wall = time.perf_counter() - t0
    items = pd.DataFrame(rows, columns=list(TIMELINE_COLUMNS) + ["batch"])
    batches = pd.DataFrame(arrivals, columns=["batch", "arrival", "size"])
    return items, batches, wall


def max_concurrency(items) -> int:
    """The most items being fetched at one instant."""
    ev = sorted([(s, 1) for s in items["start"]] + [(e, -1) for e in items["end"]],
                key=lambda t: (t[0], t[1]))
    cur = best = 0
    for _, d in ev:
        cur += d
        best = max(best, cur)
    return best


def timeline_runs(cases: Sequence[tuple[int, int]], n_items: int, sleep_s: float, repeats: int = 1):
    """Run :func:`fetch_timeline` for each (num_workers, batch_size) case.
    Returns (Results with wall_s / speed-up inputs per repeat, {case: (items, batches)} of the last repeat)."""
    res = Results()
    frames = {}
    for nw, bs in cases:
        for r in range(repeats):
            items, batches, wall = fetch_timeline(n_items, sleep_s, nw, bs, seed=r)
            p = dict(num_workers=nw, batch_size=bs, n_items=n_items, sleep_s=sleep_s, timed_batches=len(batches),
                     **invariants(order="global", pixel_error=NOT_APPLICABLE, cache=NOT_APPLICABLE, window_s=wall,
                                  epoch_batches=0))   # shuffled, items only sleep: no pixels, nothing cached
            res.add("sleep_timeline", f"w{nw} b{bs}", "wall_s", wall, "s", r, **p)
            res.add("sleep_timeline", f"w{nw} b{bs}", "max_concurrency", max_concurrency(items), "items", r, **p)
            res.add("sleep_timeline", f"w{nw} b{bs}", "first_batch_s", float(batches["arrival"].iloc[0]), "s", r, **p)
            frames[(nw, bs)] = (items, batches)
    return res, frames


TIMELINE_KEY = "bars: items (numbered), coloured by batch · ▼: the batch reaches the main loop"


def plot_timeline(ax, items, batches, title: str = "", annotate_max: int = 48) -> None:
    """Gantt chart: one lane per worker (``main`` for num_workers=0), one bar per
    item, coloured by batch; triangles mark when each batch reached the main loop."""
    workers = sorted(items["worker"].unique())
    lanes = {w: i for i, w in enumerate(workers)}
    for _, r in items.iterrows():
        y = lanes[r["worker"]]
        ax.barh(y, r["end"] - r["start"], left=r["start"], height=0.6,
                color=PALETTE[int(r["batch"]) % len(PALETTE)], edgecolor="white", linewidth=0.4)
        if len(items) <= annotate_max:
            ax.text(r["start"] + (r["end"] - r["start"]) / 2, y, str(int(r["item"])), ha="center",
                    va="center", fontsize=6, color="white")
    top = len(workers) - 0.35
    ax.plot(batches["arrival"], [top] * len(batches), "v", color="#333333", markersize=5)
    # the key (bars = items coloured by batch, ▼ = arrival) is stated by TIMELINE_KEY, not a legend
    ax.set_yticks(range(len(workers)))
    ax.set_yticklabels(["main" if w < 0 else f"worker {w}" for w in workers])
    ax.set_ylim(-0.6, len(workers) - 0.1)
    ax.set_xlim(left=0)
    ax.set_xlabel("seconds since iter(loader)")
    if title:
        ax.set_title(title, loc="left")


# ------------------------------------------------------------ (b) and (c): loader grid

def throughput_vs_workers(data_root, max_workers: int, batch_size: int, models: Sequence[str] = ("none", "auto"),
                          repeats: int = 3, max_samples: int | None = None, fmt: str = "png",
                          device=None, warmup: int = 1, log=None, stop_when_turned: bool = True,
                          **sizing) -> Results:
    """samples/s for num_workers along :func:`feedlab.machines.worker_ladder` up to
    ``max_workers`` (0, 1, 2, 3, 4, 6, 8, 12, ...: every count on a small machine, about
    ×1.5 steps on a large one), plus the counts write-up 002's claims are stated at
    (7 workers, and one less than the usable cores); one line per model. ``stop_when_turned``: a line
    leaves out the counts no claim names once two successive counts were no faster than its best beyond
    their spread (:func:`~feedlab.experiments._grid_spend.turned_ladder`; the results' ``left_out`` names
    them). ``sizing``: ``min_timed_batches``, ``time_budget_s``, ``rate_precision``, ``rate_cap_s``, ``budget``
    of :func:`~feedlab.experiments.loader_grid.run_grid` (a budget never leaves out a count a claim names)."""
    cores = machines.usable_cores()
    ladder = machines.worker_ladder(max_workers, also=(7, cores - 1))
    settings = grid(batch_size=batch_size, num_workers=ladder,
                    format=fmt, model=list(models))
    need = {m: claim_workers(ladder, cores, beyond_cores=(m == "none")) for m in models}
    needed = lambda m: need.get(m, need.get("auto", ladder))  # noqa: E731  (after run_grid resolves "auto")
    skip = turned_ladder(needed) if stop_when_turned else None  # each line stops once turned, keeping claims' counts
    return run_grid(data_root, settings, repeats=repeats, max_samples=max_samples, device=device,
                    warmup=warmup, experiment="throughput_vs_workers", log=log, skip=skip,
                    essential=lambda s: s.num_workers in needed(s.model), **sizing)


def batch_size_table(data_root, batch_sizes: Sequence[int], worker_counts: Sequence[int], model: str = "auto",
                     repeats: int = 3, max_samples: int | None = None, fmt: str = "png", device=None,
                     pin_memory: bool | None = None, warmup: int = 1, log=None, **sizing) -> Results:
    """Epoch time, data-wait fraction and utilisation for batch size × workers.
    ``pin_memory`` None: on with CUDA (as in the write-up), off without. ``sizing``:
    ``min_timed_batches`` / ``time_budget_s`` / ``rate_precision`` / ``rate_cap_s`` / ``budget`` of
    :func:`~feedlab.experiments.loader_grid.run_grid`."""
    device = device if device is not None else default_device()
    pin = str(device).startswith("cuda") if pin_memory is None else bool(pin_memory)
    settings = grid(batch_size=extremes_first(batch_sizes), num_workers=list(worker_counts), format=fmt,
                    model=model, pin_memory=pin)  # the ends a claim compares first: a budget leaves out the middle
    return run_grid(data_root, settings, repeats=repeats, max_samples=max_samples, device=device,
                    warmup=warmup, experiment="batch_size_table", log=log, essential=ends(batch_sizes), **sizing)


def ms_per_sample(df, metric: str = "steady_samples_per_s"):
    """Rows ``ms_per_sample`` = 1000 / ``metric`` (per repeat): time per sample,
    comparable across batch sizes whatever ``max_samples`` cut. By default the
    steady rate (worker start-up left out; it is reported as first_batch_s), over
    :func:`~feedlab.experiments.loader_grid.steady_rows` only: rows labelled
    ``startup_inclusive`` are dropped where steady ones exist, and kept, labelled, where none do."""
    part = df[df["metric"] == metric]
    if part.empty:   # no rows (every setting left out): none to convert
        return part.copy()
    part = steady_rows(part).copy()
    part["value"] = 1e3 / part["value"]
    part["metric"] = "ms_per_sample"
    part["unit"] = "ms/sample"
    return part


def speedup(summary, x: str, base, best=None, col: str = "median") -> float:
    """Ratio of the summary's value at ``best`` (default: its maximum) over the value at ``base``."""
    s = summary.set_index(x)[col]
    top = s.max() if best is None else s.loc[best]
    return float(top / s.loc[base])


# ------------------------------------------------------------ readings, titles, payload (notebook 01)

def _by(summary, key: str, **where):
    """``summary``'s medians indexed by ``key`` (ints) for the rows matching ``where``."""
    s = summary
    for k, v in where.items():
        s = s[s[k] == v]
    out = s.set_index(key)["median"]
    out.index = [int(i) for i in out.index]
    return out


def timeline_title(tl_sum, slow_workers: int, many: int, batch_size: int) -> str:
    """The sleep timeline's finding: ``3 workers: ×2.9 the 1-worker speed, batch 4 (ideal ×3)``."""
    wall = tl_sum[tl_sum.metric == "wall_s"]
    one = summary_median(wall, num_workers=slow_workers, batch_size=batch_size)
    par = summary_median(wall, num_workers=many, batch_size=batch_size)
    ideal = many / max(1, slow_workers)
    return (finding_title(workers_label(many), one / par, f"{int(slow_workers)}-worker speed",
                          f"batch {batch_size}") + f" (ideal ×{ideal:g})")


def throughput_title(tp_sum, batch_size: int, model: str = "none") -> str:
    """The best worker count's rate over one worker's, for ``model`` (``"none"``: the loader alone):
    ``8 workers: ×3.1 the 1-worker rate at batch 32, loader alone``."""
    s = _by(tp_sum, "num_workers", model=model)
    if s.empty:   # every setting left out (the run's limit): the figure says so, nothing is made up
        return f"worker ladder at batch {batch_size}: not measured (every setting left out: see the table)"
    w1 = 1 if 1 in s.index else int(s.index.min())
    best = int(s.idxmax())
    if best == w1 and len(s) > 1:  # one worker was best: against the fewest other workers
        w1 = int(min(i for i in s.index if i != best))
    who = "loader alone" if model == "none" else f"feeding {model}"
    return finding_title(workers_label(best), s.max() / s.loc[w1], f"{w1}-worker rate",
                         f"batch {batch_size}, {who}")


def batch_title(ms_sum, batch_sizes: Sequence[int]) -> str:
    """Time per sample at the smallest batch over the largest, for the worker count where batching
    mattered most: ``batch 8: ×2.4 the time per sample of batch 128 (2 workers)``."""
    b0, b1 = min(batch_sizes), max(batch_sizes)
    best = None
    for w in sorted({int(w) for w in ms_sum["num_workers"]}):
        s = _by(ms_sum, "batch_size", num_workers=w)
        if b0 in s.index and b1 in s.index and (best is None or s.loc[b0] / s.loc[b1] > best[0]):
            best = (s.loc[b0] / s.loc[b1], w)
    if best is None:
        return f"time per sample, batch {b0} to {b1}"
    return finding_title(f"batch {b0}", best[0], f"time per sample of batch {b1}", f"{workers_label(best[1])}")


def readings(tl_sum, tp_sum, ms_sum, wait_sum, *, timeline_workers: Sequence[int], sleep_batch_size: int,
             sleep_items: int, sleep_s: float, worker_counts: Sequence[int], batch_sizes: Sequence[int],
             model: str, has_gpu_busy: bool, has_gpu_util: bool, nvml_note: str = "", frame=None) -> list[str]:
    """Notebook 01's reading, one line each: (a) the sleep timeline against the ideal speed-up,
    (b) each line's worker speed-up, (c) the batch-size trend per worker count, then what was not
    measured. Every number is read from the summaries given (medians over repeats). ``frame``: (b)'s rows, so the
    best rate is labelled by the precision rule (imprecise, and its ratio measured, not judged: audit54 S7)."""
    lines = []
    tl = tl_sum[tl_sum.metric == "wall_s"]
    few, many = min(timeline_workers), max(timeline_workers)
    one = summary_median(tl, num_workers=few, batch_size=sleep_batch_size)
    par = summary_median(tl, num_workers=many, batch_size=sleep_batch_size)
    whole = summary_median(tl, num_workers=many, batch_size=sleep_items)
    conc = summary_median(tl_sum[tl_sum.metric == "max_concurrency"], num_workers=many, batch_size=sleep_items)
    lines.append(f"(a) {sleep_items} items × {sleep_s} s: {one:.2f} s with {workers_label(few)}, {par:.2f} s with "
                 f"{workers_label(many)} and batch {sleep_batch_size} ({one / par:.2f}× ; ideal "
                 f"{many / max(1, few):.0f}×). With one batch of all {sleep_items} items and "
                 f"{workers_label(many)}: {whole:.2f} s, at most {conc:.0f} item(s) in flight"
                 + (" (a worker builds a whole batch)." if conc <= 1 else "."))
    if tp_sum.empty:
        lines.append(f"(b) worker ladder: {NOT_MEASURED}")
    for m in dict.fromkeys(tp_sum["model"]):
        s = _by(tp_sum, "num_workers", model=m)
        name = "loader alone" if m == "none" else f"with {m}"
        w1 = 1 if 1 in s.index else int(s.index.min())
        w0 = int(s.index.min())
        tag, tail = ("", "") if frame is None else ladder_words(Run({}, fingerprint={}, frame=frame), str(m),
                                                                 int(s.idxmax()), w1)
        lines.append(f"(b) {name}: {s.loc[w0]:.0f} samples/s at {w0} workers, {s.loc[w1]:.0f} at {w1}, best "
                     f"{s.max():.0f} at {int(s.idxmax())} workers{tag} ({s.max() / s.loc[w1]:.2f}× over "
                     f"{workers_label(w1)}{tail}).")
    b0, b1 = min(batch_sizes), max(batch_sizes)
    if ms_sum.empty:
        lines.append(f"(c) batch-size table: {NOT_MEASURED}")
    for w in worker_counts if not ms_sum.empty else ():
        s = _by(ms_sum, "batch_size", num_workers=w)
        f = _by(wait_sum, "batch_size", num_workers=w)
        if not {b0, b1} <= set(s.index) & set(f.index):
            lines.append(f"(c) {workers_label(w)}: batch {b0} or {b1} not measured (left out: see the table of "
                         "settings left out).")
            continue
        lines.append(f"(c) {workers_label(w)}: {s.loc[b0]:.2f} ms/sample at batch {b0} vs {s.loc[b1]:.2f} at batch "
                     f"{b1} (batch {b0} takes {s.loc[b0] / s.loc[b1]:.2f}× the time per sample of batch {b1}); "
                     f"blocked on data {100 * f.loc[b0]:.0f}% vs {100 * f.loc[b1]:.0f}% of the time.")
    if ms_sum.empty:   # no batch-size row: nothing to infer about CUDA from their absence
        return lines
    if not has_gpu_busy:
        lines.append("GPU busy could not be measured: no CUDA on this run.")
    elif not has_gpu_util:
        lines.append(f"NVML utilisation: {nvml_note}")
    return lines


NOT_MEASURED = "not measured (every setting left out before the run's limit: see the table of settings left out)"


def _keyed(summary) -> dict:
    return {f"w{int(r.num_workers)}_b{int(r.batch_size)}": float(r.median) for r in summary.itertuples()}


def payload(*, profile: str, device, model: str, tl_sum, cases, tp_df, tp_sum, bs_df, ms_sum, wait_sum,
            min_timed_batches, time_budget_s, workload=None, spend: dict | None = None) -> dict:
    """Notebook 01's recorded results (the keys tests/notebooks and feedlab.report.claims read); ``spend``:
    :func:`~feedlab.experiments._grid_spend.spend_record` (precision, budget, settings left out)."""
    import pandas as pd


    has_util = bool((bs_df["metric"] == "nvml_util").any())
    has_busy = bool((bs_df["metric"] == "gpu_busy").any())
    tl = tl_sum[tl_sum.metric == "wall_s"]
    ran = [d for d in (tp_df, bs_df) if not d.empty]   # a grid with every setting left out has no rows
    values = lambda d, col: sorted(int(v) for v in d[col].unique()) if not d.empty else []  # noqa: E731
    return {
        "notebook": "01_worker_scaling", "profile": profile, "device": str(device), "model": model,
        "batch_sizes": values(bs_df, "batch_size"),
        "worker_counts": values(bs_df, "num_workers"),
        "throughput_workers": values(tp_df, "num_workers"),
        "sleep_wall_s": {f"w{w}_b{b}": summary_median(tl, num_workers=w, batch_size=b) for w, b in cases},
        "samples_per_s_loader": {k: float(v) for k, v in _by(tp_sum, "num_workers", model="none").items()},
        "samples_per_s_with_model": {k: float(v) for k, v in _by(tp_sum, "num_workers", model=model).items()},
        "ms_per_sample": _keyed(ms_sum),
        "data_wait_fraction": _keyed(wait_sum),
        "gpu_util_measured": has_util,
        # fair-measurement readings (issue 20): what each rate is, the GPU-busy meter, the workload chosen
        "rate_kinds": {f"{e}_w{int(w)}_b{int(b)}": sorted(g["rate_kind"].unique().tolist())
                       for (e, w, b), g in (pd.concat(ran).groupby(["experiment", "num_workers", "batch_size"])
                                            if ran else ())},
        "min_timed_batches": min_timed_batches, "time_budget_s": time_budget_s,
        "gpu_busy": _keyed(metric_summary(bs_df, "gpu_busy", ["num_workers", "batch_size"])) if has_busy else {},
        "nvml_util": _keyed(metric_summary(bs_df, "nvml_util", ["num_workers", "batch_size"])) if has_util else {},
        "gpu_workload": workload,
        **(spend or {}),
    }


__all__ = ["SleepDataset", "fetch_timeline", "timeline_runs", "plot_timeline", "max_concurrency",
           "throughput_vs_workers", "batch_size_table", "ms_per_sample", "speedup",
           "timeline_title", "throughput_title", "batch_title", "readings", "payload"]
