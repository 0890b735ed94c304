"""The GPU readings of issue #11, each computed from one machine's committed results.

Eight questions a GPU run answers, each with its tolerance stated, judged per machine
from ``figures/<notebook>/<machine>/`` (``results.json``, ``results.csv``,
``fingerprint.json``) by the functions below; ``docs/GPU_READINGS.md`` is generated
from them by ``python -m feedlab.report.readme`` (a test compares). Where a write-up claim
already judges the question (:mod:`feedlab.report.claims`), the reading reuses its verdict
instead of computing it twice. A reading is ``supported``, ``partly``, ``not
supported`` or ``not measured`` (with the reason: no CUDA, a number the run lacks).

Nothing here holds a result: the PCIe ceiling, for one, is computed from the link
generation and width that the run read from ``nvidia-smi`` (NVML); a run that could
not read them gets "not measured", never an assumed link.

A reading whose run could not test it fairly reads ``not tested fairly here`` with the
reason (the claim's preconditions, :mod:`feedlab.report.claims.fair`, or the reading's own: the
nvJPEG reading needs a steady GPU throughput over at least :data:`MIN_NVJPEG_IMAGES`
images and the best CPU decoder measured on all cores, ``op == "decode_all_cores"``);
a smoke run's reads ``smoke: not judged``; a busy run's carries the caveat.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from feedlab.like_for_like import NOT_FAIR as NOT_FAIR_WORD
from feedlab.like_for_like import NOT_LIKE
from feedlab.like_for_like import verdict as judge_sides
from feedlab.machines import machine_dirs
from feedlab.paths import FIGURES_DIR, REPO_ROOT
from feedlab.report import claims as C
from feedlab.report.claims.core import NoData, Run, Unfair, is_smoke
from feedlab.report.claims.fair import busy_caveat, steady_state, unsteady_reason
from feedlab.report.claims.sides import advice_verdict, ratio_interval, side_of_rows, verdict_clause, workers_verdicts
from feedlab.report.claims.w000 import gpu_util_table
from feedlab.report.claims.w002 import _with_model
from feedlab.report.stage_judge import pcie_why
from feedlab.report.targets import (
    PCIE_FRACTION,
    TARGET_GPU_IDLE,
    all_core_baseline,
    final_step,
    pcie_ceiling,
    target_verdict,
)

SUPPORTED, PARTLY, NOT_SUPPORTED, NOT_MEASURED = "supported", "partly", "not supported", "not measured"
NOT_FAIR, SMOKE = C.NOT_FAIR, C.SMOKE
STATUSES = (SUPPORTED, PARTLY, NOT_SUPPORTED, NOT_FAIR, NOT_MEASURED, SMOKE)
_FROM_CLAIM = {C.REPRODUCED: SUPPORTED, C.PARTLY: PARTLY, C.NOT_REPRODUCED: NOT_SUPPORTED,
               C.NOT_TESTABLE: NOT_MEASURED, C.NOT_RUN: NOT_MEASURED, C.NOT_FAIR: NOT_FAIR, C.SMOKE: SMOKE}
READINGS_MD = REPO_ROOT / "docs" / "GPU_READINGS.md"
TIE = 0.03  # pinned and pageable within ±3% of each other: neither wins (the claims' 0.97 / 1.03)
MIN_NVJPEG_IMAGES = 2048  # images in one timed nvJPEG repeat for a steady GPU throughput


@dataclass(frozen=True)
class Reading:
    status: str
    text: str


@dataclass(frozen=True)
class Question:
    id: str
    notebook: str
    question: str
    tolerance: str
    test: Callable[[Run], Reading]


def _claim(claim_id: str, run: Run) -> Reading:
    v = C.judge(C.BY_ID[claim_id], run)
    if v.status == C.NOT_FAIR:
        measured = f"; measured, not judged: {v.ours}" if v.ours != "—" else ""
        return Reading(NOT_FAIR, f"{v.note}{measured} (claim `{claim_id}`)")
    return Reading(_FROM_CLAIM[v.status], f"{v.ours} (claim `{claim_id}`)" if v.ours != "—" else v.note)


def _graded(value: float, full: float, part: float) -> str:
    return SUPPORTED if value >= full else PARTLY if value >= part else NOT_SUPPORTED


# ---------------------------------------------------------------- the readings
def epoch_vs_batch(run: Run) -> Reading:
    return _claim("000-epoch-vs-batch", run)


def gpu_util_by_batch(run: Run) -> Reading:
    s, meter = gpu_util_table(run, ["num_workers", "batch_size"], experiment="batch_size_table")
    w = max(s.index.get_level_values(0))
    series = ", ".join(f"b{int(b)} {float(u):.0f}%" for b, u in s.xs(w, level=0).items())
    rise = _claim("000-gpu-util-rises", run)
    if rise.status == NOT_FAIR:
        return Reading(NOT_FAIR, f"{rise.text}; {meter} at {w} workers, as read (not judged): {series}")
    return Reading(rise.status, f"{meter} at {w} workers: {series}; {rise.text}")


def step_ratios(step_ms: dict) -> dict[int, float]:
    """Input size → median over batch sizes of pageable ÷ pinned step time (> 1: pinned faster)."""
    per: dict[int, list[float]] = {}
    for key, v in step_ms.items():
        size = int(str(key).split("/")[0])
        if v.get("pinned_ms") and v.get("pageable_ms"):
            per.setdefault(size, []).append(float(v["pageable_ms"]) / float(v["pinned_ms"]))
    if not per:
        raise NoData("results.json: step_ms has no pinned and pageable step times")
    return {s: statistics.median(r) for s, r in sorted(per.items())}


def crossover(ratios: dict[int, float]) -> int | None:
    """The smallest input size from which pinned memory wins (by more than the tie band) at
    every larger size measured; None when it does not win at the largest."""
    sizes = sorted(ratios)
    found = None
    for s in reversed(sizes):
        if ratios[s] > 1 + TIE:
            found = s
        else:
            break
    return found


def pinned_by_input_size(run: Run) -> Reading:
    """The crossover read from ``step_ms``, only where the claims on the same step times (000's pageable at the
    smallest input, pinned at 64: each batch size's pageable and pinned rows by the one judge) judged their sides;
    otherwise not tested fairly with the judge's words, the ratios measured, not judged (audit 45 V4)."""
    r = step_ratios(run.get("step_ms"))
    for cid in ("000-paged-wins-small-input", "000-pinned-wins-64"):
        c = C.judge(C.BY_ID[cid], run)
        if c.status == C.NOT_FAIR:
            listing = ", ".join(f"{s}: {x:.2f}×" for s, x in r.items())
            raise Unfair(f"{c.note} (claim `{cid}`); measured, not judged: pinned step speed ÷ pageable by input "
                         f"size: {listing}")
    cross = crossover(r)
    listing = ", ".join(f"{s}: {x:.2f}×" for s, x in r.items())
    small = min(r)
    if cross is None:
        return Reading(NOT_SUPPORTED, f"pinned never wins from some size on (pinned step speed ÷ pageable by input "
                       f"size: {listing})")
    if cross == small:
        return Reading(NOT_SUPPORTED, f"no crossover: pinned wins already at input {small} ({listing})")
    pageable_wins_small = r[small] < 1 - TIE
    return Reading(SUPPORTED if pageable_wins_small else PARTLY,
                   f"crossover at input {cross}: pinned wins from there on; at input {small} "
                   f"{'pageable wins' if pageable_wins_small else 'a tie'} ({listing})")


def h2d_over_pcie(run: Run) -> Reading:
    pinned = float(run.get("h2d_pinned_gbps"))
    ceiling, basis = pcie_ceiling(run.payload.get("pcie") or {})
    pageable = run.payload.get("h2d_pageable_gbps")
    frac = pinned / ceiling
    extra = f"; pageable {float(pageable) / ceiling:.2f} of it" if pageable else ""
    why = pcie_why(run)   # the pinned side by the one judge's window rule (audit57 N17)
    if why is not None:
        raise Unfair(f"{why}; measured, not judged: pinned {pinned:.1f} GB/s = {frac:.2f} of the {basis} ceiling "
                     f"({ceiling:.1f} GB/s){extra}")
    return Reading(_graded(frac, PCIE_FRACTION, 0.5), f"pinned {pinned:.1f} GB/s = {frac:.2f} of the {basis} ceiling "
                   f"({ceiling:.1f} GB/s, from the link read on that machine){extra}")


def workers_all_cores(run: Run) -> Reading:
    s = {int(k): float(v) for k, v in run.get("samples_per_s_with_model").items()}
    cores = run.cores or 0
    within = {w: v for w, v in s.items() if 1 <= w <= cores}
    if 1 not in s or len(within) < 2:
        raise NoData(f"needs rates from 1 worker up to the {cores} cores; measured {sorted(s)}")
    steady = {w: v for w, v in within.items() if steady_state(run, _with_model(run, w))[0]}
    if 1 not in steady or len(steady) < 2:
        raise Unfair(unsteady_reason(run, C.Outcome(C.PARTLY, "", settings=tuple(_with_model(run, w)
                                                                                 for w in sorted(within)))))
    within = steady
    best = max(within, key=within.get)
    gain = within[best] / s[1]
    claim = _claim("002-workers-2.7x", run)
    over = max(s) > cores and max(s, key=s.get) not in within
    text = (f"{gain:.2f}× samples/s with the model, 1 → {best} workers (best of {sorted(within)} on {cores} cores"
            f"{'; more workers than cores did better' if over else ''}); 002's 1 → 7: {claim.status}")
    v, _ = workers_verdicts(run, best, 1, gain, 2.0, 1.3)   # the one judge: both sides' windows and invariants
    if not v.judged:
        raise Unfair(f"{verdict_clause(v)}: {text}")
    return Reading(_graded(gain, 2.0, 1.3), text)


def _images_per_repeat(run: Run, rows) -> float | None:
    """Images one timed nvJPEG repeat decoded: the rows' ``images`` column where recorded, else
    the run's image limit (its sets held that many images, each repeat decoded them all once)."""
    for col in ("images", "n_images"):
        if col in rows.columns and rows[col].notna().any():
            return float(rows[col].median())
    limit = run.payload.get("limit")
    return float(limit) if limit else None


def nvjpeg_vs_cpu(run: Run) -> Reading:
    """nvJPEG against the best CPU decoder on all cores, both measured: a steady GPU throughput
    (≥ :data:`MIN_NVJPEG_IMAGES` images per timed repeat) and a CPU rate over every core
    (``op == "decode_all_cores"``); otherwise not tested fairly, with what was measured shown."""
    df = run.frame
    if "op" not in df.columns or "image_set" not in df.columns:
        raise NoData("results.csv has no op / image_set columns")
    gpu = df[(df.variant == "cuda") & (df.op == "decode_batch") & (df.metric == "img_per_s")]
    if gpu.empty:
        raise NoData("no nvJPEG (cuda decode_batch) rows")
    allc_sets = set(df[df.op == "decode_all_cores"].image_set) if "decode_all_cores" in set(df.op) else set()

    def steady_rows(rows):  # a set timed both ways (one call and a steady pass): the pass with most images
        if "images" in rows.columns and rows["images"].notna().any():
            return rows[rows["images"] == rows["images"].max()]
        return rows
    sets = sorted(gpu.image_set.unique(), key=lambda x: (x in allc_sets, _images_per_repeat(
        run, steady_rows(gpu[gpu.image_set == x])) or 0, x))
    image_set = sets[-1]
    rows = steady_rows(gpu[gpu.image_set == image_set])
    g = float(rows.value.median())
    cpu = df[(df.op == "decode") & (df.image_set == image_set) & (df.metric == "img_per_s") & (df.variant != "cuda")]
    if cpu.empty:
        raise NoData(f"no CPU decode rows for {image_set}")
    med = cpu.groupby("variant").value.median()
    best, rate = str(med.idxmax()), float(med.max())
    allc = df[(df.op == "decode_all_cores") & (df.image_set == image_set) & (df.metric == "img_per_s")
              & (df.variant != "cuda")]
    images = _images_per_repeat(run, rows)
    batch = float(rows["batch"].median()) if "batch" in rows.columns and rows["batch"].notna().any() else None
    measured = f"{image_set}: nvJPEG {g:,.0f} img/s = {g / rate:.1f}× {best} on one core ({rate:,.0f} img/s)"
    why = []
    if images is None or images < MIN_NVJPEG_IMAGES:
        calls = f", {images / batch:.0f} call(s) of {batch:.0f}" if images and batch else ""
        why.append(f"nvJPEG was timed over {images:.0f} images per repeat{calls}, not a steady throughput "
                   f"(≥ {MIN_NVJPEG_IMAGES:,} images)" if images else "the images per nvJPEG repeat were not recorded")
    if allc.empty:
        why.append("the CPU decoders were measured on one core only: the best on all cores was not measured "
                   "(one core's rate × the cores is an upper bound, not a measurement)")
    if why:
        raise Unfair("; ".join(why) + f" — measured, not judged: {measured}")
    amed = allc.groupby("variant").value.median()
    abest, arate = str(amed.idxmax()), float(amed.max())
    cores = run.cores or "?"
    # the one judge on the two sides' recorded invariants (window, order, cache, pixels …): audit 45 V5
    where = dict(variant="cuda", op="decode_batch", image_set=image_set)
    if "images" in rows.columns and rows["images"].notna().any():
        where["images"] = rows["images"].max()          # the steady pass judged, not a one-call row of the set
    ga, _, gspan = side_of_rows(run, where, "nvJPEG", metric="img_per_s")
    cb, _, cspan = side_of_rows(run, dict(variant=abest, op="decode_all_cores", image_set=image_set),
                                f"{abest} on all cores", metric="img_per_s")
    lo, hi = ratio_interval(gspan, cspan)
    v = judge_sides(ga, cb, g / arate, lo=lo, hi=hi, changes=("workers",))   # one GPU against every core
    if not v.judged:
        raise Unfair(f"{verdict_clause(v)}: {measured}; {g / arate:.2f}× {abest} on all {cores} cores "
                     f"({arate:,.0f} img/s); nvJPEG over {images:,.0f} images per repeat")
    return Reading(SUPPORTED if g >= arate else PARTLY if g >= rate else NOT_SUPPORTED,
                   f"{measured}; {g / arate:.2f}× {abest} on all {cores} cores ({arate:,.0f} img/s, measured); "
                   f"nvJPEG over {images:,.0f} images per repeat")


def doctor_on_gpu(run: Run) -> Reading:
    measured, predicted = float(run.get("measured_gain_total")), float(run.get("predicted_gain_total"))
    steps = run.payload.get("steps") or []
    per = "; ".join(f"{s.get('label', '?')}: predicted ×{s['predicted_gain']:.2f}, measured ×{s['measured_gain']:.2f}"
                    for s in steps[1:] if s.get("predicted_gain") and s.get("measured_gain"))
    share = measured / predicted if predicted > 0 else float("nan")
    text = (f"verdict {run.get('verdict')} (bound by {run.payload.get('bound_stage', '?')}); "
            f"measured ×{measured:.2f} against ×{predicted:.2f} predicted ({100 * share:.0f}% delivered)"
            + (f" — {per}" if per else ""))
    v = advice_verdict(run)   # the one judge: a batch size or recipe change is measured, never credited
    if v.word in (NOT_LIKE, NOT_FAIR_WORD):
        raise Unfair(f"{v}; measured, not judged: {text}")
    status = SUPPORTED if 0.8 <= share <= 1.25 else PARTLY if measured > 1.05 else NOT_SUPPORTED
    return Reading(status, text)


def cure_on_gpu(run: Run) -> Reading:
    """The cure's target on the doctor's pipeline (15_the_cure): the GPU's idle share of the steady window
    (CUDA events) on the last kept step, the host's data wait beside it, judged by
    :func:`feedlab.report.targets.target_verdict` only where the steps are like for like (the batch size
    held, the same epochs); the doctor's changes credited from the all-core baseline."""
    steps = run.payload.get("steps") or []
    if len(steps) < 2:
        raise NoData("no cure steps in results.json")
    if any(s.get("rate_kind") != "steady" for s in steps):
        raise Unfair("a step's rate was not steady (start-up inside the window)")
    v = target_verdict(steps, cuda=bool(run.payload.get("cuda")))
    if v.get("gpu_idle_verdict") == "not measured here":
        raise NoData(v.get("reason", "GPU busy not measured"))
    first, allcore, last = steps[0], all_core_baseline(steps), final_step(steps)
    base_busy = allcore.get("gpu_busy")
    there = (f" (GPU idle {100 * (1 - base_busy):.0f}% there)" if isinstance(base_busy, (int, float))
             and math.isfinite(base_busy) else "")
    measured = (f"{v['label']}: GPU idle {100 * v['gpu_idle']:.0f}% of the steady window, host data wait "
                f"{100 * v['data_wait_share']:.0f}% of the loop; the doctor's changes ×"
                f"{last['samples_per_s'] / allcore['samples_per_s']:.2f} over {allcore['label']}{there}; every core ×"
                f"{allcore['samples_per_s'] / first['samples_per_s']:.1f} over {first['label']}")
    if v.get("not_like_for_like"):
        raise Unfair("not like for like: " + "; ".join(v["not_like_for_like"]) + f" — measured, not judged: {measured}")
    idle = v["gpu_idle"]
    status = SUPPORTED if idle <= TARGET_GPU_IDLE else PARTLY if idle <= 2 * TARGET_GPU_IDLE else NOT_SUPPORTED
    return Reading(status, measured + f" (target GPU idle ≤ {100 * TARGET_GPU_IDLE:.0f}%: {v['gpu_idle_verdict']})")


QUESTIONS: tuple[Question, ...] = (
    Question("epoch-vs-batch", "09_batch_size_breakdown", "Epoch time vs batch size with SRCNN on the GPU (000: 5.3×)",
             "claim 000-epoch-vs-batch: supported ≥ 2.65×, partly ≥ 1.25×", epoch_vs_batch),
    Question("gpu-util-by-batch", "01_worker_scaling", "GPU utilisation by batch size, by the run's meter (CUDA events where recorded, else NVML) "
             "(000: 33% → 84%)",
             "claim 000-gpu-util-rises: supported if it rises ≥ 25 points, partly ≥ 5", gpu_util_by_batch),
    Question("pinned-crossover", "03_pinned_memory_by_input_size",
             "Pinned vs pageable step time by input size, and where pinned starts to win (000, 003)",
             f"supported: pageable wins at the smallest input and pinned from a larger one on; partly: a tie "
             f"then pinned; ties within ±{TIE:.0%}", pinned_by_input_size),
    Question("h2d-over-pcie", "03_pinned_memory_by_input_size",
             "Pinned host→device bandwidth as a fraction of the PCIe link",
             f"supported ≥ {PCIE_FRACTION:g} of the link's payload ceiling (the target, `feedlab.report.targets`), "
             "partly ≥ 0.5 (link from nvidia-smi)", h2d_over_pcie),
    Question("workers-all-cores", "01_worker_scaling", "Worker scaling on all the machine's cores (002: 1 → 7 ≈ 2.7×)",
             "1 worker → the best count within the cores: supported ≥ 2.0×, partly ≥ 1.3×", workers_all_cores),
    Question("nvjpeg-vs-cpu", "06_decode_backends", "nvJPEG against the best CPU decoder, per image",
             f"supported: a steady nvJPEG throughput (≥ {MIN_NVJPEG_IMAGES:,} images) beats the best CPU decoder "
             "measured on all cores; partly: it beats one core", nvjpeg_vs_cpu),
    Question("doctor-on-gpu", "10_doctor", "The doctor's verdict on the GPU machine: predicted vs measured gain",
             "supported: 80–125% of the predicted gain delivered; partly: the advice raised throughput (> ×1.05)",
             doctor_on_gpu),
    Question("the-cure", "15_the_cure", "The cure: a starving training step brought to a busy GPU by the doctor's advice",
             "supported: the GPU idle ≤ 5% of the steady window (CUDA events) on the doctor's pipeline at the "
             "baseline's batch size; partly: ≤ 10%; judged only where the steps are like for like", cure_on_gpu),
)


def judge(q: Question, run: Run) -> Reading:
    if run.fingerprint is None:
        return Reading(NOT_MEASURED, "no fingerprint.json beside the results, so the machine is unknown")
    if not run.has_gpu:
        return Reading(NOT_MEASURED, "no CUDA GPU on this machine")
    try:
        r = q.test(run)
    except NoData as e:
        return Reading(NOT_MEASURED, f"{e} (re-run {q.notebook})")
    except (KeyError, IndexError) as e:
        return Reading(NOT_MEASURED, f"no {e} among the run's settings (re-run {q.notebook})")
    except Unfair as e:
        r = Reading(NOT_FAIR, str(e))
    if is_smoke(run) and r.status != NOT_MEASURED:
        return Reading(SMOKE, f"smoke profile: a plumbing check, too small to judge ({r.text})")
    caveat = busy_caveat(run)
    if caveat and r.status in (SUPPORTED, PARTLY, NOT_SUPPORTED):
        r = Reading(r.status, f"{r.text} — caveat: {caveat}")
    return r


def table(figures_dir: Path = FIGURES_DIR) -> tuple[list[str], dict[str, dict[str, Reading]]]:
    """GPU machines with results, and ``{question id: {machine: reading}}``."""
    runs = {nb: machine_dirs(nb, figures_dir) for nb in {q.notebook for q in QUESTIONS}}
    machines = sorted({m for r in runs.values() for m in r if not m.startswith("cpu")})
    out: dict[str, dict[str, Reading]] = {}
    for q in QUESTIONS:
        out[q.id] = {}
        for m in machines:
            folder = runs[q.notebook].get(m)
            out[q.id][m] = (judge(q, Run(out_dir=folder)) if folder is not None
                            else Reading(NOT_MEASURED, f"{q.notebook} has no results from {m} (run it there)"))
    return machines, out


def markdown(figures_dir: Path = FIGURES_DIR) -> str:
    machines, t = table(figures_dir)
    lines = ["# GPU readings", "",
             "Generated by `python -m feedlab.report.readme` from the committed results (`feedlab.report.gpu_readings`); "
             "do not edit. Each reading is computed from that machine's run, with the tolerance stated; "
             "a CPU-only machine has none. *Not tested fairly here* names what the run lacked for a fair test "
             "(rates not steady, a loop bound by data, a meter that cannot see its window, a comparison with a "
             "rate not measured); the numbers it did measure are shown, not judged.", ""]
    if not machines:
        return "\n".join(lines + ["No GPU machine has committed results yet (see docs/GPU_RUN.md)."])
    lines += ["| question | notebook | tolerance | " + " | ".join(machines) + " |",
              "|---|---|---|" + "---|" * len(machines)]
    for q in QUESTIONS:
        cells = [f"**{r.status}**: {r.text}".replace("|", "/") for r in (t[q.id][m] for m in machines)]
        lines.append(f"| {q.question} | [{q.notebook[:2]}](../notebooks/{q.notebook}.ipynb) | {q.tolerance} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def write(path: Path = READINGS_MD) -> bool:
    """Regenerate docs/GPU_READINGS.md; True when it changed."""
    new = markdown() + "\n"
    old = path.read_text() if path.is_file() else ""
    if new != old:
        path.write_text(new)
    return new != old
