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

from feedlab.experiments.loader_grid import grid, run_grid
from feedlab.results import Results
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
            p = dict(num_workers=nw, batch_size=bs, n_items=n_items, sleep_s=sleep_s)
            res.add("sleep_timeline", f"w{nw} b{bs}", "wall_s", wall, "s", r, **p)
            res.add("sleep_timeline", f"w{nw} b{bs}", "max_concurrency", max_concurrency(items), "items", r, **p)
            res.add("sleep_timeline", f"w{nw} b{bs}", "first_batch_s", float(batches["arrival"].iloc[0]), "s", r, **p)
            frames[(nw, bs)] = (items, batches)
    return res, frames


TIMELINE_KEY = "bars: items (numbered), coloured by batch · ▼: the batch reaches the main loop"


def plot_timeline(ax, items, batches, title: str = "", annotate_max: int = 48) -> None:
    """Gantt chart: one lane per worker (``main`` for num_workers=0), one bar per
    item, coloured by batch; triangles mark when each batch reached the main loop."""
    from feedlab.plots import PALETTE

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
                          device=None, warmup: int = 1, log=None, **sizing) -> Results:
    """samples/s for num_workers along :func:`feedlab.machines.worker_ladder` up to
    ``max_workers`` (0, 1, 2, 3, 4, 6, 8, 12, ...: every count on a small machine, about
    ×1.5 steps on a large one), plus the counts write-up 002's claims are stated at
    (7 workers, and one less than the usable cores); one line per model."""
    from feedlab.machines import usable_cores, worker_ladder

    ladder = worker_ladder(max_workers, also=(7, usable_cores() - 1))
    settings = grid(batch_size=batch_size, num_workers=ladder,
                    format=fmt, model=list(models))
    return run_grid(data_root, settings, repeats=repeats, max_samples=max_samples, device=device,
                    warmup=warmup, experiment="throughput_vs_workers", log=log, **sizing)


def batch_size_table(data_root, batch_sizes: Sequence[int], worker_counts: Sequence[int], model: str = "auto",
                     repeats: int = 3, max_samples: int | None = None, fmt: str = "png", device=None,
                     pin_memory: bool | None = None, warmup: int = 1, log=None, **sizing) -> Results:
    """Epoch time, data-wait fraction and utilisation for batch size × workers.
    ``pin_memory`` None: on with CUDA (as in the write-up), off without. ``sizing``:
    ``min_timed_batches`` / ``time_budget_s`` of :func:`~feedlab.experiments.loader_grid.run_grid`."""
    from feedlab.experiments.loader_grid import default_device

    device = device if device is not None else default_device()
    pin = str(device).startswith("cuda") if pin_memory is None else bool(pin_memory)
    settings = grid(batch_size=list(batch_sizes), num_workers=list(worker_counts), format=fmt,
                    model=model, pin_memory=pin)
    return run_grid(data_root, settings, repeats=repeats, max_samples=max_samples, device=device,
                    warmup=warmup, experiment="batch_size_table", log=log, **sizing)


def ms_per_sample(df, metric: str = "steady_samples_per_s"):
    """Rows ``ms_per_sample`` = 1000 / ``metric`` (per repeat): time per sample,
    comparable across batch sizes whatever ``max_samples`` cut. By default the
    steady rate (worker start-up left out; it is reported as first_batch_s), over
    :func:`~feedlab.experiments.loader_grid.steady_rows` only: rows labelled
    ``startup_inclusive`` are dropped where steady ones exist, and kept, labelled, where none do."""
    from feedlab.experiments.loader_grid import steady_rows

    part = steady_rows(df[df["metric"] == metric]).copy()
    part["value"] = 1e3 / part["value"]
    part["metric"] = "ms_per_sample"
    part["unit"] = "ms/sample"
    return part


def speedup(summary, x: str, base, best=None, col: str = "median") -> float:
    """Ratio of the summary's value at ``best`` (default: its maximum) over the value at ``base``."""
    s = summary.set_index(x)[col]
    top = s.max() if best is None else s.loc[best]
    return float(top / s.loc[base])


__all__ = ["SleepDataset", "fetch_timeline", "timeline_runs", "plot_timeline", "max_concurrency",
           "throughput_vs_workers", "batch_size_table", "ms_per_sample", "speedup"]
