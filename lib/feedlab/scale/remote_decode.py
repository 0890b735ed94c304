"""Decode elsewhere: the same decode + augment as a Ray Data dataset, fed to the training
loop with ``iter_torch_batches``, against the DataLoader doing it in its workers.

Ray is an optional extra (``pip install -e .[ray]``); without it :func:`available`
says why and :func:`compare` returns no rows and that reason, so everything else runs.

The Ray side: a local Ray started here (``ray.init(num_cpus=...)``, no cluster needed);
each epoch's order is a seeded permutation of the sample ids (``ray.data.from_items``),
``map_batches`` runs :func:`decode_augment` (the dataset ``pipeline.open_dataset`` opens
for the spec: the format's decode and the spec's transform) as Ray tasks of one CPU each
(as many at once as ``ray.init``'s ``num_cpus``), and ``iter_torch_batches`` hands ``(lr, hr)`` uint8 NCHW batches to
``timing.run_epoch``, exactly as the DataLoader's ``fast`` collate does. What moving the
work costs: Ray's start-up, serialising the decoded batches into the object store and
back, its scheduling; what it can buy: decode on cores (or, on a cluster, machines) that
are not the trainer's.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from time import perf_counter

import numpy as np

from data_prep.ray_engine import available  # noqa: F401  (Ray's check, one home: re-exported)
from feedlab import monitor, paths
from feedlab import pipeline as pl
from feedlab.results import Results
from feedlab.timing import run_epoch

EXP = "remote_decode"


_OPEN: dict = {}


class Heavier:
    """``dataset`` with every sample read, decoded and transformed ``work`` times (the last one
    kept): more decode work per sample, the same wherever it runs (pickles to DataLoader workers)."""

    def __init__(self, dataset, work: int = 1):
        self.dataset, self.work = dataset, max(1, int(work))

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        for _ in range(self.work):
            sample = self.dataset[i]
        return sample


def decode_augment(batch: dict, root: str, spec: dict, seed: int, work: int = 1, where: bool = False) -> dict:
    """``map_batches`` function (a Ray task): ids → decoded, augmented pairs. Each Ray worker
    process opens the dataset once and keeps it (workers are reused across tasks and epochs).
    ``work`` > 1 reads, decodes and transforms each sample that many times (a heavier decode,
    the same in every arrangement: :class:`Heavier`); ``where`` adds a
    ``node`` column, the Ray node id that ran the task."""
    key = (root, tuple(sorted(spec.items())), seed)
    if key not in _OPEN:
        ds = pl.open_dataset(root, pl.PipelineSpec(**spec), seed=seed)
        getattr(ds, "dataset", ds).verify = False
        _OPEN[key] = ds
    ds = Heavier(_OPEN[key], work)
    pairs = [ds[int(i)] for i in batch["id"]]
    out = {"id": np.asarray(batch["id"]), "lr": np.stack([np.asarray(p[0]) for p in pairs]),
           "hr": np.stack([np.asarray(p[1]) for p in pairs])}
    if where:
        import ray

        out["node"] = np.array([ray.get_runtime_context().get_node_id().encode()] * len(pairs))
    return out


def _nchw(a):
    import warnings

    import torch

    with warnings.catch_warnings():  # Ray's arrays are read-only; the permuted copy is what we keep
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(np.ascontiguousarray(a)).permute(0, 3, 1, 2).contiguous()


def _collate():
    """``iter_torch_batches``' collate: ``(lr, hr)`` uint8 NCHW, as the ``fast`` collate gives."""
    from ray.data.collate_fn import NumpyBatchCollateFn

    class ToPair(NumpyBatchCollateFn):
        def __call__(self, batch: dict):
            return _nchw(batch["lr"]), _nchw(batch["hr"])

    return ToPair()


def ray_epoch(root, spec: pl.PipelineSpec, n: int, seed: int, epoch: int, with_ids: bool = False):
    """The epoch's iterable of ``(lr, hr)`` batches (``(ids, lr, hr)`` with ``with_ids``)."""
    import ray.data

    order = np.random.default_rng(seed + epoch).permutation(n)
    ds = ray.data.from_items([{"id": int(i)} for i in order])
    ds = ds.map_batches(decode_augment, fn_kwargs={"root": str(root), "spec": spec.as_dict(), "seed": seed},
                        batch_size=spec.batch_size, batch_format="numpy", num_cpus=1)
    if with_ids:
        return ds.iter_batches(batch_size=spec.batch_size, batch_format="numpy")
    return ds.iter_torch_batches(batch_size=spec.batch_size, collate_fn=_collate(), prefetch_batches=2)


def start(num_cpus: int) -> tuple[bool, float]:
    """Start a local Ray with ``num_cpus``; ``(started_here, seconds)``."""
    import ray
    from ray.data import DataContext

    if ray.is_initialized():
        return False, 0.0
    t = perf_counter()
    short = paths.ray_temp_dir()   # a long $TMPDIR: Ray's sockets there would pass AF_UNIX's 107 bytes
    ray.init(num_cpus=int(num_cpus), include_dashboard=False, log_to_driver=False, configure_logging=False,
             **({"_temp_dir": short} if short else {}))
    DataContext.get_current().enable_progress_bars = False
    return True, perf_counter() - t


#: Ray's loggers that talk while a measurement runs: one INFO line per dataset executed (naming the
#: session folder under /tmp), the progress-bar notice, the start-up's authentication notice
RAY_LOGGERS = ("ray", "ray.data")


