"""Time every contender on the same data: samples/s to the model step, first batch, memory, CPU.

Per contender, data set and worker count: one loader is built; its first
epoch is the warm-up (the time to its first batch, worker start included, is
the *first-batch latency*); then ``repeats`` timed windows with a warm page
cache and, with ``cold=True``, ``repeats`` more with every epoch read after evicting the
contender's files (:mod:`feedlab.cache`; the eviction is not timed). A timed window
(:class:`Window`) is whole epochs back to back until it holds at least ``min_batches`` batches
and ``min_s`` seconds (50 and 1 s: the like-for-like floor, :mod:`feedlab.like_for_like`) and,
with a ``precision``, until the 95% interval of its mean batch time is within that half-width
(:func:`feedlab.pipeline.rel_half_width`), else ``imprecise`` at ``max_s``. Each window records its
rate, its timed batches, its seconds, its interval and the share of the cores other programs used
meanwhile (:class:`feedlab.monitor.LoadWindow`). A window precise to its ``precision`` at two checks in a row
may end before ``min_batches`` (at least ``min_s`` still): the like-for-like rule takes a stated precision
in place of the batch floor. Every batch goes through the same
start of a training step, :func:`to_device` (to the device, uint8 -> float / 255; no
model runs), so nobody is timed for stopping short of a usable tensor. Each timed epoch is counted (samples, and
ids for classification); an epoch of the wrong size fails the contender.
Peak RSS is the process tree's (main + workers), sampled every 50 ms. The worker count a row
carries is the one that ran: a peer whose threads start at one (``Peer.min_workers``) runs 1 for 0.

Under a budget (:class:`feedlab.budget.Budget`, the quick profile) every (contender, data set) is measured:
the budget never leaves a contender out (only the run's own limit does, and names it); it shortens the
windows instead. Each pair's window cap is its share of the seconds left (:func:`shared_window`), never
under the window's floor, so a slower machine measures every peer on shorter windows, each labelled
imprecise where it reached its cap before its precision.
"""

from __future__ import annotations

import gc
import math
import sys
import time
import traceback
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from feedlab import timing
from feedlab.cache import evict
from feedlab.errors import DeadlineError, deadline
from feedlab.like_for_like import MIN_TIMED_BATCHES, MIN_WINDOW_S
from feedlab.monitor import CpuMonitor, LoadWindow, RssPeak
from feedlab.pipeline.rates import rel_half_width
from feedlab.pipeline.shm import FIX as SHM_FIX
from feedlab.pipeline.shm import is_shm_failure, shm_names, sweep_orphans_since
from feedlab.results import Results

from . import get, plan, remote, venvs
from ._common import stop_workers, warnings_as_notes
from .base import Source, Spec, installed_versions
from .check import EpochCounter, verify
from .remote import beat

EXPERIMENT = "peers"
MIN_PRECISE_BATCHES = 20   # the fewest batches whose precision is read (two a block of rel_half_width's ten)
CONFIRM = 2                # precise checks in a row that end a window before its batch floor
OVERHEAD_S = 3.0           # a pair's seconds outside its windows (start-up, check, warm-up) until one is measured


@dataclass(frozen=True)
class Window:
    """A timed window: whole epochs until ``min_batches`` batches and ``min_s`` seconds (loaders that
    prefetch the next epoch's first batches while the last one ends, DALI's queue or persistent workers,
    would otherwise be timed on work done before the clock started), then, with ``precision`` (the
    relative half-width of the 95% interval of the mean batch time), until that precision or ``max_s``."""
    min_batches: int = MIN_TIMED_BATCHES
    min_s: float = MIN_WINDOW_S
    precision: float | None = None
    max_s: float = 10.0

    def precise(self, durations) -> bool:
        """The mean batch time known to ``precision`` (at least :data:`MIN_PRECISE_BATCHES` batches)."""
        return (self.precision is not None and len(durations) >= MIN_PRECISE_BATCHES
                and rel_half_width(durations) <= self.precision)

    def done(self, batches: int, seconds: float, durations, streak: int = 0) -> bool:
        """``streak``: the checks in a row (one an epoch) that found the window precise; :data:`CONFIRM` of them
        end it before its batch floor (one narrow interval among many looks is optimistic)."""
        if seconds < self.min_s:
            return False
        if batches < self.min_batches:
            return self.precision is not None and streak >= CONFIRM
        if self.precision is None or seconds >= self.max_s:
            return True
        return rel_half_width(durations) <= self.precision

    def as_dict(self) -> dict:
        return asdict(self)


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


