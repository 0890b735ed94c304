"""One figure style for the whole workbook, and the one way figures are saved.

:func:`save_figure` writes PNG and SVG into a notebook's figure directory with a
fingerprint footer and fixed metadata, so re-saving the same figure gives the
same bytes, after :mod:`feedlab.figcheck` has checked it (a legend where several
series are drawn and off the data, nothing outside the canvas).
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Sequence

import matplotlib

from feedlab.figcheck import enforce
from feedlab.monitor import check_busy

if os.environ.get("MPLBACKEND") is None and not os.environ.get("JPY_PARENT_PID"):
    matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from feedlab.fingerprint import fingerprint_line, machine_fingerprint  # noqa: E402
from feedlab.results import atomic_write  # noqa: E402

PALETTE = ["#1b6ca8", "#e07a1f", "#3a9e4f", "#c03a3a", "#7b5ea7", "#8c6d46", "#d16fb0",
           "#6b6b6b", "#b5b82f", "#2cb5c4"]
# phases in a fixed colour everywhere
PHASE_COLORS = {"data_wait": "#c03a3a", "h2d": "#e07a1f", "forward": "#1b6ca8",
                "backward": "#3a9e4f", "collate": "#7b5ea7", "decode": "#8c6d46"}

STYLE = {
    "figure.figsize": (7.5, 4.2),
    "figure.dpi": 100,
    "savefig.dpi": 130,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.labelsize": 10,
    "legend.fontsize": 8.5,
    "legend.frameon": False,
    "font.size": 9.5,
    "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
    "svg.hashsalt": "feedlab",
    "svg.fonttype": "none",
}


def use_style() -> None:
    """Apply the workbook's style (idempotent)."""
    plt.rcParams.update(STYLE)


use_style()


def save_figure(fig, out_dir: str | os.PathLike, name: str, fingerprint: dict | None = None,
                formats: Sequence[str] = ("png", "svg"), footer: Sequence[str] | None = None) -> list[Path]:
    """Save ``fig`` as ``<out_dir>/<name>.png`` and ``.svg`` with a one-line
    machine fingerprint footer (``footer``: one line per machine instead, for a
    figure that draws several). Returns the written paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if footer:
        lines = list(footer)
    else:
        if fingerprint is None:
            check_busy(f"the measurement drawn in {name}")  # warns in one line on a loaded machine
        lines = [fingerprint_line(fingerprint or machine_fingerprint())]
    fig.text(0.005, 0.002, "\n".join(lines), fontsize=6.5, color="#666666",
             ha="left", va="bottom", wrap=True)  # a narrow figure wraps it instead of cutting it
    if getattr(fig, "_suptitle", None) is not None:
        fig._suptitle.set_wrap(True)  # a long title on a narrow figure wraps instead of leaving it
    for ax in fig.axes:  # so does a title that states a finding, on its panel
        for t in (ax.title, ax._left_title, ax._right_title):
            t.set_wrap(True)
    bottom = 0.03 * len(lines)  # room for every footer line (one line: as always)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    if untangle_titles(fig):  # titles moved above the legends over them: lay out again
        fig.tight_layout(rect=(0, bottom, 1, 1))
    clear_suptitle(fig)

    enforce(fig, name)  # legend where needed and off the data, nothing outside the canvas
    paths = []
    for ext in formats:
        path = out / f"{name}.{ext}"
        meta = {"Software": "feedlab"} if ext == "png" else {"Date": None, "Creator": "feedlab"}
        buf = io.BytesIO()
        fig.savefig(buf, bbox_inches="tight", metadata=meta, format=ext)
        atomic_write(path, buf.getvalue())
        paths.append(path)
    return paths


def untangle_titles(fig) -> bool:
    """Raise each axes title that a legend placed above the axes (``legend_outside(ax, "top")``)
    would cover to just above that legend. True when a title moved."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    moved = False
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is None or not leg.get_visible():
            continue
        lb = leg.get_window_extent(r)
        for t in (ax.title, ax._left_title, ax._right_title):
            if not t.get_text().strip():
                continue
            tb = t.get_window_extent(r)
            if tb.overlaps(lb):
                lift_pt = (lb.y1 - tb.y0 + 3) * 72.0 / fig.dpi
                x, y = t.get_position()
                t.set_y(y)  # keep the axes-fraction position; move by the offset below
                from matplotlib.transforms import ScaledTranslation

                t.set_transform(t.get_transform() + ScaledTranslation(0, lift_pt / 72.0, fig.dpi_scale_trans))
                moved = True
    return moved


