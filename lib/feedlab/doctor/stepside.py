"""Step-side changes, tried on the user's own step when the step bounds training.

The PyTorch performance tuning guide's model-side changes, each applied around the
user's ``step(batch)`` without touching their code, timed on the same full batches as
the step itself, and reported with the code line that applies it. A change is *kept*
(advised) only when it measured faster by :data:`~feedlab.doctor.predict.MIN_GAIN`;
a change that measured slower is reported as slower, never advised.

* ``threads`` — intra-op threads (``torch.set_num_threads``): the usable cores, and the
  cores the workers leave (``cores - num_workers``), where either differs from yours;
* ``channels_last`` — 4-D float inputs in channels-last memory format (convolutions
  then pick the NHWC kernels; the model follows with ``model.to(memory_format=...)``);
* ``autocast_bf16`` — ``torch.autocast("cuda", dtype=torch.bfloat16)``: CUDA only;
* ``compile`` — ``torch.compile`` of the step, where torch has it and a compiler is
  here (CUDA, or a C compiler for the CPU backend); its compile time is left out.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
import warnings
from typing import Any, Callable

import numpy as np

from feedlab import timing
from feedlab.errors import one_line
from feedlab.monitor import BUSY_SPEED, LoadWindow, usable_cores
from feedlab.timing import torch_threads

from .guard import deadline
from .predict import MIN_GAIN
from .probes import cpu_capacity
from .wrap import to_device

TRIALS = ("threads", "channels_last", "autocast_bf16", "compile")
CODE = {
    "threads": "torch.set_num_threads({n})",
    "channels_last": "model = model.to(memory_format=torch.channels_last); "
                     "x = x.contiguous(memory_format=torch.channels_last)",
    "autocast_bf16": 'with torch.autocast("cuda", dtype=torch.bfloat16): loss = loss_fn(model(x), y)',
    "compile": "model = torch.compile(model)",
}
COMPILE_DEADLINE_S = 600.0


def _map(batch, fn):
    import torch

    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(_map(b, fn) for b in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_map(b, fn) for b in batch)
    if isinstance(batch, dict):
        return {k: _map(v, fn) for k, v in batch.items()}
    return batch


def _has_4d_float(batch) -> bool:
    import torch

    found = []
    _map(batch, lambda t: found.append(t.ndim == 4 and torch.is_floating_point(t)) or t)
    return any(found)


def _channels_last(t):
    import torch

    if t.ndim == 4 and torch.is_floating_point(t):
        return t.contiguous(memory_format=torch.channels_last)
    return t


def thread_options(threads: int, cores: int, workers: int = 0) -> list[int]:
    """Intra-op thread counts worth trying beside the step's own ``threads``."""
    return sorted({int(cores), max(1, int(cores) - int(workers))} - {int(threads)})


def available(device: str, threads: int, cores: int, batch, only=None, workers: int = 0) -> list[str]:
    """The trials that apply here (pure: which device, threads, cores, batch)."""
    import torch

    want = TRIALS if only is None else tuple(only)
    out = []
    if "threads" in want and thread_options(threads, cores, workers):
        out.append("threads")
    if "channels_last" in want and _has_4d_float(batch):
        out.append("channels_last")
    if "autocast_bf16" in want and str(device).startswith("cuda"):
        out.append("autocast_bf16")
    if "compile" in want and hasattr(torch, "compile") and (
            str(device).startswith("cuda") or shutil.which("cc") or shutil.which("gcc")):
        out.append("compile")
    return out


def variant(name: str, step: Callable, device: str, cores: int):
    """``cores``: for ``threads``, the thread count tried."""
    """(context factory, step) that apply trial ``name`` around ``step``."""
    import contextlib

    import torch

    none = contextlib.nullcontext
    if name == "threads":
        return (lambda: torch_threads(cores)), step
    if name == "channels_last":
        return none, (lambda b: step(_map(b, _channels_last)))
    if name == "autocast_bf16":
        return (lambda: torch.autocast(device_type="cuda", dtype=torch.bfloat16)), step
    if name == "compile":
        return none, torch.compile(step)
    raise ValueError(f"unknown step-side trial {name!r}")


@contextlib.contextmanager
def held_back(into: list[str]):
    """Library warnings raised while a trial runs (``warnings.warn`` and torch's own log lines, e.g.
    ``torch.compile``'s graph breaks and recompiles) kept out of the answer: their messages go to ``into``."""
    class _Keep(logging.Handler):
        def emit(self, record):
            into.append(record.getMessage())

    keep = _Keep(logging.WARNING)
    names = [n for n in list(logging.root.manager.loggerDict) if n == "torch" or n.startswith("torch.")]
    loggers = [lg for lg in (logging.getLogger(n) for n in names) if lg.handlers or not lg.propagate]
    saved = [lg.handlers for lg in loggers]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for lg in loggers:
            lg.handlers = [keep]
        try:
            yield into
        finally:
            for lg, hs in zip(loggers, saved):
                lg.handlers = hs
            into.extend(str(w.message) for w in caught)


