"""The doctor's prediction error judged by the one judge (notebook 10): each setting's |predicted ÷ measured − 1|
with why its side cannot be read (window, repeats, their spread, the run's load), and the largest error against
the ±20% target — the one reading for the docs' doctor block, docs/DOCTOR.md, the notebook's findings target
(``report.targets``) and its calibration rows (``experiments.doctor_steps``). A setting is judged only where its
window gives a rate and the spread of its repeats cannot carry its error across the bound (audit54 N1, N2, N4)."""

from __future__ import annotations

import math
import re

from feedlab.like_for_like import Side, repeat_half_width, spread_of
from feedlab.like_for_like import verdict as judge
from feedlab.monitor import BUSY_SPEED, process_speed
from feedlab.report.claims import sides
from feedlab.report.claims.core import NoData, Run

DOCTOR_ERROR = 0.20         # 10: |predicted ÷ measured − 1| of every setting measured


def _row_side(e: dict, label: str, run: Run) -> Side:
    """An ``end_to_end`` row of notebook 10 as the one judge's side: its timed window, repeats and their spread
    (``steady_runs``), a steady rate, the run's load (the caller checks the window was recorded)."""
    runs = e.get("steady_runs")
    return Side(label, timed_batches=int(e["timed_batches"]), window_s=float(e["window_s"]), repeats=e.get("repeats"),
                rate_kind="steady", busy=sides.run_busy(run), repeat_half_width=repeat_half_width(runs) if runs else None)

def _f(x) -> float:
    v = float(x)
    if v != v:
        raise ValueError("not measured")
    return v


def row_speed(row: dict, cores: int | None) -> float | None:
    """One process's share of a core beside a worker count of notebook 10's diagnosis: the CPU-s/s its
    ``num_workers + 1`` busy processes got (``capacity_now``) over what an idle machine gives them
    (``min(k, cores)``), and what other programs left them during the passes (``pass_speed``), whichever is lower."""
    return process_speed(row.get("capacity_now"), int(row.get("num_workers", 0)) + 1, cores, row.get("pass_speed"))


def too_busy(speed) -> bool:
    """The doctor's own CPU probe, beside a measurement, found another program taking the cores."""
    return speed is not None and math.isfinite(speed) and speed < BUSY_SPEED


def doctor_errors(payload: dict) -> tuple[list[float], list[float]]:
    """``(the doctor's own worker counts, every setting the run measured)``: |predicted ÷ measured − 1|
    of notebook 10's ``end_to_end`` rows, and of those plus its steps. The anchor (the start's worker count,
    measured: every other rate is scaled to it, ``doctor.diagnosis.anchor_on``) is no prediction."""
    own = [abs(_f(e["predicted_samples_per_s"]) / _f(e["samples_per_s"]) - 1)
           for e in payload.get("end_to_end") or [] if e.get("samples_per_s") and not e.get("anchor")
           and not too_busy(row_speed(e, payload.get("cores")))]
    steps = [abs(_f(s["predicted"]) / _f(s["measured"]) - 1) for s in payload.get("steps") or []
             if s.get("predicted") and s.get("measured") and not too_busy(s.get("speed"))]
    return own, own + steps


def spread_words(side: Side, predicted: float, measured: float, bound: float = DOCTOR_ERROR,
                 anchor_h: float | None = None, small_too: bool = False) -> str | None:
    """Why the spread of a side's repeats leaves its error unjudged: the measured rate's interval (± the repeats'
    95% half-width, :func:`feedlab.like_for_like.spread_of`) gives errors on both sides of ``bound``. None where
    the side records no spread of repeats or the whole interval lies on one side of the bound.

    ``anchor_h``: the 95% half-width of the anchor's repeats (:func:`anchor_spread`) where the prediction is
    scaled to the start's measured rate (``doctor.diagnosis.anchor_on``): the prediction then carries the anchor's
    uncertainty (audit57 N13). The two half-widths are combined in quadrature (√(h_row² + h_anchor²)), not added:
    the anchor's repeats and the row's are separate timed passes whose errors are independent, so adding them
    would count as likely the case where both err to their bound in the same direction at once. ``small_too``: the
    repeats' half-width as measured, a spread within the ±5% each window is timed to included (a side with no
    window of its own, ``tests/benchmarks/doctor_on_scripts``; audit57 N16)."""
    h_own = (side.repeat_half_width or 0.0) if small_too else (spread_of(side) or 0.0)
    h_a = anchor_h or 0.0
    h = math.hypot(h_own, h_a)
    if not h:
        return None
    r = predicted / measured
    lo, hi = r / (1 + h), (r / (1 - h) if h < 1 else math.inf)
    errs = (abs(lo - 1), abs(hi - 1))
    e_lo, e_hi = (0.0 if lo <= 1 <= hi else min(errs)), max(errs)
    if not e_lo <= bound <= e_hi:
        return None
    whose = f"{side.label}'" if side.label.endswith("s") else f"{side.label}'s"
    either = f"its error could be {100 * e_lo:.0f}–{100 * e_hi:.0f}%, either side of ±{100 * bound:.0f}%"
    if not h_a:
        return f"{whose} repeats spread ±{h:.1%} (95%, t over {side.repeats} repeats): {either}"
    own = f"{whose} repeats spread ±{h_own:.1%}" if h_own else f"{whose} repeats within their precision"
    return (f"{own} and the anchor's ±{h_a:.1%} (95%, t; the prediction is scaled to the anchor), "
            f"±{h:.1%} combined in quadrature: {either}")


