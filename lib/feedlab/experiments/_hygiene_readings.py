"""Notebook 11's figure, reading and recorded payload, from the summaries of its measurements
(:mod:`feedlab.experiments.worker_hygiene`, re-exported there).

Every input is a :func:`feedlab.results.summarize` table (median, q25, q75, min, max, n):
``hyg_sum`` by (scenario, metric) from ``hygiene_table``, ``errc_sum`` by (loop, metric) from
``error_cleanup_table``, ``pw_sum`` by (persistent_workers, epoch) from
``persistent_workers_table`` and ``pf_sum`` by prefetch_factor (steady samples/s, loader alone).
The payload's ``scenarios`` are read by the claims ledger (:mod:`feedlab.report.claims`); do not
rename its keys.
"""

from __future__ import annotations

import math

from feedlab.experiments._finding_titles import hygiene_title
from feedlab.plots import integer_axis, legend_outside, plot_summary, readable_log_axis

NAN = float("nan")


def scenario_table(hyg_sum):
    """Scenario -> the median of each metric (workers_started, alive_after_stop, ...), in run order."""
    return hyg_sum.pivot_table(index="scenario", columns="metric", values="median", sort=False)


def error_table(errc_sum):
    """Loop -> the median of each metric (cleanup_s, terminated, leftover), in run order."""
    return errc_sum.pivot_table(index="loop", columns="metric", values="median", sort=False)


def first_batches(pw_sum):
    """(epoch 0, later epochs): seconds to the first batch per persistent_workers (False, True);
    for later epochs the median over epochs of the per-epoch medians."""
    first = pw_sum[pw_sum.epoch == 0].set_index("persistent_workers")["median"]
    later = pw_sum[pw_sum.epoch > 0].groupby("persistent_workers")["median"].median()
    return first, later


def prefetch_rates(pf_sum):
    """prefetch_factor -> median steady samples/s."""
    return pf_sum.set_index("prefetch_factor")["median"]


def _ratio(a, b) -> float:
    a, b = float(a), float(b)
    return a / b if b and not (math.isnan(a) or math.isnan(b)) else NAN


def readings(hyg_sum, errc_sum, pw_sum, pf_sum) -> list[str]:
    """The lines of the notebook's reading: per way of stopping, the workers started, alive, left and
    terminated and the cleanup time; per loop after a worker error, how long until the workers were
    gone (IQR) and how many were terminated; the held traceback's warning when workers outlived
    ``del`` there; the first batch with and without persistent workers; prefetch_factor best/worst."""
    lines = []
    piv = scenario_table(hyg_sum)
    for sc, row in piv.iterrows():
        lines.append(f"{sc}: {row['workers_started']:.0f} workers started, {row['alive_after_stop']:.0f} alive when "
                     f"the loop stopped, {row['alive_after_del']:.0f} after del + gc, {row['leftover']:.0f} left after "
                     f"the bounded wait, {row['terminated']:.0f} terminated after a 5 s join timeout (counted at "
                     f"Process.terminate(); their exit code is 0 either way: torch's SIGTERM handler in the worker "
                     f"exits cleanly); cleanup took {row['cleanup_s']:.2f} s (median).")
    ec = error_table(errc_sum)
    eq = errc_sum.set_index(["loop", "metric"])
    for loop, row in ec.iterrows():
        q = eq.loc[(loop, "cleanup_s")]
        lines.append(f"worker error, {loop} loop: workers gone {row['cleanup_s']:.2f} s (IQR {q['q25']:.2f}–"
                     f"{q['q75']:.2f}) after the exception reached the caller; {row['terminated']:.0f} terminated "
                     f"after a join timeout.")
    if "held_traceback" in piv.index and piv.loc["held_traceback", "alive_after_del"] > 0:
        lines.append("A held traceback keeps the iterator and its workers alive after `del`: in a notebook, an "
                     "interrupted cell keeps its workers until the next error replaces sys.last_traceback or the "
                     "kernel restarts.")
    first, later = first_batches(pw_sum)
    lines.append(f"First batch of epoch 0: {first.get(False, NAN):.3f} s vs {first.get(True, NAN):.3f} s; "
                 f"of later epochs: {later.get(False, NAN):.3f} s without persistent workers, "
                 f"{later.get(True, NAN):.3f} s with them "
                 f"({_ratio(later.get(False, NAN), later.get(True, NAN)):.1f}×).")
    s = prefetch_rates(pf_sum)
    if len(s):
        lines.append(f"prefetch_factor: best {s.max():.0f} samples/s at {int(s.idxmax())}, worst {s.min():.0f} at "
                     f"{int(s.idxmin())} ({_ratio(s.max(), s.min()):.2f}×).")
    else:
        lines.append("prefetch_factor: nothing measured.")
    return lines


def title(pw_sum, pf_sum, repeats: int) -> str:
    """The figure's title: what the medians show (:func:`~feedlab.experiments._finding_titles.hygiene_title`)
    and over how many repeats."""
    return hygiene_title(pw_sum, pf_sum) + f" (median, bars = IQR over {repeats} repeats)"


def plot_persistent_and_prefetch(axes, pw_sum, pf_sum, *, num_workers: int, batch_size: int,
                                 prefetch_factors) -> None:
    """Left: seconds from ``iter()`` to the first batch per epoch, with and without persistent workers
    (log scale). Right: steady samples/s against prefetch_factor (log2 axis, loader alone)."""
    ax1, ax2 = axes
    plot_summary(ax1, pw_sum.assign(v=pw_sum.persistent_workers.map({True: "persistent\nworkers",
                                                                     False: "workers started\nevery epoch"})),
                 x="epoch", group="v")
    ax1.set_xlabel("epoch")
    integer_axis(ax1, "x")
    ax1.set_ylabel("iter() → first batch (s)")
    ax1.set_yscale("log")
    readable_log_axis(ax1, "y")
    legend_outside(ax1, "right")
    ax1.set_title(f"PNG pairs, {num_workers} workers, batch {batch_size}", loc="left")
    plot_summary(ax2, pf_sum, x="prefetch_factor")
    ax2.set_xscale("log", base=2)
    ax2.set_xticks(list(prefetch_factors), [str(p) for p in prefetch_factors])
    ax2.set_xlabel("prefetch_factor")
    ax2.set_ylabel("samples/s after the first batch")
    ax2.set_ylim(bottom=0)
    ax2.set_title("loader alone", loc="left")


def payload(P, hyg_sum, errc_sum, pw_sum, pf_sum) -> dict:
    """What notebook 11 records and the claims ledger judges (plain floats; the later epochs' first
    batch keyed "True"/"False", the prefetch rates by int factor)."""
    _, later = first_batches(pw_sum)
    return {
        "notebook": "11_worker_hygiene", "profile": P.profile, "num_workers": int(P.num_workers),
        "scenarios": {str(sc): {str(k): float(v) for k, v in row.items()}
                      for sc, row in scenario_table(hyg_sum).iterrows()},
        "error_cleanup": {str(lp): {str(k): float(v) for k, v in row.items()}
                          for lp, row in error_table(errc_sum).iterrows()},
        "first_batch_s_later_epochs": {str(bool(k)): float(v) for k, v in later.items()},
        "prefetch_samples_per_s": {int(k): float(v) for k, v in prefetch_rates(pf_sum).items()},
    }


__all__ = ["scenario_table", "error_table", "first_batches", "prefetch_rates", "readings", "title",
           "plot_persistent_and_prefetch", "payload"]
