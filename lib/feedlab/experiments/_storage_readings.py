"""Notebook 05's reading, figure title and payload numbers, from its summary table (re-exported by
:mod:`feedlab.experiments.storage_formats`).

:func:`numbers` picks the readings a run is judged on (the fastest setting, the best
single-process one, the ceiling, the baseline, the best batched LMDB reader; with a hand-over
run, the DataLoader's and the ring's hand-over in GB/s and the issue-24 ratios);
:func:`readings` writes them as sentences, every target line from :mod:`feedlab.report.targets` (or
:mod:`feedlab.experiments.handover`'s bounds), met or missed computed, never typed;
:func:`figure_title` states the finding. Settings appear in words (``setting_words``), never as keys.
"""

from __future__ import annotations

import math

from feedlab.experiments import handover
from feedlab.experiments._storage_readers import loader_words
from feedlab.experiments.handover import TARGET_MAIN_US
from feedlab.like_for_like import NOT_APPLICABLE, Side, judged
from feedlab.plots import finding_title
from feedlab.report import targets
from feedlab.report.claims.core import Run
from feedlab.report.targets import verdict

SPS = "samples_per_s"

#: what the ceiling's copy methods are, in words (``feedlab.collate.CEILING_METHODS``)
CEILING_WORDS = {"numpy_copy": "a numpy copy of contiguous batches", "gather": "a numpy gather of shuffled batches",
                 "readinto": "readinto from the file", "mmap_slice": "a slice copy out of the file's map"}


#: the ceiling's copies that read the bytes in storage order (``gather`` takes them in a random sample order)
CONTIGUOUS = ("numpy_copy", "readinto", "mmap_slice")


def _med(summ, variant: str, mode: str = "read", metric: str = SPS) -> float:
    r = summ[(summ["mode"] == mode) & (summ["variant"] == variant) & (summ["metric"] == metric)]
    return float(r["median"].iloc[0]) if len(r) else float("nan")


def _settings(summ, mode: str = "read"):
    """The rows of timed settings (``format/loader`` variants), samples/s."""
    return summ[(summ["mode"] == mode) & (summ["metric"] == SPS) & summ["variant"].str.contains("/")]


def row_words(row) -> str:
    """A summary row's setting in words: "lmdb_raw, one process, a batch per read"."""
    return f"{row['format']}, {loader_words(row['loader'], int(row['num_workers']))}"


def _find(rows, fmt: str, loader: str, num_workers: int = 0) -> float:
    r = rows[(rows["format"] == fmt) & (rows["loader"] == loader) & (rows["num_workers"].astype(int) == num_workers)]
    return float(r["median"].iloc[0]) if len(r) else float("nan")


def ceiling_method(summ) -> str | None:
    """Which copy method set the ceiling in a summary (the ``ceiling_<method>`` with the best median)."""
    rows = summ[(summ.variant.str.startswith("ceiling_")) & (summ.metric == SPS)]
    return None if rows.empty else str(rows.loc[rows["median"].idxmax()].variant).removeprefix("ceiling_")


def numbers(summ, handover_rows: list[dict] | None = None) -> dict:
    """The numbers 05 is judged on (payload keys; the targets of :mod:`feedlab.report.targets` read them)."""
    read = _settings(summ)
    out: dict = {}
    ceiling, base = _med(summ, "memcpy_ceiling"), _med(summ, "baseline_png_pil_totensor")
    out.update(ceiling_samples_per_s=ceiling, ceiling_method=ceiling_method(summ), baseline_samples_per_s=base)
    contiguous = {m: _med(summ, f"ceiling_{m}") for m in CONTIGUOUS}
    contiguous = {m: v for m, v in contiguous.items() if not math.isnan(v)}
    if contiguous:
        best_c = max(contiguous, key=contiguous.get)
        out.update(contiguous_ceiling_samples_per_s=contiguous[best_c], contiguous_ceiling_method=best_c)
    gather = _med(summ, "ceiling_gather")
    if not math.isnan(gather):
        out["gather_ceiling_samples_per_s"] = gather
    if len(read):
        best = read.loc[read["median"].idxmax()]
        out.update(best_read=row_words(best), best_read_variant=str(best.variant),
                   best_read_samples_per_s=float(best["median"]), ratio_best_to_baseline=float(best["median"]) / base)
        single = read[read["num_workers"].astype(int) == 0]
        if len(single):
            b1 = single.loc[single["median"].idxmax()]
            out.update(best_single_process=row_words(b1), best_single_process_variant=str(b1.variant),
                       ratio_best_single_to_ceiling=float(b1["median"]) / ceiling)
        lmdb_b = read[read["format"].astype(str).str.startswith("lmdb") & (read["loader"] == "batched")]
        out["ratio_best_lmdb_batched_to_ceiling"] = (float(lmdb_b["median"].max()) / ceiling) if len(lmdb_b) else None
        if len(lmdb_b):
            out["best_lmdb_batched"] = row_words(lmdb_b.loc[lmdb_b["median"].idxmax()])
    if handover_rows:
        t = handover.targets(handover_rows)
        out["handover"] = {k: (bool(v) if isinstance(v, bool) else v) for k, v in t.items()}
    return out