def peer_epoch(loader, kind: str, device, n: int, first_only: bool = False, durations: list | None = None) -> dict:
    """One epoch, each batch copied to the device (:func:`to_device`): wall time, first-batch
    time, counts, batches; each batch's seconds appended to ``durations`` where given.

    Not :func:`feedlab.timing.run_epoch` (feedlab's own loop), and on purpose: a peer is timed as its users
    run it, so torch's threads are left as they are and no model step runs; its batches come in each
    peer's own shape (a dict, a list, images and labels), every sample counted for the check
    (:class:`~feedlab.peers.check.EpochCounter`); and each batch beats for the parent that bounds a
    peer's venv run. The clock sync is timing's one (:func:`feedlab.timing.sync_device`)."""
    count = EpochCounter(kind)
    t0 = last = time.perf_counter()
    first = None
    batches = 0
    for batch in loader:
        if first is None:
            first = time.perf_counter() - t0
        count.add(batch)
        to_device(batch, kind, device)
        batches += 1
        if durations is not None:
            now = time.perf_counter()
            durations.append(now - last)
            last = now
        beat()  # progress, for a parent bounding a venv run (at most a file touch a second)
    timing.sync_device(device)
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "first_batch_s": first if first is not None else float("nan"), "batches": batches,
            **count.result(n)}


def timed_window(loader, kind: str, device, n: int, window: Window, evict_files=None) -> dict:
    """Whole epochs back to back until ``window`` is done; with ``evict_files`` each epoch is read after
    evicting them (the eviction is not timed). Wall time, batches, epochs, the rate's precision, and the
    first epoch whose count was wrong (``ok`` False)."""
    durations: list[float] = []
    wall, batches, epochs, bad, streak = 0.0, 0, 0, None, 0
    while True:
        if evict_files is not None:
            evict(evict_files)
        ep = peer_epoch(loader, kind, device, n, durations=durations)
        wall += ep["wall_s"]
        batches += ep["batches"]
        epochs += 1
        if not ep["ok"]:
            bad = ep
            break
        streak = streak + 1 if batches < window.min_batches and window.precise(durations) else 0
        if ep["batches"] == 0 or window.done(batches, wall, durations, streak):
            break
    hw = rel_half_width(durations) if len(durations) >= 20 else float("nan")
    return {"wall_s": wall, "batches": batches, "epochs": epochs, "samples": n * epochs, "half_width": hw,
            "precise": bool(window.precision is not None and hw <= window.precision),
            "ok": bad is None, "bad": bad}


def _last_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}".strip()


