"""The stage room: the names of an input pipeline's stages, the typed key of a measured cost, the one
instrument that times a fetch and a collate, and the one rebuild of a DataLoader around it.

The instrument (:class:`TimedFetch` around a dataset, :class:`TimedCollate` around a collate function)
reads :data:`clock` (``time.perf_counter``: ``CLOCK_MONOTONIC`` on Linux, one clock for every process)
and :data:`cpu_clock` (this process's CPU) around each call and hands ``(stage, t0, t1, cpu_s, n,
indices)`` to a sink. The doctor's sink puts ``(stage, wall, cpu, n)`` on a queue
(:mod:`feedlab.doctor.wrap`), the tracer's records spans (:mod:`feedlab.trace`), and
:func:`feedlab.timing.stage_times` keeps them in a :class:`Records`: one instrument, three readers.

The rebuild rule (:func:`rebuild`): a DataLoader built again around a timed dataset, collate or tagged
batch sampler keeps every setting of the user's loader — its batch sampler (so the same order) and
generator, workers, ``pin_memory``, ``worker_init_fn``, and with workers ``timeout``, the
multiprocessing context, ``prefetch_factor`` and ``persistent_workers`` (DataLoader refuses these with
no workers). A read of part of an epoch ends with :func:`stop`, which also makes a loader with persistent
workers start afresh at its next ``iter()`` (an ended worker cannot be reused).
"""

from __future__ import annotations

import time
from typing import Callable

# where each stage runs, and the stages that can bound a pipeline (feedlab.doctor.predict)
WORKER_STAGES = ("read", "decode", "transform", "collate", "handover")
MAIN_STAGES = ("receive", "h2d", "model")
BOUND_STAGES = WORKER_STAGES + MAIN_STAGES
INSTRUMENTED = ("fetch", "collate")   # what the instrument times inside a loader

_STORE = ("format", "decode")
_BATCH = ("collate", "batch_size")
# a measured cost's key: its stage, then what the cost depends on (the doctor's cost table)
KEY_FIELDS: dict[str, tuple[str, ...]] = {
    "read": _STORE, "read_cold": _STORE, "decode": _STORE, "transform": _STORE,
    "collate": _BATCH, "collate_worker": _BATCH, "handover_worker": _BATCH, "receive": _BATCH, "h2d_copy": _BATCH,
    "h2d": ("collate", "batch_size", "pin", "threads"),
    "ring_receive": ("batch_size",),
    "kind": ("format", "loader", "batch_size"),
    "model": ("batch_size", "threads"),
    "startup": ("workers",),
}


class CostKey(tuple):
    """The key of one measured cost, ``CostKey("decode", "png", "pil")``: a tuple, equal to and hashed as
    ``("decode", "png", "pil")`` (so a table written by hand still reads), whose values are named by its
    stage (``key.stage``, ``key.format``, ``key.batch_size``) and checked when it is made."""

    __slots__ = ()

    def __new__(cls, stage: str, *values):
        fields = KEY_FIELDS.get(stage)
        if fields is None:
            raise ValueError(f"cost key: unknown stage {stage!r}; one of {', '.join(KEY_FIELDS)}")
        if len(values) != len(fields):
            raise ValueError(f"cost key {stage!r} takes {', '.join(fields)}; got {len(values)} value(s)")
        return super().__new__(cls, (stage, *values))

    @classmethod
    def of(cls, key) -> CostKey:
        return key if isinstance(key, cls) else cls(*key)

    @property
    def stage(self) -> str:
        return self[0]

    def fields(self) -> dict:
        return dict(zip(KEY_FIELDS[self[0]], self[1:]))

    def __getattr__(self, name: str):
        fields = KEY_FIELDS.get(self[0], ()) if len(self) else ()
        if name in fields:
            return self[1 + fields.index(name)]
        raise AttributeError(name)

    def __repr__(self) -> str:   # printed as the tuple it equals
        return tuple.__repr__(self)

    def __reduce__(self):
        return (CostKey, tuple(self))


