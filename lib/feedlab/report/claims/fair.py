"""The preconditions of a fair test, checked from what a run recorded.

A claim's verdict means something only when the run could show it: rates measured
after start-up (steady batches), a step the GPU bounds where the claim is about the
GPU, the worker counts the claim names, a machine nobody else was loading, enough
repeats for a median, and a meter that resolves the window it averages over. Each
:class:`~feedlab.report.claims.core.Precondition` below checks one of them on the settings an
:class:`~feedlab.report.claims.core.Outcome` compared and returns the reason it fails ('' when
met); :func:`judge` (below) then reads "not tested fairly here (reason)".

Results from before the columns that state these things (``rate_kind``,
``timed_batches``, ``warmup_batches``, ``gpu_busy``, ``nvml_util``,
``cpu_system_saturation``) are judged by what they do hold: batches per epoch against
the warm-up (``num_workers × prefetch_factor`` + the first) + :data:`MIN_TIMED_BATCHES`,
the data-wait share for a data-bound loop, the epoch wall time against NVML's sample
period, and the fingerprint's ``other_load`` for a busy machine.
"""

from __future__ import annotations

import math

from feedlab.like_for_like import MIN_REPEATS, precision_problem  # the one precision rule (like_for_like)
from feedlab.like_for_like import NOT_FAIR as JUDGE_NOT_FAIR
from feedlab.monitor import BUSY_THRESHOLD
from feedlab.pipeline import MIN_TIMED_BATCHES  # timed batches after warm-up for a steady rate (one constant)
from feedlab.report.claims.core import (
    JUDGED,
    NOT_FAIR,
    NOT_RUN,
    NOT_TESTABLE,
    PARTLY,
    SMOKE,
    Claim,
    NoData,
    Outcome,
    Precondition,
    Run,
    Unfair,
    Verdict,
    is_smoke,
    unmet_need,
)

GPU_BOUND_BUSY = 0.5         # GPU busy fraction (CUDA events) from which a loop is GPU-bound
DATA_BOUND_WAIT = 0.5        # share of the loop waiting for data above which it is data-bound
LOADING_SHOWS_WAIT = 0.2     # a loading claim judged on training rates: the baseline waits for data this much
NVML_FASTEST_PERIOD_S = 1 / 6  # NVML averages utilisation over 1/6 s to 1 s, by product
NVML_MIN_PERIODS = 10        # a window NVML resolves spans at least this many of its periods
DEFAULT_PREFETCH = 2         # DataLoader's prefetch_factor when a row does not say


def busy_threshold() -> float:
    return float(BUSY_THRESHOLD)


# ---------------------------------------------------------------- the rows of a setting
def _matches(col, value):
    import pandas as pd

    if isinstance(value, bool):
        return col.map(lambda x: str(x).strip().lower() in ("true", "1", "1.0"))  == value
    if isinstance(value, (int, float)):
        return pd.to_numeric(col, errors="coerce") == value
    return col.astype(str) == str(value)


def rows_of(run: Run, setting: dict):
    """Every row of ``results.csv`` of one setting (any metric); empty when the table or a
    column is missing."""
    import pandas as pd

    try:
        df = run.frame
    except NoData:
        return pd.DataFrame()
    for k, v in setting.items():
        if k not in df.columns:
            return df.iloc[0:0]
        df = df[_matches(df[k], v)]
    return df


def label(setting: dict) -> str:
    short = {"batch_size": "b", "num_workers": "w"}
    parts = [f"{short[k]}{v}" for k, v in setting.items() if k in short]
    parts += [f"{v}" if k in ("format", "variant", "mode") else f"{k}={v}"
              for k, v in setting.items() if k not in short and k not in ("experiment", "model", "pin_memory")]
    return " ".join(parts) or "the setting"


def metric_median(rows, metric: str) -> float | None:
    if rows.empty or "metric" not in rows.columns:
        return None
    v = rows[rows.metric == metric]["value"].dropna()
    return float(v.median()) if len(v) else None


def _num(x, default=None):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(v) else v


