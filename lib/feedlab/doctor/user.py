"""The doctor on your own DataLoader: ``diagnose_loader(loader, step=...)``.

Your loader is rebuilt around wrappers, never changed: its dataset's
``__getitem__`` / ``__getitems__`` (the *fetch*: read + decode + transform, whatever
your dataset does) and its ``collate_fn`` report their wall and CPU time through a
queue; one batch's items are handed over by a one-worker probe (worker and main
side); the copy to the device and your ``step(batch)`` are timed in the main process
on *full* batches (a short last batch is left out), every per-sample cost divided by
the samples it really saw. The same stage-cost model as for feedlab's own pipelines
then predicts the rate for 0…N workers, and your loader as you built it is measured
end to end against it.

Every wait has a deadline (your ``DataLoader(timeout=…)`` when you gave one, else
``deadline_s`` per batch), and what your loader or step raises is one named line
(:class:`~feedlab.doctor.guard.UserCodeError`), never the doctor's traceback.

    from feedlab.doctor import diagnose_loader, render_user
    print(render_user(diagnose_loader(make_loader(), step=train_step)))
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from typing import Any, Callable

import numpy as np

from feedlab import monitor, stage, timing
from feedlab import pipeline as pl
from feedlab.errors import DeadlineError, one_line
from feedlab.pipeline import shm
from feedlab.timing import torch_threads

from . import predict as PR
from .advice import apply as apply_measured
from .advice import measure_changes, to_try
from .answer import no_change_line, render_user  # noqa: F401  (render_user: feedlab.doctor.user.render_user)
from .costs import CostKey, CostTable, Stage
from .guard import DEFAULT_DEADLINE_S, HUNG_HINT, Hung, UserCodeError, collate_hint, deadline, user_call
from .probes import measure_machine, probe_worker, startup_s, timed
from .ranks import advise_ranks
from .report import Report
from .script_record import held_workers
from .standin import StandInStep
from .stepside import try_step_changes
from .verdict import one_verdict, wait_share
from .watch_lines import worker_died_line
from .wrap import batch_len, check_loader, stage_costs, timed_in_main, to_device

KEEP_BATCHES = 4          # full batches kept in memory to time the copy and the step on


def pinned(loader, pin_memory: bool | None, cuda: bool, notes: list[str]):
    """The loader to diagnose under ``--pin-memory``: rebuilt with pinned memory on CUDA;
    off CUDA unchanged, with a note saying pinning changes nothing there."""
    if pin_memory and not cuda:
        notes.append("--pin-memory: no CUDA here, so pinned memory changes nothing; measured without it")
    elif pin_memory and not loader.pin_memory:
        loader = stage.rebuild(loader, pin_memory=True)
        notes.append("--pin-memory: your loader measured with pin_memory=True")
    return loader


def check_shm(loader) -> None:
    """Your loader's workers against /dev/shm, before any of them (or the doctor's one-worker probe of your
    collate) starts, as feedlab's own loaders are checked (pipeline.shm): one line with the fix."""
    workers = getattr(loader, "num_workers", 0) or 0
    problem = shm.shm_problem_of(loader.dataset, loader.batch_size, workers,
                                 getattr(loader, "prefetch_factor", None) or 2) if workers else None
    if problem:
        raise UserCodeError(f"your loader: {problem}")


def _batch_deadline(loader, deadline_s: float | None) -> tuple[float | None, str]:
    t = float(getattr(loader, "timeout", 0) or 0)
    if t > 0:
        return t, f"your DataLoader(timeout={t:g})"
    return deadline_s, "the doctor's deadline (--deadline)"


def _next(it, k: int, limit: float | None, whose: str):
    """Batch ``k`` of your loader under ``limit``: a worker stopped or killed from outside is named as such
    (attack57 S63: a SIGSTOPped worker was blamed on a sample; a SIGKILLed one on your loader), never a sample."""
    try:
        return _next_within(it, k, limit, whose)
    except Hung:
        held = held_workers()
        if not held:
            raise
        for pid in held:   # let them take the stop that follows: a stopped process holds a SIGTERM until resumed
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        raise UserCodeError(f"your loader's DataLoader worker(s) (pid(s) {', '.join(map(str, held))}) stopped "
                            f"(SIGSTOP or SIGTSTP from outside the command?): batch {k} did not come within "
                            f"{limit:g} s") from None


