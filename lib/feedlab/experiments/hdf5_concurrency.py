"""Is a storage handle opened before the fork safe to read from DataLoader workers?

For each reader (an HDF5 file or an LMDB environment opened in the parent and
inherited by every worker, against the same store opened lazily in each
worker) and each start method (``fork``, ``spawn``) and worker count, a few
shuffled epochs are read through ``DataLoader`` and every sample that comes
back is compared, by index, with a reference (the PNG pair decoded in the
main process). Counted per epoch: samples right, samples wrong (any byte
differs), indices never delivered or delivered twice, and the exception
(type and message) that ended the epoch, if one did.

:func:`check_loader` is the counter; it takes any dataset that returns
``(lr, hr)`` per index, so a test can feed it a dataset that lies on purpose.

The readers under test are opened with ``verify=False``: the comparison with the
reference is the check, and the question is what the library's handle returns.
With feedlab's per-sample checksum check on (its default), a wrong sample from a
store that has a checksum table would raise instead of coming back, and the
chunked scratch copy has no table, so the readers would not be judged alike. The
reference itself is read with the check on.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset, default_collate

from feedlab import paths
from feedlab.formats import Hdf5Dataset, LmdbDataset, PngDataset, hdf5_store, lmdb_store
from feedlab.formats._common import LazyHandle
from feedlab.formats.lmdb_store import EnvOpener, open_env
from feedlab.pipeline import PipelineSpec, make_loader
from feedlab.plots import PALETTE, legend_outside
from feedlab.results import Results

EXPERIMENT = "hdf5_concurrency"
START_METHODS = ("fork", "spawn")
# reader name -> (format, opened in the parent?)
READERS = {
    "hdf5_parent": ("hdf5", True),
    "hdf5_per_worker": ("hdf5", False),
    # the same samples in a chunked (one sample per chunk), gzip-compressed file:
    # reads then walk the chunk index (B-tree) and the chunk cache, shared state
    # the contiguous layout never touches
    "hdf5_chunked_parent": ("hdf5_chunked", True),
    "hdf5_chunked_per_worker": ("hdf5_chunked", False),
    "lmdb_parent": ("lmdb", True),
    "lmdb_per_worker": ("lmdb", False),
    # per-worker reopen that leaves the inherited env open (the library's reader
    # before it learned to close it): py-lmdb refuses a second open in one process
    "lmdb_reopen_naive": ("lmdb_naive", False),
}


class Indexed(Dataset):
    """``(index, lr, hr)`` per index, so a batch can be checked whatever the order."""

    def __init__(self, base: Dataset):
        self.base = base

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i):
        lr, hr = self.base[i]
        return int(i), np.asarray(lr), np.asarray(hr)


class _ParentEnv:
    """Stands in for the lazy per-process opener: always the one env opened in the parent."""

    def __init__(self, env):
        self.env = env

    def get(self):
        return self.env

    def close(self) -> None:
        self.env.close()


class LmdbParentDataset(LmdbDataset):
    """The LMDB reader with its environment opened once in ``__init__`` and used by
    every forked worker (what the 000 write-up's code did; LMDB's documentation
    says an environment must not be used in a child after ``fork``)."""

    def __init__(self, root, as_tensor: bool = False, name: str = "lmdb"):
        super().__init__(root, as_tensor=as_tensor, name=name)
        _close_cached_envs()  # LMDB allows one open env per path per process
        self._env = _ParentEnv(open_env(str(self.path)))

    def close(self) -> None:
        self._env.close()
        super().close()


def _close_cached_envs() -> None:
    close = getattr(lmdb_store, "close_envs", None)
    if close is not None:
        close()


def write_chunked_hdf5(scratch, reference: tuple[np.ndarray, np.ndarray]) -> Path:
    """Write the reference samples as a chunked, gzip-compressed ``sr.h5`` under ``scratch``."""
    scratch = Path(scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    lr, hr = reference
    hdf5_store.write(scratch, list(zip(lr, hr)), chunks=1, compression="gzip")
    return scratch


class LmdbNaiveReopen(LmdbDataset):
    """Reopens the environment in each worker but leaves the one inherited from the
    parent open (a plain per-process lazy handle)."""

    def __init__(self, root, as_tensor: bool = False, name: str = "lmdb"):
        super().__init__(root, as_tensor=as_tensor, name=name)

        _close_cached_envs()
        self._env = LazyHandle(EnvOpener(str(self.path)))

    def close(self) -> None:
        self._env.close()
        super().close()


def open_reader(root, reader: str, chunked_root=None, verify: bool = False) -> Dataset:
    """The dataset ``reader`` names; ``verify``: feedlab's per-sample checksum check (off:
    a wrong sample comes back as the handle returned it, for :func:`check_loader` to count)."""
    ds = _open_reader(root, reader, chunked_root)
    ds.verify = bool(verify)
    return ds


def _open_reader(root, reader: str, chunked_root=None) -> Dataset:
    fmt, parent = READERS[reader]
    if fmt == "lmdb_naive":
        return LmdbNaiveReopen(root)
    if fmt == "hdf5_chunked":
        if chunked_root is None:
            raise ValueError(f"{reader}: needs the chunked copy (run(..., scratch_dir=...))")
        return Hdf5Dataset(chunked_root, open_in_parent=parent)
    if fmt == "hdf5":
        return Hdf5Dataset(root, open_in_parent=parent)
    return LmdbParentDataset(root) if parent else LmdbDataset(root)


def reference_arrays(root, count: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every ``(lr, hr)`` pair decoded from the PNGs in this process, as two NHWC arrays."""
    png = PngDataset(root)
    n = len(png) if count is None else min(count, len(png))
    return png.read_batch(range(n))


