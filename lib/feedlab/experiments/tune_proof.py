"""Notebook 16, the proof of ``feedlab.tune``: per scenario (:mod:`feedlab.experiments._tune_scenarios`), in one run,

* the tuner as a user runs it (its probe, its trials, its seconds, its pick);
* the exhaustive grid: every setting of the tuner's space a user could pick by hand (the same probe's worker
  ladder, each with and without persistent workers, and the thread counts: ``tuner.candidates.exhaustive``), each
  measured by the same trials (``feedlab.doctor.trials``: interleaved passes, steady
  windows, other load per pass), the ground truth;
* the heuristics read off the grid: the user's start, PyTorch's default (0 workers), "workers = cores", "cores − 1";
* under a memory limit, each worker count's memory measured over the scenario's epochs (a setting over the limit
  is left out of the best, named).

The targets, each judged by the one judge (``doctor.trials.judge``, i.e. ``like_for_like.verdict``) where it is a
ratio of rates: the pick ≥ 0.90 of the grid's best (both from the grid's passes), never below the start beyond
its spread, ≤ 3 measured passes beyond the probe, ≤ 1/5 of the grid's seconds.
"""

from __future__ import annotations

import gc
import time
import warnings
from typing import Callable

from feedlab import like_for_like as lfl
from feedlab import monitor, paths, stage
from feedlab.budget import Budget
from feedlab.doctor import trials as TR
from feedlab.doctor.script import run_script
from feedlab.doctor.wrap import batch_len
from feedlab.results import Results
from feedlab.tuner import candidates as CD
from feedlab.tuner import tune

from . import _tune_scenarios as S

SHARE, SECONDS_SHARE, MAX_PASSES = 0.90, 0.20, 3
HEURISTICS = ("start", "pytorch_default", "cores", "cores_minus_1")


def _script_job(sc: S.Scenario, P, log) -> None:
    """(g): run the script unmodified for a few batches; its loader, and its step's measured time as a wait."""
    args = ["--samples", str(P.samples), "--batch-size", str(P.batch_size), "--epochs", "1"]
    summary, loader = run_script(sc.extra["script"], args, max_batches=max(8, int(P.script_batches)),
                                 deadline_s=P.deadline_s, log=log)
    per = float(summary.get("step_s_per_sample") or 0.0)

    def step(batch, _t=per):
        time.sleep(_t * (batch_len(batch) or 1))

    gc.collect()   # the script's own iterator, stopped: ended here, never inherited by a forked worker
    sc.make, sc.step = (lambda: loader), (step if per > 0 else None)
    sc.start_workers = int(loader.num_workers)
    sc.extra["script_step_s_per_sample"] = per
    sc.extra["script_loader"] = {"num_workers": int(loader.num_workers), "batch_size": loader.batch_size}


def _memory(make: Callable, settings: dict, epochs: int, deadline_s: float) -> float | None:
    """The workers' USS (bytes, summed) after ``epochs`` epochs with ``settings`` (persistent workers: the same
    processes see every epoch); 0 for threads or no workers."""
    import psutil

    if settings.get("kind") == "threads" or not settings.get("num_workers"):
        return 0.0
    loader = CD.build(make(), {**settings, "persistent_workers": True})
    warnings.filterwarnings("ignore", message=r"This DataLoader will create \d+ worker processes")
    me = psutil.Process()
    before = {p.pid for p in me.children()}
    it = None
    t0 = time.perf_counter()
    for _ in range(int(epochs)):
        it = iter(loader)
        for _b in it:
            if time.perf_counter() - t0 > deadline_s:
                break
    kids = [p for p in me.children() if p.pid not in before]
    total = 0.0
    for k in kids:
        try:
            total += k.memory_full_info().uss
        except psutil.Error:
            pass
    stage.stop(loader, it)
    return total


def _row(t: TR.Trial) -> dict:
    r = t.row()
    r["name"] = t.name
    return r


