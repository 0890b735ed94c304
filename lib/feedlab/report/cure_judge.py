"""The cure's steps (notebook 15) judged by the one judge (:func:`feedlab.like_for_like.verdict`).

Each step is one side (:func:`step_side`): batch size, the epochs its timed pass ran in, its window and the
precision its rate reached (a rate wider than the precision the run asked for is *imprecise*, never "steady"),
its repeats and the run's other load. An advised step is judged against the step it was tried on
(:func:`step_verdict`: the worker count may change, it is the advice; batch size, epochs and window may not), and
the cure's target on the doctor's pipeline against the all-core baseline (:func:`target_verdict`: where that
baseline already met the target, the line says so). :func:`cure_step_line` brings an older record's step lines
to today's rules; :func:`cure_target_line` is the target line the notebook and the README print.
"""

from __future__ import annotations

import math
import re

from feedlab.like_for_like import MAX_HALF_WIDTH, NOT_LIKE, WITHIN, Side, differences, verdict
from feedlab.report.claims.core import NoData, Run

TARGET_GPU_IDLE = 0.05    # the GPU idle ≤ 5% of the steady window (CUDA events), with the doctor's pipeline
TARGET_DATA_WAIT = 0.05   # the host's wait for the next batch ≤ 5% of the loop: shown beside it (host time),
                          # and the target itself where there is no GPU to keep busy


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def step_kind(s: dict, precision: float | None = None) -> str | None:
    """"steady" only at the stated precision: a step whose rate's 95% half-width is wider than the precision
    the run asked for (``precision``; else :data:`~feedlab.like_for_like.MAX_HALF_WIDTH`) is "imprecise"."""
    hw = s.get("half_width")
    if _finite(hw) and hw > (precision or MAX_HALF_WIDTH):
        return "imprecise"
    return s.get("rate_kind")


def precision_words(s: dict, precision: float | None = None) -> str:
    """The rate's precision in words: "steady, ±0.5%" or "imprecise: ±52% > the ±5% asked"."""
    hw = s.get("half_width")
    if not _finite(hw):
        return ""
    asked = precision or MAX_HALF_WIDTH
    if step_kind(s, precision) == "imprecise":
        return f"imprecise: ±{100 * hw:.0f}% > the ±{100 * asked:.0f}% asked"
    return f"steady, ±{100 * hw:.1f}%"


def spread_words(s: dict) -> str:
    """A step rate's spread as the record can back it: the IQR over its repeats where it ran more than one
    pass, else the one pass's precision (its rate's 95% half-width), never a degenerate "IQR 235–235"."""
    runs = [r for r in (s.get("runs") or {}).get("samples_per_s") or [] if _finite(r)]
    q25, q75 = s.get("q25"), s.get("q75")
    if len(runs) > 1 and _finite(q25) and _finite(q75):
        return f"IQR {q25:,.0f}–{q75:,.0f} over {len(runs)} passes"
    if not runs and _finite(q25) and _finite(q75) and q25 != q75:   # a record that kept the IQR, not the passes
        return f"IQR {q25:,.0f}–{q75:,.0f}"
    hw = s.get("half_width")
    return f"one pass, ±{100 * hw:.1f}%" if _finite(hw) else "one pass, precision not recorded"


def final_step(steps: list[dict]) -> dict | None:
    """The last kept step: the doctor's pipeline as the cure leaves it."""
    kept = [s for s in steps if s.get("kept", True)]
    return kept[-1] if kept else None


def all_core_baseline(steps: list[dict]) -> dict | None:
    """The baseline at the most workers: where the doctor's changes are credited from (going from 2
    workers to every core is the machine's cores, not the doctor's insight)."""
    base = [s for s in steps if s.get("kind") == "baseline"]
    return max(base, key=lambda s: (s.get("config") or {}).get("num_workers", 0)) if base else None