def time_contender(name: str, source: Source, work: Path, spec: Spec, warmup: int = 1, repeats: int = 3,
                   cold: bool = False, device="cpu", window: Window | None = None) -> tuple[Results, dict]:
    """Warm-up, then ``repeats`` timed windows (:class:`Window`; warm; cold with each epoch read after an
    eviction). Returns rows and a status dict."""
    peer = get(name)
    window = window or Window()
    res = Results()
    status = {"name": name, "kind": source.kind, "num_workers": spec.workers, "ok": True, "error": ""}
    params = dict(kind=source.kind, num_workers=spec.workers, batch_size=spec.batch_size)
    loader = None
    try:
        t0 = time.perf_counter()
        loader = peer.loader(source, work, spec)
        if getattr(loader, "doctor_choice", None):   # feedlab's best: the spec the doctor advised
            status["pipeline"] = loader.doctor_choice
        ep = peer_epoch(loader, source.kind, device, source.n)
        status["first_batch_s"] = (time.perf_counter() - t0) - ep["wall_s"] + ep["first_batch_s"]
        res.add(EXPERIMENT, name, "first_batch_s", status["first_batch_s"], "s", **params)
        for _ in range(max(0, warmup - 1)):
            peer_epoch(loader, source.kind, device, source.n)
        caches = ["warm"] + (["cold"] if cold else [])
        files = peer.data_files(source, work) if cold else None
        for cache in caches:
            for r in range(repeats):
                load = LoadWindow()
                with CpuMonitor(interval=0.05) as cpu, RssPeak(interval=0.05) as rss:
                    win = timed_window(loader, source.kind, device, source.n, window,
                                       files if cache == "cold" else None)
                other = load.summary()
                if not win["ok"]:
                    bad = win["bad"]
                    status.update(ok=False, error=f"epoch returned {bad['samples']} samples, expected {source.n}"
                                  + (f" ({bad.get('distinct_ids')} distinct ids)" if "distinct_ids" in bad else ""))
                    return res, status
                status["epochs_per_window"] = win["epochs"]
                c = cpu.summary()
                tree = c["process_tree_cpu_percent_mean"]
                row = dict(cache=cache, **params)
                res.add(EXPERIMENT, name, "samples_per_s", win["samples"] / win["wall_s"], "samples/s", r, **row)
                res.add(EXPERIMENT, name, "timed_batches", win["batches"], "batches", r, **row)
                res.add(EXPERIMENT, name, "window_s", win["wall_s"], "s", r, **row)
                if np.isfinite(win["half_width"]):
                    res.add(EXPERIMENT, name, "rate_half_width", win["half_width"], "fraction", r, **row)
                if window.precision is not None:   # 0: the window reached its cap first (imprecise)
                    res.add(EXPERIMENT, name, "precise", float(win["precise"]), "bool", r, **row)
                res.add(EXPERIMENT, name, "peak_rss_mib", rss.peak() / 2**20, "MiB", r, **row)
                if other.get("available"):   # what other programs used of the usable cores meanwhile
                    res.add(EXPERIMENT, name, "other_load", other["other_fraction"], "fraction", r, **row)
                if np.isfinite(c["cpu_saturation"]):
                    res.add(EXPERIMENT, name, "cpu_saturation", c["cpu_saturation"], "fraction", r, **row)
                if np.isfinite(tree):
                    res.add(EXPERIMENT, name, "cpu_ms_per_sample", 10.0 * tree * win["wall_s"] / win["samples"],
                            "ms", r, **row)
    except DeadlineError:   # --timeout: the whole peer stops (run_peer says so)
        raise
    except Exception as exc:  # a contender that breaks stays in the table with the reason
        status.update(ok=False, error=_last_line(exc), trace=traceback.format_exc(limit=3))
    finally:
        stop_workers(loader)   # before the next loader forks (LitData's iterator would outlive it: _common)
        del loader
        gc.collect()
    return res, status


def workers_that_run(name: str, worker_counts) -> list[int]:
    """The worker counts ``name`` runs for ``worker_counts``: each at least the peer's ``min_workers``
    (FFCV, DALI and SPDL start one thread for 0), once each, ascending."""
    low = get(name).min_workers
    return sorted({max(low, int(w)) for w in worker_counts})


def run_peer(name: str, source: Source, work_root: Path, batch_size: int, worker_counts, size: int = 64,
             warmup: int = 1, repeats: int = 3, cold: bool = False, device="cpu", seed: int = 0,
             check: bool = True, stall_s: float | None = None, window: Window | None = None,
             augment: bool = True) -> tuple[Results, dict]:
    """Availability, conversion, the output check, then every worker count that runs (a count below the
    peer's ``min_workers`` runs as that, once). Never raises for a contender's failure: the info dict says
    what happened. ``stall_s``: a peer in its own venv is stopped (with its processes) after that long
    without progress. ``window``: each timed window (:class:`Window`; default 50 batches and 1 s).
    ``augment=False``: the timed epochs run the un-augmented pipeline too (classification: decode + resize;
    the doctor's what-if)."""
    peer = get(name)
    python = None if remote.in_venv() else venvs.python_for(name)
    if python is not None:  # a peer with a venv of its own: the same code, run by that venv's Python
        req = remote.request(name, source, work_root, batch_size, worker_counts, size, warmup, repeats, cold,
                             device, seed, check, window=(window or Window()).as_dict(), augment=augment)
        res, info = remote.run(python, req, stall_s=stall_s)
        info.setdefault("samples", source.n)
        return res, info
    info = {"name": name, "label": peer.label, "kind": source.kind, "parallelism": peer.parallelism,
            "shuffle": peer.shuffle, "recipe": peer.recipe, "samples": source.n, "interpreter": sys.executable,
            "python": sys.version.split()[0], "versions": installed_versions(peer.import_names)}
    res = Results()
    ok, reason = peer.check()
    info.update(available=ok, reason=reason)
    if not ok:
        return res, info
    if source.kind not in peer.kinds:
        info.update(available=False, reason=f"no {source.kind} pipeline")
        return res, info
    notes: list[str] = []   # its warnings, one line each (the table's notes), not raw under the cell
    with warnings_as_notes(Path(work_root), notes):
        _measure_here(peer, name, source, work_root, batch_size, worker_counts, size, warmup, repeats, cold, device,
                      seed, check, stall_s, window, augment, info, res)
    if notes:
        info["notes"] = notes
    return res, info


