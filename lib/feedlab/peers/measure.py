"""Time every contender on the same data: samples/s to the model step, first batch, memory, CPU.

Per contender, data set and worker count: one loader is built; its first
epoch is the warm-up (the time to its first batch, worker start included, is
the *first-batch latency*); then ``repeats`` timed epochs with a warm page
cache and, with ``cold=True``, ``repeats`` more each after evicting the
contender's files (:mod:`feedlab.cache`). A timed window is whole epochs back
to back, at least ``MIN_TIMED_BATCHES`` batches, so work a loader prefetches
across an epoch boundary is a small part of it. Every batch goes through the same
start of a training step, :func:`to_device` (to the device, uint8 -> float / 255; no
model runs), so nobody is timed for stopping short of a usable tensor. Each timed epoch is counted (samples, and
ids for classification); an epoch of the wrong size fails the contender.
Peak RSS is the process tree's (main + workers), sampled every 50 ms.
"""

from __future__ import annotations

import gc
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch

from feedlab.monitor import CpuMonitor, _Sampler
from feedlab.results import Results
from feedlab.timing import _sync

from . import get, remote, venvs
from .base import Source, Spec
from .check import EpochCounter, verify
from .remote import beat

EXPERIMENT = "peers"
# a timed window spans at least this many batches (whole epochs back to back): loaders that prefetch
# the next epoch's first batches while the last one ends (DALI's queue, persistent workers) would
# otherwise be timed on work done before the clock started
MIN_TIMED_BATCHES = 24


class RssPeak(_Sampler):
    """Peak resident set size of this process and its children (bytes)."""

    def _prime(self) -> None:
        import psutil

        self._me = psutil.Process()
        self._psutil = psutil

    def _sample(self):
        total = 0
        try:
            procs = [self._me, *self._me.children(recursive=True)]
        except self._psutil.Error:
            procs = [self._me]
        for p in procs:
            try:
                total += p.memory_info().rss
            except self._psutil.Error:
                continue
        return (total,)

    def peak(self) -> int:
        return int(max((s[0] for s in self.samples), default=0))


def to_device(batch, kind: str, device) -> None:
    """What every training step starts with, and all that is done here (no model runs):
    the batch's images on the device as float in [0, 1], and the labels on the device."""
    images = batch[:2] if kind == "sr" else batch[:1]
    for x in images:
        t = torch.as_tensor(x).to(device, non_blocking=True)
        if not t.is_floating_point():
            t = t.float().div_(255)
    if kind == "cls":
        torch.as_tensor(batch[1]).to(device, non_blocking=True)


def run_epoch(loader, kind: str, device, n: int, first_only: bool = False) -> dict:
    """One epoch, each batch copied to the device (:func:`to_device`): wall time, first-batch
    time, counts."""
    count = EpochCounter(kind)
    t0 = time.perf_counter()
    first = None
    for batch in loader:
        if first is None:
            first = time.perf_counter() - t0
        count.add(batch)
        to_device(batch, kind, device)
        beat()  # progress, for a parent bounding a venv run (at most a file touch a second)
    _sync(device)
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "first_batch_s": first if first is not None else float("nan"), **count.result(n)}


def _last_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}".strip()


