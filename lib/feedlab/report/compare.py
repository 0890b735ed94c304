"""One figure per notebook question with every committed machine in it.

    python -m feedlab.report.compare          (``python -m feedlab.report.readme`` runs it too)

Each notebook registers its comparison view(s) once, in :data:`VIEWS`: which rows of
its tidy ``results.csv`` (experiment, metric, filters), the x column, the columns
that split a machine's data into series, log axes, and an optional normalisation
(each line ÷ its own value at ``baseline_x``, or each point ÷ the series
``baseline_series`` at the same x, always within one machine). A view draws one
colour per machine and one marker/line style per series: absolute values overlaid
(same metric, same unit), and beside them, when normalised, "× vs the machine's own
baseline" where absolute numbers are not comparable across machines.

Figures go to ``figures/<notebook>/machines_<view>.png/.svg`` with the medians they
draw in ``machines_<view>.json`` (a file, not a folder, so ``machine_dirs`` never
takes it for a machine), the footer naming each machine's fingerprint. Only medians
of measured rows are drawn; a view that fewer than two machines measured is not
drawn. :func:`problems` says which committed comparison figure is missing or stale.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from feedlab import plots
from feedlab.errors import cli_errors
from feedlab.files import JSONFileError, kind_of, load_json
from feedlab.fingerprint import fingerprint_line
from feedlab.machines import machine_dirs
from feedlab.paths import FIGURES_DIR
from feedlab.report.compare_words import baseline_words, finding, title  # noqa: F401  (re-exported)
from feedlab.report.readme_inputs import input_problems
from feedlab.results import atomic_write

PREFIX = "machines_"


@dataclass(frozen=True)
class View:
    notebook: str
    name: str                      # file name after machines_
    title: str
    experiment: str
    metric: str
    x: str
    where: dict = field(default_factory=dict)   # column -> value or tuple of values
    series: tuple[str, ...] = ()   # columns whose values split a machine's data
    label: Callable[[tuple], str] | None = None  # series key -> legend label
    baseline_x: Any = None         # normalise each line by its own value at this x
    baseline_series: str | None = None  # or each x by this series' value at that x
    logx: bool = False
    logy: bool = False
    xlabel: str = ""
    ref: tuple[str, ...] = ()      # results.json path to a per-machine ceiling (a dict with the value)
    ref_key: str = ""              # the number in that dict; its "basis" names it

    @property
    def normalised(self) -> bool:
        return self.baseline_x is not None or self.baseline_series is not None


def _model(key: tuple) -> str:
    return "loader alone" if str(key[0]) == "none" else "with the model"


VIEWS: tuple[View, ...] = (
    View("01_worker_scaling", "workers", "Samples/s vs workers, per machine", "throughput_vs_workers",
         "samples_per_s", "num_workers", series=("model",), label=_model, baseline_x=1, logy=True,
         xlabel="DataLoader workers"),
    View("02_lmdb_vs_png", "formats", "PNG vs LMDB, batch 32, 0 workers", "lmdb_vs_png", "samples_per_s",
         "format", where={"batch_size": 32, "num_workers": 0}, baseline_x="png", logy=True),
    View("03_pinned_memory_by_input_size", "copy_bandwidth", "Copy bandwidth by transfer size",
         "pinned_memory_by_input_size", "gb_per_s", "bytes",
         where={"variant": ("host_memcpy", "h2d_pageable", "h2d_pinned")}, series=("variant",),
         logx=True, logy=True, xlabel="bytes per copy", ref=("pcie",), ref_key="theoretical_gbps"),
    View("04_print_overhead", "print_cost", "Cost of a print per batch, by where the output goes",
         "print_overhead", "ms_per_batch", "sink", series=("variant",), baseline_series="none", logy=True),
    View("05_storage_formats", "formats", "Read rate by storage format (plain loop)", "storage_formats",
         "samples_per_s", "format", where={"mode": "read", "loader": "plain"}, baseline_x="png", logy=True),
    View("06_decode_backends", "decoders", "Decode rate per image set (one core; cuda: the GPU)",
         "decode_backends", "img_per_s", "image_set", where={"op": ("decode", "decode_batch")},
         series=("variant",), logy=True),
    View("07_totensor_vs_fast_collate", "collate", "Collate time vs batch size, 96² images",
         "totensor_vs_fast_collate", "ms_per_batch", "batch_size", where={"kind": "collate", "image_size": 96},
         series=("variant",), logx=True, logy=True),
    View("08_hdf5_concurrency", "wrong", "Wrong samples per reader", "hdf5_concurrency", "wrong", "variant",
         series=("start_method",)),
    View("09_batch_size_breakdown", "batch", "Samples/s vs batch size (pin_memory off)", "batch_size_breakdown",
         "samples_per_s", "batch_size", where={"pin_memory": False}, series=("format", "num_workers"),
         label=lambda k: f"{k[0]}, {k[1]} workers", baseline_x=8, logx=True, logy=True),
    # x is the step with its change ("1: format=npy_mmap"): step 1 on one machine may be another change
    # than step 1 on the next, so only the points of one change share a place on the axis
    View("10_doctor", "steps", "The doctor's steps, measured", "doctor_steps", "samples_per_s", "variant",
         baseline_x="0: start", logy=True, xlabel="the doctor's advice, applied in turn (step: change)"),
    View("11_worker_hygiene", "leftover", "Workers left after each way of stopping", "worker_hygiene",
         "leftover", "variant"),
    View("12_beyond", "batched_fetch", "__getitem__ vs __getitems__, 0 workers", "batched_fetch",
         "samples_per_s", "format", where={"num_workers": 0}, series=("fetch",), baseline_series="__getitem__",
         logy=True),
    View("13_peer_loaders", "peers", "Loaders on the SR set, warm cache", "peers", "samples_per_s", "variant",
         where={"kind": "sr", "cache": "warm"}, series=("num_workers",), label=lambda k: f"{k[0]} workers",
         baseline_x="torch_stock", logy=True),
    View("14_ranks_and_remote_decode", "ranks", "Aggregate samples/s by ranks × workers", "ranks_workers",
         "aggregate_samples_per_s", "variant", logy=True),
)


# ---------------------------------------------------------------- the numbers
def _match(col, want):
    import pandas as pd

    wants = want if isinstance(want, (tuple, list)) else (want,)
    mask = pd.Series(False, index=col.index)
    for w in wants:
        if isinstance(w, (int, float)) and not isinstance(w, bool):
            mask |= pd.to_numeric(col, errors="coerce") == float(w)
        else:
            mask |= col.astype(str).str.lower() == str(w).lower()
    return mask


def _value(v):
    """A CSV cell as a plain value: 2.0 -> 2, '32' -> 32, 'png' -> 'png'."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    if math.isnan(f):
        return None
    return int(f) if f.is_integer() else f


