"""``feedlab.tune(make_loader, step=None, budget_s=...)``: the doctor picks, applies and proves the loader
settings of an unmodified PyTorch DataLoader.

1. The stage probe (:mod:`feedlab.tuner.probe`) prices each stage of the user's own loop once.
2. Every setting that applies (:mod:`feedlab.tuner.candidates`) is predicted from those costs by the doctor's
   model, capped by the headspace (the step alone: no loader change passes it); those over a memory or
   /dev/shm limit are left out, named.
3. The few best predicted (the cheapest within 5% of the best worker count, the best thread count where it
   competes, and a neighbour of the first: the model is a guide, not a measurement) are measured beside the
   start with :func:`feedlab.doctor.trials.measure` (steady windows, other load recorded), raced
   (:mod:`feedlab.tuner.race`): a candidate whose interval already excludes it from the pick ends its window
   there, one already decided needs no longer window; only the start and the pick need a full one.
4. Only a measured rate is chosen, judged by :func:`feedlab.doctor.trials.judge` against the start: a change
   not told apart from the start by ×1.05 keeps the start and says so; a busy machine is "too busy to tune",
   never a pick.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from feedlab import like_for_like as lfl
from feedlab import monitor, stage
from feedlab import pipeline as pl
from feedlab.doctor import trials as TR
from feedlab.doctor.guard import UserCodeError, user_call
from feedlab.doctor.wrap import check_loader
from feedlab.pipeline.shm import SharedMemoryError, shm_problem_of

from . import candidates as CD
from . import race as RC
from .probe import Probe, probe

TOO_BUSY = "too busy to tune"
MAX_PASSES = 3        # measured passes a candidate gets at most, beyond the probe (issue 49)
NEAR = 0.95           # settings predicted within 5% of the best: the cheapest of them is the one measured
COMPETES = 0.8        # threads measured where predicted at ≥ 80% of the best (or where the fetch waits)


@dataclass
class Tuned:
    """What :func:`tune` found: the loader rebuilt with the chosen settings, and the proof."""
    loader: Any
    settings: dict                       # what changed against the start ({} : the start kept)
    line: str                            # the user's DataLoader(...) call with what changed
    trials: list[TR.Trial]
    verdict: lfl.Verdict | None          # the pick against the start (the one judge)
    gain: float | None = None            # measured, pick ÷ start (1.0 where the start is kept)
    gain_lo: float | None = None
    gain_hi: float | None = None
    headspace: float | None = None       # the step alone ÷ the start: the most any loader change can give
    recovered: float | None = None       # the share of the headspace the pick recovered
    predicted: list[dict] = field(default_factory=list)
    left_out: list[dict] = field(default_factory=list)
    probe: Probe | None = None
    seconds: float = 0.0
    passes: int = 0
    busy: str | None = None
    notes: list[str] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)   # trials the race ended early: never the pick, why

    @property
    def start(self) -> TR.Trial | None:
        return next((t for t in self.trials if t.name == "start"), None)

    @property
    def pick(self) -> TR.Trial | None:
        name = CD.name_of(self.settings)
        return next((t for t in self.trials if t.name == name), None)

    def summary(self) -> dict:
        """A flat record (notebook 16's results, ``--tune --json``)."""
        p = self.probe
        return {"settings": self.settings, "line": self.line, "verdict": str(self.verdict) if self.verdict else None,
                "verdict_word": self.verdict.word if self.verdict else None, "gain": self.gain,
                "gain_lo": self.gain_lo, "gain_hi": self.gain_hi, "headspace": self.headspace,
                "recovered": self.recovered, "seconds": self.seconds, "passes": self.passes, "busy": self.busy,
                "notes": self.notes, "trials": [t.row() for t in self.trials], "excluded": self.excluded,
                "predicted": self.predicted,
                "left_out": self.left_out, "probe_s": p.seconds if p else None,
                "io_share": p.io_share if p else None, "kept": CD.KEPT}

    def render(self) -> str:
        return "\n".join(render_lines(self))


def _row(probe: Probe, s: dict, start: dict) -> dict:
    ch = CD.changed(s, start)
    return {"settings": s, "name": CD.name_of(ch), "change": ch, "predicted": probe.predict(s),
            "cost": int(s.get("threads", s.get("num_workers", 0))), "threads": s.get("kind") == "threads"}


def _cheapest(rows: list[dict]) -> dict | None:
    rows = [r for r in rows if r["predicted"]]
    if not rows:
        return None
    best = max(r["predicted"] for r in rows)
    return min((r for r in rows if r["predicted"] >= NEAR * best), key=lambda r: r["cost"])


def shortlist(probe: Probe, settings: list[dict], start: dict, top: int = 2) -> tuple[list[dict], list[dict]]:
    """The ``top`` settings to measure beside the start, and every setting's prediction."""
    rows = [_row(probe, s, start) for s in settings]
    proc = [r for r in rows if not r["threads"]]
    thr = [r for r in rows if r["threads"]]
    best = max([r["predicted"] for r in rows if r["predicted"]] or [0.0])
    picks = []
    p, t = _cheapest(proc), _cheapest(thr)
    if t is not None and not (t["predicted"] >= COMPETES * best or probe.io_share >= CD.IO_WAIT
                              or not probe.picklable):
        t = None
    for r in sorted([x for x in (p, t) if x], key=lambda r: -r["predicted"]):
        picks.append(r)
    if p is not None and len(picks) < top + 1:     # a neighbour of the worker count, where the model may err
        ws = [r for r in proc if r["predicted"]]
        k = ws.index(p)
        heavy = probe.step[1] > 0 and p["cost"] <= probe.cores   # a step sharing the cores: fewer may win
        for j in ((k - 1, k + 1) if heavy else (k + 1, k - 1)):
            if 0 <= j < len(ws):
                picks.append(ws[j])
                break
    out = []
    for r in picks:
        if not CD.same(r["settings"], start) and r["name"] not in {o["name"] for o in out}:
            out.append(r)
    return out[:top], rows


def _candidate(loader, r: dict | None) -> TR.Candidate:
    if r is None:
        return TR.Candidate("start", lambda: stage.rebuild(loader), {})
    s = r["settings"]
    return TR.Candidate(r["name"], lambda s=s: CD.build(loader, s), dict(r["change"]))


def tune(make_loader: Callable[[], Any], step: Callable[[Any], Any] | None = None, budget_s: float = 60.0, *,
         device: str | None = None, epochs: int = 1, passes: int = 2, top: int = 2, window_s: float = 1.0,
         max_window_s: float = 4.0, half_width: float = 0.05, deadline_s: float | None = 120.0,
         ram_share: float = 0.5, ram_bytes: float | None = None, max_workers: int | None = None,
         log: Callable[[str], None] | None = None, load_window=monitor.LoadWindow,
         min_batches: int = lfl.MIN_TIMED_BATCHES) -> Tuned:
    """Tune the DataLoader ``make_loader()`` returns for the user's loop (``step(batch)`` on each batch, on
    ``device``): this module's docstring. ``budget_s`` bounds the measured passes (every candidate gets its
    first); ``window_s`` the shortest window, and the cap of each candidate's first (an imprecise one still runs to
    ``min_batches``; ``max_window_s`` caps later passes, twice it the start and the best measured once more where
    they are not yet told apart); ``epochs`` > 1 adds ``persistent_workers``; ``ram_bytes`` (default ``ram_share`` of the RAM
    available now) bounds the workers' memory. The recipe (batch size, model, precision) is never changed."""
    import psutil

    log = log or (lambda m: None)
    t0 = time.perf_counter()
    loader = user_call("your make_loader()", make_loader, limit_s=deadline_s,
                       hint="make_loader() is called with no arguments and must return your DataLoader")
    check_loader(loader, deadline_s)
    problem = shm_problem_of(loader.dataset, loader.batch_size, 1, getattr(loader, "prefetch_factor", None) or 2)
    if problem:   # the probe starts one worker: out of /dev/shm, a 60-line torch traceback and torch_* files left
        raise SharedMemoryError(f"your loader with the one worker of the tuner's probe: {problem}")
    device = pl.resolve_device(device)
    if ram_bytes is None:
        ram_bytes = ram_share * psutil.virtual_memory().available
    log("the stage probe: fetch, collate, step, one worker")
    pr = probe(loader, step, device, deadline_s, load_window)
    start = CD.start_settings(loader)
    out = Tuned(loader, {}, CD.paste_line(loader, {}), [], None, probe=pr, notes=list(pr.notes))
    settings, out.left_out = CD.grid(pr, loader, epochs, ram_bytes, max_workers)
    picks, rows = shortlist(pr, settings, start, top)
    out.predicted = [{k: r[k] for k in ("name", "change", "predicted")} for r in rows]
    if pr.busy:
        return _finish(out, t0, f"{TOO_BUSY}: {pr.busy}")
    cands = [_candidate(loader, None)] + [_candidate(loader, r) for r in picks]
    log(f"measuring {', '.join(c.name for c in cands)} ({passes} pass(es), raced)")
    kw = dict(step=step, device=device, half_width=half_width, min_window_s=window_s, deadline_s=deadline_s,
              load_window=load_window, min_batches=min_batches)
    raced = RC.race(cands, passes=passes, budget_s=max(0.0, budget_s - pr.seconds), log=log,
                    max_window_s=max_window_s, first_cap_s=min(window_s, max_window_s), **kw)
    if passes < MAX_PASSES:
        RC.once_more(raced, cands, log=log, max_window_s=2 * max_window_s, **kw)
    out.trials, out.excluded = raced.trials, raced.excluded
    out.notes += raced.notes
    out.passes = max((t.passes for t in out.trials), default=0)
    busy = [f"{t.name}: {t.busy}" for t in out.trials if t.busy]
    if busy:
        return _finish(out, t0, f"{TOO_BUSY}: {'; '.join(busy)}")
    _decide(out, loader, pr)
    return _finish(out, t0, None)


def _decide(out: Tuned, loader, pr: Probe) -> None:
    start = out.start
    for t in out.trials:
        if t.error and "pickl" in t.error.lower():
            out.notes.append(f"{t.error} (measured with threads instead)")
        elif t.error:
            out.notes.append(t.error)
    ok = [t for t in out.trials if t.ok and not t.recipe and t.name not in out.excluded]
    if start is None or not start.ok:
        why = start.error if start is not None else "not measured"
        if not ok:
            raise UserCodeError(f"the tuner could not measure your loader: {why}")
        best = max(ok, key=lambda t: t.median)
        out.notes.append(f"your loader as built could not be measured ({why}); {best.name} measured "
                         f"{best.median:.0f} samples/s, with nothing to compare it with")
        out.settings = dict(best.settings)
        out.loader = CD.build(loader, best.settings)
        out.line = CD.paste_line(loader, out.settings)
        return
    best = max(ok, key=lambda t: t.median)
    if best is start:
        why = "no setting measured faster than your start" + (" (the others stopped early: " + "; ".join(
            out.excluded) + ")" if out.excluded else "")
        out.verdict = lfl.Verdict(lfl.WITHIN, why, 1.0, target=TR.DEFAULT_TARGET)
        out.gain = 1.0
        out.notes.append("your settings measured fastest: kept")
    else:
        v = TR.judge(start, best)
        out.verdict = v
        if v.word == lfl.MET:
            out.settings = dict(best.settings)
            out.gain, out.gain_lo, out.gain_hi = v.ratio, v.lo, v.hi
        else:
            out.gain = 1.0
            out.notes.append(f"the best measured, {best.name} ({TR.gain_words(v)}), is not told apart from your "
                             f"start by ×{TR.DEFAULT_TARGET:g}: your settings kept")
    ceiling = pr.ceiling()
    if ceiling and start.median:
        out.headspace = ceiling / start.median
        if out.headspace > 1.0 and out.gain is not None:
            out.recovered = max(0.0, min(1.0, (out.gain - 1.0) / (out.headspace - 1.0)))
    out.loader = CD.build(loader, out.settings) if out.settings else stage.rebuild(loader)
    out.line = CD.paste_line(loader, out.settings)


def _finish(out: Tuned, t0: float, busy: str | None) -> Tuned:
    out.busy = busy
    if busy:
        out.settings, out.verdict = {}, lfl.Verdict(lfl.NOT_FAIR, busy)
        out.notes.append(f"{busy}: your loader is returned as it was; run again on a quiet machine")
    out.seconds = time.perf_counter() - t0
    return out


def render_lines(t: Tuned) -> list[str]:
    """The answer first: the pick (or why none), the line to paste, the gain with its spread, the headspace
    recovered; then every trial measured."""
    out = []
    if t.busy:
        out.append(f"{TOO_BUSY.capitalize()}: {t.busy.removeprefix(TOO_BUSY + ': ')}. No pick.")
    elif t.settings:
        out.append(f"Tuned: {CD.name_of(t.settings)}: ×{t.gain:.2f} (×{t.gain_lo:.2f}–{t.gain_hi:.2f}) over your start, "
                   f"measured.")
        out.append(f"  paste: {t.line}")
    else:
        out.append("Your settings kept: no change measured faster by ×1.05.")
    if t.headspace:
        rec = f", {t.recovered:.0%} of it recovered" if t.recovered is not None else ""
        out.append(f"  headspace (your step alone ÷ your start): ×{t.headspace:.2f}{rec}")
    if t.trials:
        out.append(f"  measured ({t.passes} interleaved passes each, steady windows, samples/s of your loop):")
        start = t.start
        for tr in t.trials:
            if tr.error:
                out.append(f"    {tr.name:<34} {tr.error}")
                continue
            if tr.name in t.excluded:
                out.append(f"    {tr.name:<34} {tr.median:9.0f}  stopped: {t.excluded[tr.name]}")
                continue
            rate = f"{tr.median:9.0f} ({tr.lo:.0f}–{tr.hi:.0f})" if tr.median else "not measured"
            vs = "" if tr is start or start is None or not start.ok else f"  {TR.gain_words(TR.judge(start, tr))}"
            out.append(f"    {tr.name:<34} {rate}{vs}")
    for n in t.notes:
        out.append(f"  note: {n}")
    out.append(f"  took {t.seconds:.1f} s (probe {t.probe.seconds:.1f} s)" if t.probe else f"  took {t.seconds:.1f} s")
    return out
