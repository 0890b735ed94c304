"""Pinned against pageable host memory, by input size (notebook 03_pinned_memory_by_input_size).

Four measurements, each usable alone:

* :func:`transfer_bandwidth` — one ``.to(device)`` of a uint8 tensor from KB to
  hundreds of MB, from pageable and from page-locked memory (``non_blocking``
  for the pinned one), CUDA synchronised around each round. The host's own
  pageable ``memcpy`` of the same sizes is measured everywhere, as the
  reference a copy could at best approach.
* :func:`pin_cost` — what page-locking costs: ``tensor.pin_memory()`` per MB,
  the first call (a fresh ``cudaHostAlloc``) and warm calls (PyTorch's caching
  host allocator hands back a block it already locked, so a warm call is a
  copy into it).
* :func:`batch_costs` — per (input size, batch size): ``default_collate`` of
  ``(x, y)`` uint8 pairs, then with CUDA: pinning the batch and the copy of the
  batch to the device from pinned and from pageable memory.
* :func:`loader_steps` — with CUDA: a DataLoader with ``pin_memory`` on/off
  feeding SRCNN training steps, timed by phase (``run_epoch``): step time,
  host-to-device time and the wait for data per batch.

Pinning needs the CUDA driver: on a machine without it ``torch`` refuses to
pin, :func:`pin_support` says why, and only the host side is measured.
"""

from __future__ import annotations

import re
import shutil
import subprocess

# the reading, titles and payload of notebook 03, and the two small helpers they share with this module
# (a companion module keeps this one short)
from feedlab.experiments._pinned_readings import (  # noqa: F401
    bandwidth_title,
    batch_costs_title,
    human_bytes,
    median_of,
    payload,
    pinning_verdict,
    pinning_words,
    readings,
    steps_title,
)
from feedlab.like_for_like import NOT_APPLICABLE, invariants
from feedlab.machines import PCIE_LANE_GBPS, pcie_theoretical_gbps  # noqa: F401  (the link's ceiling, re-exported)
from feedlab.pipeline import default_device  # the one device choice of every notebook (re-exported)
from feedlab.plots import errorbar_series, legend_outside, readable_log_axis
from feedlab.results import Results, summarize
from feedlab.timing import autorange_number, close_iterator, run_epoch, time_callable

EXPERIMENT = "pinned_memory_by_input_size"


def pcie_link(device_index: int = 0) -> dict:
    """PCIe generation/width of the GPU from ``nvidia-smi`` (current and maximum), or ``{}``.

    GPUs lower the link generation when idle, so ``gen_current`` read at rest can
    understate the link; ``theoretical_gbps`` uses the maximum the GPU and the
    host both support when ``nvidia-smi`` reports it, else the current value.
    """
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    fields = ["pcie.link.gen.current", "pcie.link.width.current", "pcie.link.gen.max", "pcie.link.width.max"]
    out = {}
    for f in fields:
        try:
            r = subprocess.run([exe, f"--query-gpu={f}", "--format=csv,noheader,nounits", f"--id={device_index}"],
                               capture_output=True, text=True, timeout=10)
            val = r.stdout.strip().splitlines()[0].strip() if r.returncode == 0 and r.stdout.strip() else ""
            out[f] = int(val) if val.isdigit() else None
        except (OSError, subprocess.SubprocessError, IndexError):
            out[f] = None
    info = {"gen_current": out["pcie.link.gen.current"], "width_current": out["pcie.link.width.current"],
            "gen_max": out["pcie.link.gen.max"], "width_max": out["pcie.link.width.max"]}
    gen = info["gen_max"] or info["gen_current"]
    width = info["width_max"] or info["width_current"]
    if gen and width and gen in PCIE_LANE_GBPS:
        info["theoretical_gbps"] = pcie_theoretical_gbps(gen, width)
        info["basis"] = f"Gen{gen} x{width}"
    return info


def pin_support() -> tuple[bool, str]:
    """Whether this torch can page-lock host memory here, and why not."""
    import torch

    try:
        t = torch.empty(16, dtype=torch.uint8).pin_memory()
        return bool(t.is_pinned()), ""
    except Exception as exc:  # noqa: BLE001 - the message is the report
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return False, f"torch cannot pin memory on this machine: {type(exc).__name__}: {first}"


def _rounds(fn, repeats: int, warmup: int, device=None, min_round_s: float = 0.02) -> list[float]:
    return _rounds_of(fn, repeats, warmup, device, min_round_s)[0]