def step_side(s: dict, precision: float | None = None, busy: str | None = None) -> Side:
    """A cure step as one side of a comparison: batch size, the epochs its timed pass ran in (a loader
    kind that takes no sampler cycles epochs of ``epoch_batches``), the steady window (its shortest pass's
    batches and seconds, its widest precision, where the record has them), its rate kind at the stated
    precision (:func:`step_kind`), its repeats and the run's other load. Order, pixels and cache only as the step
    recorded them (``order``, ``pixel_error``, ``cache``): a record without them reads "not known", never equal
    (audit54 N8: a step that changes the format changes exactly what is not recorded)."""
    cfg = s.get("config") or {}
    runs = (s.get("runs") or {}).get("samples_per_s") or []
    return Side(s.get("label", "?"), order=s.get("order"), pixel_error=s.get("pixel_error"),
                batch_size=cfg.get("batch_size"), workers=cfg.get("num_workers"), cache=s.get("cache"),
                epoch_batches=s.get("epoch_batches"),
                timed_batches=s.get("timed_batches"), window_s=s.get("window_s"), half_width=s.get("half_width"),
                rate_kind=step_kind(s, precision), repeats=len(runs) or None, busy=busy)


def step_verdict(s: dict, against: dict, precision: float | None = None, busy: str | None = None):
    """An advised step's gain over the step it was tried on, by the one judge: the worker count may change (it
    is the advice), nothing else; the gain's interval from the two rates' half-widths (the pair's own, as the
    cure recorded them: ``half_width`` and ``against_half_width``)."""
    gain = s.get("gain")
    if not _finite(gain) and _finite(s.get("samples_per_s")) and _finite(against.get("samples_per_s")):
        gain = s["samples_per_s"] / against["samples_per_s"]
    theirs = s.get("against_half_width") if _finite(s.get("against_half_width")) else against.get("half_width")
    hws = [h for h in (s.get("half_width"), theirs) if _finite(h)]
    lo = hi = None
    if _finite(gain) and len(hws) == 2:
        h = math.hypot(*hws)
        lo, hi = gain * (1 - h), gain * (1 + h)
    return verdict(step_side(s, precision, busy), step_side(against, precision, busy), gain, lo=lo, hi=hi,
                   changes=("workers",))


def step_tail(s: dict, steps: list[dict], precision: float | None = None, busy: str | None = None) -> str:
    """What a step line says of an advised step beside the step it was tried on: the judge's word, then
    whether the cure kept it ("undone"; a step kept on sides the judge could not compare is not credited)."""
    against = next((x for x in steps if x.get("label") == s.get("against")), None)
    if s.get("kind") != "advice" or against is None:
        return ""
    v = step_verdict(s, against, precision, busy)
    gain = f"×{v.ratio:.2f}" if _finite(v.ratio) else "no gain measured"
    kept = s.get("kept", True)
    if v.word == WITHIN:
        h = (v.hi - v.lo) / (2 * v.ratio) if _finite(v.ratio) and v.ratio else float("nan")
        return (f"; not told apart from {against['label']} ({gain}, inside the pair's ±{100 * h:.1f}%): "
                + ("kept" if kept else "undone"))
    if not v.judged:
        return f"; against {against['label']} ({gain}): {v}: " + ("kept, not credited" if kept else
                                                                   "undone, not credited")
    if v.ratio < 1:
        return f"; measured slower than {against['label']} ({gain}): " + ("kept" if kept else "undone")
    return f"; faster than {against['label']} ({gain}): " + ("kept" if kept else "undone")


def cure_differences(steps: list[dict]) -> list[str]:
    """What makes the cure's credit not like for like: the doctor's pipeline at another batch size
    than the all-core baseline (a recipe change, not a loader one), a window too short for a rate (where
    recorded), or a step measured over other epochs than the step it is compared with. Workers may differ:
    they are what the advice changes."""
    base, last = all_core_baseline(steps), final_step(steps)
    out = []
    if base and last and base is not last:
        # the window is judged where the record has it (a precision-timed cure; older records ran 50 batches)
        kinds = ("batch size", "window") if all(s.get("window_s") is not None for s in (base, last)) else ("batch size",)
        out += [d for d in differences(step_side(base), step_side(last)) if d.startswith(kinds)]
    by_label = {s["label"]: s for s in steps}
    for s in steps:
        against = by_label.get(s.get("against") or "")
        if against is not None:
            out += [f"{d} ({s['label']} against {against['label']})"
                    for d in differences(step_side(against), step_side(s)) if d.startswith("epochs")]
    return out


