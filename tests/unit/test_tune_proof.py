"""experiments.tune_proof and _tune_readings: the targets' words, the readings and the payload notebook 16 records."""

from types import SimpleNamespace

from feedlab import like_for_like as lfl
from feedlab.doctor.trials import Trial
from feedlab.experiments import _tune_readings as R
from feedlab.experiments import tune_proof as TP


def _t(name, rates, workers=0, settings=None):
    return Trial(name, settings or {}, rates=list(rates), median=sorted(rates)[len(rates) // 2], lo=min(rates),
                 hi=max(rates), half_width=0.01, passes=len(rates), timed_batches=60, window_s=1.2, rate_kind="steady",
                 batch_size=16, workers=workers, order="global", epoch_batches=100)


def _tuned(passes=2, busy=None):
    return SimpleNamespace(passes=passes, busy=busy)


def test_targets_met_missed_and_not_fair():
    start, best = _t("start", [100, 101, 99]), _t("num_workers=8", [400, 404, 396], 8, {"num_workers": 8})
    near = _t("num_workers=4", [380, 384, 376], 4, {"num_workers": 4})
    far = _t("num_workers=2", [200, 202, 198], 2, {"num_workers": 2})
    t = TP.targets(best, near, start, _tuned(), 5.0, 50.0)
    assert t["share"]["word"] == lfl.MET and t["not_below_start"]["word"] == lfl.MET
    assert t["passes"]["word"] == lfl.MET and t["seconds"]["word"] == lfl.MET
    t = TP.targets(best, far, start, _tuned(passes=4), 20.0, 50.0)
    assert t["share"]["word"] == lfl.MISSED and t["passes"]["word"] == lfl.MISSED and t["seconds"]["word"] == lfl.MISSED
    slower = _t("threads=2", [50, 51, 49], 0, {"kind": "threads", "threads": 2})
    assert TP.targets(best, slower, start, _tuned(), 5.0, 50.0)["not_below_start"]["word"] == lfl.MISSED
    busy = TP.targets(best, near, start, _tuned(busy="too busy to tune: x"), 5.0, 50.0)
    assert busy["share"]["word"] == lfl.NOT_FAIR


def _record(key="storage"):
    best, start = _t("threads=8", [400, 404, 396]), _t("start", [100, 101, 99], 1)
    t = TP.targets(best, best, start, _tuned(), 5.0, 50.0)
    others = [start, _t("num_workers=0", [80, 81, 79], 0, {"num_workers": 0}),
              _t("num_workers=2", [200, 202, 198], 2, {"num_workers": 2})]   # the heuristics' grid rows
    return {"key": key, "title": "(a) storage latency", "why": "w", "grid": [x.row() | {"name": x.name,
            "over_limit": False} for x in [best, *others]], "grid_s": 50.0, "best": best.name, "best_rate": 400.0,
            "heuristic_names": {"start": "start", "pytorch_default": "num_workers=0", "cores": "num_workers=2",
                                "cores_minus_1": "start"},
            "shares": {"tuner": 1.0, "start": 0.25, "pytorch_default": 0.2, "cores": 0.5, "cores_minus_1": 0.25},
            "tuner": {"name": "threads=8", "wall_s": 5.0, "passes": 2}, "targets": t}


def test_readings_name_each_target_and_where_each_heuristic_fails():
    lines = R.readings([_record()])
    assert lines[0].startswith("(a) storage latency: grid best threads=8") and "1.00 of the best" in lines[0]
    assert any(x.startswith("Target (pick ≥ 0.90") and "met in 1 of 1" in x for x in lines)
    assert any(x.startswith("workers = cores fails") and "storage (0.50)" in x for x in lines)
    assert any("over \"cores − 1\"" in x and "×4.00" in x for x in lines)
    # audit 53 S5: the start named once ("the user's start start: 1.00" doubled the label)
    assert "the user's start: " in lines[0] and "start start" not in lines[0]
    assert R.heuristic_words("cores_minus_1", "start") == "workers = cores − 1 (= the start)"
    assert R.heuristic_words("cores", "num_workers=2") == "workers = cores num_workers=2"


def test_payload_carries_every_scenario_and_the_sizes():
    P = SimpleNamespace(profile="smoke", samples=512, batch_size=16, grid_passes=1, tune_passes=1, tune_top=1, budget_s=None,
                        window_s=0.1, max_window_s=0.3, min_batches=8, tune_budget_s=5)
    p = R.payload([_record(), _record("memory")], P, {"budget_s": None, "left_out": []})
    assert p["notebook"] == "16_tune" and [s["key"] for s in p["scenarios"]] == ["storage", "memory"]
    assert p["targets"]["share"] == ["met", "met"] and p["sizes"]["batch_size"] == 16
    res = TP.results([_record()])
    assert {r["metric"] for r in res.rows} == {"samples_per_s", "tune_s", "grid_s"}


def _missing_record():
    """(c)-like: the tuner kept the start, the grid's best was measured by it but not told apart; 6 s against 25 s."""
    start, best = _t("start", [700, 705, 695], 2), _t("num_workers=0", [850, 855, 845], 0, {"num_workers": 0})
    r = _record("compute")
    r.update(title="(c) compute-bound step", best="num_workers=0", best_rate=850.0, grid_s=25.0, grid_passes=2,
             grid=[g | {"name": g["name"]} for g in (start.row(), best.row())] * 3 + [start.row()])
    trials = [_t("start", [800], 2).row() | {"seconds": 1.7},
              _t("num_workers=0", [830], 0, {"num_workers": 0}).row() | {"seconds": 2.0, "rate_kind": "imprecise"},
              _t("threads=2", [700]).row() | {"seconds": 0.5}]
    r["tuner"] = {"name": "start", "wall_s": 6.0, "passes": 1, "probe_s": 0.9, "trials": trials,
                  "excluded": {"threads=2": "excluded after 0.50 s: at most ×0.92 over your start, under ×1.05"},
                  "predicted": [{"name": "threads=2", "predicted": 900.0}, {"name": "num_workers=0", "predicted": 850.0}]}
    r["targets"] = TP.targets(best, start, start, _tuned(passes=1), 6.0, 25.0)
    return r


def test_each_miss_is_stated_by_how_much_and_why_from_the_run():
    lines = R.miss_lines([_missing_record()])
    sec = next(x for x in lines if "grid's seconds missed" in x)
    assert "by 1.0 s (0.24 of the grid's seconds)" in sec and "6.0 s against the 5.0 s allowed" in sec
    assert "7 settings × 2 pass(es), 14 windows" in sec and "the probe 0.9 s" in sec
    assert "threads=2 0.5 s (stopped early)" in sec and "the rest 0.9 s" in sec
    share = next(x for x in lines if x.startswith("(c) compute-bound step: pick ≥ 0.90"))
    assert "missed by 0.08 (×0.82" in share and "×1.04 of the start" in share and "the start kept" in share
    assert not any("never below" in x or "measured passes" in x for x in lines)     # met: nothing to explain


def test_the_profile_line_names_what_the_full_profile_runs_and_what_it_would_cost():
    from feedlab.experiments import _tune_scenarios as S

    P = SimpleNamespace(profile="quick", scenarios=["storage", "compute"])
    lines = R.readings([_record(), _missing_record()], P, {"spent_s": 90.0}, S.KEYS)
    last = lines[-1]
    assert last.startswith("Not in the quick profile: (b) jpeg, (d) large, (e) memory, (f) cow, (g) script")
    assert "median of 43 s a scenario" in last and "about 215 s to its 90 s" in last and "305 s in all" in last
    assert "past the 150 s" in last
    full = SimpleNamespace(profile="full", scenarios=list(S.KEYS))
    assert not any(x.startswith("Not in") for x in R.readings([_record()], full, None, S.KEYS))


def test_the_profile_line_says_when_the_records_own_scenarios_exceed_the_quick_budget():
    """audit56 S11: 245 s of scenarios are already past the 150 s; "…, 410 s in all, past the 150 s" implied they fit."""
    from feedlab.experiments import _tune_scenarios as S

    P = SimpleNamespace(profile="quick", scenarios=["storage", "compute"])
    last = R.readings([_record(), _missing_record()], P, {"spent_s": 245.0}, S.KEYS)[-1]
    assert f"its own 245 s of scenarios already exceed the {R.QUICK_NOTEBOOK_S} s" in last, last


def test_a_grid_best_not_told_apart_is_labelled():
    """audit56 S10: a grid best whose rate is imprecise, whose passes spread, or whose range another setting's
    passes reach is labelled in the scenario line; one clear of the rest and steady is not."""
    grid = [{"name": "num_workers=1", "median": 780.0, "rates": [707.0, 780.0, 827.0], "lo": 707.0, "hi": 827.0,
             "rate_kind": "imprecise", "half_width": 0.104},
            {"name": "start", "median": 693.0, "rates": [643.0, 693.0, 769.0], "lo": 643.0, "hi": 769.0,
             "rate_kind": "steady", "half_width": 0.03}]
    words = R.best_words({"best": "num_workers=1", "grid": grid})
    assert words.startswith(" (imprecise: ±10.4% > ±5% asked; its 3 passes spread ±") and \
        "not told apart from start" in words, words
    clear = [dict(grid[0], rates=[779.0, 780.0, 781.0], lo=779.0, hi=781.0, rate_kind="steady", half_width=0.02),
             dict(grid[1], hi=700.0)]
    assert R.best_words({"best": "num_workers=1", "grid": clear}) == ""
