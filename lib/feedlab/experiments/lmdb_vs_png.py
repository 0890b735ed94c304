"""Notebook 02: the same loader over PNG files, LMDB with lz4, and LMDB raw.

:func:`run_formats` times the grid (format × batch size × workers, one model);
:func:`storage_table` reads what ``data_prep pack`` recorded for each format
(bytes on disk, write seconds) and measures the PNG side itself.
"""

from __future__ import annotations

from typing import Sequence

from feedlab.experiments.loader_grid import grid, run_grid
from feedlab.results import Results

FORMATS = ("png", "lmdb", "lmdb_raw")


def run_formats(data_root, formats: Sequence[str], batch_sizes: Sequence[int], worker_counts: Sequence[int],
                model: str = "auto", repeats: int = 3, max_samples: int | None = None, device=None,
                warmup: int = 1, log=None, verify: bool = False, **sizing) -> Results:
    """Per-phase timing for every format × batch size × worker count (stock collate,
    as the write-up did; pin_memory on with CUDA, off without).

    ``verify=False`` (the default here): the stores are read without the per-sample
    crc32c check that feedlab's readers do by default, so the rows compare the formats'
    read speed alone, as the write-up (which had no checksums) did."""
    from feedlab.experiments.loader_grid import default_device

    device = device if device is not None else default_device()
    settings = grid(format=list(formats), batch_size=list(batch_sizes), num_workers=list(worker_counts),
                    model=model, pin_memory=str(device).startswith("cuda"))
    return run_grid(data_root, settings, repeats=repeats, max_samples=max_samples, device=device,
                    warmup=warmup, experiment="lmdb_vs_png", log=log,
                    dataset_opts={f: {"verify": verify} for f in formats}, **sizing)


def storage_table(data_root, formats: Sequence[str] = FORMATS):
    """One row per format: bytes on disk, bytes per sample, build seconds, and the
    lz4 ratio (raw LMDB bytes / lz4 LMDB bytes) where both exist. PNG's build time
    is the data set's (crop, resize and encode); packed formats' is the pack
    write time from the manifest."""
    import pandas as pd

    from feedlab.formats import bytes_on_disk, read_manifest

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

    from feedlab.formats import lmdb_store, open_dataset

    ds = open_dataset(data_root, "png")
    n = min(int(samples), len(ds))
    with tempfile.TemporaryDirectory(prefix="feedlab-mapsize-") as tmp:
        try:
            path = lmdb_store.write(tmp, [ds[i] for i in range(n)], compress=False,
                                    map_size=start_bytes, name="lmdb_grow")
        except lmdb.Error as e:  # the write-up's case: a map too small to hold the data
            return {"samples": n, "start_bytes": start_bytes, "error": f"{type(e).__name__}: {e}"}
        data = sum(f.stat().st_size for f in Path(path).iterdir() if f.name == "data.mdb")
    return {"samples": n, "start_bytes": start_bytes, "data_bytes": data, "error": "",
            "doublings": max(0, math.ceil(math.log2(data / start_bytes))) if data else 0}


__all__ = ["FORMATS", "map_size_growth", "run_formats", "storage_table"]
