"""Checks a figure must pass before it is saved (``feedlab.plots.save_figure`` runs them).

- several labelled series (or bars in several colours) on an axes need a legend (or, for
  colours, a title that says what they mean: "coloured by batch");
- a legend must not cover data (lines, markers, error bars, bars) of its axes;
- a text placed on an axes (a label on a reference line, say) must not be crossed by a line;
- no text, legend or axes may lie outside the canvas;
- titles (the figure's, each axes') and legends must not overlap one another.

:func:`check_figure` returns the problems as one line each (empty: the figure passes).
``save_figure`` prints them, and raises :class:`FigureCheckError` when
``FEEDLAB_STRICT_FIGURES=1`` (the tests set it), so a figure defect fails a test.
"""

from __future__ import annotations

import os

import numpy as np

TOLERANCE_PX = 2.0


class FigureCheckError(AssertionError):
    """A figure failed :func:`check_figure`."""


def strict() -> bool:
    return os.environ.get("FEEDLAB_STRICT_FIGURES", "").strip().lower() in ("1", "true", "yes")


def _name(ax) -> str:
    title = ax.get_title() or ax.get_title(loc="left") or ax.get_ylabel() or "an axes"
    return repr(title.splitlines()[0][:50])


def _shrunk(bbox, px: float = TOLERANCE_PX):
    from matplotlib.transforms import Bbox

    return Bbox.from_extents(bbox.x0 + px, bbox.y0 + px, bbox.x1 - px, bbox.y1 - px)


def _points_in(bbox, xy: np.ndarray) -> bool:
    xy = xy[np.isfinite(xy).all(axis=1)] if len(xy) else xy
    if not len(xy):
        return False
    inside = (xy[:, 0] > bbox.x0) & (xy[:, 0] < bbox.x1) & (xy[:, 1] > bbox.y0) & (xy[:, 1] < bbox.y1)
    return bool(inside.any())


def _densify(xy: np.ndarray, step_px: float = 2.0) -> np.ndarray:
    """Points every ``step_px`` along a polyline in display coordinates."""
    if len(xy) < 2:
        return xy
    out = [xy[:1]]
    for a, b in zip(xy[:-1], xy[1:]):
        if not (np.isfinite(a).all() and np.isfinite(b).all()):
            continue
        n = int(min(2000, max(1, np.hypot(*(b - a)) / step_px)))
        t = np.linspace(0, 1, n + 1)[1:, None]
        out.append(a + (b - a) * t)
    return np.concatenate(out)


def _line_points(line) -> np.ndarray:
    path = line.get_transform().transform_path(line.get_path())
    return _densify(np.asarray(path.vertices, dtype=float))


def _data_hits(ax, box, renderer, data_only: bool = True) -> list[str]:
    """Names of data artists of ``ax`` that enter ``box`` (display coordinates)."""
    from matplotlib.collections import LineCollection, PathCollection
    from matplotlib.patches import Rectangle

    hits = []
    for line in ax.lines:
        if not line.get_visible() or (data_only and line.get_transform() != ax.transData
                                      and not line.get_transform().contains_branch(ax.transData)):
            continue
        if line.get_linestyle() in ("None", "none", "", " ") and line.get_marker() in (None, "None", "none", ""):
            continue
        if _points_in(box, _line_points(line)):
            hits.append(f"line {line.get_label()!r}")
    for patch in ax.patches:
        if isinstance(patch, Rectangle) and patch.get_visible() and patch.get_height() and patch.get_width():
            ext = patch.get_window_extent(renderer)
            ox = min(ext.x1, box.x1) - max(ext.x0, box.x0)
            oy = min(ext.y1, box.y1) - max(ext.y0, box.y0)
            if ox > 0 and oy > 0:
                hits.append(f"bar {patch.get_label()!r}")
    for coll in ax.collections:
        if not coll.get_visible():
            continue
        if isinstance(coll, LineCollection):
            tr = coll.get_transform()
            if any(_points_in(box, _densify(tr.transform(np.asarray(seg, float))))
                   for seg in coll.get_segments() if len(seg)):
                hits.append("error bars")
        elif isinstance(coll, PathCollection):
            offsets = np.asarray(coll.get_offsets(), float)
            if len(offsets) and _points_in(box, coll.get_offset_transform().transform(offsets)):
                hits.append("markers")
    return hits


def _bar_colours(ax) -> int:
    from matplotlib.patches import Rectangle

    colours = set()
    for container in ax.containers:
        for patch in getattr(container, "patches", []) or []:
            if isinstance(patch, Rectangle) and patch.get_height():
                colours.add(tuple(np.round(patch.get_facecolor(), 3)))
    return len(colours)


def _all_texts(fig) -> list[str]:
    texts = [t.get_text() for t in fig.texts]
    if getattr(fig, "_suptitle", None) is not None:
        texts.append(fig._suptitle.get_text())
    for ax in fig.axes:
        texts += [ax.get_title(loc=loc) for loc in ("left", "center", "right")]
        texts += [ax.get_xlabel(), ax.get_ylabel()]
    return texts


def _y_labels(ax) -> int:
    """Labelled y ticks inside the view (a shared axis may show them on a sibling only)."""
    if not ax.yaxis.get_visible():
        return 0
    lo, hi = sorted(ax.get_ylim())
    shown = [t.get_text().strip() for t in ax.yaxis.get_ticklabels(which="both")
             if t.get_visible() and t.get_text().strip() and lo <= t.get_position()[1] <= hi]
    if any(not _numeric(t) for t in shown):
        return 2  # named categories (horizontal bars, timeline lanes), not a value scale
    return len(shown)


