"""A diagnosis: the measured table, the DataLoader measured for 0…N workers, the
prediction checked against it (the doctor's own error), the verdict and the advice."""

from __future__ import annotations

import shutil

import numpy as np

from feedlab import pipeline as pl
from feedlab.like_for_like import MAX_HALF_WIDTH, repeat_half_width
from feedlab.machines import worker_ladder
from feedlab.monitor import BUSY_SPEED, process_speed
from feedlab.pipeline import PipelineSpec
from feedlab.timing import to_device_float

from . import predict as PR
from .advice import apply as apply_measured
from .advice import measure_changes, to_try
from .ahead import loop_gain, resize_ahead
from .answer import no_change_line
from .measure import Doctor
from .report import Report
from .user import diagnose_loader, headroom
from .verdict import one_verdict, wait_share


def shm_report(batch_bytes: int, workers: int, prefetch_factor: int = 2, path: str = "/dev/shm") -> dict:
    """Size and free space of ``/dev/shm`` against what in-flight batches need
    (``batch_bytes × prefetch_factor × workers``): DataLoader workers hand batches
    over in shared memory, and a container's small /dev/shm ends in 'Bus error'."""
    need = int(batch_bytes) * int(prefetch_factor) * int(workers)
    try:
        du = shutil.disk_usage(path)
        total, free = int(du.total), int(du.free)
    except OSError as exc:
        return {"path": path, "available": False, "need_bytes": need, "fits": None,
                "warning": f"cannot read {path}: {exc}"}
    fits = need <= free
    warn = "" if fits else (f"{path} has {free / 2**20:.0f} MiB free but {workers} workers × prefetch_factor "
                            f"{prefetch_factor} × {batch_bytes / 2**20:.1f} MiB batches need {need / 2**20:.0f} MiB: "
                            "expect 'Bus error' / 'DataLoader worker killed'; enlarge it (docker --shm-size) "
                            "or lower num_workers, prefetch_factor or batch_size")
    return {"path": path, "available": True, "total_bytes": total, "free_bytes": free, "need_bytes": need,
            "batch_bytes": int(batch_bytes), "prefetch_factor": int(prefetch_factor), "workers": int(workers),
            "fits": fits, "warning": warn}


def _stage_rows(doc: Doctor, spec) -> list[dict]:
    """The table's rows that concern ``spec`` (its format/decode, collate, batch size, threads)."""
    m = doc.table.machine
    T = {m.threads(spec.num_workers)}
    fd = (spec.format, spec.decode_backend)
    rows = []
    for key, st in doc.table.stages.items():
        kind = key.stage
        if kind in ("read", "read_cold", "decode", "transform") and (key.format, key.decode) != fd:
            continue
        if kind in ("collate", "collate_worker", "handover_worker", "receive", "h2d", "h2d_copy") and \
                (key.collate, key.batch_size) != (spec.collate, spec.batch_size):
            continue
        if kind == "ring_receive" and key.batch_size != spec.batch_size:
            continue
        if kind == "h2d" and key.threads not in T:
            continue
        if kind == "model" and (key.batch_size != spec.batch_size or key.threads not in T):
            continue
        rows.append(st.row())
    return rows


def _rate(x) -> bool:
    """A rate that can be divided by: finite and above zero."""
    return x is not None and np.isfinite(x) and x > 0


def _one_rate_per_setting(advice: list[dict], rows: list[dict], spec) -> list[dict]:
    """Worker-count advice priced with the same prediction as that count's row of the
    table (one predicted rate per setting in the whole report)."""
    by_w = {r["num_workers"]: r["predicted_samples_per_s"] for r in rows}
    base = by_w.get(spec.num_workers)
    out = []
    for a in advice:
        if a["setting"] == "num_workers" and base and by_w.get(a["value"]):
            a = dict(a, predicted_samples_per_s=by_w[a["value"]], expected_gain=by_w[a["value"]] / base)
            if a["expected_gain"] < PR.MIN_GAIN:
                continue
        out.append(a)
    return sorted(out, key=lambda a: -a["expected_gain"])


def measured_rates(doc: Doctor) -> dict:
    """spec → median steady samples/s, for every spec measured end to end."""
    return {s: r["steady"] for s, r in doc.e2e.items()}