def _sig(v: float) -> float:
    return float(f"{v:.6g}")


def points(view: View, frame) -> dict[str, dict]:
    """``{series label: {"x": [...], "median", "q25", "q75", "n"[, "rel", "rel_q25", "rel_q75"]}}``
    from one machine's tidy table (medians over repeats; only measured, finite values)."""
    import pandas as pd

    need = {"experiment", "metric", "value", view.x, *view.series, *view.where}
    if frame is None or not need <= set(frame.columns):
        return {}
    df = frame[(frame.experiment == view.experiment) & (frame.metric == view.metric)]
    for col, want in view.where.items():
        df = df[_match(df[col], want)]
    df = df.assign(value=pd.to_numeric(df["value"], errors="coerce"))
    df = df[df["value"].map(lambda v: v == v and abs(v) != float("inf"))]
    if df.empty:
        return {}
    out: dict[str, dict] = {}
    groups = df.groupby(list(view.series), sort=True, dropna=False) if view.series else [((), df)]
    for key, g in groups:
        key = tuple(_value(k) for k in (key if isinstance(key, tuple) else (key,)))
        label = (view.label(key) if view.label else ", ".join(map(str, key))) if key else "all"
        xs: dict = {}
        for xv, gx in g.groupby(g[view.x].map(_value), sort=False):
            if xv is None:
                continue
            vals = gx["value"]
            xs[xv] = (_sig(vals.median()), _sig(vals.quantile(0.25)), _sig(vals.quantile(0.75)), int(len(vals)))
        order = sorted(xs, key=lambda v: (isinstance(v, str), v))
        out[label] = {"x": order, "median": [xs[v][0] for v in order], "q25": [xs[v][1] for v in order],
                      "q75": [xs[v][2] for v in order], "n": [xs[v][3] for v in order]}
    return _normalise(view, out)


