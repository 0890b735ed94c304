"""Notebook 09: where one SRCNN epoch goes, batch 8…128, before and after the fixes.

The baseline is the write-up's loader (PNG files, PIL decode, ToTensor +
default_collate); the fixed one reads LMDB and collates with
:class:`feedlab.collate.FastCollate` (uint8 batch, float conversion on the
device). Both run the same grid of batch size × workers × pin_memory through
:func:`feedlab.experiments.loader_grid.run_grid`.
"""

from __future__ import annotations

from typing import Sequence

from feedlab.experiments.loader_grid import grid, run_grid, split_applicable
from feedlab.results import Results

PIPELINES = {"baseline": ("png", "totensor"), "fixed": ("lmdb", "fast")}


def plan(batch_sizes: Sequence[int], worker_counts: Sequence[int], pin_memory: Sequence[bool],
         model: str = "auto", device=None):
    """(settings to run, [(setting, why skipped)]) for both pipelines."""
    settings = []
    for fmt, collate in PIPELINES.values():
        settings += grid(format=fmt, collate=collate, batch_size=list(batch_sizes),
                         num_workers=list(worker_counts), pin_memory=list(pin_memory), model=model)
    from feedlab.experiments.loader_grid import default_device

    return split_applicable(settings, device if device is not None else default_device())


def run(data_root, settings, repeats: int = 3, max_samples: int | None = None, device=None, warmup: int = 1,
        log=None, **sizing) -> Results:
    """``sizing``: ``min_timed_batches`` / ``time_budget_s`` (steady epochs, see ``run_grid``)."""
    return run_grid(data_root, settings, repeats=repeats, max_samples=max_samples, device=device,
                    warmup=warmup, experiment="batch_size_breakdown", log=log, **sizing)


def pipeline_of(fmt: str, collate: str) -> str:
    for name, (f, c) in PIPELINES.items():
        if (f, c) == (fmt, collate):
            return name
    return f"{fmt}+{collate}"


__all__ = ["PIPELINES", "plan", "run", "pipeline_of"]
