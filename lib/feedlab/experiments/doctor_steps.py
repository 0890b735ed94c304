"""10_doctor: follow the bottleneck doctor's advice from a slow start, one change at a time.

Start from a configuration (by default PNG + PIL + ToTensor collate + 0
workers), let :class:`feedlab.doctor.Doctor` measure every stage once, then
repeatedly: predict the ceiling of the current configuration, measure it end
to end, apply the single change with the largest predicted gain. Each step
records the predicted and the measured samples/s, so the figure shows how much
of each promised gain arrived.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from feedlab.doctor import Config, Doctor
from feedlab.results import Results

EXPERIMENT = "doctor_steps"


def follow_advice(doc: Doctor, start: Config, max_steps: int = 4, repeats: int | None = None,
                  log: Callable[[str], None] | None = None) -> tuple[Results, list[dict]]:
    """Apply the top advice step by step (each setting changed at most once).

    Returns the tidy results (``samples_per_s`` per repeat and
    ``predicted_samples_per_s`` per step) and one dict per step."""
    log = log or (lambda m: None)
    res = Results()
    steps: list[dict] = []
    cfg, changed = start, set()
    for k in range(max_steps + 1):
        pred = doc.predict(cfg)
        log(f"step {k}: {cfg.label()}")
        rates = doc.measure_e2e(cfg, repeats=repeats)
        change = steps[-1]["next_change"] if steps else "start"
        label = f"{k}: {change}"
        params = dict(step=k, change=change, **cfg.as_dict())
        res.add_samples(EXPERIMENT, label, "samples_per_s", rates, "samples/s", **params)
        res.add(EXPERIMENT, label, "predicted_samples_per_s", pred["predicted_samples_per_s"], "samples/s",
                **params)
        advice = [a for a in doc.advise(cfg) if a["setting"] not in changed]
        step = {"step": k, "label": label, "config": cfg.as_dict(), "predicted": pred["predicted_samples_per_s"],
                "bound_stage": pred["bound_stage"], "verdict": pred["verdict"],
                "measured": float(np.median(rates)), "measured_q25": float(np.percentile(rates, 25)),
                "measured_q75": float(np.percentile(rates, 75)), "next_change": None}
        steps.append(step)
        if not advice or k == max_steps:
            break
        top = advice[0]
        step["next_change"] = f"{top['setting']}={top['value']}"
        step["advice"] = top
        changed.add(top["setting"])
        cfg = Config(**top["config"])
    for prev, cur in zip(steps, steps[1:]):
        promised = cur["predicted"] / prev["predicted"]
        got = cur["measured"] / prev["measured"]
        cur["predicted_gain"], cur["measured_gain"] = promised, got
    return res, steps


def plot_steps(ax, steps: list[dict]) -> None:
    """Predicted ceiling vs measured samples/s (median, IQR bars) per step."""
    from feedlab.plots import PALETTE

    x = np.arange(len(steps))
    med = np.array([s["measured"] for s in steps])
    lo = med - np.array([s["measured_q25"] for s in steps])
    hi = np.array([s["measured_q75"] for s in steps]) - med
    ax.bar(x, med, 0.6, color=PALETTE[0], label="measured (median, IQR bars)")
    ax.errorbar(x, med, yerr=np.clip(np.vstack([lo, hi]), 0, None), fmt="none", ecolor="#333333", capsize=3)
    ax.plot(x, [s["predicted"] for s in steps], "D", color=PALETTE[1], markersize=7,
            label="predicted ceiling from stage costs")
    ax.set_xticks(x)
    ax.set_xticklabels([s["label"].replace(": ", ":\n") for s in steps], fontsize=8)
    ax.set_ylabel("samples/s")
    ax.legend(loc="upper left")
