"""Your DataLoader, wrapped and read, never changed: the timed dataset and collate
(the stage instrument of :mod:`feedlab.stage`: wall and CPU per call, put on a queue from inside
workers too), the loader rebuilt around them by the one rule of :func:`feedlab.stage.rebuild`, what a batch is
(its length, its copy to the device, whatever types it holds), and the one-line check
that the loader is one the doctor can diagnose."""

from __future__ import annotations

import numpy as np

from feedlab import stage

from .guard import UserCodeError, user_call


class QueueSink:
    """The doctor's reading of the stage instrument (:mod:`feedlab.stage`): ``(stage, wall, cpu, n)``
    put on ``queue``, from inside workers too."""

    def __init__(self, queue):
        self.queue = queue

    def __call__(self, stage: str, t0: float, t1: float, cpu: float, n: int, indices=None) -> None:
        self.queue.put((stage, t1 - t0, cpu, n))


class TimedDataset(stage.TimedFetch):
    def __init__(self, dataset, queue):
        super().__init__(dataset, QueueSink(queue))


class TimedCollate(stage.TimedCollate):
    def __init__(self, fn, queue):
        super().__init__(fn, QueueSink(queue))


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


def timed_in_main(loader, queue):
    """``loader`` rebuilt by :func:`feedlab.stage.rebuild`'s rule around the timed dataset and collate
    (reporting to ``queue``), read in the main process (``num_workers=0``): the stages in isolation."""
    return stage.rebuild(loader, TimedDataset(loader.dataset, queue), TimedCollate(loader.collate_fn, queue),
                         num_workers=0)


def to_device(batch, device):
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):          # a namedtuple
        return type(batch)(*(to_device(b, device) for b in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        moved = {k: to_device(v, device) for k, v in batch.items()}
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


def batch_len(batch) -> int | None:
    """Samples in ``batch``: the first dimension of its first tensor or array; None if it holds none."""
    import torch

    if isinstance(batch, (torch.Tensor, np.ndarray)):
        return int(batch.shape[0]) if batch.ndim else None
    if isinstance(batch, dict):
        for v in batch.values():
            n = batch_len(v)
            if n is not None:
                return n
        return None
    if isinstance(batch, (list, tuple)):
        for v in batch:
            n = batch_len(v)
            if n is not None:
                return n
        return len(batch) if batch and not isinstance(batch[0], (list, tuple, dict)) else None
    return None


def drain(q) -> dict[str, list[tuple[float, float, int]]]:
    """The instrument's records on ``q``, per stage ``(wall, cpu, samples)``, until it stays empty 0.2 s."""
    out: dict[str, list] = {}
    while True:
        try:
            stage, w, c, n = q.get(timeout=0.2)
        except Exception:  # queue.Empty
            return out
        out.setdefault(stage, []).append((w, c, n))


def per_sample(recs) -> tuple[list[float], list[float]]:
    """(wall, CPU) seconds per sample of each record ``(wall, cpu, samples)``."""
    return [w / max(1, n) for w, _c, n in recs], [c / max(1, n) for _w, c, n in recs]


def stage_costs(queue) -> dict[str, tuple[list[float], list[float]]]:
    """Per stage the instrument times (:data:`feedlab.stage.INSTRUMENTED`), the (wall, CPU) seconds per
    sample of each call drained from ``queue``; the first call (a warm-up) is left out where there are more."""
    recs = drain(queue)
    return {name: per_sample(recs.get(name, [])[1:] or recs.get(name, [])) for name in stage.INSTRUMENTED}
