"""12_beyond: four loader behaviours the write-ups do not cover.

1. :func:`worker_memory` — memory of the main process and each worker across an
   epoch, for a dataset indexed by a Python list of path strings vs a numpy
   array of fixed-width bytes. Reading a list element writes its reference
   count, so a forked worker copies every page of the list and its strings it
   touches (copy-on-write): USS grows with the epoch. A numpy ``S`` array is one
   buffer whose pages are only read.
2. :func:`epoch_latency` — first-batch latency of every epoch with and without
   ``persistent_workers``, and :func:`stall_pattern` — per-batch data wait when
   one worker is slower than the others, for several ``prefetch_factor`` values.
3. :func:`batched_fetch` — ``__getitems__`` (one call per batch) vs per-item
   ``__getitem__`` on LMDB and the memory-mapped array.
4. :func:`sharded_reads` — WebDataset-style tar shards read in order (shard
   shuffle + a sample buffer) vs random access to one file per sample, warm and
   cold page cache.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from feedlab import formats as _formats
from feedlab import pipeline as pl
from feedlab.cache import evict, files_under
from feedlab.files import load_json
from feedlab.formats._common import atomic_output
from feedlab.results import Results
from feedlab.timing import owned_iterator, run_epoch, torch_threads  # noqa: E402

MiB = float(2 ** 20)


def one_torch_thread():
    """One intra-op thread in the main process (restored after): with every core busy
    in workers, a second OpenMP thread only waits for a core (see timing.main_threads_for)."""
    return torch_threads(1)

# ---------------------------------------------------------------- 1. worker memory


def synthetic_paths(n: int) -> list[str]:
    return [f"/data/train/class_{i % 1000:04d}/image_{i:09d}.jpg" for i in range(n)]


class ListIndexed(Dataset):
    """Indexed by a Python list of ``str`` (the common pattern)."""

    def __init__(self, paths: list[str]):
        self.paths = list(paths)

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        p = self.paths[i]
        return len(p)


class NumpyIndexed(Dataset):
    """Indexed by a numpy array of fixed-width bytes: one buffer, no per-item objects."""

    def __init__(self, paths: list[str]):
        width = max(len(p) for p in paths)
        self.paths = np.array([p.encode() for p in paths], dtype=f"S{width}")

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        p = self.paths[i].decode()
        return len(p)


def _int_collate(items):
    return torch.tensor(items)


def _mem(proc) -> dict:
    m = proc.memory_full_info()
    return {"rss": m.rss, "uss": m.uss, "pss": getattr(m, "pss", float("nan"))}


def worker_memory(n_items: int, num_workers: int = 2, batch_size: int = 1000, samples: int = 20,
                  variants: Sequence[str] = ("list", "numpy")) -> Results:
    """RSS/USS/PSS of the main process and each worker, sampled ``samples`` times
    across one epoch (rows: ``role`` main/worker k, ``progress`` 0..1)."""
    import gc

    import psutil

    res = Results()
    paths = synthetic_paths(n_items)
    for variant in variants:
        ds = ListIndexed(paths) if variant == "list" else NumpyIndexed(paths)
        gc.collect()
        loader = DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=num_workers,
                            collate_fn=_int_collate, generator=torch.Generator().manual_seed(0))
        me = psutil.Process()
        nb = len(loader)
        every = max(1, nb // samples)
        with owned_iterator(loader) as it:
            for k in range(nb):
                next(it)
                if k % every == 0 or k == nb - 1:
                    progress = (k + 1) / nb
                    procs = [("main", me)] + [(f"worker {j}", w) for j, w in enumerate(
                        sorted(me.children(), key=lambda p: p.pid)[:num_workers])]
                    for role, p in procs:
                        try:
                            m = _mem(p)
                        except psutil.Error:
                            continue
                        for metric, v in m.items():
                            res.add("worker_memory", variant, metric, v / MiB, "MiB", role=role,
                                    progress=round(progress, 4), batch=k, n_items=n_items, num_workers=num_workers)
        del loader
    return res


def memory_growth(df, variant: str, metric: str = "uss") -> dict[str, float]:
    """Per role: last minus first sample of ``metric`` (MiB) for ``variant``."""
    d = df[(df.variant == variant) & (df.metric == metric)].sort_values("progress")
    return {role: float(g.value.iloc[-1] - g.value.iloc[0]) for role, g in d.groupby("role")}


# ---------------------------------------------------------------- 2. epochs and stalls


class SkewedSleep(Dataset):
    """Each item costs ``item_s`` of wall time (a sleep: no CPU, so two cores do not
    limit it); items fetched by worker ``slow_worker`` cost ``slow_factor`` times more."""

    def __init__(self, n: int, item_s: float, slow_worker: int | None = None, slow_factor: float = 1.0):
        self.n, self.item_s = n, item_s
        self.slow_worker, self.slow_factor = slow_worker, slow_factor
        self.x = torch.zeros(3, 8, 8, dtype=torch.uint8)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        info = get_worker_info()
        slow = info is not None and info.id == self.slow_worker
        time.sleep(self.item_s * (self.slow_factor if slow else 1.0))
        return self.x


def _sleep_step(step_s: float) -> Callable:
    def on_batch(_i, _b):
        time.sleep(step_s)
    return on_batch


def epoch_latency(n: int, batch_size: int, item_s: float, step_s: float, num_workers: int, epochs: int,
                  repeats: int) -> Results:
    """First-batch latency (iter() to first batch) of each epoch, persistent_workers off/on."""
    res = Results()
    for persistent in (False, True):
        for r in range(repeats):
            loader = DataLoader(SkewedSleep(n, item_s), batch_size=batch_size, num_workers=num_workers,
                                persistent_workers=persistent)
            for e in range(epochs):
                t = run_epoch(loader, None, "cpu", on_batch=_sleep_step(step_s))
                variant = "persistent_workers=True" if persistent else "persistent_workers=False"
                res.add("epoch_latency", variant, "first_batch_s", t.first_batch_s, "s", repeat=r, epoch=e,
                        persistent_workers=persistent, num_workers=num_workers)
                res.add("epoch_latency", variant, "epoch_s", t.wall_s + t.first_batch_s, "s", repeat=r, epoch=e,
                        persistent_workers=persistent, num_workers=num_workers)
            del loader
    return res


def stall_pattern(n: int, batch_size: int, item_s: float, step_s: float, num_workers: int,
                  prefetch_factors: Sequence[int], slow_factor: float, repeats: int) -> Results:
    """Data wait of every batch when worker 0 is ``slow_factor`` times slower."""
    res = Results()
    for pf in prefetch_factors:
        for r in range(repeats):
            loader = DataLoader(SkewedSleep(n, item_s, slow_worker=0, slow_factor=slow_factor),
                                batch_size=batch_size, num_workers=num_workers, prefetch_factor=pf)
            t = run_epoch(loader, None, "cpu", on_batch=_sleep_step(step_s))
            for k, w in enumerate(t.phases_s[:, 0]):
                res.add("stall_pattern", f"prefetch_factor={pf}", "data_wait_s", float(w), "s", repeat=r,
                        batch=k, prefetch_factor=pf, num_workers=num_workers, slow_factor=slow_factor)
            res.add("stall_pattern", f"prefetch_factor={pf}", "samples_per_s", t.samples_per_s, "samples/s",
                    repeat=r, batch=-1, prefetch_factor=pf, num_workers=num_workers, slow_factor=slow_factor)
    return res


# ---------------------------------------------------------------- 3. batched fetch


class PerItemOnly(Dataset):
    """Hides the inner dataset's ``__getitems__``: the DataLoader then calls
    ``__getitem__`` once per index."""

    def __init__(self, ds):
        self.ds = ds

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        return self.ds[i]


def uses_getitems() -> bool:
    """Whether this torch's DataLoader calls ``__getitems__`` with auto-collation."""
    seen = []

    class Probe(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return i

        def __getitems__(self, idx):
            seen.append(list(idx))
            return list(idx)

    list(DataLoader(Probe(), batch_size=2, num_workers=0))
    return len(seen) == 2


def batched_fetch(root, formats: Sequence[str], batch_size: int, num_workers: Sequence[int], repeats: int,
                  warmup: int = 1, max_batches: int | None = None) -> Results:

    res = Results()
    with one_torch_thread():
        _batched_fetch(res, root, formats, batch_size, num_workers, repeats, warmup, max_batches)
    return res


def _batched_fetch(res, root, formats, batch_size, num_workers, repeats, warmup, max_batches):
    for fmt in formats:
        spec = pl.PipelineSpec(format=fmt, collate="fast", batch_size=batch_size, device="cpu")
        base = pl.open_dataset(root, spec)
        for mode in ("__getitems__", "__getitem__"):
            ds = base if mode == "__getitems__" else PerItemOnly(base)
            for w in num_workers:
                # the registry's DataLoader kind (pipeline.make_loader): seeded shuffle, the fast collate
                loader = pl.make_loader(ds, spec.replace(num_workers=w, persistent_workers=w > 0), seed=0)
                for _ in range(warmup):
                    run_epoch(loader, None, "cpu", max_batches=max_batches)
                for r in range(repeats):
                    t = run_epoch(loader, None, "cpu", max_batches=max_batches)
                    res.add("batched_fetch", f"{fmt} {mode}", "samples_per_s", t.samples_per_s, "samples/s",
                            repeat=r, format=fmt, fetch=mode, num_workers=w, batch_size=batch_size)
                del loader


# ---------------------------------------------------------------- 4. sharded sequential reads


def write_shards(root, shard_samples: int = 256, source: str = "npy_mmap") -> Path:
    """Tar shards under ``root/wds/`` (``shard-000000.tar`` ...), each sample as
    ``<key>.lr.u8``, ``<key>.hr.u8`` (raw HWC bytes) and ``<key>.json`` (shapes).
    Built in a temporary folder and renamed when complete; kept if present."""
    root = Path(root)
    final = root / "wds"
    if (final / "index.json").is_file():
        return final
    ds = _formats.open_dataset(root, source)
    n = len(ds)
    with atomic_output(final, is_dir=True) as tmp:
        shards = []
        for s, lo in enumerate(range(0, n, shard_samples)):
            name = f"shard-{s:06d}.tar"
            with tarfile.open(tmp / name, "w") as tar:
                for i in range(lo, min(lo + shard_samples, n)):
                    lr, hr = ds[i]
                    meta = json.dumps({"lr": list(lr.shape), "hr": list(hr.shape), "index": i}).encode()
                    for ext, data in (("lr.u8", np.ascontiguousarray(lr).tobytes()),
                                      ("hr.u8", np.ascontiguousarray(hr).tobytes()), ("json", meta)):
                        info = tarfile.TarInfo(f"{i:08d}.{ext}")
                        info.size = len(data)
                        info.mtime = 0
                        tar.addfile(info, io.BytesIO(data))
            shards.append(name)
        (tmp / "index.json").write_text(json.dumps({"shards": shards, "count": n,
                                                    "shard_samples": shard_samples}))
    return final


def _decode_wds(sample):
    meta = json.loads(sample["json"])
    lr = np.frombuffer(sample["lr.u8"], np.uint8).reshape(meta["lr"])
    hr = np.frombuffer(sample["hr.u8"], np.uint8).reshape(meta["hr"])
    return lr, hr


def wds_dataset(shard_dir, buffer: int = 256, seed: int = 0):
    import webdataset as wds

    shard_dir = Path(shard_dir)
    names = load_json(shard_dir / "index.json", "the shards' index")["shards"]   # one line, never a RecursionError
    urls = [str(shard_dir / n) for n in names]
    ds = wds.WebDataset(urls, shardshuffle=len(urls), seed=seed, empty_check=False)
    if buffer > 1:
        ds = ds.shuffle(buffer, seed=seed)
    return ds.map(_decode_wds)


def sharded_reads(root, batch_size: int, num_workers: int, repeats: int, buffer: int = 256,
                  cold: bool = True, shard_samples: int = 256) -> tuple[Results, dict]:
    """Samples/s of (a) wds shards, shard shuffle + ``buffer``-sample shuffle, and
    (b) random access to one .npy per sample, warm and (where eviction works) cold."""
    shard_dir = write_shards(root, shard_samples)
    res = Results()
    info = {"shard_dir": str(shard_dir), "cold": None}
    spec = pl.PipelineSpec(format="npy", collate="fast", batch_size=batch_size, num_workers=num_workers, device="cpu")
    variants = {
        # the shards are an iterable dataset (shard shuffle + a sample buffer): the registry's DataLoader
        # kind over it, unshuffled by the loader (the shards shuffle themselves)
        "wds shards (sequential)": (lambda: pl.make_loader(wds_dataset(shard_dir, buffer), spec, shuffle=False),
                                    files_under(shard_dir)),
        "npy per-sample files (random)": (lambda: pl.make_loader(pl.open_dataset(root, spec), spec, seed=0),
                                          files_under(Path(root) / "npy")),
    }
    caches = ["warm"]
    if cold:
        rep = evict(files_under(shard_dir)[:1])
        if rep.ok:
            caches.append("cold")
            info["cold"] = "posix_fadvise DONTNEED, checked with " + rep.verified
        else:
            info["cold"] = f"not measurable here: {rep.reason or rep.failed[:1]}"
    for name, (make, files) in variants.items():
        with one_torch_thread():
            run_epoch(make(), None, "cpu")  # warm-up: page cache, imports
            for cache in caches:
                for r in range(repeats):
                    if cache == "cold":
                        evict(files, verify=False)
                    t = run_epoch(make(), None, "cpu")
                    res.add("sharded_reads", name, "samples_per_s", t.samples_per_s, "samples/s", repeat=r,
                            cache=cache, num_workers=num_workers, batch_size=batch_size, buffer=buffer,
                            samples=t.samples)
    return res, info
