"""Small helpers the contender modules share (datasets over the source, batch wrappers)."""

from __future__ import annotations

import os
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from feedlab.machines import usable_cores as cores

from .base import Source


class SRPairs:
    """A sized sequence of ``(lr, hr)`` over the source arrays (what the writers take)."""

    def __init__(self, source: Source):
        self.lr, self.hr = source.lr, source.hr

    def __len__(self) -> int:
        return len(self.lr)

    def __getitem__(self, i):
        if not 0 <= i < len(self.lr):
            raise IndexError(i)
        return self.lr[i], self.hr[i]


class ImageFolderIds(Dataset):
    """``(transform(PIL image), label, index)`` over the source JPEG paths (torchvision's
    ImageFolder plus the index, so a check can count identities)."""

    def __init__(self, source: Source, transform):
        self.paths = [str(p) for p in source.paths]
        self.labels = source.labels.tolist()
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image

        with Image.open(self.paths[i]) as im:
            img = self.transform(im.convert("RGB"))
        return img, self.labels[i], i


def generator(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def png_bytes(source: Source) -> int:
    root = Path(source.root)
    return sum((root / side / f"{i:06d}.png").stat().st_size for side in ("lr", "hr") for i in range(source.n))


def label_of(source: Source, ids) -> np.ndarray:
    return source.labels[np.asarray(ids, dtype=np.int64)]


class MapBatches:
    """Re-iterable: ``fn(batch)`` over each batch of ``inner`` (a dict batch -> the tuple form)."""

    def __init__(self, inner, fn):
        self.inner, self.fn = inner, fn

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self):
        fn = self.fn
        for b in self.inner:
            yield fn(b)


def usable_cores() -> int:
    return cores()


def _dataloaders(loader, depth: int = 4):
    """The torch DataLoaders a contender's loader is or wraps (``MapBatches.inner``, a WebLoader's pipeline)."""
    from torch.utils.data import DataLoader

    if loader is None or depth < 0:
        return
    if isinstance(loader, DataLoader):
        yield loader
        return
    for inner in [getattr(loader, "inner", None), *(getattr(loader, "pipeline", None) or [])]:
        if inner is not None and inner is not loader:
            yield from _dataloaders(inner, depth - 1)


def stop_workers(loader) -> int:
    """Stop now the worker processes a loader keeps between epochs (``persistent_workers``) and drop its
    iterator; the number of iterators stopped. Without it, an iterator that holds its own loader (LitData's
    ``_StreamingMultiProcessingDataLoaderIter._loader``: a cycle only the garbage collector frees) outlives
    its last use, and the next loader's forked workers inherit it: its ``__del__`` then runs in a forked child
    and prints a traceback ("can only test a child process") into the notebook. Stopped here, its ``__del__``
    has nothing left to do wherever it runs."""
    stopped = 0
    for dl in _dataloaders(loader):
        it = dl.__dict__.get("_iterator")
        if it is None:
            continue
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
            stopped += 1
        dl._iterator = None
    return stopped


def note_of(message, category, filename, lineno) -> str:
    """A warning as one line: its category, where it was raised (package/file:line) and its first sentence."""
    first = next((ln.strip() for ln in str(message).splitlines() if ln.strip()), "")
    first = first.split(". ")[0].rstrip(".")
    where = Path(str(filename))
    return f"{category.__name__} ({where.parent.name}/{where.name}:{lineno}): {first}"[:240]


@contextmanager
def warnings_as_notes(folder, notes: list):
    """Every warning a contender raises while it runs, in this process and in the workers it forks (they inherit
    the handler), becomes one line in ``notes`` (:func:`note_of`; each once, in order), not a raw warning under
    the notebook's cell. The lines pass through a file in ``folder`` (forked workers append to it), removed on
    the way out, an interruption included. A worker started by spawn has its own handler: not caught here."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix=".warnings-", suffix=".txt", dir=folder)
    os.close(fd)

    def show(message, category, filename, lineno, file=None, line=None):
        try:
            with open(path, "a") as fh:
                fh.write(note_of(message, category, filename, lineno).replace("\n", " ") + "\n")
        except OSError:   # the file gone (the run ended while a worker warned): nothing to keep
            pass

    try:
        with warnings.catch_warnings():   # restores showwarning and the filters on the way out
            warnings.showwarning = show
            yield notes
    finally:
        try:
            with open(path) as fh:
                notes.extend(dict.fromkeys(ln.strip() for ln in fh if ln.strip()))
        finally:
            os.unlink(path)
