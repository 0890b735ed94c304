"""The doctor on your own DataLoader: ``diagnose_loader(loader, step=...)``.

Your loader is rebuilt around wrappers, never changed: its dataset's
``__getitem__`` / ``__getitems__`` (the *fetch*: read + decode + transform, whatever
your dataset does) and its ``collate_fn`` report their wall and CPU time through a
queue (from inside the workers too); one batch's items are handed over by a
one-worker probe (worker and main side); the copy to the device and your
``step(batch)`` are timed in the main process. The same stage-cost model as for
feedlab's own pipelines then predicts the rate for 0…N workers, and your loader as
you built it is measured end to end against it.

    from feedlab.doctor import diagnose_loader, render_user
    print(render_user(diagnose_loader(make_loader(), step=train_step)))
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any, Callable

import numpy as np

from feedlab import pipeline as P

from . import predict as PR
from .costs import CostTable, Stage
from .probes import measure_machine, probe_worker, startup_s, timed


class _Timed:
    """``fn`` timed per call, records ``(stage, wall, cpu, n)`` put on ``queue``."""

    def __init__(self, queue, stage: str):
        self.queue, self.stage = queue, stage

    def _put(self, t0, c0, n):
        self.queue.put((self.stage, time.perf_counter() - t0, time.process_time() - c0, n))


class TimedDataset(_Timed):
    def __init__(self, dataset, queue):
        super().__init__(queue, "fetch")
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        t0, c0 = time.perf_counter(), time.process_time()
        item = self.dataset[i]
        self._put(t0, c0, 1)
        return item

    def __getitems__(self, indices):
        t0, c0 = time.perf_counter(), time.process_time()
        get = getattr(self.dataset, "__getitems__", None)
        items = get(list(indices)) if get is not None else [self.dataset[i] for i in indices]
        self._put(t0, c0, len(indices))
        return items


class TimedCollate(_Timed):
    def __init__(self, fn, queue):
        super().__init__(queue, "collate")
        self.fn = fn

    def __call__(self, items):
        t0, c0 = time.perf_counter(), time.process_time()
        out = self.fn(items)
        self._put(t0, c0, len(items))
        return out


def _rebuild(loader, dataset=None, collate_fn=None, num_workers: int | None = None):
    from torch.utils.data import DataLoader

    if loader.batch_sampler is None:
        raise ValueError("diagnose_loader: the loader has batch_size=None (no automatic batching); "
                         "give it a batch_size")
    w = loader.num_workers if num_workers is None else num_workers
    kw = dict(batch_sampler=loader.batch_sampler, num_workers=w, collate_fn=collate_fn or loader.collate_fn,
              pin_memory=loader.pin_memory, worker_init_fn=loader.worker_init_fn,
              multiprocessing_context=loader.multiprocessing_context)
    if w > 0:
        kw.update(prefetch_factor=loader.prefetch_factor or 2, persistent_workers=False)
    return DataLoader(dataset if dataset is not None else loader.dataset, **kw)


def _to_device(batch, device):
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch


def _drain(q) -> dict[str, list[tuple[float, float, int]]]:
    out: dict[str, list] = {}
    while True:
        try:
            stage, w, c, n = q.get(timeout=0.2)
        except Exception:  # queue.Empty
            return out
        out.setdefault(stage, []).append((w, c, n))


def _per_sample(recs) -> tuple[list[float], list[float]]:
    return [w / max(1, n) for w, _c, n in recs], [c / max(1, n) for _w, c, n in recs]


def _run(loader, step, device, batches: int, skip: int) -> dict:
    """Samples/s of ``batches`` batches, after the first ``skip`` (start-up, prefetch).

    The clock starts before batch ``skip`` is asked for, so its wait is counted with its
    samples; ``skip`` is at most half the batches, so a loader with many workers still
    gets a measurement; with CUDA the device is synchronised before each clock read.
    """
    from feedlab.timing import _sync

    skip = min(int(skip), max(0, batches // 2))
    t_start, n_after, t_after, it = None, 0, None, iter(loader)
    t0 = time.perf_counter()
    for k in range(batches):
        if k == skip:
            _sync(device)
            t_after = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        if k >= skip:
            n_after += _batch_len(batch)
        t_start = t_start or time.perf_counter()
        batch = _to_device(batch, device)
        if step is not None:
            step(batch)
    _sync(device)
    end = time.perf_counter()
    del it
    rate = n_after / (end - t_after) if t_after is not None and end > t_after and n_after else float("nan")
    return {"steady": rate, "first_batch_s": (t_start or end) - t0}


def _batch_len(batch) -> int:
    if isinstance(batch, (list, tuple)):
        return _batch_len(batch[0])
    if isinstance(batch, dict):
        return _batch_len(next(iter(batch.values())))
    return len(batch)


def diagnose_loader(loader, step: Callable[[Any], Any] | None = None, batches: int = 16, repeats: int = 3,
                    device: str | None = None, max_workers: int | None = None) -> dict:
    """Stage costs of your ``loader`` (fetch, collate, hand-over, copy to ``device``,
    ``step``), the rate predicted from them for 0…``max_workers`` workers, your loader
    measured as built (median of ``repeats`` passes of ``batches`` batches), and the
    prediction's error. ``step(batch)`` receives the batch already on ``device``."""
    from feedlab.monitor import usable_cores

    device = P.resolve_device(device)
    W = int(loader.num_workers)
    max_workers = usable_cores() if max_workers is None else int(max_workers)
    max_workers = max(max_workers, W)
    machine = measure_machine(device, max_workers)
    table = CostTable(machine)
    B = int(loader.batch_sampler.batch_size) if hasattr(loader.batch_sampler, "batch_size") else None
    ctx = loader.multiprocessing_context or mp.get_context()
    ctx = mp.get_context(ctx) if isinstance(ctx, str) else ctx
    q = ctx.Queue()
    # 1. fetch and collate in the main process (num_workers=0), in isolation
    iso = _rebuild(loader, TimedDataset(loader.dataset, q), TimedCollate(loader.collate_fn, q), num_workers=0)
    it, batch = iter(iso), None
    for _ in range(min(batches, len(iso))):
        batch = next(it)
        B = B or _batch_len(batch)
    del it
    recs = _drain(q)
    fetch = recs.get("fetch", [])[1:] or recs.get("fetch", [])
    coll = recs.get("collate", [])[1:] or recs.get("collate", [])
    table[("read", "user", "user")] = Stage("fetch", "dataset __getitem(s)__ (read+decode+transform)",
                                            *_per_sample(fetch))
    table[("decode", "user", "user")] = Stage("decode", "inside fetch", [0.0], [0.0])
    table[("transform", "user", "user")] = Stage("transform", "inside fetch", [0.0], [0.0])
    table[("collate", "user", B)] = Stage("collate", f"your collate_fn (batch {B})", *_per_sample(coll))
    # 2. the hand-over of one batch's items, collated in a worker
    if max_workers > 0:
        idx = next(iter(loader.batch_sampler))
        get = getattr(loader.dataset, "__getitems__", None)
        items = get(list(idx)) if get is not None else [loader.dataset[i] for i in idx]
        pr = probe_worker(items, loader.collate_fn, batches=max(4, 4 * repeats))
        per = lambda xs: [x / B for x in xs]  # noqa: E731
        table[("collate_worker", "user", B)] = Stage("collate", "your collate_fn in a worker",
                                                     per(pr["collate_wall"]), per(pr["collate_cpu"]))
        table[("handover_worker", "user", B)] = Stage("handover", "worker → main (worker side)",
                                                      per(pr["handover_cpu"]), per(pr["handover_cpu"]))
        table[("receive", "user", B)] = Stage("receive", "worker → main (main side)", per(pr["receive_cpu"]),
                                              per(pr["receive_cpu"]))
        for w in range(1, max_workers + 1):
            table[("startup", w)] = Stage("startup", f"{w} fresh worker(s)", startup_s(w, repeats), [0.0])
    # 3. copy to the device and the step, on a batch in hand
    from feedlab.timing import torch_threads

    for T in sorted(set(machine.main_threads.values())):
        with torch_threads(T):
            w, c = timed(lambda: _to_device(batch, device), B, 1, repeats,
                         device if device.startswith("cuda") else None)
            table[("h2d", "user", B, False, T)] = Stage("h2d", f"batch to {device}, {T} thread(s)", w, c)
            on_dev = _to_device(batch, device)
            if step is None:
                table[("model", B, T)] = Stage("model", "no step given", [0.0], [0.0])
            else:
                w, c = timed(lambda: step(on_dev), B, 1, repeats, device if device.startswith("cuda") else None)
                table[("model", B, T)] = Stage("model", f"your step, {T} thread(s)", w, c)
    # 4. your loader as built, end to end
    spec = P.PipelineSpec(format="user", decode="user", collate="user", batch_size=B, num_workers=W,
                          device=device)
    skip = P.prefetch_depth(spec)
    runs = [_run(loader, step, device, batches, skip) for _ in range(repeats)]
    steady = [r["steady"] for r in runs if np.isfinite(r["steady"])]
    measured = float(np.median(steady)) if steady else None
    pred = PR.predict(table, spec)
    rows = []
    for w in range(0, max_workers + 1):
        p = PR.predict(table, spec.replace(num_workers=w))
        row = {"num_workers": w, "predicted_samples_per_s": p["predicted_samples_per_s"] if p else None,
               "bound_stage": p["bound_stage"] if p else None}
        if w == W and measured:
            row["samples_per_s"] = measured
            row["error"] = row["predicted_samples_per_s"] / measured - 1.0 if p else None
        rows.append(row)
    return {"batch_size": B, "num_workers": W, "device": device, "cores": machine.cores,
            "effective_cores": machine.effective_cores, "stages": [s.row() for s in table.stages.values()],
            "end_to_end": rows, "measured_samples_per_s": measured,
            "predicted_samples_per_s": pred["predicted_samples_per_s"] if pred else None,
            "bound_stage": pred["bound_stage"] if pred else None, "verdict": pred["verdict"] if pred else None,
            "binding_term": pred["binding_term"] if pred else None,
            "advice": PR.advise(table, spec, max_workers), "repeats": repeats, "batches": batches}