def _numeric(label: str) -> bool:
    """A value tick label: ``0.05``, ``1,000``, ``−2``, or mathtext ``$\\mathdefault{10^{-1}}$``."""
    import re

    text = label.replace("\u2212", "-").replace(",", "")
    if re.fullmatch(r"\$?(\\mathdefault\{)?-?\d+(\^\{-?\d+\})?\}?\$?", text):
        return True
    try:
        float(text)
        return True
    except ValueError:
        return False


def headline_boxes(fig, renderer, fig_legends=None) -> list[tuple[str, object]]:
    """``(what, window extent)`` of the figure's title, every axes title and every legend."""
    out = []
    st = getattr(fig, "_suptitle", None)
    if st is not None and st.get_visible() and st.get_text().strip():
        out.append((f"the figure title {st.get_text()[:30]!r}", st.get_window_extent(renderer)))
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for t in (ax.title, ax._left_title, ax._right_title):
            if t.get_visible() and t.get_text().strip():
                out.append((f"the title {t.get_text()[:30]!r}", t.get_window_extent(renderer)))
        leg = ax.get_legend()
        if leg is not None and leg.get_visible() and leg.get_texts():
            out.append((f"the legend of {_name(ax)}", leg.get_window_extent(renderer)))
    for leg in fig.legends if fig_legends is None else fig_legends:
        out.append(("the figure legend", leg.get_window_extent(renderer)))
    return out


def _headline_overlaps(fig, renderer, fig_legends) -> list[str]:
    """A title drawn over another title or a legend (a legend above the axes, on its title)."""
    boxes = [(w, _shrunk(b)) for w, b in headline_boxes(fig, renderer, fig_legends)]
    out = []
    for i, (wa, a) in enumerate(boxes):
        for wb, b in boxes[i + 1:]:
            if a.overlaps(b):
                out.append(f"{wa} overlaps {wb}")
    return out


def check_figure(fig) -> list[str]:
    """Problems of ``fig`` as one line each; an empty list when it reads at a glance."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems: list[str] = []
    canvas = fig.bbox.expanded(1.0, 1.0).padded(TOLERANCE_PX)
    fig_legends = [leg for leg in fig.legends if leg.get_visible()]
    # a legend on one panel may serve its neighbours when they draw the same series
    # a figure may state its colour key in words instead ("coloured by batch")
    says_colours = any(w in t.lower() for t in _all_texts(fig) for w in ("colour", "color"))
    legend_labels = {t.get_text() for a in fig.axes if a.get_legend() is not None
                     for t in a.get_legend().get_texts()}
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison and not ax.lines and not ax.patches:
            continue
        name = _name(ax)
        _h, labels = ax.get_legend_handles_labels()
        legend = ax.get_legend()
        if legend is not None and not legend.get_texts():
            legend = None  # ax.legend() with no labelled artist (a label starting with "_")
        n_series = len(set(labels))
        if legend is None and not fig_legends and not (labels and set(labels) <= legend_labels):
            if n_series >= 2:
                problems.append(f"{name}: {n_series} labelled series but no legend")
            elif _bar_colours(ax) >= 2 and n_series == 0 and not says_colours:
                problems.append(f"{name}: bars in {_bar_colours(ax)} colours but no legend says what they mean")
        if legend is not None and legend.get_visible():
            box = _shrunk(legend.get_window_extent(renderer))
            hits = _data_hits(ax, box, renderer)
            if hits:
                problems.append(f"{name}: the legend covers data ({', '.join(sorted(set(hits))[:3])}); "
                                f"place it outside the axes")
        if (ax.lines or ax.patches or ax.collections) and ax.axison and _y_labels(ax) < 2 and \
                not any(_y_labels(sib) >= 2 for sib in ax.get_shared_y_axes().get_siblings(ax) if sib is not ax):
            problems.append(f"{name}: {_y_labels(ax)} labelled tick(s) on the y axis; a reader needs two "
                            f"to read a value")
        for text in ax.texts:
            if not text.get_visible() or not text.get_text().strip():
                continue
            box = _shrunk(text.get_window_extent(renderer))
            for line in ax.lines:
                if line.get_visible() and _points_in(box, _line_points(line)):
                    problems.append(f"{name}: the text {text.get_text()[:30]!r} is crossed by a line")
                    break
    problems += _headline_overlaps(fig, renderer, fig_legends)
    artists = [*fig.texts, *fig_legends]
    for ax in fig.axes:
        if ax.get_visible():
            artists += [ax, ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
            if ax.get_legend() is not None:
                artists.append(ax.get_legend())
    for art in artists:
        if not art.get_visible() or (hasattr(art, "get_text") and not art.get_text().strip()):
            continue
        ext = art.get_window_extent(renderer)
        if ext.width <= 0 and ext.height <= 0:
            continue
        if ext.x0 < canvas.x0 or ext.y0 < canvas.y0 or ext.x1 > canvas.x1 or ext.y1 > canvas.y1:
            what = getattr(art, "get_text", lambda: type(art).__name__)() or type(art).__name__
            problems.append(f"{what[:40]!r} lies outside the canvas")
    return list(dict.fromkeys(problems))


_SAID: set[str] = set()  # figures whose defects were already reported in this process


def enforce(fig, name: str, log=print) -> list[str]:
    """Run :func:`check_figure`; raise in strict mode, otherwise say once per figure, in one
    plain sentence, what is wrong with it."""
    problems = check_figure(fig)
    if problems:
        msg = f"figure {name}: " + "; ".join(problems)
        if strict():
            raise FigureCheckError(msg)
        if name not in _SAID:
            _SAID.add(name)
            log(f"The figure {name} was saved with a defect a reader may trip over: {'; '.join(problems)}.")
    return problems