def time_contender(name: str, source: Source, work: Path, spec: Spec, warmup: int = 1, repeats: int = 3,
                   cold: bool = False, device="cpu") -> tuple[Results, dict]:
    """Warm-up, then timed epochs (warm; cold after eviction). Returns rows and a status dict."""
    from feedlab.cache import evict

    peer = get(name)
    res = Results()
    status = {"name": name, "kind": source.kind, "num_workers": spec.workers, "ok": True, "error": ""}
    params = dict(kind=source.kind, num_workers=spec.workers, batch_size=spec.batch_size)
    loader = None
    try:
        t0 = time.perf_counter()
        loader = peer.loader(source, work, spec)
        if getattr(loader, "doctor_choice", None):   # feedlab's best: the spec the doctor advised
            status["pipeline"] = loader.doctor_choice
        ep = run_epoch(loader, source.kind, device, source.n)
        status["first_batch_s"] = (time.perf_counter() - t0) - ep["wall_s"] + ep["first_batch_s"]
        res.add(EXPERIMENT, name, "first_batch_s", status["first_batch_s"], "s", **params)
        for _ in range(max(0, warmup - 1)):
            run_epoch(loader, source.kind, device, source.n)
        per_window = max(1, -(-MIN_TIMED_BATCHES // -(-source.n // spec.batch_size)))
        status["epochs_per_window"] = per_window
        caches = ["warm"] + (["cold"] if cold else [])
        files = peer.data_files(source, work) if cold else []
        for cache in caches:
            for r in range(repeats):
                if cache == "cold":
                    rep = evict(files)
                    res.add(EXPERIMENT, name, "resident_after_evict", rep.resident_fraction_after
                            if rep.resident_fraction_after is not None else -1.0, "fraction", r, cache=cache,
                            **params)
                with CpuMonitor(interval=0.05) as cpu, RssPeak(interval=0.05) as rss:
                    eps = [run_epoch(loader, source.kind, device, source.n) for _ in range(per_window)]
                ep = {"wall_s": sum(e["wall_s"] for e in eps), "ok": all(e["ok"] for e in eps),
                      **{k: v for k, v in next((e for e in eps if not e["ok"]), eps[0]).items()
                         if k not in ("wall_s", "ok")}}
                n_timed = source.n * per_window
                if not ep["ok"]:
                    status.update(ok=False, error=f"epoch returned {ep['samples']} samples, expected {source.n}"
                                  + (f" ({ep.get('distinct_ids')} distinct ids)" if "distinct_ids" in ep else ""))
                    return res, status
                c = cpu.summary()
                tree = c["process_tree_cpu_percent_mean"]
                res.add(EXPERIMENT, name, "samples_per_s", n_timed / ep["wall_s"], "samples/s", r, cache=cache,
                        **params)
                res.add(EXPERIMENT, name, "peak_rss_mib", rss.peak() / 2**20, "MiB", r, cache=cache, **params)
                if np.isfinite(c["cpu_saturation"]):
                    res.add(EXPERIMENT, name, "cpu_saturation", c["cpu_saturation"], "fraction", r, cache=cache,
                            **params)
                if np.isfinite(tree):
                    res.add(EXPERIMENT, name, "cpu_ms_per_sample", 10.0 * tree * ep["wall_s"] / n_timed,
                            "ms", r, cache=cache, **params)
    except Exception as exc:  # a contender that breaks stays in the table with the reason
        status.update(ok=False, error=_last_line(exc), trace=traceback.format_exc(limit=3))
    finally:
        del loader
        gc.collect()
    return res, status


def run_peer(name: str, source: Source, work_root: Path, batch_size: int, worker_counts, size: int = 64,
             warmup: int = 1, repeats: int = 3, cold: bool = False, device="cpu", seed: int = 0,
             check: bool = True, stall_s: float | None = None) -> tuple[Results, dict]:
    """Availability, conversion, the output check, then every worker count. Never raises for a
    contender's failure: the info dict says what happened. ``stall_s``: a peer in its own venv
    is stopped (with its processes) after that long without progress."""
    peer = get(name)
    python = None if remote.in_venv() else venvs.python_for(name)
    if python is not None:  # a peer with a venv of its own: the same code, run by that venv's Python
        req = remote.request(name, source, work_root, batch_size, worker_counts, size, warmup, repeats, cold,
                             device, seed, check)
        res, info = remote.run(python, req, stall_s=stall_s)
        info.setdefault("samples", source.n)
        return res, info
    info = {"name": name, "label": peer.label, "kind": source.kind, "parallelism": peer.parallelism,
            "shuffle": peer.shuffle, "recipe": peer.recipe, "samples": source.n, "interpreter": sys.executable}
    res = Results()
    ok, reason = peer.check()
    info.update(available=ok, reason=reason)
    if not ok:
        return res, info
    if source.kind not in peer.kinds:
        info.update(available=False, reason=f"no {source.kind} pipeline")
        return res, info
    work = Path(work_root) / source.key() / name
    beat()
    try:
        conv = peer.convert(source, work)
    except Exception as exc:
        info.update(available=False, reason=f"conversion failed: {_last_line(exc)}")
        return res, info
    info.update(convert_s=conv.seconds, bytes_on_disk=conv.bytes, convert_note=conv.note)
    res.add(EXPERIMENT, name, "convert_s", conv.seconds, "s", kind=source.kind)
    res.add(EXPERIMENT, name, "bytes_on_disk", conv.bytes, "B", kind=source.kind)
    spec = Spec(source.kind, batch_size=batch_size, workers=min(worker_counts), size=size, seed=seed)
    if check:
        beat()
        try:
            info["check"] = verify(peer, source, work, spec)
        except Exception as exc:
            info["check"] = {"ok": False, "error": _last_line(exc)}
        if not info["check"]["ok"]:
            info.update(available=True, reason="output check failed")
            return res, info
    info["runs"] = []
    for w in worker_counts:
        r, status = time_contender(name, source, work, spec.with_(workers=w), warmup, repeats, cold, device)
        res.extend(r)
        info["runs"].append(status)
    return res, info


def run_all(names, sources: dict, work_root, batch_size: int, worker_counts, size: int = 64, warmup: int = 1,
            repeats: int = 3, cold: bool = False, device="cpu", seed: int = 0, log=print) -> tuple[Results, list]:
    """Every contender on every source (``{kind: Source}``); rows and one info dict per (kind, contender)."""
    res, infos = Results(), []
    for kind, source in sources.items():
        for name in names:
            t0 = time.perf_counter()
            r, info = run_peer(name, source, work_root, batch_size, worker_counts, size, warmup, repeats, cold,
                               device, seed)
            res.extend(r)
            infos.append(info)
            if log is not None:
                state = ("unavailable: " + info["reason"]) if not info["available"] else (
                    info["reason"] or "ok")
                log(f"{kind:4s} {name:18s} {time.perf_counter() - t0:6.1f} s  {state[:160]}")
    return res, infos
