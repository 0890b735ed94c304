"""Ranks on one host share the OS page cache: measured.

:func:`page_cache_share` drops the store's files from the page cache (``cache.evict``:
``posix_fadvise`` DONTNEED, checked with ``mincore``), then starts ``R`` processes on this
host, each reading its rank's share of the set (``ranks.make_rank_loader``, exactly once,
``split`` as given, 0 workers so the rank itself maps the files) for a cold epoch and then
a warm one (the next epoch's order: the ranks now read chunks other ranks brought in).
Between the epochs, with every rank paused at a barrier, the parent counts the store's
resident bytes (``mincore``). After the warm epoch each rank reads its own memory:
``/proc/self/smaps_rollup`` (Rss, Pss of the whole process) and, from ``/proc/self/smaps``,
the Rss / Pss / Shared_Clean of its mappings of the store's files. A page mapped by ``k``
processes counts fully in each one's Rss but ``1/k`` in each Pss: summed over ranks, Rss
above Pss is pages shared, not copied.

Returned fields (documented, checked by the tests): ``file_bytes``, ``requested_bytes_cold``
and ``requested_bytes_total`` (Σ over ranks of samples read × store bytes per sample),
``resident_bytes_before`` / ``_after_cold`` / ``_after_warm`` (``None`` without
``mincore``), ``eviction`` (the :class:`cache.EvictionReport` as a dict), ``per_rank``
(samples, cold and warm wall and samples/s, Rss / Pss of the process and of the store's
maps in bytes, ``None`` where ``/proc`` lacks them; ``warm_read_cold_by_others``: the share of
its warm-epoch samples another rank read in the cold epoch), ``map_rss_sum`` / ``map_pss_sum``.
"""

from __future__ import annotations

import mmap
import multiprocessing as mp
import os
import traceback
from pathlib import Path
from time import perf_counter

from feedlab import cache
from feedlab import pipeline as pl

_KEYS = ("Rss", "Pss", "Shared_Clean", "Private_Clean")


def _kb_fields(lines, keys=_KEYS) -> dict:
    out = {}
    for line in lines:
        k, _, rest = line.partition(":")
        if k in keys and rest.strip().endswith("kB"):
            out[k] = out.get(k, 0) + 1024 * int(rest.split()[0])
    return out


def smaps_rollup() -> dict | None:
    """Rss, Pss, … (bytes) of this process, or None where ``/proc/self/smaps_rollup`` is missing."""
    try:
        return _kb_fields(Path("/proc/self/smaps_rollup").read_text().splitlines())
    except OSError:
        return None


def map_usage(paths) -> dict | None:
    """Rss, Pss, Shared_Clean, Private_Clean (bytes) summed over this process's mappings of ``paths``."""
    want = {str(Path(p).resolve()) for p in paths}
    try:
        text = Path("/proc/self/smaps").read_text()
    except OSError:
        return None
    out, take = dict.fromkeys(_KEYS, 0), False
    for line in text.splitlines():
        head = line.split(maxsplit=5)
        if head and "-" in head[0] and ":" not in head[0]:      # a mapping's header line
            take = len(head) == 6 and head[5].strip() in want
        elif take:
            for k, v in _kb_fields([line]).items():
                out[k] += v
    return out


def resident_bytes(paths) -> int | None:
    """Bytes of ``paths`` in the page cache (``mincore``; each file's count capped at its size)."""
    total = 0
    for p in paths:
        r = cache.resident_pages([p])
        if r is None:
            return None
        total += min(r[0] * mmap.PAGESIZE, Path(p).stat().st_size)
    return total


