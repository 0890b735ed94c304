"""A claim's ratio over one or more pairs of recorded settings, by the one judge (:func:`feedlab.like_for_like.verdict`).

The claims whose ratio a notebook printed from its payload (03's pinned and pageable steps and copies, 07's
collate grid, 01's sleeping data set, 06's out-of-band resize and accimage, 04's print, 05's prefetch and HDF5
with training, 09's epoch at batch 8 against 128) are judged here on both sides built from the record's own
rows (:func:`feedlab.report.claims.sides.side_of_rows`): every pair's sides are compared first — one pair whose
sides differ, or did not record an invariant ("not known"), or were not measured fairly stands for the whole, and
the claim's number is measured, not judged — then the claim's ratio is judged against its bounds with the spread
of the pair that stands nearest it. Never a verdict from a point ratio alone.
"""

from __future__ import annotations

from feedlab.like_for_like import MET, Side, Verdict, verdict
from feedlab.like_for_like import NOT_FAIR as NOT_FAIR_WORD
from feedlab.report.claims.core import NOT_FAIR, NOT_REPRODUCED, PARTLY, REPRODUCED, Outcome, Run, status_of
from feedlab.report.claims.sides import SPS, ratio_interval, side_of_rows

TAGS = ("input_size", "image_size", "batch_size", "num_workers", "pin_memory", "bytes", "sink", "mode")


def tag(setting: dict) -> str:
    """The setting's own words for a side's label: its sizes, workers and mode (``batch_size=8, mode=read``)."""
    return ", ".join(f"{k}={v}" for k, v in setting.items() if k in TAGS)


def pair_of(run: Run, a: dict, b: dict, labels: tuple[str, str], metric: str = SPS,
            recipe: str | None = None) -> tuple[Side, Side, float | None, tuple]:
    """Both sides of one pair from the run's rows, the pair's own ratio ``a`` ÷ ``b`` and its interval."""
    sa, ra, spa = side_of_rows(run, a, f"{labels[0]} ({tag(a)})" if tag(a) else labels[0], metric=metric,
                               recipe=recipe)
    sb, rb, spb = side_of_rows(run, b, f"{labels[1]} ({tag(b)})" if tag(b) else labels[1], metric=metric,
                               recipe=recipe)
    r = ra / rb if ra is not None and rb else None
    return sa, sb, r, ratio_interval(spa, spb)


def grid_verdicts(run: Run, pairs: list[tuple[dict, dict]], ratio: float | None, full: float,
                  part: float | None = None, *, labels: tuple[str, str], metric: str = SPS,
                  changes: tuple[str, ...] = (), varied: tuple[str, ...] = (), lower_is_better: bool = False,
                  stand: int | None = None) -> tuple[Verdict, Verdict | None]:
    """The claim's ``ratio`` (``a`` ÷ ``b`` of each pair, or their median) against its reproduced bound ``full``
    and partly bound ``part``. Every pair's sides go through the judge first: the first pair not like for like or
    not tested fairly stands for the whole (its setting named). Then the ratio is judged with the interval of the
    pair ``stand`` (an index; default: the pair whose own ratio is nearest ``ratio``), scaled to ``ratio``."""
    if not pairs:
        v = verdict(Side(labels[0]), Side(labels[1]), ratio, target=full)
        return v, None
    kw = dict(changes=changes, varied=varied, lower_is_better=lower_is_better)
    each = []
    for a, b in pairs:
        sa, sb, r, (lo, hi) = pair_of(run, a, b, labels, metric)
        v = verdict(sa, sb, r, target=full, lo=lo, hi=hi, **kw)
        if not v.judged:
            return v, None
        each.append((sa, sb, r, lo, hi))
    if stand is None:
        stand = min(range(len(each)), key=lambda i: abs((each[i][2] or 0) - (ratio or 0)))
    sa, sb, r, lo, hi = each[stand]
    if ratio is not None and r and lo is not None and hi is not None:
        lo, hi = ratio * lo / r, ratio * hi / r
    v_full = verdict(sa, sb, ratio, target=full, lo=lo, hi=hi, **kw)
    v_part = None if part is None or not v_full.judged else verdict(sa, sb, ratio, target=part, lo=lo, hi=hi, **kw)
    return v_full, v_part


