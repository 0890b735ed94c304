"""A notebook's time budget: the profile states it (``budget_s``), the notebook keeps it.

A grid tries its settings in the order its notebook gives them, most telling first. Before each
setting it asks the budget whether the setting fits (:meth:`Budget.allows`): one whose expected
cost would run past what is left is left out, and named. The expected cost is the one given
(a recorded cost), else the dearest setting of the same group measured so far in this run, else
the dearest of any group. After the grid the notebook prints :meth:`Budget.note`, so a reader
sees what this run did not measure and why, and saves :meth:`Budget.save` (``setting_costs.json``
beside its results: each setting's seconds on this machine, what the next plan is sized from).

No budget (``None`` or 0) allows everything and notes nothing: the ``full`` profile and a user
who wants every setting pass none.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from feedlab.results import atomic_write

COSTS_FILE = "setting_costs.json"


class Budget:
    """Seconds a notebook may spend on its grids, counted from the budget's creation (or
    :meth:`start`). ``what`` names a setting the way a reader would ("png, 4 workers");
    ``group`` is what costs alike (a format, a loader kind): the estimate for a setting
    not yet run is the dearest of its group so far."""

    def __init__(self, seconds: float | None, name: str = "", clock: Callable[[], float] = time.monotonic):
        if seconds is not None and (not isinstance(seconds, (int, float)) or isinstance(seconds, bool)
                                    or seconds < 0 or math.isnan(seconds)):
            raise ValueError(f"budget_s={seconds!r}: seconds >= 0 (0 or None: no budget)")
        self.seconds = float(seconds) if seconds else None
        self.name = name
        self._clock = clock
        self._t0 = clock()
        self.costs: dict[str, float] = {}
        self._group_cost: dict[str, float] = {}
        self.left_out: list[tuple[str, str]] = []

    def start(self) -> Budget:
        """Count from now (a notebook whose set-up should not be charged)."""
        self._t0 = self._clock()
        return self

    @property
    def limited(self) -> bool:
        return self.seconds is not None

    def spent(self) -> float:
        return self._clock() - self._t0

    def left(self) -> float:
        return math.inf if self.seconds is None else self.seconds - self.spent()

    def expected(self, group: str = "") -> float | None:
        """The cost to expect of a setting of ``group``: its group's dearest so far, else any's."""
        if group in self._group_cost:
            return self._group_cost[group]
        return max(self._group_cost.values(), default=None)

    def allows(self, what: str, cost_s: float | None = None, group: str = "") -> bool:
        """True where ``what`` fits in what is left (always, without a budget). A setting left
        out is recorded with the reason and the next call may still allow a cheaper one."""
        if self.seconds is None:
            return True
        left = self.left()
        est = cost_s if cost_s is not None else self.expected(group)
        if left <= 0:
            self.left_out.append((what, "no time left"))
            return False
        if est is not None and est > left:
            self.left_out.append((what, f"about {est:.0f} s with {left:.0f} s left"))
            return False
        return True

    def charge(self, what: str, seconds: float, group: str = "") -> None:
        """Record what ``what`` cost (its group's estimate is the dearest so far)."""
        self.costs[what] = round(float(seconds), 3)
        self._group_cost[group] = max(self._group_cost.get(group, 0.0), float(seconds))

    @contextmanager
    def setting(self, what: str, group: str = "") -> Iterator[None]:
        """Time the block and :meth:`charge` it (also where it raises)."""
        t0 = self._clock()
        try:
            yield
        finally:
            self.charge(what, self._clock() - t0, group)

    def note(self) -> str:
        """One paragraph naming what was left out to stay inside the budget; "" where nothing was."""
        if not self.left_out:
            return ""
        head = f"{self.name}: " if self.name else ""
        items = "; ".join(f"{what} ({why})" for what, why in self.left_out)
        return (f"{head}left out to stay inside this notebook's budget of {self.seconds:.0f} s "
                f"({len(self.left_out)} setting(s)): {items}. A profile without budget_s (full) measures them.")

    def record(self) -> dict:
        return {"budget_s": self.seconds, "spent_s": round(self.spent(), 3), "costs_s": dict(self.costs),
                "left_out": [{"setting": w, "why": y} for w, y in self.left_out]}

    def save(self, out_dir: str | Path) -> Path:
        """Write :meth:`record` as ``setting_costs.json`` in ``out_dir`` (one atomic write)."""
        path = Path(out_dir) / COSTS_FILE
        atomic_write(path, json.dumps(self.record(), indent=1, sort_keys=True) + "\n")
        return path
