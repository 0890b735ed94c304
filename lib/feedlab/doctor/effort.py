"""How long the doctor measures (:class:`Effort`), and how many batches an end-to-end pass times so that its
window gives a rate by the one judge's rule (:func:`timed_batches`: at least ``min_window_s`` seconds, as
:data:`feedlab.like_for_like.MIN_WINDOW_S`, read off the untimed warm-up pass)."""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_TIMED_BATCHES = 2000   # a pass never times more batches than this, however fast the setting
# the window asked for, over the rate an untimed pass read: a pass of this 2-core box ran 1.6 times its neighbour's
# rate in one quiet run (notebook 10 at 074999d, `format=lmdb_raw`: 0.68 s timed where 1 s was asked with 1.25)
WINDOW_MARGIN = 2.0


@dataclass(frozen=True)
class Effort:
    """How long the doctor measures: rounds, samples per stage round, batches per end-to-end pass, and the
    shortest timed window of a pass (``min_window_s``; 0: ``e2e_batches`` alone, the API's default: a fast
    setting's 50 batches can take 0.1 s, a window the one judge refuses; notebook 10's steps ask for 1 s)."""

    repeats: int = 3
    warmup: int = 1
    samples: int = 64
    e2e_batches: int = 50   # timed batches per end-to-end pass, after the warm-up (a steady rate)
    cold: bool = True
    min_window_s: float = 0.0
    # with a model, the step and collates at twice the batch size too (the batch-size advice); False where the
    # recipe holds its batch size (notebook 15: advice to change it is never applied, so never measured)
    batch_alternative: bool = True


def timed_batches(effort: Effort, batches_per_s: float | None) -> int:
    """The timed batches of a pass: ``e2e_batches``, or more where the warm-up pass's rate (``batches_per_s``)
    says they would take under ``min_window_s`` (:data:`WINDOW_MARGIN` times over, so a pass in a faster phase of
    the machine still makes it), never over :data:`MAX_TIMED_BATCHES`."""
    base = max(1, int(effort.e2e_batches))
    if not effort.min_window_s or not batches_per_s or not math.isfinite(batches_per_s) or batches_per_s <= 0:
        return base
    return int(min(MAX_TIMED_BATCHES, max(base, math.ceil(WINDOW_MARGIN * effort.min_window_s * batches_per_s))))
