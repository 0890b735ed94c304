"""Notebook 02: the same loader over PNG files, LMDB with lz4, and LMDB raw.

:func:`run_formats` times the grid (format × batch size × workers, one model);
:func:`storage_table` reads what ``data_prep pack`` recorded for each format
(bytes on disk, write seconds) and measures the PNG side itself.
"""

from __future__ import annotations

from typing import Sequence

from feedlab import formats as _formats
from feedlab.experiments._grid_spend import ends, extremes_first
from feedlab.experiments.loader_grid import default_device, grid, run_grid
from feedlab.formats import bytes_on_disk, read_manifest
from feedlab.plots import finding_title, workers_label
from feedlab.results import Results, median, summary_median

FORMATS = ("png", "lmdb", "lmdb_raw")


def plan(formats: Sequence[str], batch_sizes: Sequence[int], worker_counts: Sequence[int], model: str = "auto",
         pin_memory: bool = False, raw_batch_sizes: Sequence[int] | None = None) -> list:
    """The settings, in the order a budget spends on them: PNG and LMDB (lz4) side by side at every batch
    size (the smallest and largest first) × worker count — what write-up 000's claims compare — then the
    other formats; ``raw_batch_sizes`` (None: all) the batch sizes ``lmdb_raw`` (the lz4 question, no
    claim) runs at."""
    main = [f for f in ("png", "lmdb") if f in formats]
    rest = [f for f in formats if f not in main]
    settings = []
    for b in extremes_first(batch_sizes):
        settings += grid(format=main, batch_size=b, num_workers=list(worker_counts), model=model,
                         pin_memory=pin_memory) if main else []
    for f in rest:
        sizes = batch_sizes if raw_batch_sizes is None or f != "lmdb_raw" else [b for b in batch_sizes
                                                                                 if b in set(raw_batch_sizes)]
        for b in extremes_first(sizes):
            settings += grid(format=f, batch_size=b, num_workers=list(worker_counts), model=model,
                             pin_memory=pin_memory)
    return settings


def run_formats(data_root, formats: Sequence[str], batch_sizes: Sequence[int], worker_counts: Sequence[int],
                model: str = "auto", repeats: int = 3, max_samples: int | None = None, device=None,
                warmup: int = 1, log=None, verify: bool = False, raw_batch_sizes: Sequence[int] | None = None,
                **sizing) -> Results:
    """Per-phase timing for every format × batch size × worker count (stock collate,
    as the write-up did; pin_memory on with CUDA, off without), in :func:`plan`'s order
    (``raw_batch_sizes``: where ``lmdb_raw`` runs; None: every batch size). ``sizing``: ``min_timed_batches``,
    ``time_budget_s``, ``rate_precision``, ``rate_cap_s``, ``budget`` of ``run_grid``.

    ``verify=False`` (the default here): the stores are read without the per-sample
    crc32c check that feedlab's readers do by default, so the rows compare the formats'
    read speed alone, as the write-up (which had no checksums) did."""
    device = device if device is not None else default_device()
    settings = plan(formats, batch_sizes, worker_counts, model, str(device).startswith("cuda"), raw_batch_sizes)
    claimed = ends(batch_sizes)   # PNG and LMDB (lz4) at the batch ends: 000's claims; never left out for the budget
    return run_grid(data_root, settings, repeats=repeats, max_samples=max_samples, device=device,
                    warmup=warmup, experiment="lmdb_vs_png", log=log,
                    essential=lambda s: s.format in ("png", "lmdb") and claimed(s),
                    dataset_opts={f: {"verify": verify} for f in formats}, **sizing)