def _rank(rank, world, data, spec, seed, split, share, files, barrier, queue, timeout):
    try:
        if share and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, share)
        from feedlab.scale.ranks import make_rank_loader

        ds = pl.open_dataset(data, spec)
        getattr(ds, "dataset", ds).verify = False
        loader, sampler = make_rank_loader(ds, spec, rank, world, seed=seed, even=False, split=split)
        row = {"rank": rank, "split": sampler.split, "cores": list(share or [])}
        for e, name in ((0, "cold"), (1, "warm")):
            sampler.set_epoch(e)
            row[f"{name}_indices"] = list(iter(sampler))
            barrier.wait(timeout)                              # start together
            t, k = perf_counter(), 0
            for lr, _hr in loader:
                k += len(lr)
            wall = perf_counter() - t
            row.update({f"{name}_s": wall, f"{name}_samples": k, f"{name}_samples_per_s": k / wall if wall > 0 else 0.0})
            barrier.wait(timeout)                              # done: the parent counts resident pages
            barrier.wait(timeout)
        proc, maps = smaps_rollup(), map_usage(files)          # every rank still maps what it read
        barrier.wait(timeout)
        row.update({"rss": (proc or {}).get("Rss"), "pss": (proc or {}).get("Pss"),
                    "map_rss": None if maps is None else maps["Rss"], "map_pss": None if maps is None else maps["Pss"],
                    "map_shared_clean": None if maps is None else maps["Shared_Clean"]})
        queue.put(row)
    except Exception as exc:  # one line to the parent; the barrier is broken so nobody waits forever
        queue.put({"rank": rank, "error": f"{type(exc).__name__}: {exc}",
                   "where": traceback.format_exc().strip().splitlines()[-2:]})
        barrier.abort()


def page_cache_share(data, spec: pl.PipelineSpec, ranks: int, seed: int = 0, split: str = "auto",
                     cores: list[int] | None = None, evict_first: bool = True, timeout_s: float = 300) -> dict:
    """See the module doc. ``spec.num_workers`` is set to 0 (the rank maps the files itself)."""
    from feedlab.scale.ranks import core_shares

    if ranks < 1:
        raise ValueError(f"ranks {ranks}: need >= 1")
    if not Path(data).exists():
        raise FileNotFoundError(f"{data}: no such data set; build it with `python -m data_prep sr --out {data}`")
    spec = spec.replace(num_workers=0, persistent_workers=False, prefetch_factor=None, device="cpu")
    ds = pl.open_dataset(data, spec)
    base = getattr(ds, "dataset", ds)
    n = len(ds)
    files = sorted({Path(f).resolve() for f in (base.store_files(range(n)) or [])})
    if not files or n == 0:
        raise ValueError(f"{data} as {spec.format}: no store files to measure")
    file_bytes = sum(f.stat().st_size for f in files)
    per_sample = file_bytes / n
    ev = cache.evict(files) if evict_first else None
    before = resident_bytes(files)
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    barrier, queue = ctx.Barrier(ranks + 1), ctx.Queue()
    shares = core_shares(ranks, cores) if hasattr(os, "sched_getaffinity") else [None] * ranks
    procs = [ctx.Process(target=_rank, args=(r, ranks, str(data), spec, seed, split, shares[r], [str(f) for f in files],
                                             barrier, queue, timeout_s), daemon=True) for r in range(ranks)]
    for p in procs:
        p.start()
    resident = {}
    try:
        for name in ("cold", "warm"):
            barrier.wait(timeout_s)
            barrier.wait(timeout_s)
            resident[name] = resident_bytes(files)
            barrier.wait(timeout_s)
        barrier.wait(timeout_s)
    except Exception:  # a rank failed (it broke the barrier) or hung: its line is in the queue
        pass
    rows = []
    for _ in range(ranks):
        try:
            rows.append(queue.get(timeout=timeout_s if len(resident) == 2 else 10))
        except Exception:
            break
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    errors = [r for r in rows if "error" in r]
    if errors or len(rows) != ranks:
        why = errors[0]["error"] if errors else f"{ranks - len(rows)} rank(s) gave no result (exit codes " \
              f"{[p.exitcode for p in procs]})"
        raise ChildProcessError(f"page-cache run of {ranks} ranks on {data} as {spec.format} failed: {why}")
    rows.sort(key=lambda r: r["rank"])
    for r in rows:
        r["requested_bytes_cold"] = r["cold_samples"] * per_sample
        r["requested_bytes_warm"] = r["warm_samples"] * per_sample
    for r in rows:                                             # how much of the warm epoch others read cold
        others = {i for o in rows if o is not r for i in o["cold_indices"]}
        warm = r["warm_indices"]
        r["warm_read_cold_by_others"] = sum(i in others for i in warm) / len(warm) if warm else 0.0
    for r in rows:
        del r["cold_indices"], r["warm_indices"]

    def _sum(k):
        vals = [r[k] for r in rows]
        return None if any(v is None for v in vals) else int(sum(vals))

    return {"ranks": ranks, "format": spec.format, "split": rows[0]["split"], "samples": n, "files": len(files),
            "file_bytes": int(file_bytes), "mmap": _is_mmap(spec.format),
            "requested_bytes_cold": float(sum(r["requested_bytes_cold"] for r in rows)),
            "requested_bytes_total": float(sum(r["requested_bytes_cold"] + r["requested_bytes_warm"] for r in rows)),
            "resident_bytes_before": before, "resident_bytes_after_cold": resident.get("cold"),
            "resident_bytes_after_warm": resident.get("warm"),
            "eviction": ev.as_dict() if ev is not None else None, "evicted": bool(ev is not None and ev.ok),
            "map_rss_sum": _sum("map_rss"), "map_pss_sum": _sum("map_pss"), "per_rank": rows}