def anchor_spread(payload: dict, run: Run) -> tuple[float | None, str | None]:
    """The anchor's part in every anchored prediction (audit57 N13): ``(half-width, why)``. The anchor is the
    start's worker-count row measured end to end (``anchor`` true; every other prediction is the probes' price ×
    its measured ÷ its probe price). ``(None, None)``: the run is not anchored. ``(h, None)``: its repeats' 95%
    half-width (0.0 within the precision each window is timed to). ``(None, why)``: the anchor's own rate cannot
    be read (window, repeats, load) or its repeats' spread was not recorded, so no anchored error is judged."""
    row = next((e for e in payload.get("end_to_end") or [] if e.get("anchor")), None)
    if row is None:
        return None, None
    label = f"the anchor ({row.get('num_workers')} workers)"
    if row.get("window_s") is None or row.get("timed_batches") is None:
        return None, f"{label}: its timed window was not recorded"
    runs = row.get("steady_runs")
    side = _row_side(row, label, run)
    why = _alone(side)
    if why is not None:
        return None, why if why.startswith(label) else f"{label}: {why}"
    if not runs or (len(runs) > 1 and side.repeat_half_width is None):
        return None, f"{label}: its repeats' spread was not recorded"
    return spread_of(side) or 0.0, None


def _alone(side: Side) -> str | None:
    """Why one side's rate cannot be read alone (window, busy, unsteady, once), or None."""
    why = side.window_short()
    if why is None:
        alone = judge(side, side, 1.0, check_sides=False)
        why = None if alone.judged else "; ".join(dict.fromkeys(alone.why.split("; ")))   # one side, once
    return why


def error_entries(payload: dict, folder=None, run: Run | None = None) -> tuple[list[tuple], list[tuple]]:
    """:func:`doctor_errors` with each setting's label and why the one judge cannot read its error (``None``: it
    can): ``(own, every)``, each ``[(error, label, why), ...]``. A step's side is its ``results.csv`` rows
    (:func:`feedlab.report.claims.sides.side_of_rows`: window, repeats and their spread, rate kind, other load);
    a worker count of the doctor's own records no window (not known, never accepted). ``run``: the run's record
    where the caller holds it (its rows in memory), else read from ``folder``."""
    run = run if run is not None else Run(payload, out_dir=folder)
    anchor = anchor_spread(payload, run)   # an anchored prediction carries the anchor's spread (audit57 N13)
    own = [(abs(float(e["predicted_samples_per_s"]) / float(e["samples_per_s"]) - 1), f"{e.get('num_workers')} workers",
            _worker_window(e, run, anchor))
           for e in payload.get("end_to_end") or [] if e.get("samples_per_s") and not e.get("anchor")
           and not too_busy(row_speed(e, payload.get("cores")))]
    steps = []
    for st in payload.get("steps") or []:
        if not (st.get("predicted") and st.get("measured")) or too_busy(st.get("speed")):
            continue
        side, _, _ = sides.side_of_rows(run, {"experiment": "doctor_steps", "variant": st.get("label")},
                                        str(st.get("label")))
        why = _alone(side) or anchor[1] or spread_words(side, float(st["predicted"]), float(st["measured"]),
                                                        anchor_h=anchor[0])
        steps.append((abs(float(st["predicted"]) / float(st["measured"]) - 1), str(st.get("label")), why))
    return own, own + steps