def _measure_here(peer, name: str, source: Source, work_root, batch_size, worker_counts, size, warmup, repeats,
                  cold, device, seed, check, stall_s, window, augment, info: dict, res: Results) -> None:
    """:func:`run_peer` in this interpreter, into ``info`` and ``res``: conversion, check, every worker count."""
    # in this interpreter: --timeout bounds it as it bounds a venv run (a batch, a conversion step is progress)
    d = None
    shm_before = shm_names()
    try:
        with deadline(stall_s, f"peer {name} on {source.kind}", "--timeout S waits longer", on_progress=True) as d:
            work = Path(work_root) / source.key() / name
            beat()
            try:
                conv = peer.convert(source, work)
            except DeadlineError:
                raise
            except Exception as exc:
                info.update(available=False, reason=f"conversion failed: {_last_line(exc)}")
                return
            info.update(convert_s=conv.seconds, bytes_on_disk=conv.bytes, convert_note=conv.note)
            res.add(EXPERIMENT, name, "convert_s", conv.seconds, "s", kind=source.kind)
            res.add(EXPERIMENT, name, "bytes_on_disk", conv.bytes, "B", kind=source.kind)
            ran = workers_that_run(name, worker_counts)
            spec = Spec(source.kind, batch_size=batch_size, workers=ran[0], size=size, seed=seed, augment=augment)
            if check:
                beat()
                try:
                    info["check"] = verify(peer, source, work, spec)
                except DeadlineError:
                    raise
                except Exception as exc:
                    info["check"] = {"ok": False, "error": _last_line(exc)}
                    if is_shm_failure(exc) or "no space left on device" in str(exc).lower():
                        # its workers' torch_* files, left as they died: removed (attack53 M06), and the fix named
                        info["check"].update(swept=len(sweep_orphans_since(shm_before)), fix=SHM_FIX)
                if not info["check"]["ok"]:
                    info.update(available=True, reason="output check failed")
                    return
            info["runs"] = []
            for w in ran:
                r, status = time_contender(name, source, work, spec.with_(workers=w), warmup, repeats, cold, device,
                                           window)
                res.extend(r)
                info["runs"].append(status)
            return
    except DeadlineError as exc:
        if d is None or exc.deadline is not d:   # an outer deadline's: its own line
            raise
        info.update(available=True, reason=f"stopped: no progress in {stall_s:g} s (--timeout)")
        return


def shared_window(window: Window, budget, pairs_left: int, windows: int, overhead_s: float = OVERHEAD_S) -> Window:
    """The window of the next (contender, data set) under ``budget``: the seconds left shared by the
    ``pairs_left`` still to measure (this one included), less each one's time outside its windows
    (``overhead_s``), over its ``windows`` timed windows; at most ``window.max_s``, shortened further to end
    before the run's limit (:meth:`feedlab.budget.Budget.cap_s`), never under ``window.min_s``. A budget
    shortens windows; it never drops a contender."""
    cap = float(window.max_s)
    left = budget.left()
    if math.isfinite(left):
        cap = min(cap, (left / max(1, pairs_left) - max(0.0, overhead_s)) / max(1, windows))
    cap = budget.cap_s(cap, passes=max(1, windows), floor_s=window.min_s)
    return replace(window, max_s=round(max(float(window.min_s), cap), 2))


def _apart(name: str) -> bool:
    return not remote.in_venv() and venvs.python_for(name) is not None