def steady_state(run: Run, setting: dict) -> tuple[bool | None, str]:
    """(steady?, what the run shows) for one setting: ``rate_kind`` where the rows carry it,
    else batches per epoch against warm-up + :data:`MIN_TIMED_BATCHES`. None: not recorded."""
    rows = rows_of(run, setting)
    if rows.empty:
        return None, f"{label(setting)}: not in results.csv"
    if "rate_kind" in rows.columns and rows.rate_kind.notna().any():
        kinds = set(rows.rate_kind.dropna().astype(str))
        timed = _num(rows["timed_batches"].median()) if "timed_batches" in rows.columns else None
        warm = _num(rows["warmup_batches"].median()) if "warmup_batches" in rows.columns else None
        ok = kinds == {"steady"}
        how = f"{timed:.0f} timed batches after {warm:.0f} warm-up" if timed is not None and warm is not None else ""
        what = "steady" if ok else ("imprecise (timed to its cap before its interval closed)"
                                    if "imprecise" in kinds else "start-up-inclusive")
        return ok, f"{label(setting)}: {what} rate" + (f" ({how})" if how else "")
    batches = metric_median(rows, "batches")
    bs = _num(rows["batch_size"].iloc[0]) if "batch_size" in rows.columns else None
    if batches is None and bs:
        samples = metric_median(rows, "samples")
        if samples is None and "samples" in rows.columns:
            samples = _num(rows["samples"].median())
        batches = math.ceil(samples / bs) if samples else None
    if batches is None:
        return None, f"{label(setting)}: no batch count recorded"
    nw = int(_num(rows["num_workers"].iloc[0], 0)) if "num_workers" in rows.columns else 0
    pf = _num(rows["prefetch_factor"].iloc[0]) if "prefetch_factor" in rows.columns else None
    pf = int(pf) if pf else DEFAULT_PREFETCH
    warm = 1 if nw <= 0 else nw * pf + 1
    ok = batches >= warm + MIN_TIMED_BATCHES
    return ok, f"{label(setting)} ran {batches:.0f} batches" + ("" if ok else f" < {warm + MIN_TIMED_BATCHES}")


def steady_only(run: Run, settings) -> list[dict]:
    """The settings whose rates are steady (the others left out)."""
    return [s for s in settings if steady_state(run, s)[0]]


def _listing(parts: list[str], most: int = 4) -> str:
    return ", ".join(parts[:most]) + (f" and {len(parts) - most} more" if len(parts) > most else "")


def imprecise_problem(rows, setting: dict) -> str:
    """The one precision rule (:func:`feedlab.like_for_like.precision_problem`) on a setting's rows where any is
    imprecise: its half-width (the widest) and its repeats; '' where none is imprecise or the rule holds."""
    if rows.empty or "rate_kind" not in rows.columns or not (rows["rate_kind"].astype(str) == "imprecise").any():
        return ""
    hw = _num(rows["rate_half_width"].max()) if "rate_half_width" in rows.columns else None
    n = int(rows["repeat"].nunique()) if "repeat" in rows.columns else None
    return precision_problem(label(setting), "imprecise", hw, n)


def unsteady_reason(run: Run, out: Outcome) -> str:
    """Rates not steady; an imprecise one with its half-width and enough repeats stands (the one rule)."""
    bad = [why for s in out.settings for ok, why in [steady_state(run, s)]
           if not ok and not ("imprecise" in why and ok is False and not imprecise_problem(rows_of(run, s), s))]
    if not bad:
        return ""
    if all("imprecise" in why for why in bad):   # steady after warm-up, but its cap came before its precision
        return (f"rates not known to their precision: {_listing(bad)}; a steady rate timed to a precision needs "
                "its 95% interval within the half-width the run asked for before its cap")
    return (f"start-up-bound: {_listing(bad)} per epoch, where a steady rate needs the warm-up "
            f"(workers × prefetch + the first batch) + {MIN_TIMED_BATCHES} timed batches, or a rate the run "
            "labelled steady")