def _worker_window(e: dict, run: Run, anchor: tuple = (None, None)) -> str | None:
    """Why the one judge cannot read a worker count's rate (None: it can): its row's timed batches and shortest
    window (recorded since 2026-11-28; an older row: not recorded, never accepted), its repeats, the run's load,
    and the spread of its repeats (``steady_runs``, each repeat's steady rate, recorded since 2026-11-28) by
    :func:`spread_words` exactly as a step's (audit56 N10). A row that records only the quartiles of its repeats:
    "its repeats' spread was not recorded", never accepted. ``anchor``: :func:`anchor_spread` where the run is
    anchored — its spread widens the error's interval, and an unreadable anchor leaves the row unjudged."""
    label = f"{e.get('num_workers')} workers"
    if e.get("window_s") is None or e.get("timed_batches") is None:
        return f"{label}' timed window was not recorded"
    runs = e.get("steady_runs")
    side = _row_side(e, label, run)
    why = _alone(side)
    if why is not None:
        return why
    if not runs or (len(runs) > 1 and side.repeat_half_width is None):
        return f"{label}: its repeats' spread was not recorded"
    if anchor[1] is not None:
        return anchor[1]
    return spread_words(side, float(e["predicted_samples_per_s"]), float(e["samples_per_s"]), anchor_h=anchor[0])


def error_verdict(entries: list[tuple], bound: float = DOCTOR_ERROR) -> tuple[str, str]:
    """The largest error against ``bound`` by the one judge's window rule: "meets" only where every setting's
    window gives a rate; "misses" where a setting whose rate is read is outside it; otherwise not judged,
    with the worst unreadable setting's reason. ``(word, why)``: why is '' when judged."""
    worst = max(e for e, _, _ in entries)
    if worst > bound:
        if any(e > bound and why is None for e, _, why in entries):
            return "misses", ""
        blind = max((x for x in entries if x[0] > bound), key=lambda x: x[0])
    else:
        if all(why is None for _, _, why in entries):
            return "meets", ""
        blind = max((x for x in entries if x[2] is not None), key=lambda x: x[0])
    short = " timed " in blind[2] and "not recorded" not in blind[2]
    said = blind[2] if blind[2].startswith(blind[1]) else f"{blind[1]}: {blind[2]}"
    return "not judged against", said + (": its window is too short to judge" if short else "")


def row_word(entry: tuple, bound: float = DOCTOR_ERROR) -> str:
    """One setting's calibration mark: "ok" / "MISSED by N points" where its error is read, else
    "not judged (why)"."""
    e, _, why = entry
    if why is not None:
        return f"not judged: {why}"
    return "ok" if e <= bound else f"MISSED by {100 * (e - bound):.0f} points"


def marks(entries: list[tuple]) -> dict[str, str]:
    """Each setting's calibration mark (:func:`row_word`) by its label ("2 workers", "2: collate=fast")."""
    return {label: row_word((e, label, why)) for e, label, why in entries}


def row_label(row: dict) -> str:
    """A calibration row's setting as :func:`error_entries` labels it (``w2`` → "2 workers"; a step: its label)."""
    return str(row.get("change") or f"{str(row['label']).lstrip('w')} workers")


_ROW = re.compile(r"^(\s*)(workers \(start spec\) w(\d+)|advice steps (.+?)): (predicted [\d,]+, measured [\d,]+ samples/s, "
                  r"error [+-]\d+%) \((ok|MISSED by \d+ points)\)")
_STEP = re.compile(r"^(\s*step (.+?): predicted ×[\d.]+, measured ×[\d.]+ \([\d,]+ samples/s, )IQR ([\d,]+)–([\d,]+)\); "
                   r"(kept|measured SLOWER: undone)(;.*)$")


def step_why(label: str, run: Run) -> str | None:
    """Why the one judge cannot read an advice step's measured rate (its ``results.csv`` rows), or None."""
    side, _, _ = sides.side_of_rows(run, {"experiment": "doctor_steps", "variant": label}, label)
    return _alone(side)


def step_words(kept: bool, why: str | None) -> str:
    """An advice step's outcome: kept, or undone — "measured SLOWER" only where its rate is read."""
    if kept:
        return "kept"
    return "measured SLOWER: undone" if why is None else f"undone (measured slower, not judged: {why})"