def _next_within(it, k: int, limit: float | None, whose: str):
    hint = ("a sample that never returns (a stuck read, a FIFO, a lock, a network mount) hangs training too; "
            f"deadline from {whose}")
    with deadline(limit, f"batch {k} of your loader", hint):
        try:
            return next(it)
        except (StopIteration, UserCodeError, DeadlineError, KeyboardInterrupt):   # the deadline's own, to it
            raise
        except Exception as exc:
            if shm.is_shm_failure(exc):   # its workers out of /dev/shm: one line with the fix, their torch_* gone
                stage.stop(None, it)
                shm.sweep_torch_files([os.getpid(), *(w.pid for w in getattr(it, "_workers", []) if w.pid)])
                raise UserCodeError(f"your loader's workers ran out of shared memory ({shm.SHM_DIR}) building "
                                    f"batch {k}: use {shm.FIX}") from None
            died = worker_died_line(exc, "", "", k, who="your loader")
            if died:   # a worker killed from outside, or crashed: never your loader's own error
                raise UserCodeError(died) from None
            text = one_line(exc)
            raise UserCodeError(f"your loader raised {type(exc).__name__} building batch {k}: {text}; "
                                f"{collate_hint(text)}") from None


def _run(loader, step, device, batches: int, skip: int, limit: float | None = None,
         whose: str = "", step_name: str = "your step(batch)", step_limit: float | None = None) -> dict:
    """Samples/s of ``batches`` batches, after the first ``skip`` (start-up, prefetch).

    The clock starts before batch ``skip`` is asked for, so its wait is counted with its
    samples; ``skip`` is at most half the batches, so a loader with many workers still
    gets a measurement; with CUDA the device is synchronised before each clock read.
    Each batch is counted by the samples it holds (a short last batch counts short).
    """
    skip = min(int(skip), max(0, batches // 2))
    check_shm(loader)
    t_start, n_after, t_after, it = None, 0, None, iter(loader)
    waits: list[float] = []   # after ``skip``: each batch's wait, then its copy + step (the loop's verdict)
    steps: list[float] = []
    t0 = time.perf_counter()
    try:
        for k in range(batches):
            if k == skip:
                timing.sync_device(device)
                t_after = time.perf_counter()
            t_ask = time.perf_counter()
            try:
                batch = _next(it, k, limit, whose)
            except StopIteration:
                break
            t_got = time.perf_counter()
            if k >= skip:
                n_after += batch_len(batch) or 0
            t_start = t_start or t_got
            batch = to_device(batch, device)
            if step is not None:
                user_call(step_name, step, batch, limit_s=step_limit)
            if k >= skip:
                timing.sync_device(device)
                waits.append(t_got - t_ask)
                steps.append(time.perf_counter() - t_got)
        timing.sync_device(device)
        end = time.perf_counter()
    finally:
        stage.stop(loader, it)
        del it
    rate = n_after / (end - t_after) if t_after is not None and end > t_after and n_after else float("nan")
    return {"steady": rate, "first_batch_s": (t_start or end) - t0, "waits": waits, "steps": steps,
            "timed": len(waits), "window_s": end - t_after if t_after is not None else 0.0}


# ---------------------------------------------------------------- the pieces of a diagnosis


def _isolation(loader, q, batches: int, limit, whose, log) -> tuple[list, list[int]]:
    """Fetch and collate in the main process (num_workers=0), timed; the first
    ``KEEP_BATCHES`` full batches (and their sizes) are kept for the copy and the step."""
    iso = timed_in_main(loader, q)
    B = getattr(loader.batch_sampler, "batch_size", None)
    kept, lens, it, largest = [], [], iter(iso), None
    n = min(batches, len(iso))
    for k in range(n):
        try:
            batch = _next(it, k, limit, whose)
        except StopIteration:
            break
        m = batch_len(batch)
        lens.append(m)
        if largest is None or (m or 0) > (largest[1] or 0):
            largest = (batch, m)
        if len(kept) < KEEP_BATCHES and (B is None or m == B or m is None):
            kept.append((batch, m))
        log(f"fetch + collate in isolation: batch {k + 1}/{n}")
    del it
    if not kept and largest is not None:   # fewer samples than one batch: the short batch is all there is
        kept.append(largest)
    return kept, lens


def _step_costs(step, kept, device, repeats: int, step_name: str, T: int, limit: float | None = None):
    """(wall, cpu) per sample of ``step`` over the kept batches, after one untimed call (a call
    that does not return within ``limit`` is :class:`Hung`); each call divided by the samples
    of its own batch."""
    on_dev = [(to_device(b, device), m or 1) for b, m in kept]
    walls, cpus = [], []
    with timing.torch_threads(T):
        user_call(step_name, step, on_dev[0][0], hint="the step gets the batch as your loader yields it, "
                  f"already on {device}", limit_s=limit)
        with deadline(limit, step_name, HUNG_HINT) as d:   # armed outside the clock: re-armed per call
            for _ in range(repeats):
                for b, m in on_dev:
                    d.reset()
                    timing.sync_device(device)
                    t0, c0 = time.perf_counter(), time.process_time()
                    user_call(step_name, step, b)
                    timing.sync_device(device)
                    walls.append((time.perf_counter() - t0) / m)
                    cpus.append((time.process_time() - c0) / m)
    return walls, cpus


def diagnose_loader(loader, step: Callable[[Any], Any] | None = None, batches: int = 16, repeats: int = 3,
                    device: str | None = None, max_workers: int | None = None, *, pin_memory: bool | None = None,
                    deadline_s: float | None = DEFAULT_DEADLINE_S, log: Callable[[str], None] | None = None,
                    step_trials: tuple[str, ...] | None = None, step_name: str = "your step(batch)",
                    ranks: int | None = None, step_cost_s: tuple[float, float] | None = None,
                    measure_advice: bool = False) -> dict:
    """Stage costs of your ``loader`` (fetch, collate, hand-over, copy to ``device``,
    ``step``), the rate predicted from them for 0…``max_workers`` workers, your loader
    measured as built (median of ``repeats`` passes of ``batches`` batches), and the
    prediction's error. ``step(batch)`` receives each batch as the loader yields it,
    already on ``device``. ``pin_memory`` (with CUDA) measures the loader with pinned
    memory; ``deadline_s`` bounds the wait for each batch when the loader has no
    ``timeout`` of its own; ``step_trials`` (default: all) names the step-side changes
    tried when the step bounds (see :mod:`feedlab.doctor.stepside`); ``ranks`` adds the
    workers-per-rank advice for that many ranks sharing this machine (predicted);
    ``step_cost_s`` (wall and CPU seconds per sample, measured elsewhere, e.g. by
    ``--script``) prices the step when no ``step`` is given (end to end, a wait of that
    time stands in for it). ``measure_advice``: the best predicted changes applied to your loader and
    measured against it on your loop before any is advised (:mod:`feedlab.doctor.advice`)."""
    import torch


    log = log or (lambda m: None)
    check_loader(loader, deadline_s)   # a __len__ that blocks: Hung, named
    check_shm(loader)   # before any worker starts, the one-worker hand-over probe's too
    window = monitor.LoadWindow()
    device = pl.resolve_device(device)
    cuda = device.startswith("cuda")
    notes: list[str] = []
    loader = pinned(loader, pin_memory, cuda, notes)
    W = int(loader.num_workers)
    max_workers = monitor.usable_cores() if max_workers is None else int(max_workers)
    max_workers = max(max_workers, W)
    limit, whose = _batch_deadline(loader, deadline_s)
    log("measuring the machine (cores, threads, CPU capacity)")
    machine = measure_machine(device, max_workers)
    # your loop runs its step at your threads whatever the workers (feedlab's run_epoch would change them)
    T_user = torch.get_num_threads()
    machine.main_threads = {w: T_user for w in machine.main_threads}
    table = CostTable(machine)
    B = int(loader.batch_sampler.batch_size) if hasattr(loader.batch_sampler, "batch_size") else None
    ctx = loader.multiprocessing_context or mp.get_context()
    ctx = mp.get_context(ctx) if isinstance(ctx, str) else ctx
    q = ctx.Queue()
    # 1. fetch and collate in the main process (num_workers=0), in isolation
    log(f"fetch + collate in isolation (num_workers=0), up to {batches} batches")
    kept, lens = _isolation(loader, q, batches, limit, whose, log)
    B = B or kept[0][1] or 1
    full = [m for m in lens if m == B]
    if not full:
        n_all = sum(m or 0 for m in lens)
        notes.append(f"your data holds {n_all} samples, fewer than one batch of {B}: costs are per sample of that "
                     "one short batch, and no steady rate can be measured")
    elif len(lens) < 3:
        notes.append(f"your loader yields only {len(lens)} batch(es): too few to measure a steady rate "
                     "(the stage costs are measured; the end-to-end rate is not)")
    costs = stage_costs(q)
    table[CostKey("read", "user", "user")] = Stage("fetch", "your dataset's __getitem__ (read+decode+transform)",
                                            *costs["fetch"])
    table[CostKey("decode", "user", "user")] = Stage("decode", "inside fetch", [0.0], [0.0],
                                              note="not measured: inside your fetch")
    table[CostKey("transform", "user", "user")] = Stage("transform", "inside fetch", [0.0], [0.0],
                                                 note="not measured: inside your fetch")
    table[CostKey("collate", "user", B)] = Stage("collate", f"your collate_fn (batch {B})", *costs["collate"])
    # 2. the hand-over of one batch's items, collated in a worker
    if max_workers > 0:
        log("hand-over worker → main (a one-worker probe)")
        idx = list(next(iter(loader.batch_sampler)))
        get = getattr(loader.dataset, "__getitems__", None)
        with deadline(limit, "fetching one batch's samples", f"deadline from {whose}"):
            items = user_call("your dataset", lambda: get(idx) if get is not None else [loader.dataset[i] for i in idx])
        n_items = max(1, len(items))
        try:
            with deadline(limit and 4 * limit, "the hand-over probe"):
                pr = probe_worker(items, loader.collate_fn, batches=max(4, 4 * repeats))
            per = lambda xs: [x / n_items for x in xs]  # noqa: E731
            table[CostKey("collate_worker", "user", B)] = Stage("collate", "your collate_fn in a worker",
                                                         per(pr["collate_wall"]), per(pr["collate_cpu"]))
            table[CostKey("handover_worker", "user", B)] = Stage("handover", "worker → main (worker side)",
                                                          per(pr["handover_cpu"]), per(pr["handover_cpu"]))
            table[CostKey("receive", "user", B)] = Stage("receive", "worker → main (main side)", per(pr["receive_cpu"]),
                                                  per(pr["receive_cpu"]))
        except Hung:
            raise
        except Exception as exc:  # e.g. items that cannot cross to a worker: reported, predicted without

            notes.append(f"hand-over not measured ({type(exc).__name__}: {one_line(exc)}); predicted without it")
        log(f"worker start-up, 1…{max_workers} workers")
        for w in range(1, max_workers + 1):
            table[CostKey("startup", w)] = Stage("startup", f"{w} fresh worker(s) to a first batch", startup_s(w, repeats),
                                          [0.0], note="seconds, not per sample")
    # 3. copy to the device and the step, on the full batches in hand
    for T in sorted(set(machine.main_threads.values())):
        with torch_threads(T):
            b0, m0 = kept[0]
            w, c = timed(lambda: to_device(b0, device), m0 or 1, 1, repeats, device if cuda else None)
            table[CostKey("h2d", "user", B, False, T)] = Stage("h2d", f"batch to {device}, {T} thread(s)", w, c)
        if step is None and step_cost_s:
            table[CostKey("model", B, T)] = Stage("model", "your script's step, as it ran", [step_cost_s[0]],
                                           [step_cost_s[1]], note="measured in your script")
        elif step is None:
            table[CostKey("model", B, T)] = Stage("model", "no step given", [0.0], [0.0],
                                           note="not measured: no step given (--step)")
        else:
            log(f"your step on {len(kept)} full batch(es), {T} thread(s)")
            w, c = _step_costs(step, kept, device, repeats, step_name, T, deadline_s)
            table[CostKey("model", B, T)] = Stage("model", f"your step, {T} thread(s)", w, c)
    # 4. your loader as built, end to end
    spec = pl.PipelineSpec(format="user", decode="user", collate="user", batch_size=B, num_workers=W,
                          device=device, pin_memory=bool(loader.pin_memory))
    measured = loop = None
    if step is None and step_cost_s:   # the same CPU work as the script's step (a sleep left workers its cores)
        step = StandInStep(step_cost_s[0], step_cost_s[1], B)
        notes.append(f"end to end, {step.words}")
    if full and len(lens) >= 3:
        skip = pl.prefetch_depth(spec)
        runs = []
        for r in range(repeats):
            log(f"your loader as built, end to end: pass {r + 1}/{repeats}")
            runs.append(_run(loader, step, device, batches, skip, limit, whose, step_name, deadline_s))
        steady = [r["steady"] for r in runs if np.isfinite(r["steady"]) and r["steady"] > 0]
        measured = float(np.median(steady)) if steady else None
        loop = wait_share([w for r in runs for w in r["waits"]], [x for r in runs for x in r["steps"]], W)
    rep = Report.from_dict(_report(table, spec, machine, max_workers, measured, W, B, device, notes, repeats,
                                   batches, steady_runs=steady if measured else None,
                                   window=(min(r["timed"] for r in runs), min(r["window_s"] for r in runs)) if measured else None))
    rep.batches_seen = lens
    if loop is not None:   # the one verdict: the loop's measured data-wait share (the stages explain it)
        load = window.summary()
        one_verdict(rep, dict(loop, source="your loader as built, end to end"), busy=bool(load.get("busy")),
                    loop_busy=(f"other programs used {load.get('other_cpu_cores', float('nan')):.2f} of "
                               f"{load.get('usable_cores', '?')} usable cores") if load.get("busy") else None)
    if measure_advice and measured:
        _measure_advice(rep, loader, step, device, deadline_s, log)
    if ranks is not None:
        rep.ranks_advice = advise_ranks(table, spec, int(ranks))
    if step is not None and not step_cost_s and rep.verdict == "compute-bound":
        log("the step bounds: trying step-side changes on your step")
        rep.step_changes = try_step_changes(step, kept, device, repeats, step_name=step_name,
                                               threads=T_user, only=step_trials, workers=W)
    busy = window.summary()
    rep.load = busy
    if busy.get("busy"):
        rep.notes.append(monitor.busy_message(busy, "the diagnosis"))
    return rep.as_dict()


def _measure_advice(rep: Report, loader, step, device, deadline_s, log) -> None:
    """Measured before advised: the best predicted changes your loader can take (its worker count, pinned
    memory) rebuilt around your dataset and collate, measured against it on your loop (the step, or the wait
    standing in for it) and kept as advice only where judged met (:mod:`feedlab.doctor.advice`)."""
    if no_change_line(rep):
        return
    todo = to_try(rep.advice, ("num_workers", "pin_memory"))
    if not todo:
        rep.tried = []
        return
    names = ", ".join(f"{a['setting']}={a['value']}" for a in todo)
    log(f"measuring {names} against your loader, interleaved")
    changes = [(a, lambda a=a: stage.rebuild(loader, **{a["setting"]: a["value"]})) for a in todo]
    apply_measured(rep, measure_changes(lambda: stage.rebuild(loader), changes, step=step, device=device,
                                        deadline_s=deadline_s, log=log))


def _report(table, spec, machine, max_workers, measured, W, B, device, notes, repeats, batches,
            steady_runs=None, window=None) -> dict:
    pred = PR.predict(table, spec)
    rows = []
    for w in range(0, max_workers + 1):
        p = PR.predict(table, spec.replace(num_workers=w))
        row = {"num_workers": w, "predicted_samples_per_s": p["predicted_samples_per_s"] if p else None,
               "bound_stage": p["bound_stage"] if p else None}
        if w == W and measured:
            row["samples_per_s"] = measured
            row["error"] = row["predicted_samples_per_s"] / measured - 1.0 if p else None
            if steady_runs:   # each pass's steady rate: the one judge reads their spread (audit56 N11)
                row.update(repeats=len(steady_runs), steady_runs=[float(x) for x in steady_runs])
            if window:   # each pass's timed batches and its shortest window: the window the judge reads
                row.update(timed_batches=int(window[0]), window_s=float(window[1]))
        rows.append(row)
    return Report("user", device, device.startswith("cuda"), machine.cores, machine.effective_cores, B, W,
                  spec.as_dict(), [s.row() for s in table.stages.values()], rows, pred, measured,
                  PR.advise(table, spec, max_workers), notes, repeats, headroom(table, spec),
                  extra={"batches": batches}).as_dict()


def headroom(table: CostTable, spec) -> float | None:
    """How many times faster the loader alone (the step priced at zero) is predicted to
    run than the step alone: > 1 means the input pipeline is not what bounds training."""
    T = table.machine.threads(spec.num_workers)
    model = table.nearest(CostKey("model", spec.batch_size, T))
    if model is None or model.t <= 0:
        return None
    stages = {k: (Stage(v.stage, v.variant, [0.0], [0.0]) if k.stage == "model" else v)
              for k, v in table.stages.items()}
    p = PR.predict(CostTable(table.machine, stages), spec)
    if p is None or not np.isfinite(p["predicted_samples_per_s"]):
        return None
    return float(p["predicted_samples_per_s"] * model.t)