def _normalise(view: View, series: dict[str, dict]) -> dict[str, dict]:
    if not view.normalised:
        return series
    base_series = series.get(view.baseline_series) if view.baseline_series is not None else None
    for label, s in series.items():
        rel, lo, hi = [], [], []
        for x, m, q25, q75 in zip(s["x"], s["median"], s["q25"], s["q75"]):
            if view.baseline_x is not None:
                b = s["median"][s["x"].index(view.baseline_x)] if view.baseline_x in s["x"] else None
            else:
                b = base_series["median"][base_series["x"].index(x)] if base_series and x in base_series["x"] else None
            ok = b is not None and b > 0
            rel.append(_sig(m / b) if ok else None)
            lo.append(_sig(q25 / b) if ok else None)
            hi.append(_sig(q75 / b) if ok else None)
        s.update(rel=rel, rel_q25=lo, rel_q75=hi)
    return series


def machine_data(view: View, figures_dir: Path = FIGURES_DIR) -> dict[str, dict]:
    """``{machine: {"fingerprint": line, "series": points(...), "ref": ...}}`` for every committed
    machine of the view's notebook that measured it."""
    import pandas as pd

    out = {}
    for key, folder in machine_dirs(view.notebook, figures_dir).items():
        csv = folder / "results.csv"
        if not csv.is_file():
            continue
        fp_path = folder / "fingerprint.json"
        try:
            pts = points(view, pd.read_csv(csv))
            fp = load_json(fp_path) if fp_path.is_file() else None
        except (ValueError, OSError, UnicodeDecodeError) as e:  # pandas' ParserError and JSON's are ValueErrors
            why = f"fingerprint.json is not valid JSON: {e.reason}" if isinstance(e, JSONFileError) else \
                f"{type(e).__name__}: {str(e)[:120]}"
            print(f"warning: {folder}: left out of the comparison ({why}); "
                  "re-run that notebook there or remove the folder", file=sys.stderr)
            continue
        if not pts:
            continue
        entry = {"fingerprint": fingerprint_line(fp) if fp else "no fingerprint", "series": pts}
        ref = _reference(view, folder)
        if ref:
            entry["ref"] = ref
        out[key] = entry
    return out


def _reference(view: View, folder: Path) -> dict:
    """A per-machine ceiling recorded by the run (e.g. the PCIe link from nvidia-smi), or {}."""
    res = folder / "results.json"
    if not view.ref or not res.is_file():
        return {}
    try:
        cur = load_json(res)
    except (OSError, ValueError) as exc:
        print(f"compare: {res}: unreadable ({exc}); its reference line is left out", file=sys.stderr)
        return {}
    for k in view.ref:
        cur = cur.get(k) if isinstance(cur, dict) else None
    if not isinstance(cur, dict) or not isinstance(cur.get(view.ref_key), (int, float)):
        return {}
    return {"value": _sig(float(cur[view.ref_key])), "basis": str(cur.get("basis", ""))}


