"""Your script's step, stood in by the same CPU work: what ``--script --diagnose`` runs in place of the training
step when it times your loader end to end and measures each change before advising it.

The step is known only by what the script phase measured: its wall seconds and its CPU seconds a sample. A
``time.sleep`` of the wall time (as before) leaves every core free for DataLoader workers, so a change that adds
workers looked like a gain the real script never saw: on 2 cores, dcgan's ``num_workers=1`` measured a gain on the
sleeping stand-in and a loss on the script itself (a benchmark run of 2026-11-28, not committed; issue 46: "the
model credits workers with cores the step is using"). :class:`StandInStep` does the work instead: matrix products on as
many torch threads as the step kept busy (its CPU seconds over its wall seconds, at least one), as many products a
sample as took the step's wall time when nothing else ran (calibrated once, here). A worker that competes for
those cores then slows the stand-in as it slowed the step.
"""

from __future__ import annotations

import math
import time

from feedlab.monitor import usable_cores
from feedlab.timing import torch_threads

from .wrap import batch_len

#: the side of the square matrices multiplied: about 0.1–1 ms a product on one core, fine enough for steps of
#: a few milliseconds a batch
SIDE = 160
#: seconds the calibration times the products for
CALIBRATE_S = 0.3


class StandInStep:
    """``step(batch)``: the CPU work of ``wall_s`` seconds a sample on ``threads`` torch threads (from ``cpu_s``
    over ``wall_s``, between 1 and the usable cores). ``words``: what stands in, for the report's notes."""

    def __init__(self, wall_s: float, cpu_s: float | None, batch_size: int):
        import torch

        self.batch_size = int(batch_size)
        share = (cpu_s / wall_s) if cpu_s and wall_s and math.isfinite(cpu_s) else 1.0
        self.threads = max(1, min(usable_cores(), round(share)))
        self._a = torch.rand(SIDE, SIDE)
        with torch_threads(self.threads):
            torch.mm(self._a, self._a)   # warm-up: the thread pool started, the code paged in
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < CALIBRATE_S:
                torch.mm(self._a, self._a)
                n += 1
            per_product = (time.perf_counter() - t0) / n
        self.products_per_sample = float(wall_s) / per_product
        self.words = (f"the same CPU work as your script's step stands in for it ({self.threads} torch thread(s), "
                      f"{wall_s * 1e3:.2f} ms a sample when alone): a worker that competes for its cores slows it, "
                      "as it slowed your step")

    def __call__(self, batch) -> None:
        import torch

        n = max(1, round(self.products_per_sample * (batch_len(batch) or self.batch_size)))
        with torch_threads(self.threads):
            for _ in range(n):
                torch.mm(self._a, self._a)


__all__ = ["StandInStep", "SIDE", "CALIBRATE_S"]