def _rounds_of(fn, repeats: int, warmup: int, device=None, min_round_s: float = 0.02) -> tuple[list[float], int]:
    """Seconds per call over ``repeats`` rounds, and the calls each round timed (its window: secs × calls)."""
    # synchronised trials: a non_blocking copy returns when queued, not when done
    number = autorange_number(fn, min_round_s, max_number=10_000, device=device)
    return time_callable(fn, warmup=warmup, repeats=repeats, number=number, device=device), number


def _copy_rows(res: Results, name: str, metric: str, values, unit: str, secs, number: int, **p) -> None:
    """One row per round, with the invariants a raw copy has (issue 45): no sampler order, no pixels, no cache;
    its window the round's calls × seconds per call."""
    for i, (v, s) in enumerate(zip(values, secs)):
        res.add(EXPERIMENT, name, metric, v, unit, repeat=i, timed_batches=number, **p,
                **invariants(order=NOT_APPLICABLE, pixel_error=NOT_APPLICABLE, cache=NOT_APPLICABLE,
                             window_s=s * number, epoch_batches=NOT_APPLICABLE))


def transfer_bandwidth(sizes_bytes, device=None, repeats: int = 5, warmup: int = 1) -> Results:
    """GB/s of one copy of ``n`` bytes: ``host_memcpy`` (pageable → pageable, always) and,
    with CUDA, ``pageable`` and ``pinned`` host → device ``.to(device)``."""
    import torch

    device = torch.device(device) if device is not None else default_device()
    cuda = device.type == "cuda"
    res = Results()
    for n in sizes_bytes:
        n = int(n)
        src = torch.empty(n, dtype=torch.uint8)
        src.fill_(1)  # fault the pages in
        dst = torch.empty_like(src)
        dst.fill_(0)
        variants = {"host_memcpy": (lambda: dst.copy_(src), None)}
        if cuda:
            pinned = src.pin_memory()
            variants["pageable"] = (lambda: src.to(device), device)
            variants["pinned"] = (lambda: pinned.to(device, non_blocking=True), device)
        for name, (fn, dev) in variants.items():
            secs, number = _rounds_of(fn, repeats, warmup, dev)
            kind = "host_to_host" if name == "host_memcpy" else "host_to_device"
            p = dict(bytes=n, direction=kind, device=str(device))
            _copy_rows(res, name, "gb_per_s", [n / s / 1e9 for s in secs], "GB/s", secs, number, **p)
            _copy_rows(res, name, "us_per_copy", [s * 1e6 for s in secs], "µs", secs, number, **p)
        del src, dst
        if cuda:
            torch.cuda.empty_cache()
    return res


def empty_host_cache() -> bool:
    """Hand the page-locked blocks held by PyTorch's caching host allocator back to the
    driver, so the next ``pin_memory()`` pays a fresh ``cudaHostAlloc``. Returns whether
    this torch offers the call (private API, present in the torch versions feedlab admits)."""
    import torch

    fn = getattr(torch._C, "_host_emptyCache", None)
    if fn is None:
        return False
    fn()
    return True


def pin_cost(sizes_bytes, repeats: int = 5, warmup: int = 1) -> tuple[Results, str]:
    """ms per MB of ``tensor.pin_memory()``: ``first_call`` (one sample per size: the host
    cache is emptied first, so it is a fresh page-locked allocation plus the copy; the
    ``fresh`` column says whether emptying was possible) and ``warm`` (the caching
    allocator hands back a block it already locked: a copy into it).
    Returns (results, reason): empty results and the reason when pinning is impossible."""
    import time

    import torch

    res = Results()
    ok, why = pin_support()
    if not ok:
        return res, why
    for n in sizes_bytes:
        n = int(n)
        src = torch.empty(n, dtype=torch.uint8)
        src.fill_(1)
        fresh = empty_host_cache()
        t0 = time.perf_counter()
        p = src.pin_memory()
        first = time.perf_counter() - t0
        del p
        warm = _rounds(lambda: src.pin_memory(), repeats, warmup)
        mb = n / 1e6
        res.add(EXPERIMENT, "first_call", "ms_per_mb", first * 1e3 / mb, "ms/MB", bytes=n, fresh=fresh)
        res.add_samples(EXPERIMENT, "warm", "ms_per_mb", [s * 1e3 / mb for s in warm], "ms/MB", bytes=n,
                        fresh=False)
        res.add_samples(EXPERIMENT, "warm", "gb_per_s", [n / s / 1e9 for s in warm], "GB/s", bytes=n,
                        fresh=False)
    return res, ""