def anchor_on(doc, spec) -> dict | None:
    """Scale the doctor's predictions to ``spec``'s rate measured end to end (``doc.anchor``; #46): the
    probes and the loop run at different moments of a shared machine whose cores' speed moves between them
    (notebook 10 on cpu-2c, 2026-11-28: one run's probes priced every setting a fifth to a third over its
    loop, the next run's within 8%), which the CPU capacity sampled beside each pass cannot see (it counts
    CPU-seconds, not the work done in them). The prediction then prices each change against the start as the
    loop measured it; the start's own row is the anchor, measured and never counted as a prediction. Not
    anchored where the start's passes are not a rate or ran while another program used the CPU."""
    doc.anchor = None
    s = spec.replace(device=doc.device)
    r = doc.e2e.get(s)
    if not r or not _rate(r.get("steady")):
        return None
    table = doc.table_now(s)   # not anchored yet: the stages as the probes priced them
    raw = PR.predict(table, s)
    if not raw or not _rate(raw["predicted_samples_per_s"]):
        return None
    passes = [x for x in r.get("pass_speed") or [] if x is not None]
    speed = process_speed(table.machine.cap(s.num_workers + 1), s.num_workers + 1, doc.table.machine.cores,
                          float(np.median(passes)) if passes else None)
    if speed is not None and speed < BUSY_SPEED:
        doc.notes.append("predictions not anchored on the start's measured rate: its passes ran while another "
                         f"program used the CPU ({speed:.2f} of a core a process, under {BUSY_SPEED:g})")
        return None
    m, p = float(r["steady"]), float(raw["predicted_samples_per_s"])
    doc.anchor = {"setting": s.label(), "factor": m / p, "measured": m, "probes_predicted": p,
                  "probe_error": p / m - 1.0}
    return doc.anchor


