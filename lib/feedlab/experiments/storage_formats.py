"""Storage format × loader: how long does a batch take to arrive?

The same SR samples, in every storage format the registry holds that the set has packed
(PNG pairs, HDF5, Zarr, one .npy per sample, one memory-mapped .npy, ``torch.save`` files,
LMDB with lz4 and raw, and any format registered later), are read by every loader kind of
:mod:`feedlab.pipeline.kinds` the format can feed: a setting is a ``PipelineSpec`` of
``(format, loader, num_workers)`` (``_storage_readers.settings``), built by
``pipeline.make_loader``. The DataLoader runs with 0, 1 and N workers (persistent, started in
the warm-up); ``plain`` is one process without DataLoader; ``batched`` the format's
``read_batch`` straight into reused batch slots; ``chunk`` whole chunks (Zarr, npy_mmap);
``ring`` / ``threads`` fill reused slots from workers / threads. Zarr read by a kind that is
not batch- or chunk-aligned is read one ``arr[i]`` per sample ("random ids").

Per (format, loader) and repeat (one epoch each, after warm-up epochs): the mean
time blocked in ``next(loader)`` per batch and samples per second of that
waiting time. Modes: ``read`` (nothing else runs), ``train`` (a training step
on every batch, so workers can prefetch while it runs), ``cold`` (the files are
evicted from the page cache before every epoch, see :mod:`feedlab.cache`).
References: the memcpy-into-batch-slot ceiling on the same samples in RAM, and
the write-ups' baseline (PNG + PIL + ToTensor + default_collate).

Every row is read speed alone: the stores are opened with ``verify=False`` (no
per-sample crc32c check, which feedlab's readers do by default), so formats are
compared with each other and with the ceiling on what they read, not on a check
the ceiling does not do. ``verify=True`` measures the readers as a training run
that keeps the check would use them.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from feedlab import cache, formats
from feedlab.budget import Budget
from feedlab.collate import copy_ceiling, totensor_collate
from feedlab.collate import memcpy_ceiling as memcpy_per_item
from feedlab.experiments import handover as H
from feedlab.experiments._storage_readers import (  # noqa: F401  (re-exported: the notebook and tests use them here)
    COLLATE,
    KIND_WORDS,
    MODE_WORDS,
    PER_SAMPLE_KINDS,
    Cycling,
    Head,
    PerSample,
    _close,
    _shutdown,
    as_spec,
    kinds_for,
    loader_words,
    make_loader,
    open_format,
    plan,
    priority,
    read_epoch,
    read_steady,
    setting_words,
    settings,
    steady_stop,
    store_files,
    tier,
    variant,
    window_kind,
)
from feedlab.experiments._storage_readings import (  # noqa: F401  (re-exported)
    CEILING_WORDS,
    ceiling_method,
    figure_title,
    numbers,
    panel_title,
    readings,
    ring_lines,
    row_words,
    table,
)
from feedlab.experiments.row_invariants import order_of_loader, pixel_error_of
from feedlab.like_for_like import NOT_CHECKED
from feedlab.models import make_model
from feedlab.pipeline import MIN_TIMED_BATCHES, PipelineSpec, make_training, warmup_batches
from feedlab.pipeline.kinds import LOADER_KINDS
from feedlab.pipeline.loaders import index_batches
from feedlab.plots import PALETTE, axis_label, legend_outside, readable_log_axis
from feedlab.results import Results, summarize
from feedlab.timing import run_epoch, time_callable

EXPERIMENT = "storage_formats"
WARMUP_EXTRA = 4   # batches a warm-up pass reads past the window's own warm-up


def make_step_model(name: str, device, **kw):
    """``(model, optimizer)`` stepped per batch (NCHW batches, as every loader kind yields them):
    ``"auto"`` is the pipeline's choice for ``device`` (``pipeline.resolve_model_name``: SRCNN as
    published with CUDA, the small SRCNN on a CPU); another name is built with ``kw``."""
    model = name if name == "auto" or not kw else make_model(name, **kw)
    model, _loss, opt = make_training(model, device)
    return model, opt


def measure(root, setting, batch_size: int | None = None, repeats: int = 3, warmup: int = 1,
            samples: int | None = None, mode: str = "read", model=None, optimizer=None,
            device="cpu", res: Results | None = None, collate_fn=None,
            variant_name: str | None = None, verify: bool = False, min_timed: int = MIN_TIMED_BATCHES,
            precision: float | None = None, cap_s: float = 3.0) -> Results:
    """Time one setting (a ``PipelineSpec`` of format, loader, num_workers; a format name: the
    DataLoader without workers) in ``mode`` (read | train | cold); rows go to ``res``.

    read and train: the store read into the page cache (``cache.warm``), ``warmup`` untimed passes of the
    window's warm-up batches and :data:`WARMUP_EXTRA` more (whole epochs had cost 05 a minute of its four: an
    epoch with a training step, or of zarr by one worker, for nothing the window keeps), then
    per repeat one steady window (the setting's warm-up batches left out, then ``min_timed`` timed batches
    or more, epochs chained where the set is short; with ``precision`` timed until the 95% interval of its
    mean batch time is within it, or ``cap_s`` seconds). Every row carries ``rate_kind`` (steady / imprecise / startup_inclusive), ``timed_batches``,
    ``warmup_batches``, ``window_s`` and ``rate_half_width``. cold: one pass over the set after its
    eviction (a second pass would read what the first brought back), labelled start-up inclusive."""
    res = res if res is not None else Results()
    spec = as_spec(setting, batch_size)
    params = dict(format=spec.format, loader=spec.loader, num_workers=spec.num_workers,
                  batch_size=spec.batch_size, mode=mode, samples=samples or 0, order=order_of_loader(spec.loader),
                  pixel_error=pixel_error_of(root, spec.format, spec.decode_backend),   # issue 45's invariants
                  cache="cold" if mode == "cold" else "warm")
    name = variant_name or variant(spec)
    warm = warmup_batches(spec)

    def open_all():
        d = open_format(root, spec, samples, verify)
        return d, make_loader(d, spec, collate_fn=collate_fn)

    files = store_files(root, spec.format)
    if mode != "cold":
        cache.warm(files, report=False)   # warm means warm: whatever ran before (a cold-cache setting) evicted
        # nothing here; its resident fraction is not read here (mincore over PNG's 8,192 files: ~4x the read)
    ds, ld = open_all()
    try:
        for _ in range(max(0, warmup)):   # a warm-up pass of the window's own warm-up and a few batches more
            read_epoch(ld, max_batches=warm + WARMUP_EXTRA) if mode != "train" else \
                run_epoch(ld, model, device, optimizer, max_batches=warm + WARMUP_EXTRA)
        for r in range(repeats):
            if mode == "cold":
                # a page mapped by a live reader (npy_mmap, lmdb) cannot be evicted: close the
                # dataset and its workers, evict, check with mincore, then open afresh, so
                # that every cold repeat reads after its own eviction
                _shutdown(ld)
                _close(ds)
                rep = cache.evict(files)
                res.add(EXPERIMENT, name, "resident_fraction_after_evict",
                        rep.resident_fraction_after if rep.resident_fraction_after is not None else -1.0,
                        "fraction", repeat=r, **params)
                if not rep.supported:
                    raise RuntimeError(rep.summary())
                ds, ld = open_all()
                wait, n, nb = read_epoch(ld)
                kind = dict(rate_kind="startup_inclusive", timed_batches=nb, warmup_batches=0, window_s=wait,
                            epoch_batches=0)   # one pass: one epoch
            elif mode == "train":
                stop = steady_stop(warm, min_timed, precision, cap_s)
                et = run_epoch(Cycling(ld), model, device, optimizer, max_batches=1_000_000, stop=stop)
                timed = max(0, et.batches - warm)
                ph = et.phases_s[warm:] if timed else et.phases_s
                wait, n, nb = float(ph[:, 0].sum()), int(et.batch_sizes[warm:].sum()) if timed else et.samples, len(ph)
                kind = dict(rate_kind=window_kind(stop, timed), timed_batches=timed, warmup_batches=warm,
                            window_s=float(ph.sum()), rate_half_width=stop.achieved, epoch_batches=_epoch(ld))
                res.add(EXPERIMENT, name, "step_ms", 1e3 * float(ph[:, 1:].sum()) / max(1, nb),
                        "ms/batch", repeat=r, **params, **kind)
                res.add(EXPERIMENT, name, "wall_samples_per_s", n / float(ph.sum()), "samples/s",
                        repeat=r, **params, **kind)
            else:
                w = read_steady(ld, steady_stop(warm, min_timed, precision, cap_s))
                wait, n, nb = w.pop("wait_s"), w.pop("samples"), w.pop("batches")
                kind = dict(w, timed_batches=nb, epoch_batches=_epoch(ld))   # epochs chained by Cycling
            res.add(EXPERIMENT, name, "batch_load_ms", 1e3 * wait / max(1, nb), "ms/batch", repeat=r, **params,
                    **kind)
            res.add(EXPERIMENT, name, "samples_per_s", n / wait if wait > 0 else float("nan"),
                    "samples/s", repeat=r, **params, **kind)
    finally:
        _shutdown(ld)
        _close(ds)
        del ld
        gc.collect()
    return res


def _epoch(loader) -> int | str:
    """Batches per loader epoch (the timed window chains epochs), or "not checked" for a loader with no length."""
    try:
        return int(len(loader))
    except TypeError:
        return NOT_CHECKED


def memcpy_ceiling(root, batch_size: int, repeats: int, warmup: int = 1, samples: int | None = None,
                   res: Results | None = None) -> Results:
    """The ceiling for any loader on these samples, one core, warm cache: the fastest of several
    copies of the same bytes into a preallocated batch buffer (``feedlab.collate.copy_ceiling``:
    ``numpy_copy`` of contiguous batches, ``gather`` of shuffled ones, ``readinto`` from the
    npy_mmap files, ``mmap_slice`` copies out of their maps), every method timed in the same run,
    each method's rows as ``ceiling_<method>``; ``memcpy_ceiling`` holds the runs of the method
    with the best run. ``memcpy_per_item`` copies one Python-level item per sample and side
    (``feedlab.collate.memcpy_ceiling``), the floor of any per-sample collate."""
    res = res if res is not None else Results()
    full = formats.open_dataset(root, "npy_mmap")
    ds = Head(full, samples)
    n = len(ds)
    lr_all, hr_all = (np.ascontiguousarray(a) for a in ds.read_batch(range(n)))
    sides = []
    for name, arr in (("lr", lr_all), ("hr", hr_all)):
        path = Path(full.dir) / f"{name}.npy"
        sides.append((arr, str(path), int(np.load(path, mmap_mode="r").offset)))
    lr_items = [np.ascontiguousarray(lr_all[i]) for i in range(n)]
    hr_items = [np.ascontiguousarray(hr_all[i]) for i in range(n)]
    lr_out = np.zeros((batch_size, *lr_all.shape[1:]), np.uint8)
    hr_out = np.zeros((batch_size, *hr_all.shape[1:]), np.uint8)
    batches = [np.asarray(b) for b in index_batches(n, batch_size, seed=0)]

    def per_item():
        for idx in batches:
            memcpy_per_item([lr_items[i] for i in idx], lr_out)
            memcpy_per_item([hr_items[i] for i in idx], hr_out)

    ceil = copy_ceiling(sides, batch_size, repeats=repeats, warmup=max(1, warmup))
    runs = {f"ceiling_{m}": ts for m, ts in ceil["runs"].items()}
    runs["memcpy_ceiling"] = ceil["runs"][ceil["method"]]
    runs["memcpy_per_item"] = time_callable(per_item, warmup=max(1, warmup), repeats=repeats)
    params = dict(format="ram", num_workers=0, batch_size=batch_size, mode="read", samples=samples or 0,
                  timed_batches=len(batches), pixel_error=pixel_error_of(root, "npy_mmap"), cache="warm",
                  epoch_batches=0)   # the npy bytes in RAM, one pass over the set per run (issue 45)
    for name, secs in runs.items():
        method = ceil["method"] if name == "memcpy_ceiling" else name.removeprefix("ceiling_")
        order = "global" if method in ("gather", "memcpy_per_item") else "sequential"   # contiguous copies
        for r, sec in enumerate(secs):
            inv = dict(params, order=order, window_s=sec)
            res.add(EXPERIMENT, name, "samples_per_s", n / sec, "samples/s", repeat=r, loader=name, **inv)
            res.add(EXPERIMENT, name, "batch_load_ms", 1e3 * sec / len(batches), "ms/batch",
                    repeat=r, loader=name, **inv)
    _close(ds)
    return res


#: the pipelines 05's hand-over measures (``experiments.handover.PIPELINES``): the baseline, LMDB + fast
#: collate through the DataLoader and through the shared-memory ring
HANDOVER_PIPELINES = ("png_totensor_dataloader", "lmdb_fast_dataloader", "lmdb_ring")


def handover(root, batch_size: int = 128, num_workers: int = 2, batches: int = 50, repeats: int = 1,
             min_window_s: float = 1.0, budget=None) -> list[dict]:
    """The worker → main hand-over measured on this set (``experiments.handover.measure``): the
    DataLoader against ``loader="ring"`` on LMDB + fast collate (bytes per second of wall time and
    main-side µs per sample, every leg warm), beside the PNG baseline (a whole-pipeline comparison)."""
    return H.measure(root, HANDOVER_PIPELINES, batch_size=batch_size, num_workers=num_workers, batches=batches,
                     repeats=repeats, min_window_s=min_window_s, budget=budget)


def baseline(root, repeats: int, warmup: int = 1, samples: int | None = None, batch_size: int = 128,
             num_workers: int = 2, res: Results | None = None, verify: bool = False, **window) -> Results:
    """The write-ups' starting point: PNG decoded by PIL, ToTensor per image, default_collate
    (no checksum check by default: the write-ups had none)."""
    spec = PipelineSpec(format="png", collate="totensor", batch_size=batch_size, num_workers=num_workers,
                        persistent_workers=num_workers > 0, device="cpu")
    return measure(root, spec, None, repeats, warmup, samples, "read", res=res, collate_fn=totensor_collate,
                   variant_name="baseline_png_pil_totensor", verify=verify, **window)


def disk_table(root, fmts: Iterable[str]):
    """Bytes on disk and write seconds per format, from the set's manifest."""
    import pandas as pd

    man = formats.read_manifest(root)
    rows = []
    for fmt in dict.fromkeys(fmts):
        store = fmt
        rec = man.get("formats", {}).get(store, {})
        if store == "png":
            size, write_s, note = formats.bytes_on_disk(root, "png"), man.get("build_seconds"), \
                "whole build: crop + resize + PNG encode"
        else:
            size, write_s, note = rec.get("bytes", formats.bytes_on_disk(root, store)), rec.get("write_seconds"), \
                "pack: read the PNGs + write"
        rows.append({"format": fmt, "bytes": int(size),
                     "write_s": float("nan") if write_s is None else float(write_s), "write_note": note})
    return pd.DataFrame(rows)


