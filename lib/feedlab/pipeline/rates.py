"""Steady rates by construction: how many batches a timed epoch leaves out for start-up, how
many it times, and the rate of a timed epoch labelled ``steady`` or ``startup_inclusive`` — never
one posing as the other; and a steady rate at the cost of its window (:class:`SteadyStop`: timed
until its confidence interval is within a stated half-width, :func:`rel_half_width`, or labelled
``imprecise`` at its cap). Re-exported by ``feedlab.pipeline``; ``spec`` is a ``PipelineSpec``."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def prefetch_depth(spec) -> int:
    """Batches a DataLoader can have ready before the loop asks: each worker keeps
    ``prefetch_factor`` in flight (1 with no workers: the first batch itself)."""
    if spec.num_workers <= 0:
        return 1
    return int(spec.num_workers) * int(spec.prefetch_factor or 2)


MIN_TIMED_BATCHES = 50  # timed batches after warm-up a steady rate needs, unless a profile says otherwise
RATE_KINDS = ("steady", "startup_inclusive", "imprecise")   # imprecise: steady, but its cap came first


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


def gain_resolved(gain: float, half_width: float | None, against_half_width: float | None) -> bool | None:
    """Whether a measured gain (one rate over another) is told apart from ×1.00 by the two rates' own
    precision: ``|gain − 1|`` beyond their combined relative half-width (√(h₁² + h₂²), each a rate's 95%
    interval, :func:`rel_half_width`). ``None`` where either rate has no stated precision."""
    hw = (half_width, against_half_width)
    if any(h is None or not math.isfinite(h) for h in hw) or not math.isfinite(gain):
        return None
    return abs(gain - 1.0) > math.hypot(*hw)


# t(0.975, k - 1) for k batch means: the 95% interval of a mean from k block means
_T975 = {5: 2.776, 8: 2.365, 10: 2.262, 16: 2.131, 20: 2.093}


def rel_half_width(durations: Sequence[float], blocks: int = 10) -> float:
    """The half-width of the 95% confidence interval of the mean batch time, relative to that mean, by
    batch means: the timed batches split into ``blocks`` consecutive blocks (batches next to each other
    are correlated through the workers' prefetch queue; block means much less), then Student's t over the
    block means. ``inf`` with fewer than two batches per block."""
    d = np.asarray(durations, float)
    k = int(blocks)
    if k not in _T975:
        raise ValueError(f"blocks={blocks}: one of {sorted(_T975)}")
    if d.size < 2 * k:
        return math.inf
    means = np.array([b.mean() for b in np.array_split(d, k)])
    m = float(means.mean())
    if m <= 0:
        return math.inf
    return _T975[k] * float(means.std(ddof=1)) / math.sqrt(k) / m


class SteadyStop:
    """When a timed pass has a steady rate to a stated precision (``run_epoch(..., stop=SteadyStop(...))``):
    after ``warmup`` batches, at least ``min_timed`` timed batches and ``min_window_s`` seconds, and a
    batch-time mean whose 95% interval is within ``half_width`` of it (:func:`rel_half_width`); or at the
    cap (``max_window_s`` seconds or ``max_timed`` batches timed), where the rate is *not* precise and is
    labelled so (``precise`` False, ``capped`` True). Checked every ``every`` batches: one clock read and
    one append per batch otherwise.

    Two guards against a window that claims more than it knows. ``confirm`` precise checks in a row end a
    pass, not the first: stopping at the first narrow interval among many looks (optional stopping) makes
    the stated precision optimistic for a noisy setting. A batch cap (``max_timed``) ends a pass only once
    it has ``min_window_s`` seconds too: 50 batches of a 7 ms GPU step are a third of a second, under the
    like-for-like rule's window (the time cap ``max_window_s`` ends a pass whatever its length)."""

    def __init__(self, warmup: int, min_timed: int = 20, half_width: float = 0.05, min_window_s: float = 1.0,
                 max_window_s: float = 20.0, max_timed: int | None = None, every: int = 5, blocks: int = 10,
                 min_capped: int | None = None, confirm: int = 2):
        self.warmup, self.min_timed, self.half_width = int(warmup), int(min_timed), float(half_width)
        self.confirm, self.streak = max(1, int(confirm)), 0
        # the fewest timed batches a cap may end an imprecise pass at (default the floor): a precise pass may
        # stop at the floor, an imprecise one runs on to this (the like-for-like window: 50 batches, or ±5%)
        self.min_capped = max(self.min_timed, int(min_capped if min_capped is not None else min_timed))
        if max_timed is not None and max_timed < self.min_capped:
            raise ValueError(f"max_timed={max_timed} < min_capped={self.min_capped}: the cap would be passed silently")
        self.min_window_s, self.max_window_s, self.max_timed = float(min_window_s), float(max_window_s), max_timed
        self.every, self.blocks = max(1, int(every)), int(blocks)
        self.ends: list[float] = []
        self.precise = self.capped = False
        self.achieved = math.inf

    def __call__(self, done: int, now: float) -> bool:
        self.ends.append(now)
        timed = done - self.warmup
        if timed < 1:
            return False
        window = now - self.ends[self.warmup - 1] if self.warmup >= 1 else now - self.ends[0]
        if timed < self.min_timed:   # the floor first: a cap never cuts a pass below it
            return False
        at_cap = ((self.max_timed is not None and timed >= self.max_timed and window >= self.min_window_s)
                  or window >= self.max_window_s)
        if at_cap and timed >= self.min_capped:
            self.finish()
            self.capped = not self.precise
            return True
        if window < self.min_window_s or timed % self.every:
            return False
        self.streak = self.streak + 1 if self.finish() else 0   # precise at this look and the ones before it
        return self.streak >= self.confirm

    def finish(self) -> bool:
        """The precision of the batches timed so far (also where the pass ended before a check): precise?
        Over ``blocks`` batch means, or 10 once there are 2 batches a block for them: a floor of 10 batches
        needs 5 blocks, but 5 block means of a long window of fast batches widen the interval for nothing
        (t = 2.78 on 4 degrees of freedom against 2.26 on 9)."""
        d = np.diff(self.ends[max(0, self.warmup - 1):])
        k = 10 if self.blocks < 10 and d.size >= 20 else self.blocks
        self.achieved = rel_half_width(d, k)
        self.precise = self.achieved <= self.half_width
        return self.precise