def target_verdict(steps: list[dict], cuda: bool, wait_target: float = TARGET_DATA_WAIT,
                   idle_target: float = TARGET_GPU_IDLE, precision: float | None = None,
                   load: str | None = None) -> dict:
    """The cure's target judged on the doctor's pipeline: the GPU's idle share of the steady window
    (``met``/``missed``, or ``not measured here`` with the reason: no CUDA device), and the host's data
    wait beside it; ``not_like_for_like`` lists what differs between the steps it is credited over."""
    last = final_step(steps)
    if last is None:
        return {"data_wait": "not measured", "gpu_idle_verdict": "not measured", "reason": "no step was measured"}
    busy = last.get("gpu_busy")
    busy = math.nan if busy is None else float(busy)   # a results.json stores NaN as null (strict JSON)
    out = {"label": last["label"], "data_wait_share": last["data_wait_share"], "gpu_busy": busy,
           "data_wait": "met" if last["data_wait_share"] <= wait_target else "missed",
           "not_like_for_like": cure_differences(steps)}
    base = all_core_baseline(steps)
    if not cuda or math.isnan(busy):
        out["gpu_idle_verdict"] = "not measured here"
        out["reason"] = "no CUDA device: GPU busy needs CUDA events around the step"
        value, target, key, start = last["data_wait_share"], wait_target, "data_wait", (base or {}).get("data_wait_share")
        spread = [(last.get("runs") or {}).get("data_wait_share") or []]
    else:
        out["gpu_idle"] = 1.0 - busy
        out["gpu_idle_verdict"] = "met" if out["gpu_idle"] <= idle_target else "missed"
        value, target, key = out["gpu_idle"], idle_target, "gpu_idle_verdict"
        start = 1.0 - base["gpu_busy"] if base and _finite(base.get("gpu_busy")) else None
        spread = [[1.0 - b for b in (last.get("runs") or {}).get("gpu_busy") or [] if _finite(b)]]
    vals = [x for x in spread[0] if _finite(x)]
    lo, hi = (min(vals), max(vals)) if len(vals) > 1 else (None, None)
    a = step_side(last, precision, load)
    b = step_side(base, precision, load) if base is not None else Side("the all-core baseline")
    v = verdict(a, b, value, target=target, lo=lo, hi=hi, lower_is_better=True, baseline=start,
                check_sides=base is not last, changes=("workers",))
    if base is last:   # the doctor changed nothing: the baseline is the pipeline; its own fairness still checked
        v = verdict(a, a, value, target=target, lo=lo, hi=hi, lower_is_better=True, check_sides=False)
    out["verdict"] = str(v)
    out["judged"] = v.judged
    if v.judged:
        out[key] = v.word
    out["baseline_met"] = (f"the baseline ({base['label']}) already met the target ({100 * start:.1f}%)"
                           if v.why.startswith("the baseline already met") and base is not None else "")
    return out