def diagnose(doc, spec=None, e2e: bool = True, *, step=None, measure_advice: bool = False, **loader_kw) -> dict:
    """The full report for ``spec``: stage table, predicted rates for 0…max workers and measured ones
    on a ladder of them (:func:`feedlab.machines.worker_ladder`) with the prediction's error, verdict, advice (checked against what
    was measured), the /dev/shm check.

    ``diagnose(loader, step=train_step)`` with your own ``DataLoader`` instead of a
    :class:`Doctor` diagnoses that loader (:func:`feedlab.doctor.user.diagnose_loader`).
    ``measure_advice``: the best predicted changes measured against the spec on the same loop (interleaved
    trials, :mod:`feedlab.doctor.advice`) before any is advised."""
    if not isinstance(doc, Doctor):
        return diagnose_loader(doc, step=step, measure_advice=measure_advice, **loader_kw)
    spec = spec.replace(device=doc.device)
    if e2e:   # every count to 4, then steps of about ×1.5 (16 cores: 9 counts, not 17), and the spec's own
        ladder = worker_ladder(doc.max_workers, also=(spec.num_workers,))
        doc.log(f"end to end with {', '.join(map(str, ladder))} workers, taking turns")
        doc.measure_rounds([spec.replace(num_workers=w) for w in ladder])
        anchor_on(doc, spec)
    pred = PR.predict(doc.table, spec)
    rows = []
    for w in range(0, doc.max_workers + 1):
        s = spec.replace(num_workers=w)
        table = doc.table_now(s)
        p = PR.predict(table, s, batches=doc.pass_batches(s))
        row = {"num_workers": w, "main_threads": doc.table.machine.threads(w),
               "capacity_now": table.machine.cap(w + 1),
               "predicted_samples_per_s": p["predicted_samples_per_s"] if p else None,
               "predicted_epoch_samples_per_s": p["predicted_epoch_samples_per_s"] if p else None,
               "bound_stage": p["bound_stage"] if p else None}
        if s in doc.e2e and not _rate(doc.e2e[s]["steady"]):
            row["not_measured"] = "too few samples"
        elif s in doc.e2e:
            r = doc.e2e[s]
            q25, q75 = np.percentile(r["steady_runs"], [25, 75])
            row.update({"samples_per_s": r["steady"], "samples_per_s_q25": float(q25),
                        "samples_per_s_q75": float(q75), "epoch_samples_per_s": r["epoch"],
                        "repeats": len(r["steady_runs"]),
                        "steady_runs": [float(x) for x in r["steady_runs"]]})   # each repeat: the judge's spread
            if r.get("windows"):   # each pass's timed batches and its shortest window: the one judge's to read
                row.update(timed_batches=int(r["timed"]), window_s=float(min(r["windows"])))
            if any(x is not None for x in r.get("pass_speed") or []):   # what others left its passes
                row["pass_speed"] = float(np.median([x for x in r["pass_speed"] if x is not None]))
            if p and _rate(r["steady"]):
                row["error"] = p["predicted_samples_per_s"] / r["steady"] - 1.0
            if p and _rate(r["epoch"]):
                row["epoch_error"] = p["predicted_epoch_samples_per_s"] / r["epoch"] - 1.0
        rows.append(row)
    if any(not _rate(doc.e2e[s]["steady"]) for s in doc.e2e if s.num_workers <= doc.max_workers):
        doc.notes.append(f"too few samples to measure a steady rate end to end (batch {spec.batch_size}, "
                         f"{doc.effort.e2e_batches} timed batches asked for): give more images or a smaller --batch-size")
    for r in rows:   # measured while another program took the CPU: too busy to judge, not an error figure
        r["speed"] = process_speed(r["capacity_now"], r["num_workers"] + 1, doc.table.machine.cores,
                                   r.get("pass_speed"))
        r["too_busy"] = "error" in r and r["speed"] is not None and r["speed"] < BUSY_SPEED
    for r in rows:   # the anchor is measured, not predicted: named, never counted as an error
        if doc.anchor and r["num_workers"] == spec.num_workers and "error" in r:
            r.update(anchor=True, probes_predicted_samples_per_s=doc.anchor["probes_predicted"])
    errors = [abs(r["error"]) for r in rows if "error" in r and not r["too_busy"] and not r.get("anchor")]
    measured = {k: v for k, v in measured_rates(doc).items() if _rate(v)}
    advice = _one_rate_per_setting(PR.advise(doc.table, spec, doc.max_workers, measured=measured), rows, spec)
    row_now = next((r for r in rows if r["num_workers"] == spec.num_workers), None)
    if row_now and row_now["predicted_samples_per_s"] is not None:   # the verdict's rate is the table's
        pred = dict(pred or {}, predicted_samples_per_s=row_now["predicted_samples_per_s"])
    m = doc.table.machine
    bb = doc.batch_bytes.get((spec.collate, spec.batch_size), 0)
    extra = {"data": str(doc.root) if doc.root else None, "format": spec.format,
             "capacity": {str(k): v for k, v in m.capacity.items()}, "speed_one": m.speed(1), "model": doc.model_name,
             "calibration": {"max_abs_error": max(errors) if errors else None,
                             "within_20pct": all(e <= 0.2 for e in errors) if errors else None,
                             "not_judged": not_judged(rows) if errors else None,
                             "too_busy": [r["num_workers"] for r in rows if r["too_busy"]],
                             **({"anchor": dict(doc.anchor)} if doc.anchor else {})},
             "refuted": PR.refuted(doc.table, spec, doc.max_workers, measured=measured),
             "shm": shm_report(bb, max(spec.num_workers, doc.max_workers)), "warmup": doc.effort.warmup}
    rep = Report("data", doc.device, doc.cuda, m.cores, m.effective_cores, spec.batch_size, spec.num_workers,
                 spec.as_dict(), _stage_rows(doc, spec), rows, pred, measured.get(spec), advice, list(doc.notes),
                 doc.effort.repeats, headroom(doc.table, spec), extra)
    loop = loop_share(doc, spec)
    if loop is not None:   # the one verdict, as --script and --loader give it: the loop's measured data-wait share
        busy_now = bool(row_now and row_now.get("too_busy"))
        one_verdict(rep, dict(loop, source="feedlab's pipeline as specified, end to end"), busy=busy_now,
                    loop_busy=(f"another program used the CPU (its passes got {row_now['speed']:.2f} of a core a "
                               f"process, under {BUSY_SPEED:g})") if busy_now else None)
    if rep.bound_stage in ("decode", "transform"):   # resize once ahead, measured on a sample
        split = doc.split(spec.format, spec.decode_backend)
        r = resize_ahead(split, doc._indices(len(split))[:16], doc.effort.warmup, doc.effort.repeats)
        if r is not None:
            rep.resize_ahead = dict(r, loop_gain_predicted=loop_gain(doc.table, spec, r))
    if measure_advice and not no_change_line(rep):
        _measure_advice(doc, spec, rep)
    return rep.as_dict()