def reading_line(line: str, run: Run) -> str:
    """10's recorded calibration row or advice step line read again by the one judge (audit54 N2, N3): a row's
    "ok / MISSED by" only where its setting is read, else "not judged (why)"; a step's single value is "one
    measurement, no spread", never a one-value IQR, and "measured SLOWER" only where its rate is read; the
    start-repeat target by :func:`repeat_target_words` (audit57 N14)."""
    try:
        return _reading_line(line, run)
    except NoData:   # no rows to read the sides from: as recorded
        return line


_REPEAT = re.compile(r"^(\s*(?:- )?Start setting measured \d+ times in this run \([\d, ]+ samples/s\): spread \d+% "
                     r"of the median \(target within (\d+)%: )(met|NOT met, by \d+ points)\)\.$")
_DRIFT = re.compile(r"(samples/s in this run \([+-]\d+%): the machine moved since the stages were priced\)"
                    r"(?:; against it, the gain's error [+-]\d+%)?")
_CAUSE = " (the speed of a core moved between the probes and the loop)"   # a cause no record measures (audit57 N13)


def _reading_line(line: str, run: Run) -> str:
    m = _REPEAT.match(line)
    b = (run.payload.get("calibration") or {}).get("baseline") or {}
    if m and b.get("spread") is not None:   # the start-repeat target on each measurement's repeats (audit57 N14)
        return f"{m.group(1)}{repeat_target_words(b, int(m.group(2)) / 100)})."
    if ": the anchor, measured " in line:
        return line.replace(_CAUSE, "")
    line = _DRIFT.sub(lambda d: d.group(1) + ": not judged, the repeats behind each were not recorded)"
                      if not any("against_half_widths" in s for s in run.payload.get("steps") or [])
                      else d.group(0), line)   # a recorded cause on sides with no recorded spread (audit57 S15)
    m = _ROW.match(line)
    if m:
        label = f"{m.group(3)} workers" if m.group(3) else m.group(4)
        mark = marks(error_entries(run.payload, run=run)[1]).get(label)
        return line if mark is None else line[:m.start(6) - 1] + f"({mark})" + line[m.end(6) + 1:]
    m = _STEP.match(line)
    if m:
        q25, q75 = m.group(3), m.group(4)
        spread = "one measurement, no spread" if q25 == q75 else f"IQR {q25}–{q75}"
        kept = m.group(5) == "kept"
        return f"{m.group(1)}{spread}); {step_words(kept, None if kept else step_why(m.group(2), run))}{m.group(6)}"
    return line


def repeat_target_words(b: dict, target: float = 0.10) -> str:
    """Notebook 10's start-repeat target (the start measured again in the run, within ``target`` of the median)
    judged on the repeats behind each measurement, not on their medians alone (audit57 N14): ``b`` is
    ``experiments.doctor_steps.baseline_repeat``'s record, ``half_widths`` each measurement's repeats' 95% half-width
    (``like_for_like.repeat_half_width``). The spread of the medians is widened by the highest and the lowest
    measurement's half-widths combined in quadrature (independent passes, as :func:`spread_words` combines an
    anchored row's): "met" only where the widened spread stays within ``target``, "NOT met" only where even its
    low end is past it, else "not judged (why)". A record without those half-widths (made before 2026-11-28) or a
    measurement with fewer than two repeats reads "not judged", never a verdict from what is not recorded."""
    vals, spread, hws = b["measurements"], float(b["spread"]), b.get("half_widths")
    if hws is None or len(hws) != len(vals):
        return "not judged: the repeats behind each measurement were not recorded"
    blind = [f"{v:,.0f}" for v, h in zip(vals, hws) if h is None]
    if blind:
        return f"not judged: {', '.join(blind)} records no spread of repeats"
    hi, lo = max(range(len(vals)), key=vals.__getitem__), min(range(len(vals)), key=vals.__getitem__)
    h = math.hypot(hws[hi], hws[lo])
    s_lo, s_hi = max(0.0, spread - h), spread + h
    if s_hi <= target:
        return "met"
    if s_lo > target:
        return f"NOT met, by {100 * (spread - target):.0f} points"
    each = ", ".join(f"±{x:.1%}" for x in hws)
    return (f"not judged: the repeats behind each measurement spread {each} (95%, t), so the spread could be "
            f"{100 * s_lo:.0f}–{100 * s_hi:.0f}%, either side of {100 * target:.0f}%")
