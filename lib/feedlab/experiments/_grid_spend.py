"""Grids that spend where the answer is (issue 31): a worker ladder that stops once its curve has
turned, settings ordered so the ones a claim reads come first, and the table of what a grid left out
(a turned ladder, a notebook's time budget: :class:`feedlab.budget.Budget`). Used by 01, 02 and 09
through :func:`feedlab.experiments.loader_grid.run_grid`'s ``skip`` and ``budget``."""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from feedlab.experiments._rate_kinds import steady_rows

TURN_POINTS = 2   # successive points no faster than the best before them: the curve has turned


def curve_turned(points: Sequence[tuple[int, float, float]], last: int = TURN_POINTS) -> int | None:
    """The worker count of the fastest point measured (highest median) once the curve has turned, else None.

    ``points``: ``(workers, rate, spread)`` in ladder order (rate: the median over repeats; spread: how
    far it may move, in the same unit). Turned: each of the ``last`` latest points is no faster than the
    best point before them beyond its own spread (``rate <= best + spread``): a rise inside the noise is
    no rise. Fewer than ``last + 1`` points: None (a curve needs a best and ``last`` points after it)."""
    if last < 1:
        raise ValueError(f"last={last}: at least one point after the best")
    if len(points) < last + 1:
        return None
    before, tail = points[:-last], points[-last:]
    best = max(before, key=lambda p: p[1])
    if all(rate <= best[1] + max(0.0, spread) for _, rate, spread in tail):
        return int(max(points, key=lambda p: p[1])[0])
    return None


def ladder_points(df, model: str, below: int | None = None) -> list[tuple[int, float, float]]:
    """``(workers, median steady rate, spread)`` per worker count of ``model``'s rows in a loader-grid frame,
    by worker count (those under ``below`` only). Spread: the interquartile range over repeats, or the
    rate's own 95% half-width where it was timed to a precision (``rate_half_width``), whichever is wider."""
    if df.empty or "metric" not in df.columns:
        return []
    part = steady_rows(df[(df["metric"] == "steady_samples_per_s") & (df["model"] == model)])
    out = []
    for w, g in part.groupby("num_workers", sort=True):
        if below is not None and int(w) >= below:
            continue
        med = float(g["value"].median())
        spread = float(g["value"].quantile(0.75) - g["value"].quantile(0.25))
        if "rate_half_width" in g.columns and g["rate_half_width"].notna().any():
            spread = max(spread, med * float(g["rate_half_width"].median()))
        out.append((int(w), med, spread))
    return out


def turned_ladder(required: Callable[[str], Iterable[int]]) -> Callable:
    """A ``skip`` for :func:`~feedlab.experiments.loader_grid.run_grid` over a worker ladder: a count that no
    claim needs (``required(model)``: the counts a claim or a reading names) is left out once that model's
    curve has turned (:func:`curve_turned` over the counts measured below it)."""
    def skip(s, res) -> str:
        if int(s.num_workers) in set(required(s.model)):
            return ""
        best = curve_turned(ladder_points(res.frame(), s.model, below=int(s.num_workers)))
        if best is None:
            return ""
        return (f"the curve had turned: the last {TURN_POINTS} counts no faster than the best before them "
                f"beyond their spread (fastest measured: {best} workers)")
    return skip


def claim_workers(ladder: Sequence[int], cores: int, beyond_cores: bool) -> set[int]:
    """The worker counts of a ladder a claim or a reading of notebook 01 needs whatever the curve does:
    0 (the main process), 1, 7 (write-up 002), cores − 1 and cores (002's best count); with
    ``beyond_cores`` (the loader alone: 001's too-many-workers) also the first count above the cores."""
    want = {0, 1, 7, cores - 1, cores}
    above = [w for w in sorted(ladder) if w > cores]
    if beyond_cores and above:
        want.add(above[0])
    return {w for w in ladder if w in want}


def setting_name(s, experiment: str = "") -> str:
    """A setting as a reader (and :class:`~feedlab.budget.Budget`) names it, with its experiment where given (one
    notebook's grids may share a setting): ``batch_size_table: png/pil totensor b8 w2 model=srcnn``."""
    return (f"{experiment}: " if experiment else "") + f"{s.label()} model={s.model}"


def budget_group(s) -> str:
    """What costs alike in a loader grid (the budget's estimate for a setting not yet run): batch size and model."""
    return f"b{s.batch_size} {s.model}"


def left_out_why(s, res, budget=None, skip=None, essential=None, experiment: str = "") -> str:
    """Why a grid leaves setting ``s`` out ("" runs it), recorded in ``res.left_out``: ``skip(s, res)``'s reason,
    else the budget's where ``s`` does not fit in what is left; an ``essential(s)`` setting (one a claim reads)
    is refused only by the run's limit, never by the budget (it is charged all the same)."""
    why = skip(s, res) if skip is not None else ""
    if not why and budget is not None and not budget.allows(
            setting_name(s, experiment), group=budget_group(s), essential=essential is not None and essential(s)):
        why = budget.left_out[-1][1]
    if why:
        res.left_out.append((setting_name(s, experiment), why))
    return why


def ends(values) -> Callable:
    """An ``essential`` predicate: the setting's batch size is the smallest or the largest of ``values``."""
    keep = {min(values), max(values)} if len(values) else set()
    return lambda s: int(s.batch_size) in keep


def extremes_first(values: Sequence[int]) -> list[int]:
    """Batch sizes in the order a budget should spend on them: the smallest and the largest (the ends every
    batch-size claim and title compares), then the rest from small to large."""
    vals = sorted(dict.fromkeys(int(v) for v in values))
    if len(vals) <= 2:
        return vals
    return [vals[0], vals[-1], *vals[1:-1]]


def left_out_table(*results):
    """One row per setting a grid left out (``setting``, ``why``): the notebook's table of what this run
    did not measure. Empty (with those columns) where nothing was."""
    import pandas as pd

    rows = [{"setting": what, "why": why} for r in results for what, why in getattr(r, "left_out", [])]
    df = pd.DataFrame(rows, columns=["setting", "why"])
    df.attrs["caption"] = "Settings this run left out, and why (a profile without budget_s, full, measures them)"
    return df


def spend_record(budget, *results, rate_precision=None, rate_cap_s=None) -> dict:
    """What a payload records of the run's spending: the precision each rate was timed to, its cap, the
    budget (:meth:`~feedlab.budget.Budget.record`) and every setting left out with why."""
    rec = budget.record() if budget is not None else {"budget_s": None}
    return {"rate_precision": rate_precision, "rate_cap_s": rate_cap_s, "budget": rec,
            "left_out": [{"setting": w, "why": y} for r in results for w, y in getattr(r, "left_out", [])]}


__all__ = ["curve_turned", "ladder_points", "turned_ladder", "claim_workers", "extremes_first", "ends",
           "setting_name", "budget_group", "left_out_why",
           "left_out_table", "spend_record", "TURN_POINTS"]
