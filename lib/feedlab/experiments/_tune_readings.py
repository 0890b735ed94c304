"""Notebook 16's readings, figures and payload, from :func:`feedlab.experiments.tune_proof.run`'s records."""

from __future__ import annotations

import numpy as np

from feedlab import like_for_like as lfl
from feedlab.plots import PALETTE

from .tune_proof import HEURISTICS, MAX_PASSES, SECONDS_SHARE, SHARE

LABELS = {"tuner": "the tuner's pick", "start": "the user's start", "pytorch_default": "PyTorch's default (0 workers)",
          "cores": "workers = cores", "cores_minus_1": "workers = cores − 1"}
TARGET_WORDS = {"share": f"pick ≥ {SHARE:.2f} of the grid's best", "not_below_start": "never below the start beyond "
                "its spread", "passes": f"≤ {MAX_PASSES} measured passes", "seconds": f"≤ 1/{1 / SECONDS_SHARE:.0f} "
                "of the grid's seconds"}


def _pct(x) -> str:
    return "—" if x is None else f"{x:.2f}"


def scenario_line(r: dict) -> str:
    t = r["tuner"]
    if r.get("best") is None:
        return f"{r['title']}: no grid setting measured (see the grid's errors)"
    sh = r["shares"]
    pick = t.get("name") or "no pick"
    head = (f"{r['title']}: grid best {r['best']} at {r['best_rate']:.0f} samples/s; the tuner picked {pick} "
            f"({_pct(sh.get('tuner'))} of the best) in {t['wall_s']:.1f} s, {t['passes']} pass(es) "
            f"({_pct(r['targets']['seconds'].get('value'))} of the grid's {r['grid_s']:.0f} s)")
    heur = ", ".join(f"{LABELS[h].split(' (')[0]} {r['heuristic_names'][h]}: {_pct(sh.get(h))}" for h in HEURISTICS)
    return f"{head}; {heur}"


def target_lines(records: list[dict]) -> list[str]:
    """Each target over the scenarios: met, missed (by how much) or not tested fairly, scenario by scenario."""
    out = []
    for key, words in TARGET_WORDS.items():
        parts = []
        for r in records:
            t = r["targets"][key]
            num = t.get("ratio", t.get("value"))
            num = f" {num:.2f}" if isinstance(num, (int, float)) and num is not None else ""
            parts.append(f"{r['key']} {t['word']}{num}")
        met = sum(r["targets"][key]["word"] == lfl.MET for r in records)
        out.append(f"Target ({words}): met in {met} of {len(records)} — " + "; ".join(parts))
    return out


def heuristic_failures(records: list[dict]) -> list[str]:
    """Where each heuristic falls under 0.90 of the grid's best, by how much (from this run's grid)."""
    out = []
    for h in HEURISTICS[1:]:
        bad = [(r["key"], r["shares"].get(h)) for r in records if r["shares"].get(h) is not None
               and r["shares"][h] < SHARE]
        if bad:
            out.append(f"{LABELS[h]} fails where it gives under {SHARE:.2f} of the best: "
                       + ", ".join(f"{k} ({v:.2f})" for k, v in bad))
        else:
            out.append(f"{LABELS[h]} is within {SHARE:.2f} of the best in every scenario measured")
    beats = [(r["key"], r["shares"].get("tuner"), r["shares"].get("cores_minus_1")) for r in records]
    beats = [f"{k} ×{t / c:.2f}" for k, t, c in beats if t and c and t > c]
    if beats:
        out.append("The tuner's pick over \"cores − 1\" (the grid's rates): " + ", ".join(beats))
    return out


def readings(records: list[dict]) -> list[str]:
    return [scenario_line(r) for r in records] + target_lines(records) + heuristic_failures(records)


def plot_shares(ax, records: list[dict]) -> None:
    """Grouped bars: each contender's rate as a share of the grid's best, per scenario."""
    keys = ["tuner", *HEURISTICS]
    x = np.arange(len(records))
    w = 0.8 / len(keys)
    for i, k in enumerate(keys):
        vals = [r["shares"].get(k) or 0.0 for r in records]
        ax.bar(x + (i - (len(keys) - 1) / 2) * w, vals, w, label=LABELS[k], color=PALETTE[i % len(PALETTE)])
    ax.axhline(SHARE, color="grey", lw=1, ls="--")
    ax.set_xticks(x, [r["title"].split(" ")[0] + " " + r["key"] for r in records])
    ax.set_ylabel("rate ÷ the grid's best (same run)")
    ax.set_ylim(0, 1.25)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, fontsize=8, frameon=False)


def plot_seconds(ax, records: list[dict]) -> None:
    x = np.arange(len(records))
    ax.bar(x - 0.2, [r["grid_s"] for r in records], 0.4, label="exhaustive grid", color="#999999")
    ax.bar(x + 0.2, [r["tuner"]["wall_s"] for r in records], 0.4, label="the tuner (probe + trials)",
           color="#1f77b4")
    ax.set_xticks(x, [r["key"] for r in records])
    ax.set_ylabel("seconds")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=1, fontsize=8, frameon=False)


def title(records: list[dict]) -> str:
    shares = [r["shares"].get("tuner") for r in records if r["shares"].get("tuner") is not None]
    if not shares:
        return "The tuner against the exhaustive grid: nothing measured"
    return (f"The tuner's pick reaches {min(shares):.2f}–{max(shares):.2f} of the exhaustive grid's best "
            f"across {len(shares)} scenarios")


def payload(records: list[dict], P, budget: dict | None = None) -> dict:
    """What the notebook records (results.json): every scenario whole, its targets, the run's sizes, and what its
    budget left out (``Budget.record()``)."""
    return {"notebook": "16_tune", "profile": P.profile, "scenarios": records, "budget": budget,
            "targets": {k: [r["targets"][k]["word"] for r in records] for k in TARGET_WORDS},
            "sizes": {k: getattr(P, k) for k in ("samples", "batch_size", "grid_passes", "tune_passes", "tune_top",
                                                 "window_s", "max_window_s", "min_batches", "tune_budget_s", "budget_s")}}


def rows(records: list[dict]) -> list[dict]:
    """Tidy rows (results.csv): one per scenario and grid setting."""
    out = []
    for r in records:
        for g in r["grid"]:
            out.append({"scenario": r["key"], "setting": g["name"], "samples_per_s": g["median"], "lo": g["lo"],
                        "hi": g["hi"], "rate_kind": g["rate_kind"], "busy": g["busy"], "error": g["error"],
                        "over_limit": g["over_limit"], "is_best": g["name"] == r["best"],
                        "is_pick": g["name"] == r["tuner"].get("name")})
    return out
