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

The run's limit is harder than the budget. A runner that stops a notebook at ``--limit-s`` tells
its kernel when (:data:`DEADLINE_ENV`, seconds since the epoch); a budget then also refuses, with
the reason, any setting that would end less than :data:`FINISH_S` before that moment, even one a
claim reads (``allows(..., essential=True)``), and :meth:`Budget.cap_s` shortens a rate's timing
cap so that one setting cannot run past it. A notebook so cut comes home with what it measured,
named, instead of being stopped mid-cell with nothing (the GPU loan of 2026-11-26: 01 and 09 ran
their claim-read settings past their budgets and were stopped at their limits).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from feedlab.results import atomic_write

COSTS_FILE = "setting_costs.json"
DEADLINE_ENV = "FEEDLAB_DEADLINE"   # when the runner stops this notebook (seconds since the epoch)
FINISH_S = 20.0   # what a notebook needs after its grids (figures, claims, its record) before that moment


def seconds_to_deadline(now: Callable[[], float] = time.time) -> float:
    """Seconds until the runner stops this notebook (:data:`DEADLINE_ENV`); ``inf`` where no
    runner set one (or it is not a number: then no limit is assumed, as without a runner)."""
    raw = os.environ.get(DEADLINE_ENV, "").strip()
    try:
        at = float(raw)
    except ValueError:
        return math.inf
    return at - now() if math.isfinite(at) else math.inf


class Budget:
    """Seconds a notebook may spend on its grids, counted from the budget's creation (or
    :meth:`start`). ``what`` names a setting the way a reader would ("png, 4 workers");
    ``group`` is what costs alike (a format, a loader kind): the estimate for a setting
    not yet run is the dearest of its group so far."""

    def __init__(self, seconds: float | None, name: str = "", clock: Callable[[], float] = time.monotonic,
                 deadline_s: float | None = None, finish_s: float = FINISH_S):
        if seconds is not None and (not isinstance(seconds, (int, float)) or isinstance(seconds, bool)
                                    or seconds < 0 or math.isnan(seconds)):
            raise ValueError(f"budget_s={seconds!r}: seconds >= 0 (0 or None: no budget)")
        self.seconds = float(seconds) if seconds else None
        self.name = name
        self._clock = clock
        self._t0 = clock()
        # the run's limit, in this budget's clock: deadline_s from now (default: the runner's, if any)
        # less what the notebook needs after its grids
        until = seconds_to_deadline() if deadline_s is None else float(deadline_s)
        self.deadline_s = until if math.isfinite(until) else None
        self._hard_end = self._t0 + until - float(finish_s) if math.isfinite(until) else math.inf
        self.costs: dict[str, float] = {}
        self._group_cost: dict[str, float] = {}
        self.left_out: list[tuple[str, str]] = []
        self._keep: Path | None = None

    def start(self) -> Budget:
        """Count from now (a notebook whose set-up should not be charged)."""
        self._t0 = self._clock()
        return self

    @property
    def limited(self) -> bool:
        return self.seconds is not None or math.isfinite(self._hard_end)

    def spent(self) -> float:
        return self._clock() - self._t0

    def hard_left(self) -> float:
        """Seconds before the run's limit, less the notebook's finish (``inf`` without a runner's limit)."""
        return self._hard_end - self._clock() if math.isfinite(self._hard_end) else math.inf

    def left(self) -> float:
        soft = math.inf if self.seconds is None else self.seconds - self.spent()
        return min(soft, self.hard_left()) if math.isfinite(self._hard_end) else soft

    def cap_s(self, cap_s: float, passes: int = 1, floor_s: float = 1.0) -> float:
        """A timing cap of ``cap_s`` per pass, shortened so that ``passes`` passes (and as much again for
        start-up and warm-up) end before the run's limit; never under ``floor_s``. A rate cut short
        of its precision is labelled imprecise by its timer, never passed off as precise."""
        hard = self.hard_left()
        if not math.isfinite(hard):
            return float(cap_s)
        return max(float(floor_s), min(float(cap_s), hard / (2 * max(1, int(passes)))))

    def expected(self, group: str = "") -> float | None:
        """The cost to expect of a setting of ``group``: its group's dearest so far, else any's."""
        if group in self._group_cost:
            return self._group_cost[group]
        return max(self._group_cost.values(), default=None)

    def allows(self, what: str, cost_s: float | None = None, group: str = "", essential: bool = False) -> bool:
        """True where ``what`` fits in what is left (always, without a budget or a limit). A setting left
        out is recorded with the reason and the next call may still allow a cheaper one. An ``essential``
        setting (a claim reads it) passes the budget but not the run's limit."""
        if not self.limited:
            return True
        est = cost_s if cost_s is not None else self.expected(group)
        hard = self.hard_left()
        if hard <= 0 or (est is not None and est > hard):
            self.left_out.append((what, "no time left before the run's limit" if hard <= 0 else
                                  f"about {est:.0f} s with {hard:.0f} s left before the run's limit"))
            return False
        if essential or self.seconds is None:
            return True
        left = self.left()
        if left <= 0:
            self.left_out.append((what, "no time left"))
            return False
        if est is not None and est > left:
            self.left_out.append((what, f"about {est:.0f} s with {left:.0f} s left"))
            return False
        return True

    def charge(self, what: str, seconds: float, group: str = "") -> None:
        """Record what ``what`` cost (its group's estimate is the dearest so far); with a folder to
        keep them in (:meth:`keep_in`), the costs so far are saved at once: a notebook stopped at
        its limit still tells the next plan what each setting took."""
        self.costs[what] = round(float(seconds), 3)
        self._group_cost[group] = max(self._group_cost.get(group, 0.0), float(seconds))
        if self._keep is not None:
            self.save(self._keep)

    def keep_in(self, out_dir: str | Path) -> Budget:
        """Save ``setting_costs.json`` in ``out_dir`` after every setting (and at :meth:`save`)."""
        self._keep = Path(out_dir)
        return self

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
        limits = " and ".join(x for x in (
            f"this notebook's budget of {self.seconds:.0f} s" if self.seconds is not None else "",
            f"the run's limit ({self.deadline_s:.0f} s from the budget's start)" if self.deadline_s is not None
            else "") if x)
        again = ("A profile without budget_s (full) measures them." if self.deadline_s is None else
                 "A profile without budget_s (full), or a longer limit, measures them.")
        return f"{head}left out to stay inside {limits} ({len(self.left_out)} setting(s)): {items}. {again}"

    def record(self) -> dict:
        rec = {"budget_s": self.seconds, "spent_s": round(self.spent(), 3), "costs_s": dict(self.costs),
               "left_out": [{"setting": w, "why": y} for w, y in self.left_out]}
        if self.deadline_s is not None:
            rec["limit_s"] = round(self.deadline_s, 1)   # the run's limit, seconds from the budget's start
        return rec

    def save(self, out_dir: str | Path) -> Path:
        """Write :meth:`record` as ``setting_costs.json`` in ``out_dir`` (one atomic write)."""
        path = Path(out_dir) / COSTS_FILE
        atomic_write(path, json.dumps(self.record(), indent=1, sort_keys=True) + "\n")
        return path