def busy_reason(window, speed: float | None = None) -> str | None:
    """Why a step-side timing cannot be judged, or None: other processes over the workbook's threshold
    while it ran (``window``: a :class:`feedlab.monitor.LoadWindow`), or the doctor's own CPU probe
    (``speed``: one process's share of a core, probed now when not given) under ``BUSY_SPEED``."""
    s = window.summary()
    if s.get("busy"):
        return (f"machine too busy to judge (other processes used {s['other_cpu_cores']:.2f} of "
                f"{s['usable_cores']} usable cores while it was timed)")
    speed = cpu_capacity([1], seconds=0.1, repeats=1)[1] if speed is None else speed
    if speed < BUSY_SPEED:
        return (f"machine too busy to judge (the doctor's own probe found {speed:.2f} of a core for one "
                f"process; under {BUSY_SPEED:g} another program was using the CPU)")
    return None


def time_step(step, batches, device, repeats: int, ctx=None) -> float:
    """Median seconds per sample of ``step`` over ``batches`` ``(batch, n)``, after one untimed call."""
    import contextlib

    ctx = ctx or contextlib.nullcontext
    walls = []
    with ctx():
        step(batches[0][0])
        for _ in range(repeats):
            for b, m in batches:
                timing.sync_device(device)
                t0 = time.perf_counter()
                step(b)
                timing.sync_device(device)
                walls.append((time.perf_counter() - t0) / max(1, m or 1))
    return float(np.median(walls))


def try_step_changes(step, kept, device: str, repeats: int, step_name: str = "your step", threads: int = 1,
                     only=None, cores: int | None = None, workers: int = 0,
                     timer: Callable[..., float] | None = None,
                     busy: Callable[[], str | None] | None = None) -> list[dict[str, Any]]:
    """Each applicable trial timed against the step as it is, on the same batches, its library warnings
    held back (:func:`held_back`). ``timer(step, batches, device, repeats, ctx)`` (default :func:`time_step`)
    is the clock; ``busy()`` (default :func:`busy_reason` over the trials) says why the machine was too
    busy to judge them: then no trial is kept (advised). A test passes fakes."""
    window = LoadWindow()
    cores = usable_cores() if cores is None else int(cores)
    timer = timer or time_step
    on_dev = [(to_device(b, device), m) for b, m in kept]
    base = timer(step, on_dev, device, repeats, lambda: torch_threads(threads))
    out = []
    trials = [(name, n) for name in available(device, threads, cores, on_dev[0][0], only, workers)
              for n in (thread_options(threads, cores, workers) if name == "threads" else [cores])]
    for name, n in trials:
        row: dict[str, Any] = {"change": name, "code": CODE[name].format(n=n), "baseline_s_per_sample": base}
        if name == "threads":
            row["threads"] = n
        try:
            ctx, fn = variant(name, step, device, n)
            if name != "threads":
                inner = ctx
                ctx = (lambda inner=inner: _both(torch_threads(threads), inner()))
            with deadline(COMPILE_DEADLINE_S if name == "compile" else None, f"{name} of {step_name}"), \
                    held_back(row.setdefault("warnings_held", [])):
                t = timer(fn, on_dev, device, repeats, ctx)
        except Exception as exc:  # a change the step does not take is reported, not fatal
            row.update(measured=False, why=f"{type(exc).__name__}: {one_line(exc)}")
            out.append(row)
            continue
        gain = base / t if t > 0 else float("inf")
        row.update(measured=True, s_per_sample=t, gain=gain, kept=gain >= MIN_GAIN,
                   result="faster" if gain >= MIN_GAIN else ("slower" if gain < 1 / MIN_GAIN else "no change"))
        out.append(row)
    why = (busy or (lambda: busy_reason(window)))() if any(r.get("measured") for r in out) else None
    for row in out:
        if why and row.get("measured"):   # timed beside another program's load: not judged, never advised
            row.update(kept=False, too_busy=why)
    return out


class _both:
    """Two context managers entered as one."""

    def __init__(self, a, b):
        self.a, self.b = a, b

    def __enter__(self):
        self.a.__enter__()
        self.b.__enter__()

    def __exit__(self, *exc):
        self.b.__exit__(*exc)
        self.a.__exit__(*exc)