def storage_table(data_root, formats: Sequence[str] = FORMATS):
    """One row per format: bytes on disk, bytes per sample, build seconds, and the
    lz4 ratio (raw LMDB bytes / lz4 LMDB bytes) where both exist. PNG's build time
    is the data set's (crop, resize and encode); packed formats' is the pack
    write time from the manifest."""
    import pandas as pd


    man = read_manifest(data_root)
    n = int(man.get("count", 0)) or None
    rows = []
    for fmt in formats:
        size = bytes_on_disk(data_root, fmt)
        if fmt == "png":
            build = man.get("build_seconds")
            what = "build_sr: crop + resize + PNG encode"
        else:
            build = (man.get("formats", {}).get(fmt) or {}).get("write_seconds")
            what = "data_prep pack: write"
        rows.append({"format": fmt, "bytes": size, "MiB": size / 2**20,
                     "bytes_per_sample": size / n if n else float("nan"),
                     "build_s": float("nan") if build is None else float(build), "build": what})
    df = pd.DataFrame(rows)
    raw = dict(zip(df["format"], df["bytes"]))
    if raw.get("lmdb") and raw.get("lmdb_raw"):
        df.attrs["lz4_ratio"] = raw["lmdb_raw"] / raw["lmdb"]
    if n:
        lr = man.get("lr_shape", [0])
        hr = man.get("hr_shape", [0])
        import numpy as np

        df.attrs["raw_bytes_per_sample"] = int(np.prod(lr) + np.prod(hr))
    df.attrs["count"] = n
    return df


def map_size_growth(data_root, samples: int = 256, start_bytes: int = 64 * 1024) -> dict:
    """Write the first ``samples`` pairs of ``data_root`` into a scratch LMDB whose map
    starts at ``start_bytes`` (far too small), through feedlab's writer, and report what
    happened: ``data_bytes`` (the environment's size on disk), the least number of
    doublings that size implies, or the ``error`` if the write failed. Write-up 000
    says the map size must be guessed before writing; this shows whether it must."""
    import math
    import tempfile
    from pathlib import Path

    import lmdb


    ds = _formats.open_dataset(data_root, "png")
    n = min(int(samples), len(ds))
    with tempfile.TemporaryDirectory(prefix="feedlab-mapsize-") as tmp:
        try:
            path = _formats.lmdb_store.write(tmp, [ds[i] for i in range(n)], compress=False,
                                    map_size=start_bytes, name="lmdb_grow")
        except lmdb.Error as e:  # the write-up's case: a map too small to hold the data
            return {"samples": n, "start_bytes": start_bytes, "error": f"{type(e).__name__}: {e}"}
        data = sum(f.stat().st_size for f in Path(path).iterdir() if f.name == "data.mdb")
    return {"samples": n, "start_bytes": start_bytes, "data_bytes": data, "error": "",
            "doublings": max(0, math.ceil(math.log2(data / start_bytes))) if data else 0}


__all__ = ["FORMATS", "map_size_growth", "plan", "run_formats", "storage_table"]


# ------------------------------------------------------------ readings, title, payload (notebook 02)

def throughput_ratios(rate, formats: Sequence[str], worker_counts: Sequence[int], batch_sizes: Sequence[int],
                      base: str = "png") -> dict[str, float]:
    """``{"<format>_w<workers>_b<batch>": rate / rate of base}`` for every format but ``base``,
    from a summary of ``steady_samples_per_s`` by num_workers, batch_size and format; a setting either
    side did not run (left out) has no ratio."""
    out = {}
    for w in worker_counts:
        for b in batch_sizes:
            ref = _rate(rate, w, b, base)
            for f in formats:
                if f != base and ref is not None and _rate(rate, w, b, f) is not None:
                    out[f"{f}_w{w}_b{b}"] = _rate(rate, w, b, f) / ref
    return out


def _rate(summary, w, b, f) -> float | None:
    try:
        return summary_median(summary, num_workers=w, batch_size=b, format=f)
    except KeyError:
        return None


def title(ratios: dict[str, float], fmt: str = "lmdb") -> str:
    """The best setting of ``fmt`` against PNG: ``LMDB (lz4): ×1.4 the PNG rate at 2 workers, batch 32``
    (the median over settings follows in brackets when there are several)."""
    mine = {k: v for k, v in ratios.items() if k.startswith(f"{fmt}_w")}
    if not mine:
        return "PNG vs LMDB: per-phase time per batch"
    key = max(mine, key=mine.get)
    w, b = key[len(fmt) + 2:].split("_b")
    name = {"lmdb": "LMDB (lz4)", "lmdb_raw": "LMDB (raw)"}.get(fmt, fmt)
    t = finding_title(name, mine[key], "PNG rate", f"{workers_label(w)}, batch {b}")
    return t + (f" (median ×{median(mine.values()):.2g} over {len(mine)} settings)" if len(mine) > 1 else "")