def bytes_per_sample(root, bytes_on_disk: dict) -> dict:
    """The set's raw bytes per sample (LR + HR, H·W·C each, from its manifest) and the
    memory-mapped array store's measured bytes per sample: with their ratio, the
    arithmetic of a data set's size in RAM can be checked against a real store."""
    import numpy as np

    man = formats.read_manifest(root)
    n = int(man.get("count") or 0)
    lr, hr = man.get("lr_shape"), man.get("hr_shape")
    if not n or not lr or not hr or "npy_mmap" not in bytes_on_disk:
        return {}
    return {"dataset_count": n, "raw_bytes_per_sample": int(np.prod(lr) + np.prod(hr)),
            "bytes_per_sample_npy_mmap": bytes_on_disk["npy_mmap"] / n}


def run(root, fmts: Sequence[str] | None = None, worker_counts: Sequence[int] = (2,), batch_size: int = 128,
        repeats: int = 3, warmup: int = 1, samples: int | None = None, with_model: bool = False,
        model_name: str = "auto", model_kw: dict | None = None, cold: bool = False, device=None,
        loaders: Sequence[str] | None = None, log: Callable[[str], None] | None = print,
        verify: bool = False, min_timed: int = MIN_TIMED_BATCHES, precision: float | None = None,
        cap_s: float = 3.0, budget=None, train_cap_s: float | None = None) -> Results:
    """The references (the copy ceilings, the write-ups' baseline), then the grid: read-alone for every
    setting (:func:`settings`: each format ``fmts``, None: every registered SR format the set holds, by
    each loader kind it can feed; ``loaders`` limits the kinds), optionally with a training step (the
    single-process kinds and the DataLoader with the most workers) and cold-cache epochs (one
    single-process kind per format: chunks where it has them), in :func:`plan`'s order, most telling
    first. ``verify``: the per-sample checksum check on every timed read (off by default: read speed
    alone). ``min_timed``, ``precision``, ``cap_s``: each window's (:func:`measure`); ``train_cap_s`` the cap
    of a window with a training step (None: ``cap_s``; a step makes each batch slower). ``budget`` (a
    :class:`feedlab.budget.Budget`): the references always run; a setting whose expected cost (the
    dearest of its mode and format so far, else of its format read alone) would run past it is left out,
    named in ``budget.note()``."""
    budget = budget if budget is not None else Budget(None)
    fmts = list(fmts) if fmts is not None else formats.present(root)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    res = Results()
    window = dict(min_timed=min_timed, precision=precision, cap_s=cap_s)
    most = max(worker_counts) if len(worker_counts) else 0
    cost: dict[tuple[str, str], float] = {}

    with budget.setting("references: the copy ceilings and the baseline", group="references"):
        memcpy_ceiling(root, batch_size, max(3, repeats), warmup, samples, res=res)
        baseline(root, repeats, warmup, samples, batch_size=128, num_workers=2, res=res, verify=verify, **window)
    if log:
        _log_last(res, log)
    for mode, spec in plan(settings(fmts, worker_counts, batch_size, loaders), fmts, batch_size,
                           with_model=with_model, cold=cold, most=most):
        what = f"{MODE_WORDS[mode]}: {setting_words(spec)}"
        expect = cost.get((mode, spec.format), cost.get(("read", spec.format), 0.0))
        # a setting a write-up claim compares (tier 1) runs past the budget, never past the run's limit: a claim
        # with one side left out could not be judged (2026-11-26: a 65 s budget left out HDF5 with a training step)
        if not budget.allows(what, cost_s=expect, group=mode, essential=tier(mode, spec, most) == 1):
            continue
        kw = {}
        if mode == "train":
            torch.manual_seed(0)
            model, opt = make_step_model(model_name, device, **({} if model_name == "auto" else model_kw or {}))
            kw = dict(model=model, optimizer=opt, device=device)
        with budget.setting(what, group=mode):
            t0 = time.monotonic()
            win = dict(window, cap_s=train_cap_s) if mode == "train" and train_cap_s else window
            measure(root, spec, None, repeats if mode != "cold" else 1, warmup if mode != "cold" else 0, samples,
                    mode, res=res, verify=verify, **win, **kw)
            took = time.monotonic() - t0
        cost[(mode, spec.format)] = max(cost.get((mode, spec.format), 0.0), took)
        if log:
            _log_last(res, log)
    return res