# ---------------------------------------------------------------- a GPU-bound step
def gpu_bound_reason(run: Run, out: Outcome) -> str:
    """At the largest batch compared: the GPU busy fraction (CUDA events) ≥ :data:`GPU_BOUND_BUSY`;
    without it, a data-wait share above :data:`DATA_BOUND_WAIT` shows a data-bound loop."""
    sized = [s for s in out.settings if "batch_size" in s]
    top = max((s["batch_size"] for s in sized), default=None)
    bad = []
    for s in ([s for s in sized if s["batch_size"] == top] if sized else list(out.settings)):
        rows = rows_of(run, s)
        busy = metric_median(rows, "gpu_busy")
        if busy is not None:
            if busy < GPU_BOUND_BUSY:
                bad.append(f"GPU busy {busy:.0%} at {label(s)} (CUDA events; GPU-bound needs ≥ {GPU_BOUND_BUSY:.0%})")
            continue
        wait = metric_median(rows, "data_wait_fraction")
        if wait is not None and wait > DATA_BOUND_WAIT:
            bad.append(f"the loop was data-bound, not GPU-bound: {wait:.0%} of it waited for data at {label(s)}")
        else:
            bad.append(f"a GPU-bound step not shown at {label(s)}: no GPU busy fraction (CUDA events) recorded")
    return "; ".join(bad)


def gpu_fed_reason(run: Run, out: Outcome) -> str:
    """For a claim that the GPU *starves* at some setting: the step can keep the GPU busy when fed — GPU busy
    (CUDA events) ≥ :data:`GPU_BOUND_BUSY` at the outcome's last setting (its best-fed one). Low use at the
    starved setting is what such a claim asserts, so it is not checked there."""
    if not out.settings:
        return ""
    return gpu_bound_reason(run, Outcome(out.status, out.ours, settings=(out.settings[-1],)))


def loading_shows_reason(run: Run, out: Outcome, baseline: dict | None = None) -> str:
    """A claim about loading speed judged on a training loop's throughput: the baseline's loop must wait for
    data at least :data:`LOADING_SHOWS_WAIT` of its time (median over the settings compared), else the step
    bounds the loop and a loading difference cannot show in its rate (the ratio sits in noise around 1)."""
    base = [s for s in out.settings if all(s.get(k) == v for k, v in (baseline or {}).items())]
    waits = [w for s in base for w in [metric_median(rows_of(run, s), "data_wait_fraction")] if w is not None]
    if not waits:
        return ""
    import statistics

    med = statistics.median(waits)
    if med >= LOADING_SHOWS_WAIT:
        return ""
    what = ", ".join(f"{k}={v}" for k, v in (baseline or {}).items()) or "the baseline"
    return (f"the loop was bound by its step, not by loading: {what} waited for data {min(waits):.0%}–{max(waits):.0%} "
            f"of it (median {med:.0%} < {LOADING_SHOWS_WAIT:.0%}), so a loading difference cannot show in its rate")


# ---------------------------------------------------------------- a meter that resolves its window
def nvml_min_window_s() -> float:
    return NVML_MIN_PERIODS * NVML_FASTEST_PERIOD_S


def meter_reason(run: Run, out: Outcome) -> str:
    """GPU utilisation read by a meter that resolves its window: CUDA events (``gpu_busy``)
    always do; NVML (``nvml_util``) only where the run recorded a reading (it writes none for a
    window shorter than its periods); the older ``gpu_util`` (NVML polled) only over epochs of
    at least :data:`NVML_MIN_PERIODS` of NVML's fastest sample period."""
    bad, walls = [], []
    for s in out.settings:
        rows = rows_of(run, s)
        if metric_median(rows, "gpu_busy") is not None or metric_median(rows, "nvml_util") is not None:
            continue
        if metric_median(rows, "gpu_util") is None:
            bad.append(label(s))
            continue
        wall = metric_median(rows, "epoch_s")
        if wall is None or wall < nvml_min_window_s():
            walls.append(wall)
            bad.append(label(s))
    if not bad:
        return ""
    if walls and all(w is not None for w in walls):
        span = f"{min(walls):.2f}–{max(walls):.2f} s" if min(walls) != max(walls) else f"{walls[0]:.2f} s"
        return (f"the GPU meter cannot see the epochs: NVML averages over its own sample period (1/6–1 s) and "
                f"was polled over epochs of {span} ({_listing(bad)}), shorter than the "
                f"{NVML_MIN_PERIODS} periods ({nvml_min_window_s():.1f} s) a window needs")
    return f"no GPU meter that resolves its window at {_listing(bad)} (no gpu_busy, no NVML window)"


