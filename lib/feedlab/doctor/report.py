"""The doctor's report as text, and the JSON encoder for ``--json``; the typed object and its one builder
(:class:`Report`, :data:`REPORT_KEYS`) live in :mod:`feedlab.doctor.report_fields` (re-exported here)."""

from __future__ import annotations

import math

import numpy as np

from feedlab.pipeline import PipelineSpec

from .answer import answer_lines, off_line
from .costs import VERDICTS  # noqa: F401  (re-exported: one list of the doctor's verdicts)
from .report_fields import REPORT_KEYS, Report  # noqa: F401  (re-exported: the typed report)
from .words import fit, fmt_rate, stage_value  # noqa: F401  (re-exported: report.fit, report.fmt_rate)


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:+.0f}%"


def json_default(o):
    if isinstance(o, Report):   # a typed report is written as its JSON dict, never as its repr
        return o.as_dict()
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return str(o)


def _stage_lines(report: Report | dict) -> list[str]:
    report = Report.of(report)
    lines = [f"{'stage':<10} {'variant':<48} {'µs/sample (IQR) or s':>24} {'per core/s':>11}"]
    for r in report.stages:
        label = fit(r["variant"], 48)
        value = stage_value(r)
        if not r["measurable"] or "s_per_sample" not in r or value.startswith("not measured"):
            lines.append(f"{r['stage']:<10} {label:<48} {value}")
            continue
        if r["stage"] == "startup":
            lines.append(f"{r['stage']:<10} {label:<48} {value:>24} {'':>11}")
            continue
        spread = (f"{r['s_per_sample'] * 1e6:.1f} ({r['s_per_sample_q25'] * 1e6:.1f}–"
                  f"{r['s_per_sample_q75'] * 1e6:.1f})")
        if r.get("bytes_per_s") and r["stage"] in ("handover", "receive"):  # the hand-over in GB/s
            extra = f"  {r['bytes_per_s'] / 1e9:,.2f} GB/s"
        else:
            extra = f"  {r['bytes_per_s'] / 1e6:,.0f} MB/s" if r.get("bytes_per_s") else ""
        extra += f"  [{r['note']}]" if r.get("note") else ""
        lines.append(f"{r['stage']:<10} {label:<48} {spread:>24} "
                     f"{fmt_rate(r['samples_per_s_per_core']):>11}{extra}")
    return lines


def calibration_line(cal: dict) -> str:
    """The doctor's calibration headline: the largest error over the worker counts run, "within / OUTSIDE the ±20%
    target" only where the rows' repeats (and the anchor's) cannot carry it across the bound
    (``diagnosis.not_judged``, audit57 N15); else a point error, not judged, with why."""
    judged = ("point error, not judged against the ±20% target: " + cal["not_judged"] if cal.get("not_judged")
              else f"{'within' if cal['within_20pct'] else 'OUTSIDE'} the ±20% target")
    return (f"calibration: largest error {100 * cal['max_abs_error']:.0f}% ({judged}) over the worker counts run"
            + (" quietly" if cal.get("too_busy") else "") + (f" (the start's, {cal['anchor']['setting']}, is the "
                                                             "anchor: measured, not predicted)" if cal.get("anchor") else ""))


def render(report: Report | dict) -> str:
    """The report on feedlab's pipeline (a ``data`` report, typed or its dict): the answer first, then the
    stage table, the rates per worker count, the calibration, the advice and /dev/shm."""
    report = Report.of(report)
    spec = PipelineSpec(**report.config)
    lines = [f"feedlab doctor · {report.data} · {spec.label()}",
             f"model {report.model} on {report.device} · {report.cores} cores "
             f"({report.effective_cores:.2f} CPU-s/s available to {report.cores} busy processes now; "
             f"one process runs at {report.speed_one:.2f} of a core) · median of {report.repeats} repeats after "
             f"{report.warmup} warm-up (IQR in brackets)", ""]
    lines += answer_lines(report) + [""]
    lines += _stage_lines(report)
    lines += ["", f"{'workers':>7} {'threads':>7} {'predicted/s':>12} {'measured/s (IQR)':>26} {'error':>7} "
                  f"{'epoch pred/meas':>18}"]
    off = off_line(report)
    if off:
        lines.append(off)
    for r in report.end_to_end:
        meas = (f"{r['samples_per_s']:,.0f} ({r['samples_per_s_q25']:,.0f}–{r['samples_per_s_q75']:,.0f})"
                if "samples_per_s" in r else r.get("not_measured", "not run"))
        ep = (f"{fmt_rate(r['predicted_epoch_samples_per_s'])}/{fmt_rate(r.get('epoch_samples_per_s'))}"
              if r.get("epoch_samples_per_s") else "")
        lines.append(f"{r['num_workers']:>7} {r['main_threads']:>7} {fmt_rate(r['predicted_samples_per_s']):>12} "
                     f"{meas:>26} {'busy' if r.get('too_busy') else 'anchor' if r.get('anchor') else _pct(r.get('error')):>7} "
                     f"{ep:>18}")
    cal = report.calibration
    busy = cal.get("too_busy") or []
    if busy:
        lines.append(f"calibration: machine too busy to judge with {', '.join(map(str, busy))} worker(s) (the doctor's "
                     "own probe, or the 0-worker passes themselves, got under 0.9 of a core: another program was "
                     "using the CPU); those errors are not figures")
    if cal["max_abs_error"] is not None:
        lines.append(calibration_line(cal))
    if report.advice:
        lines.append("every change predicted to pay (each alone; measured where this run ran it):")
        for a in report.advice:
            meas = f", measured ×{a['measured_gain']:.2f}" if "measured_gain" in a else ""
            lines.append(f"  {a['setting']} = {a['value']}: {fmt_rate(a['predicted_samples_per_s'])} samples/s "
                         f"(×{a['expected_gain']:.2f} predicted{meas}); {a['why']}")
    for a in report.refuted:
        lines.append(f"  not advised: {a['setting']} = {a['value']} was predicted ×{a['expected_gain']:.2f} but "
                     f"measured slower in this run (×{a['measured_gain']:.2f})")
    shm = report.shm
    if shm.get("available"):
        lines.append(f"/dev/shm: {shm['total_bytes'] / 2**20:,.0f} MiB, {shm['free_bytes'] / 2**20:,.0f} MiB free; "
                     f"in-flight batches need {shm['need_bytes'] / 2**20:,.1f} MiB"
                     + (f"\nWARNING: {shm['warning']}" if shm["warning"] else " (fits)"))
    else:
        lines.append(f"/dev/shm: {shm['warning']}")
    if not report.cuda:
        lines.append("no CUDA here: the copy to a GPU (pageable vs pinned) is not measurable; "
                     "h2d is only the uint8→float conversion")
    for n in report.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)