def cure_target_line(steps: list[dict], cuda: bool, precision: float | None = None, busy: str | None = None) -> str:
    """The cure's target line, judged only where its steps are like for like (:func:`cure_differences`):
    the GPU's idle share of the steady window (the host's data wait beside it), or the host's wait where
    no GPU is measured; "" where no step was measured."""
    v = target_verdict(steps, cuda, precision=precision, load=busy)
    if "label" not in v:
        return ""
    idle = (f"GPU idle {100 * v['gpu_idle']:.0f}% of the steady window (target ≤ {100 * TARGET_GPU_IDLE:.0f}%): "
            f"{v['gpu_idle_verdict']}; host data wait {100 * v['data_wait_share']:.1f}% of the loop beside it"
            if v["gpu_idle_verdict"] != "not measured here" else
            f"GPU idle: not measured here ({v['reason']}); host data wait {100 * v['data_wait_share']:.1f}% "
            f"(target ≤ {100 * TARGET_DATA_WAIT:.0f}% where no GPU is measured): {v['data_wait']}")
    differs = v.get("not_like_for_like") or []
    if differs:   # the numbers as measured, no verdict: the steps it is credited over differ
        idle = re.sub(r" \(target ≤ \d+%[^)]*\): (met|missed)", "", idle)
        return (f"target with the doctor's pipeline ({v['label']}): {idle}; {NOT_LIKE} ({'; '.join(differs)}): "
                "measured, not judged")
    if not v["judged"]:
        idle = re.sub(r" \(target ≤ \d+%[^)]*\): (met|missed)", "", idle)
        return f"target with the doctor's pipeline ({v['label']}): {idle}; {v['verdict']}: measured, not judged"
    if v["gpu_idle_verdict"] == "not measured here":
        idle = re.sub(r": (met|missed)$", f": {v['data_wait']}", idle)
    elif v["gpu_idle_verdict"] == WITHIN:
        idle = idle.replace(": within spread;", f": {v['verdict']};")
    note = f"; {v['baseline_met']}: the cure did not need to meet it" if v.get("baseline_met") else ""
    return f"target with the doctor's pipeline ({v['label']}): {idle}{note}" + host_wait_note(v)




def host_wait_note(v: dict) -> str:
    """Data wait is the training loop's (host) time blocked on the next batch; the step is
    asynchronous, so the host can wait while the GPU works through queued steps. Where the host's
    wait is over its bound while the GPU idles within its target, say so."""
    if v.get("data_wait") != "missed" or v.get("gpu_idle_verdict") != "met":
        return ""
    return (f"; the loop's wait ({100 * v['data_wait_share']:.0f}%) is host time, overlapped by queued GPU work: "
            f"the GPU itself was idle {100 * v['gpu_idle']:.0f}% of the steady window")


def cure_step_line(line: str, t=None, run: Run | None = None) -> str:
    """A cure step's line as an older record printed it, completed by today's rules: an advised step
    credited from the first baseline also gets its credit from the all-core baseline (going from 2 workers
    to every core is the machine's cores, not the advice), and a step whose batch size or epochs differ from
    that baseline says it is not like for like with it; an advised step's verdict against the step it was tried
    on is the one judge's (:func:`step_tail`: "measured slower: undone" on a ±52% rate over other epochs reads
    not like for like), and an imprecise rate says so."""
    if run is None:
        return line
    try:
        steps = run.get("steps")
    except NoData:
        return line
    label = line.split(":", 1)[0]
    step = next((s for s in steps if s.get("label") == label), None)
    base = all_core_baseline(steps)
    if step is None or base is None:
        return line
    if step is base or step.get("kind") == "baseline":
        words = precision_words(step, run.payload.get("precision"))
        return line + f"; rate {words}" if words.startswith("imprecise") and "imprecise" not in line else line
    if "the first baseline" in line and "the all-core baseline" not in line and base.get("samples_per_s"):
        line += f"; ×{step['samples_per_s'] / base['samples_per_s']:.2f} the all-core baseline ({base['label']})"
    precision = run.payload.get("precision")
    tail = step_tail(step, steps, precision)
    if tail:   # the record's own tail (any of step_tail's forms) gives way to today's judge's, said once
        line = re.sub(r"; (?:not told apart from|measured slower than|faster than) [^;]*: (?:kept|undone)"
                      r"(?:, not credited)?", "", line) + tail
    if step.get("q25") == step.get("q75"):   # one pass: its precision, not a degenerate IQR
        line = re.sub(r"IQR ([\d,.]+)–\1(?![\d,.])", spread_words(step), line)
    words = precision_words(step, precision)
    if words.startswith("imprecise") and "imprecise" not in line:
        line += f"; rate {words}"
    diff = [d for d in differences(step_side(base), step_side(step)) if d.startswith(("batch size", "epochs"))]
    if diff and NOT_LIKE + " with the all-core baseline" not in line:
        line += f"; {NOT_LIKE} with the all-core baseline ({'; '.join(diff)})"
    return line
