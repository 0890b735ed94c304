"""10_doctor: follow the bottleneck doctor's advice from a slow start, one change at a time.

Start from a spec (by default PNG + PIL + ToTensor collate + 0 workers), let
:class:`feedlab.doctor.Doctor` measure every stage once, then repeatedly: predict
the current spec's rate, measure it end to end, and try the single change with the
largest predicted gain. A tried change that measures slower than the spec before it
(gain below ×1.0) is reported as *measured slower* and undone; the next advice is
tried instead. Each step records the predicted and the measured samples/s, so the
figure shows how much of each promised gain arrived.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from feedlab.doctor import Doctor
from feedlab.doctor.predict import predict
from feedlab.doctor.verdict import verdict_of_report
from feedlab.experiments._advice_steps import follow
from feedlab.like_for_like import repeat_half_width
from feedlab.pipeline import MIN_TIMED_BATCHES, PipelineSpec
from feedlab.plots import PALETTE, legend_outside, times, training_step
from feedlab.report.claims.core import Run
from feedlab.report.claims.sides import advice_verdict
from feedlab.report.doctor_judge import error_entries, marks, repeat_target_words, row_label, step_why, step_words
from feedlab.report.targets import BUSY_SPEED, advice_line, row_speed, too_busy
from feedlab.results import Results

EXPERIMENT = "doctor_steps"


def _record(doc: Doctor, spec: PipelineSpec, r: dict, res: Results, k: int, label: str, kept: bool) -> dict:
    pred = predict(doc.table_now(spec), spec)   # the stages, on the machine as it was during the run
    params = dict(step=k, change=label, kept=kept, **spec.as_dict())
    timed = int(r.get("timed", doc.effort.e2e_batches))   # each pass: the warm-up left out, then these timed
    kind = "steady" if timed >= MIN_TIMED_BATCHES else "startup_inclusive"   # batches (as long as min_window_s)
    windows = r.get("windows") or []
    res.add_samples(EXPERIMENT, label, "samples_per_s", r["steady_runs"], "samples/s", rate_kind=kind,
                    timed_batches=timed, **params,
                    **({"window_s": float(min(windows))} if windows else {}))   # the shortest pass's window
    res.add(EXPERIMENT, label, "predicted_samples_per_s", pred["predicted_samples_per_s"], "samples/s",
            rate_kind="predicted", **params)
    runs = r["steady_runs"]
    calls = doc.e2e_calls.get(spec.replace(device=doc.device)) or [{}]
    speed = _slowest(calls[-1].get("speed"), calls[-1].get("pass_speed"))
    return {"step": k, "label": label, "config": spec.as_dict(), "predicted": pred["predicted_samples_per_s"],
            "speed": speed,   # the doctor's CPU probe beside it, or what others left its passes
            "bound_stage": pred["bound_stage"], "verdict": pred["verdict"], "measured": r["steady"],
            "measured_q25": float(np.percentile(runs, 25)), "measured_q75": float(np.percentile(runs, 75)),
            "measured_half_width": repeat_half_width(runs),   # its repeats' 95% half-width (audit57 S15)
            "error": pred["predicted_samples_per_s"] / r["steady"] - 1.0 if r["steady"] > 0 else None}


def against_drift(earlier: float | None, now: float | None, predicted_gain: float | None,
                  measured_gain: float | None, half_widths: tuple = (None, None)) -> dict:
    """The setting a step changes, measured twice in the run: ``earlier`` (its own step's passes, when the
    stages had just been priced) and ``now`` (its turns beside the change). ``against_drift`` = now ÷ earlier
    − 1: how far the same setting moved on this machine between the two; ``gain_error`` = predicted ÷
    measured gain − 1, the step's error against the setting measured beside it (what a moved machine does
    not touch). Notebook 10's second quiet run on cpu-2c: ``collate=fast_cl`` predicted 21,568, measured
    15,971 (+35%), while ``npy_mmap`` + ``totensor`` itself measured 7,120 at step 1 and 5,719 beside step 2
    (−20%, other load 0.7%); the gain, ×2.65 predicted against ×2.79 measured, was off by −5% (#46)."""
    out: dict = {"against_measured": [earlier, now], "against_half_widths": list(half_widths)}
    if earlier and now and earlier > 0:
        out["against_drift"] = now / earlier - 1.0
    if predicted_gain and measured_gain and measured_gain > 0:
        out["gain_error"] = predicted_gain / measured_gain - 1.0
    return out


def _slowest(*speeds) -> float | None:
    """The lowest of the readings of a core's share that are numbers (None where none is)."""
    v = [float(x) for x in speeds if x is not None and np.isfinite(x)]
    return min(v) if v else None


def follow_advice(doc: Doctor, start: PipelineSpec, max_steps: int = 4, repeats: int | None = None,
                  log: Callable[[str], None] | None = None) -> tuple[Results, list[dict]]:
    """Try the top advice step by step (each setting tried at most once).

    Returns the tidy results (``samples_per_s`` per repeat and ``predicted_samples_per_s``
    per step) and one dict per step with ``predicted_gain`` / ``measured_gain`` against
    the spec kept before it (measured again, taking turns with it), and ``kept`` (False:
    measured slower, undone)."""
    log = log or (lambda m: None)
    res = Results()
    spec = start.replace(device=doc.device)
    r0 = doc.measure_e2e(spec, repeats=repeats)
    steps = [_record(doc, spec, r0, res, 0, "0: start", True)]
    steps[0]["kept"] = True

    def try_change(k: int, top: dict, new: PipelineSpec, spec: PipelineSpec, current: dict) -> dict:
        label = f"{k}: {top['setting']}={top['value']}"
        log(f"step {label}")
        # the new spec and the one it changes take turns, so both see the same machine
        both = doc.measure_rounds([spec, new], repeats=repeats)
        step = _record(doc, new, both[new], res, k, label, True)
        before = predict(doc.table_now(spec), spec)["predicted_samples_per_s"]
        step["predicted_gain"] = step["predicted"] / before
        step["measured_gain"] = step["measured"] / both[spec]["steady"]
        step["kept"] = step["measured_gain"] >= 1.0
        step["against"] = current["label"]
        step.update(against_drift(current.get("measured"), both[spec]["steady"], step["predicted_gain"],
                                  step["measured_gain"], (current.get("measured_half_width"),
                                                          repeat_half_width(both[spec].get("steady_runs") or []))))
        steps.append(step)
        return step

    follow(doc, spec, steps[0], try_change, max_steps=max_steps)
    start_d = start.replace(device=doc.device)
    while len(doc.e2e_calls.get(start_d, [])) < 2:   # the start measured at least twice in the run
        doc.measure_e2e(start_d, repeats=repeats)
    return res, steps


# ---------------------------------------------------------------- calibration: the doctor's own error

TARGET_ERROR = 0.20     # prediction within ±20% of the measured rate, every step and worker count
TARGET_REPEAT = 0.10    # the start setting measured again in the same run within 10%
DRIFT_KEYS = ("against_measured", "against_drift", "gain_error", "against_half_widths")   # a step's setting before, measured twice


def repeat_spread(values) -> dict:
    """How far apart the measurements of one setting are: ``(max - min) / median`` of
    their medians (samples/s), and whether that is within :data:`TARGET_REPEAT`."""
    v = [float(x) for x in values if x is not None and np.isfinite(x) and x > 0]
    if len(v) < 2:
        return {"measurements": v, "spread": None, "within_10pct": None,
                "note": "not measured: the setting was measured fewer than twice"}
    spread = (max(v) - min(v)) / float(np.median(v))
    return {"measurements": v, "spread": spread, "within_10pct": spread <= TARGET_REPEAT}


def baseline_repeat(doc, start: PipelineSpec) -> dict:
    """The start setting's repeat in this run: every measurement of it (the diagnosis's
    rounds, step 0, its turns beside step 1) as :func:`repeat_spread`."""
    calls = doc.e2e_calls.get(start.replace(device=doc.device), [])
    out = dict(repeat_spread([c["steady"] for c in calls]), setting=start.label())
    if out["spread"] is not None:   # each measurement's repeats, the target's judge reads them (audit57 N14)
        out["half_widths"] = [repeat_half_width(c.get("steady_runs") or []) for c in calls]
    own = all(c.get("pass_speed") for c in calls)   # what others left each pass, not a probe beside it
    speeds = [c.get("pass_speed") if own else c.get("speed") for c in calls]
    out["speed_from"] = "pass" if own else "probe"
    if out["spread"] is not None and all(v is not None and np.isfinite(v) and v > 0 for v in speeds):
        # the same rates per unit of the CPU speed sampled beside each pass: what is left is not others' load
        out["spread_per_speed"] = repeat_spread([c["steady"] / v for c, v in zip(calls, speeds)])["spread"]
        out["speeds"] = [float(v) for v in speeds]
    return out


def calibration_rows(report: dict, steps: list[dict]) -> list[dict]:
    """Predicted against measured for every worker count of the diagnosis and every
    advice step: ``error = predicted / measured - 1`` and whether ``|error| ≤ 20%``."""
    rows = []
    for r in report.get("end_to_end", []):
        if r.get("samples_per_s") and r.get("predicted_samples_per_s"):
            rows.append({"kind": "workers (start spec)", "label": f"w{r['num_workers']}",
                         "predicted": r["predicted_samples_per_s"], "measured": r["samples_per_s"],
                         "speed": row_speed(r, report.get("cores"))})
            if r.get("anchor"):   # the rate every other prediction is scaled to: measured, not predicted
                rows[-1].update(anchor=True, predicted=r["probes_predicted_samples_per_s"])
    for s in steps:
        if s.get("measured") and s.get("predicted"):
            rows.append({"kind": "advice steps", "label": s["label"].split(":")[0], "change": s["label"],
                         "kept": s.get("kept", True), "predicted": s["predicted"], "measured": s["measured"],
                         "speed": s.get("speed"), **{k: s[k] for k in DRIFT_KEYS if s.get(k) is not None}})
    for r in rows:
        r["error"] = r["predicted"] / r["measured"] - 1.0
        r["within_20pct"] = abs(r["error"]) <= TARGET_ERROR
        r["too_busy"] = too_busy(r.get("speed"))
    return rows


def anchor_words(r: dict) -> str:
    """The anchor's calibration row: measured, the stage probes' own price of it, and the scale it gave."""
    return (f"  {r['kind']} {r['label']}: the anchor, measured {r['measured']:,.0f} samples/s; the stage probes "
            f"alone priced it at {r['predicted']:,.0f} ({100 * r['error']:+.0f}%), so every prediction below is "
            f"scaled by ×{r['measured'] / r['predicted']:.2f}; not counted as a prediction")


def too_busy_words(r: dict) -> str:
    return (f"machine too busy to judge (the doctor's own probe found {r['speed']:.2f} of a core per process "
            f"beside it; under {BUSY_SPEED:g} another program was using the CPU)")


def drift_words(r: dict) -> str:
    """Where the setting a step changes moved more than :data:`TARGET_REPEAT` between its two measurements
    in the run: both rates and the step's error against the setting measured beside it ("" otherwise)."""
    d, (a, b) = r.get("against_drift"), (r.get("against_measured") or [None, None])
    if d is None or abs(d) <= TARGET_REPEAT:
        return ""
    seen = f"; the setting it changes measured {a:,.0f} then {b:,.0f} samples/s in this run ({100 * d:+.0f}%"
    hws = r.get("against_half_widths") or [None, None]
    if None in hws:   # a side with no spread of repeats: no cause, no gain's error from it (audit57 S15)
        return seen + ": not judged, the repeats behind each were not recorded)"
    h = float(np.hypot(*hws))
    lo, hi, line = 100 * (d - h), 100 * (d + h), float(np.copysign(100 * TARGET_REPEAT, d))
    where = f"±{100 * h:.0f}% combined: its interval {lo:+.0f}% to {hi:+.0f}%"
    if abs(d) <= h:   # "within" only where the move is inside its combined half-width (audit58 N18)
        return seen + f": within the repeats' spread, {where} holds 0 and the {line:+.0f}% line: not told apart)"
    if abs(d) - h <= TARGET_REPEAT:   # outside the spread, yet its interval holds the 10% line
        return seen + f", {where} holds the {line:+.0f}% line: cannot be told apart from it)"
    g = r.get("gain_error")
    gain = f"; against it, the gain's error {100 * g:+.0f}%" if g is not None else ""
    return seen + f": the machine moved since the stages were priced){gain}"


def calibration_summary(rows: list[dict], baseline: dict | None = None) -> dict:
    """The largest error, the settings outside ±20% and by how much, and the baseline repeat — over the
    settings measured on a quiet machine; those measured while the doctor's probe found the CPU taken by
    another program are listed as too busy to judge, never as an error."""
    judged = [r for r in rows if not r.get("too_busy") and not r.get("anchor")]
    errs = [abs(r["error"]) for r in judged]
    misses = [r for r in judged if not r["within_20pct"]]
    return {"rows": rows, "max_abs_error": max(errs) if errs else None,
            "within_20pct": (not misses) if judged else None,
            "too_busy": [r.get("change", r["label"]) for r in rows if r.get("too_busy")],
            "drifted": [r.get("change", r["label"]) for r in rows if drift_words(r)],
            "misses": [{"kind": r["kind"], "label": r.get("change", r["label"]), "error": r["error"],
                        "beyond_target": abs(r["error"]) - TARGET_ERROR} for r in misses],
            "baseline": baseline or {}}


def calibration_lines(summary: dict, marks: dict[str, str] | None = None) -> list[str]:
    """The calibration as text: every setting's error (met or missed, by how much) and the
    baseline repeat. Only numbers from ``summary``. ``marks``: each setting's mark by the one judge
    (``report.doctor_judge.marks``: "ok" / "MISSED by" only where its window and spread let it be read, else
    "not judged (why)"); without them a row's mark is its point error's."""
    out = []
    for r in summary["rows"]:
        if r.get("anchor"):
            out.append(anchor_words(r))
            continue
        if r.get("too_busy"):
            out.append(f"  {r['kind']} {r.get('change', r['label'])}: predicted {r['predicted']:,.0f}, measured "
                       f"{r['measured']:,.0f} samples/s: {too_busy_words(r)}")
            continue
        mark = (marks or {}).get(row_label(r)) or \
            ("ok" if r["within_20pct"] else f"MISSED by {100 * (abs(r['error']) - TARGET_ERROR):.0f} points")
        out.append(f"  {r['kind']} {r.get('change', r['label'])}: predicted {r['predicted']:,.0f}, measured "
                   f"{r['measured']:,.0f} samples/s, error {100 * r['error']:+.0f}% ({mark})" + drift_words(r))
    busy = summary.get("too_busy") or []
    if summary["max_abs_error"] is None:
        out.append("Prediction error: machine too busy to judge (every setting was measured beside another "
                   "program's load)." if busy else "Prediction error: not measured (no setting was measured end to end).")
    else:
        n = sum(1 for r in summary["rows"] if not r.get("too_busy") and not r.get("anchor"))
        met = "met" if summary["within_20pct"] else f"NOT met on {len(summary['misses'])} of {n}"
        if marks:   # the one judge's reading of each row: a miss only where read, else not judged (audit54 N2)
            mk = [marks.get(row_label(r), "") for r in summary["rows"] if not r.get("too_busy") and not r.get("anchor")]
            miss, unread = sum(m.startswith("MISSED") for m in mk), sum(m.startswith("not judged") for m in mk)
            met = (f"NOT met on {miss} of {n}" if miss else f"not judged, {unread} of {n} settings not read"
                   if unread else "met")
        skipped = f"; {len(busy)} too busy to judge: {', '.join(busy)}" if busy else ""
        out.append(f"Prediction error over {n} measured settings: largest {100 * summary['max_abs_error']:.0f}% "
                   f"(target ±{100 * TARGET_ERROR:.0f}% on every step and worker count: {met}{skipped}).")
    b = summary.get("baseline") or {}
    if b.get("spread") is None:
        out.append(f"Start setting repeat: {b.get('note', 'not measured')}.")
    else:
        vals = ", ".join(f"{v:,.0f}" for v in b["measurements"])
        ok = repeat_target_words(b, TARGET_REPEAT)   # on the repeats behind each measurement, not 3 medians
        out.append(f"Start setting measured {len(b['measurements'])} times in this run ({vals} samples/s): "
                   f"spread {100 * b['spread']:.0f}% of the median (target within {100 * TARGET_REPEAT:.0f}%: {ok}).")
        if b.get("spread_per_speed") is not None:
            sp = ", ".join(f"{v:.2f}" for v in b["speeds"])
            where = "what other programs left each measurement's passes" if b.get("speed_from") == "pass" else \
                "the CPU speed sampled beside each measurement"
            out.append(f"  per unit of {where} ({sp} of a core): spread "
                       f"{100 * b['spread_per_speed']:.0f}% (what the load on the machine does not explain).")
    return out


def plot_steps(ax, steps: list[dict]) -> None:
    """Predicted vs measured samples/s (median, IQR bars) per step; undone steps hatched."""
    x = np.arange(len(steps))
    med = np.array([s["measured"] for s in steps])
    lo = med - np.array([s["measured_q25"] for s in steps])
    hi = np.array([s["measured_q75"] for s in steps]) - med
    bars = ax.bar(x, med, 0.6, color=PALETTE[0], label="measured (median, IQR bars)")
    for b, s in zip(bars, steps):
        if not s.get("kept", True):
            b.set_hatch("//")
            b.set_facecolor("#cccccc")
    ax.errorbar(x, med, yerr=np.clip(np.vstack([lo, hi]), 0, None), fmt="none", ecolor="#333333", capsize=3)
    ax.plot(x, [s["predicted"] for s in steps], "D", color=PALETTE[1], markersize=7,
            label="predicted from stage costs")
    ax.set_xticks(x)
    ax.set_xticklabels([s["label"].replace(": ", ":\n") + ("\n(slower: undone)" if not s.get("kept", True) else "")
                        for s in steps], fontsize=8)
    ax.set_ylabel("samples/s")
    legend_outside(ax, "top")


def steps_title(steps: list[dict], device: str, batch_size: int, model: str) -> str:
    """The steps figure's title, stating what following the advice gained in this run:
    "The doctor's advice: ×11 the starting pipeline after 2 kept steps (cpu, batch 64, no model)"."""
    where = f"{device}, batch {batch_size}, {'no model' if str(model) == 'none' else training_step(model)}"
    kept = [s for s in steps[1:] if s.get("kept", True)]
    if not steps or not kept or not steps[0].get("measured"):
        return f"The doctor's advice: no step kept over the starting pipeline ({where})"
    gain = kept[-1]["measured"] / steps[0]["measured"]
    n = len(kept)
    return f"The doctor's advice: {times(gain)} the starting pipeline after {n} kept step{'s' * (n != 1)} ({where})"


def calibration_title(points: list[dict], device: str, effective_cores: float, band: float = 0.2) -> str:
    """The calibration figure's title, stating how often the prediction fell within ``band``:
    "Doctor's predictions: 5 of 7 within ±20% of measured" over "(cpu, 1.80 CPU-s/s available)"."""
    judged = [p for p in points if not p.get("too_busy") and not p.get("anchor")]
    ok = sum(1 for p in judged if p.get("measured") and
             1 / (1 + band) <= p["predicted"] / p["measured"] <= 1 + band)
    machine = f"({device}, {effective_cores:.2f} CPU-s/s available)"
    if points and not judged:   # two lines: the figure's legend beside the axes leaves the title less width
        return f"Doctor's predictions: machine too busy to judge\n{machine}"
    n_busy = sum(1 for p in points if p.get("too_busy"))
    busy = f", {n_busy} too busy to judge" if n_busy else ""
    busy += ", 1 the anchor (measured)" if any(p.get("anchor") for p in points) else ""
    # two lines always: beside the legend one line ran off the canvas of the strict figure check (CI, 2026-11-28)
    return f"Doctor's predictions: {ok} of {len(judged)} within ±{band:.0%} of measured{busy}\n{machine}"


def plot_calibration(ax, points: list[dict], title: str | None = None) -> None:
    """Predicted against measured samples/s, one point per (worker count or step), with
    the ±20% band around the diagonal; each point's label is in the legend. ``title``
    (:func:`calibration_title`) starts at the axes' left edge: centred over axes that a wide legend
    (long "(too busy to judge)" labels) had narrowed, it ran off the canvas's left (CI, 2026-11-28, twice)."""
    pred = np.array([p["predicted"] for p in points], float)
    meas = np.array([p["measured"] for p in points], float)
    lo, hi = 0.8 * min(pred.min(), meas.min()), 1.25 * max(pred.max(), meas.max())
    line = np.geomspace(lo, hi, 50)
    ax.plot(line, line, color="#333333", linewidth=1, label="predicted = measured")
    ax.fill_between(line, line / 1.2, line * 1.2, color="#dddddd", label="±20%")
    markers = "osD^v<>ph*"
    kinds = list(dict.fromkeys(p["kind"] for p in points))
    for i, p in enumerate(points):
        j = kinds.index(p["kind"])
        if p.get("anchor"):   # the stage probes' own price of the rate every prediction is scaled to
            ax.scatter([meas[i]], [pred[i]], facecolors="none", edgecolors="#333333", marker="X", zorder=3,
                       label=f"{p['kind']}: {p['label']} (the anchor: the stage probes' own price)")
            continue
        if p.get("too_busy"):   # shown hollow and named: a point, not an error
            ax.scatter([meas[i]], [pred[i]], facecolors="none", edgecolors="#888888", marker=markers[i % len(markers)],
                       zorder=3, label=f"{p['kind']}: {p['label']} (too busy to judge)")
            continue
        ax.scatter([meas[i]], [pred[i]], color=PALETTE[j % len(PALETTE)], marker=markers[i % len(markers)],
                   zorder=3, label=f"{p['kind']}: {p['label']}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured samples/s (median)")
    ax.set_ylabel("predicted samples/s")
    legend_outside(ax, fontsize=8)
    if title:
        ax.set_title(title, loc="left")


def overall_gain(steps: list[dict]) -> tuple[float, float]:
    """``(measured, predicted)`` gain of the last kept step over the start."""
    kept = [s for s in steps if s["kept"]]
    return kept[-1]["measured"] / steps[0]["measured"], kept[-1]["predicted"] / steps[0]["predicted"]


def machine_words(report: dict, load: dict | None = None) -> str:
    """The machine line: the doctor's one probe of the cores the loop could use, said as one probe; "others were
    using the machine" only from the run's load record (``load``: the fingerprint's ``other_load``, its
    ``busy`` and ``whole_run.other_fraction``), never from the probe alone (audit58 N19)."""
    probe = (f"Machine: {report['cores']} cores; the doctor's one probe read {report['effective_cores']:.2f} "
             "CPU-s/s the loop could use (one moment, not the run's load)")
    whole = (load or {}).get("whole_run") if isinstance(load, dict) else None
    share = whole.get("other_fraction") if isinstance(whole, dict) and whole.get("available", True) else None
    if not isinstance(share, (int, float)) or isinstance(share, bool):
        return probe + "; the run's load of other programs was not recorded: whether others used it is not known."
    if load.get("busy"):
        return probe + f"; the run's load record: others were using the machine ({share:.0%} of the cores, busy)."
    return probe + f"; the run's load record: others used {share:.0%} of the cores (not busy)."


def readings(report: dict, steps: list[dict], start: PipelineSpec, calib: dict, frame=None,
             load: dict | None = None) -> list[str]:
    """10's findings as text: the start's verdict, the machine, the calibration, each step
    (kept or measured slower and undone) and the overall gain, all from the run. ``load``: the run's load
    record (:func:`feedlab.monitor.load_record`), read by :func:`machine_words`. ``frame``: the steps' rows
    (``Results.frame()``): the overall gain is then the one judge's (:func:`feedlab.report.targets.advice_line`:
    a batch size or recipe change, a short window or a single measurement is measured, never credited)."""
    v = verdict_of_report(report)   # the report's one verdict, as the doctor printed it: never re-derived here
    how = (f"the verdict from its loop's measured data wait ({100 * v.loop.share:.0f}%)" if v.loop is not None else
           "the verdict predicted from the stages (its loop not measured)")
    out = [f"Start ({start.label()}): {v.verdict}, bounded by {report['bound_stage']}; {how}; "
           # like with like: step 0's own prediction beside its own measurement (the doctor's end-to-end
           # prediction pairs with the end-to-end pass, printed in the doctor's block)
           f"predicted {steps[0]['predicted']:,.0f} samples/s, measured {steps[0]['measured']:,.0f} (step 0's pass).",
           machine_words(report, load)]
    run = None if frame is None else Run({"end_to_end": report.get("end_to_end") or [], "steps": steps,
                                          "cores": report.get("cores")}, frame=frame, fingerprint={})
    out += calibration_lines(calib, None if run is None else marks(error_entries(run.payload, run=run)[1]))
    for s in steps[1:]:   # the one judge's words (audit54 N3): one value is no spread; slower only where read
        why = None if s["kept"] or run is None else step_why(s["label"], run)
        q25, q75 = (f"{s[k]:,.0f}" for k in ("measured_q25", "measured_q75"))
        spread = "one measurement, no spread" if q25 == q75 else f"IQR {q25}–{q75}"
        out.append(f"  step {s['label']}: predicted ×{s['predicted_gain']:.2f}, measured ×{s['measured_gain']:.2f} "
                   f"({s['measured']:,.0f} samples/s, {spread}); {step_words(s['kept'], why)}; "
                   f"bounded by {s['bound_stage']}")
    total, promised = overall_gain(steps)
    overall = (f"Overall (kept steps): measured ×{total:.2f} over the start, against ×{promised:.2f} predicted "
               f"({100 * min(total / promised, 9.99):.0f}% of the promised gain delivered).")
    judged = None
    if frame is not None:
        judged = advice_verdict(Run({"steps": steps, "measured_gain_total": total}, frame=frame, fingerprint={}))
        overall = advice_line(overall, None, Run({"steps": steps, "measured_gain_total": total}, frame=frame,
                                                 fingerprint={}))
    out.append(overall)
    if judged is not None and not judged.judged:
        out.append(f"The advice's gain is not credited in this run: {judged}.")
    else:
        out.append("The advice " + ("raised" if total > 1.05 else "did NOT measurably raise") + " throughput in this run.")
    if (report.get("shm") or {}).get("warning"):
        out.append("Shared memory: " + report["shm"]["warning"])
    return out


STEP_KEYS = ("step", "label", "config", "predicted", "measured", "measured_q25", "measured_q75", "bound_stage", "kept",
             "predicted_gain", "measured_gain", "error", "speed", *DRIFT_KEYS)


def payload(P, doc, report: dict, start: PipelineSpec, steps: list[dict], calib: dict) -> dict:
    """What 10 records and the claims ledger and GPU readings read (``results.json``)."""
    total, promised = overall_gain(steps)
    return {"notebook": "10_doctor", "profile": P.profile, "batch_size": P.batch_size, "model": P.model,
            "device": doc.device, "cuda": doc.cuda, "cores": report["cores"],
            "effective_cores": report["effective_cores"], "start": start.as_dict(),
            "verdict": report["verdict"], "loop": report.get("loop"), "bound_stage": report["bound_stage"],
            "predicted_samples_per_s": report["predicted_samples_per_s"], "end_to_end": report["end_to_end"],
            "advice": [{k: a[k] for k in ("setting", "value", "expected_gain", "predicted_samples_per_s")}
                       for a in report["advice"]],
            "steps": [{k: s.get(k) for k in STEP_KEYS} for s in steps],
            "measured_gain_total": total, "predicted_gain_total": promised,
            "max_abs_error": calib["max_abs_error"], "calibration": calib, "shm": report["shm"]}