def _window_lines(frame) -> list[str]:
    """How the run's reading-alone rates were timed: steady (with the precision reached), imprecise
    (the cap came first) or start-up inclusive, counted over the settings; [] for a table without
    ``rate_kind`` (a run before steady windows)."""
    if frame is None or "rate_kind" not in frame.columns:
        return []
    rows = frame[(frame["metric"] == SPS) & (frame["mode"] == "read") & frame["variant"].astype(str).str.contains("/")]
    if rows.empty:
        return []
    kinds = rows.groupby("variant")["rate_kind"].agg(lambda k: "steady" if set(k) == {"steady"} else
                                                      "imprecise" if "imprecise" in set(k) else "startup_inclusive")
    steady = [v for v, k in kinds.items() if k == "steady"]
    hw = rows[rows["variant"].isin(steady)]["rate_half_width"] if "rate_half_width" in rows.columns else None
    line = f"Reading-alone rates: {len(steady)} of {len(kinds)} settings steady"
    if hw is not None and len(hw.dropna()):
        line += (f" (warm-up left out, ≥ {int(rows['timed_batches'].min())} timed batches; 95% interval of the mean "
                 f"batch time within ±{100 * float(hw.median()):.1f}% at the median, ±{100 * float(hw.max()):.1f}% "
                 f"at the widest)")
    rest = [f"{k.replace('_', '-')}: {len(v)}" for k, v in
            (("imprecise", [v for v, k in kinds.items() if k == "imprecise"]),
             ("start-up inclusive (too few timed batches to be steady)",
              [v for v, k in kinds.items() if k == "startup_inclusive"])) if v]
    return [line + (f"; {'; '.join(rest)}" if rest else "") + "."]


def _side(frame, fmt: str, loader: str, workers: int, label: str):

    r = frame[(frame["metric"] == SPS) & (frame["mode"] == "read") & (frame["format"] == fmt)
              & (frame["loader"] == loader) & (frame["num_workers"].astype(int) == workers)]
    if r.empty:
        return None, float("nan")
    col = lambda c: r[c] if c in r.columns else None  # noqa: E731
    timed, window = col("timed_batches"), col("window_s")
    one = lambda c: r[c].iloc[0] if c in r.columns and r[c].notna().all() and r[c].astype(str).nunique() == 1 \
        else None  # noqa: E731  (the rows' one recorded order / pixels, issue 45; not recorded: not known)
    px = one("pixel_error")
    return Side(label, order=one("order"), pixel_error=px if px is None or str(px) == NOT_APPLICABLE else _float(px),
                batch_size=int(r["batch_size"].iloc[0]), workers=workers,
                cache=str(r["cache"].iloc[0]) if col("cache") is not None else None,
                timed_batches=None if timed is None or timed.isna().any() else int(timed.min()),
                window_s=None if window is None or window.isna().any() else float(window.min())), \
        float(r["value"].median())


def _float(x) -> float | None:
    try:
        return float(x)
    except (TypeError, ValueError):   # "not checked": not known
        return None


def ring_lines(frame) -> list[str]:
    """What the ring adds, per format: the ring ÷ the DataLoader with the same workers, format, decode and
    batch, reading alone, judged like for like (:mod:`feedlab.like_for_like`: a ratio whose windows,
    cache or batch differ says so). [] without both in the run's table."""

    if frame is None or not {"format", "loader", "num_workers", "mode"} <= set(frame.columns):
        return []
    ring = frame[(frame["loader"] == "ring") & (frame["mode"] == "read") & (frame["metric"] == SPS)]
    parts = []
    for fmt, w in sorted(set(zip(ring["format"], ring["num_workers"].astype(int)))):
        (a, ra), (b, rb) = _side(frame, fmt, "ring", w, "the ring"), _side(frame, fmt, "dataloader", w, "the DataLoader")
        if a is not None and b is not None:
            parts.append(f"{fmt} {ra / rb:.2f}× ({judged('like for like', a, b)})")
    return ([f"What the ring adds, reading alone, the ring ÷ the DataLoader with the same workers, format, decode "
             f"and batch: {'; '.join(parts)}."] if parts else [])


def _target_lines(nums: dict, frame=None) -> list[str]:
    run = Run(nums, frame=frame)  # with the run's table: a ratio of rates not timed steady is not judged
    return [line for t in targets.for_notebook("05_storage_formats") for line in t.lines(run)]