def run_scenario(sc: S.Scenario, P, log=print) -> dict:
    """One scenario: the tuner, then the grid over its space, the heuristics, the targets."""
    cores = monitor.usable_cores()
    if sc.key == "script":
        _script_job(sc, P, log)
    win = dict(window_s=P.window_s, max_window_s=P.max_window_s, deadline_s=P.deadline_s,
               min_batches=P.min_batches)
    monitor.check_busy(f"{sc.key}: before", log=None)
    t0 = time.perf_counter()
    tuned = tune(sc.make, sc.step, P.tune_budget_s, epochs=sc.epochs, ram_bytes=sc.ram_bytes, passes=P.tune_passes,
                 top=P.tune_top, log=None, max_workers=P.max_workers, **win)
    tune_s = time.perf_counter() - t0
    log(f"{sc.title}: tuned in {tune_s:.1f} s → {CD.name_of(tuned.settings)} ({tuned.verdict})")
    loader = sc.make()
    start = CD.start_settings(loader)
    space = CD.exhaustive(tuned.probe, loader, P.max_workers)
    named = {}
    for s in space:
        named.setdefault(CD.name_of(CD.changed(s, start)), s)
    named.setdefault("start", {})
    cands = [TR.Candidate(name, lambda s=s: CD.build(sc.make(), s), CD.changed(s, start)) for name, s in named.items()]
    t1 = time.perf_counter()
    grid = TR.measure(cands, step=sc.step, passes=P.grid_passes, half_width=0.05, min_window_s=P.window_s,
                      max_window_s=P.max_window_s, deadline_s=P.deadline_s, min_batches=P.min_batches)
    grid_s = time.perf_counter() - t1
    load = monitor.check_busy(f"{sc.key}: tuner and grid", log=log)
    by_name = {t.name: t for t in grid}
    memory, by_workers = {}, {}
    if sc.ram_bytes:       # once a worker count (persistent or not, the same processes' memory after the epochs)
        for name, s in named.items():
            key = -1 if s.get("kind") == "threads" else int(s.get("num_workers", start.get("num_workers", 0)))
            if key not in by_workers:
                by_workers[key] = _memory(sc.make, s, sc.epochs, P.deadline_s)
            memory[name] = by_workers[key]
    rows = []
    for t in grid:
        r = _row(t)
        r["over_limit"] = bool(sc.ram_bytes and (memory.get(t.name) or 0) > sc.ram_bytes)
        r["workers_uss_mb"] = memory[t.name] / 2**20 if memory.get(t.name) is not None else None
        rows.append(r)
    ok = [t for t in grid if t.ok and not next(r for r in rows if r["name"] == t.name)["over_limit"]]
    best = max(ok, key=lambda t: t.median) if ok else None
    pick_name = CD.name_of(tuned.settings) if not tuned.busy else None
    if pick_name is not None and pick_name not in by_name:     # the pick is always in the grid's space; say if not
        log(f"{sc.title}: the pick {pick_name} is not in the grid")
    pick = by_name.get(pick_name) if pick_name else None
    heur = {"start": "start", "pytorch_default": _wname(0, start), "cores": _wname(cores, start),
            "cores_minus_1": _wname(max(0, cores - 1), start)}
    rec = {"key": sc.key, "title": sc.title, "why": sc.why, "cores": cores, "epochs": sc.epochs,
           "ram_limit_mb": sc.ram_bytes / 2**20 if sc.ram_bytes else None, "start_workers": sc.start_workers,
           "grid": rows, "grid_s": grid_s, "grid_passes": P.grid_passes, "best": best.name if best else None,
           "best_rate": best.median if best else None, "heuristic_names": heur, "load": load,
           "tuner": {**{k: v for k, v in tuned.summary().items() if k not in ("kept",)}, "name": pick_name,
                     "wall_s": tune_s},
           "extra": {k: v for k, v in sc.extra.items() if k != "script"}}
    rec["shares"] = {h: _share(by_name.get(n), best) for h, n in {**heur, "tuner": pick_name}.items()}
    rec["targets"] = targets(best, pick, by_name.get("start"), tuned, tune_s, grid_s)
    return rec


def _wname(w: int, start: dict) -> str:
    return CD.name_of(CD.changed({"num_workers": int(w)}, start))


