"""Measured before advised: a change is advice only once it ran on the user's own loader against the start.

The stage-cost prediction (:mod:`feedlab.doctor.predict`) only chooses which changes to try: the best
``limit`` predicted single changes are built on the user's own loader (or on feedlab's pipeline for
``--data``), and measured against the start by :func:`feedlab.doctor.trials.measure` (interleaved passes,
steady windows of the user's loop, each pass's other load) and judged by :func:`feedlab.doctor.trials.judge`
(the one judge, ``like_for_like.verdict``, target ×1.05). A change judged *met* is advice, with its measured
gain and interval; one inside the start's spread, or slower, is listed as "tried: no gain" with its number;
one measured busy or failing says so ("not tested fairly"), never a gain.
"""

from __future__ import annotations

from typing import Any, Callable

from feedlab import like_for_like as lfl

from . import trials as TR
from .report_fields import Report, put

TRY_AT_MOST = 3   # the best predicted changes measured (each a few seconds a pass, three passes)


def to_try(advice: list[dict], settings: tuple[str, ...], limit: int = TRY_AT_MOST) -> list[dict]:
    """The predicted changes worth measuring: the best ``limit`` of ``advice`` (best predicted first, one value
    per setting) among ``settings`` (those that can be applied to the loader at hand)."""
    out, seen = [], set()
    for a in sorted(advice, key=lambda a: -a.get("expected_gain", 0.0)):
        if a["setting"] in settings and a["setting"] not in seen:
            out.append(a)
            seen.add(a["setting"])
    return out[:limit]


def measure_changes(start: Callable[[], Any], changes: list[tuple[dict, Callable[[], Any]]], step=None,
                    device: str | None = None, *, passes: int = 3, deadline_s: float | None = 120.0,
                    log: Callable[[str], None] | None = None, measure: Callable = TR.measure, **kw) -> dict:
    """The start (``start()`` builds it fresh) and each change (``(advice row, make)``) measured interleaved
    on the user's loop (``step``), each judged against the start. Returns ``{"start": trial row,
    "tried": [row per change]}``; each row has ``setting``, ``value``, ``expected_gain`` (predicted),
    ``samples_per_s``, ``measured_gain`` with ``lo``–``hi``, ``judged`` (the verdict's word), ``words``
    (``trials.gain_words``: "×1.32 (×1.20–1.41)" or "tried: no gain (×0.97)"), ``advised`` (judged met)."""
    cands = [TR.Candidate("the start", start)]
    for a, make in changes:
        cands.append(TR.Candidate(f"{a['setting']}={a['value']}", make, {a["setting"]: a["value"]}))
    trials = measure(cands, step=step, device=device, passes=passes, deadline_s=deadline_s, log=log, **kw)
    base, rows = trials[0], []
    for (a, _make), t in zip(changes, trials[1:]):
        v = TR.judge(base, t)
        rows.append({"setting": a["setting"], "value": a["value"], "expected_gain": a.get("expected_gain"),
                     "samples_per_s": t.median, "measured_gain": v.ratio, "lo": v.lo, "hi": v.hi,
                     "judged": v.word, "why": v.why, "words": TR.gain_words(v), "advised": v.word == lfl.MET,
                     "other_load": t.other_load})
    return {"start": {"samples_per_s": base.median, "lo": base.lo, "hi": base.hi, "passes": base.passes,
                      "other_load": base.other_load, "busy": base.busy, "error": base.error}, "tried": rows}


def apply(rep: Report | dict, measured: dict) -> Report | dict:
    """The report's advice after measurement: ``advice`` holds only the changes judged met (their measured gain
    replaces the predicted one as the gain that counts), ``tried`` every change measured (with its words),
    ``advice_start`` the start's own trial. Returns ``rep``."""
    by = {(r["setting"], r["value"]): r for r in measured["tried"]}
    kept = []
    for a in Report.of(rep).advice:
        r = by.get((a["setting"], a["value"]))
        if r is None:
            continue
        if r["advised"]:
            kept.append(dict(a, measured_gain=r["measured_gain"], measured_lo=r["lo"], measured_hi=r["hi"],
                             measured_words=r["words"]))
    put(rep, "advice", sorted(kept, key=lambda a: -a["measured_gain"]))
    put(rep, "tried", measured["tried"])
    put(rep, "advice_start", measured["start"])
    return rep


def tried_line(r: dict) -> str:
    """One change measured and not advised: its verdict's words and number, once."""
    pred = f"×{r['expected_gain']:.2f} predicted" if r.get("expected_gain") else "predicted"
    return f"  tried on your loop, not advised: {r['setting']} = {r['value']}: {r['words']} ({pred})"


def best_line(rep: Report | dict, share: float | None, most: float | None) -> str | None:
    """The answer where the loop has headspace: the best measured change and the share of the headspace it
    recovers (``most``: the step alone over the loop), or that none of the changes tried gained."""
    tried = Report.of(rep).tried
    if tried is None:
        return None
    won = [r for r in tried if r["advised"]]
    head = f"{100 * share:.0f}% of the loop is outside the step; " if share is not None else ""
    if not won:
        what = (f"{len(tried)} tried, each listed below" if tried else "none was predicted to pay, none tried")
        return f"{head}no change measured a gain on your loop ({what})"
    b = max(won, key=lambda r: r["measured_gain"])
    rec = ""
    if most is not None and most > 1.0:
        rec = f", {100 * min(1.0, (b['measured_gain'] - 1) / (most - 1)):.0f}% of the headspace (most ×{most:.2f})"
    return f"{head}the best measured change: {b['setting']} = {b['value']}, {b['words']}{rec}"