class PairSet:
    """In-memory SR-style pairs: ``(x, y)`` uint8 CHW tensors, both ``size``×``size``
    (SRCNN works at the target size). ``distinct`` different samples are cycled so that
    memory stays bounded whatever ``length`` is."""

    def __init__(self, size: int, length: int, distinct: int = 64, channels: int = 3, seed: int = 0):
        import torch

        g = torch.Generator().manual_seed(seed)
        self.size = size
        self.length = int(length)
        k = max(1, min(distinct, self.length))
        self.x = [torch.randint(0, 256, (channels, size, size), dtype=torch.uint8, generator=g) for _ in range(k)]
        self.y = [torch.randint(0, 256, (channels, size, size), dtype=torch.uint8, generator=g) for _ in range(k)]

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        j = i % len(self.x)
        return self.x[j], self.y[j]


def batch_costs(input_sizes, batch_sizes, device=None, repeats: int = 5, warmup: int = 1) -> Results:
    """Per batch: ``collate`` (default_collate of (x, y) pairs, ms), and with CUDA
    ``pin`` (``.pin_memory()`` of the collated batch), ``h2d_pageable`` and
    ``h2d_pinned`` (copy of the batch, synchronised)."""
    import torch
    from torch.utils.data import default_collate

    device = torch.device(device) if device is not None else default_device()
    cuda = device.type == "cuda"
    res = Results()
    for size in input_sizes:
        for bs in batch_sizes:
            ds = PairSet(size, bs, distinct=bs)
            items = [ds[i] for i in range(bs)]
            batch = default_collate(items)
            nbytes = sum(t.numel() for t in batch)
            fns = {"collate": (lambda: default_collate(items), None)}
            if cuda:
                pinned = [t.pin_memory() for t in batch]
                fns["pin"] = (lambda: [t.pin_memory() for t in batch], None)
                fns["h2d_pageable"] = (lambda: [t.to(device) for t in batch], device)
                fns["h2d_pinned"] = (lambda: [t.to(device, non_blocking=True) for t in pinned], device)
            for name, (fn, dev) in fns.items():
                secs, number = _rounds_of(fn, repeats, warmup, dev)
                p = dict(input_size=size, batch_size=bs, bytes=nbytes, device=str(device))
                _copy_rows(res, name, "ms_per_batch", [s * 1e3 for s in secs], "ms", secs, number, **p)
                _copy_rows(res, name, "gb_per_s", [nbytes / s / 1e9 for s in secs], "GB/s", secs, number, **p)
    return res


def loader_steps(input_sizes, batch_sizes, pin_options=(False, True), num_workers: int = 2,
                 batches: int = 20, repeats: int = 3, device=None, model: str = "srcnn",
                 allow_cpu: bool = False) -> tuple[Results, str]:
    """Training steps fed by a DataLoader, ``pin_memory`` on and off (CUDA only, unless
    ``allow_cpu``: then the same loop runs on the CPU, where ``pin_memory`` has nothing to
    pin; the tests use it to cover this loop's control flow without a GPU).

    Per (input size, batch size, pin_memory), ``repeats`` passes of ``batches`` batches
    (a warm-up pass first): ms per step (wall ÷ batches), and the mean per batch of the
    ``h2d`` (copy + uint8→float, ``non_blocking``) and ``data_wait`` phases.
    Returns (results, reason why nothing was measured).
    """
    import torch
    from torch.utils.data import DataLoader

    from feedlab.models import make_model, make_train_step

    device = torch.device(device) if device is not None else default_device()
    res = Results()
    if device.type != "cuda" and not allow_cpu:
        return res, ("no CUDA device: a training step on the GPU, and with it the effect of "
                     "pin_memory on step time, cannot be measured here")
    for size in input_sizes:
        for bs in batch_sizes:
            for pin in pin_options:
                net = make_model(model, scale=1) if model == "srcnn" else make_model(model)
                loss_fn, opt = make_train_step(net, device)
                ds = PairSet(size, bs * batches, distinct=min(256, bs * batches))
                loader = DataLoader(ds, batch_size=bs, shuffle=False, num_workers=num_workers,
                                    pin_memory=pin and device.type == "cuda",
                                    persistent_workers=num_workers > 0, drop_last=True)
                run_epoch(loader, net, device, opt, loss_fn, max_batches=batches)  # warm-up
                for r in range(repeats):
                    ep = run_epoch(loader, net, device, opt, loss_fn, max_batches=batches, non_blocking=True)
                    ph = ep.phase_means()
                    p = dict(input_size=size, batch_size=bs, pin_memory=pin, num_workers=num_workers,
                             device=str(device), timed_batches=ep.batches,   # in-memory tensors, storage order:
                             **invariants(order="sequential", pixel_error=NOT_APPLICABLE, cache=NOT_APPLICABLE,
                                          window_s=ep.wall_s, epoch_batches=0))   # no pixels, nothing cached
                    variant = "pinned" if pin else "pageable"
                    res.add(EXPERIMENT, variant, "step_ms", ep.wall_s / max(1, ep.batches) * 1e3, "ms", repeat=r, **p)
                    res.add(EXPERIMENT, variant, "h2d_ms", ph["h2d"] * 1e3, "ms", repeat=r, **p)
                    res.add(EXPERIMENT, variant, "data_wait_ms", ph["data_wait"] * 1e3, "ms", repeat=r, **p)
                    res.add(EXPERIMENT, variant, "samples_per_s", ep.samples_per_s, "samples/s", repeat=r, **p)
                close_iterator(loader, getattr(loader, "_iterator", None), final=True)
                del loader
    return res, ""