def first_unjudged(run: Run, pairs: list[tuple[dict, dict]], *, labels: tuple[str, str], metric: str = SPS,
                   changes: tuple[str, ...] = ()) -> Verdict | None:
    """The judge's verdict on the first pair whose sides are not like for like or not measured fairly (None: every
    pair's sides may be compared): for a claim graded on a band or a count of pairs, checked before its grade."""
    for a, b in pairs:
        sa, sb, r, (lo, hi) = pair_of(run, a, b, labels, metric)
        v = verdict(sa, sb, r, lo=lo, hi=hi, changes=changes)
        if not v.judged:
            return v
    return None


def judged_outcome(verdicts: tuple[Verdict, Verdict | None], ours: str, note: str = "",
                   settings: tuple = ()) -> Outcome:
    """The claim's Outcome from the judge's verdicts (:func:`feedlab.report.claims.core.status_of`); a verdict not
    judged: not tested fairly here, with the judge's words, its number measured, not judged."""
    status, why = status_of(*verdicts)
    if status == NOT_FAIR:
        return Outcome(NOT_FAIR, ours, why, settings)
    return Outcome(status, ours, "; ".join(x for x in (note, why) if x), settings)


def band_outcome(verdicts: tuple[Verdict, Verdict | None], ratio: float, upper: float, ours: str,
                 settings: tuple = ()) -> Outcome:
    """A claim reproduced within a band (``full`` ≤ ratio ≤ ``upper``; partly above its partly bound): the judge's
    verdicts at the lower bounds, and a ratio above the band reads partly (it holds the partly bound only)."""
    out = judged_outcome(verdicts, ours, settings=settings)
    if out.status == REPRODUCED and ratio > upper:
        return Outcome(PARTLY, ours, f"above the band's upper bound {upper:g}", settings)
    return out


def worst_and_median(run: Run, pairs: list[tuple[dict, dict]], ratios: list[float], full: float, part: float,
                     *, labels: tuple[str, str], metric: str = SPS, ours: str) -> Outcome:
    """A claim reproduced where the worst pair meets ``full`` and partly where the median meets ``part`` (07's fast
    collate over its grid): every pair's sides judged first; the worst pair against ``full``, the median's against
    ``part``."""
    import statistics

    worst = min(range(len(ratios)), key=lambda i: ratios[i])
    v_full, _ = grid_verdicts(run, pairs, ratios[worst], full, labels=labels, metric=metric, stand=worst)
    if not v_full.judged:
        return Outcome(NOT_FAIR, ours, str(v_full))
    if v_full.word == MET:
        return Outcome(REPRODUCED, ours)
    med = statistics.median(ratios)
    v_part, _ = grid_verdicts(run, pairs, med, part, labels=labels, metric=metric)
    if v_part.word == MET:
        return Outcome(PARTLY, ours, f"the worst point, {ratios[worst]:.2f}×, against ×{full:g}: {v_full}")
    return Outcome(NOT_REPRODUCED, ours, f"the median, {med:.2f}×, against ×{part:g}: {v_part}")


def level_unjudged(run: Run, sides: tuple[tuple[dict, str], ...], metric: str = SPS) -> str | None:
    """Why a level read at a setting (a GPU busy share) cannot be judged, or None: it stands on that setting's
    timed window, so each side goes through the one judge's window rule and fairness (busy, a rate not steady,
    one measurement with no precision) — the rule that rejects the same window in a ratio (audit 45 V1/V2). A
    level has no second side: the side is judged against itself, its invariants compared by
    construction. ``metric``: the rows' value (07's pieces: ms_per_batch)."""
    for setting, label in sides:
        side, _, _ = side_of_rows(run, setting, label, metric=metric)
        short = side.window_short()
        if short:
            return f"window: {short}"
        v = verdict(side, side, 1.0, check_sides=False)   # the side alone: its sides are one setting
        if v.word == NOT_FAIR_WORD:
            return v.why
    return None
