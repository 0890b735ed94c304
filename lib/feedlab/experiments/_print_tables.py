"""Tables and the figure of notebook 04 (print overhead), from its tidy rows;
re-exported by :mod:`feedlab.experiments.print_overhead`."""

from __future__ import annotations

from feedlab.plots import PALETTE, finding_title, legend_outside
from feedlab.results import summarize

MODES = ("none", "print", "print_every", "logging", "tqdm")


def summary_table(df):
    """Median, IQR and the factor over the no-output loop per (where, sink, PYTHONUNBUFFERED, mode).

    ``us_per_output`` is the time a line adds to a batch in the modes that write one
    line per batch (print, logging): mode − none, in µs.
    """
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


# ------------------------------------------------------------ reading, title, payload (notebook 04)

CLAIM_FACTOR = 76 / 1.02  # write-up 004: 76 ms per batch with the print, 1.02 ms without


def factors(summary) -> dict[str, dict]:
    """Per sink (in the table's order): the no-output step, the costliest mode and its factor, and the
    factor of a print every batch (None where that mode did not run)."""
    out = {}
    for lab, part in summary.groupby("sink_label", sort=False):
        none = part[part.variant == "none"].iloc[0]
        worst = part[part.variant != "none"].sort_values("median").iloc[-1]
        pr = part[part.variant == "print"]
        out[lab] = {"none_ms": float(none["median"]), "worst_mode": worst.variant,
                    "worst_factor": float(worst.factor_vs_none),
                    "print_factor": float(pr.factor_vs_none.iloc[0]) if len(pr) else None}
    return out


def calls_us(calls) -> dict[str, float]:
    """µs per single ``print()`` per sink label."""
    return {r.sink_label: float(r.median) for r in calls[calls.variant == "print"].itertuples()}


def _ms(summary, label: str, mode: str) -> float:
    return float(summary[(summary.sink_label == label) & (summary.variant == mode)]["median"].iloc[0])


def readings(summary, calls) -> list[str]:
    """Notebook 04's reading: per sink the no-output step and the costliest mode; one print()'s cost per
    sink; then the largest factor a print per batch caused."""
    lines = []
    f = factors(summary)
    for lab, x in f.items():
        lines.append(f"{lab:38s} no output {x['none_ms']:.3f} ms/batch; costliest: {x['worst_mode']} "
                     f"{_ms(summary, lab, x['worst_mode']):.3f} ms ({x['worst_factor']:.2f}×)"
                     + (f"; print every batch {x['print_factor']:.2f}×" if x["print_factor"] is not None else ""))
    for r in calls[calls.variant == "print"].itertuples():
        lines.append(f"one print() into {r.sink_label:38s}: {r.median:.2f} µs (IQR {r.q25:.2f}–{r.q75:.2f})")
    pf = [x["print_factor"] for x in f.values() if x["print_factor"]]
    us = calls_us(calls)
    if pf:
        lines.append(f"A print per batch made a batch at most {max(pf):.2f}× slower in any sink measured"
                     + (f"; one short print() costs {min(us.values()):.1f}–{max(us.values()):.1f} µs." if us else "."))
    return lines


def title(summary, batch_size: int) -> str:
    """The costliest print per batch over the no-output loop: ``print every batch into pipe: ×1.3 the no-output
    loop (step 1.1 ms, batch 64)``; without the print mode, the costliest mode of any sink."""
    s = summary[summary.variant == "print"]
    s = s if len(s) else summary[summary.variant != "none"]
    if s.empty:
        return f"ms per batch, batch {batch_size}"
    r = s.sort_values("factor_vs_none").iloc[-1]
    step = summary[summary.variant == "none"]["median"].median()
    name = "print every batch" if r.variant == "print" else str(r.variant)
    return (finding_title(f"{name} into {r.sink_label}", r.factor_vs_none, "no-output loop")
            + f" (step ≈ {step:.2f} ms, batch {batch_size})")


def payload(*, profile: str, modes, child_sinks, unbuffered, pythonunbuffered_here: str, sink_here: str,
            batch_size: int, batches: int, repeats: int, summary, calls) -> dict:
    """Notebook 04's recorded results (the keys tests/notebooks and feedlab.report.claims read)."""
    return {"notebook": "04_print_overhead", "profile": profile, "modes": list(modes),
            "child_sinks": list(child_sinks), "unbuffered": [int(u) for u in unbuffered],
            "pythonunbuffered_here": pythonunbuffered_here, "sink_here": sink_here,
            "batch_size": batch_size, "batches": batches, "repeats": repeats,
            "per_sink": factors(summary), "print_us_per_call": calls_us(calls), "claim_factor": CLAIM_FACTOR}
