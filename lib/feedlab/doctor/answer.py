"""The answer first: the verdict and the one to three changes that matter, each with
its measured or predicted gain and the command or code line that applies it.

Shared by the report on a data set (:func:`feedlab.doctor.report.render`) and on your
own DataLoader (:func:`render_user`); plain functions of the typed report (:class:`Report`; a report's
dict is read with :meth:`Report.of`).
"""

from __future__ import annotations

import math

from .advice import best_line, tried_line
from .ahead import ahead_words
from .ranks import render_ranks
from .report_fields import Report
from .settings import SETTINGS
from .verdict import FIELD, NO_CHANGE_SHARE, TOO_BUSY, Headspace, field_words, headspace_of, verdict_of_report  # noqa: F401
from .words import fit, fmt_rate, stage_value

RESIZE_AHEAD = ("resize once ahead: store the images at the size you train at (notebook 06 measures what decoding "
                "pre-resized images saves against decoding and resizing every epoch, on your machine)")


def code_line(setting: str, value, rep: Report | dict) -> str:
    """The command or code line that applies one advised setting (``settings.SETTINGS``)."""
    row = SETTINGS.get(setting)
    return row.code(value, Report.of(rep)) if row else f"{setting}={value}"


MIN_MEASURED_GAIN = 1.05   # a change is advice at ×1.05 measured or more


def _step_row(rep: Report) -> dict | None:
    """The stage table's row of the step (priced), None where the step was not measured."""
    return next((r for r in rep.stages if r.get("stage") == "model" and r.get("s_per_sample")), None)


def headspace(rep: Report | dict) -> Headspace | None:
    """The most any loader change can give (:class:`~feedlab.doctor.verdict.Headspace`): the step alone (timed
    on a cached batch, loading removed) over the pipeline measured end to end; and the share of the loop
    outside the step, in the field's words. None without a measured step or an end-to-end rate."""
    rep = Report.of(rep)
    step = _step_row(rep)
    return headspace_of(step and step["s_per_sample"], rep.measured_samples_per_s)


def headspace_line(rep: Report | dict) -> str | None:
    rep = Report.of(rep)
    h = headspace(rep)
    if h is None:
        return None
    return (f"the most any loader change can give here: ×{h.most:.2f} (your step alone, loading removed: "
            f"{fmt_rate(h.step_samples_per_s)} samples/s; end to end {fmt_rate(rep.measured_samples_per_s)}); "
            f"{h.words}: {100 * h.input_share:.0f}% of the loop is outside the step (under 5% not, 5–20% "
            f"moderately, 20% or more highly input-bound)")


def _gain(a: dict, most: float | None = None) -> str:
    share = ""
    g = a.get("measured_gain") if a.get("measured_gain") is not None and math.isfinite(a["measured_gain"]) else None
    if most is not None and most > 1.0:
        share = f", {100 * (min(g or a['expected_gain'], most) - 1) / (most - 1):.0f}% of the most possible"
    if g is not None:
        return f"×{g:.2f} measured (×{a['expected_gain']:.2f} predicted{share})"
    return f"×{a['expected_gain']:.2f} predicted{share}"


def top_changes(rep: Report | dict, n: int = 3) -> list[dict]:
    """The best change per setting, best first, at most ``n``: advice (input side) and step-side changes
    measured faster, each ``{what, gain, code, gain_value, measured}``. Where the advice was measured on the
    loop (``rep.tried``: :mod:`feedlab.doctor.advice`), only the changes judged met; else the predicted ones
    (changes *to try*: :func:`answer_lines` never prints them as advice), none where the loop has no headspace
    (under 5% outside the step) or inside this run's own prediction error."""
    rep = Report.of(rep)
    best: dict[str, dict] = {}
    h = headspace(rep)
    loader_advice = rep.advice
    if no_change_line(rep):
        loader_advice = []   # the step bounds the loop: no loader change is a gain here (the line says so)
    err = own_error(rep)
    measured_run = rep.tried is not None
    for a in loader_advice:
        if not measured_run and within_error(a, err):
            continue   # predicted only, and no larger than the prediction's own error: answer_lines names it
        if no_gain(a):
            continue   # measured in this run under ×1.05: "tried: no gain" (answer_lines names it)
        g = a.get("measured_gain") or a["expected_gain"]
        if a["setting"] not in best or g > best[a["setting"]]["gain_value"]:
            gain = (f"{a['measured_words']} measured on your loop (×{a['expected_gain']:.2f} predicted"
                    f"{_share(g, h and h.most)})" if a.get("measured_words") else _gain(a, h and h.most))
            best[a["setting"]] = {"what": f"{a['setting']} = {a['value']}", "gain": gain, "gain_value": g,
                                  "code": code_line(a["setting"], a["value"], rep),
                                  "measured": a.get("measured_gain") is not None}
    for s in rep.step_changes or []:
        if s.get("kept") and not s.get("too_busy"):
            what = f"threads = {s['threads']}" if s["change"] == "threads" else s["change"].replace("_", " ")
            best["step:" + s["change"]] = {"what": f"step: {what}",
                                           "gain": f"×{s['gain']:.2f} measured on your step",
                                           "gain_value": s["gain"], "code": s["code"], "measured": True}
    return sorted(best.values(), key=lambda c: -c["gain_value"])[:n]