def _is_mmap(fmt: str) -> bool:
    from feedlab.formats import get_format

    return bool(get_format(fmt).mmap)


def readings(out: dict, tol: float = 0.10) -> list[str]:
    """Lines computed from one :func:`page_cache_share` result; ``tol``: how far Σ Pss of the store's
    maps may sit above the resident bytes and still read as "held once" (page rounding, read-ahead)."""
    mib = 2 ** 20
    R = out["ranks"]
    lines = [f"Page cache, {R} ranks on one host, {out['format']} split by {out['split']}: the ranks asked for "
             f"{out['requested_bytes_total'] / mib:.1f} MiB over a cold and a warm epoch of a "
             f"{out['file_bytes'] / mib:.1f} MiB store."]
    res = out["resident_bytes_after_warm"]
    if res is None:
        lines.append("  resident bytes: not measured here (no mincore).")
    else:
        cold_state = ("evicted first, checked with mincore" if out["evicted"] else
                      "NOT evicted (the file system ignored the hint, or eviction off): the 'cold' epoch was warm")
        lines.append(f"  resident after the cold epoch {out['resident_bytes_after_cold'] / mib:.1f} MiB, after the warm "
                     f"{res / mib:.1f} MiB (before: {out['resident_bytes_before'] / mib:.1f} MiB; {cold_state}); "
                     f"read {out['requested_bytes_total'] / max(res, 1):.1f}× what the cache holds.")
    pr = out["per_rank"]
    cold = [r["cold_samples_per_s"] for r in pr]
    warm = [r["warm_samples_per_s"] for r in pr]
    lines.append("  per rank cold → warm samples/s: " + ", ".join(
        f"rank {r['rank']} {c:,.0f} → {w:,.0f} ({100 * r['warm_read_cold_by_others']:.0f}% of its warm samples "
        "read cold by another rank)" for r, c, w in zip(pr, cold, warm)) + "; one epoch each, no spread.")
    if out["mmap"] and out["map_rss_sum"] is not None and out["map_pss_sum"]:
        rss, pss = out["map_rss_sum"], out["map_pss_sum"]
        held = res is not None and pss <= res * (1 + tol)
        shared = rss > pss * (1 + tol)
        verdict = ("pages mapped by several ranks, held once: shared, not copied" if held and shared else
                   "no page mapped by two ranks in this run (each read its own part again): nothing shared to show"
                   if held else "Σ Pss above the resident bytes: not shown to be shared")
        lines.append(f"  store maps: Σ Rss {rss / mib:.1f} MiB vs Σ Pss {pss / mib:.1f} MiB over the ranks (×{rss / pss:.2f}; "
                     f"resident {(res or 0) / mib:.1f} MiB; tolerance {100 * tol:.0f}%): {verdict}.")
    return lines
