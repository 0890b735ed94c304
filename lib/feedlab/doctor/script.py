"""The zero-code entry: ``python -m feedlab.doctor --script train.py [-- args]``.

Your unmodified training script runs in this process for a bounded number of
batches with ``torch.utils.data.DataLoader`` instrumented: each batch's *data wait*
(the time ``next()`` on the loader takes) and *step* (from the batch's arrival to the
next ``next()``: your copy, forward, backward, optimizer, logging) are recorded, and
the loader's settings are read from the object itself. After ``max_batches`` batches
of any one loader the script is stopped (an exception your ``except Exception`` does
not catch), the verdict printed, and the full stage-by-stage diagnosis of that loader
offered (``--diagnose`` runs it: :func:`feedlab.doctor.user.diagnose_loader`, with
the step priced as your script ran it). What ``torch.utils.bottleneck`` does for CPU
profiles, done for the input pipeline.
"""

from __future__ import annotations

import os
import runpy
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .guard import DEFAULT_DEADLINE_S, UserCodeError, deadline

DATA_BOUND_FRACTION = 0.2   # the step waits for data this share of the time or more: the input pipeline bounds


class Enough(BaseException):
    """Raised from inside the instrumented loader once enough batches were seen."""


def loader_settings(loader) -> dict[str, Any]:
    """The settings of a DataLoader, read from the object."""
    ds = loader.dataset
    try:
        n = len(ds)
    except TypeError:
        n = None
    return {"batch_size": getattr(loader, "batch_size", None), "num_workers": loader.num_workers,
            "pin_memory": bool(loader.pin_memory), "prefetch_factor": loader.prefetch_factor,
            "persistent_workers": bool(loader.persistent_workers), "timeout": loader.timeout,
            "drop_last": bool(loader.drop_last), "dataset": type(ds).__name__, "dataset_len": n,
            "collate_fn": getattr(loader.collate_fn, "__name__", type(loader.collate_fn).__name__)}


class Recorder:
    """Per DataLoader: data wait and step seconds of each batch, and its size."""

    def __init__(self, max_batches: int, batch_deadline_s: float | None):
        self.max_batches, self.limit = int(max_batches), batch_deadline_s
        self.loaders: dict[int, dict] = {}

    def wrap(self, loader, it):
        from .user import _batch_len

        rec = self.loaders.setdefault(id(loader), {"loader": loader, "wait": [], "step": [], "step_cpu": [],
                                                   "n": [], "iters": 0})
        rec["iters"] += 1
        t_last = c_last = None
        limit = (loader.timeout or self.limit) if self.limit else None
        while True:
            t0, c0 = time.perf_counter(), time.process_time()
            if t_last is not None:
                rec["step"].append(t0 - t_last)
                rec["step_cpu"].append(c0 - c_last)
            if len(rec["wait"]) >= self.max_batches:
                raise Enough()
            with deadline(limit, f"batch {len(rec['wait'])} of your script's DataLoader",
                          "a sample that never returns hangs training too"):
                try:
                    batch = next(it)
                except StopIteration:
                    return
            t_last, c_last = time.perf_counter(), time.process_time()
            rec["wait"].append(t_last - t0)
            rec["n"].append(_batch_len(batch) or 0)
            yield batch

    def main(self) -> dict | None:
        """The loader that delivered the most batches (the training loader)."""
        recs = [r for r in self.loaders.values() if r["wait"]]
        return max(recs, key=lambda r: len(r["wait"])) if recs else None


def summarize(rec: dict) -> dict:
    """Verdict from data wait vs step, the first batch (start-up) left out."""
    wait, step, n = rec["wait"], rec["step"], rec["n"]
    k = len(step)                              # batches whose step was seen end to end
    w, s, m = np.array(wait[1:k], float), np.array(step[1:k], float), np.array(n[1:k], float)
    out = {"loader": loader_settings(rec["loader"]), "batches": len(wait), "first_batch_wait_s": wait[0]}
    if len(w) < 1 or (w.sum() + s.sum()) <= 0:
        out.update(verdict=None, note=f"your script ran only {len(wait)} batch(es) of this loader: too few to "
                                      "separate data wait from step")
        return out
    total = w.sum() + s.sum()
    frac = float(w.sum() / total)
    out.update({"data_wait_s_per_batch": float(np.median(w)), "step_s_per_batch": float(np.median(s)),
                "data_wait_fraction": frac, "samples_per_s": float(m.sum() / total) if m.sum() else None,
                "step_s_per_sample": float(s.sum() / m.sum()) if m.sum() else None,
                "step_cpu_s_per_sample": float(np.sum(rec["step_cpu"][1:k]) / m.sum()) if m.sum() else None,
                "verdict": "data-bound" if frac >= DATA_BOUND_FRACTION else "compute-bound"})
    return out