def no_gain(a: dict) -> bool:
    """An advice row measured in this run (the worker ladder, or a trial) below ×1.05: tried, no gain."""
    g = a.get("measured_gain")
    return g is not None and math.isfinite(g) and g < MIN_MEASURED_GAIN


def _share(g: float, most: float | None) -> str:
    if most is None or most <= 1.0:
        return ""
    return f", {100 * (min(g, most) - 1) / (most - 1):.0f}% of the most possible"


def own_error(rep: Report | dict) -> float | None:
    """This run's largest prediction error, the worst case over every rate it predicted and measured quietly
    (audit56 S12: the steady rates' calibration is a subset): the calibration's, and each worker count's steady
    and epoch errors (a report on your own DataLoader measures the one it was built with), whichever is largest."""
    rep = Report.of(rep)
    errs = [abs(r[k]) for r in rep.end_to_end if not r.get("anchor") and not r.get("too_busy")
            for k in ("error", "epoch_error") if r.get(k) is not None and math.isfinite(r[k])]
    err = (rep.calibration or {}).get("max_abs_error")
    errs += [err] if err is not None and math.isfinite(err) else []
    return max(errs) if errs else None


def own_error_words(rep: Report | dict, err: float) -> str:
    """What :func:`own_error` covers, for the line that holds advice back at it."""
    n = sum(1 for r in Report.of(rep).end_to_end if not r.get("anchor") and not r.get("too_busy")
            and r.get("error") is not None)
    return f"±{100 * err:.0f}%: the largest over every rate it predicted and measured" + (
        f", the steady and epoch rates of {n} worker count{'s' if n != 1 else ''}" if n else "")


def priced_line(rep: Report | dict) -> str | None:
    """How the step was priced: alone (on batches in memory, nothing loading beside it) or as it ran
    beside the loader's workers (``rep.step_priced``, set by ``--script``)."""
    rep = Report.of(rep)
    if _step_row(rep) is None:
        return None
    how = rep.step_priced or "alone, on batches already in memory (nothing loading beside it)"
    return f"the step was priced {how}"


def within_error(a: dict, err: float | None) -> bool:
    """An advised change predicted (not measured) to gain no more than the prediction's own largest
    error in this run: the gain cannot be told from the error, so it is not advised."""
    measured = a.get("measured_gain") is not None and math.isfinite(a["measured_gain"])
    return (not measured and err is not None and math.isfinite(err)
            and a.get("expected_gain", 0) - 1.0 <= err)


def no_change_line(rep: Report | dict) -> str | None:
    """"No input-pipeline change will help": only where the headspace was measured under 5% (the step alone
    against the loop end to end); never from a prediction. The rule is :func:`feedlab.doctor.verdict.no_change_helps`."""
    h = headspace(rep)
    if h is None or not h.no_change:
        return None
    return (f"no input-pipeline change will help: {100 * h.input_share:.0f}% of the loop is outside the step "
            f"(measured; under {100 * NO_CHANGE_SHARE:.0f}%): only a faster step (or a bigger machine) will")


def headroom_line(rep: Report | dict) -> str | None:
    """The loader's predicted headroom over the step, as information: never a reason to hold back a measured
    change (:func:`no_change_line` is the one rule)."""
    rep = Report.of(rep)
    h = rep.headroom
    if verdict_of_report(rep).verdict != "compute-bound" or h is None or not math.isfinite(h) or h < 1.0:
        return None
    return f"your loader is predicted to have {h:.1f}× headroom over the step (from the stage costs)"


