"""The tuner's measured passes, raced: only the start and the pick need a full steady window.

Each candidate's pass is measured by :func:`feedlab.doctor.trials.measure` (a fresh loader, its warm-up left out,
a steady window, other programs' load recorded), one candidate at a time so that what is already measured can end
the next one's window early (``trials.Candidate.early``, asked every 5 timed batches):

* **excluded** (:func:`excluded_by`): its rate so far, at the top of its 95% interval, is below the leader's
  (the fastest measured, at the bottom of its interval), or cannot be told apart from the start by the target
  (×1.05: the one judge could only say "within spread" or "missed"). It cannot be the pick: its pass ends there
  (at least a quarter of the steady window and two looks in a row: one narrow look among many is optional
  stopping), and it gets no further pass;
* **decided** (:func:`decided`): its window already meets the like-for-like rule (≥ ``min_window_s`` and the
  timed batches an imprecise rate needs) and its interval is above the start's by the target and above every
  other measured: a longer window cannot change the pick; its rate is kept, imprecise with its half-width.

The start is measured first, never ended early (the reference of every verdict), then the candidates in the order the
model ranked them; later passes rotate (B C A) over those not excluded. Successive halving: the first window of
each may be capped at the shortest a verdict accepts (``first_cap_s``: ≥ 1 s and 50 batches, or ±5% sooner). Where the fastest and the start are not
both steady and the judge could not yet tell them apart (within spread, or not tested fairly), the two are
measured once more with twice the cap (:func:`once_more`); a decided verdict (met, or missed) is not re-measured.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from feedlab import like_for_like as lfl
from feedlab.doctor import trials as TR

CONFIRM = 2            # looks in a row an early end needs
EXCLUDE_SHARE = 0.25   # an exclusion waits for this share of the steady window at least


@dataclass
class Raced:
    """The trials (the start first), those excluded by the race with why, and what the race did (notes)."""
    trials: list[TR.Trial]
    excluded: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def interval(t: TR.Trial) -> tuple[float, float]:
    """A measured trial's rate interval: its passes' range widened by its windows' half-width."""
    h = t.half_width if t.half_width is not None and math.isfinite(t.half_width) else 0.0
    return min(t.lo, t.median * (1 - h)), max(t.hi, t.median * (1 + h))


def excluded_by(rate: float, hw: float, start: TR.Trial | None, lead: TR.Trial | None,
                target: float = TR.DEFAULT_TARGET) -> str | None:
    """Why a candidate at ``rate`` (95% relative half-width ``hw``) so far cannot be the pick, or None."""
    if not math.isfinite(hw) or rate <= 0:
        return None
    top = rate * (1 + hw)
    if start is not None and start.ok:
        h = math.hypot(hw, start.half_width or 0.0)
        best = rate / start.median * (1 + h)
        if best < target:
            return f"at most ×{best:.2f} over your start, under ×{target:g}"
    if lead is not None and lead.ok and top < interval(lead)[0]:
        return f"{rate:.0f} (±{hw:.0%}) samples/s, below {lead.name}'s {interval(lead)[0]:.0f} or more"
    return None


def decided(rate: float, hw: float, start: TR.Trial | None, others: list[TR.Trial],
            target: float = TR.DEFAULT_TARGET) -> str | None:
    """Why a candidate whose window already meets the like-for-like rule needs no longer one: over the start by
    the target at the bottom of the ratio's interval, and above every other measured; else None."""
    if start is None or not start.ok or not math.isfinite(hw):
        return None
    r = rate / start.median
    h = math.hypot(hw, start.half_width or 0.0)
    if r * (1 - h) <= target:
        return None
    if any(rate * (1 - hw) <= interval(o)[1] for o in others if o.ok):
        return None
    return f"×{r:.2f} (±{h:.0%}) over your start and above every other measured"


class Rule:
    """``Candidate.early`` for one candidate of the race: reads what is measured so far at each look."""

    def __init__(self, name: str, done: dict[str, TR.Trial], start: str, skip: dict[str, str], target: float,
                 min_window_s: float, min_batches: int, half_width: float):
        self.name, self.done, self.start, self.skip, self.target = name, done, start, skip, target
        self.min_window_s, self.min_batches, self.half_width = min_window_s, int(min_batches), half_width
        self.streak, self.last, self.excluded, self.kind = 0, 0, None, None

    def _others(self) -> list[TR.Trial]:
        return [t for n, t in self.done.items() if n not in self.skip and n != self.name and t.ok and not t.recipe]

    def __call__(self, rate: float, hw: float, timed: int, window: float) -> str | None:
        if timed < self.last:           # a new pass (a busy one measured again): nothing carried over
            self.streak, self.excluded = 0, None
        self.last = timed
        start = self.done.get(self.start)
        others = self._others()
        kind, why = "excluded", None
        if window >= EXCLUDE_SHARE * self.min_window_s:
            why = excluded_by(rate, hw, start, max(others, key=lambda t: t.median, default=None), self.target)
        if why is None and window >= self.min_window_s and (timed >= self.min_batches or hw <= self.half_width):
            kind, why = "decided", decided(rate, hw, start, [t for t in others if t.name != self.start], self.target)
        self.streak = self.streak + 1 if why and kind == self.kind else (1 if why else 0)
        self.kind = kind
        if self.streak < CONFIRM:
            return None
        if kind == "excluded":
            self.excluded = why
        return f"{kind} after {window:.2f} s: {why}"