def loop_share(doc: Doctor, spec) -> dict | None:
    """The data-wait share of the doctor's own loop at ``spec`` (every timed batch of its end-to-end passes:
    the wait for the batch, then the copy and the step on it), by the one rule of :mod:`feedlab.doctor.verdict`;
    None where that setting was not measured end to end."""
    r = doc.e2e.get(spec.replace(device=doc.device)) or {}
    if not r.get("waits"):
        return None
    return wait_share(r["waits"], r["steps"], spec.num_workers)


DATA_SETTINGS = ("num_workers", "format", "decode", "collate", "pin_memory", "loader")   # batch size: a recipe


def _measure_advice(doc: Doctor, spec, rep: Report) -> None:
    """The best predicted changes of feedlab's pipeline (worker count, format, decode, collate, pinned memory,
    loader kind) measured against ``spec`` on the doctor's loop, interleaved; advice only where judged met."""
    todo = to_try(rep.advice, DATA_SETTINGS)
    if not todo:
        rep.tried = []
        return
    doc.log(f"measuring {', '.join(str(a['setting']) + '=' + str(a['value']) for a in todo)} against the start")

    def make(s):
        return lambda: doc.loader(s.replace(device=doc.device))

    changes = [(a, make(PipelineSpec(**a["config"]))) for a in todo]
    apply_measured(rep, measure_changes(make(spec), changes, step=data_step(doc), device=doc.device,
                                        deadline_s=None, log=doc.log))


def data_step(doc: Doctor):
    """The doctor's loop step on a batch of feedlab's pipeline: uint8 → float on the device, then the model's
    training step (none with ``--model none``), as ``timing.run_epoch`` runs it."""
    def step(batch):
        x, y = batch if isinstance(batch, (list, tuple)) and len(batch) == 2 else (batch, None)
        x = to_device_float(x, doc.device, False)
        y = to_device_float(y, doc.device, False) if y is not None else None
        if doc.model is not None:
            pl.train_step(doc.model, doc.optimizer, x, y, doc.loss_fn)
    return step


def _spread(runs) -> float | None:
    """A row's repeats' 95% half-width as the one judge reads it (``like_for_like.spread_of``): 0 within the ±5%
    each window is timed to; None with fewer than two repeats."""
    h = repeat_half_width(runs or [])
    return None if h is None else (0.0 if h <= MAX_HALF_WIDTH else h)


def not_judged(rows: list[dict], bound: float = 0.2) -> str | None:
    """Why the worker counts' point errors cannot be judged against ``bound`` (audit57 N15), by the spread rule of
    ``report.doctor_judge.spread_words``: each row's repeats' half-width, and the anchor's where the predictions are
    scaled to it, combined in quadrature (independent passes), widen the error's interval; a row whose interval lies
    either side of the bound, or that records no spread of repeats, leaves the largest error a point value. None: every
    row's interval lies on one side of it. (The docs read the same rows through ``report.doctor_judge``, which also
    reads each side's window.)"""
    anchor = next((r for r in rows if r.get("anchor")), None)
    h_a = 0.0 if anchor is None else _spread(anchor.get("steady_runs"))
    if h_a is None:
        return "the anchor's repeats' spread was not recorded"
    for r in rows:
        if "error" not in r or r.get("too_busy") or r.get("anchor"):
            continue
        h_own = _spread(r.get("steady_runs"))
        if h_own is None:
            return f"{r['num_workers']} workers: one repeat, no spread"
        h = float(np.hypot(h_own, h_a))
        ratio = 1.0 + r["error"]
        lo, hi = ratio / (1 + h), (ratio / (1 - h) if h < 1 else np.inf)
        e_lo = 0.0 if lo <= 1 <= hi else min(abs(lo - 1), abs(hi - 1))
        if e_lo <= bound <= max(abs(lo - 1), abs(hi - 1)):
            return (f"{r['num_workers']} workers' repeats" + (" and the anchor's" if h_a else "")
                    + f" spread ±{h:.1%} (95%, t): its error could be either side of ±{100 * bound:.0f}%")
    return None
