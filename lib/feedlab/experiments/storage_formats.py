"""Storage format × loader: how long does a batch take to arrive?

The same SR samples, stored as PNG pairs, HDF5, Zarr (random per-sample reads,
and chunk-aligned batches), one .npy per sample, one memory-mapped .npy,
``torch.save`` files and LMDB (lz4 and raw), are read by:

* ``dl_w0``, ``dl_w1``, ``dl_w<N>`` — ``torch.utils.data.DataLoader`` with 0, 1, N
  workers (``persistent_workers`` so worker start-up is paid in the warm-up);
* ``plain`` — :func:`feedlab.loaders.plain_loop`, one process, no DataLoader;
* ``batched`` — :class:`feedlab.loaders.BatchReadLoader`: the format's
  ``read_batch`` straight into preallocated batch arrays (lmdb, hdf5, npy_mmap);
* ``chunk`` — :class:`feedlab.loaders.ChunkLoader` (Zarr / npy_mmap chunks).

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
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from feedlab import cache, formats
from feedlab.experiments._storage_readers import (  # noqa: F401  (re-exported: the notebook and tests use them here)
    BATCHED,
    CHUNKED,
    FORMAT_NAMES,
    STORE,
    STORE_PATHS,
    Head,
    PerSample,
    SortedBatches,
    _close,
    _shutdown,
    loaders_for,
    make_loader,
    num_workers_of,
    open_format,
    read_epoch,
    store_files,
    store_of,
)
from feedlab.loaders import index_batches
from feedlab.results import Results
from feedlab.timing import run_epoch, time_callable

EXPERIMENT = "storage_formats"


class NHWCSR(torch.nn.Module):
    """Feeds NHWC float batches (as run_epoch delivers them) to an NCHW SR model and
    returns NHWC, the shape of the HR target."""

    def __init__(self, model, hr_hw: tuple[int, int]):
        super().__init__()
        self.model = model
        self.hr_hw = tuple(hr_hw)

    def forward(self, x):
        x = x.permute(0, 3, 1, 2)
        y = self.model(x, size=self.hr_hw)
        return y.permute(0, 2, 3, 1)


def make_step_model(name: str, hr_shape, device, **kw):
    """The model stepped per batch. ``"auto"``: SRCNN as published with CUDA; on a CPU,
    SRCNN shaped by ``kw`` (the profile's lighter filters), as in every notebook."""
    from feedlab.models import make_model

    if name == "auto":
        name = "srcnn"
        if str(device).startswith("cuda"):
            kw = {}
    model = make_model(name, **kw)
    if model is None:
        return None, None
    wrapped = NHWCSR(model, hr_shape[:2]).to(device)
    opt = torch.optim.Adam(wrapped.parameters(), lr=1e-3)
    return wrapped, opt


def measure(root, fmt: str, loader: str, batch_size: int, repeats: int, warmup: int = 1,
            samples: int | None = None, mode: str = "read", model=None, optimizer=None,
            device="cpu", res: Results | None = None, collate_fn=None,
            variant: str | None = None, verify: bool = False) -> Results:
    """Time one (format, loader) in ``mode`` (read | train | cold); rows go to ``res``."""
    res = res if res is not None else Results()
    params = dict(format=fmt, loader=loader, num_workers=num_workers_of(loader), batch_size=batch_size,
                  mode=mode, samples=samples or 0)
    variant = variant or f"{fmt}/{loader}"
    def open_all():
        d = open_format(root, fmt, samples, verify) if collate_fn is None else Head(
            formats.open_dataset(root, store_of(fmt), verify=verify), samples)
        return d, make_loader(d, fmt, loader, batch_size, collate_fn=collate_fn)

    ds, ld = open_all()
    files = store_files(root, fmt) if mode == "cold" else []
    try:
        for _ in range(max(0, warmup)):
            read_epoch(ld) if mode != "train" else run_epoch(ld, model, device, optimizer)
        for r in range(repeats):
            if mode == "cold":
                # a page mapped by a live reader (npy_mmap, lmdb) cannot be evicted: close the
                # dataset and its workers, evict, check with mincore, then open afresh, so
                # that every cold repeat reads after its own eviction
                _shutdown(ld)
                _close(ds)
                rep = cache.evict(files)
                res.add(EXPERIMENT, variant, "resident_fraction_after_evict",
                        rep.resident_fraction_after if rep.resident_fraction_after is not None else -1.0,
                        "fraction", repeat=r, **params)
                if not rep.supported:
                    raise RuntimeError(rep.summary())
                ds, ld = open_all()
            if mode == "train":
                et = run_epoch(ld, model, device, optimizer)
                wait, n, nb = et.data_wait_s, et.samples, et.batches
                res.add(EXPERIMENT, variant, "step_ms", 1e3 * float(et.phases_s[:, 1:].sum()) / max(1, nb),
                        "ms/batch", repeat=r, **params)
                res.add(EXPERIMENT, variant, "wall_samples_per_s", et.samples_per_s, "samples/s",
                        repeat=r, **params)
            else:
                wait, n, nb = read_epoch(ld)
            res.add(EXPERIMENT, variant, "batch_load_ms", 1e3 * wait / max(1, nb), "ms/batch", repeat=r, **params)
            res.add(EXPERIMENT, variant, "samples_per_s", n / wait if wait > 0 else float("nan"),
                    "samples/s", repeat=r, **params)
    finally:
        _shutdown(ld)
        _close(ds)
        del ld
        gc.collect()
    return res


def memcpy_ceiling(root, batch_size: int, repeats: int, warmup: int = 1, samples: int | None = None,
                   res: Results | None = None) -> Results:
    """The ceiling for any loader on these samples, one core, warm cache: the fastest of several
    copies of the same bytes into a preallocated batch buffer (``feedlab.collate.copy_ceiling``:
    ``numpy_copy`` of contiguous batches, ``gather`` of shuffled ones, ``readinto`` from the
    npy_mmap files, ``mmap_slice`` copies out of their maps), every method timed in the same run,
    each method's rows as ``ceiling_<method>``; ``memcpy_ceiling`` holds the runs of the method
    with the best run. ``memcpy_per_item`` copies one Python-level item per sample and side
    (``feedlab.collate.memcpy_ceiling``), the floor of any per-sample collate."""
    from feedlab.collate import copy_ceiling
    from feedlab.collate import memcpy_ceiling as _memcpy

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
            _memcpy([lr_items[i] for i in idx], lr_out)
            _memcpy([hr_items[i] for i in idx], hr_out)

    ceil = copy_ceiling(sides, batch_size, repeats=repeats, warmup=max(1, warmup))
    runs = {f"ceiling_{m}": ts for m, ts in ceil["runs"].items()}
    runs["memcpy_ceiling"] = ceil["runs"][ceil["method"]]
    runs["memcpy_per_item"] = time_callable(per_item, warmup=max(1, warmup), repeats=repeats)
    params = dict(format="ram", num_workers=0, batch_size=batch_size, mode="read", samples=samples or 0)
    for variant, secs in runs.items():
        for r, sec in enumerate(secs):
            res.add(EXPERIMENT, variant, "samples_per_s", n / sec, "samples/s", repeat=r, loader=variant, **params)
            res.add(EXPERIMENT, variant, "batch_load_ms", 1e3 * sec / len(batches), "ms/batch",
                    repeat=r, loader=variant, **params)
    _close(ds)
    return res


def ceiling_method(summ) -> str | None:
    """Which copy method set the ceiling in a summary (the ``ceiling_<method>`` with the best median)."""
    rows = summ[(summ.variant.str.startswith("ceiling_")) & (summ.metric == "samples_per_s")]
    return None if rows.empty else str(rows.loc[rows["median"].idxmax()].variant).removeprefix("ceiling_")


def baseline(root, repeats: int, warmup: int = 1, samples: int | None = None, batch_size: int = 128,
             num_workers: int = 2, res: Results | None = None, verify: bool = False) -> Results:
    """The write-ups' starting point: PNG decoded by PIL, ToTensor per image, default_collate
    (no checksum check by default: the write-ups had none)."""
    from feedlab.collate import totensor_collate

    return measure(root, "png", f"dl_w{num_workers}", batch_size, repeats, warmup, samples, "read",
                   res=res, collate_fn=totensor_collate, variant="baseline_png_pil_totensor", verify=verify)


def disk_table(root, fmts: Iterable[str]):
    """Bytes on disk and write seconds per format, from the set's manifest."""
    import pandas as pd

    man = formats.read_manifest(root)
    rows = []
    for fmt in fmts:
        store = store_of(fmt)
        rec = man.get("formats", {}).get(store, {})
        if store == "png":
            size, write_s, note = formats.bytes_on_disk(root, "png"), man.get("build_seconds"), \
                "whole build: crop + resize + PNG encode"
        else:
            size, write_s, note = rec.get("bytes", formats.bytes_on_disk(root, store)), rec.get("write_seconds"), \
                "pack: read the PNGs + write"
        rows.append({"format": fmt, "store": store, "bytes": int(size),
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


def run(root, fmts: Sequence[str] = FORMAT_NAMES, worker_counts: Sequence[int] = (2,), batch_size: int = 128,
        repeats: int = 3, warmup: int = 1, samples: int | None = None, with_model: bool = False,
        model_name: str = "srcnn", model_kw: dict | None = None, cold: bool = False, device=None,
        loaders: Sequence[str] | None = None, log: Callable[[str], None] | None = print,
        verify: bool = False) -> Results:
    """The grid: read-alone for every (format, loader), then the references, then
    (optionally) with a training step and cold-cache epochs. ``loaders`` limits the
    loader kinds (names as in :func:`loaders_for`, ``dl_wN`` for "DataLoader with the
    largest worker count"); None means all. ``verify``: the per-sample checksum check on
    every timed read (off by default: read speed alone)."""
    def keep(lo: str) -> bool:
        if loaders is None:
            return True
        return lo in loaders or ("dl_wN" in loaders and lo == f"dl_w{max(worker_counts)}")

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    res = Results()
    for fmt in fmts:
        for loader in filter(keep, loaders_for(fmt, worker_counts)):
            measure(root, fmt, loader, batch_size, repeats, warmup, samples, "read", res=res, verify=verify)
            if log:
                _log_last(res, log)
    memcpy_ceiling(root, batch_size, repeats, warmup, samples, res=res)
    baseline(root, repeats, warmup, samples, batch_size=128, num_workers=2, res=res, verify=verify)
    if log:
        _log_last(res, log)
    if with_model:
        ds = open_format(root, "npy_mmap", samples)
        hr_shape = ds.hr_shape
        _close(ds)
        for fmt in fmts:
            for loader in [lo for lo in loaders_for(fmt, worker_counts) if keep(lo) and (
                    lo in ("plain", "chunk", "batched") or lo == f"dl_w{max(worker_counts)}")]:
                torch.manual_seed(0)
                model, opt = make_step_model(model_name, hr_shape, device, **(model_kw or {}))
                measure(root, fmt, loader, batch_size, repeats, warmup, samples, "train", model, opt,
                        device, res=res, verify=verify)
                if log:
                    _log_last(res, log)
    if cold:
        for fmt in fmts:
            loader = "chunk" if fmt == "zarr_chunk" else "plain"
            measure(root, fmt, loader, batch_size, repeats, 0, samples, "cold", res=res, verify=verify)
            if log:
                _log_last(res, log)
    return res


def _log_last(res: Results, log) -> None:
    r = [row for row in res.rows if row["metric"] == "batch_load_ms"]
    if not r:
        return
    last = r[-1]
    vals = [row["value"] for row in r if row["variant"] == last["variant"] and row["mode"] == last["mode"]]
    log(f"{last['mode']:5s} {last['variant']:32s} {np.median(vals):9.3f} ms/batch")


def summary(res: Results):
    """Median, q25, q75 per (mode, format, loader, metric)."""
    from feedlab.results import summarize

    df = res.frame()
    return summarize(df, ["mode", "variant", "format", "loader", "num_workers", "metric"])


def _loader_rank(loader: str) -> int:
    """A fixed order (and so a fixed colour) per loader across every panel: the
    single-process loops first, then the DataLoader by worker count."""
    fixed = {"plain": 0, "batched": 1, "chunk": 2}
    if loader in fixed:
        return fixed[loader]
    if loader.startswith("dl_w"):
        return 3 + int(loader[4:])  # dl_w0 -> 3, dl_w1 -> 4, dl_w2 -> 5 ...
    return 9


def loader_label(loader: str) -> str:
    """What a loader name means, for a legend."""
    fixed = {"plain": "one process, a sample at a time", "batched": "one process, a batch per read",
             "chunk": "one process, chunk-aligned reads"}
    if loader in fixed:
        return fixed[loader]
    if loader.startswith("dl_w"):
        n = int(loader[4:])
        return f"DataLoader, {n} worker{'s' if n != 1 else ''}"
    return loader


def plot_matrix(summ, ax, mode: str = "read", metric: str = "batch_load_ms", ceiling_ms: float | None = None,
                title: str = ""):
    """Grouped bars: one group per format, one bar per loader, log scale, IQR error bars."""
    from feedlab.plots import PALETTE, legend_outside, readable_log_axis

    s = summ[(summ["mode"] == mode) & (summ["metric"] == metric) & summ["variant"].str.contains("/")]
    fmts = list(dict.fromkeys(s["format"]))
    loaders = sorted(dict.fromkeys(s["loader"]), key=_loader_rank)
    width = 0.85 / max(1, len(loaders))
    for j, lo in enumerate(loaders):
        part = s[s["loader"] == lo].set_index("format")
        xs, med, lo_e, hi_e = [], [], [], []
        for i, f in enumerate(fmts):
            if f in part.index:
                row = part.loc[f]
                xs.append(i + (j - (len(loaders) - 1) / 2) * width)
                med.append(row["median"])
                lo_e.append(row["median"] - row["q25"])
                hi_e.append(row["q75"] - row["median"])
        ax.bar(xs, med, width, yerr=[lo_e, hi_e], capsize=1.5, label=loader_label(lo),
               color=PALETTE[_loader_rank(lo) % len(PALETTE)],
               error_kw={"elinewidth": 0.8})
    if ceiling_ms is not None:
        ax.axhline(ceiling_ms, color="#333333", linestyle="--", linewidth=1)
        ax.annotate(f"memcpy into batch slots: {ceiling_ms:.3g} ms", xy=(1, ceiling_ms),
                    xycoords=("axes fraction", "data"), xytext=(-3, 4), textcoords="offset points",
                    ha="right", va="bottom", fontsize=7.5, color="#333333",
                    bbox={"boxstyle": "square,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85})
    ax.set_yscale("log")
    readable_log_axis(ax, "y")
    ax.set_xticks(np.arange(len(fmts)))
    ax.set_xticklabels(fmts, rotation=20)
    ax.set_ylabel("ms per batch (median, IQR bars)")
    ax.set_title(title)
    legend_outside(ax, "right", fontsize=7.5, title="loader")
    return ax