def run_script(path, args=(), max_batches: int = 30, deadline_s: float | None = DEFAULT_DEADLINE_S,
               log=lambda m: None) -> tuple[dict, Any]:
    """Run ``path`` as ``__main__`` with ``args`` until one DataLoader delivered
    ``max_batches`` batches (or the script ended); returns (summary, that loader)."""
    from torch.utils.data import DataLoader

    path = Path(path)
    if not path.is_file():
        raise UserCodeError(f"--script {path}: no such file")
    rec = Recorder(max_batches, deadline_s)
    original = DataLoader.__iter__

    def __iter__(self):
        return rec.wrap(self, original(self))

    argv, cwd_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path.resolve().parent))
    DataLoader.__iter__ = __iter__
    stopped = "the script ended"
    log(f"running {path} {' '.join(args)} for at most {max_batches} batches of its DataLoader")
    try:
        runpy.run_path(str(path), run_name="__main__")
    except Enough:
        stopped = f"stopped after {max_batches} batches"
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise UserCodeError(f"--script {path} exited with status {exc.code} before {max_batches} batches") from None
    except UserCodeError:
        raise
    except Exception as exc:
        from feedlab.errors import one_line

        tb = exc.__traceback__
        where = ""
        while tb is not None:
            if os.path.abspath(tb.tb_frame.f_code.co_filename) == str(path.resolve()):
                where = f" at {path.name}:{tb.tb_lineno}"
            tb = tb.tb_next
        raise UserCodeError(f"--script {path} raised {type(exc).__name__}{where}: {one_line(exc)}") from None
    finally:
        DataLoader.__iter__ = original
        sys.argv, sys.path[:] = argv, cwd_path
    main = rec.main()
    if main is None:
        raise UserCodeError(f"--script {path}: no torch.utils.data.DataLoader delivered a batch ({stopped}); "
                            "does the script build its loader under `if __name__ == '__main__':`?")
    out = summarize(main)
    out.update(script=str(path), args=list(args), stopped=stopped, loaders_seen=len(rec.loaders))
    return out, main["loader"]


def render_script(s: dict, offer: bool = True) -> str:
    from .report import fmt_rate

    L = s["loader"]
    lines = [f"feedlab doctor · --script {s['script']} · {s['batches']} batches ({s['stopped']})",
             f"your DataLoader: {L['dataset']} ({L['dataset_len']} samples), batch_size={L['batch_size']}, "
             f"num_workers={L['num_workers']}, pin_memory={L['pin_memory']}, prefetch_factor={L['prefetch_factor']}, "
             f"persistent_workers={L['persistent_workers']}, timeout={L['timeout']}", ""]
    if s.get("verdict") is None:
        lines.append(f"VERDICT: not measured — {s['note']}")
        return "\n".join(lines)
    what = ("the input pipeline bounds training: the step waits for data"
            if s["verdict"] == "data-bound" else "the step bounds training: data is ready when it asks")
    lines += [f"VERDICT: {s['verdict']} — {what}",
              f"per batch (median, first batch left out): data wait {s['data_wait_s_per_batch'] * 1e3:,.1f} ms, "
              f"step {s['step_s_per_batch'] * 1e3:,.1f} ms; waiting for data {100 * s['data_wait_fraction']:.0f}% "
              f"of the time; {fmt_rate(s['samples_per_s'])} samples/s; first batch after "
              f"{s['first_batch_wait_s']:.2f} s{' (worker start-up)' if L['num_workers'] else ''}"]
    if offer and "diagnosis" not in s:
        args = f" -- {' '.join(s['args'])}" if s["args"] else ""
        lines.append(f"the full stage-by-stage diagnosis of this loader (what to change, predicted): "
                     f"python -m feedlab.doctor --script {s['script']} --diagnose{args}")
    return "\n".join(lines)
