"""The loader grid: DataLoader settings × repeats, each epoch timed by phase.

One function, :func:`run_grid`, serves every notebook that asks "how fast is
this loader, alone or feeding a model?" (01, 02, 09, and the doctor):

    settings = grid(batch_size=[8, 32], num_workers=[0, 2], format=["png"], model=["srcnn"])
    res = run_grid(data_root, settings, repeats=3, max_batches=20)
    res.frame()  # batch_size, num_workers, pin_memory, format, collate, ..., repeat, metric, value, unit

For each setting: the dataset is opened (once per format), a model and an
optimizer are built (``model="none"`` measures the loader alone), a
``DataLoader`` is made, ``warmup`` short untimed epochs run, then ``repeats``
timed epochs, each wrapped in a :class:`~feedlab.monitor.CpuMonitor` (and a
:class:`~feedlab.monitor.GpuMonitor` where CUDA exists). Every epoch starts
its workers afresh (unless ``persistent_workers``), as a training loop does.

Metrics per (setting, repeat): ``samples_per_s``, ``steady_samples_per_s``
(the same after the first batch, i.e. without worker start-up), ``epoch_s``
(wall time of the batches run), ``data_wait_fraction``, ``first_batch_s``, the mean seconds
per batch of each phase (``data_wait``, ``h2d``, ``forward``, ``backward``;
the first batch, which waits for the workers to start, is left out),
``cpu_saturation`` and ``process_tree_cpu_percent``, and ``gpu_util`` where
a GPU was sampled.

``pin_memory=True`` only means something with CUDA: :func:`split_applicable`
separates such settings on a CPU-only machine so a notebook can say they were
not run instead of timing a loader that silently ignored the flag.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader

from feedlab.monitor import CpuMonitor, GpuMonitor
from feedlab.results import Results, summarize
from feedlab.timing import PHASES, run_epoch

COLLATES = ("stock", "fast")
# model names a Setting may carry: feedlab.models names plus lighter variants.
# "srcnn_small" (16/8 filters instead of 64/32, ~9x fewer FLOPs) stands in on a
# CPU, where the full SRCNN step takes seconds per batch and leaves no loader
# question to ask; "auto" is srcnn with CUDA, srcnn_small without.
MODEL_VARIANTS = {"none": ("none", {}), "srcnn": ("srcnn", {}),
                  "srcnn_small": ("srcnn", {"n1": 16, "n2": 8}), "resnet": ("resnet", {})}


def resolve_model_name(name: str, device=None) -> str:
    """``"auto"`` → ``"srcnn"`` on CUDA, ``"srcnn_small"`` on a CPU; other names unchanged."""
    if name == "auto":
        device = device if device is not None else default_device()
        return "srcnn" if str(device).startswith("cuda") else "srcnn_small"
    if name not in MODEL_VARIANTS:
        raise ValueError(f"model {name!r}: one of auto, {', '.join(MODEL_VARIANTS)}")
    return name


def build_model(name: str):
    from feedlab.models import make_model

    base, opts = MODEL_VARIANTS[name]
    return make_model(base, **opts)
PHASE_LABELS = {"data_wait": "data wait", "h2d": "host→device copy", "forward": "forward",
                "backward": "backward + step"}


@dataclass(frozen=True)
class Setting:
    """One DataLoader configuration (names as in ``torch.utils.data.DataLoader``)."""

    batch_size: int
    num_workers: int = 0
    pin_memory: bool = False
    format: str = "png"            # any feedlab.formats SR format
    collate: str = "stock"         # stock: ToTensor + default_collate; fast: FastCollate (uint8 NCHW)
    model: str = "none"            # none (loader alone) | srcnn | srcnn_small (see MODEL_VARIANTS)
    prefetch_factor: int | None = None   # None: DataLoader's default (2) when num_workers > 0
    persistent_workers: bool = False

    def label(self, *names: str) -> str:
        names = names or ("format", "collate", "batch_size", "num_workers")
        short = {"batch_size": "b", "num_workers": "w", "pin_memory": "pin", "prefetch_factor": "pf"}
        parts = []
        for n in names:
            v = getattr(self, n)
            parts.append(f"{short[n]}{int(v) if not isinstance(v, bool) else ('+' if v else '-')}"
                         if n in short else str(v))
        return " ".join(parts)


def grid(**axes) -> list[Setting]:
    """The cartesian product of setting values: ``grid(batch_size=[8, 32], num_workers=[0, 2])``.
    A scalar counts as a one-value list; unknown names raise."""
    known = {f.name for f in fields(Setting)}
    unknown = set(axes) - known
    if unknown:
        raise TypeError(f"unknown setting(s) {sorted(unknown)}; known: {sorted(known)}")
    if "batch_size" not in axes:
        raise TypeError("grid() needs batch_size")
    names = list(axes)
    lists = [v if isinstance(v, (list, tuple)) else [v] for v in axes.values()]
    for n, values in zip(names, lists):
        if len(values) == 0:
            raise ValueError(f"grid(): {n} has no values")
    return [Setting(**dict(zip(names, combo))) for combo in itertools.product(*lists)]


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def applicable(s: Setting, device) -> tuple[bool, str]:
    """Whether a setting means what it says on ``device``."""
    if s.pin_memory and not str(device).startswith("cuda"):
        return False, "pin_memory needs CUDA (DataLoader ignores it without a GPU)"
    if s.model != "auto" and s.model not in MODEL_VARIANTS:
        return False, f"unknown model {s.model!r}"
    if s.collate not in COLLATES:
        return False, f"unknown collate {s.collate!r}"
    if s.num_workers == 0 and (s.prefetch_factor is not None or s.persistent_workers):
        return False, "prefetch_factor / persistent_workers need num_workers > 0"
    return True, ""


def split_applicable(settings: Iterable[Setting], device) -> tuple[list[Setting], list[tuple[Setting, str]]]:
    """(settings to run, [(setting, why not)])."""
    run, skipped = [], []
    for s in settings:
        ok, why = applicable(s, device)
        if ok:
            run.append(s)
        else:
            skipped.append((s, why))
    return run, skipped


def make_collate(name: str):
    from feedlab.collate import FastCollate, totensor_collate

    if name == "stock":
        return totensor_collate
    if name == "fast":
        return FastCollate(memory_format="nchw")
    raise ValueError(f"collate {name!r}: one of {COLLATES}")


def make_loader(dataset, s: Setting, device=None, seed: int = 0) -> DataLoader:
    """The DataLoader for a setting: shuffled (seeded), the setting's collate, and
    pinning only where CUDA makes it meaningful."""
    device = device if device is not None else default_device()
    kw = {}
    if s.num_workers > 0:
        if s.prefetch_factor is not None:
            kw["prefetch_factor"] = s.prefetch_factor
        kw["persistent_workers"] = s.persistent_workers
    return DataLoader(dataset, batch_size=s.batch_size, shuffle=True, num_workers=s.num_workers,
                      pin_memory=bool(s.pin_memory and str(device).startswith("cuda")),
                      collate_fn=make_collate(s.collate),
                      generator=torch.Generator().manual_seed(seed), **kw)


def _params(s: Setting, device) -> dict:
    d = asdict(s)
    d["prefetch_factor"] = (s.prefetch_factor or 2) if s.num_workers > 0 else 0
    d["device"] = str(device)
    return d


def run_grid(data_root: str | Path, settings: Sequence[Setting], *, repeats: int = 3, warmup: int = 1,
             warmup_batches: int = 3, max_batches: int | None = None,
             max_samples: int | None = None, device=None,
             experiment: str = "loader_grid", seed: int = 0, monitor_interval: float = 0.05,
             dataset_opts: dict | None = None, log: Callable[[str], None] | None = None) -> Results:
    """Time every setting: ``warmup`` epochs of at most ``warmup_batches`` batches,
    then ``repeats`` epochs of at most ``max_batches`` batches (None: the whole set).
    ``max_samples`` caps an epoch by samples instead (rounded up to whole batches), so
    every batch size sees the same data; it wins over ``max_batches``.

    Settings that are not applicable on ``device`` (see :func:`applicable`) raise;
    filter them first with :func:`split_applicable`. Returns one
    :class:`~feedlab.results.Results` with a row per (setting, repeat, metric).
    """
    from feedlab.formats import open_dataset
    from feedlab.models import make_train_step

    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    device = torch.device(device) if device is not None else default_device()
    datasets: dict[str, object] = {}
    res = Results()
    for s in settings:
        if s.model == "auto":
            s = replace(s, model=resolve_model_name("auto", device))
        ok, why = applicable(s, device)
        if not ok:
            raise ValueError(f"{s}: {why}")
        if s.format not in datasets:
            datasets[s.format] = open_dataset(data_root, s.format, **(dataset_opts or {}).get(s.format, {}))
        ds = datasets[s.format]
        torch.manual_seed(seed)
        model = build_model(s.model)
        _loss, optimizer = make_train_step(model, device)
        loader = make_loader(ds, s, device, seed)
        for _ in range(max(0, warmup)):
            run_epoch(loader, model, device, optimizer=optimizer,
                      max_batches=warmup_batches if max_batches is None else min(warmup_batches, max_batches))
        if max_samples is not None:
            max_batches_s = max(1, -(-int(max_samples) // int(s.batch_size)))
        else:
            max_batches_s = max_batches
        params = _params(s, device)
        variant = s.label()
        rates = []
        for r in range(repeats):
            with CpuMonitor(monitor_interval) as cpu, GpuMonitor(monitor_interval) as gpu:
                et = run_epoch(loader, model, device, optimizer=optimizer, max_batches=max_batches_s)
            add = lambda metric, value, unit: res.add(experiment, variant, metric, value, unit, r, **params)  # noqa: E731
            rates.append(et.samples_per_s)
            add("samples_per_s", et.samples_per_s, "samples/s")
            steady = steady_rate(et, skip=prefetch_depth(s))
            if steady is not None:
                add("steady_samples_per_s", steady, "samples/s")
            add("epoch_s", et.wall_s, "s")
            add("samples", et.samples, "samples")
            add("batches", et.batches, "batches")
            add("data_wait_fraction", et.data_wait_fraction, "fraction")
            add("first_batch_s", et.first_batch_s, "s")
            add("main_threads", et.extra.get("main_threads", torch.get_num_threads()), "threads")
            for phase, v in et.phase_means().items():
                add(phase, v, "s/batch")
            c = cpu.summary()
            if not np.isnan(c["cpu_saturation"]):
                add("cpu_saturation", c["cpu_saturation"], "fraction")
                add("process_tree_cpu_percent", c["process_tree_cpu_percent_mean"], "%")
            g = gpu.summary()
            if g.get("gpu_available") and not np.isnan(g["gpu_util_mean"]):
                add("gpu_util", g["gpu_util_mean"], "%")
        if log:
            log(f"{variant} model={s.model}: {np.median(rates):.1f} samples/s (median of {repeats})")
        del loader, model, optimizer
    return res


def prefetch_depth(s: Setting) -> int:
    """Batches a DataLoader can have ready before the loop asks: each worker keeps
    ``prefetch_factor`` in flight (1 with no workers: the first batch itself)."""
    if s.num_workers <= 0:
        return 1
    return int(s.num_workers) * int(s.prefetch_factor or 2)


def steady_rate(et, skip: int = 1) -> float | None:
    """samples/s once start-up is over: counted after the first ``skip`` batches.

    Worker start-up is paid once per epoch and, against a short timed epoch, swamps the
    rate; but counting from the *first* batch overstates it, because the batches the
    workers prefetched while the first was awaited then arrive at no cost (seen here:
    3 workers on 2 cores "beat" 2 workers by 1.7×). So skip the prefetch depth
    (:func:`prefetch_depth`). With too few batches for that, the whole-epoch rate (start-up
    included, an underestimate, never an overestimate) is returned. None with no batch.
    """
    if et.batches < 1:
        return None
    if et.batches <= skip + 1:
        return et.samples_per_s
    done = float(et.phases_s[:skip].sum())
    t = et.wall_s - done
    n = et.samples - int(et.batch_sizes[:skip].sum())
    return n / t if t > 0 else None


SETTING_COLUMNS = tuple(f.name for f in fields(Setting))


def metric_summary(df, metric: str, by: Sequence[str]):
    """:func:`feedlab.results.summarize` of one metric (median, q25, q75, ... over repeats)."""
    part = df[df["metric"] == metric]
    if part.empty:
        raise KeyError(f"no rows for metric {metric!r}")
    return summarize(part, list(by))


def phase_table(df, by: Sequence[str]):
    """Per setting: the median over repeats of each phase's mean seconds per batch,
    the median total, and the interquartile range of the per-repeat total."""
    import pandas as pd

    by = list(by)
    part = df[df["metric"].isin(PHASES)]
    wide = part.pivot_table(index=by + ["repeat"], columns="metric", values="value").reset_index()
    for p in PHASES:
        if p not in wide:
            wide[p] = 0.0
    wide["total"] = wide[list(PHASES)].sum(axis=1)
    g = wide.groupby(by, sort=False)
    out = g[list(PHASES) + ["total"]].median()
    out["total_q25"] = g["total"].quantile(0.25)
    out["total_q75"] = g["total"].quantile(0.75)
    out["n"] = g["total"].count()
    return pd.DataFrame(out).reset_index()


def plot_phase_bars(ax, table, label: Callable[[object], str], unit_scale: float = 1e3,
                    unit: str = "ms", legend: bool = True, per_sample: bool = False):
    """Stacked per-phase bars (one per row of :func:`phase_table`), the bar-top
    error bar spanning the interquartile range of the total over repeats.
    ``per_sample`` divides by each row's ``batch_size`` so batch sizes compare on one
    linear axis (a stack on a log axis would misstate the segments' shares)."""
    from feedlab.plots import stacked_bars

    if per_sample:
        table = table.copy()
        cols = list(PHASES) + ["total", "total_q25", "total_q75"]
        table[cols] = table[cols].div(table["batch_size"].astype(float), axis=0)

    labels = [label(row) for _, row in table.iterrows()]
    # a phase that is zero in every bar (the host→device copy on a CPU run) is left out
    comps = {PHASE_LABELS[p]: table[p].to_numpy() * unit_scale for p in PHASES
             if np.nan_to_num(table[p].to_numpy(dtype=float)).any()}
    colors = _phase_label_colors()
    tot = table["total"].to_numpy() * unit_scale
    lo = np.clip(tot - table["total_q25"].to_numpy() * unit_scale, 0, None)
    hi = np.clip(table["total_q75"].to_numpy() * unit_scale - tot, 0, None)
    x = stacked_bars(ax, labels, comps, errors=None, colors=colors, legend=legend)
    ax.errorbar(x, tot, yerr=np.vstack([lo, hi]), fmt="none", ecolor="#333333", capsize=2, linewidth=1)
    ax.set_ylabel(f"{unit} per {'sample' if per_sample else 'batch'} (median; bar: IQR of total)")
    return x


def _phase_label_colors() -> dict:
    from feedlab.plots import PHASE_COLORS

    return {PHASE_LABELS[p]: PHASE_COLORS[p] for p in PHASES}


def with_setting(s: Setting, **changes) -> Setting:
    return replace(s, **changes)


__all__ = ["Setting", "grid", "run_grid", "make_loader", "make_collate", "applicable", "split_applicable",
           "default_device", "steady_rate", "prefetch_depth", "metric_summary", "phase_table", "plot_phase_bars", "PHASE_LABELS",
           "SETTING_COLUMNS", "COLLATES", "with_setting", "MODEL_VARIANTS", "resolve_model_name", "build_model"]