# ---------------------------------------------------------------- the figure
def draw(view: View, data: dict[str, dict], out_dir: Path) -> list[Path]:
    import matplotlib.pyplot as plt


    panels = [("median", "q25", "q75", plots.axis_label(view.metric, "median, IQR"))]
    if view.normalised:
        panels.append(("rel", "rel_q25", "rel_q75", f"× vs {baseline_words(view)} on the same machine"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.0 * len(panels) + 3.4, 4.4), squeeze=False)
    axes = axes[0]
    labels = sorted({lab for d in data.values() for lab in d["series"]})
    styles = dict(zip(labels, ["-", "--", ":", "-."] * 4))
    markers = dict(zip(labels, "osD^v<>px*h+"))
    xs_all = [x for d in data.values() for s in d["series"].values() for x in s["x"]]
    categorical = any(isinstance(x, str) for x in xs_all)
    cats = sorted({str(x) for x in xs_all}) if categorical else []
    n_lines = len(data) * len(labels)
    for ax, (mk, lo, hi, ylabel) in zip(axes, panels):
        i = 0
        for m_idx, (machine, d) in enumerate(data.items()):
            colour = plots.PALETTE[m_idx % len(plots.PALETTE)]
            for lab in labels:
                s = d["series"].get(lab)
                if s is None:
                    continue
                keep = [j for j, v in enumerate(s[mk]) if v is not None]
                if not keep:
                    continue
                if categorical:
                    off = (i - (n_lines - 1) / 2) * min(0.8 / max(n_lines, 1), 0.15)
                    x = [cats.index(str(s["x"][j])) + off for j in keep]
                else:
                    x = [s["x"][j] for j in keep]
                name = machine if len(labels) == 1 else f"{machine} · {lab}"
                plots.errorbar_series(ax, x, [s[mk][j] for j in keep], [s[lo][j] for j in keep],
                                [s[hi][j] for j in keep], label=name, color=colour, marker=markers[lab],
                                linestyle="none" if categorical else styles[lab])
                i += 1
            ref = d.get("ref")
            if ref and mk == "median":
                ax.axhline(ref["value"], color=colour, linestyle="--", linewidth=1,
                           label=f"{machine} · PCIe {ref['basis']} ceiling {ref['value']:.1f} (link from nvidia-smi)")
        if categorical:
            ax.set_xticks(range(len(cats)))
            ax.set_xticklabels(cats, rotation=30 if len(cats) > 3 else 0, ha="right" if len(cats) > 3 else "center")
        elif view.logx:
            ax.set_xscale("log")
        elif all(float(x).is_integer() for x in xs_all):
            plots.integer_axis(ax, "x")  # workers, steps: whole numbers
        if view.logy:
            ax.set_yscale("log")
            plots.readable_log_axis(ax, "y")
        if view.logx and not categorical:
            _log_x(ax, view.x == "bytes")
        if mk == "rel":
            ax.axhline(1.0, color="#888888", linewidth=0.8)
        ax.set_xlabel(view.xlabel or plots.axis_label(view.x))
        ax.set_ylabel(ylabel)
    plots.legend_outside(axes[-1])
    fig.suptitle(title(view, data))
    footer = [f"{m}: {d['fingerprint']}" for m, d in data.items()]
    paths = plots.save_figure(fig, out_dir, PREFIX + view.name, footer=footer)
    plt.close(fig)
    return paths


