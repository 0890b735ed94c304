"""Notebook 16's readings, figures and payload, from :func:`feedlab.experiments.tune_proof.run`'s records."""

from __future__ import annotations

import numpy as np

from feedlab import like_for_like as lfl
from feedlab.plots import PALETTE
from feedlab.report.tune_judge import LABELS, heuristic_lines

from .tune_proof import HEURISTICS, MAX_PASSES, SECONDS_SHARE, SHARE

QUICK_NOTEBOOK_S = 150    # the quick profile's seconds for notebook 16 (papermill), set by the coordinator
TARGET_WORDS = {"share": f"pick ≥ {SHARE:.2f} of the grid's best", "not_below_start": "never below the start beyond "
                "its spread", "passes": f"≤ {MAX_PASSES} measured passes", "seconds": f"≤ 1/{1 / SECONDS_SHARE:.0f} "
                "of the grid's seconds"}


def _pct(x) -> str:
    return "—" if x is None else f"{x:.2f}"


def heuristic_words(h: str, name: str) -> str:
    """A heuristic and the setting it names, each said once: "the user's start" (not "… start start"), and
    "workers = cores − 1 (= the start)" where a heuristic lands on the start (audit 53 S5)."""
    label = LABELS[h].split(" (")[0]
    if name == "start":
        return label if h == "start" else f"{label} (= the start)"
    return f"{label} {name}"


def best_words(r: dict) -> str:
    """The grid best's label (audit56 S10: a point maximum is not a best told apart): '' where its rate is steady,
    its passes agree to ±5% and no other setting's passes reach its range; else " (imprecise: ±10.4% > ±5% asked;
    its 3 passes spread ±19.5%, 95% t; not told apart from start, threads=2: their passes' ranges overlap)"."""
    grid = [g for g in r.get("grid") or [] if g.get("median")]
    b = next((g for g in grid if g.get("name") == r.get("best")), None)
    if b is None:
        return ""
    words = []
    if b.get("rate_kind") not in (None, "steady"):
        hw = b.get("half_width")
        words.append(f"{b['rate_kind']}" + (f": ±{hw:.1%} > ±{lfl.MAX_HALF_WIDTH:.0%} asked" if hw else ""))
    rates = b.get("rates") or []
    h = lfl.repeat_half_width(rates)
    if h is None:
        words.append("one pass, no spread of passes")
    elif h > lfl.MAX_HALF_WIDTH:
        words.append(f"its {len(rates)} passes spread ±{h:.1%}, 95% t")
    close = [g["name"] for g in grid if g is not b and g.get("hi") is not None and b.get("lo") is not None
             and g["hi"] >= b["lo"]]
    if close:
        words.append(f"not told apart from {', '.join(close)}: their passes' ranges overlap")
    return f" ({'; '.join(words)})" if words else ""


def scenario_line(r: dict) -> str:
    t = r["tuner"]
    if r.get("best") is None:
        return f"{r['title']}: no grid setting measured (see the grid's errors)"
    sh = r["shares"]
    pick = t.get("name") or "no pick"
    head = (f"{r['title']}: grid best {r['best']} at {r['best_rate']:.0f} samples/s{best_words(r)}; the tuner picked {pick} "
            f"({_pct(sh.get('tuner'))} of the best) in {t['wall_s']:.1f} s, {t['passes']} pass(es) "
            f"({_pct(r['targets']['seconds'].get('value'))} of the grid's {r['grid_s']:.0f} s)")
    heur = ", ".join(f"{heuristic_words(h, r['heuristic_names'][h])}: {_pct(sh.get(h))}" for h in HEURISTICS)
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
    """Where each heuristic falls under 0.90 of the grid's best, by the one judge on the two grid rows (this run's
    grid; :func:`feedlab.report.tune_judge.heuristic_lines`: "fails" only where it says missed)."""
    return heuristic_lines(records, SHARE)


def _trial_words(t: dict, excluded: dict) -> str:
    if t["name"] in excluded:
        return f"{t['name']} {t['seconds']:.1f} s (stopped early)"
    kind = "" if t.get("rate_kind") in (None, "steady") else f", {t['rate_kind']}"
    window = f", window {t['window_s']:.1f} s" if t.get("window_s") else ""
    return f"{t['name']} {t['seconds']:.1f} s ({t.get('passes', 0)} pass(es){window}{kind})"


def seconds_why(r: dict) -> str:
    """Where the tuner's seconds went against the fifth of the grid's it is allowed (this run's numbers)."""
    t, g = r["tuner"], r["targets"]["seconds"]
    allowed = SECONDS_SHARE * r["grid_s"]
    trials = t.get("trials") or []
    parts = ([f"the probe {t['probe_s']:.1f} s"] if t.get("probe_s") is not None else []) + [
        _trial_words(x, t.get("excluded") or {}) for x in trials]
    other = t["wall_s"] - (t.get("probe_s") or 0.0) - sum(x["seconds"] for x in trials)
    if trials and other > 0.05:
        parts.append(f"the rest {other:.1f} s")
    windows = len(r["grid"]) * int(r.get("grid_passes") or 1)
    return (f"{g['tune_s']:.1f} s against the {allowed:.1f} s allowed (a fifth of the grid's {r['grid_s']:.1f} s: "
            f"{len(r['grid'])} settings × {r.get('grid_passes') or 1} pass(es), {windows} windows, so a fifth is "
            f"{windows * SECONDS_SHARE:.1f} windows; the tuner's start and pick need a full one each)"
            + (f": {', '.join(parts)}" if parts else ""))