def _measured(x) -> bool:
    return isinstance(x, (int, float)) and not math.isnan(x)


def _handover_lines(h: dict, batch_size: int, num_workers: int) -> list[str]:
    w = loader_words("dataloader", num_workers).removeprefix("DataLoader, ")
    gb = (f"the DataLoader {h['dataloader_delivered_gb_s']:.2f} GB/s ({h['dataloader_main_us_per_sample']:.1f} µs of "
          f"the main process's CPU per sample), the shared-memory ring {h['ring_delivered_gb_s']:.2f} GB/s "
          f"({h['ring_main_us_per_sample']:.1f} µs)") if _measured(h.get("ring_delivered_gb_s")) else \
        (f"the DataLoader {h['dataloader_main_us_per_sample']:.1f} µs of the main process's CPU per sample, the "
         f"shared-memory ring {h['ring_main_us_per_sample']:.1f} µs (a run before 2026-11-26: no wall-time bandwidth)")
    lines = [f"Hand-over, worker → main process, LMDB + fast collate, batch {batch_size}, {w}, warm page cache: "
             f"bytes delivered per second of wall time, {gb}.",
             f"Target, the ring's main-process cost per sample = {h['ring_main_us_per_sample']:.1f} µs: "
             f"{verdict(h['ring_main_us_per_sample'], '<=', TARGET_MAIN_US)} the ≤ {TARGET_MAIN_US:g} µs target."]
    if "ring_vs_dataloader" in h:
        words = h.get("ring_vs_dataloader_words") or "not like for like (its sides were not recorded)"
        lines.append(f"What the ring adds: the ring ÷ the DataLoader, both LMDB + fast collate, batch {batch_size}, "
                     f"{w} = {h['ring_vs_dataloader']:.2f}× ({words}).")
    best = {"lmdb_fast_dataloader": "the DataLoader", "lmdb_ring": "the ring",
            "lmdb_threads": "threads"}.get(h["lmdb_best"], h["lmdb_best"])
    lines.append(f"Target, LMDB + fast collate ({best}, {w}) ÷ PNG + ToTensor (DataLoader, {w}) at batch "
                 f"{batch_size} = {h['lmdb_vs_png']:.1f}×: {targets.handover_clause(h.get('lmdb_vs_png_verdict'))} "
                 f"— a whole-pipeline comparison (format, decode, collate and loader differ), not a measure of the ring.")
    return lines


