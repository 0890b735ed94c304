"""Tables and the figure of notebook 04 (print overhead), from its tidy rows;
re-exported by :mod:`feedlab.experiments.print_overhead`."""

from __future__ import annotations

MODES = ("none", "print", "print_every", "logging", "tqdm")


def summary_table(df):
    """Median, IQR and the factor over the no-output loop per (where, sink, PYTHONUNBUFFERED, mode).

    ``us_per_output`` is the time a line adds to a batch in the modes that write one
    line per batch (print, logging): mode − none, in µs.
    """
    from feedlab.results import summarize

    df = df[df["metric"] == "ms_per_batch"].copy()
    df["pythonunbuffered"] = df["pythonunbuffered"].fillna("").astype(str)
    s = summarize(df, ["where", "sink", "pythonunbuffered", "variant", "print_every"])
    base = s[s["variant"] == "none"].set_index(["where", "sink", "pythonunbuffered"])["median"]
    s["factor_vs_none"] = [m / base.get((w, k, u), float("nan"))
                           for w, k, u, m in s[["where", "sink", "pythonunbuffered", "median"]].itertuples(index=False)]
    none_ms = [base.get((w, k, u), float("nan")) for w, k, u in s[["where", "sink", "pythonunbuffered"]].itertuples(index=False)]
    one_line = s["variant"].isin(["print", "logging"])
    s["us_per_output"] = ((s["median"] - none_ms) * 1e3).where(one_line)
    s["sink_label"] = [sink_label(k, u) for k, u in s[["sink", "pythonunbuffered"]].itertuples(index=False)]
    return s


def call_table(df):
    """Median and IQR of µs per single print/logging call per (where, sink, PYTHONUNBUFFERED)."""
    from feedlab.results import summarize

    df = df[df["metric"] == "us_per_call"].copy()
    df["pythonunbuffered"] = df["pythonunbuffered"].fillna("").astype(str)
    s = summarize(df, ["where", "sink", "pythonunbuffered", "variant"])
    s["sink_label"] = [sink_label(k, u) for k, u in s[["sink", "pythonunbuffered"]].itertuples(index=False)]
    return s


def sink_label(sink: str, unbuffered: str) -> str:
    names = {"jupyter": "Jupyter stream", "pty": "terminal (pty)", "pipe": "pipe", "file": "file",
             "terminal": "terminal", "devnull": "/dev/null", "other": "other"}
    label = names.get(sink, sink)
    return label + (", PYTHONUNBUFFERED=1" if str(unbuffered) == "1" else "")


def plot(summary, ax_ms, ax_factor=None):
    """Grouped bars: ms per batch per mode (IQR error bars), one colour per sink."""
    import numpy as np

    from feedlab.plots import PALETTE, legend_outside

    labels = list(dict.fromkeys(summary["sink_label"]))
    modes = [m for m in MODES if m in set(summary["variant"])]
    width = 0.8 / max(1, len(labels))
    x = np.arange(len(modes))
    for j, lab in enumerate(labels):
        part = summary[summary["sink_label"] == lab].set_index("variant").reindex(modes)
        med = part["median"].to_numpy(dtype=float)
        err = np.vstack([med - part["q25"].to_numpy(dtype=float), part["q75"].to_numpy(dtype=float) - med])
        ax_ms.bar(x + (j - (len(labels) - 1) / 2) * width, med, width, yerr=np.clip(err, 0, None),
                  capsize=2, label=lab, color=PALETTE[j % len(PALETTE)])
        if ax_factor is not None:
            ax_factor.bar(x + (j - (len(labels) - 1) / 2) * width, part["factor_vs_none"].to_numpy(dtype=float),
                          width, color=PALETTE[j % len(PALETTE)], label=lab)
    for ax in [a for a in (ax_ms, ax_factor) if a is not None]:
        ax.set_xticks(x)
        ax.set_xticklabels(modes)
    ax_ms.set_ylabel("ms per batch (median, IQR over repeats)")
    # one legend beside the right-hand panel serves both (same colours), off the bars
    legend_outside(ax_factor if ax_factor is not None else ax_ms, "right", fontsize=7.5,
                   handles=ax_ms.get_legend_handles_labels()[0], title="output goes to")
    if ax_factor is not None:
        ax_factor.axhline(1.0, color="#888888", linewidth=1, linestyle="--")
        ax_factor.set_ylabel("× the loop with no output")