# ---------------------------------------------------------------- the instrument
clock = time.perf_counter
cpu_clock = time.process_time
Sink = Callable[[str, float, float, float, int, object], None]   # (stage, t0, t1, cpu_s, n, indices)


class TimedFetch:
    """A map-style dataset whose fetches are timed: each ``__getitem__`` (one sample) and
    ``__getitems__`` (a batch's samples in one call, the inner dataset's own where it has one, else
    one ``__getitem__`` per index, as the DataLoader would) hands its span to ``sink``. Other
    attributes are the inner dataset's."""

    def __init__(self, dataset, sink: Sink):
        self.dataset, self.sink = dataset, sink

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        t0, c0 = clock(), cpu_clock()
        item = self.dataset[i]
        self.sink("fetch", t0, clock(), cpu_clock() - c0, 1, None)
        return item

    def __getitems__(self, indices):
        t0, c0 = clock(), cpu_clock()
        inner = getattr(self.dataset, "__getitems__", None)
        items = inner(list(indices)) if inner is not None else [self.dataset[i] for i in indices]
        self.sink("fetch", t0, clock(), cpu_clock() - c0, len(items), indices)
        return items

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("dataset", "sink"):
            raise AttributeError(name)
        return getattr(self.dataset, name)


class TimedCollate:
    """A collate function whose calls are timed (``sink("collate", ...)``)."""

    def __init__(self, fn: Callable, sink: Sink):
        self.fn, self.sink = fn, sink

    def __call__(self, items):
        t0, c0 = clock(), cpu_clock()
        out = self.fn(items)
        self.sink("collate", t0, clock(), cpu_clock() - c0, len(items), None)
        return out


class Records:
    """A sink that keeps ``(wall, cpu, n)`` per call by stage (in this process)."""

    def __init__(self) -> None:
        self.by_stage: dict[str, list[tuple[float, float, int]]] = {}

    def __call__(self, stage: str, t0: float, t1: float, cpu: float, n: int, indices=None) -> None:
        self.by_stage.setdefault(stage, []).append((t1 - t0, cpu, n))


# ---------------------------------------------------------------- the rebuild
def rebuild(loader, dataset=None, collate_fn=None, batch_sampler=None, num_workers: int | None = None,
            pin_memory: bool | None = None, *, prefetch_factor: int | None = None,
            persistent_workers: bool | None = None, multiprocessing_context=None, loader_class=None):
    """``loader`` built again around another dataset, collate or batch sampler, keeping every other
    setting of the user's (the rule in this module's docstring) but those given (the tuner's settings).
    ``loader_class``: a ``DataLoader`` subclass to build instead (``pipeline.shm.CheckedDataLoader``)."""
    from torch.utils.data import DataLoader

    w = int(loader.num_workers if num_workers is None else num_workers)
    kw = dict(batch_sampler=loader.batch_sampler if batch_sampler is None else batch_sampler, num_workers=w,
              collate_fn=collate_fn or loader.collate_fn, worker_init_fn=loader.worker_init_fn,
              pin_memory=loader.pin_memory if pin_memory is None else pin_memory, generator=loader.generator)
    if w > 0:
        kw.update(timeout=loader.timeout,
                  multiprocessing_context=multiprocessing_context or loader.multiprocessing_context,
                  prefetch_factor=prefetch_factor or loader.prefetch_factor or 2,
                  persistent_workers=loader.persistent_workers if persistent_workers is None else persistent_workers)
    if hasattr(loader, "in_order"):
        kw["in_order"] = loader.in_order
    return (loader_class or DataLoader)(loader.dataset if dataset is None else dataset, **kw)


def stop(loader, it) -> None:
    """End a read of part of an epoch: ``it``'s workers end now, and a loader with persistent workers
    forgets ``it``, so its next ``iter()`` starts workers afresh."""
    end = getattr(it, "_shutdown_workers", None)
    if end is not None:
        end()
    if loader is not None and getattr(loader, "_iterator", None) is it:
        loader._iterator = None
