"""Timeline of a loader run as Chrome trace JSON (opens in Perfetto / chrome://tracing).

What lands on the timeline:

* in every process that fetches (each DataLoader worker, or the main process
  with ``num_workers=0``): ``fetch`` (the dataset reading the batch's items),
  ``collate``, and an enclosing ``batch`` span, recorded by
  :class:`TracedDataset` / :class:`TracedCollate`: the stage instrument of :mod:`feedlab.stage`
  (the doctor's and :func:`feedlab.timing.stage_times`'s too) read by :class:`SpanSink`;
* in the main process, from a :class:`feedlab.timing.PhaseTimer`: a ``step``
  span per batch holding ``data_wait``, ``h2d``, ``forward``, ``backward``
  (host clock; on CUDA the device durations from the timer's events go on an
  extra ``cuda (events)`` track).

``time.perf_counter`` is ``CLOCK_MONOTONIC`` on Linux, one clock for every
process on the machine, so worker and main spans share a time axis. Workers
append one JSON line per span to ``spans-<pid>.jsonl`` in the tracer's
directory (one ``os.write`` per span, nothing to flush when a worker exits).

Batches are numbered by :class:`TaggedBatchSampler`, which hands the workers
index lists that carry ``(epoch, batch)``; the DataLoader keeps sampler order,
so batch ``k`` of the main loop is batch ``k`` of the sampler.

    tracer = Tracer()
    loader = tracer.loader(dataset, batch_size=64, num_workers=2, collate_fn=fn)
    timer = PhaseTimer(device)
    run_epoch(loader, model, device, timer=timer)
    tracer.add_timer(timer, epoch=0)
    tracer.write("trace.json")
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from feedlab import stage
from feedlab.results import atomic_write
from feedlab.timing import PHASES, PhaseTimer, run_epoch

perf_counter = time.perf_counter

MAIN_TID = 1
CUDA_TID = 2

# ---------------------------------------------------------------- recording side


class _Recorder:
    """Appends spans of this process to ``<dir>/spans-<pid>.jsonl``."""

    def __init__(self, directory: str):
        self.directory = directory
        self._fd: int | None = None
        self._pid: int | None = None
        self.current: tuple[Any, float] | None = None  # (tag, fetch start) of the batch in hand

    def __getstate__(self):
        return {"directory": self.directory, "_fd": None, "_pid": None, "current": None}

    def __setstate__(self, state):
        self.__dict__.update(state)

    def _open(self) -> int:
        pid = os.getpid()
        if self._fd is None or self._pid != pid:
            path = os.path.join(self.directory, f"spans-{pid}.jsonl")
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self._pid = pid
        return self._fd

    def record(self, name: str, t0: float, t1: float, tag, **args) -> None:
        worker = _worker_id()
        line = json.dumps([name, t0, t1, os.getpid(), worker, tag, args], separators=(",", ":"))
        os.write(self._open(), (line + "\n").encode())


def _worker_id():
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    return None if info is None else int(info.id)


class TaggedIndices(list):
    """The index list of one batch, carrying ``tag = (epoch, batch)``."""

    def __init__(self, items: Iterable[int], tag: tuple[int, int]):
        super().__init__(items)
        self.tag = tag

    def __reduce__(self):
        return (TaggedIndices, (list(self), self.tag))


class TaggedBatchSampler:
    """Wraps a batch sampler; each yielded index list carries ``(epoch, batch)``.
    ``epoch`` counts the iterations over this sampler, from 0."""

    def __init__(self, batch_sampler: Iterable[list[int]]):
        self.batch_sampler = batch_sampler
        self.epoch = -1

    def __len__(self) -> int:
        return len(self.batch_sampler)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[TaggedIndices]:
        self.epoch += 1
        epoch = self.epoch
        for k, idx in enumerate(self.batch_sampler):
            yield TaggedIndices(idx, (epoch, k))


class SpanSink:
    """The tracer's reading of the stage instrument (:mod:`feedlab.stage`): a ``fetch`` span per call
    (a batch's carries its ``(epoch, batch)`` tag), a ``collate`` span, then the enclosing ``batch`` span
    from the fetch's start to the end of collate."""

    def __init__(self, recorder: _Recorder):
        self.recorder = recorder

    def __call__(self, name: str, t0: float, t1: float, cpu: float, n: int, indices=None) -> None:
        rec = self.recorder
        if name == "fetch":
            tag = getattr(indices, "tag", None)
            rec.record("fetch", t0, t1, tag, items=n)
            if indices is not None:
                rec.current = (tag, t0)
            return
        cur = rec.current
        tag = cur[0] if cur else None
        rec.record("collate", t0, t1, tag, items=n)
        if cur is not None:
            rec.record("batch", cur[1], t1, tag, items=n)
            rec.current = None


class TracedDataset(stage.TimedFetch):
    """A map-style dataset that records a ``fetch`` span per batch (the stage instrument's
    ``__getitems__``: the whole batch in one call)."""

    def __init__(self, dataset, recorder: _Recorder):
        super().__init__(dataset, SpanSink(recorder))
        self.recorder = recorder


class TracedCollate(stage.TimedCollate):
    """Wraps a collate function: a ``collate`` span, then the enclosing ``batch`` span."""

    def __init__(self, fn: Callable, recorder: _Recorder):
        super().__init__(fn, SpanSink(recorder))
        self.recorder = recorder


# ---------------------------------------------------------------- the tracer


class Tracer:
    """Collects spans from workers and the main loop; writes one Chrome trace."""

    def __init__(self, directory: str | os.PathLike | None = None):
        self._own_dir = directory is None
        self.directory = Path(tempfile.mkdtemp(prefix="feedlab-trace-") if directory is None else directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.recorder = _Recorder(str(self.directory))
        self.main_pid = os.getpid()
        self._main_events: list[dict] = []
        self._cuda_events: list[dict] = []
        self.metadata: dict[str, Any] = {}

    # wrapping
    def dataset(self, dataset) -> TracedDataset:
        return TracedDataset(dataset, self.recorder)

    def collate(self, fn: Callable | None = None) -> TracedCollate:
        if fn is None:
            from torch.utils.data import default_collate

            fn = default_collate
        return TracedCollate(fn, self.recorder)

    def loader(self, dataset, batch_size: int, shuffle: bool = True, drop_last: bool = False,
               collate_fn: Callable | None = None, seed: int = 0, **loader_kw):
        """A DataLoader over ``dataset`` with tracing wired in (tagged batches,
        traced fetch and collate). ``loader_kw`` go to DataLoader."""
        import torch
        from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler

        sampler = (RandomSampler(dataset, generator=torch.Generator().manual_seed(seed)) if shuffle
                   else SequentialSampler(dataset))
        bs = TaggedBatchSampler(BatchSampler(sampler, batch_size, drop_last))
        return DataLoader(self.dataset(dataset), batch_sampler=bs, collate_fn=self.collate(collate_fn),
                          **loader_kw)

    def wrap(self, loader):
        """The loader ``pipeline.make_loader`` built, traced: a DataLoader is rebuilt (:func:`feedlab.stage.rebuild`,
        every setting kept) around the same dataset, batch sampler (so the same order) and collate, with the dataset's
        fetch and the collate traced and every batch tagged; any other loader kind (one that fills
        batch slots itself) is returned as it is: its batches show as the main loop's waits
        (:meth:`add_timer`)."""
        from torch.utils.data import DataLoader

        if not isinstance(loader, DataLoader):
            return loader
        if loader.batch_sampler is None:  # an iterable dataset or batch_size=None: nothing to tag
            raise TypeError("trace: a DataLoader without a batch sampler (iterable dataset or batch_size=None) "
                            "cannot be traced per batch; trace a map-style dataset")
        return stage.rebuild(loader, self.dataset(loader.dataset), self.collate(loader.collate_fn),
                             batch_sampler=TaggedBatchSampler(loader.batch_sampler))

    # main-side spans
    def add_timer(self, timer, epoch: int = 0, finished=None) -> None:
        """Turn a finished (or finishable) PhaseTimer into ``step`` spans with
        their phases, batch ``k`` tagged ``(epoch, k)``."""
        durations = finished if finished is not None else (
            timer._finished if timer._finished is not None else timer.finish())
        n = timer.n
        host = timer._host[:n]
        marked = timer._marked[:n]
        for k in range(n):
            t_prev = float(host[k, 0])
            t_end = t_prev
            children = []
            for i, phase in enumerate(PHASES):
                if not marked[k, i]:
                    continue
                t = float(host[k, i + 1])
                children.append((phase, t_prev, t))
                t_prev = t_end = t
            tag = (epoch, k)
            self._main_events.append(_span("step", float(host[k, 0]), t_end, self.main_pid, MAIN_TID, tag))
            for phase, a, b in children:
                self._main_events.append(_span(phase, a, b, self.main_pid, MAIN_TID, tag))
        if getattr(timer, "cuda", False) and n:
            # device durations (CUDA events), laid end to end from each batch's h2d start
            t_free = float("-inf")
            for k in range(n):
                t = max(float(host[k, 1]), t_free)
                for i, phase in enumerate(PHASES[1:], start=1):
                    d = float(durations[k, i])
                    if d <= 0:
                        continue
                    self._cuda_events.append(_span(phase, t, t + d, self.main_pid, CUDA_TID, (epoch, k)))
                    t += d
                t_free = t

    @contextmanager
    def span(self, name: str, **args):
        """A main-thread span around any block (e.g. warm-up, worker start-up)."""
        t0 = perf_counter()
        try:
            yield
        finally:
            self._main_events.append(_span(name, t0, perf_counter(), self.main_pid, MAIN_TID, None, **args))

    # output
    def _worker_records(self) -> list[list]:
        rows = []
        for path in sorted(self.directory.glob("spans-*.jsonl")):
            with open(path) as fh:
                for line in fh:
                    line = line.strip()
                    if line:
                        rows.append(json.loads(line))
        return rows

    def events(self) -> list[dict]:
        """All events, ts/dur in µs from the earliest span, with name metadata."""
        spans = [dict(s, args=dict(s["args"])) for s in self._main_events + self._cuda_events]
        names: dict[tuple[int, int], str] = {}
        procs: dict[int, str] = {self.main_pid: "main process"}
        for name, t0, t1, pid, worker, tag, args in self._worker_records():
            tag = tuple(tag) if tag is not None else None
            if pid == self.main_pid:
                tid = MAIN_TID  # num_workers=0: fetch and collate run inside data_wait
            else:
                tid = pid
                procs[pid] = f"DataLoader worker {worker}" if worker is not None else f"process {pid}"
                names[(pid, tid)] = procs[pid]
            spans.append(_span(name, t0, t1, pid, tid, tag, **args))
        names[(self.main_pid, MAIN_TID)] = "main loop"
        if self._cuda_events:
            names[(self.main_pid, CUDA_TID)] = "cuda (events)"
        if not spans:
            return []
        base = min(s["_t0"] for s in spans)
        out: list[dict] = []
        for pid, pname in sorted(procs.items()):
            out.append({"name": "process_name", "ph": "M", "ts": 0, "pid": pid, "tid": 0,
                        "args": {"name": pname}})
            out.append({"name": "process_sort_index", "ph": "M", "ts": 0, "pid": pid, "tid": 0,
                        "args": {"sort_index": 0 if pid == self.main_pid else 1}})
        for (pid, tid), tname in sorted(names.items()):
            out.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": pid, "tid": tid,
                        "args": {"name": tname}})
        body = []
        for s in spans:  # copies: calling events() again gives the same answer
            t0 = round((s.pop("_t0") - base) * 1e6, 3)
            t1 = round((s.pop("_t1") - base) * 1e6, 3)
            s["ts"] = t0
            s["dur"] = max(0.0, round(t1 - t0, 3))
            body.append(s)
        # parents before children at equal start: longer first
        body.sort(key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
        return out + body

    def to_json(self) -> dict:
        return {"traceEvents": self.events(), "displayTimeUnit": "ms",
                "otherData": {"generator": "feedlab.trace", **self.metadata}}

    def write(self, path: str | os.PathLike) -> Path:
        """Write the trace JSON (atomically) and return its path."""
        path = Path(path)
        atomic_write(path, json.dumps(self.to_json(), separators=(",", ":")))
        return path

    def close(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _span(name: str, t0: float, t1: float, pid: int, tid: int, tag, **args) -> dict:
    a = dict(args)
    if tag is not None:
        a["epoch"], a["batch"] = int(tag[0]), int(tag[1])
    cat = "worker" if name in ("fetch", "collate", "batch") else "main"
    return {"name": name if tag is None else name, "cat": cat, "ph": "X", "pid": int(pid),
            "tid": int(tid), "_t0": float(t0), "_t1": float(max(t0, t1)), "args": a}


# ---------------------------------------------------------------- checking


def check_trace(obj: dict, eps_us: float = 0.002) -> list[str]:
    """Problems with a Chrome trace object (empty list = valid): every event has
    name/ph/ts/pid/tid, X events have dur >= 0, and X spans nest per (pid, tid)."""
    problems: list[str] = []
    events = obj.get("traceEvents") if isinstance(obj, dict) else None
    if not isinstance(events, list):
        return ["no traceEvents list"]
    by_track: dict[tuple, list] = {}
    for n, e in enumerate(events):
        missing = [k for k in ("name", "ph", "ts", "pid", "tid") if k not in e]
        if missing:
            problems.append(f"event {n} lacks {missing}")
            continue
        if e["ph"] == "X":
            if not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0:
                problems.append(f"event {n} ({e['name']}) has dur {e.get('dur')!r}")
                continue
            by_track.setdefault((e["pid"], e["tid"]), []).append(e)
    for track, evs in by_track.items():
        evs = sorted(evs, key=lambda e: (e["ts"], -e["dur"]))
        stack: list[float] = []
        for e in evs:
            start, end = e["ts"], e["ts"] + e["dur"]
            while stack and start >= stack[-1] - eps_us:
                stack.pop()
            if stack and end > stack[-1] + eps_us:
                problems.append(f"track {track}: {e['name']} at {start} overlaps its enclosing span "
                                f"(ends {end} > {stack[-1]})")
            stack.append(end)
    return problems


def batches_in(obj: dict, name: str, epoch: int = 0) -> set[int]:
    """Batch numbers that have a ``name`` span in ``epoch``."""
    return {e["args"]["batch"] for e in obj["traceEvents"]
            if e.get("ph") == "X" and e["name"] == name and e.get("args", {}).get("epoch") == epoch
            and "batch" in e.get("args", {})}


# ---------------------------------------------------------------- one traced run


def trace_run(dataset, out: dict | None, path: str | os.PathLike, batch_size: int, workers: int,
              collate: Callable | None = None, max_batches: int = 20, model=None, device="cpu",
              optimizer=None, pin_memory: bool = False, shuffle: bool = True, loader=None, **loader_kw) -> Path:
    """Run ``max_batches`` batches of ``dataset`` through a traced DataLoader
    (and the model step, when given) and write the Chrome trace to ``path``.
    ``loader``: a loader already built (``pipeline.make_loader``), traced by :meth:`Tracer.wrap`
    instead of a DataLoader built here, so the traced loader is the timed one.
    With ``out`` (a result dict), ``trace``, ``trace_batches`` and
    ``trace_events`` are added to it."""
    with Tracer() as tr:
        tr.metadata.update({"batch_size": int(batch_size), "num_workers": int(workers),
                            "device": str(device)})
        if loader is not None:
            loader = tr.wrap(loader)
        else:
            loader = tr.loader(dataset, batch_size=batch_size, shuffle=shuffle, collate_fn=collate,
                               num_workers=workers, pin_memory=bool(pin_memory), **loader_kw)
        timer = PhaseTimer(device)
        res = run_epoch(loader, model, device, optimizer, max_batches=max_batches, timer=timer)
        tr.add_timer(timer, epoch=0)
        written = tr.write(path)
        n_events = len(tr.events())
    if out is not None:
        out.update({"trace": str(written), "trace_batches": res.batches, "trace_events": n_events})
    return written


TraceRecorder = Tracer  # the name feedlab.bench probes for