def _share(t: TR.Trial | None, best: TR.Trial | None) -> float | None:
    if t is None or best is None or not t.median or not best.median:
        return None
    return t.median / best.median


def targets(best, pick, start, tuned, tune_s: float, grid_s: float) -> dict:
    """The four targets of issue 49, each with its number and its word."""
    out = {}
    if tuned.busy or pick is None or best is None:
        why = tuned.busy or ("no pick measured in the grid" if best is not None else "no grid setting measured")
        out["share"] = {"word": lfl.NOT_FAIR, "why": why}
        out["not_below_start"] = {"word": lfl.NOT_FAIR, "why": why}
    else:
        # the pick as the best (or the start) is met by identity only where its rate stands by the one rule
        same = lambda why, tgt: lfl.reread(lfl.Verdict(lfl.MET, why, 1.0, 1.0, 1.0, tgt), pick.side(),  # noqa: E731
                                           pick.side())
        v = TR.judge(best, pick, target=SHARE) if pick is not best else same("the pick is the best", SHARE)
        out["share"] = {"word": v.word, "why": v.why, "ratio": v.ratio, "lo": v.lo, "hi": v.hi, "target": SHARE}
        if pick is start or start is None:
            w = same("the pick is the start", 1.0)
            out["not_below_start"] = {"word": w.word, "why": w.why, "ratio": 1.0}
        else:
            w = TR.judge(start, pick, target=1.0)
            word = lfl.MISSED if w.word == lfl.MISSED else (lfl.MET if w.judged else w.word)
            out["not_below_start"] = {"word": word, "why": str(w), "ratio": w.ratio, "lo": w.lo, "hi": w.hi}
    out["passes"] = {"word": lfl.MET if tuned.passes <= MAX_PASSES else lfl.MISSED, "value": tuned.passes,
                     "target": MAX_PASSES}
    r = tune_s / grid_s if grid_s > 0 else None
    out["seconds"] = {"word": (lfl.MET if r is not None and r <= SECONDS_SHARE else lfl.MISSED), "value": r,
                      "tune_s": tune_s, "grid_s": grid_s, "target": SECONDS_SHARE}
    return out


def run(P, keys=None, log=print, cls_root: str | None = None, script: str | None = None,
        out_dir=None) -> tuple[list[dict], Budget]:
    """Every scenario of ``keys`` (default ``P.scenarios``), one after another, inside the profile's
    ``budget_s`` (and the runner's limit): a scenario that would not fit is left out and named
    (:class:`feedlab.budget.Budget`; its seconds saved beside the results where ``out_dir`` is given)."""
    budget = Budget(getattr(P, "budget_s", None), "16_tune")
    if out_dir is not None:
        budget.keep_in(out_dir)
    out = []
    for key in (keys or P.scenarios):
        sc = S.build(key, P, cls_root=cls_root, script=script)
        if not budget.allows(sc.title, group="scenario"):
            continue
        log(f"— {sc.title}: {sc.why}")
        with budget.setting(sc.title, "scenario"):
            out.append(run_scenario(sc, P, log))
    if budget.note():
        log(budget.note())
    return out, budget


def script_path():
    """(g)'s training script, kept in the repository (tests/scripts/tune_train.py): small, offline."""
    return paths.REPO_ROOT / "tests" / "scripts" / "tune_train.py"


def results(records: list[dict]) -> Results:
    """results.csv: every grid setting's measured rate, per scenario, with what it was (best, the pick)."""
    res = Results()
    for r in records:
        for g in r["grid"]:
            if g.get("median"):
                res.add("16_tune", r["key"], "samples_per_s", g["median"], "samples/s", setting=g["name"],
                        lo=g["lo"], hi=g["hi"], rate_kind=g["rate_kind"], busy=bool(g["busy"]),
                        over_limit=g["over_limit"], best=g["name"] == r["best"],
                        pick=g["name"] == r["tuner"].get("name"))
        res.add("16_tune", r["key"], "tune_s", r["tuner"]["wall_s"], "s", setting="tuner")
        res.add("16_tune", r["key"], "grid_s", r["grid_s"], "s", setting="grid")
    return res
