"""Threads instead of worker processes, around a user's own DataLoader: :class:`ThreadedLoader`.

Where a fetch waits on storage (a remote disk, a network read) or releases the GIL (a C decoder), threads of
the training process run fetches side by side with nothing crossing a process boundary: no pickling of the
dataset or the batches, no worker start-up, no copy of the dataset per worker. The loader keeps the user's
dataset, batch sampler (so the order), collate function and batch size; batches come out in order, at most
``prefetch`` of them in flight. A batch that raises raises in the loop, as it does with a DataLoader; a loop
that stops early cancels the batches not yet started (a fetch in hand finishes in its thread).

    loader = ThreadedLoader(DataLoader(ds, batch_size=32, shuffle=True), threads=8)
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator


class ThreadedLoader:
    """The user's DataLoader ``loader`` fetched by ``threads`` threads of this process (this module)."""

    def __init__(self, loader, threads: int = 4, prefetch: int | None = None):
        if int(threads) < 1:
            raise ValueError(f"ThreadedLoader: threads={threads}: must be >= 1")
        self.loader = loader
        self.dataset, self.batch_sampler = loader.dataset, loader.batch_sampler
        self.collate_fn = loader.collate_fn
        self.batch_size = loader.batch_size or getattr(loader.batch_sampler, "batch_size", None)
        self.sampler = getattr(loader, "sampler", None)
        self.threads = int(threads)
        self.prefetch = int(prefetch or 2 * self.threads)
        self.num_workers = 0            # no worker processes (warm-up: the first batch)
        self.prefetch_factor = None
        self.pin_memory = False

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def _fetch(self, idx):
        get = getattr(self.dataset, "__getitems__", None)
        items = get(list(idx)) if get is not None else [self.dataset[i] for i in idx]
        return self.collate_fn(items)

    def __iter__(self) -> Iterator:
        pool = ThreadPoolExecutor(self.threads, thread_name_prefix="feedlab-tuner")
        pending: deque = deque()
        batches = iter(self.batch_sampler)
        try:
            for idx in batches:
                pending.append(pool.submit(self._fetch, idx))
                if len(pending) >= self.prefetch:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()
            pool.shutdown(wait=False, cancel_futures=True)

    def __repr__(self) -> str:
        return f"ThreadedLoader(<your DataLoader>, threads={self.threads})"