def share_why(r: dict) -> str:
    """Why the pick fell short of the grid's best (this run's trials and predictions)."""
    t, best, pick = r["tuner"], r["best"], r["tuner"].get("name")
    trials = {x["name"]: x for x in t.get("trials") or []}
    excluded = t.get("excluded") or {}
    if best not in trials:
        pred = sorted(t.get("predicted") or [], key=lambda x: -(x.get("predicted") or 0.0))
        names = [x["name"] for x in pred]
        rank = f"the model ranked it {names.index(best) + 1} of {len(names)}" if best in names else "not predicted"
        point = "point best" if best_words(r) else "best"   # a best not told apart is only the highest point
        return (f"the grid's {point}, {best}, was not among those the tuner measured ({', '.join(trials) or 'none'}): "
                f"{rank}")
    if best in excluded:
        return f"the race stopped the grid's best, {best}: {excluded[best]}"
    b, s = trials[best], trials.get("start")
    if pick in (None, "start") and s and s.get("median") and b.get("median"):
        return (f"the tuner measured {best} at ×{b['median'] / s['median']:.2f} of the start (±"
                f"{max(b.get('half_width') or 0, s.get('half_width') or 0):.0%}), not told apart by ×1.05: the start kept")
    p = trials.get(pick)
    if p and p.get("median") and b.get("median"):
        grid = {x["name"]: x for x in r["grid"]}
        gp, gb = grid.get(pick, {}).get("median"), grid.get(best, {}).get("median")
        both = f"; the grid's {gp:.0f} and {gb:.0f}" if gp and gb else ""
        return (f"the tuner's trials put {pick} at {p['median']:.0f} and {best} at {b['median']:.0f} samples/s{both}: "
                "the two swapped places between the tuner's windows and the grid's")
    return "no measured rate to compare"


def miss_lines(records: list[dict]) -> list[str]:
    """Each target missed (or not judged), scenario by scenario: by how much, and why, from this run."""
    out = []
    for r in records:
        tg = r["targets"]
        for key, words in TARGET_WORDS.items():
            t = tg[key]
            if t["word"] == lfl.MET:
                continue
            head = f"{r['title']}: {words} {t['word']}"
            if t["word"] not in (lfl.MISSED, lfl.WITHIN):
                out.append(f"{head} ({t.get('why') or 'no measure'})")
            elif key == "seconds":
                over = t["tune_s"] - SECONDS_SHARE * r["grid_s"]
                out.append(f"{head} by {over:.1f} s ({t['value']:.2f} of the grid's seconds): {seconds_why(r)}")
            elif key == "share":
                by = f" by {SHARE - t['ratio']:.2f} (×{t['ratio']:.2f}, ×{t['lo']:.2f}–{t['hi']:.2f})" \
                    if t.get("ratio") is not None and t.get("lo") is not None else ""
                out.append(f"{head}{by}: {share_why(r)}")
            elif key == "not_below_start":
                out.append(f"{head}: the pick measured ×{t['ratio']:.2f} (×{t['lo']:.2f}–{t['hi']:.2f}) of the start "
                           "in the grid's passes")
            else:
                out.append(f"{head} by {t['value'] - t['target']} pass(es): {t['value']} against {t['target']}")
    return out


def profile_line(records: list[dict], scenarios_run: list[str], profile: str, all_keys: tuple[str, ...],
                 spent_s: float | None) -> str | None:
    """The scenarios this profile leaves to the full one, and what they would add at this run's cost a scenario."""
    left = [k for k in all_keys if k not in scenarios_run]
    if not left:
        return None
    names = ", ".join(f"({'abcdefg'[all_keys.index(k)]}) {k}" for k in left)
    costs = [r["grid_s"] + r["tuner"]["wall_s"] for r in records]
    if not costs:
        return f"Not in the {profile} profile: {names} (the full profile runs them)."
    per = float(np.median(costs))
    spent = spent_s if spent_s is not None else sum(costs)
    line = (f"Not in the {profile} profile: {names} (the full profile runs them). At this run's median of {per:.0f} s "
            f"a scenario (the tuner and its exhaustive grid) they would add about {per * len(left):.0f} s to its "
            f"{spent:.0f} s of scenarios, {spent + per * len(left):.0f} s in all")
    if profile == "quick":   # the record's own scenarios may already exceed the budget: said so (audit56 S11)
        held = f"the {QUICK_NOTEBOOK_S} s the quick profile holds notebook 16 to (its figures and set-up besides)"
        if spent > QUICK_NOTEBOOK_S:
            line += f"; its own {spent:.0f} s of scenarios already exceed {held}"
        else:
            line += f", {'past' if spent + per * len(left) > QUICK_NOTEBOOK_S else 'within'} {held}"
    return line + "."


def readings(records: list[dict], P=None, budget: dict | None = None, all_keys: tuple[str, ...] = ()) -> list[str]:
    """The notebook's reading: each scenario, each target over them, each miss by how much and why, where each
    heuristic fails, and (given ``P``) what the profile left to the full one."""
    out = [scenario_line(r) for r in records] + target_lines(records) + miss_lines(records)
    out += heuristic_failures(records)
    if P is not None and all_keys:
        line = profile_line(records, list(P.scenarios), P.profile, all_keys, (budget or {}).get("spent_s"))
        if line:
            out.append(line)
    return out


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
