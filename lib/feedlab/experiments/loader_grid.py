"""The loader grid: DataLoader settings × repeats, each epoch timed by phase.

One function, :func:`run_grid`, serves every notebook that asks "how fast is
this loader, alone or feeding a model?" (01, 02, 09, and the doctor):

    settings = grid(batch_size=[8, 32], num_workers=[0, 2], format=["png"], model=["srcnn"])  # PipelineSpecs
    res = run_grid(data_root, settings, repeats=3, max_batches=20)
    res.frame()  # batch_size, num_workers, pin_memory, format, collate, ..., repeat, metric, value, unit

For each setting: the dataset is opened (once per format), a model and an
optimizer are built (``model="none"`` measures the loader alone), a
``DataLoader`` is made, ``warmup`` short untimed epochs run, then ``repeats``
timed epochs, each wrapped in a :class:`~feedlab.monitor.CpuMonitor`, a
:class:`~feedlab.gpu_busy.BusyMeter` and a :class:`~feedlab.gpu_busy.NvmlWindow`.
Every epoch starts its workers afresh (unless ``persistent_workers``), as a training loop does: not kept
across settings (a fork start, ``first_batch_s``, is ~0.07 s an epoch on cpu-2c; a DataLoader's batch size and
sampler are fixed when it is built, so a grid's batch sizes cannot share its workers).

Metrics per (setting, repeat): ``samples_per_s``, ``steady_samples_per_s``
(the same after the warm-up batches, labelled by ``rate_kind``: see :func:`run_grid`), ``epoch_s``
(wall time of the batches run), ``data_wait_fraction``, ``first_batch_s``, the mean seconds
per batch of each phase (``data_wait``, ``h2d``, ``forward``, ``backward``;
the first batch, which waits for the workers to start, is left out),
``cpu_saturation`` (the loader's process tree ÷ the usable cores), ``process_tree_cpu_percent``,
``cpu_system_saturation`` (the whole machine's, for the busy check); on CUDA ``gpu_busy`` (the
GPU time of the steps ÷ the loop's wall time, from CUDA events; its row carries ``nvml_note``),
``gpu_step_s``, and ``nvml_util`` where NVML's sample buffer covered ≥ 10 of its periods. NVML is
no longer polled (its 50 ms polls of a 1/6–1 s average read 0% under running steps).

``pin_memory=True`` only means something with CUDA: :func:`split_applicable`
separates such settings on a CPU-only machine so a notebook can say they were
not run instead of timing a loader that silently ignored the flag.
"""

from __future__ import annotations

import itertools
import math
from contextlib import nullcontext
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from feedlab.budget import Budget
from feedlab.experiments._grid_spend import budget_group, left_out_why, setting_name
from feedlab.experiments._rate_kinds import RATE_METRICS, label_rate_kinds, rate_kind_note, steady_rows
from feedlab.experiments.row_invariants import grid_invariants
from feedlab.gpu_busy import BusyMeter, NvmlWindow
from feedlab.monitor import CpuMonitor
from feedlab.pipeline import (
    COLLATES,
    MIN_TIMED_BATCHES,
    MODEL_VARIANTS,
    PipelineSpec,
    SteadyStop,
    build_model,
    default_device,
    make_loader,
    make_training,
    open_dataset,
    prefetch_depth,
    rate_of,
    resolve_model_name,
    steady_batches,
    steady_rate,
)
from feedlab.pipeline import warmup_batches as warmup_batches_of
from feedlab.plots import PHASE_COLORS, stacked_bars
from feedlab.results import Results, summarize
from feedlab.timing import PHASES, run_epoch

PHASE_LABELS = {"data_wait": "data wait", "h2d": "host→device copy", "forward": "forward",
                "backward": "backward + step"}


def grid(**axes) -> list[PipelineSpec]:
    """The cartesian product of spec values: ``grid(batch_size=[8, 32], num_workers=[0, 2])``.
    A scalar counts as a one-value list; unknown names raise."""
    known = {f.name for f in fields(PipelineSpec)}
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
    return [PipelineSpec(**dict(zip(names, combo))) for combo in itertools.product(*lists)]


def applicable(s: PipelineSpec, device) -> tuple[bool, str]:
    """Whether a spec means what it says on ``device``."""
    why = s.problems(device)
    return (not why), "; ".join(why)