# ---------------------------------------------------------------- repeats
def precise_window(rows) -> bool:
    """Every row a steady window timed to a stated precision (``rate_kind`` steady, a finite
    ``rate_half_width``: the 95% interval of its mean batch time, ``pipeline.SteadyStop``): the window's
    own spread stands for the repeats' (issue 31: a steady rate at the cost of its window)."""
    if "rate_half_width" not in rows.columns or "rate_kind" not in rows.columns:
        return False
    finite = rows["rate_half_width"].map(lambda v: _num(v) is not None and math.isfinite(_num(v)))
    return bool(len(rows)) and bool((rows["rate_kind"].astype(str) == "steady").all()) and bool(finite.all())


def repeats_reason(run: Run, out: Outcome) -> str:
    """Fewer than :data:`MIN_REPEATS` repeats of a setting whose window was not timed to a stated precision; an
    imprecise rate by the one rule, :func:`feedlab.like_for_like.precision_problem` (the judge's own)."""
    bad = []
    for s in out.settings:
        rows = rows_of(run, s)
        if rows.empty or "repeat" not in rows.columns:
            continue
        n = rows["repeat"].nunique()
        if "rate_kind" in rows.columns and (rows["rate_kind"].astype(str) == "imprecise").any():
            if imprecise_problem(rows, s):
                bad.append(f"{label(s)}: {n}")
        elif n < MIN_REPEATS and not precise_window(rows):
            bad.append(f"{label(s)}: {n}")
    return (f"too few repeats ({_listing(bad)}; a median and its spread need ≥ {MIN_REPEATS})" if bad else "")


# ---------------------------------------------------------------- a machine not busy
def other_load(fp: dict | None) -> float | None:
    """The largest share of the usable cores other processes used while the run measured
    (whole run or busiest checked window, fingerprint ``other_load``); None: not recorded."""
    load = (fp or {}).get("other_load") or {}
    fracs = [w.get("other_fraction") for w in (load.get("whole_run"), load.get("busiest_window"))
             if isinstance(w, dict) and w.get("available", True) and w.get("other_fraction") is not None]
    return max(float(f) for f in fracs) if fracs else None


def busy_reason(run: Run, out: Outcome | None = None) -> str:
    """Why the run cannot count as quiet: other processes over the house threshold, or no load record at
    all (a run that did not look cannot say it was quiet)."""
    frac = other_load(run.fingerprint)
    thr = busy_threshold()
    if frac is None:
        return ("no record of the machine's other load (the fingerprint has no other_load): whether it was "
                "busy cannot be told")
    if frac <= thr:
        return ""
    return (f"the machine was busy: other processes used {frac:.0%} of the usable cores while it measured "
            f"(house threshold {thr:.0%}, fingerprint other_load)")


BUSY_PREFIX = "the machine was busy: "
BUSY_SIDE = " measured on a busy machine ("   # the one judge's words for a busy side (like_for_like)


def busy_caveat(run: Run) -> str:
    """The caveat a verdict carries: "BUSY run: …" only where the fingerprint recorded other load over the
    threshold; a run with no load record says that instead (not busy, not known to be quiet); '' when quiet."""
    why = busy_reason(run)
    if not why:
        return ""
    if why.startswith(BUSY_PREFIX):
        return f"BUSY run: {why[len(BUSY_PREFIX):]}; timings may be slowed"
    return why   # "no record of the machine's other load …": not busy, and not known to be quiet


# ---------------------------------------------------------------- the preconditions
STEADY = Precondition("steady", "steady rates: warm-up (workers × prefetch + the first batch), then "
                      f"≥ {MIN_TIMED_BATCHES} timed batches (or a rate the run labelled steady)", unsteady_reason)
GPU_BOUND = Precondition("GPU-bound", f"a GPU-bound step at the largest batch (GPU busy ≥ {GPU_BOUND_BUSY:.0%}; "
                         f"a loop waiting for data > {DATA_BOUND_WAIT:.0%} of its time is not)", gpu_bound_reason)
GPU_FED = Precondition("GPU fed", f"a step that keeps the GPU busy when fed (GPU busy ≥ {GPU_BOUND_BUSY:.0%} at the "
                       "best-fed setting compared; the starved one is what the claim asserts)", gpu_fed_reason)
LOADING_SHOWS = Precondition("loading shows", f"a loop bound by loading at the baseline (PNG waits for data ≥ "
                             f"{LOADING_SHOWS_WAIT:.0%} of it, median over the settings compared)",
                             lambda run, out: loading_shows_reason(run, out, {"format": "png"}))