@contextmanager
def quiet_ray_data(level: int = logging.ERROR):
    """Ray's and Ray Data's chatter off while measuring (errors still show); levels restored after.
    The executed notebook then shows the readings, not Ray's session paths."""
    logs = [logging.getLogger(n) for n in RAY_LOGGERS]
    logs += [lg for name, lg in logging.root.manager.loggerDict.items()
             if name.startswith("ray.data.") and isinstance(lg, logging.Logger)]
    old = [lg.level for lg in logs]
    for lg in logs:
        lg.setLevel(level)
    try:
        yield
    finally:
        for lg, lv in zip(logs, old):
            lg.setLevel(lv)


def check_once(root, spec: pl.PipelineSpec, n: int, seed: int = 0) -> dict:
    """One Ray epoch with ids: is every sample there exactly once?"""
    ids = np.concatenate([b["id"] for b in ray_epoch(root, spec, n, seed, 0, with_ids=True)])
    counts = np.bincount(ids, minlength=n)
    return {"samples": int(len(ids)), "missing": int((counts == 0).sum()), "repeated": int((counts > 1).sum()),
            "ok": bool(len(ids) == n and (counts == 1).all())}


def compare(root, spec: pl.PipelineSpec, num_cpus: int, epochs: int, warmup: int, seed: int = 0,
            log=print) -> tuple[Results, dict]:
    """Ray Data on ``num_cpus`` CPUs vs the DataLoader with as many workers, same
    spec (decode, transform, ``fast`` collate, model). Rows per timed epoch: samples/s and
    data-wait share; the info dict has Ray's start-up, the exactly-once check, or why not. ``warmup`` untimed
    epochs a side: on Ray's the exactly-once check is the first of them."""
    ok, why = available()
    info = {"available": ok, "reason": why, "num_cpus": int(num_cpus)}
    res = Results()
    if not ok:
        log(why)
        return res, info
    import ray

    spec = spec.replace(collate="fast", num_workers=int(num_cpus), persistent_workers=True,
                        device=pl.resolve_device(spec.device))
    ds = pl.open_dataset(root, spec, seed=seed)
    getattr(ds, "dataset", ds).verify = False
    n = len(ds)
    model, _loss, opt = pl.make_training(spec.model, spec.device)
    common = dict(format=spec.format, transform=spec.transform, batch_size=spec.batch_size, parallel=int(num_cpus),
                  model=spec.model, device=spec.device, samples_in_set=n)
    loader = pl.make_loader(ds, spec, seed=seed)
    for e in range(warmup + epochs):
        et = run_epoch(loader, model, spec.device, opt)
        if e >= warmup:
            _rows(res, "DataLoader", et, e - warmup, common)
    del loader
    with quiet_ray_data():
        started, init_s = start(num_cpus)
        info["ray_init_s"] = init_s
        try:
            info["check"] = check_once(root, spec, n, seed)
            # the check is an untimed epoch through the same decode tasks (Ray's workers started, their imports
            # done, the model warm from the DataLoader's epochs): it is the Ray side's first warm-up epoch
            for e in range(min(1, warmup), warmup + epochs):
                t = perf_counter()
                et = run_epoch(ray_epoch(root, spec, n, seed, e), model, spec.device, opt)
                if e >= warmup:
                    _rows(res, "Ray Data", et, e - warmup, common)
                    res.add(EXP, "Ray Data", "epoch_with_setup_s", perf_counter() - t, "s", repeat=e - warmup,
                            **common)
        finally:
            if started:
                monitor.note_own_tree()   # Ray's processes are ours: their CPU is not other load after they end
                ray.shutdown()
    return res, info


def _rows(res: Results, variant: str, et, k: int, common: dict) -> None:
    res.add(EXP, variant, "samples_per_s", et.samples_per_s, "samples/s", repeat=k, **common)
    res.add(EXP, variant, "data_wait_fraction", et.data_wait_fraction, "fraction", repeat=k, **common)
    res.add(EXP, variant, "first_batch_s", et.first_batch_s, "s", repeat=k, **common)


def readings(df, info: dict) -> list[str]:
    """Lines computed from the rows (or the reason nothing ran)."""
    if not info.get("available"):
        return [f"Ray Data part: {info.get('reason')}"]
    sps = df[df.metric == "samples_per_s"].groupby("variant").value.median()
    wait = df[df.metric == "data_wait_fraction"].groupby("variant").value.median()
    chk = info.get("check", {})
    out = [f"Ray Data check: {chk.get('samples')} samples in one epoch, {chk.get('missing')} missing, "
           f"{chk.get('repeated')} repeated ({'every sample once' if chk.get('ok') else 'NOT exactly once'}).",
           f"Ray start-up (ray.init): {info.get('ray_init_s', float('nan')):.1f} s, paid once."]
    if {"DataLoader", "Ray Data"} <= set(sps.index):
        r = sps["Ray Data"] / sps["DataLoader"]
        out.append(f"{info['num_cpus']} decode processes each: DataLoader {sps['DataLoader']:,.0f} samples/s "
                   f"(data wait {100 * wait['DataLoader']:.0f}%), Ray Data {sps['Ray Data']:,.0f} samples/s "
                   f"(data wait {100 * wait['Ray Data']:.0f}%): Ray ÷ DataLoader x{r:.2f} "
                   f"(both on this host's cores).")
    return out
