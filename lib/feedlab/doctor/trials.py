"""The doctor's trials: a change measured on the user's own job, interleaved, before anything is said of it.

The one place a candidate setting is measured, for the advice (every advised change measured before it is
printed) and for the tuner (:mod:`feedlab.tune`). A :class:`Candidate` builds a *fresh* loader (e.g.
``stage.rebuild(user_loader, num_workers=4)``); :func:`measure` runs every candidate in interleaved passes
(A B C, then B C A, then C A B: no candidate always first after a pause, none always after the heaviest),
each pass:

* a fresh loader from ``make()`` and a fresh ``iter()``; its warm-up (``pipeline.rates.warmup_batches``:
  the first batch and what the workers prefetch meanwhile) left out of the rate;
* then a steady window (``pipeline.rates.SteadyStop``): timed until its 95% half-width is within
  ``half_width`` (at least ``min_window_s`` seconds and 50 batches, or the precision), else labelled
  ``imprecise`` at ``max_window_s``; an epoch that ends inside the window is followed by the next, as the
  user's loop does;
* the user's ``step`` run on each batch where given (on ``device``): the rate is the user's loop, data wait
  and step together;
* what other programs used meanwhile (``monitor.LoadWindow``): a pass measured busy is measured again once,
  then the trial is marked busy (and :func:`judge` says "not tested fairly", never a gain).

Every wait has a deadline (``deadline_s``: ``make()``, each batch, each step); what the user's code raises,
a loader whose dataset cannot be pickled for a process context, a step that hangs, become ``Trial.error``:
one line, the other candidates measured on. :func:`judge` is the one verdict on a change:
:func:`feedlab.like_for_like.verdict` over the two :class:`~feedlab.like_for_like.Side` records with the
ratio's interval from the paired per-pass rates; "within spread" or "missed" reads "tried: no gain".
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Iterable

import numpy as np

from feedlab import like_for_like as lfl
from feedlab import monitor, stage, timing
from feedlab.errors import DeadlineError, one_line
from feedlab.pipeline import rates

from .guard import HUNG_HINT, UserCodeError, deadline, user_call
from .wrap import batch_len, to_device

DEFAULT_TARGET = 1.05      # a change is worth saying only at ≥ ×1.05 (the field's 5% line)
MIN_TIMED = 20             # the floor of a precise window; an imprecise one runs on to lfl.MIN_TIMED_BATCHES
NO_GAIN = "tried: no gain"


@dataclass
class Candidate:
    """One setting to try: ``make()`` builds a fresh loader with it; ``settings`` what changed against the
    start (``{}`` for the start itself); ``recipe``: the change alters batch size, model or precision, so it
    is measured but never credited as an input-pipeline gain."""
    name: str
    make: Callable[[], Iterable]
    settings: dict = field(default_factory=dict)
    recipe: bool = False
    # told the rate so far, its 95% relative half-width, the timed batches and seconds (every 5 timed batches
    # from 10); a reason returned ends the pass there, before its window's precision or cap (``Trial.stopped``)
    early: Callable[[float, float, int, float], str | None] | None = None


@dataclass
class Trial:
    """What :func:`measure` found for one candidate: samples/s per pass (the user's loop), their median and
    range, the precision of the windows, what other programs used in each pass, and why it is not usable."""
    name: str
    settings: dict
    recipe: bool = False
    rates: list[float] = field(default_factory=list)
    median: float | None = None
    lo: float | None = None
    hi: float | None = None
    half_width: float | None = None     # the widest 95% relative half-width of its passes' windows
    passes: int = 0
    timed_batches: int | None = None    # the fewest timed batches of a pass
    window_s: float | None = None       # the shortest timed window of a pass
    other_load: list[float] = field(default_factory=list)   # other programs' share of the cores, per pass
    busy: str | None = None
    rate_kind: str | None = None        # "steady" (every window precise) or "imprecise"
    error: str | None = None
    batch_size: int | None = None
    workers: int | None = None
    order: str | None = None
    epoch_batches: int | None = None
    seconds: float = 0.0                # wall time spent on it, start-up and warm-up included
    stopped: str | None = None          # why a pass ended before its precision or cap (``Candidate.early``)

    @property
    def ok(self) -> bool:
        """Measured, not busy, no error: a rate that may be chosen."""
        return self.error is None and self.busy is None and self.median is not None

    def side(self, **shared) -> lfl.Side:
        """This trial as one side of a like-for-like comparison (``shared`` overrides a field: ``cache``,
        ``pixel_error``, ``workers``). The dataset, collate and sampler are the user's own on every side
        (``stage.rebuild``), so the pixels are the same by construction (0.0); the cache is ``warm`` (every
        pass reads the same data the passes before it read)."""
        kw: dict[str, Any] = dict(label=self.name, order=self.order, pixel_error=0.0, batch_size=self.batch_size,
                                  workers=self.workers, cache="warm", timed_batches=self.timed_batches,
                                  window_s=self.window_s, epoch_batches=self.epoch_batches,
                                  half_width=self.half_width, busy=self.busy, rate_kind=self.rate_kind,
                                  repeats=self.passes)
        if self.recipe:   # a recipe change is measured, never a loader's credit: the sides differ on it
            kw["recipe"] = f"changed: {', '.join(f'{k}={v}' for k, v in self.settings.items())}"
        kw.update(shared)
        return lfl.Side(**kw)

    def row(self) -> dict:
        """A flat record (results tables, JSON)."""
        d = dataclasses.asdict(self)
        d["settings"] = dict(self.settings)
        return d


# ---------------------------------------------------------------- one pass

def _order_of(loader) -> str | None:
    """The order class of the loader's sampler: the batch sampler's own (a DataLoader rebuilt around a batch
    sampler reports a default SequentialSampler as its ``sampler``), else the loader's."""
    sampler = getattr(getattr(loader, "batch_sampler", None), "sampler", None) or getattr(loader, "sampler", None)
    if sampler is None:
        return None
    name = type(sampler).__name__
    return lfl.order_of(name) or f"your {name}"


def _shape(loader) -> SimpleNamespace:
    """What a pass's warm-up depends on: the loader's workers and prefetch (none: 0 and 2)."""
    w = int(getattr(loader, "num_workers", 0) or 0)
    return SimpleNamespace(num_workers=w, prefetch_factor=getattr(loader, "prefetch_factor", None) or 2)


def _next(it, k: int, limit: float | None, name: str):
    with deadline(limit, f"batch {k} of the loader with {name}", HUNG_HINT):
        return next(it)


def _pass(c: Candidate, step, device, stop_kw: dict, limit: float | None, min_batches: int) -> dict:
    """One pass of ``c``: a fresh loader, its warm-up left out, a steady window of the user's loop."""
    loader = user_call(f"the loader factory for {c.name}", c.make, limit_s=limit)
    shape = _shape(loader)
    warm = rates.warmup_batches(shape)
    stop = rates.SteadyStop(warm, min_timed=min(MIN_TIMED, min_batches), min_capped=min_batches, **stop_kw)
    info = dict(workers=shape.num_workers, order=_order_of(loader),
                batch_size=getattr(loader, "batch_size", None)
                or getattr(getattr(loader, "batch_sampler", None), "batch_size", None), epoch_batches=None)
    try:
        info["epoch_batches"] = len(loader)
    except TypeError:
        pass
    sizes: list[int] = []
    it = None
    try:
        with deadline(limit, f"starting the loader with {c.name}", HUNG_HINT):
            it = iter(loader)
        k = 0
        t_prev_epochs = 0
        while True:
            try:
                batch = _next(it, k, limit, c.name)
            except StopIteration:
                if k == t_prev_epochs:   # an epoch with no batch: nothing more to time
                    break
                t_prev_epochs = k
                stage.stop(loader, it)
                it = iter(loader)
                continue
            sizes.append(batch_len(batch) or 0)
            if step is not None:
                b = to_device(batch, device) if device else batch
                user_call("your step(batch)", step, b, limit_s=limit)
            timing.sync_device(device)
            k += 1
            if stop(k, time.perf_counter()) or _early(c, stop, sizes, warm, info):
                break
    finally:
        if it is not None:
            stage.stop(loader, it)
        del it
    timed = len(stop.ends) - warm
    if timed < 1:
        raise UserCodeError(f"the loader with {c.name} gave {len(stop.ends)} batch(es), fewer than its warm-up "
                            f"({warm}) and one timed batch: give it more data")
    if not stop.capped and not stop.precise:
        stop.finish()
    if info.get("stopped"):
        stop.precise = False    # ended before its precision: never steady
    t0 = stop.ends[warm - 1]
    window = stop.ends[-1] - t0
    n = sum(sizes[warm:])
    rate = n / window if window > 0 and n else math.nan
    info.update(rate=rate, timed=timed, window_s=window, half_width=stop.achieved, precise=bool(stop.precise))
    if info["batch_size"] is None and sizes:
        info["batch_size"] = max(sizes)
    return info


def _early(c: Candidate, stop: rates.SteadyStop, sizes: list[int], warm: int, info: dict) -> bool:
    """Whether ``c.early`` ends this pass here (every 5 timed batches from 10: the rate so far and its precision)."""
    timed = len(stop.ends) - warm
    if c.early is None or timed < 10 or timed % 5:
        return False
    window = stop.ends[-1] - stop.ends[warm - 1]
    if window <= 0:
        return False
    d = np.diff(stop.ends[warm - 1:])
    why = c.early(sum(sizes[warm:]) / window, rates.rel_half_width(d, 10 if d.size >= 20 else 5), timed, window)
    if why:
        info["stopped"] = str(why)
    return bool(why)


def _err(exc: BaseException, c: Candidate) -> str:
    text = one_line(exc)
    if isinstance(exc, (UserCodeError, DeadlineError)):
        return text
    low = text.lower()
    if "pickle" in low or "can't get attribute" in low or "lambda" in low:
        return (f"{c.name}: the dataset cannot be pickled for a worker process ({type(exc).__name__}: {text}); "
                "threads, or a module-level dataset class, avoid the pickling")
    return f"{c.name}: your loader raised {type(exc).__name__}: {text}"


def _busy_words(s: dict) -> str:
    return (f"other processes used {s.get('other_cpu_cores', 0):.2f} of {s.get('usable_cores', '?')} usable "
            f"cores ({s.get('other_fraction', 0):.0%})")


# ---------------------------------------------------------------- the measurement

def measure(candidates: list[Candidate], step: Callable[[Any], Any] | None = None, device: str | None = None,
            passes: int = 3, half_width: float = 0.05, min_window_s: float = 1.0, max_window_s: float = 8.0,
            deadline_s: float | None = 120.0, budget_s: float | None = None,
            log: Callable[[str], None] | None = None,
            load_window: Callable[[], Any] = monitor.LoadWindow,
            min_batches: int = lfl.MIN_TIMED_BATCHES) -> list[Trial]:
    """Every candidate measured in ``passes`` interleaved passes (this module's docstring). ``deadline_s``
    bounds every wait on the user's code (``make()``, a batch, the step); ``budget_s``: no pass after a
    candidate's first starts once that many seconds have gone (a trial then has fewer passes, and says so through ``passes``);
    ``load_window()`` gives what other programs used over a pass (``.summary()``: ``busy``,
    ``other_fraction``; ``monitor.LoadWindow``, a fake in tests). ``min_batches``: the timed batches an
    imprecise window runs to before its cap may end it (the like-for-like rule's 50; fewer only where the
    caller says the windows need not be judged, e.g. a test). One :class:`Trial` per candidate, in order."""
    log = log or (lambda m: None)
    trials = [Trial(c.name, dict(c.settings), c.recipe) for c in candidates]
    infos: list[list[dict]] = [[] for _ in candidates]
    stop_kw = dict(half_width=half_width, min_window_s=min_window_s, max_window_s=max_window_s)
    t_start = time.perf_counter()
    n = len(candidates)
    with warnings.catch_warnings():   # torch's "more workers than suggested": a trial above the cores means it
        warnings.filterwarnings("ignore", message=r"This DataLoader will create \d+ worker processes")
        _passes(candidates, trials, infos, step, device, passes, stop_kw, deadline_s, budget_s, log, load_window,
                min_batches, t_start, n)
    for t, got in zip(trials, infos):
        _summarise(t, got)
    return trials


def _passes(candidates, trials, infos, step, device, passes, stop_kw, deadline_s, budget_s, log, load_window,
            min_batches, t_start, n) -> None:
    for p in range(int(passes)):
        for j in range(n):
            i = (j + p) % n        # rotate the order each pass
            c, t = candidates[i], trials[i]
            if t.error or t.busy:
                continue
            if p > 0 and budget_s is not None and time.perf_counter() - t_start > budget_s:
                log(f"trials: budget of {budget_s:g} s spent; pass {p + 1} of {c.name} not started")
                continue
            for attempt in (1, 2):        # a pass measured busy is measured again once
                log(f"trial {c.name}: pass {p + 1}/{passes}{' (again: busy)' if attempt == 2 else ''}")
                window, t0 = load_window(), time.perf_counter()
                try:
                    info = _pass(c, step, device, stop_kw, deadline_s, int(min_batches))
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # the user's code: one line, the other candidates go on
                    t.error = _err(exc, c)
                    log(f"trial {c.name}: {t.error}")
                    break
                finally:
                    t.seconds += time.perf_counter() - t0
                s = window.summary()
                info["other"] = s.get("other_fraction")
                if not s.get("busy"):
                    infos[i].append(info)
                    break
                if attempt == 2:
                    t.busy = f"measured on a busy machine twice ({_busy_words(s)})"
                    infos[i].append(info)


def _summarise(t: Trial, got: list[dict]) -> None:
    if not got:
        return
    t.other_load = [g["other"] for g in got if g.get("other") is not None]
    good = [g for g in got if np.isfinite(g["rate"]) and g["rate"] > 0]
    t.passes = len(good)
    if not good:
        t.error = t.error or f"{t.name}: no timed samples in any pass"
        return
    t.rates = [float(g["rate"]) for g in good]
    t.median, t.lo, t.hi = float(np.median(t.rates)), min(t.rates), max(t.rates)
    t.half_width = float(max(g["half_width"] for g in good))
    # the fewest timed batches of a pass that has only its batches to show (a precise pass is a rate at any length)
    t.timed_batches = int(min(g["timed"] for g in ([g for g in good if not g["precise"]] or good)))
    t.window_s = float(min(g["window_s"] for g in good))
    t.rate_kind = "steady" if all(g["precise"] for g in good) else "imprecise"
    t.stopped = next((g["stopped"] for g in good if g.get("stopped")), None)
    first = good[0]
    t.workers, t.order, t.batch_size, t.epoch_batches = (first["workers"], first["order"], first["batch_size"],
                                                        first["epoch_batches"])


# ---------------------------------------------------------------- the one judge of a change

def ratio_interval(start: Trial, other: Trial) -> tuple[float | None, float | None, float | None]:
    """``other`` over ``start``: the ratio of medians, and its interval: the range of the paired per-pass
    ratios (pass k of one beside pass k of the other), widened by the two windows' own precision."""
    if not (start.median and other.median):
        return None, None, None
    r = other.median / start.median
    paired = [b / a for a, b in zip(start.rates, other.rates) if a > 0]
    h = math.hypot(start.half_width or 0.0, other.half_width or 0.0)
    h = h if math.isfinite(h) else 0.0
    lo = min([r * (1 - h)] + [x * (1 - h) for x in paired])
    hi = max([r * (1 + h)] + [x * (1 + h) for x in paired])
    return r, lo, hi


def judge(start: Trial, other: Trial, target: float = DEFAULT_TARGET) -> lfl.Verdict:
    """THE verdict on ``other`` against ``start``: :func:`feedlab.like_for_like.verdict` over their sides and
    the ratio's interval (:func:`ratio_interval`). The setting the change moves is not a difference (a worker
    count tried is the change under test: ``verdict(changes=("workers",))``); a recipe change is never
    credited ("not like for like (recipe ...)"); an error or a side measured busy is "not tested fairly (why)" before
    anything else is compared (a busy window's length says nothing of the change)."""
    for t in (start, other):
        if t.error:
            return lfl.Verdict(lfl.NOT_FAIR, t.error, target=target)
    busy = [f"{t.name} {t.busy}" for t in (start, other) if t.busy]
    if busy:
        return lfl.Verdict(lfl.NOT_FAIR, "; ".join(busy), target=target)
    # the worker count is the change under test where the change names it (threads: no worker processes)
    changes = ("workers",) if {"num_workers", "kind", "threads"} & (set(other.settings) | set(start.settings)) else ()
    r, lo, hi = ratio_interval(start, other)
    return lfl.verdict(other.side(), start.side(), r, target=target, lo=lo, hi=hi, changes=changes)


def gain_words(v: lfl.Verdict) -> str:
    """What the advice and the tuner print for a verdict: a gain with its interval, or "tried: no gain"."""
    if v.word == lfl.MET and v.ratio is not None:
        return f"×{v.ratio:.2f} (×{v.lo:.2f}–{v.hi:.2f})" if v.lo is not None else f"×{v.ratio:.2f}"
    if v.word in (lfl.WITHIN, lfl.MISSED):
        return f"{NO_GAIN} (×{v.ratio:.2f})" if v.ratio is not None else NO_GAIN
    return str(v)
