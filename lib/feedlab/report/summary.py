""""What starves a GPU, and what fixed it here": the biggest measured effects per machine.

Each notebook's record-results payload (``figures/<notebook>/<machine>/results.json``)
holds its headline numbers. :data:`EFFECTS` reads one effect from a payload: a factor
(how many times faster the change made the thing it changed) and a sentence saying
what was changed and what was measured. :func:`top_effects` ranks them per machine;
:func:`summary_markdown` is the block at the top of the README's figures section.
Nothing here is typed in: a payload without the numbers gives no effect. An effect
computed from loader rates that were not steady (``feedlab.report.claims.fair``: epochs too
short for the warm-up plus the timed batches) is kept but labelled, and ranked after
the steady ones.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from feedlab.files import load_json
from feedlab.like_for_like import WITHIN, Verdict
from feedlab.paths import FIGURES_DIR
from feedlab.report.claims import sides
from feedlab.report.claims.core import NoData, Outcome, Run
from feedlab.report.claims.fair import unsteady_reason
from feedlab.report.stage_judge import collate_verdict, copy_verdict, first_batch_verdict, out_of_band_verdict
from feedlab.report.targets import BEST_OVER_BASELINE


@dataclass(frozen=True)
class Effect:
    notebook: str
    factor: float       # > 1: the change made it faster by this factor
    text: str           # what changed, and what was measured
    scope: str = "stage"  # "training": samples/s of whole training steps; "stage": one stage alone
    settings: tuple = ()  # the results.csv settings compared (checked for steady rates)
    unsteady: str = ""    # why the rates compared were not steady ('' when they were, or are not checked)
    judge: Callable[[Run], Verdict] | None = None  # the one judge on the effect's two sides, where they are loaders
    verdict: str = ""     # the judge's word where it did not judge the effect ('' when judged, or not checked)


def _num(x) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v == v and v not in (float("inf"), float("-inf")) and v > 0 else None


def _workers(p: dict) -> Effect | None:
    rates = {int(k): _num(v) for k, v in (p.get("samples_per_s_with_model") or {}).items()}
    rates = {k: v for k, v in rates.items() if v}
    if 0 not in rates or len(rates) < 2:
        return None
    best = max(rates, key=rates.get)
    if best == 0:   # no worker count beat the main process: nothing changed, no effect to list
        return None
    model = p.get("model", "the model")
    where = dict(experiment="throughput_vs_workers", model=model) if p.get("model") else \
        dict(experiment="throughput_vs_workers")
    settings = tuple(dict(where, num_workers=w) for w in (0, best))
    return Effect("01_worker_scaling", rates[best] / rates[0],
                  f"`num_workers={best}` instead of 0, PNG pairs feeding {model} "
                  f"({rates[0]:,.0f} → {rates[best]:,.0f} samples/s)", "training", settings,
                  judge=lambda run: sides.pairs_verdict(run, [settings[::-1]], rates[best] / rates[0],
                                                        labels=(f"{best} workers", "0 workers"), changes=("workers",)))


def _lmdb(p: dict) -> Effect | None:
    keyed = {k: _num(v) for k, v in (p.get("throughput_ratio_vs_png") or {}).items() if k.startswith("lmdb_w")}
    keyed = {k: r for k, r in keyed.items() if r}
    if not keyed:
        return None
    ratios = list(keyed.values())
    settings = []
    for k in keyed:
        w, b = int(k.split("_w", 1)[1].split("_")[0]), int(k.rsplit("_b", 1)[1])  # "lmdb_w2_b8"
        settings += [dict(format=f, num_workers=w, batch_size=b) for f in ("lmdb", "png")]
    pairs = [(settings[i], settings[i + 1]) for i in range(0, len(settings), 2)]
    med = statistics.median(ratios)
    return Effect("02_lmdb_vs_png", med,
                  f"LMDB (lz4) instead of PNG files, median over {len(ratios)} batch × worker settings "
                  f"(range {min(ratios):.2f}–{max(ratios):.2f}×)", "training", tuple(settings),
                  judge=lambda run: sides.pairs_verdict(run, pairs, med, labels=("LMDB", "PNG")))


def _pinned(p: dict) -> Effect | None:
    pinned, pageable = _num(p.get("h2d_pinned_gbps")), _num(p.get("h2d_pageable_gbps"))
    if not (pinned and pageable):
        return None
    return Effect("03_pinned_memory_by_input_size", pinned / pageable,
                  f"pinned instead of pageable host memory for the largest host→GPU copy "
                  f"({pageable:.1f} → {pinned:.1f} GB/s)", judge=lambda run: copy_verdict(run, pinned / pageable))



def _formats(p: dict) -> Effect | None:
    ratio = _num(p.get("ratio_best_to_baseline"))
    if not ratio:
        return None
    return Effect("05_storage_formats", ratio,
                  f"`{p.get('best_read', 'the best loader')}` instead of PNG + PIL + ToTensor + "
                  f"default_collate, reading alone (no model step; a whole-pipeline comparison: format, decode, "
                  f"collate, loader and workers all differ, the baseline a DataLoader with 2 workers)",
                  judge=lambda run: sides.storage_best_over_baseline(run, BEST_OVER_BASELINE))


def _out_of_band(p: dict) -> Effect | None:
    gains = {k: _num(v) for k, v in (p.get("out_of_band_gain") or {}).items()}
    gains = {k: v for k, v in gains.items() if v}
    if not gains:
        return None
    best = max(gains, key=gains.get)
    return Effect("06_decode_backends", gains[best],
                  f"decoding and resizing once ahead of training instead of every epoch ({best})",
                  judge=lambda run: out_of_band_verdict(run, best, gains[best]))



def _collate(p: dict) -> Effect | None:
    s = _num((p.get("speedup") or {}).get("fast_channels_last"))
    if not s:
        return None
    return Effect("07_totensor_vs_fast_collate", s,
                  f"a uint8 channels-last collate instead of ToTensor + default_collate "
                  f"({p.get('reference', '')}, collate alone)",
                  judge=lambda run: collate_verdict(run, "fast_channels_last", s))



def _batch(p: dict) -> Effect | None:
    fixed = {k: _num(v) for k, v in (p.get("fixed_over_baseline") or {}).items() if k.endswith("_b128")}
    fixed = {k: v for k, v in fixed.items() if v}
    if not fixed:
        return None
    best = max(fixed, key=fixed.get)
    w = int(best.split("_")[0][1:])
    pin = "_pin1_" in best
    settings = tuple(dict(format=f, num_workers=w, batch_size=128, pin_memory=pin) for f in ("png", "lmdb"))
    return Effect("09_batch_size_breakdown", fixed[best],
                  f"the fixed pipeline (LMDB + uint8 fast collate) instead of the PNG + ToTensor baseline at batch 128, "
                  f"training ({best.replace('_', ' ')})", "training", settings,
                  judge=lambda run: sides.pairs_verdict(run, [settings[::-1]], fixed[best],
                                                        labels=("the fixed pipeline", "the baseline")))


def _doctor(p: dict) -> Effect | None:
    gain = _num(p.get("measured_gain_total"))
    if not gain:
        return None
    pred = _num(p.get("predicted_gain_total"))
    promised = f"; it promised ×{pred:.1f}" if pred else ""
    if str(p.get("model") or "none") == "none":   # the loader alone: one stage, not training
        return Effect("10_doctor", gain, f"the doctor's advice applied step by step, the loader alone (no model "
                      f"step){promised}", judge=sides.advice_verdict)
    return Effect("10_doctor", gain, f"the doctor's advice applied step by step, measured end to end{promised}",
                  "training", judge=sides.advice_verdict)


def _persistent(p: dict) -> Effect | None:
    fb = p.get("first_batch_s") or {}
    off = [_num(v) for k, v in fb.items() if k.startswith("persistent_workers=False/") and not k.endswith("epoch0")]
    on = [_num(v) for k, v in fb.items() if k.startswith("persistent_workers=True/") and not k.endswith("epoch0")]
    off, on = [v for v in off if v], [v for v in on if v]
    if not (off and on):
        return None
    a, b = statistics.median(off), statistics.median(on)
    return Effect("12_beyond", a / b, f"`persistent_workers=True`: first batch of later epochs "
                                      f"({a * 1e3:.0f} → {b * 1e3:.0f} ms)",
                  judge=lambda run: first_batch_verdict(run, a / b))



EFFECTS: dict[str, Callable[[dict], Effect | None]] = {
    "01_worker_scaling": _workers, "02_lmdb_vs_png": _lmdb, "03_pinned_memory_by_input_size": _pinned,
    "05_storage_formats": _formats, "06_decode_backends": _out_of_band, "07_totensor_vs_fast_collate": _collate,
    "09_batch_size_breakdown": _batch, "10_doctor": _doctor, "12_beyond": _persistent,
}


def machine_effects(figures_dir: Path | None = None) -> dict[str, list[Effect]]:
    """``{machine: [Effect, ...]}`` for every committed machine, largest factor first."""
    base = Path(figures_dir or FIGURES_DIR)
    out: dict[str, list[Effect]] = {}
    for notebook, extract in EFFECTS.items():
        nb_dir = base / notebook
        if not nb_dir.is_dir():
            continue
        for machine_dir in sorted(p for p in nb_dir.iterdir() if (p / "results.json").is_file()):
            try:
                payload = load_json(machine_dir / "results.json")
                effect = extract(payload)
            except (ValueError, TypeError, AttributeError):
                effect = None
            if effect is not None:
                out.setdefault(machine_dir.name, []).append(_checked(effect, machine_dir))
    for effects in out.values():
        effects.sort(key=lambda e: (bool(e.unsteady or e.verdict), -e.factor))
    return dict(sorted(out.items(), key=lambda kv: (not kv[0].startswith("cpu"), kv[0])))


def _checked(effect: Effect, folder: Path) -> Effect:
    """The effect with ``unsteady`` set when a rate it compares was not steady, and ``verdict`` where the one
    judge (:mod:`feedlab.report.claims.sides`) did not judge its two sides (not like for like, not tested fairly)."""
    from dataclasses import replace

    if effect.judge is not None:
        try:
            v = effect.judge(Run(out_dir=folder))
        except NoData as e:
            v = f"not tested fairly ({e})"
        if isinstance(v, str) or not v.judged or v.word == WITHIN:   # within spread: not told apart from ×1
            effect = replace(effect, verdict=str(v))
    if not effect.settings or not (folder / "results.csv").is_file():
        return effect
    why = unsteady_reason(Run(out_dir=folder), Outcome("partly", "", settings=effect.settings))
    return replace(effect, unsteady=why) if why else effect


def summary_markdown(figures_dir: Path | None = None, top: int = 3) -> str:
    """Per machine: the ``top`` largest effects on whole training steps, then on one stage alone."""
    effects = machine_effects(figures_dir)
    if not effects:
        return ""
    lines = ["### What starves a GPU, and what fixed it here", "",
             f"The {top} largest effects of each kind (training, one stage) each machine measured, from the "
             "committed results (medians over "
             "repeats; each notebook's section below has the spread and the setting). *Training*: samples/s "
             "of whole training steps, the number a starving GPU feels. *One stage*: that stage timed alone, "
             "an upper bound on what it can give a pipeline it does not bound. An effect whose two sides differ (batch "
             "size, order, workers, window: `feedlab.like_for_like`) or were not measured fairly is listed after the "
             "judged ones, with what differs.", ""]
    for machine, found in effects.items():
        lines.append(f"**{machine}**")
        lines.append("")
        for scope, title in (("training", "training"), ("stage", "one stage")):
            for e in [e for e in found if e.scope == scope][:top]:
                flag = (f" — {e.verdict}: measured, not credited" if e.verdict else
                        f" — not a steady comparison ({e.unsteady})" if e.unsteady else "")
                lines.append(f"- {title}: ×{e.factor:.1f} — {e.text}{flag} "
                             f"([{e.notebook[:2]}](notebooks/{e.notebook}.ipynb))")
        lines.append("")
    return "\n".join(lines)
