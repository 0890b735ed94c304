"""Threads instead of worker processes, around a user's own DataLoader: :class:`ThreadedLoader`.

Where a fetch waits on storage (a remote disk, a network read) or releases the GIL (a C decoder), threads of
the training process run fetches side by side with nothing crossing a process boundary: no pickling of the
dataset or the batches, no worker start-up, no copy of the dataset per worker. The loader keeps the user's
dataset, batch sampler (so the order), collate function and batch size; batches come out in order, at most
``prefetch`` of them in flight. A batch that raises raises in the loop, as it does with a DataLoader; a loop
that stops early cancels the batches not yet started (a fetch in hand finishes in its daemon thread, which never holds the
interpreter's exit).

    loader = ThreadedLoader(DataLoader(ds, batch_size=32, shuffle=True), threads=8)
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from concurrent.futures import Future
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
        jobs: queue.SimpleQueue = queue.SimpleQueue()
        stop = threading.Event()
        threads = [threading.Thread(target=_reader, args=(jobs, self._fetch, stop), daemon=True,
                                    name=f"feedlab-tuner-{k}") for k in range(self.threads)]
        for t in threads:
            t.start()
        pending: deque = deque()
        try:
            for idx in self.batch_sampler:
                fut: Future = Future()
                jobs.put((fut, idx))
                pending.append(fut)
                if len(pending) >= self.prefetch:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:   # daemon threads: one stuck in a fetch never holds the interpreter's exit
            stop.set()
            for f in pending:
                f.cancel()
            for _ in threads:
                jobs.put(None)

    def __repr__(self) -> str:
        return f"ThreadedLoader(<your DataLoader>, threads={self.threads})"


def _reader(jobs: queue.SimpleQueue, fetch, stop: threading.Event) -> None:
    """One fetch thread: batches from ``jobs`` until told to stop (``None``, or ``stop`` set)."""
    while not stop.is_set():
        job = jobs.get()
        if job is None:
            return
        fut, idx = job
        if not fut.set_running_or_notify_cancel():   # cancelled: the loop stopped before it was started
            continue
        try:
            fut.set_result(fetch(idx))
        except BaseException as exc:  # the user's fetch: raised in the loop, as a DataLoader raises it
            fut.set_exception(exc)