METER = Precondition("meter", "a GPU meter that resolves its window (CUDA events, or NVML over ≥ "
                     f"{NVML_MIN_PERIODS} of its sample periods)", meter_reason)
REPEATS = Precondition("repeats", f"≥ {MIN_REPEATS} repeats of every setting compared, or a steady window timed "
                       "to a stated precision", repeats_reason)
NOT_BUSY = Precondition("not busy", "a machine not busy (other processes ≤ the house threshold of the usable "
                        "cores, fingerprint other_load)", busy_reason)
TIMING = (NOT_BUSY, REPEATS)  # every timing claim


def workers_named(*counts: int) -> Precondition:
    """The worker counts the claim names; the claim's test raises Unfair when the run lacks them."""
    return Precondition("workers " + "/".join(map(str, counts)),
                        "the worker counts the claim names: " + " and ".join(map(str, counts)))


LOADER_CPU = Precondition("loader CPU", "CPU use of the loader's own process tree (not system-wide)")


# ---------------------------------------------------------------- the verdict
def judge(claim: Claim, run: Run) -> Verdict:
    """The claim's verdict on this run: the machine's needs first, then its test, then the
    preconditions of a fair test (every unmet one named), then the smoke profile; a busy
    machine adds a caveat (:func:`busy_caveat`)."""
    why = unmet_need(claim.needs, run)
    if why:
        return Verdict(claim.id, NOT_TESTABLE, "—", claim.theirs, why)
    caveat = busy_caveat(run)
    try:
        out = claim.test(run)
    except NoData as e:   # nothing measured: no load caveat on it (audit 53 F13)
        return Verdict(claim.id, NOT_RUN, "—", claim.theirs, f"not measured in this run: {e} (re-run {claim.notebook})")
    except (KeyError, IndexError) as e:  # a setting the comparison needs is absent from a partial run
        return Verdict(claim.id, NOT_RUN, "—", claim.theirs,
                       f"not measured in this run: no {e} among its settings (re-run {claim.notebook})")
    except Unfair as e:
        if is_smoke(run):
            return Verdict(claim.id, SMOKE, "—", claim.theirs, SMOKE_NOTE, caveat)
        # the run-level preconditions (a busy machine) still apply: checked with no settings
        return _unfair(claim, run, "—", [str(e)] + _unmet(claim, run, Outcome(PARTLY, "—")), caveat)
    if is_smoke(run):
        return Verdict(claim.id, SMOKE, out.ours, claim.theirs, SMOKE_NOTE, caveat)
    reasons = _unmet(claim, run, out)
    if out.status == NOT_FAIR:   # the one judge did not judge the ratio (sides unlike, or a side not fair)
        if out.note.startswith(JUDGE_NOT_FAIR + " (") and out.note.endswith(")"):   # its words, said once
            out = Outcome(out.status, out.ours, out.note[len(JUDGE_NOT_FAIR) + 2:-1], out.settings)
        # a side busy, where the run's own not-busy precondition already says so: said once
        said = reasons and all(BUSY_SIDE in part for part in out.note.split("; "))
        busy = [r for r in reasons if r.startswith(BUSY_PREFIX)]   # the run-level reason leads
        return _unfair(claim, run, out.ours, busy + ([] if said else [out.note]) + [r for r in reasons if r not in busy],
                       caveat)
    if reasons and out.status in JUDGED:
        return _unfair(claim, run, out.ours, reasons, caveat)
    return Verdict(claim.id, out.status, out.ours, claim.theirs, out.note, "" if out.status == NOT_RUN else caveat)


SMOKE_NOTE = "smoke profile: a plumbing check, too small to judge"


def _unmet(claim: Claim, run: Run, out: Outcome) -> list[str]:
    return [r for p in claim.fair if p.check is not None for r in [p.check(run, out)] if r]


def _unfair(claim: Claim, run: Run, ours: str, reasons: list[str], caveat: str) -> Verdict:
    reasons = list(dict.fromkeys(reasons))
    if caveat and any(r.startswith(BUSY_PREFIX) or r.startswith("no record of the machine's other load")
                      for r in reasons):
        caveat = ""  # said once, as the reason
    return Verdict(claim.id, NOT_FAIR, ours, claim.theirs, "; ".join(reasons), caveat)
