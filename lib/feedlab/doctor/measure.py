"""Measuring the stage-cost table (and the DataLoader end to end) for a data set.

Each stage is timed from memory prepared outside the clock, with ``warmup`` untimed
rounds and ``repeats`` timed ones (wall and process-CPU seconds per sample); read,
decode and transform one sample after another, as the loop runs them.
What a worker does is timed inside a real DataLoader worker (one intra-op thread, the
batch allocated in shared memory, the hand-over of each batch to the main process);
what the main process does is timed at the threads ``run_epoch`` gives it beside
``W`` workers. The stores are used only through their public stage split
(``read_raw`` / ``decode_raw`` / ``store_files``) and the format registry's
capabilities: no format is named here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from feedlab import formats
from feedlab import pipeline as pl
from feedlab.cache import evict
from feedlab.formats import raw_nbytes
from feedlab.monitor import usable_cores
from feedlab.pipeline.kinds import LOADER_KINDS, UINT8_COLLATES, kind_problems
from feedlab.timing import to_device_float, torch_threads

from .costs import CostKey, CostTable, Machine, Stage
from .device_decode import measure_device_decode
from .e2e import EndToEnd
from .effort import Effort, timed_batches  # noqa: F401  (Effort re-exported: its home before)
from .probes import (
    _split_xy,
    batch_nbytes,
    cpu_capacity,
    loop_h2d,
    measure_machine,
    probe_ring,
    probe_worker,
    ring_unfit,
    startup_s,
    stream_stages,
    timed,
)
from .probes_loop import loop_costs
from .split import StageSplit, decode_alternatives, open_split


# ---------------------------------------------------------------- the doctor's measurements
class Doctor(EndToEnd):
    """Measures a :class:`CostTable` for a data set (or any ``splits`` factory) and the
    DataLoader end to end; prediction and advice are in ``feedlab.doctor.predict``.

    ``splits(fmt, decode) -> StageSplit`` builds stage splits (default: the registry's
    stores under ``root``); ``model`` is a name (``feedlab.pipeline.MODEL_VARIANTS``) or
    a module."""

    def __init__(self, root, spec: pl.PipelineSpec, max_workers: int | None = None, effort: Effort = Effort(),
                 alt_formats: Sequence[str] | None = None, splits: Callable[[str, str], StageSplit] | None = None,
                 model: Any = None, log: Callable[[str], None] | None = None):
        self.root = Path(root) if root is not None else None
        self.device = pl.resolve_device(spec.device)
        self.spec = spec.replace(device=self.device)
        self.cuda = self.device.startswith("cuda")
        self.max_workers = usable_cores() if max_workers is None else int(max_workers)
        self.effort = effort
        self.alt_formats = None if alt_formats is None else list(alt_formats)
        self._splits = splits or (lambda f, d: open_split(self.root, f, d, spec.transform))
        self.log = log or (lambda msg: None)
        given = model if model is not None else spec.model
        self.model_name = given if isinstance(given, str) else type(given).__name__
        self.model, self.loss_fn, self.optimizer = pl.make_training(given, self.device)
        self.table = CostTable(Machine(usable_cores(), float(usable_cores()), self.cuda, {0: 1}))
        self.split_cache: dict[tuple[str, str], StageSplit] = {}
        self.batch_bytes: dict[tuple[str, int], int] = {}
        self._batches: dict[tuple[str, int], Any] = {}
        self._samples: list = []
        self._samples_of: dict[tuple[str, str], list] = {}
        self.e2e: dict[pl.PipelineSpec, dict] = {}
        self.e2e_calls: dict[pl.PipelineSpec, list[dict]] = {}   # every measurement of a spec, in order
        self.notes: list[str] = []
        # the start's measured rate over what its stages predicted beside it (diagnosis.anchor_on): every rate
        # the doctor predicts after that is scaled by it (table_now); None until the start is measured, idle
        self.anchor: dict | None = None

    # --------------------------------------------------------------- pieces
    def split(self, fmt: str, decode: str) -> StageSplit:
        if (fmt, decode) not in self.split_cache:
            self.split_cache[(fmt, decode)] = self._splits(fmt, decode)
        return self.split_cache[(fmt, decode)]

    def _t(self, fn, per, device=None, setup=None, warmup=None, repeats=None):
        b = self.effort
        return timed(fn, per, b.warmup if warmup is None else warmup, repeats or b.repeats, device, setup)

    def _indices(self, n: int) -> list[int]:
        m = min(self.effort.samples, n)
        idx = np.random.default_rng(0).choice(n, size=m, replace=False) if m < n else np.arange(n)
        return np.random.default_rng(1).permutation(idx).tolist()

    # --------------------------------------------------------------- stages
    def measure_items(self, fmt: str, decode: str, cold: bool = False) -> None:
        """read (warm; cold when eviction works), decode and transform of one split."""
        p = self.split(fmt, decode)
        idx = self._indices(len(p))
        raws = [p.read(i) for i in idx]
        nbytes = float(np.mean([raw_nbytes(r) for r in raws]))
        chain = [("read", p.read), ("decode", p.decode)] + [("transform", p.transform)] * (p.transform is not None)
        try:
            got, samples = stream_stages(chain, idx, self.effort.warmup, self.effort.repeats)  # as the loop runs them
        except Exception as exc:   # one line naming the sample's file (a 16-bit PNG the transform cannot take)
            raise p.named_failure(idx, chain, exc) from None
        self.table[CostKey("read", fmt, decode)] = Stage("read", f"{fmt} (warm cache)", *got["read"], nbytes)
        if cold:
            self._measure_cold(p, fmt, decode, idx, nbytes)
        self.table[CostKey("decode", fmt, decode)] = Stage("decode", f"{fmt}: {p.decode_name}", *got["decode"])
        self.table[CostKey("transform", fmt, decode)] = (Stage("transform", type(p.transform).__name__, *got["transform"])
                                                  if p.transform is not None else
                                                  Stage("transform", "none", [0.0], [0.0]))
        self._samples_of[(fmt, decode)] = samples
        self._samples = samples

    def _measure_cold(self, p: StageSplit, fmt, decode, idx, nbytes) -> None:
        key = ("read_cold", fmt, decode)
        files = p.files(idx)
        if not files:
            self.table[key] = Stage("read", f"{fmt} (cold cache)", measurable=False,
                                    note="the store names no files to evict")
            return
        rep = evict(files)
        if not rep.ok:
            self.table[key] = Stage("read", f"{fmt} (cold cache)", measurable=False,
                                    note=f"eviction not possible here: {rep.reason or rep.failed[:1]}")
            return
        w, c = self._t(lambda: [p.read(i) for i in idx], len(idx), setup=lambda: evict(files, verify=False),
                       warmup=0)
        self.table[key] = Stage("read", f"{fmt} (cold cache)", w, c, nbytes,
                                note=f"evicted with posix_fadvise ({rep.verified})")

    def _items(self, batch_size: int) -> list:
        s = self._samples
        return [s[k % len(s)] for k in range(batch_size)]

    def measure_collate(self, name: str, bs: int, workers: bool) -> None:
        fn = pl.make_collate(name)
        items = self._items(bs)
        w, c = loop_costs(self, fn, items, self.table.machine.threads(0))["collate"]   # as the loop runs it
        self.table[CostKey("collate", name, bs)] = Stage("collate", f"{name} (batch {bs})", w, c)
        batch = fn(items)
        self._batches[(name, bs)] = batch
        self.batch_bytes[(name, bs)] = batch_nbytes(batch)
        if not workers:
            return
        try:
            pr = probe_worker(items, fn, batches=max(4, 4 * self.effort.repeats))
        except Exception as exc:  # e.g. no usable shared memory
            self.notes.append(f"worker probe of collate {name}: {type(exc).__name__}: {exc}")
            return
        per = lambda xs: [x / bs for x in xs]  # noqa: E731
        self.table[CostKey("collate_worker", name, bs)] = Stage(
            "collate", f"{name} in a worker (batch {bs})", per(pr["collate_wall"]), per(pr["collate_cpu"]))
        self.table[CostKey("handover_worker", name, bs)] = Stage(
            "handover", f"worker → main, {name} batch {bs} (worker side)", per(pr["handover_cpu"]),
            per(pr["handover_cpu"]), bytes_per_sample=self.batch_bytes[(name, bs)] / bs)
        self.table[CostKey("receive", name, bs)] = Stage(
            "receive", f"worker → main, {name} batch {bs} (main side)", per(pr["receive_cpu"]),
            per(pr["receive_cpu"]), bytes_per_sample=self.batch_bytes[(name, bs)] / bs,
            note="main-process CPU per batch taken from a worker")
        if name in UINT8_COLLATES and ("ring_receive", bs) not in self.table:
            self.measure_ring(bs)

    def measure_ring(self, bs: int) -> None:
        """The ring's hand-over (``loader="ring"``): the main process's CPU to receive a batch
        whose worker filled a slot of the shared-memory ring (a slot index, no pickled tensor)."""
        unfit = ring_unfit(self._items(1)[0])
        if unfit is not None:   # e.g. an image folder: one image a sample, no (lr, hr) pair
            if f"ring probe: not run, {unfit}" not in self.notes:   # said once, for every collate asked
                self.notes.append(f"ring probe: not run, {unfit}")
            return
        try:
            pr = probe_ring(self._items(bs), bs, batches=max(6, 4 * self.effort.repeats))
        except Exception as exc:  # e.g. no usable /dev/shm: the ring is then not priced
            self.notes.append(f"ring probe: {type(exc).__name__}: {exc}")
            return
        self.table[CostKey("ring_receive", bs)] = Stage(
            "receive", f"ring → main, batch {bs} (main side: a slot index)", pr["receive_cpu"],
            pr["receive_cpu"], bytes_per_sample=pr["bytes_per_sample"],
            note="main-process CPU per batch from a shared-memory ring slot")

    def measure_h2d(self, name: str, bs: int) -> None:
        """run_epoch's h2d phase at each thread count the main process may use: on CUDA over distinct batches
        (``probes.loop_h2d``), on a CPU as the loop converts the batch it just collated (``probes_loop``)."""
        batch = self._batches[(name, bs)]
        b = self.effort
        for T in sorted(set(self.table.machine.main_threads.values())):
            for pin in ((False, True) if self.cuda else (False,)):
                w, c = (loop_h2d(batch, self.device, T, pin, warmup=b.warmup, repeats=b.repeats) if self.cuda
                        else loop_costs(self, pl.make_collate(name), self._items(bs), T)["h2d"])
                what = ("pinned" if pin else "pageable") if self.cuda else "uint8→float only (no CUDA)"
                self.table[CostKey("h2d", name, bs, pin, T)] = Stage(
                    "h2d", f"{what}, {name} batch, {T} thread(s)", w, c,
                    bytes_per_sample=self.batch_bytes[(name, bs)] / bs)
        if not self.cuda:
            self.table[CostKey("h2d_copy", name, bs)] = Stage("h2d", "copy to GPU, pageable and pinned",
                                                       measurable=False, note="not measurable: no CUDA")

    def measure_model(self, name: str, bs: int) -> None:
        threads = sorted(set(self.table.machine.main_threads.values()))
        if self.model is None:
            for T in threads:
                self.table[CostKey("model", bs, T)] = Stage("model", "none", [0.0], [0.0],
                                                 note="not measured: --model none (no step)")
            return
        x, y = _split_xy(self._batches[(name, bs)])
        x, y = to_device_float(x, self.device, False), to_device_float(y, self.device, False)
        for T in threads:
            with torch_threads(T):
                w, c = self._t(lambda: pl.train_step(self.model, self.optimizer, x, y, self.loss_fn), bs,
                               device=self.device if self.cuda else None)
            self.table[CostKey("model", bs, T)] = Stage("model", f"{self.model_name} on {self.device} (batch {bs}, "
                                                 f"{T} thread(s))", w, c)

    def measure(self, alternatives: bool = True) -> "Doctor":
        """Every stage of the spec's pipeline; with ``alternatives``, the other collates,
        decode backends, formats present, and (a model; ``effort.batch_alternative``) twice the batch size."""
        spec, b = self.spec, self.effort
        self.log("measuring the machine (cores, threads, CPU capacity)")
        self.table.machine = measure_machine(self.device, self.max_workers)
        speed_before = self.table.machine.speed(1)
        fmt, dec = spec.format, spec.decode_backend
        self.log(f"measuring {fmt}/{dec} read, decode, transform")
        self.measure_items(fmt, dec, cold=b.cold)
        twice = alternatives and b.batch_alternative and self.model is not None
        sizes = [spec.batch_size] + ([2 * spec.batch_size] if twice else [])
        collates = list(pl.COLLATES) if alternatives else [spec.collate]
        for bs in sizes:
            for name in collates:
                self.log(f"measuring collate {name}, batch {bs}")
                self.measure_collate(name, bs, workers=self.max_workers > 0)
                self.measure_h2d(name, bs)
            self.measure_model(collates[0], bs)
        for w in range(1, self.max_workers + 1):
            self.table[CostKey("startup", w)] = Stage("startup", f"{w} fresh worker(s) to a first batch",
                                               startup_s(w, b.repeats), [0.0], note="seconds, not per sample")
        if alternatives:
            fs = formats.FORMATS.get(fmt)
            for d in decode_alternatives(fs.image_codec if fs else None):
                if d != dec:
                    self.log(f"measuring decode backend {d}")
                    try:
                        self.measure_items(fmt, d)
                    except Exception as exc:  # a backend that fails on these files is reported, not fatal
                        self.notes.append(f"decode backend {d}: {exc}")
            if self.cuda and fs is not None and fs.image_codec == "jpeg":
                self.log("measuring decode on the GPU (nvJPEG, one batch)")
                try:
                    measure_device_decode(self, fmt, spec.batch_size)
                except Exception as exc:  # reported, not fatal
                    self.notes.append(f"decode on the GPU: {exc}")
            if self.root is not None and fs is not None:
                present = formats.present(self.root, fs.kind)
                wanted = present if self.alt_formats is None else [f for f in self.alt_formats if f in present]
                for f in wanted:
                    if f != fmt:
                        self.log(f"measuring format {f}")
                        self.measure_items(f, formats.FORMATS[f].default_decode)
            self._samples = self._samples_of[(fmt, dec)]  # the spec's samples, for later collates
            self.measure_kinds(spec.batch_size)
        after = cpu_capacity([1])
        self.table.machine.stage_speed = (speed_before + min(1.0, after[1])) / 2
        return self

    def one_process_kinds(self, fmt: str) -> list[str]:
        """The one-process loader kinds that read whole batches (``batched``, ``chunk``: no
        DataLoader, no collate, no per-sample arrays) this spec could switch to on ``fmt``: its
        collate already a uint8 one, and no transform (they hand out what is stored)."""
        fs = formats.FORMATS.get(fmt)
        if fs is None or self.spec.transform != "none":
            return []
        return [k.name for k in LOADER_KINDS.values() if k.workers == "none" and not k.collates
                and not kind_problems(k.name, fs.capabilities(), 0, self.spec.collate)]

    def measure_kinds(self, bs: int, batches: int = 8) -> None:
        """Each one-process loader kind over each format measured (:meth:`one_process_kinds`): its
        own loop per sample, ``batches`` batches a repeat (``("kind", fmt, kind, B)``)."""
        from itertools import islice

        for fmt, dec in sorted({(k.format, k.decode) for k in self.table.keys_of("read")}):
            for kind in self.one_process_kinds(fmt):
                ds = self.split(fmt, dec).dataset
                ld = pl.make_loader(ds, self.spec.replace(format=fmt, loader=kind, num_workers=0, device="cpu"))
                n = min(batches, len(ld))
                if n < 1:
                    continue
                try:
                    w, c = self._t(lambda: sum(1 for _ in islice(iter(ld), n)), n * bs)
                except Exception as exc:  # reported, not fatal
                    self.notes.append(f"loader {kind} over {fmt}: {type(exc).__name__}: {exc}")
                    continue
                self.table[CostKey("kind", fmt, kind, bs)] = Stage(
                    "read", f"{fmt}: loader {kind} (one process, whole batches)", w, c,
                    note="read + copy into the batch, no collate")

    def table_now(self, spec: pl.PipelineSpec, anchored: bool = True) -> CostTable:
        """The measured stages on the machine as it was while ``spec`` ran end to end: the
        CPU capacity sampled between its passes (others' load changes by the minute), and (``anchored``,
        once the start was measured: :attr:`anchor`) the stages' costs scaled by the start's measured rate
        over its predicted one: the speed of a shared machine's core moves between the probes and the loop,
        which the capacity (CPU-seconds, not work done in them) does not see (#46)."""
        m = self.table.machine
        cap = dict(m.capacity)
        r = self.e2e.get(spec.replace(device=self.device))
        if r and r.get("capacity"):
            for k in r["capacity"][0]:
                cap[k] = float(np.median([c[k] for c in r["capacity"]]))
        now = Machine(m.cores, cap.get(m.cores, m.effective_cores), m.cuda, m.main_threads, cap, m.measured_at())
        table = CostTable(now, self.table.stages)
        if anchored and self.anchor:
            table = table.scaled(self.anchor["factor"], ("startup", "model", "h2d") if self.cuda else ("startup",))
        return table
