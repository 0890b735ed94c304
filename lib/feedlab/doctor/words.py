"""The doctor's small words, shared by the report (:mod:`feedlab.doctor.report`) and the answer
(:mod:`feedlab.doctor.answer`): a rate, a label cut at a word, one stage's cost in its own unit."""

from __future__ import annotations

import math


def fmt_rate(x) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return f"{x:,.0f}"


def fit(text: str, width: int) -> str:
    """``text`` in ``width`` characters, cut at a word boundary (with '…'), never mid-word."""
    text = str(text)
    if len(text) <= width:
        return text
    cut = text[:width - 1]
    if text[width - 1] != " ":          # the cut falls inside a word: back to the last whole one
        cut = cut[:cut.rfind(" ")] if " " in cut else text.split(" ", 1)[0]   # a first word too long stays whole
    return cut.rstrip(" ,;:(") + "…"


def stage_value(r: dict) -> str:
    """One stage's cost in its own unit: seconds for worker start-up, µs per sample for
    the rest, "not measured" where the stage could not be separated or timed."""
    note = r.get("note") or ""
    if not r.get("measurable") or "s_per_sample" not in r:
        return note if note.startswith("not measur") else f"not measured ({note})" if note else "not measured"
    if note.startswith("not measured"):
        return note
    if r["stage"] == "startup":
        return f"{r['s_per_sample']:.2f} s per start"
    return f"{r['s_per_sample'] * 1e6:,.1f} µs/sample"