def readings(summ, disk, nums: dict, *, with_model: bool = False, cold: bool = False,
             handover_batch: int = 128, handover_workers: int = 2, frame=None) -> list[str]:
    """This run's reading, one sentence a line (every number measured in this run). ``frame``: the
    run's rows (``Results.frame()``), so a target whose rates were not timed steady says so."""
    read = _settings(summ)
    out = []
    if len(read):
        worst = read.loc[read["median"].idxmin()]
        out.append(f"Fastest reading alone: {nums['best_read']} at {nums['best_read_samples_per_s']:,.0f} samples/s; "
                   f"slowest: {row_words(worst)} at {float(worst['median']):,.0f}.")
    method = CEILING_WORDS.get(nums.get("ceiling_method"), nums.get("ceiling_method"))
    out.append(f"Ceiling (one core, warm cache, the fastest of several copies of these bytes into a batch buffer, "
               f"here {method}): {nums['ceiling_samples_per_s']:,.0f} samples/s; one Python-level copy per sample "
               f"and side: {_med(summ, 'memcpy_per_item'):,.0f} samples/s.")
    if "contiguous_ceiling_samples_per_s" in nums and "gather_ceiling_samples_per_s" in nums:
        c, g = nums["contiguous_ceiling_samples_per_s"], nums["gather_ceiling_samples_per_s"]
        out.append(f"The same bytes copied in storage order ({CEILING_WORDS.get(nums['contiguous_ceiling_method'])}): "
                   f"{c:,.0f} samples/s; gathered in a random sample order, as a shuffled epoch reads them: "
                   f"{g:,.0f} samples/s ({g / c:.2f} of the contiguous copy).")
    out += _window_lines(frame)
    out += _target_lines(nums, frame)
    out += ring_lines(frame)
    zc, zr = _find(read, "zarr", "chunk"), _find(read, "zarr", "plain")
    if not (math.isnan(zc) or math.isnan(zr)):
        out.append(f"Zarr read by whole chunks vs one sample at a time, one process: {zc:,.0f} vs {zr:,.0f} "
                   f"samples/s = {zc / zr:.0f}× (per sample {1e6 / zc:.0f} vs {1e6 / zr:.0f} µs).")
    hp, hb = _find(read, "hdf5", "plain"), _find(read, "hdf5", "batched")
    if not (math.isnan(hp) or math.isnan(hb)):
        out.append(f"HDF5, one process: {1e6 / hp:.0f} µs per sample read one at a time, {1e6 / hb:.1f} µs "
                   f"per sample read a batch at a time.")
    np_, pt = _find(read, "npy", "plain"), _find(read, "pt", "plain")
    if not (math.isnan(np_) or math.isnan(pt)):
        out.append(f"One .npy per sample: {1e6 / np_:.0f} µs/sample; .pt: {1e6 / pt:.0f} µs/sample "
                   f"(two arrays per sample here).")
    d1, p0 = _find(read, "png", "dataloader", 1), _find(read, "png", "plain")
    if not (math.isnan(d1) or math.isnan(p0)):
        out.append(f"PNG, a loop in one process vs the DataLoader with 1 worker: {p0:,.0f} vs {d1:,.0f} samples/s.")
    if with_model:
        tr = _settings(summ, "train")
        if len(tr):
            bt = tr.loc[tr["median"].idxmax()]
            out.append(f"Fastest data feed with a training step: {row_words(bt)} "
                       f"({float(bt['median']):,.0f} samples/s of waiting time).")
    if cold:
        co = summ[(summ["mode"] == "cold") & (summ["metric"] == "resident_fraction_after_evict")]
        out.append("Cold runs: before every repeat the store is closed, evicted (posix_fadvise DONTNEED) and "
                   "reopened; mincore then gives the pages still resident (a row over 10% is not cold).")
        for _, r in _settings(summ, "cold").iterrows():
            warm = _med(summ, r.variant)
            left = co[co.variant == r.variant]["max"]
            state = ("eviction not checked (no mincore)" if left.empty or left.iloc[0] < 0 else
                     f"{100 * (1 - left.iloc[0]):.0f}% of pages evicted" + (" — NOT cold" if left.iloc[0] > 0.1 else ""))
            vs = f" vs warm {warm:,.0f}" if not math.isnan(warm) else " (not read warm in this run)"
            out.append(f"  {row_words(r)}: cold {float(r['median']):,.0f}{vs} samples/s; {state}.")
    if "handover" in nums:
        out += _handover_lines(nums["handover"], handover_batch, handover_workers)
    if disk is not None and len(disk):
        small, big = disk.loc[disk.bytes.idxmin()], disk.loc[disk.bytes.idxmax()]
        out.append(f"Smallest on disk: {small.format} ({small.bytes / 2**20:.1f} MiB); "
                   f"largest: {big.format} ({big.bytes / 2**20:.1f} MiB).")
    return out


def figure_title(nums: dict, batch_size: int) -> str:
    """The figure's title, the finding: the fastest setting against the baseline."""
    if "best_read" not in nums:
        return f"Batch load time by storage format and loader, batch {batch_size}"
    return finding_title(f"Reading alone, {nums['best_read']} (batch {batch_size})", nums["ratio_best_to_baseline"],
                         "PNG + PIL + ToTensor baseline (DataLoader, 2 workers, batch 128)")


def panel_title(summ, mode: str, nums: dict, batch_size: int, step: str = "a training step", width: int = 52) -> str:
    """A panel's title, its finding: reading alone, the fastest setting against the baseline
    (:func:`figure_title`); with a training step or a cold cache, the fastest setting against the
    slowest in that mode. Wrapped at ``width`` characters (a panel is narrow)."""
    import textwrap

    return textwrap.fill(_panel_title(summ, mode, nums, batch_size, step), width)


def _panel_title(summ, mode: str, nums: dict, batch_size: int, step: str) -> str:
    if mode == "read":
        return figure_title(nums, batch_size)
    rows = _settings(summ, mode)
    where = {"train": f"with {step} per batch", "cold": "cold page cache"}.get(mode, mode)
    if rows.empty:
        return f"Batch load time, {where}"
    best, worst = rows.loc[rows["median"].idxmax()], rows.loc[rows["median"].idxmin()]
    return finding_title(f"{where[0].upper()}{where[1:]}, {row_words(best)}", float(best["median"]) / float(worst["median"]),
                         f"slowest ({row_words(worst)})", f"batch {batch_size}")


def table(summ, mode: str = "read"):
    """The samples/s table a reader reads: format, loader in words, median and IQR."""
    rows = _settings(summ, mode)
    out = rows.assign(loader=[loader_words(lo, int(w)) for lo, w in zip(rows["loader"], rows["num_workers"])])
    out = out[["format", "loader", "median", "q25", "q75"]].rename(
        columns={"format": "storage format", "median": "samples/s (median)", "q25": "q25", "q75": "q75"})
    return out.sort_values("samples/s (median)", ascending=False).reset_index(drop=True)