def readings(wait, rate, store, formats: Sequence[str], worker_counts: Sequence[int],
             batch_sizes: Sequence[int]) -> list[str]:
    """Notebook 02's reading: per setting the data wait of each format and its rate over PNG; the
    median LMDB (lz4) gain; whether lz4 paid against the raw LMDB; the smallest store on disk."""
    ratios = throughput_ratios(rate, formats, worker_counts, batch_sizes)
    lines = []
    for w in worker_counts:
        for b in batch_sizes:
            if _rate(wait, w, b, "png") is None:
                lines.append(f"{workers_label(w)}, batch {b}: PNG not measured (left out)")
                continue
            parts = [f"{workers_label(w)}, batch {b}: data wait PNG "
                     f"{1e3 * summary_median(wait, num_workers=w, batch_size=b, format='png'):.2f} ms"]
            for f in formats:
                if f != "png" and f"{f}_w{w}_b{b}" in ratios:
                    fw = summary_median(wait, num_workers=w, batch_size=b, format=f)
                    parts.append(f"{f} {1e3 * fw:.2f} ms (throughput {ratios[f'{f}_w{w}_b{b}']:.2f}× PNG)")
            lines.append("; ".join(parts))
    lz = [v for k, v in ratios.items() if k.startswith("lmdb_w")]
    if lz:
        lines.append(f"LMDB (lz4) throughput over PNG: median {median(lz):.2f}× across {len(lz)} settings "
                     f"(range {min(lz):.2f}–{max(lz):.2f}×).")
    s = store.set_index("format")
    pairs = [(w, b) for w in worker_counts for b in batch_sizes
             if _rate(rate, w, b, "lmdb") is not None and _rate(rate, w, b, "lmdb_raw") is not None]
    if "lz4_ratio" in store.attrs and {"lmdb", "lmdb_raw"} <= set(formats) and pairs:
        rel = [_rate(rate, w, b, "lmdb") / _rate(rate, w, b, "lmdb_raw") for w, b in pairs]
        at = "" if len(pairs) == len(worker_counts) * len(batch_sizes) else \
            f" (at batch {', '.join(str(b) for b in sorted({b for _, b in pairs}))} only)"
        lines.append(f"lz4 shrank the LMDB by {store.attrs['lz4_ratio']:.2f}× on disk "
                     f"({s.loc['lmdb_raw', 'MiB']:.1f} → {s.loc['lmdb', 'MiB']:.1f} MiB); lz4 LMDB ran at "
                     f"{min(rel):.2f}–{max(rel):.2f}× the raw LMDB's throughput{at}: compression "
                     f"{'paid' if min(rel) > 1.05 else 'did not pay'} on this warm page cache.")
    lines.append(f"smallest on disk here: {s['bytes'].idxmin()} ("
                 + ", ".join(f"{f} {s.loc[f, 'MiB']:.1f} MiB" for f in formats) + ").")
    return lines


def payload(*, profile: str, device, model: str, df, store, ratios: dict, verify: bool, map_growth: dict,
            spend: dict | None = None) -> dict:
    """Notebook 02's recorded results (the keys tests/notebooks and feedlab.report.claims read); ``spend``:
    :func:`~feedlab.experiments._grid_spend.spend_record` (precision, budget, settings left out)."""
    return {
        "notebook": "02_lmdb_vs_png", "profile": profile, "device": str(device), "model": model,
        "formats": sorted(df["format"].unique().tolist()),
        "batch_sizes": sorted(int(b) for b in df["batch_size"].unique()),
        "worker_counts": sorted(int(w) for w in df["num_workers"].unique()),
        "throughput_ratio_vs_png": ratios,
        "bytes_on_disk": {r.format: int(r.bytes) for r in store.itertuples()},
        "build_s": {r.format: float(r.build_s) for r in store.itertuples()},
        "lz4_ratio": float(store.attrs.get("lz4_ratio", float("nan"))),
        "verify_checksums": verify,  # were the timed reads checked against the per-sample checksums?
        "lmdb_map_growth": map_growth,  # an LMDB written from a 64 KiB map: does it grow?
        **(spend or {}),
    }