def clear_suptitle(fig) -> bool:
    """Lower the axes (``subplots_adjust(top=...)``) until the figure title clears every axes
    title and legend under it. True when it had to."""
    st = getattr(fig, "_suptitle", None)
    if st is None or not st.get_text().strip():
        return False
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    sb = st.get_window_extent(r)
    below = []
    for ax in fig.axes:
        items = [ax.title, ax._left_title, ax._right_title, ax.get_legend()]
        for it in items:
            if it is None or not it.get_visible() or (hasattr(it, "get_text") and not it.get_text().strip()):
                continue
            b = it.get_window_extent(r)
            if b.x1 > sb.x0 and b.x0 < sb.x1:  # under the title's span
                below.append(b.y1)
    overlap = (max(below) + 4 - sb.y0) if below else 0.0
    if overlap <= 0:
        return False
    top = fig.subplotpars.top - overlap / fig.bbox.height
    fig.subplots_adjust(top=max(top, fig.subplotpars.bottom + 0.1))
    return True


def errorbar_series(ax, x, median, lo, hi, label: str | None = None, marker: str = "o", **kw):
    """A line with median markers and an interquartile (or min–max) error bar."""
    median = np.asarray(median, dtype=float)
    yerr = np.vstack([median - np.asarray(lo, dtype=float), np.asarray(hi, dtype=float) - median])
    yerr = np.clip(yerr, 0, None)
    return ax.errorbar(x, median, yerr=yerr, label=label, marker=marker, capsize=3,
                       linewidth=1.5, markersize=4.5, **kw)


def plot_summary(ax, summary, x: str, group: str | None = None, label_fmt: str = "{}", **kw):
    """Plot a :func:`feedlab.results.summarize` table: one errorbar line per ``group``."""
    groups = [(None, summary)] if group is None else list(summary.groupby(group, sort=False))
    for key, part in groups:
        part = part.sort_values(x)
        errorbar_series(ax, part[x].to_numpy(), part["median"], part["q25"], part["q75"],
                        label=None if key is None else label_fmt.format(key), **kw)
    return ax


def stacked_bars(ax, labels: Sequence[str], components: dict[str, Sequence[float]],
                 errors: Sequence[float] | None = None, colors: dict | None = None,
                 width: float = 0.75, offset: float = 0.0, hatch: str | None = None,
                 legend: bool = True):
    """Stacked bars: one bar per label, one stacked segment per component (e.g. phases).
    ``errors``: spread of the bar total (drawn at its top)."""
    colors = colors or PHASE_COLORS
    x = np.arange(len(labels)) + offset
    bottom = np.zeros(len(labels))
    for i, (name, values) in enumerate(components.items()):
        values = np.asarray(values, dtype=float)
        ax.bar(x, values, width, bottom=bottom, label=name if legend else None,
               color=colors.get(name, PALETTE[i % len(PALETTE)]), hatch=hatch,
               edgecolor="white", linewidth=0.5)
        bottom += values
    if errors is not None:
        ax.errorbar(x, bottom, yerr=np.asarray(errors, dtype=float), fmt="none",
                    ecolor="#333333", capsize=2, linewidth=1)
    ax.set_xticks(np.arange(len(labels)))
    ax.set_xticklabels(labels)
    return x


def mark_cores(ax, cores: int | None = None, axis: str = "x") -> None:
    """A dashed line at this machine's usable core count."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    line = ax.axvline if axis == "x" else ax.axhline
    line(cores, color="#888888", linestyle="--", linewidth=1)
    ax.annotate(f"{cores} cores", xy=(cores, 1), xycoords=("data", "axes fraction"),
                xytext=(3, -12), textcoords="offset points", fontsize=8, color="#555555")


def legend(ax, **kw):
    """``ax.legend(**kw)`` where the axes has a labelled artist; none where it has nothing to name (a grid
    whose every setting was left out), instead of matplotlib's warning in the reader's notebook."""
    if not kw.get("handles") and not ax.get_legend_handles_labels()[0]:
        return None
    return ax.legend(**kw)


def legend_outside(ax, where: str = "right", **kw):
    """A legend beside the axes (``right``) or above it (``top``), never over the data."""
    if where == "top":
        handles = kw.get("handles") or ax.get_legend_handles_labels()[0]
        opts = dict(loc="lower left", bbox_to_anchor=(0, 1.02, 1, 0.2), mode="expand",
                    ncols=min(len(handles), kw.pop("ncols", 4)), borderaxespad=0)
    else:
        opts = dict(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    opts.update(kw)
    return ax.legend(**opts)


def readable_log_axis(ax, axis: str = "y") -> None:
    """A log axis labelled in plain numbers (0.06, not 6×10⁻²) with several labelled
    ticks even over a narrow range: 1-2-5 steps over a decade or more, every integer
    multiple below that, evenly spaced ticks below 3×. Call it after plotting."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    target = ax.yaxis if axis == "y" else ax.xaxis
    lo, hi = sorted(ax.get_ylim() if axis == "y" else ax.get_xlim())
    ratio = hi / lo if lo > 0 else float("inf")
    if ratio >= 10:
        locator = LogLocator(base=10, subs=(1.0, 2.0, 5.0))
    elif ratio >= 3:
        locator = LogLocator(base=10, subs=tuple(float(k) for k in range(1, 10)))
    else:
        locator = MaxNLocator(nbins=4)
    target.set_major_locator(locator)
    target.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    target.set_minor_formatter(NullFormatter())


