"""Your DataLoader, wrapped and read, never changed: the timed dataset and collate
(wall and CPU per call, put on a queue from inside workers too), the loader rebuilt
around them with the user's own settings (its ``timeout`` included), what a batch is
(its length, its copy to the device, whatever types it holds), and the one-line check
that the loader is one the doctor can diagnose."""

from __future__ import annotations

import time

import numpy as np

from .guard import UserCodeError, user_call


class _Timed:
    """``fn`` timed per call, records ``(stage, wall, cpu, n)`` put on ``queue``."""

    def __init__(self, queue, stage: str):
        self.queue, self.stage = queue, stage

    def _put(self, t0, c0, n):
        self.queue.put((self.stage, time.perf_counter() - t0, time.process_time() - c0, n))


class TimedDataset(_Timed):
    def __init__(self, dataset, queue):
        super().__init__(queue, "fetch")
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        t0, c0 = time.perf_counter(), time.process_time()
        item = self.dataset[i]
        self._put(t0, c0, 1)
        return item

    def __getitems__(self, indices):
        t0, c0 = time.perf_counter(), time.process_time()
        get = getattr(self.dataset, "__getitems__", None)
        items = get(list(indices)) if get is not None else [self.dataset[i] for i in indices]
        self._put(t0, c0, len(indices))
        return items


class TimedCollate(_Timed):
    def __init__(self, fn, queue):
        super().__init__(queue, "collate")
        self.fn = fn

    def __call__(self, items):
        t0, c0 = time.perf_counter(), time.process_time()
        out = self.fn(items)
        self._put(t0, c0, len(items))
        return out


# ---------------------------------------------------------------- what a loader is and yields


def check_loader(loader, limit_s: float | None = None) -> None:
    """One line when ``loader`` is not a DataLoader the doctor can rebuild, or is empty; a
    dataset's ``__len__`` that does not return within ``limit_s`` is :class:`Hung`, named."""
    from torch.utils.data import DataLoader, IterableDataset

    if not isinstance(loader, DataLoader):
        raise UserCodeError(f"the loader is a {type(loader).__name__}, not a torch.utils.data.DataLoader: "
                            "make_loader() must return the DataLoader itself")
    if isinstance(loader.dataset, IterableDataset):
        raise UserCodeError("the loader reads an IterableDataset, which the doctor cannot split by sample: "
                            "run your training script under `python -m feedlab.doctor --script train.py` instead")
    if loader.batch_sampler is None:
        raise UserCodeError("the loader has batch_size=None (no automatic batching): give it a batch_size")
    what = f"your dataset's __len__ ({type(loader.dataset).__name__})"
    if not callable(getattr(loader.dataset, "__len__", None)):
        raise UserCodeError(f"the loader's dataset ({type(loader.dataset).__name__}) has no __len__")
    n = user_call(what, len, loader.dataset, limit_s=limit_s)
    if n == 0 or user_call(f"{what}, through len(loader)", len, loader, limit_s=limit_s) == 0:
        raise UserCodeError(f"the loader is empty ({n} samples, {len(loader)} batches"
                            f"{', drop_last=True' if getattr(loader, 'drop_last', False) else ''}): "
                            "nothing to measure; point its dataset at your data")


def _rebuild(loader, dataset=None, collate_fn=None, num_workers: int | None = None, pin_memory=None):
    from torch.utils.data import DataLoader

    w = loader.num_workers if num_workers is None else num_workers
    kw = dict(batch_sampler=loader.batch_sampler, num_workers=w, collate_fn=collate_fn or loader.collate_fn,
              pin_memory=loader.pin_memory if pin_memory is None else pin_memory,
              worker_init_fn=loader.worker_init_fn, multiprocessing_context=loader.multiprocessing_context,
              timeout=loader.timeout if w > 0 else 0)
    if w > 0:
        kw.update(prefetch_factor=loader.prefetch_factor or 2, persistent_workers=False)
    return DataLoader(dataset if dataset is not None else loader.dataset, **kw)


def _to_device(batch, device):
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):          # a namedtuple
        return type(batch)(*(_to_device(b, device) for b in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        moved = {k: _to_device(v, device) for k, v in batch.items()}
        try:
            return type(batch)(moved)
        except Exception:  # a mapping type that cannot be built from a dict: a plain dict
            return moved
    to = getattr(batch, "to", None)       # a batch object with its own .to (e.g. BatchEncoding)
    if callable(to) and not isinstance(batch, (str, bytes, np.ndarray)):
        try:
            return to(device)
        except Exception:
            return batch
    return batch


def _batch_len(batch) -> int | None:
    """Samples in ``batch``: the first dimension of its first tensor or array; None if it holds none."""
    import torch

    if isinstance(batch, (torch.Tensor, np.ndarray)):
        return int(batch.shape[0]) if batch.ndim else None
    if isinstance(batch, dict):
        for v in batch.values():
            n = _batch_len(v)
            if n is not None:
                return n
        return None
    if isinstance(batch, (list, tuple)):
        for v in batch:
            n = _batch_len(v)
            if n is not None:
                return n
        return len(batch) if batch and not isinstance(batch[0], (list, tuple, dict)) else None
    return None


def _drain(q) -> dict[str, list[tuple[float, float, int]]]:
    out: dict[str, list] = {}
    while True:
        try:
            stage, w, c, n = q.get(timeout=0.2)
        except Exception:  # queue.Empty
            return out
        out.setdefault(stage, []).append((w, c, n))


def _per_sample(recs) -> tuple[list[float], list[float]]:
    return [w / max(1, n) for w, _c, n in recs], [c / max(1, n) for _w, c, n in recs]


def _shutdown(it) -> None:
    stop = getattr(it, "_shutdown_workers", None)
    if stop is not None:
        stop()