def _run_apart(name, sources, work_root, batch_size, worker_counts, size, warmup, repeats, cold, device, seed,
               window: Window) -> list[tuple[Results, dict]]:
    """A peer with a venv of its own on each of ``sources`` in one run of that venv's Python (its start and
    imports, a few seconds, paid once; :func:`feedlab.peers.remote.run_many`); its first pair's seconds hold all."""
    reqs = [remote.request(name, s, work_root, batch_size, worker_counts, size, warmup, repeats, cold, device, seed,
                           True, window=window.as_dict()) for s in sources]
    out = remote.run_many(venvs.python_for(name), reqs)
    for (_r, info), s in zip(out, sources):
        info.setdefault("samples", s.n)
        info["one_run_for"] = [q["kind"] for q in reqs]
    return out


def _timed_s(res: Results) -> float:
    return sum(r["value"] for r in res.rows if r.get("metric") == "window_s")


def run_all(names, sources: dict, work_root, batch_size: int, worker_counts, size: int = 64, warmup: int = 1,
            repeats: int = 3, cold: bool = False, device="cpu", seed: int = 0, log=print,
            window: Window | None = None, budget=None) -> tuple[Results, list]:
    """Every contender on every source (``{kind: Source}``), most telling first (:func:`feedlab.peers.plan`);
    rows and one info dict per (kind, contender), with the window it was timed to (``window``).
    ``budget`` (:class:`feedlab.budget.Budget`): every pair is measured, its windows capped at its share
    of what is left (:func:`shared_window`); once the budget is spent, the pairs still to come are timed
    warm only (their info says so, ``cold_left_out``): a setting is cut, never a peer. Only the run's own
    limit leaves a pair out, and its info says so (``left_out``)."""
    res, infos = Results(), []
    window = window or Window()
    pairs = plan(names, sources)
    outside: list[float] = []   # each measured pair's seconds outside its timed windows
    ahead: dict = {}            # a venv peer's later data sets, measured by the child of its first (one start)
    for i, (name, kind) in enumerate(pairs):
        source = sources[kind]
        what = f"{get(name).label} on {kind}"
        if budget is not None and not budget.allows(what, group=kind, essential=True):
            p = get(name)
            infos.append({"name": name, "label": p.label, "kind": kind, "parallelism": p.parallelism,
                          "shuffle": p.shuffle, "recipe": p.recipe, "samples": source.n, "available": False,
                          "left_out": True, "reason": f"left out by this run's time limit ({budget.left_out[-1][1]})"})
            continue
        win, cold_here = window, cold
        if budget is not None and budget.limited:
            cold_here = cold and budget.left() > 0   # spent: warm windows only, every peer still measured
            n_windows = len(workers_that_run(name, worker_counts)) * repeats * (2 if cold_here else 1)
            win = shared_window(window, budget, len(pairs) - i, n_windows,
                                sum(outside) / len(outside) if outside else OVERHEAD_S)
        t0 = time.perf_counter()
        with budget.setting(what, kind) if budget is not None else nullcontext():
            if (name, kind) in ahead:   # measured with its first data set, in the same run of its venv
                r, info, win, cold_here = ahead.pop((name, kind))
            else:
                later = [k for n, k in pairs[i + 1:] if n == name] if _apart(name) else []
                got = _run_apart(name, [sources[k] for k in [kind, *later]], work_root, batch_size, worker_counts,
                                 size, warmup, repeats, cold_here, device, seed, win) if later else [
                    run_peer(name, source, work_root, batch_size, worker_counts, size, warmup, repeats, cold_here,
                             device, seed, window=win)]
                (r, info), more = got[0], got[1:]
                ahead.update({(name, k): (*g, win, cold_here) for k, g in zip(later, more)})
        spent = time.perf_counter() - t0
        if info.get("runs"):
            outside.append(max(0.0, spent - _timed_s(r)))
        info["window"] = win.as_dict()
        if cold_here != cold:
            info["cold_left_out"] = (f"this run's budget of {budget.seconds:.0f} s was spent" if budget.seconds
                                     else "no time left before the run's limit")   # timed warm only
        res.extend(r)
        infos.append(info)
        if log is not None:
            state = ("unavailable: " + info["reason"]) if not info["available"] else (
                info["reason"] or "ok")
            one = f" (one run of its venv: {' and '.join(info['one_run_for'])})" if info.get("one_run_for") else ""
            log(f"{kind:4s} {name:18s} {spent:6.1f} s  windows <= {win.max_s:g} s  {state[:160]}{one}")
    return res, infos