def _log_x(ax, is_bytes: bool) -> None:
    """A log x axis with a label per decade at most (bytes as 4 kB, 16 MB …)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    def fmt(v, _pos):
        if not is_bytes:
            return f"{v:g}"
        for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
            if v >= scale:
                return f"{v / scale:g} {unit}"
        return f"{v:g} B"

    lo, hi = sorted(ax.get_xlim())
    subs = (1.0,) if hi / max(lo, 1e-12) >= 1e3 else (1.0, 2.0, 5.0)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.xaxis.set_major_formatter(FuncFormatter(fmt))
    ax.xaxis.set_minor_formatter(NullFormatter())


# ---------------------------------------------------------------- files
def _record(view: View, data: dict) -> dict:
    return {"notebook": view.notebook, "view": view.name, "title": view.title, "experiment": view.experiment,
            "metric": view.metric, "x": view.x, "machines": data}


def _expected(figures_dir: Path) -> dict[Path, dict]:
    """``{json path: record}`` for every view with at least two machines."""
    out = {}
    for view in VIEWS:
        data = machine_data(view, figures_dir)
        if len(data) >= 2:
            out[Path(figures_dir) / view.notebook / f"{PREFIX}{view.name}.json"] = _record(view, data)
    return out


def _ours(figures_dir: Path) -> set[Path]:
    return {p for nb in {v.notebook for v in VIEWS} for p in (Path(figures_dir) / nb).glob(f"{PREFIX}*.json")}


def _current(path: Path, record: dict) -> bool:
    """The figure is drawn from exactly ``record`` already (its JSON matches, PNG and SVG exist)."""
    try:
        same = load_json(path, "the comparison record") == json.loads(json.dumps(record))
    except (OSError, ValueError):
        return False
    return same and all(path.with_suffix(ext).is_file() for ext in (".png", ".svg"))


def write_all(figures_dir: Path = FIGURES_DIR, log=print, redraw: bool = False) -> list[Path]:
    """Draw every view that two or more committed machines measured; remove the comparison
    files (ours, ``machines_*``) of views that no longer have two machines. A figure whose
    record is unchanged is left as it is (byte for byte) unless ``redraw``."""
    expected = _expected(figures_dir)
    by_path = {Path(figures_dir) / v.notebook / f"{PREFIX}{v.name}.json": v for v in VIEWS}
    written = []
    for path, record in expected.items():
        view = by_path[path]
        if not redraw and _current(path, record):
            continue
        written += draw(view, record["machines"], path.parent)
        atomic_write(path, json.dumps(record, indent=1, sort_keys=True) + "\n")  # never half-written
        written.append(path)
        log(f"{path.parent.name}: {PREFIX}{view.name} ({', '.join(record['machines'])})")
    for old in _ours(figures_dir) - set(expected):
        for ext in (".json", ".png", ".svg"):
            old.with_suffix(ext).unlink(missing_ok=True)
        log(f"{old.parent.name}: {old.stem} removed (fewer than two machines measured it)")
    return written


def problems(figures_dir: Path = FIGURES_DIR) -> list[str]:
    """One line per comparison figure that is missing or stale against the committed results."""
    expected = _expected(figures_dir)
    out, odd = [], []
    for path, record in expected.items():
        rel = f"{path.parent.name}/{path.stem}"
        there = [p for p in (path.with_suffix(ext) for ext in (".json", ".png", ".svg")) if os.path.lexists(p)]
        irregular = next((p for p in there if not p.is_file()), None)
        if irregular is not None:   # a FIFO or folder there is no "missing" file (attack56 W2, B60)
            kind = kind_of(irregular.lstat().st_mode) if not irregular.is_symlink() else "a link to no regular file"
            odd.append(f"{rel}: {irregular} is {kind}, not a regular file: remove it, then "
                       "`python -m feedlab.report.readme` redraws it")
        elif len(there) < 3:
            out.append(f"{rel}: missing")
        else:
            try:
                committed = load_json(path, "the comparison record")
            except (OSError, JSONFileError) as exc:   # damaged or no regular file: named, one line
                out.append(f"{rel}: {exc}")
                continue
            if committed != json.loads(json.dumps(record)):
                out.append(f"{rel}: stale (the committed results changed)")
    for old in _ours(figures_dir) - set(expected):
        out.append(f"{old.parent.name}/{old.stem}: drawn, but fewer than two machines measured it now")
    return odd + [f"{p}: run `python -m feedlab.report.readme`" for p in out]


def figures_for(notebook: str, figures_dir: Path = FIGURES_DIR) -> list[Path]:
    """The comparison PNGs of a notebook, in the order of :data:`VIEWS`."""
    return [p for v in VIEWS if v.notebook == notebook
            for p in [Path(figures_dir) / notebook / f"{PREFIX}{v.name}.png"] if p.is_file()]


def main(argv: list[str] | None = None) -> int:
    import argparse


    ap = argparse.ArgumentParser(prog="python -m feedlab.report.compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only say which comparison figures are stale")
    ap.add_argument("--redraw", action="store_true", help="redraw every figure, even those whose data is unchanged")
    args = ap.parse_args(argv)
    with cli_errors("python -m feedlab.report.compare"):
        bad = input_problems(FIGURES_DIR)   # a damaged result refused in one line naming it (attack56 B54)
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise ValueError(f"{bad[0]}{more}; nothing was checked or written")
        if args.check:
            found = problems(FIGURES_DIR)
            print("\n".join(found) or "comparison figures are current")
            return 1 if found else 0
        write_all(redraw=args.redraw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