def _log_last(res: Results, log) -> None:
    r = [row for row in res.rows if row["metric"] == "batch_load_ms"]
    if not r:
        return
    last = r[-1]
    vals = [row["value"] for row in r if row["variant"] == last["variant"] and row["mode"] == last["mode"]]
    words = {"baseline_png_pil_totensor": "baseline: png, PIL, ToTensor, DataLoader, 2 workers"}.get(
        last["variant"]) or f"{last['format']}, {loader_words(last['loader'], int(last['num_workers']))}"
    mode = MODE_WORDS[last["mode"]]
    log(f"{mode}: {words}: {np.median(vals):.3f} ms per batch")


def summary(res: Results):
    """Median, q25, q75 per (mode, format, loader, metric)."""
    df = res.frame()
    return summarize(df, ["mode", "variant", "format", "loader", "num_workers", "metric"])


def _loader_rank(loader: str, num_workers: int = 0) -> int:
    """A fixed order (and so a fixed colour) per loader across every panel: the kinds in
    registry order, the DataLoader by worker count, the worker kinds last."""
    kinds = [k for k in LOADER_KINDS if k != "dataloader"]
    single = [k for k in kinds if LOADER_KINDS[k].workers == "none"]
    if loader in single:
        return single.index(loader)
    if loader == "dataloader":
        return len(single) + min(int(num_workers), 4)
    return len(single) + 5 + (kinds.index(loader) if loader in kinds else len(kinds))


