"""Progress bars for the long steps of data_prep (build, decode, pack, verify).

A bar appears only when its step has run for more than ``DELAY`` seconds, so small
sets (the tests, the smoke profile) stay quiet. ``FEEDLAB_PROGRESS=0`` turns bars off.
Bars go to stderr and redraw at most twice a second (a notebook stores every redraw).
"""

from __future__ import annotations

import os
import sys
from typing import Iterable, Iterator, Sequence

DELAY = 1.0


def enabled() -> bool:
    return os.environ.get("FEEDLAB_PROGRESS", "1").strip().lower() not in ("0", "false", "no", "off")


def bar(total: int | None, desc: str, unit: str = "sample"):
    """A tqdm bar (or a no-op one when progress is off)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, delay=DELAY, mininterval=0.5,
                leave=False, dynamic_ncols=True, disable=not enabled())


def track(items: Iterable, total: int | None, desc: str, unit: str = "sample") -> Iterator:
    """Iterate ``items`` with a bar."""
    with bar(total, desc, unit) as b:
        for item in items:
            yield item
            b.update(1)


class Tracked(Sequence):
    """A sized sequence whose iteration advances a bar (writers iterate their samples once)."""

    def __init__(self, seq: Sequence, desc: str, unit: str = "sample"):
        self.seq, self.desc, self.unit = seq, desc, unit

    def __len__(self) -> int:
        return len(self.seq)

    def __getitem__(self, i):
        return self.seq[i]

    def __iter__(self):
        return track(iter(self.seq), len(self.seq), self.desc, self.unit)
