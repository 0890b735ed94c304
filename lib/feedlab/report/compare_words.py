"""The words of a machine comparison (:mod:`feedlab.report.compare`): a title that states what the figure
shows on each machine, computed from the medians it draws, and the baseline named as a reader
says it. A view is a :class:`feedlab.report.compare.View` (read here by its attributes only)."""

from __future__ import annotations

from feedlab.plots import axis_label, times, value_words


def baseline_words(view) -> str:
    return value_words(view.x, view.baseline_x) if view.baseline_x is not None else str(view.baseline_series or "")


def finding(view, data: dict[str, dict]) -> str:
    """What the figure shows, per machine, from the medians it draws: the largest ratio to the
    machine's own baseline (normalised views), or the largest value and where it was measured:
    "largest ratio to 1 worker: cpu-2c ×1.9 (with the model, 2 workers); h100-16c ×9.8 (...)"."""
    key = "rel" if view.normalised else "median"
    parts = []
    for machine, d in data.items():
        best = None
        for lab, s in d["series"].items():
            if view.baseline_series is not None and lab == view.baseline_series:
                continue
            for x, v in zip(s["x"], s.get(key) or []):
                if v is not None and (best is None or v > best[0]):
                    best = (v, lab, x)
        if best is None:
            continue
        v, lab, x = best
        where = ", ".join(t for t in ((lab if len(d["series"]) > 1 else ""), value_words(view.x, x)) if t)
        num = f"{v:,.0f}" if v >= 1000 else f"{v:.3g}"
        parts.append(f"{machine} {times(v)} ({where})" if view.normalised
                     else f"{machine} up to {num} {axis_label(view.metric)} ({where})")
    if not parts:
        return ""
    return (f"largest ratio to {baseline_words(view)}: " if view.normalised else "") + "; ".join(parts)


def title(view, data: dict[str, dict]) -> str:
    """The view's question, then its finding on these machines."""
    found = finding(view, data)
    return f"{view.title} — {found}" if found else f"{view.title} — {', '.join(data)}"
