"""Steady rates by construction: how many batches a timed epoch leaves out for start-up, how
many it times, and the rate of a timed epoch labelled ``steady`` or ``startup_inclusive`` — never
one posing as the other. Re-exported by ``feedlab.pipeline``; ``spec`` is a ``PipelineSpec``."""

from __future__ import annotations


def prefetch_depth(spec) -> int:
    """Batches a DataLoader can have ready before the loop asks: each worker keeps
    ``prefetch_factor`` in flight (1 with no workers: the first batch itself)."""
    if spec.num_workers <= 0:
        return 1
    return int(spec.num_workers) * int(spec.prefetch_factor or 2)


MIN_TIMED_BATCHES = 50  # timed batches after warm-up a steady rate needs, unless a profile says otherwise
RATE_KINDS = ("steady", "startup_inclusive")


def warmup_batches(spec) -> int:
    """Batches left out of a steady rate: every batch the workers can prefetch while the
    first is awaited (``num_workers × prefetch_factor``) plus the first; 1 with no workers."""
    if spec.num_workers <= 0:
        return 1
    return prefetch_depth(spec) + 1


def steady_batches(spec, min_timed: int = MIN_TIMED_BATCHES) -> int:
    """Batches a timed epoch needs for a steady rate: :func:`warmup_batches` + ``min_timed``."""
    if min_timed < 1:
        raise ValueError(f"min_timed_batches={min_timed}: must be >= 1")
    return warmup_batches(spec) + int(min_timed)


def rate_of(et, warmup: int, min_timed: int = MIN_TIMED_BATCHES) -> tuple[float | None, str, int]:
    """``(samples/s, kind, timed batches)`` of a timed epoch (``feedlab.timing.EpochTiming``):
    ``"steady"`` when ≥ ``min_timed`` batches followed the first ``warmup`` (counted over those
    only), else ``"startup_inclusive"`` (the whole-epoch rate: start-up and the batches prefetched
    meanwhile included). Never one posing as the other; ``(None, "startup_inclusive", 0)`` with no batch."""
    if et.batches < 1:
        return None, "startup_inclusive", 0
    timed = max(0, et.batches - int(warmup))
    if timed < max(1, int(min_timed)):
        return et.samples_per_s, "startup_inclusive", timed
    done = float(et.phases_s[:warmup].sum())
    t = et.wall_s - done
    n = et.samples - int(et.batch_sizes[:warmup].sum())
    return (n / t if t > 0 else None), "steady", timed


def steady_rate(et, skip: int = 1, min_timed: int = 1) -> float | None:
    """samples/s after the first ``skip`` batches, or None when fewer than ``min_timed`` follow
    (never a silent whole-epoch rate); :func:`rate_of` returns the rate with its kind."""
    rate, kind, _ = rate_of(et, skip, min_timed)
    return rate if kind == "steady" else None