def _timed(trials: list[TR.Trial]) -> int | None:
    """The fewest timed batches of those passes that have only their batches to show (a steady one is a rate at
    any length: ``doctor.trials`` counts a trial's timed batches the same way)."""
    counts = [t.timed_batches for t in trials if t.timed_batches is not None]
    loose = [t.timed_batches for t in trials if t.timed_batches is not None and t.rate_kind != "steady"]
    return min(loose or counts) if counts else None


def merge(old: TR.Trial, new: TR.Trial, longer: bool = False) -> TR.Trial:
    """``old`` with ``new``'s pass(es) added: median and range over all; steady where every pass is (``longer``:
    where the new, longer window is: its precision stands for both)."""
    if not new.rates:
        return dataclasses.replace(old, error=old.error or new.error, busy=old.busy or new.busy,
                                   seconds=old.seconds + new.seconds)
    m = dataclasses.replace(new)
    m.rates = old.rates + new.rates
    m.passes = old.passes + new.passes
    m.other_load = old.other_load + new.other_load
    m.seconds = old.seconds + new.seconds
    m.median, m.lo, m.hi = float(np.median(m.rates)), min(m.rates), max(m.rates)
    if not longer:
        m.half_width = max(x for x in (old.half_width, new.half_width, 0.0) if x is not None)
        m.rate_kind = "steady" if old.rate_kind == new.rate_kind == "steady" else "imprecise"
    m.timed_batches = _timed([new] if longer and new.rate_kind != "steady" else [old, new])
    m.window_s = min(x for x in (old.window_s, new.window_s) if x is not None)
    m.busy, m.error, m.stopped = old.busy or new.busy, old.error or new.error, new.stopped or old.stopped
    return m


def race(cands: list[TR.Candidate], *, passes: int, budget_s: float | None = None,
         target: float = TR.DEFAULT_TARGET, log: Callable[[str], None] | None = None,
         first_cap_s: float | None = None, **kw) -> Raced:
    """``cands`` (the start first) raced over ``passes`` passes (this module's docstring); ``kw`` goes to
    :func:`feedlab.doctor.trials.measure` (``step``, ``device``, ``half_width``, ``min_window_s``,
    ``max_window_s``, ``deadline_s``, ``load_window``, ``min_batches``). ``budget_s``: no pass after a
    candidate's first starts once that many seconds have gone. ``first_cap_s``: the cap of each candidate's first
    window (the tuner: the shortest a verdict accepts, ``min_window_s``; an imprecise one still runs to
    ``min_batches``): a longer window is bought only where the judge cannot yet tell the start and the best apart
    (:func:`once_more`)."""
    log = log or (lambda m: None)
    t0 = time.perf_counter()
    done: dict[str, TR.Trial] = {}
    out = Raced([])
    start = cands[0].name
    n = len(cands)
    for p in range(int(passes)):
        for j in range(n):
            c = cands[(j + p) % n]
            old = done.get(c.name)
            if old is not None and (old.error or old.busy or c.name in out.excluded):
                continue
            if p > 0 and budget_s is not None and time.perf_counter() - t0 > budget_s:
                log(f"race: budget of {budget_s:g} s spent; pass {p + 1} of {c.name} not started")
                continue
            rule = None if c.name == start else Rule(
                c.name, done, start, out.excluded, target, kw.get("min_window_s", 1.0),
                kw.get("min_batches", lfl.MIN_TIMED_BATCHES), kw.get("half_width", 0.05))
            cap = {"max_window_s": first_cap_s} if p == 0 and first_cap_s is not None else {}
            new = TR.measure([dataclasses.replace(c, early=rule)], passes=1, log=log, **{**kw, **cap})[0]
            done[c.name] = merge(old, new) if old is not None else new
            if rule is not None and rule.excluded and new.stopped:
                out.excluded[c.name] = new.stopped
                log(f"race: {c.name} {new.stopped}")
    out.trials = [done[c.name] for c in cands if c.name in done]
    return out


def once_more(out: Raced, cands: list[TR.Candidate], target: float = TR.DEFAULT_TARGET, **kw) -> None:
    """Where the fastest measured and the start are not both steady and the judge has not told them apart (within
    spread, or not tested fairly), the two are measured once more, interleaved, with the cap ``kw`` gives (the
    tuner: twice its own), in as many passes as bring each to ``lfl.MIN_REPEATS`` (an imprecise side is judged
    only from that many; at least one pass): each is then steady where its longer window reached its precision, its median and
    spread over both passes. A verdict already met or missed is left as it is (a longer window cannot change
    the pick)."""
    by = {t.name: t for t in out.trials}
    start = by.get(cands[0].name)
    ok = [t for t in out.trials if t.ok and not t.recipe and t.name not in out.excluded]
    if start is None or not start.ok or not ok:
        return
    best = max(ok, key=lambda t: t.median)
    if best is start or (start.rate_kind == "steady" and best.rate_kind == "steady"):
        return
    if TR.judge(start, best, target).word in (lfl.MET, lfl.MISSED):
        return
    cs = {c.name: c for c in cands}
    # enough passes that an imprecise side can be judged at all (the one rule: lfl.MIN_REPEATS repeats)
    passes = max(1, lfl.MIN_REPEATS - min(len(start.rates), len(best.rates)))
    again = TR.measure([cs[start.name], cs[best.name]], passes=passes, **kw)
    for old, new in zip((start, best), again):
        if new.error or not new.rates:
            continue
        out.trials[out.trials.index(old)] = merge(old, new, longer=True)
    out.notes.append(f"{start.name} and {best.name} measured once more with a longer window, {passes} "
                     f"pass{'es' if passes > 1 else ''} each (not yet told apart, a window at its cap before its "
                     "precision)")