def integer_axis(ax, axis: str = "x") -> None:
    """Ticks at whole numbers only (epochs, batches, workers)."""
    from matplotlib.ticker import MaxNLocator

    (ax.xaxis if axis == "x" else ax.yaxis).set_major_locator(MaxNLocator(integer=True))


# ---------------------------------------------------------------- words a person reads
# column names as a reader says them (an axis label is never a column name)
WORDS = {
    "samples_per_s": "samples/s", "aggregate_samples_per_s": "samples/s, all ranks together",
    "predicted_samples_per_s": "predicted samples/s", "gb_per_s": "GB/s", "ms_per_batch": "ms per batch",
    "ms_per_sample": "ms per sample", "img_per_s": "images/s", "us_per_call": "µs per call",
    "batch_load_ms": "ms per batch", "wrong": "wrong samples", "leftover": "workers left running",
    "num_workers": "DataLoader workers", "batch_size": "batch size", "image_set": "image set",
    "image_size": "image size (px)", "input_size": "input size (px)", "bytes": "bytes per copy",
    "format": "storage format", "sink": "where the output goes", "step": "step",
    "variant": "setting", "epoch_s": "s per epoch",
}


def axis_label(column: str, note: str = "") -> str:
    """``samples_per_s`` → ``samples/s``; an unknown column with its underscores as spaces.
    ``note`` is added in brackets (``"median, IQR"``)."""
    words = WORDS.get(column, column.replace("_", " "))
    return f"{words} ({note})" if note else words


def workers_label(n) -> str:
    """``2.0`` → ``2 workers``, ``1`` → ``1 worker`` (a count read back from a CSV is a float)."""
    try:
        k = int(round(float(n)))
    except (TypeError, ValueError):
        return f"{n} workers"
    return f"{k} worker" if k == 1 else f"{k} workers"


def value_words(column: str, x) -> str:
    """One value of ``column`` as a reader says it: ``2 workers``, ``batch 8``, ``4 MB``, ``png``."""
    if column == "num_workers":
        return workers_label(x)
    if column == "batch_size":
        return f"batch {x}"
    if column == "bytes" and isinstance(x, (int, float)):
        for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
            if x >= scale:
                return f"{x / scale:g} {unit}"
        return f"{x:g} B"
    return str(x)


def times(ratio: float) -> str:
    """A ratio as a reader says it: ``×5.3``, ``×12``, ``×250``, ``×0.62``."""
    r = float(ratio)
    return f"×{r:.0f}" if r >= 9.95 else f"×{r:.2g}"


def finding_title(subject: str, ratio: float, baseline: str, at: str = "") -> str:
    """A title that states the finding: ``finding_title("LMDB + fast collate", 5.3, "PNG baseline",
    "batch 128")`` → ``LMDB + fast collate: ×5.3 the PNG baseline at batch 128``."""
    return f"{subject}: {times(ratio)} the {baseline}{' at ' + at if at else ''}"


_MODEL_WORDS = {"srcnn": "an SRCNN", "srcnn_small": "a small SRCNN", "resnet": "a small ResNet"}


def training_step(model: str, device: str = "") -> str:
    """``"auto"`` and ``"cpu"`` → ``"a light SRCNN training step (cpu)"``: the model the notebooks'
    ``model: auto`` means on that device, with the right article; ``"none"`` → ``"no training step"``."""
    m = str(model or "none").lower()
    dev = str(device)
    if m == "none":
        return "no training step"
    if m == "auto":
        phrase = "an SRCNN" if dev.startswith("cuda") else "a light SRCNN"
    else:
        phrase = _MODEL_WORDS.get(m, f"a {model}")
    return f"{phrase} training step" + (f" ({dev})" if dev else "")
