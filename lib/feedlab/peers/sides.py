"""The two sides of notebook 13's ratio (feedlab's best ÷ the best peer) and the verdict the record keeps.

A table row of :mod:`feedlab.peers.report` becomes a :class:`feedlab.like_for_like.Side` (:func:`side`): its
order, pixels, batch size, the workers that ran, cache, timed window, precision, windows and other load; a
committed record's two sides are read back by :func:`sides_of_record`. Each verdict is the one judge's
(:func:`feedlab.like_for_like.verdict`); :func:`verdicts` is what ``results.json`` keeps under ``verdicts``
for the generators (the README, docs/CLAIMS.md) to read instead of judging again."""

from __future__ import annotations

import math

from feedlab.like_for_like import NOT_FAIR, Side, Verdict, order_of, workers_of
from feedlab.monitor import BUSY_THRESHOLD

TARGET = 1.0   # feedlab's best ÷ the best peer (report.targets.PEER_RATIO)


def pixel_error(check: dict | None) -> float | None:
    """A contender's largest mean |diff| from the reference decode (0.0 where every pair matched the
    source's sha1); None where its pixels were not compared."""
    if not check or check.get("ok") is False:
        return None
    if "max_mean_abs_diff" in check:
        v = check["max_mean_abs_diff"]
        return None if v is None or v != v else float(v)
    return 0.0 if "sha1" in str(check.get("method", "")) else None


def side(row: dict, cache: str = "warm") -> Side:
    """A table row (feedlab's best or a peer, at one worker count) as one side of the ratio, warm or cold.
    Its timed window: the row's least ``timed_batches`` and ``window_s`` (``cold_…`` for cold), else (a run
    before they were recorded) ``epochs_per_window`` epochs of ``samples`` (one where not recorded). Where
    recorded: the rate's precision (``half_width``) and kind (``steady`` at its stated precision, else
    ``imprecise``), its windows (``repeats``), and busy where other programs used more than
    :data:`feedlab.monitor.BUSY_THRESHOLD` of the cores in a timed window (``other_load``)."""
    pipeline = str(row.get("pipeline") or "")
    tokens = pipeline.split()
    bs = row.get("batch_size")
    if not bs and any(w.startswith("b") and w[1:].isdigit() for w in tokens):
        bs = int(next(w[1:] for w in tokens if w.startswith("b") and w[1:].isdigit()))
    n, rate = row.get("samples"), row.get("samples_per_s")
    epw = row.get("epochs_per_window")
    epw = 1 if epw is None or (isinstance(epw, float) and math.isnan(epw)) else int(epw)
    timed = epw * -(-int(n) // int(bs)) if n and bs else None
    window = epw * n / rate if n and rate and rate == rate and rate > 0 else None
    pre = "cold_" if cache == "cold" else ""
    if _given(row.get(pre + "timed_batches")) or _given(row.get(pre + "window_s")):
        timed, window = _num(row.get(pre + "timed_batches")), _num(row.get(pre + "window_s"))
        timed = None if timed is None else int(timed)
    hw, windows, load = (_num(row.get(pre + k)) for k in ("half_width", "windows", "other_load"))
    kind = row.get(pre + "rate_kind")
    busy = (f"other programs used {load:.0%} of the cores in a timed window"
            if load is not None and load > BUSY_THRESHOLD else None)
    return Side(str(row.get("label") or row.get("contender")), order_of(row.get("shuffle"), tokens[-1] if tokens else None),
                row.get("pixel_error"), None if bs is None else int(bs), workers_of(pipeline, row.get("num_workers")),
                cache, timed, window, half_width=hw, busy=busy,
                rate_kind=kind if isinstance(kind, str) and kind else None,
                repeats=None if windows is None else int(windows))


def _given(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def _num(x):
    return float(x) if _given(x) else None


def sides_of_record(payload: dict, kind: str, cache: str = "warm") -> tuple[Side, Side] | None:
    """The two sides of a committed run's ratio on ``kind`` (its ``results.json``), from its table and checks;
    ``cache="cold"``: of its cold ratio."""
    r = (payload.get("ratios") or {}).get(kind) or {}
    if r.get("ratio") is None or not r.get("feedlab") or not r.get("best_peer"):
        return None
    rows = []
    for who in ("feedlab", "best_peer"):
        want = r[who]
        row = next((x for x in payload.get("table") or [] if x.get("kind") == kind
                    and x.get("contender") == want.get("contender") and x.get("num_workers") == want.get("num_workers")),
                   {})
        check = (payload.get("checks") or {}).get(f"{kind}/{want.get('contender')}")
        rows.append({"pixel_error": pixel_error(check), "samples": (payload.get("samples") or {}).get(kind),
                     "batch_size": payload.get("batch_size"), **row, **want})
    return side(rows[0], cache), side(rows[1], cache)


def words(v: Verdict) -> str:
    """A verdict as the notebook prints it: the judge's word, then why (what differs, why it was not fair,
    or the interval that holds the target)."""
    return str(v)


def as_record(v: Verdict) -> dict:
    """A verdict as ``results.json`` keeps it."""
    return {"word": v.word, "why": v.why, "ratio": v.ratio, "lo": v.lo, "hi": v.hi, "target": v.target}


def verdicts(rat: dict) -> dict[str, dict]:
    """What the record keeps of each data set's verdict, for the generators to read rather than recompute:
    ``{kind: {"word", "why", "ratio", "lo", "hi", "target", "best_peer", "cold": {...} or None,
    "missing_peers"}}`` (the judge's :class:`~feedlab.like_for_like.Verdict`; ``word`` one of
    :data:`feedlab.like_for_like.WORDS`). A data set with no ratio reads "not tested fairly" with why."""
    out = {}
    for kind, r in rat.items():
        if r.get("judged"):
            entry = dict(r["judged"])
        else:
            entry = as_record(Verdict(NOT_FAIR, f"no ratio: {r.get('why_missing', 'not measured')}", target=TARGET))
        entry["best_peer"] = (r.get("best_peer") or {}).get("label")
        entry["cold"] = r.get("cold_judged")
        entry["missing_peers"] = dict(r.get("missing_peers") or {})
        out[kind] = entry
    return out


def shared(sides: list[dict]) -> str:
    """Each side's value of every invariant, ``feedlab / peer``: what a reader checks the ratio against."""
    if not sides or len(sides) != 2:
        return ""
    a, b = sides

    def val(s, k):
        v = s.get(k)
        if v is None:
            return "?"
        if k == "window_s":
            return f"{v * 1e3:.0f} ms" if v < 1 else f"{v:.1f} s"
        if k == "half_width":
            return f"±{v:.1%}"
        return f"{v:.1f}" if k == "pixel_error" else str(v)

    always = ("order", "pixel_error", "batch_size", "workers", "cache", "timed_batches", "window_s")
    names = {"half_width": "precision", "rate_kind": "rate"}   # shown where either side recorded them
    keys = always + tuple(k for k in names if a.get(k) is not None or b.get(k) is not None)
    return "; ".join(f"{names.get(k, k.replace('_', ' '))} {val(a, k)} / {val(b, k)}" for k in keys)


__all__ = ["TARGET", "as_record", "pixel_error", "shared", "side", "sides_of_record", "verdicts", "words"]