def split_applicable(settings: Iterable[PipelineSpec], device
                     ) -> tuple[list[PipelineSpec], list[tuple[PipelineSpec, str]]]:
    """(settings to run, [(setting, why not)])."""
    run, skipped = [], []
    for s in settings:
        ok, why = applicable(s, device)
        if ok:
            run.append(s)
        else:
            skipped.append((s, why))
    return run, skipped


def _params(s: PipelineSpec, device) -> dict:
    d = asdict(s)
    d["prefetch_factor"] = (s.prefetch_factor or 2) if s.num_workers > 0 else 0
    d["device"] = str(device)
    return d


def epoch_batches(s: PipelineSpec, *, max_batches: int | None = None, max_samples: int | None = None,
                  min_timed_batches: int | None = None) -> int | None:
    """Batches of one timed epoch of setting ``s``: ``max_samples`` (rounded up to whole batches)
    or ``max_batches`` as given; with ``min_timed_batches``, at least
    :func:`~feedlab.pipeline.steady_batches` (warm-up + that many timed batches) whatever those say.
    None: the whole data set once."""
    n = max(1, -(-int(max_samples) // int(s.batch_size))) if max_samples is not None else max_batches
    if min_timed_batches is not None:
        need = steady_batches(s, int(min_timed_batches))
        n = need if n is None else max(int(n), need)
    return n


def cycling_loader(ds, s: PipelineSpec, batches: int | None, seed: int = 0):
    """The loader for ``s``; when ``batches`` × batch size exceeds the data set, an epoch runs
    successive shuffled passes over it (``RandomSampler(num_samples=...)`` without replacement:
    every sample once per pass, each pass a fresh permutation), so a small set still gives a
    steady epoch. The extra passes read what the first brought into the page cache: the rates
    of such an epoch are warm-cache rates (the grid's warm-up epoch makes them so anyway)."""
    if batches is None or int(batches) * int(s.batch_size) <= len(ds):
        return make_loader(ds, s, seed)
    from torch.utils.data import RandomSampler

    g = torch.Generator().manual_seed(seed)
    return make_loader(ds, s, seed, sampler=RandomSampler(ds, num_samples=int(batches) * int(s.batch_size),
                                                          generator=g))


BUDGET_MIN_TIMED = 10  # a time-budgeted epoch's fewest timed batches for a steady rate
BUDGET_CAP_BATCHES = 100_000  # a time-budgeted epoch's sampler length: the budget ends it first
PRECISE_MIN_TIMED = 20        # a precision-timed epoch's fewest timed batches (then a second, then the interval)
PRECISE_FLOOR = 10            # the fewest a profile may ask for with rate_precision (5 batch means of 2)


def run_grid(data_root: str | Path, settings: Sequence[PipelineSpec], *, repeats: int = 3, warmup: int = 1,
             warmup_batches: int = 3, max_batches: int | None = None,
             max_samples: int | None = None, device=None,
             experiment: str = "loader_grid", seed: int = 0, monitor_interval: float = 0.05,
             dataset_opts: dict | None = None, log: Callable[[str], None] | None = None,
             min_timed_batches: int | None = None, time_budget_s: float | None = None,
             rate_precision: float | None = None, rate_cap_s: float | None = 20.0, budget: Budget | None = None,
             skip: Callable[[PipelineSpec, Results], str] | None = None,
             essential: Callable[[PipelineSpec], bool] | None = None) -> Results:
    """Time every setting: ``warmup`` epochs of at most ``warmup_batches`` batches,
    then ``repeats`` epochs of at most ``max_batches`` batches (None: the whole set).
    ``max_samples`` caps an epoch by samples instead (rounded up to whole batches), so
    every batch size sees the same data; it wins over ``max_batches``.

    Steady state by construction: ``min_timed_batches`` makes each timed epoch at least
    the setting's warm-up (``num_workers × prefetch_factor`` batches + the first) plus that many
    timed batches (:func:`epoch_batches`; a set too small for it is cycled, :func:`cycling_loader`);
    ``time_budget_s`` instead runs each timed epoch for that many seconds after its first batch
    was asked for (and never fewer than warm-up + ``min_timed_batches or 10`` batches).
    ``rate_precision`` (say 0.05) instead times each epoch until its steady rate is known to that
    relative half-width (95%, :class:`~feedlab.pipeline.SteadyStop`: at least ``min_timed_batches or 20``
    timed batches and a second), or ``rate_cap_s`` seconds of timed batches, where the rate is labelled
    ``imprecise``; every row then carries ``rate_half_width``, the precision reached.
    ``min_timed_batches`` below 20 (at least :data:`PRECISE_FLOOR`) judges the interval over 5 batch means
    instead of 10. Rows then also carry ``rate_target`` (the half-width asked for), and the
    ``steady_samples_per_s`` row its interval, ``rate_low`` and ``rate_high`` (samples/s).
    ``budget`` (:class:`~feedlab.budget.Budget`) is asked before each setting, in the order given, whether
    it fits (its group: batch size and model) unless ``essential(setting)`` (a claim reads it: run, and
    charged, whatever is left of the budget, though never past the run's limit; each rate's cap is
    then shortened to fit before that limit, :meth:`~feedlab.budget.Budget.cap_s`); ``skip(setting, results so far)`` gives a reason to leave a setting out
    ("" runs it; a worker ladder that has turned, :mod:`feedlab.experiments._grid_spend`). Each setting left
    out is named, with why, in the returned results' ``left_out``.
    Every row carries ``rate_kind`` (``steady`` / ``startup_inclusive``, :func:`feedlab.pipeline.rate_of`),
    ``timed_batches`` and ``warmup_batches``: a row of an epoch too short for a steady rate
    (a smoke run) says so, and ``steady_samples_per_s`` is then the whole-epoch rate, labelled.

    Settings that are not applicable on ``device`` (see :func:`applicable`) raise;
    filter them first with :func:`split_applicable`. Returns one
    :class:`~feedlab.results.Results` with a row per (setting, repeat, metric).
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    if time_budget_s is not None and time_budget_s <= 0:
        raise ValueError(f"time_budget_s={time_budget_s}: must be > 0 seconds")
    device = torch.device(device) if device is not None else default_device()
    if rate_precision is not None and not 0 < rate_precision < 1:
        raise ValueError(f"rate_precision={rate_precision}: a relative half-width between 0 and 1 (0.05 is 5%)")
    min_timed = int(min_timed_batches) if min_timed_batches is not None else (
        BUDGET_MIN_TIMED if time_budget_s is not None else PRECISE_MIN_TIMED if rate_precision is not None
        else MIN_TIMED_BATCHES)
    if rate_precision is not None and min_timed < PRECISE_FLOOR:
        raise ValueError(f"min_timed_batches={min_timed} with rate_precision: at least {PRECISE_FLOOR} timed batches "
                         "(two per batch mean of its interval)")
    blocks = 10 if min_timed >= 2 * 10 else 5
    rate_cap_s = 20.0 if rate_cap_s is None else float(rate_cap_s)
    datasets: dict[str, object] = {}
    res = Results()
    res.columns = (*SETTING_COLUMNS, "rate_kind", "timed_batches", "warmup_batches")   # a grid run with no setting
    for s in settings:
        if s.model == "auto":
            s = replace(s, model=resolve_model_name("auto", device))
        ok, why = applicable(s, device)
        if not ok:
            raise ValueError(f"{s}: {why}")
        s = replace(s, device=str(device))
        why = left_out_why(s, res, budget, skip, essential, experiment)
        if why:
            if log:
                log(f"{setting_name(s, experiment)}: left out ({why})")
            continue
        key = (s.format, s.decode, s.transform)
        if key not in datasets:
            datasets[key] = open_dataset(data_root, s, **(dataset_opts or {}).get(s.format, {}))
        with budget.setting(setting_name(s, experiment), budget_group(s)) if budget is not None else nullcontext():
            _time_setting(res, s, datasets[key], device, seed=seed, warmup=warmup, warmup_batches=warmup_batches,
                          max_batches=max_batches, max_samples=max_samples, min_timed_batches=min_timed_batches,
                          min_timed=min_timed, time_budget_s=time_budget_s, rate_precision=rate_precision,
                          rate_cap_s=rate_cap_s if budget is None else budget.cap_s(rate_cap_s, repeats),
                          blocks=blocks, repeats=repeats, monitor_interval=monitor_interval,
                          experiment=experiment, log=log, root=data_root)
    return res


def _time_setting(res: Results, s: PipelineSpec, ds, device, *, seed, warmup, warmup_batches, max_batches,
                  max_samples, min_timed_batches, min_timed, time_budget_s, rate_precision, rate_cap_s, blocks,
                  repeats, monitor_interval, experiment, log, root) -> None:
    """:func:`run_grid`'s timing of one setting (its warm-up epochs, then ``repeats`` timed epochs) into ``res``."""
    torch.manual_seed(seed)
    model, _loss, optimizer = make_training(s.model, device)
    warm = warmup_batches_of(s)
    if time_budget_s is not None or rate_precision is not None:
        max_batches_s = epoch_batches(s, max_batches=BUDGET_CAP_BATCHES, min_timed_batches=min_timed)
        min_batches = warm + min_timed
    else:
        max_batches_s = epoch_batches(s, max_batches=max_batches, max_samples=max_samples,
                                      min_timed_batches=min_timed_batches)
        min_batches = 0
    loader = cycling_loader(ds, s, max_batches_s, seed)
    for _ in range(max(0, warmup)):
        run_epoch(loader, model, device, optimizer=optimizer,
                  max_batches=warmup_batches if max_batches is None else min(warmup_batches, max_batches))
    params = _params(s, device)
    variant = s.label()
    rates = []
    kinds = []
    for r in range(repeats):
        busy = BusyMeter(device)
        stop = (SteadyStop(warm, min_timed=min_timed, half_width=rate_precision, max_window_s=rate_cap_s,
                           blocks=blocks) if rate_precision is not None else None)
        with CpuMonitor(monitor_interval) as cpu, NvmlWindow(device) as nv:
            et = run_epoch(loader, model, device, optimizer=optimizer, max_batches=max_batches_s,
                           busy=busy, time_budget_s=time_budget_s, min_batches=min_batches, stop=stop)
        rate, kind, timed = rate_of(et, warm, min_timed)
        row = dict(params, rate_kind=kind, timed_batches=timed, warmup_batches=warm, **grid_invariants(s, root, et, warm, kind))
        if stop is not None:   # steady by the rule, but not known to the precision asked for: labelled
            stop.finish()   # the precision of the whole window as timed (a look, not a stop: no optional stopping)
            row.update(rate_kind="imprecise" if kind == "steady" and not stop.precise else kind,
                       rate_half_width=stop.achieved, rate_target=rate_precision)
        add = lambda metric, value, unit: res.add(experiment, variant, metric, value, unit, r, **row)  # noqa: E731
        rates.append(et.samples_per_s)
        kinds.append(kind)
        add("samples_per_s", et.samples_per_s, "samples/s")
        if rate is not None:
            res.add(experiment, variant, "steady_samples_per_s", rate, "samples/s", r, **row,
                    **(rate_interval(rate, stop.achieved) if stop is not None else {}))
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
        if not np.isnan(c.get("cpu_system_saturation", float("nan"))):
            add("cpu_system_saturation", c["cpu_system_saturation"], "fraction")
        # the GPU-busy meter (CUDA events, feedlab.gpu_busy): over the steady batches when the rate is
        # steady, else over the whole loop; no row off CUDA (a table holds no NaN: absent = not measured)
        b = busy.end_window(skip_steps=warm if kind == "steady" else 0)
        n = nv.summary()
        gb = b["gpu_busy_steady"] if kind == "steady" else b["gpu_busy"]
        if not np.isnan(gb):
            res.add(experiment, variant, "gpu_busy", gb, "fraction", r, **row, nvml_note=n["nvml_note"])
        if not np.isnan(b["gpu_step_s"]):
            add("gpu_step_s", b["gpu_step_s"], "s/batch")
        if not np.isnan(n["nvml_util"]):
            add("nvml_util", n["nvml_util"], "%")
    if log:
        label = "steady" if all(k == "steady" for k in kinds) else "START-UP INCLUSIVE"
        log(f"{variant} model={s.model}: {np.median(rates):.1f} samples/s whole epoch (median of {repeats}); "
            f"rates {label}")
    del loader, model, optimizer


def rate_interval(rate: float, half_width: float) -> dict:
    """The 95% interval of a rate whose mean batch time is known to ``half_width`` (relative):
    ``{"rate_low", "rate_high"}`` in samples/s (``rate_high`` inf where the interval reaches 0 s)."""
    hw = float(half_width)
    if not math.isfinite(hw):
        return {"rate_low": 0.0, "rate_high": math.inf}
    return {"rate_low": rate / (1 + hw), "rate_high": rate / (1 - hw) if hw < 1 else math.inf}


GPU_CANDIDATES = ("srcnn", "srcnn_wide")  # the write-up's SRCNN first, then a wider one


def choose_gpu_workload(candidates: Sequence[str], step_s: Callable[[str], float], loader_batch_s: float,
                        margin: float = 1.0) -> dict:
    """The first candidate whose training step (``step_s(name)``: measured seconds per step at
    the batch size asked) takes at least ``margin`` × the loader's seconds per batch: a loop
    over it waits on the GPU, not on the data. None GPU-bound: the slowest step, ``gpu_bound``
    False. Returns ``{"model", "gpu_bound", "step_s": {name: s}, "loader_batch_s", "reading"}``;
    candidates after the chosen one are not measured."""
    if not candidates:
        raise ValueError("choose_gpu_workload: no candidate models")
    steps: dict[str, float] = {}
    chosen = None
    for name in candidates:
        steps[name] = float(step_s(name))
        if steps[name] >= margin * loader_batch_s:
            chosen = name
            break
    bound = chosen is not None
    if chosen is None:
        chosen = max(steps, key=steps.get)
    measured = ", ".join(f"{n} {1e3 * v:.2f} ms" for n, v in steps.items())
    reading = (f"GPU workload: {chosen} (step {1e3 * steps[chosen]:.2f} ms vs the loader's "
               f"{1e3 * loader_batch_s:.2f} ms per batch: " + ("GPU-bound" if bound else "NOT GPU-bound, the "
               "slowest candidate") + f"; measured: {measured})")
    return {"model": chosen, "gpu_bound": bound, "step_s": steps, "loader_batch_s": float(loader_batch_s),
            "reading": reading}


def measure_step_s(name: str, batch, device, steps: int = 20) -> float:
    """Seconds per training step of model ``name`` on one real ``batch`` (copy + forward +
    backward + Adam, :func:`feedlab.timing.run_epoch` on the batch repeated; CUDA events on a GPU),
    the first (warm-up) step left out."""
    torch.manual_seed(0)
    model, _loss, optimizer = make_training(name, device)
    run_epoch([batch] * 3, model, device, optimizer=optimizer)
    et = run_epoch([batch] * (steps + 1), model, device, optimizer=optimizer)
    m = et.phase_means()
    return m["h2d"] + m["forward"] + m["backward"]


def gpu_workload(data_root, device, batch_size: int = 128, num_workers: int = 0, fmt: str = "png",
                 candidates: Sequence[str] = GPU_CANDIDATES, min_timed_batches: int = 20) -> dict:
    """:func:`choose_gpu_workload` measured here: the loader alone (``fmt``, ``batch_size``,
    ``num_workers``, a steady rate) against each candidate's step on one of its batches."""
    spec = PipelineSpec(format=fmt, batch_size=batch_size, num_workers=num_workers, model="none")
    res = run_grid(data_root, [spec], repeats=1, device=device, min_timed_batches=min_timed_batches,
                   experiment="gpu_workload")
    df = res.frame()
    rate = float(df[df["metric"] == "steady_samples_per_s"]["value"].iloc[0])
    ds = open_dataset(data_root, spec)
    batch = next(iter(make_loader(ds, spec.replace(num_workers=0))))
    out = choose_gpu_workload(candidates, lambda n: measure_step_s(n, batch, device), batch_size / rate)
    out["loader_rate_kind"] = str(df["rate_kind"].iloc[0])
    return out


SETTING_COLUMNS = tuple(f.name for f in fields(PipelineSpec))


def metric_summary(df, metric: str, by: Sequence[str]):
    """:func:`feedlab.results.summarize` of one metric (median, q25, q75, ... over repeats).
    A rate (:data:`RATE_METRICS`) is summarised over :func:`steady_rows` only. No such rows (a grid whose
    every setting was left out): an empty table with the summary's columns, whose readings say so."""
    import pandas as pd

    part = df[df["metric"] == metric] if "metric" in df else df.iloc[0:0]
    if metric in RATE_METRICS and not part.empty:
        part = steady_rows(part)
    if part.empty:
        return pd.DataFrame(columns=[*by, "median", "q25", "q75", "min", "max", "n"])
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
    return {PHASE_LABELS[p]: PHASE_COLORS[p] for p in PHASES}


__all__ = ["PipelineSpec", "grid", "run_grid", "epoch_batches", "cycling_loader", "steady_rows", "rate_kind_note", "label_rate_kinds",
           "choose_gpu_workload", "gpu_workload", "measure_step_s", "GPU_CANDIDATES", "RATE_METRICS", "applicable", "split_applicable", "steady_rate", "prefetch_depth",
           "metric_summary", "phase_table", "plot_phase_bars", "PHASE_LABELS", "SETTING_COLUMNS",
           # re-exported from feedlab.pipeline for the notebooks that import them from here
           "default_device", "resolve_model_name", "COLLATES", "MODEL_VARIANTS", "build_model"]