def resize_line(rep: Report | dict) -> str | None:
    rep = Report.of(rep)
    b = rep.bound_stage
    if verdict_of_report(rep).verdict != "data-bound":
        return None
    r = rep.resize_ahead
    if r and r.get("gain") and r["gain"] >= MIN_MEASURED_GAIN:
        g = r.get("loop_gain_predicted")
        loop = f"; the loop ×{g:.2f} predicted from the stage costs (not measured)" if g else ""
        return f"to try: resize once ahead (store the images at the size you train at): {ahead_words(r)}{loop}"
    if b in ("decode", "transform") and rep.kind != "user":
        return f"to try (not measured in this run: not advice until measured): decode + resize bound the loader: " \
               f"{RESIZE_AHEAD}"
    if b == "read" and rep.kind == "user":
        return (f"to try (not measured in this run: not advice until measured): your dataset's fetch (read + decode "
                f"+ transform) bounds the loader: if it decodes and resizes images, {RESIZE_AHEAD}")
    return None


def verdict_line(rep: Report | dict, pred, meas) -> str:
    """The run's one verdict: the loop's measured data-wait share where it was measured (the stages then
    say which one bounds, never a second verdict); under ``--script`` the verdict was printed above with the
    script's loop, and this line is the stages' explanation of it."""
    rep = Report.of(rep)
    anchor = (rep.calibration or {}).get("anchor")
    price = (f"measured {fmt_rate(meas)} samples/s, the anchor of every rate predicted below (the stage probes "
             f"alone priced it at {fmt_rate(anchor['probes_predicted'])}, {100 * anchor['probe_error']:+.0f}%: "
             f"the rates below are scaled by ×{anchor['factor']:.2f})") if anchor and meas else \
        f"predicted {fmt_rate(pred)} samples/s, measured {fmt_rate(meas) if meas else 'not measured'}"
    stages = f"bounded by {rep.bound_stage or '—'} ({rep.binding_term or '—'}); {price}"
    v = verdict_of_report(rep)
    if (rep.script or {}).get("verdict"):
        return f"the stage-by-stage diagnosis of the verdict above ({v.verdict}): {stages}"
    if v.loop is not None and v.loop.busy:
        return (f"VERDICT: {TOO_BUSY} — your loop waited for data {100 * v.loop.share:.0f}% of the time, measured "
                f"while {v.loop.busy}: a busy window moves that share; run again when the machine is quiet "
                f"(the stages: {stages})")
    if v.loop is not None:
        return (f"VERDICT: {v.verdict} — your loop waited for data {100 * v.loop.share:.0f}% of the time "
                f"(measured: {v.loop.source}, median of {v.loop.windows} window(s)); the stages: {stages}")
    if v.verdict:
        return f"VERDICT: {v.verdict} (predicted from the stages; the loop was not measured) — {stages}"
    return f"VERDICT: not measured — {stages}"


