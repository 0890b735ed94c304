"""The table the doctor measures and predicts from: seconds per sample of each stage.

A :class:`Stage` is one measured cost (wall and process-CPU seconds per sample, one
value per repeat). A :class:`CostTable` holds them under keys such as
``("decode", fmt, decode)`` and describes the machine they were measured on
(:class:`Machine`); each key is a :class:`feedlab.stage.CostKey` (a tuple, its values named by
its stage: ``key.format``, ``key.batch_size``). It is plain data: ``feedlab.doctor.predict`` reads it without
running anything, and a test can write one by hand.

Keys (``*`` per sample; ``B`` the batch size; ``T`` torch intra-op threads):

==========================================  ================================================
``("read", fmt, dec)``                      stored bytes into memory, warm page cache
``("read_cold", fmt, dec)``                 the same after eviction (reported, not predicted)
``("decode", fmt, dec)``, ``("transform", fmt, dec)``
``("collate", name, B)``                    in the main process (``num_workers=0``)
``("collate_worker", name, B)``             inside a DataLoader worker (batch in shared memory)
``("handover_worker", name, B)``            a worker's cost to hand a batch over, beyond collate
``("receive", name, B)``                    the main process's CPU to take a batch from a worker
``("h2d", name, B, pin, T)``                the loop's copy to the device + uint8→float
``("model", B, T)``                         forward + backward + optimizer step
``("startup", W)``                          seconds (not per sample) until W fresh workers
                                            deliver a first trivial batch
==========================================  ================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from feedlab.stage import BOUND_STAGES, KEY_FIELDS, MAIN_STAGES, WORKER_STAGES, CostKey  # noqa: F401  (re-exported)

VERDICTS = ("data-bound", "compute-bound")


@dataclass
class Stage:
    """Measured seconds per sample of one stage variant (one value per repeat)."""

    stage: str
    variant: str
    wall: list[float] = field(default_factory=list)   # s per sample
    cpu: list[float] = field(default_factory=list)    # process CPU s per sample
    bytes_per_sample: float = 0.0
    measurable: bool = True
    note: str = ""

    @property
    def t(self) -> float:
        return float(np.median(self.wall)) if self.wall else 0.0

    @property
    def c(self) -> float:
        return float(np.median(self.cpu)) if self.cpu else 0.0

    def row(self) -> dict:
        out = {"stage": self.stage, "variant": self.variant, "measurable": self.measurable, "note": self.note}
        if not self.measurable or not self.wall:
            return out
        q25, med, q75 = np.percentile(self.wall, [25, 50, 75])
        out.update({"s_per_sample": float(med), "s_per_sample_q25": float(q25), "s_per_sample_q75": float(q75),
                    "cpu_s_per_sample": self.c, "samples_per_s_per_core": 1.0 / med if med > 0 else math.inf,
                    "repeats": len(self.wall)})
        if self.bytes_per_sample:
            out["bytes_per_s"] = self.bytes_per_sample / med if med > 0 else math.inf
            out["bytes_per_sample"] = self.bytes_per_sample
        return out


@dataclass
class Machine:
    """What the prediction needs to know about the machine.

    ``cores``: cores this process may use. ``capacity``: CPU-seconds per second that
    ``k`` busy processes of this session obtained together, measured for each ``k``
    (``min(k, cores)`` on an idle machine; less where others hold the cores, and flat
    when the session is capped, e.g. by a cgroup). ``effective_cores``: the capacity at
    ``k = cores``. ``cuda``: whether the device is a GPU; ``main_threads``: intra-op
    threads of the training process for each worker count (``run_epoch``'s choice).
    ``stage_speed``: the speed of one process while the stages were timed; a table
    measured on a busy machine is predicted for the machine as it is when the
    prediction is checked (``capacity`` measured again then)."""

    cores: int
    effective_cores: float
    cuda: bool = False
    main_threads: dict[int, int] = field(default_factory=dict)
    capacity: dict[int, float] = field(default_factory=dict)
    stage_speed: float | None = None   # one process's speed while the stages were measured

    def measured_at(self) -> float:
        """The speed the table's stages were measured at (default: one process's speed now)."""
        return float(self.stage_speed) if self.stage_speed else self.speed(1)

    def threads(self, workers: int) -> int:
        return int(self.main_threads.get(int(workers), self.main_threads.get(0, 1)))

    def cap(self, k: float) -> float:
        """CPU-seconds per second available to ``k`` busy processes (interpolated),
        never more than ``min(k, cores)`` (a measured capacity above that is a clock error)."""
        top = min(float(k), float(self.cores)) if self.cores else float(k)
        if not self.capacity:
            return min(top, float(self.effective_cores))
        ks = sorted(self.capacity)
        if k <= ks[0]:
            return min(top, self.capacity[ks[0]] * k / ks[0])
        if k >= ks[-1]:
            return min(top, self.capacity[ks[-1]])
        return min(top, float(np.interp(k, ks, [self.capacity[x] for x in ks])))

    def speed(self, k: float) -> float:
        """Speed of each of ``k`` busy processes, as a fraction of one free core."""
        return min(1.0, self.cap(k) / k) if k > 0 else 1.0


@dataclass
class CostTable:
    machine: Machine
    stages: dict[tuple, Stage] = field(default_factory=dict)   # CostKey → Stage

    def __post_init__(self) -> None:   # keys typed in place (the dict may be shared), order kept
        items = list(self.stages.items())
        self.stages.clear()
        self.stages.update((CostKey.of(k), v) for k, v in items)

    def get(self, key: tuple) -> Stage | None:
        s = self.stages.get(key)
        return s if s is not None and s.measurable else None

    def __setitem__(self, key: tuple, st: Stage) -> None:
        self.stages[CostKey.of(key)] = st

    def __contains__(self, key: tuple) -> bool:
        return key in self.stages

    def nearest(self, key: tuple) -> Stage | None:
        """The stage measured at ``key`` (a :class:`CostKey` whose last field is ``threads``: ``h2d``, ``model``),
        else at the nearest thread count measured with every other field the same (fewer first on a tie); None
        where none was measured."""
        key = CostKey.of(key)
        if "threads" not in KEY_FIELDS[key.stage]:
            raise ValueError(f"cost key {key!r}: nearest() varies the threads, which a {key.stage!r} key lacks")
        cands = [k for k in self.keys_of(key.stage) if k[:-1] == key[:-1] and self.get(k) is not None]
        if not cands:
            return None
        return self.get(min(cands, key=lambda k: (abs(int(k.threads) - key.threads), k.threads)))

    def keys_of(self, stage: str) -> list[CostKey]:
        """The keys of one stage, in the table's order (measured or not)."""
        return [k for k in self.stages if k.stage == stage]

    def values_of(self, stage: str, name: str) -> set:
        """Every value of the field ``name`` of the keys of ``stage`` (``values_of("model", "batch_size")``:
        the batch sizes the step was measured at)."""
        return {getattr(k, name) for k in self.keys_of(stage)}

    def scaled(self, factor: float, keep: tuple[str, ...] = ("startup",)) -> CostTable:
        """The same table with every per-sample cost divided by ``factor`` (wall and CPU alike), but the stages
        in ``keep`` (``startup``: seconds, not per sample; on a GPU the device's own ``model`` and ``h2d``):
        the stages priced on a machine ``factor`` times as fast as when they were timed. The doctor's anchor
        (:meth:`feedlab.doctor.measure.Doctor.table_now`): the probes and the loop ran at different moments
        of a machine whose speed moves between them."""
        f = float(factor)
        if not (math.isfinite(f) and f > 0):
            raise ValueError(f"scaled: factor {factor!r} is not a positive number")
        return CostTable(self.machine, {k: (v if k.stage in keep or not v.measurable else
                                            replace(v, wall=[x / f for x in v.wall], cpu=[x / f for x in v.cpu]))
                                        for k, v in self.stages.items()})