@dataclass
class EpochCheck:
    epoch: int
    expected: int
    delivered: int = 0
    right: int = 0
    wrong: int = 0
    missing: int = 0
    duplicated: int = 0
    error: str = ""            # "TypeName: message" of the exception that ended the epoch
    wrong_indices: list[int] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def all_right(self) -> bool:
        return not self.error and self.right == self.expected and not (self.wrong or self.missing
                                                                        or self.duplicated)


def _error_name(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()
    # DataLoader re-raises worker errors with the worker traceback in the message:
    # keep the first and the last line (the original exception)
    text = msg[0] if msg else ""
    if len(msg) > 1:
        text = f"{msg[0]} ... {msg[-1]}"
    return f"{type(exc).__name__}: {_relative(text)[:300]}"


def _relative(text: str) -> str:
    """Files named relative to the repository before any cut: a record never ends in half a machine path."""
    return text.replace(str(paths.REPO_ROOT) + "/", "")


def check_loader(dataset: Dataset, reference: tuple[np.ndarray, np.ndarray], num_workers: int,
                 start_method: str | None = "fork", epochs: int = 1, batch_size: int = 16,
                 seed: int = 0, timeout_s: float = 120.0) -> list[EpochCheck]:
    """Read ``epochs`` shuffled epochs of ``dataset`` through a DataLoader and compare
    every returned sample with ``reference[0][i], reference[1][i]``.

    An exception (in a worker, or while starting workers, e.g. pickling a handle
    for ``spawn``) ends that epoch; it is recorded, the undelivered indices count
    as missing, and the next epoch is tried.
    """
    ref_lr, ref_hr = reference
    n = len(dataset)
    if len(ref_lr) < n:
        raise ValueError(f"reference holds {len(ref_lr)} samples, dataset {n}")
    ctx = mp.get_context(start_method) if (num_workers > 0 and start_method) else None
    g = torch.Generator()
    g.manual_seed(seed)

    def new_loader():
        # persistent workers: one start-up for all epochs (spawn start-up costs seconds)
        # through the loader registry (kind "dataloader"); the experiment's own knobs are DataLoader
        # options: the start method under test, one generator across re-created loaders, the deadline
        spec = PipelineSpec(batch_size=batch_size, num_workers=num_workers, persistent_workers=num_workers > 0,
                            device="cpu")
        return make_loader(Indexed(dataset), spec, collate_fn=default_collate, generator=g,
                           multiprocessing_context=ctx, timeout=timeout_s if num_workers > 0 else 0)

    loader = None
    out = []
    for epoch in range(epochs):
        if loader is None:
            loader = new_loader()
        chk = EpochCheck(epoch=epoch, expected=n)
        seen = np.zeros(n, dtype=np.int64)
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():  # spawn pickling a parent-opened handle is the experiment: its
                warnings.filterwarnings(     # error is recorded below; torch's warning would say it twice
                    "ignore", message="Got pickle error when attempting to start a worker", category=UserWarning)
                batches = iter(loader)
            for idx, lr, hr in batches:
                idx = idx.numpy().astype(np.int64)
                lr = lr.numpy()
                hr = hr.numpy()
                k = len(idx)
                chk.delivered += k
                ok_idx = (idx >= 0) & (idx < n)
                bad = ~ok_idx
                if ok_idx.any():
                    good = np.flatnonzero(ok_idx)
                    same_lr = lr.shape[1:] == ref_lr.shape[1:] and hr.shape[1:] == ref_hr.shape[1:]
                    if same_lr:
                        d_lr = (lr[good] != ref_lr[idx[good]]).reshape(len(good), -1).any(axis=1)
                        d_hr = (hr[good] != ref_hr[idx[good]]).reshape(len(good), -1).any(axis=1)
                        bad[good] = d_lr | d_hr
                    else:
                        bad[good] = True
                    np.add.at(seen, idx[good], 1)
                nbad = int(bad.sum())
                chk.wrong += nbad
                chk.right += k - nbad
                if nbad:
                    chk.wrong_indices.extend(int(i) for i in idx[bad][:20])
        except Exception as exc:  # noqa: BLE001 - what goes wrong is the measurement
            chk.error = _error_name(exc)
            _shutdown(loader)
            loader = None  # the next epoch starts fresh workers
        chk.seconds = time.perf_counter() - t0
        chk.missing = int((seen == 0).sum())
        chk.duplicated = int(np.clip(seen - 1, 0, None).sum())
        # an index seen twice, once right and once wrong, is counted in both right and wrong
        chk.right = min(chk.right, n)
        chk.wrong_indices = chk.wrong_indices[:20]
        out.append(chk)
    _shutdown(loader)
    return out


def _shutdown(loader) -> None:
    it = getattr(loader, "_iterator", None) if loader is not None else None
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()


def touch_in_parent(dataset: Dataset, count: int = 8) -> None:
    """Read a few samples in the parent before the workers start (as a notebook that
    inspects its data set first would): the inherited handle then carries state."""
    for i in range(min(count, len(dataset))):
        dataset[i]


def pickle_check(root, readers: Sequence[str] = tuple(READERS), chunked_root=None) -> dict[str, str]:
    """What ``spawn`` (and ``forkserver``) must do with a dataset: pickle it for the
    worker. Per reader: ``"ok"`` or the error it raises, named (milliseconds, no workers)."""
    import pickle

    out = {}
    for reader in readers:
        if READERS[reader][0] == "hdf5_chunked" and chunked_root is None:
            continue
        ds = open_reader(root, reader, chunked_root)
        try:
            touch_in_parent(ds, 1)
            pickle.dumps(Indexed(ds))
            out[reader] = "ok"
        except Exception as exc:  # noqa: BLE001
            out[reader] = _error_name(exc)
        finally:
            close = getattr(ds, "close", None)
            if close:
                close()
    return out


def versions() -> dict:
    import h5py
    import lmdb

    return {"h5py": h5py.version.version, "hdf5": h5py.version.hdf5_version,
            "h5py_info": h5py.version.info.strip(), "lmdb_py": lmdb.__version__,
            "lmdb_lib": ".".join(map(str, lmdb.version())), "torch": torch.__version__,
            "default_start_method": mp.get_start_method(allow_none=True) or mp.get_context().get_start_method(),
            "start_methods": mp.get_all_start_methods()}


def run(root, readers: Sequence[str] = tuple(READERS), worker_counts: Sequence[int] = (2, 3, 4),
        start_methods: Sequence[str] = START_METHODS, epochs: int = 3, batch_size: int = 16,
        count: int | None = None, touch: bool = True, scratch_dir=None,
        log: Callable[[str], None] | None = print, verify: bool = False):
    """The full grid. Returns ``(Results, checks)`` where ``checks`` is a list of dicts,
    one per (reader, start method, workers, epoch). ``verify``: see :func:`open_reader`."""
    from torch.utils.data import Subset

    reference = reference_arrays(root, count)
    n = len(reference[0])
    chunked_root = None
    if any(READERS[r][0] == "hdf5_chunked" for r in readers):
        if scratch_dir is None:
            raise ValueError("the hdf5_chunked readers need scratch_dir for their copy of the samples")
        chunked_root = write_chunked_hdf5(Path(scratch_dir) / "hdf5_chunked", reference)
    res = Results()
    checks = []
    for reader in readers:
        fmt, parent = READERS[reader]
        for method in start_methods:
            if method not in mp.get_all_start_methods():
                if log:
                    log(f"{method}: not available on this platform")
                continue
            for w in worker_counts:
                ds = open_reader(root, reader, chunked_root, verify)
                if touch:
                    touch_in_parent(ds)
                data = ds if n == len(ds) else Subset(ds, range(n))
                for chk in check_loader(data, reference, w, method, epochs, batch_size):
                    row = {"reader": reader, "format": fmt, "opened_in_parent": parent,
                           "start_method": method, "num_workers": w, **asdict(chk)}
                    checks.append(row)
                    params = dict(reader=reader, format=fmt, opened_in_parent=parent,
                                  start_method=method, num_workers=w, batch_size=batch_size,
                                  error=chk.error.split(":")[0] if chk.error else "")
                    for metric in ("right", "wrong", "missing", "duplicated", "delivered", "expected"):
                        res.add(EXPERIMENT, reader, metric, getattr(chk, metric), "samples",
                                repeat=chk.epoch, **params)
                    res.add(EXPERIMENT, reader, "epoch_s", chk.seconds, "s", repeat=chk.epoch, **params)
                    if log:
                        log(f"{reader:16s} {method:5s} w={w} epoch {chk.epoch}: right {chk.right}/{n}, "
                            f"wrong {chk.wrong}, missing {chk.missing}"
                            + (f", error {_relative(chk.error)[:120]}" if chk.error else ""))
                close = getattr(ds, "close", None)
                if close:
                    close()
    return res, checks


def tally(checks: list[dict]):
    """Per (reader, start method, workers): epochs, samples expected, right, wrong,
    missing, epochs that raised, and the first error."""
    import pandas as pd

    df = pd.DataFrame(checks)
    if df.empty:
        return df
    df["raised"] = df["error"].astype(bool)
    g = df.groupby(["reader", "opened_in_parent", "start_method", "num_workers"], sort=False)
    out = g.agg(epochs=("epoch", "count"), expected=("expected", "sum"), right=("right", "sum"),
                wrong=("wrong", "sum"), missing=("missing", "sum"), duplicated=("duplicated", "sum"),
                raised=("raised", "sum"),
                error=("error", lambda s: next((e for e in s if e), ""))).reset_index()
    out["all_right"] = (out["right"] == out["expected"]) & (out["wrong"] == 0) & (out["missing"] == 0) \
        & (out["raised"] == 0)
    return out


def plot(tab, ax=None):
    """Bars: samples returned wrong (or missing) *without an error*, per reader, workers and
    start method: the silent corruption. A setting that raised an error is a loud failure
    and is drawn as a mark, not as a bar of bad samples."""
    import matplotlib.pyplot as plt


    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.2))
    tab = tab.copy()
    raised_any = tab["raised"].fillna(0) > 0
    # missing samples of a run that raised are the error's doing, not silent corruption
    tab["silent"] = tab["wrong"] + tab["missing"].where(~raised_any, 0)
    tab["label"] = (tab["reader"].str.replace("per_worker", "per-worker", regex=False)
                    .str.replace("_", "\n", regex=False) + "\n(" + tab["start_method"] + ")")
    labels = list(dict.fromkeys(tab["label"]))
    workers = sorted(tab["num_workers"].unique())
    width = 0.8 / max(1, len(workers))
    top = max(1.0, float(tab["silent"].max()))
    raised_label = "raised an error (a loud failure)"
    for j, w in enumerate(workers):
        part = tab[tab["num_workers"] == w].set_index("label").reindex(labels)
        x = np.arange(len(labels)) + (j - (len(workers) - 1) / 2) * width
        vals = part["silent"].fillna(0).to_numpy()
        raised = part["raised"].fillna(0).to_numpy() > 0
        ax.bar(x, vals, width, label=f"{w} workers: wrong without an error", color=PALETTE[j % len(PALETTE)])
        if raised.any():
            ax.scatter(x[raised], vals[raised] + top * 0.04, marker="X", s=36, color="#333333", zorder=3,
                       label=raised_label)
            raised_label = None  # one legend entry
        for xi, (v, exp, r) in enumerate(zip(vals, part["expected"].fillna(0), raised)):
            ax.annotate(f"{int(v)}/{int(exp)}", (x[xi], v + (top * 0.08 if r else 0)), xytext=(0, 2),
                        textcoords="offset points", ha="center", fontsize=6.5, rotation=90, va="bottom")
    ax.set_xticks(np.arange(len(labels)))
    ax.set_xticklabels(labels, fontsize=7.5)
    ax.set_ylabel("samples returned wrong or missing\nwithout an error (all epochs)")
    ax.set_ylim(0, top * 1.6)
    legend_outside(ax, "right", fontsize=7.5)
    return ax


# the reading, figure title and payload of notebook 08 (a companion module keeps this one short)
from feedlab.experiments._hdf5_readings import payload, readings, title  # noqa: E402, F401