def answer_lines(rep: Report | dict) -> list[str]:
    """Verdict, then the changes that matter (with gain and code line), then the
    headroom and ahead-of-time sentences."""
    rep = Report.of(rep)
    W = rep.num_workers if rep.num_workers is not None else (rep.config or {}).get("num_workers")
    pred = next((r.get("predicted_samples_per_s") for r in rep.end_to_end if r.get("num_workers") == W),
                rep.predicted_samples_per_s)
    meas = rep.measured_samples_per_s
    lines = [verdict_line(rep, pred, meas)]
    if rep.verdict_note:
        lines.append(rep.verdict_note)
    v = verdict_of_report(rep)
    busy = bool(v.loop is not None and v.loop.busy)   # too busy to judge: nothing read off the busy loop's share
    for line in ((None, None) if busy else (headspace_line(rep), no_change_line(rep))) + (headroom_line(rep),
                                                                                          priced_line(rep)):
        if line:
            lines.append(line)
    changes = top_changes(rep)
    measured = [c for c in changes if c.get("measured")]
    predicted = [c for c in changes if not c.get("measured")]
    if measured:
        lines.append("what to change (each alone, measured on your loop against the start; best first):")
        for k, c in enumerate(measured, 1):
            lines.append(f"  {k}. {c['what']}: {c['gain']}")
            lines.append(f"       {c['code']}")
    elif not predicted and (rep.tried is None or no_change_line(rep)):   # else best_line says it
        lines.append("what to change: no single change measured (or predicted) to gain 5% or more")
    h = headspace(rep)
    best = None if busy or no_change_line(rep) else best_line(rep, h and h.input_share, h and h.most)
    if best:
        lines.append(best)
    if predicted:
        lines.append("to try (predicted from the stage costs, not measured in this run: not advice until measured):")
        for c in predicted:
            lines.append(f"  {c['what']}: {c['gain']}  ({c['code']})")
    lines += [tried_line(r) for r in rep.tried or [] if not r["advised"]]
    ladder = [a for a in rep.advice if no_gain(a) and not a.get("measured_words")]
    if ladder:
        lines.append("tried in this run, no gain: " + ", ".join(
            f"{a['setting']} = {a['value']} (×{a['measured_gain']:.2f} measured, ×{a['expected_gain']:.2f} "
            "predicted)" for a in ladder))
    err = own_error(rep)
    held = [a for a in rep.advice if within_error(a, err)] \
        if not no_change_line(rep) and rep.tried is None else []
    if held:
        lines.append(f"not advised, predicted within this run's own prediction error ({own_error_words(rep, err)}): "
                     + ", ".join(f"{a['setting']} = {a['value']} (×{a['expected_gain']:.2f})" for a in held))
    r = resize_line(rep)
    if r:
        lines.append(r)
    for s in rep.step_changes or []:
        what = f"threads = {s['threads']}" if s.get("threads") else s["change"].replace("_", " ")
        if s.get("too_busy"):
            lines.append(f"  tried on your step, not advised: {what} (×{s['gain']:.2f}): {s['too_busy']}")
        elif s.get("measured") and s["result"] != "faster":
            lines.append(f"  tried on your step, not advised: {what} measured {s['result']} "
                         f"(×{s['gain']:.2f})")
        elif not s.get("measured"):
            lines.append(f"  tried on your step, not measurable: {s['change'].replace('_', ' ')} ({s['why']})")
    return lines


TABLE_TARGET = 0.20   # a prediction within ±20% of what the run measured holds; else the table says so


def off_line(rep: Report | dict) -> str | None:
    """"prediction off by X%: use the measured column" where a prediction the run checked missed ±20% (the
    largest such error, over the rows measured quietly); None where every checked one held."""
    errs = [r["error"] for r in Report.of(rep).end_to_end if r.get("error") is not None
            and math.isfinite(r["error"]) and not r.get("too_busy") and not r.get("anchor")]
    worst = max(errs, key=abs) if errs else None
    if worst is None or abs(worst) <= TABLE_TARGET:
        return None
    return f"prediction off by {100 * worst:+.0f}%: use the measured column (the predicted one does not hold here)"


def render_user(rep: Report | dict) -> str:
    """The report on your own DataLoader: the answer first, then the stage table and
    the rates per worker count (one predicted rate each)."""
    rep = Report.of(rep)
    lines = [f"feedlab doctor · your DataLoader · batch {rep.batch_size}, {rep.num_workers} workers, "
             f"{rep.device} · {rep.cores} cores ({rep.effective_cores:.2f} effective now)", ""]
    lines += answer_lines(rep)
    lines += ["", f"{'stage':<10} {'variant':<52} {'cost':>22}"]
    for r in rep.stages:
        lines.append(f"{r['stage']:<10} {fit(r['variant'], 52):<52} {stage_value(r):>22}")
    lines += ["", f"{'workers':>7} {'predicted/s':>12} {'bound by':<10} {'measured/s':>12} {'error':>7}"]
    off = off_line(rep)
    if off:
        lines.append(off)
    for r in rep.end_to_end:
        meas = fmt_rate(r["samples_per_s"]) if "samples_per_s" in r else "not run"
        err = f"{100 * r['error']:+.0f}%" if r.get("error") is not None else ""
        lines.append(f"{r['num_workers']:>7} {fmt_rate(r['predicted_samples_per_s']):>12} "
                     f"{(r['bound_stage'] or '—'):<10} {meas:>12} {err:>7}")
    if rep.has("ranks_advice"):
        lines += [""] + render_ranks(rep.ranks_advice)
    for n in rep.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)