def parse_size(text) -> int:
    """'64KB', '1MB', '256 MB', 4096 -> bytes (decimal units)."""
    if isinstance(text, (int, float)):
        return int(text)
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMG]?B?)\s*", str(text), re.I)
    if not m:
        raise ValueError(f"cannot read a size from {text!r}")
    mult = {"": 1, "B": 1, "K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9}[m.group(2).upper()]
    return int(float(m.group(1)) * mult)


# --------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------

LABELS = {"host_memcpy": "host memcpy (pageable → pageable)", "pageable": "H2D from pageable",
          "pinned": "H2D from pinned (non_blocking)", "collate": "default_collate", "pin": "pin_memory() of the batch",
          "h2d_pageable": "H2D copy, pageable batch", "h2d_pinned": "H2D copy, pinned batch"}


def plot_bandwidth(ax, df, link: dict | None = None) -> None:
    """GB/s per copy vs transfer size (log–log), one line per variant, IQR bars."""
    d = df[(df["metric"] == "gb_per_s") & df["variant"].isin(["host_memcpy", "pageable", "pinned"])]
    s = summarize(d, ["variant", "bytes"])
    for v in ["host_memcpy", "pageable", "pinned"]:
        part = s[s["variant"] == v].sort_values("bytes")
        if len(part):
            errorbar_series(ax, part["bytes"].to_numpy(), part["median"], part["q25"], part["q75"], label=LABELS[v])
    if link and link.get("theoretical_gbps"):
        ax.axhline(link["theoretical_gbps"], color="#888888", linestyle="--", linewidth=1)
        ax.annotate(f"PCIe {link['basis']} theoretical {link['theoretical_gbps']:.1f} GB/s",
                    xy=(0.01, link["theoretical_gbps"]), xycoords=("axes fraction", "data"),
                    xytext=(0, 3), textcoords="offset points", fontsize=7.5, color="#555555")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = sorted(s["bytes"].unique())
    ax.set_xticks(ticks)
    ax.set_xticklabels([human_bytes(t) for t in ticks], rotation=30)
    ax.minorticks_off()
    readable_log_axis(ax, "y")
    ax.set_xlabel("bytes per copy")
    ax.set_ylabel("GB/s (median, IQR over repeats)")
    legend_outside(ax, "right")


def plot_batch_costs(ax, df, batch_size: int) -> None:
    """ms per batch vs input size at one batch size: collate, and with CUDA pin + copies.
    No legend here: the caller puts one beside the last panel."""
    d = df[(df["metric"] == "ms_per_batch") & (df["batch_size"] == batch_size)]
    s = summarize(d, ["variant", "input_size"])
    for v in ["collate", "pin", "h2d_pageable", "h2d_pinned"]:
        part = s[s["variant"] == v].sort_values("input_size")
        if len(part):
            errorbar_series(ax, part["input_size"].to_numpy(), part["median"], part["q25"], part["q75"],
                            label=LABELS[v])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    sizes = sorted(s["input_size"].unique())
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(int(x)) for x in sizes])
    ax.minorticks_off()
    readable_log_axis(ax, "y")
    ax.set_xlabel("input size (side, px)")
    ax.set_ylabel("ms per batch (median, IQR)")
    ax.set_title(f"batch {batch_size}")


def plot_steps(axes, df) -> None:
    """With CUDA: step ms (pinned vs pageable) vs input size, one axis per batch size."""
    d = df[df["metric"] == "step_ms"]
    s = summarize(d, ["variant", "batch_size", "input_size"])
    for ax, bs in zip(axes, sorted(s["batch_size"].unique())):
        for v in ["pageable", "pinned"]:
            part = s[(s["variant"] == v) & (s["batch_size"] == bs)].sort_values("input_size")
            errorbar_series(ax, part["input_size"].to_numpy(), part["median"], part["q25"], part["q75"],
                            label=f"pin_memory={v == 'pinned'}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"batch {int(bs)}")
        ax.set_xlabel("input size")
    axes[0].set_ylabel("ms per training step (median, IQR)")
    axes[0].legend()
