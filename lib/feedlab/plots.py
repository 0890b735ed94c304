"""One figure style for the whole workbook, and the one way figures are saved.

:func:`save_figure` writes PNG and SVG into a notebook's figure directory with a
fingerprint footer and fixed metadata, so re-saving the same figure gives the
same bytes, after :mod:`feedlab.figcheck` has checked it (a legend where several
series are drawn and off the data, nothing outside the canvas).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import matplotlib

if os.environ.get("MPLBACKEND") is None and not os.environ.get("JPY_PARENT_PID"):
    matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from feedlab.fingerprint import fingerprint_line, machine_fingerprint  # noqa: E402

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
            from feedlab.monitor import check_busy

            check_busy(f"the measurement drawn in {name}")  # warns in one line on a loaded machine
        lines = [fingerprint_line(fingerprint or machine_fingerprint())]
    fig.text(0.005, 0.002, "\n".join(lines), fontsize=6.5, color="#666666",
             ha="left", va="bottom", wrap=True)  # a narrow figure wraps it instead of cutting it
    if getattr(fig, "_suptitle", None) is not None:
        fig._suptitle.set_wrap(True)  # a long title on a narrow figure wraps instead of leaving it
    bottom = 0.03 * len(lines)  # room for every footer line (one line: as always)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    from feedlab.figcheck import enforce

    enforce(fig, name)  # legend where needed and off the data, nothing outside the canvas
    paths = []
    for ext in formats:
        path = out / f"{name}.{ext}"
        # unique per process and call: concurrent saves into one folder never share a temp file
        tmp = out / f".{name}.tmp-{os.getpid()}-{os.urandom(3).hex()}.{ext}"
        meta = {"Software": "feedlab"} if ext == "png" else {"Date": None, "Creator": "feedlab"}
        try:
            fig.savefig(tmp, bbox_inches="tight", metadata=meta, format=ext)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        paths.append(path)
    return paths


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


def legend_outside(ax, where: str = "right", **kw):
    """A legend beside the axes (``right``) or above it (``top``), never over the data."""
    if where == "top":
        handles, _labels = ax.get_legend_handles_labels()
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