def render_user(rep: dict) -> str:
    from .report import fmt_rate

    lines = [f"feedlab doctor · your DataLoader · batch {rep['batch_size']}, {rep['num_workers']} workers, "
             f"{rep['device']} · {rep['cores']} cores ({rep['effective_cores']:.2f} effective now)", ""]
    for r in rep["stages"]:
        if r.get("measurable") and "s_per_sample" in r:
            lines.append(f"{r['stage']:<10} {r['variant'][:46]:<46} {r['s_per_sample'] * 1e6:>10.1f} µs/sample")
    lines.append("")
    for r in rep["end_to_end"]:
        meas = f"measured {fmt_rate(r['samples_per_s'])} (error {100 * r['error']:+.0f}%)" if "samples_per_s" in r else ""
        lines.append(f"{r['num_workers']:>3} workers: predicted {fmt_rate(r['predicted_samples_per_s'])} samples/s, "
                     f"bound by {r['bound_stage']} {meas}")
    lines.append(f"verdict: {rep['verdict']}, bounded by {rep['bound_stage']} ({rep['binding_term']})")
    for a in rep["advice"]:
        lines.append(f"  set {a['setting']} = {a['value']}: ×{a['expected_gain']:.2f} predicted; {a['why']}")
    return "\n".join(lines)
