"""From a table of stage costs to a predicted rate, a bounding stage and advice.

Pure functions of a :class:`~feedlab.doctor.costs.CostTable` (measured or written by
hand) and the :class:`~feedlab.doctor.costs.Machine` in it; nothing here runs a
loader or times anything.

The model, for a spec with ``W`` workers, batch ``B``, on ``C`` effective cores:

* ``W = 0``: every stage runs in series in the main process, the collate without
  shared memory, the step with the main process's default threads:
  ``rate = 1 / (read + decode + transform + collate + h2d + model)``.
* ``W > 0``: three ceilings, the smallest wins and names the bound:
  *workers* ``W / t_w`` with ``t_w = read + decode + transform + collate_in_worker +
  handover`` (a worker is single-threaded; the batch is built in shared memory and
  handed over), *main process* ``1 / t_m`` with ``t_m = receive + h2d + model`` (at
  the threads ``run_epoch`` gives it beside ``W`` workers), and *CPU*
  ``cap(W + q) / (cpu_w + cpu_m)``: workers and the main process (``q`` busy threads,
  at most ``T``) share what the machine gives ``W + q`` busy threads (``Machine.cap``,
  measured: ``min(W + q, C)`` on an idle machine, less on a shared one). Contention (:func:`contended`): a worker
  stage runs on one thread at the speed ``W`` busy processes get; a main-process stage
  on up to ``T`` threads, each at the speed ``W + T`` busy threads get; a stage measured
  with several threads is priced by its CPU time where it gets fewer; the waiting part
  (I/O) does not scale.
* Start-up: the first batch arrives after ``startup(W) + B · t_w``; an epoch of ``N``
  batches takes ``startup(W) + N · B / rate + B · t_m`` (workers run from the start,
  prefetching while the first batch is awaited).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from feedlab.gpu_decode import DEVICE_DECODERS
from feedlab.pipeline.kinds import UINT8_COLLATES

from .costs import BOUND_STAGES, MAIN_STAGES, WORKER_STAGES, CostKey, CostTable
from .settings import SETTINGS, Change

MIN_GAIN = 1.05


def _decode(spec) -> str:
    return spec.decode_backend


def _first(table: CostTable, *keys):
    for k in keys:
        s = table.get(k)
        if s is not None:
            return s
    return None


def costs(table: CostTable, spec) -> dict[str, tuple[float, float]] | None:
    """(wall, cpu) seconds per sample of every stage of ``spec``; None if one is unmeasured."""
    m = table.machine
    W, B, c = int(spec.num_workers), int(spec.batch_size), spec.collate
    fmt, dec = spec.format, _decode(spec)
    pin = bool(spec.pin_memory and m.cuda)
    T = m.threads(W)
    out: dict[str, tuple[float, float]] = {}
    for stage in ("read", "decode", "transform"):
        s = table.get(CostKey(stage, fmt, dec))
        if s is None:
            return None
        out[stage] = (s.t, s.c)
    # the same stored bytes are read whichever backend decodes them: one read cost per format
    # (the median over the decoders it was measured for), so a cheaper decode is never priced slower
    reads = [table.get(k) for k in table.keys_of("read") if k.format == fmt]
    reads = [s for s in reads if s is not None]
    if len(reads) > 1:
        out["read"] = (float(np.median([s.t for s in reads])), float(np.median([s.c for s in reads])))
    if W == 0:
        s = table.get(CostKey("collate", c, B))
    else:
        s = _first(table, CostKey("collate_worker", c, B), CostKey("collate", c, B))
    if s is None:
        return None
    out["collate"] = (s.t, s.c)
    zero = (0.0, 0.0)
    hw = table.get(CostKey("handover_worker", c, B)) if W else None
    rc = table.get(CostKey("receive", c, B)) if W else None
    out["handover"] = (hw.t, hw.c) if hw else zero
    out["receive"] = (rc.t, rc.c) if rc else zero
    kind = getattr(spec, "loader", "dataloader")
    if kind == "ring":  # a worker copies each sample into a ring slot; the main process takes an index
        if W < 1 or c not in UINT8_COLLATES:
            return None
        fill, ring = table.get(CostKey("collate", c, B)), table.get(CostKey("ring_receive", B))
        if fill is None or ring is None:
            return None
        out["collate"], out["handover"], out["receive"] = (fill.t, fill.c), zero, (ring.t, ring.c)
    elif kind != "dataloader":  # a one-process kind reading whole batches: its own loop, measured
        k = table.get(CostKey("kind", fmt, kind, B))
        if k is None or W:
            return None
        out["read"], out["decode"], out["transform"], out["collate"] = (k.t, k.c), zero, zero, zero
    h = table.nearest(CostKey("h2d", c, B, pin, T))
    mo = table.nearest(CostKey("model", B, T))
    if h is None or mo is None:
        return None
    out["h2d"] = (h.t, h.c)
    out["model"] = (mo.t, mo.c)
    if dec in DEVICE_DECODERS:  # the batch's bytes decoded on the device by the main process, with the copy
        d = out["decode"]
        out["decode"], out["collate"] = (0.0, 0.0), (0.0, 0.0)
        out["h2d"] = (out["h2d"][0] + d[0], out["h2d"][1] + d[1])
    return out


def contended(wall: float, cpu: float, s1: float, threads: int, others: float, machine) -> float:
    """A stage's wall time where it runs: with at most ``threads`` intra-op threads,
    beside ``others`` busy processes, on ``machine``.

    Measured alone, the stage took ``wall`` seconds and ``cpu`` CPU-seconds at one
    process's speed ``s1``: it kept ``p = cpu / (wall · s1)`` threads busy (1 for a
    one-thread stage; below 1 it waited, e.g. on I/O, and the waiting part does not
    scale). Where it runs it keeps ``p' = min(p, threads)`` busy, each at the speed that
    ``others + p'`` busy processes get (``Machine.speed``): its CPU work takes
    ``cpu / (p' · speed(others + p'))``. So a stage measured with two threads takes twice
    its wall in a one-thread worker, and the main process's threads beside ``W`` busy
    workers share the cores with them."""
    if wall <= 0 and cpu <= 0:
        return 0.0
    p = max(1.0, cpu / (wall * s1)) if wall > 0 and s1 > 0 else 1.0
    busy = cpu / (p * s1) if s1 > 0 else wall
    io = max(0.0, wall - busy)
    q = max(1.0, min(p, float(threads)))
    s = machine.speed(others + q)
    return io + (cpu / (q * s) if s > 0 else math.inf)


def shared_threads(threads: int, workers: int, cores: int | None) -> int:
    """The main process's intra-op threads that still run in parallel beside ``workers`` busy workers on
    ``cores`` cores: the cores the workers do not hold, at least one. On 2 cores with 2 workers the step's
    threads are on the workers' cores: a parallel region waits for its slowest thread, which waits for a
    core, so the step runs as if on one thread at the shared speed (the super-resolution example: a
    2-thread step beside ``num_workers=2`` was credited ×1.71 and measured ×0.79–0.85, #46)."""
    t = max(1, int(threads))
    if not cores or workers <= 0:
        return t
    return max(1, min(t, int(cores) - int(workers)))


def main_busy_threads(wall: dict, cpu: dict, s1: float, threads: int) -> float:
    """The most threads a main-process stage keeps busy (1 … ``threads``): the CPU the
    workers and the main process share is what ``W`` + that many busy threads get."""
    q = 1.0
    for s in MAIN_STAGES:
        w, c = wall.get(s, 0.0), cpu.get(s, 0.0)
        if w > 0 and c > 0 and s1 > 0:
            q = max(q, min(float(threads), c / (w * s1)))
    return q


def predict(table: CostTable, spec, batches: int | None = None) -> dict | None:
    """Predicted steady samples/s of ``spec``, the stage that bounds it, and (with
    ``batches``) the first-batch time and the rate over an epoch of that many batches."""
    cs = costs(table, spec)
    if cs is None:
        return None
    m = table.machine
    W, B = int(spec.num_workers), int(spec.batch_size)
    wall = {k: v[0] for k, v in cs.items()}
    cpu = {k: v[1] for k, v in cs.items()}
    s1 = m.measured_at()   # the speed the stages were measured at (one busy process)
    T = m.threads(W)
    if W == 0:
        eff = {s: contended(wall[s], cpu[s], s1, T, 0, m) for s in wall}
        t_w = sum(eff[s] for s in WORKER_STAGES)
        t_m = sum(eff[s] for s in MAIN_STAGES)
        t = t_w + t_m
        rate = 1.0 / t if t > 0 else math.inf
        bound = max(BOUND_STAGES, key=lambda s: eff[s])
        term = "serial (num_workers=0: every stage in the main process)"
        terms = {"serial": rate}
    else:
        # W one-thread workers busy, each at the speed W busy processes get; the main
        # process's T threads beside them (contention: see contended())
        sw = m.speed(W)
        Tm = shared_threads(T, W, m.cores)
        eff = {s: contended(wall[s], cpu[s], s1, 1, W - 1, m) if s in WORKER_STAGES
               else contended(wall[s], cpu[s], s1, Tm, W, m) for s in wall}
        t_w = sum(eff[s] for s in WORKER_STAGES)
        t_m = sum(eff[s] for s in MAIN_STAGES)
        c_all = sum(cpu[s] for s in WORKER_STAGES) + sum(cpu[s] for s in MAIN_STAGES)
        k = W + main_busy_threads(wall, cpu, s1, Tm)
        terms = {"workers": W / t_w if t_w > 0 else math.inf,
                 "main process": 1.0 / t_m if t_m > 0 else math.inf,
                 "CPU": m.cap(k) / c_all if c_all > 0 else math.inf}
        which = min(terms, key=terms.get)
        rate = terms[which]
        if which == "workers":
            bound = max(WORKER_STAGES, key=lambda s: eff[s])
            term = f"workers: {W} × 1/(read+decode+transform+collate+handover) at speed {sw:.2f}"
        elif which == "main process":
            bound = max(MAIN_STAGES, key=lambda s: eff[s])
            term = f"main process: 1/(receive+h2d+model) at {m.threads(W)} thread(s)"
        else:
            bound = max(BOUND_STAGES, key=lambda s: cpu[s])
            term = f"CPU: {m.cap(k):.2f} CPU-s/s for {W} workers and the main process ({k - W:g} thread(s))"
    out: dict[str, Any] = {
        "config": spec.as_dict(), "predicted_samples_per_s": rate, "bound_stage": bound,
        "verdict": "compute-bound" if bound == "model" else "data-bound", "binding_term": term,
        "ceilings": terms, "costs": cs, "main_threads": m.threads(W),
    }
    if batches:
        st = table.get(CostKey("startup", W))
        startup = st.t if (st is not None and W > 0) else 0.0
        if W == 0:
            first = B * (t_w + t_m)
            total = batches * B / rate if rate > 0 else math.inf
        else:
            first = startup + B * t_w
            total = startup + batches * B / rate + B * t_m
        out["predicted_first_batch_s"] = first
        out["predicted_epoch_samples_per_s"] = batches * B / total if total > 0 else math.inf
    return out


def candidates(table: CostTable, spec, max_workers: int) -> list[tuple[str, Any, Any]]:
    """Every single-setting change the table can price: (setting, value, new spec)."""
    out: list[tuple[str, Any, Any]] = []
    for w in range(0, int(max_workers) + 1):
        if w != spec.num_workers:
            out.append(("num_workers", w, spec.replace(num_workers=w)))
    for c in sorted(table.values_of("collate", "collate") - {spec.collate}):
        out.append(("collate", c, spec.replace(collate=c)))
    dec = _decode(spec)
    item = {(k.format, k.decode) for k in table.keys_of("read") if table.get(k) is not None}
    for d in sorted({d for f, d in item if f == spec.format} - {dec}):
        out.append(("decode", d, spec.replace(decode=d)))
    for f, d in sorted((f, d) for f, d in item if f != spec.format):
        out.append(("format", f, spec.replace(format=f, decode=d)))
    for bs in sorted(table.values_of("model", "batch_size") - {spec.batch_size}):
        out.append(("batch_size", bs, spec.replace(batch_size=bs)))
    if table.machine.cuda:
        out.append(("pin_memory", not spec.pin_memory, spec.replace(pin_memory=not spec.pin_memory)))
    kind = getattr(spec, "loader", "dataloader")
    # the loader kinds the table prices (the DataLoader and the ring), where the spec can use them as it is
    if kind != "ring" and spec.num_workers >= 1 and spec.collate in UINT8_COLLATES \
            and table.get(CostKey("ring_receive", spec.batch_size)) is not None:
        out.append(("loader", "ring", spec.replace(loader="ring")))
    for k in sorted({key.loader for key in table.keys_of("kind") if key.format == spec.format
                     and key.batch_size == spec.batch_size and table.get(key) is not None} - {kind}):
        if spec.collate in UINT8_COLLATES:
            out.append(("loader", k, spec.replace(loader=k, num_workers=0)))
    if kind != "dataloader":
        out.append(("loader", "dataloader", spec.replace(loader="dataloader")))
    return out


def advise(table: CostTable, spec, max_workers: int, min_gain: float = MIN_GAIN,
           measured: Mapping | None = None) -> list[dict]:
    """Single-setting changes predicted to raise the rate by ``min_gain`` or more, best
    first. ``measured`` (spec → measured samples/s) checks the advice: a change whose
    measured gain is below ×1.0 is kept out of the advice (it is listed by
    :func:`refuted`)."""
    return [a for a in _priced(table, spec, max_workers, min_gain, measured) if not a.get("measured_slower")]


def refuted(table: CostTable, spec, max_workers: int, min_gain: float = MIN_GAIN,
            measured: Mapping | None = None) -> list[dict]:
    """Changes predicted to gain but measured slower in the same run."""
    return [a for a in _priced(table, spec, max_workers, min_gain, measured) if a.get("measured_slower")]


def _priced(table, spec, max_workers, min_gain, measured) -> list[dict]:
    base = predict(table, spec)
    if base is None or base["predicted_samples_per_s"] <= 0:
        return []
    out = []
    for setting, value, new in candidates(table, spec, max_workers):
        p = predict(table, new)
        if p is None:
            continue
        gain = p["predicted_samples_per_s"] / base["predicted_samples_per_s"]
        if gain < min_gain:
            continue
        a = {"setting": setting, "value": value, "config": new.as_dict(),
             "predicted_samples_per_s": p["predicted_samples_per_s"], "expected_gain": gain,
             "bound_stage_after": p["bound_stage"], "why": why(table, setting, spec, new, base)}
        if measured and spec in measured and new in measured and measured[spec] > 0:
            a["measured_gain"] = measured[new] / measured[spec]
            a["measured_slower"] = a["measured_gain"] < 1.0
        out.append(a)
    out.sort(key=lambda a: -a["expected_gain"])
    return out


def why(table: CostTable, setting: str, old, new, base: dict) -> str:
    """Why changing ``setting`` from ``old`` to ``new`` is predicted to help (``settings.SETTINGS``)."""
    row = SETTINGS.get(setting)
    if row is None:
        return ""
    return row.reason(Change(old, new, costs(table, old), costs(table, new), base, table.machine.effective_cores))


def calibration(table: CostTable, spec, measured: Mapping[int, dict], batches: int | None = None) -> list[dict]:
    """Predicted against measured for each worker count: ``measured[w]`` holds
    ``steady`` (and optionally ``epoch``) samples/s; error = predicted / measured - 1."""
    rows = []
    for w in sorted(measured):
        p = predict(table, spec.replace(num_workers=w), batches=batches)
        meas = measured[w]
        row = {"num_workers": w, "predicted_samples_per_s": p["predicted_samples_per_s"] if p else None,
               "samples_per_s": meas.get("steady")}
        if p and meas.get("steady"):
            row["error"] = p["predicted_samples_per_s"] / meas["steady"] - 1.0
        if p and meas.get("epoch") and batches:
            row["predicted_epoch_samples_per_s"] = p["predicted_epoch_samples_per_s"]
            row["epoch_samples_per_s"] = meas["epoch"]
            row["epoch_error"] = p["predicted_epoch_samples_per_s"] / meas["epoch"] - 1.0
        rows.append(row)
    return rows