def loader_label(loader: str, num_workers: int = 0) -> str:
    """What a loader is, for a legend or a table (:func:`loader_words`)."""
    return loader_words(loader, num_workers)


def plot_matrix(summ, ax, mode: str = "read", metric: str = "batch_load_ms", ceiling_ms: float | None = None,
                title: str = ""):
    """Grouped bars: one group per format, one bar per (loader, workers), log scale, IQR error bars."""
    s = summ[(summ["mode"] == mode) & (summ["metric"] == metric) & summ["variant"].str.contains("/")]
    fmts = list(dict.fromkeys(s["format"]))
    keys = sorted(dict.fromkeys(zip(s["loader"], s["num_workers"].astype(int))), key=lambda k: _loader_rank(*k))
    width = 0.85 / max(1, len(keys))
    for j, (lo, nw) in enumerate(keys):
        part = s[(s["loader"] == lo) & (s["num_workers"].astype(int) == nw)].groupby("format").first()
        xs, med, lo_e, hi_e = [], [], [], []
        for i, f in enumerate(fmts):
            if f in part.index:
                row = part.loc[f]
                xs.append(i + (j - (len(keys) - 1) / 2) * width)
                med.append(row["median"])
                lo_e.append(row["median"] - row["q25"])
                hi_e.append(row["q75"] - row["median"])
        ax.bar(xs, med, width, yerr=[lo_e, hi_e], capsize=1.5, label=loader_label(lo, nw),
               color=PALETTE[_loader_rank(lo, nw) % len(PALETTE)], error_kw={"elinewidth": 0.8})
    if ceiling_ms is not None:
        ax.axhline(ceiling_ms, color="#333333", linestyle="--", linewidth=1)
        ax.annotate(f"the fastest copy of these bytes: {ceiling_ms:.3g} ms", xy=(1, ceiling_ms),
                    xycoords=("axes fraction", "data"), xytext=(-3, 4), textcoords="offset points",
                    ha="right", va="bottom", fontsize=7.5, color="#333333",
                    bbox={"boxstyle": "square,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85})
    ax.set_yscale("log")
    readable_log_axis(ax, "y")
    ax.set_xticks(np.arange(len(fmts)))
    ax.set_xticklabels(fmts, rotation=20)
    ax.set_ylabel(axis_label("batch_load_ms", "median, IQR bars"))
    ax.set_title(title)
    legend_outside(ax, "right", fontsize=7.5, title="loader")
    return ax
