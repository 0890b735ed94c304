"""The doctor's end-to-end measurement: a spec's DataLoader with the loop's step, timed in passes that take
turns (:class:`EndToEnd`, a part of :class:`feedlab.doctor.measure.Doctor`). Each pass times at least the
effort's window (:func:`feedlab.doctor.effort.timed_batches`, sized from untimed passes of the spec itself),
with the CPU capacity and the other programs' load beside it."""

from __future__ import annotations

import time

import numpy as np

from feedlab import formats
from feedlab import pipeline as pl
from feedlab.errors import progress
from feedlab.gpu_decode import EncodedView, is_device_decode
from feedlab.monitor import LoadWindow, speed_left
from feedlab.timing import run_epoch

from .effort import timed_batches
from .probes import capacity_ks, cpu_capacity, round_fits

# a pass whose timed window the first untimed pass put under this many min_window_s is run untimed once more
# (its first pass paid the store's cold start): a setting slower than that sizes from one pass, as before
COLD_PASS_FACTOR = 4.0


def _median(xs) -> float | None:
    v = [x for x in xs if x is not None]
    return float(np.median(v)) if v else None


def _tick(_i, _batch) -> None:   # a batch arrived: progress for the command's deadline (--deadline)
    progress()


class EndToEnd:
    """The end-to-end half of the doctor (needs its ``split``, ``one_process_kinds``, ``effort``, ``table``,
    ``device``, ``model``, ``optimizer``, ``notes``, ``e2e`` and ``e2e_calls``)."""

    def loader(self, spec: pl.PipelineSpec, batches: int | None = None):
        """The DataLoader of ``spec``; with ``batches`` more than the set holds, one pass runs
        successive shuffled passes over it (every sample once per pass), so a small set still
        gives the timed batches a steady rate needs."""
        if is_device_decode(spec.decode_backend):  # workers read bytes; the loop decodes on the device

            split = self.split(spec.format, formats.FORMATS[spec.format].default_decode)
            ds = EncodedView(split.dataset)
        else:
            ds = self.split(spec.format, spec.decode_backend)
            if spec.loader in self.one_process_kinds(spec.format):  # reads whole batches from the store
                ds = ds.dataset
        extra = {}
        n, b = len(ds), int(spec.batch_size)
        if batches and spec.loader == "dataloader" and b <= n < int(batches) * b:  # (a set without one
            # whole batch stays too small: "too few samples")
            import torch
            from torch.utils.data import RandomSampler

            extra["sampler"] = RandomSampler(ds, num_samples=int(batches) * b,
                                             generator=torch.Generator().manual_seed(0))
        return pl.make_loader(ds, spec, drop_last=True, **extra)

    def pass_batches(self, spec: pl.PipelineSpec) -> int:
        """Batches of one end-to-end pass: the warm-up a steady rate leaves out
        (``warmup_batches``: the prefetched batches and the first) + ``e2e_batches`` timed."""
        return pl.warmup_batches(spec) + max(1, int(self.effort.e2e_batches))

    def measure_e2e(self, spec: pl.PipelineSpec, repeats: int | None = None) -> dict:
        """One spec end to end: see :meth:`measure_rounds`."""
        return self.measure_rounds([spec], repeats)[spec.replace(device=self.device)]

    def measure_rounds(self, specs, repeats: int | None = None) -> dict:
        """Samples/s of the DataLoader + step loop for each spec, :meth:`pass_batches` per pass
        (``e2e_batches`` timed after the warm-up), fresh workers each pass, after one untimed
        pass each. The specs take turns, pass
        by pass (so a change in the machine's load falls on all of them alike), and the CPU
        capacity for ``W + 1`` processes is sampled before each pass (and ``pass_speed``: what other programs
        left each of them during the pass, ``monitor.speed_left``). Per spec: ``steady``
        (after the prefetched batches), ``epoch`` (from ``iter()``, start-up included).
        Every call is also kept in ``e2e_calls[spec]`` (a setting measured again keeps its
        earlier measurements: their spread is the run's repeatability)."""
        specs = [s.replace(device=self.device) for s in specs]
        loaders = {s: self.loader(s, self.pass_batches(s)) for s in specs}
        nbs = {s: max(2, min(self.pass_batches(s), len(loaders[s]))) for s in specs}
        runs = {s: {"steady_runs": [], "epoch_runs": [], "capacity": [], "pass_speed": [], "waits": [], "steps": [],
                    "timed": nbs[s] - pl.warmup_batches(s), "windows": []}
                for s in specs}   # waits/steps: each timed batch's data wait and the loop's work on it (the verdict)
        def warm_rate(s):   # one untimed pass; its steady rate sizes the timed window
            w = run_epoch(loaders[s], self.model, self.device, self.optimizer, max_batches=nbs[s], on_batch=_tick)
            return pl.steady_rate(w, skip=min(pl.warmup_batches(s), w.batches - 1)) if w.batches > 1 else None

        for s in specs:
            rate = None
            for _ in range(self.effort.warmup):
                rate = warm_rate(s)
            if rate and self.effort.min_window_s and self.effort.warmup and \
                    runs[s]["timed"] * s.batch_size / rate < COLD_PASS_FACTOR * self.effort.min_window_s:
                # a fast setting's first pass also pays its store's cold start (10 on cpu-2c, 2026-11-28: lmdb_raw
                # read 1,525 samples/s untimed, then 3,400-5,800 timed, each window 0.55 s where 1 s was asked):
                # sized from the faster of two untimed passes
                rate = max(rate, warm_rate(s) or 0.0) or rate
            for again in (False, True):   # a short first pass under-rates a fast setting (its start-up weighs):
                # sized again from one pass of the new length (2026-11-28: a 0.93 s window where 1 s was asked)
                timed = timed_batches(self.effort, rate / s.batch_size if rate else None)
                if timed <= nbs[s] - pl.warmup_batches(s):   # a window of min_window_s: a pass as long as it takes
                    break
                loaders[s] = self.loader(s, pl.warmup_batches(s) + timed)
                nbs[s] = max(2, min(pl.warmup_batches(s) + timed, len(loaders[s])))
                runs[s]["timed"] = nbs[s] - pl.warmup_batches(s)
                rate = None if again else warm_rate(s)
        rounds, last_round_s = repeats or self.effort.repeats, 0.0
        for done in range(rounds):
            t_round = time.perf_counter()
            if done and not round_fits(last_round_s):
                self.notes.append(f"end to end: {done} of {rounds} rounds per setting, the run's limit being near "
                                  f"(a round took {last_round_s:.0f} s)")
                break
            for s in specs:
                threads = self.table.machine.threads(s.num_workers)
                runs[s]["capacity"].append(cpu_capacity(capacity_ks(s.num_workers, threads, self.table.machine.cores),
                                                        seconds=0.1, repeats=1))
                window = LoadWindow()   # the load beside this pass, seen from inside it
                r = run_epoch(loaders[s], self.model, self.device, self.optimizer, max_batches=nbs[s], on_batch=_tick)
                runs[s]["pass_speed"].append(speed_left(window.summary(), s.num_workers + 1))
                skip = min(pl.warmup_batches(s), r.batches - 1)
                runs[s]["steady_runs"].append(pl.steady_rate(r, skip=skip) or r.samples_per_s)
                runs[s]["windows"].append(float(r.phases_s[skip:].sum()))
                runs[s]["waits"] += r.phases_s[skip:, 0].tolist()
                runs[s]["steps"] += r.phases_s[skip:, 1:].sum(axis=1).tolist()
                spawn = max(0.0, r.first_batch_s - float(r.phases_s[0, 0])) if r.batches else 0.0
                runs[s]["epoch_runs"].append(r.samples / (r.wall_s + spawn) if r.wall_s > 0 else 0.0)
            last_round_s = time.perf_counter() - t_round
        for s in specs:
            out = runs[s]
            out.update(steady=float(np.median(out["steady_runs"])), epoch=float(np.median(out["epoch_runs"])),
                       batches=nbs[s])
            self.e2e[s] = out
            k, top = s.num_workers + 1, min(s.num_workers + 1, self.table.machine.cores or s.num_workers + 1)
            speed = float(np.median([min(1.0, c[k] / top) for c in out["capacity"] if k in c] or [np.nan]))
            self.e2e_calls.setdefault(s, []).append(
                {"steady": out["steady"], "steady_runs": list(out["steady_runs"]), "with": len(specs),
                 "speed": speed, "pass_speed": _median(out["pass_speed"])})
        return {s: runs[s] for s in specs}
