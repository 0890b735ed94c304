"""Loops that feed batches without ``torch.utils.data.DataLoader``.

* :func:`plain_loop` — one process, no workers, no sampler object: index
  batches are cut from a (shuffled) ``range`` and fetched with the dataset's
  ``__getitems__`` (or ``__getitem__`` per index), then collated. It is what a
  "custom single-thread loader" amounts to, and what ``DataLoader`` with
  ``num_workers=0`` should cost plus its own per-batch overhead.
* :class:`BatchReadLoader` — one process; each batch is read by the dataset's
  ``read_batch(indices, out=...)`` straight into preallocated NHWC uint8 batch
  arrays (no per-sample arrays, no collate). With ``reuse_buffers=True`` the
  same two arrays are refilled every batch: the consumer must be done with a
  batch before asking for the next (true of a training loop).
* :class:`ThreadLoader` — a :class:`BatchReadLoader` filled by a pool of threads (``loader="threads"``).
* :class:`ChunkLoader` — a :class:`BatchReadLoader` whose batches follow the
  store's chunks (``ChunkBatchSampler``: shuffled chunk order, shuffled within
  a chunk, a batch never spans two chunks), for Zarr and the memory-mapped .npy.

Every loop yields ``(lr, hr)`` uint8 NHWC tensors, like ``DataLoader`` with
``default_collate`` over this project's datasets.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from concurrent.futures import Future
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import default_collate

from feedlab.errors import deadlines_fired
from feedlab.formats.chunks import ChunkBatchSampler


def index_batches(n: int, batch_size: int, shuffle: bool = True, seed: int = 0, epoch: int = 0,
                  drop_last: bool = False) -> list[list[int]]:
    """Batches of indices over ``range(n)``, shuffled reproducibly per (seed, epoch)."""
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    order = np.random.default_rng([seed, epoch]).permutation(n) if shuffle else np.arange(n)
    order = order.tolist()
    out = [order[s:s + batch_size] for s in range(0, n, batch_size)]
    if drop_last and out and len(out[-1]) < batch_size:
        out.pop()
    return out


def _fetch(dataset, indices: Sequence[int]) -> list:
    getitems = getattr(dataset, "__getitems__", None)
    if getitems is not None:
        return getitems(list(indices))
    return [dataset[i] for i in indices]


class PlainLoop:
    """Re-iterable; each ``iter()`` is one epoch (the next epoch's shuffle)."""

    def __init__(self, dataset, batch_size: int, collate: Callable | None = None, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False):
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.collate = collate or default_collate
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator:
        batches = index_batches(len(self.dataset), self.batch_size, self.shuffle, self.seed,
                                self.epoch, self.drop_last)
        self.epoch += 1
        for idx in batches:
            yield self.collate(_fetch(self.dataset, idx))


def plain_loop(dataset, batch_size: int, collate: Callable | None = None, shuffle: bool = True,
               seed: int = 0, drop_last: bool = False) -> PlainLoop:
    """A single-process loop over ``dataset`` without DataLoader (see module doc)."""
    return PlainLoop(dataset, batch_size, collate, shuffle, seed, drop_last)


class BatchReadLoader:
    """Batches read by ``dataset.read_batch`` into preallocated arrays.

    ``batch_sampler``: any iterable of index lists (re-iterated per epoch);
    default: shuffled ``index_batches`` of ``batch_size``.
    """

    def __init__(self, dataset, batch_size: int, batch_sampler=None, shuffle: bool = True, seed: int = 0,
                 reuse_buffers: bool = True, drop_last: bool = False):
        if not hasattr(dataset, "read_batch"):
            raise TypeError(f"{type(dataset).__name__} has no read_batch(indices, out=...)")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.batch_sampler = batch_sampler
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.reuse_buffers = bool(reuse_buffers)
        self.epoch = 0
        self._buffers = None
        self._tensors = None

    def _alloc(self, n: int):
        lr = np.empty((n, *self.dataset.lr_shape), np.uint8)
        hr = np.empty((n, *self.dataset.hr_shape), np.uint8)
        lr.fill(0)  # fault the pages in now, outside the timed loop
        hr.fill(0)
        return lr, hr

    def _batches(self):
        if self.batch_sampler is not None:
            return self.batch_sampler
        return index_batches(len(self.dataset), self.batch_size, self.shuffle, self.seed, self.epoch,
                             self.drop_last)

    def __len__(self) -> int:
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        batches = self._batches()
        self.epoch += 1
        read_batch = self.dataset.read_batch
        for idx in batches:
            n = len(idx)
            if self.reuse_buffers:
                if self._buffers is None or len(self._buffers[0]) < n:
                    self._buffers = self._alloc(max(n, self.batch_size))
                    # tensors over the buffers made once: a full batch costs no torch call
                    self._tensors = tuple(torch.from_numpy(b) for b in self._buffers)
                lr_t, hr_t = self._tensors
                lr_o, hr_o = self._buffers
                lr, hr = read_batch(idx, out=self._buffers)
                if not ((lr is lr_o or lr.base is lr_o) and (hr is hr_o or hr.base is hr_o)):
                    yield torch.from_numpy(lr), torch.from_numpy(hr)  # a reader that ignored out=
                elif n == len(lr_t):
                    yield lr_t, hr_t
                else:
                    yield lr_t[:n], hr_t[:n]
            else:
                out = (np.empty((n, *self.dataset.lr_shape), np.uint8),
                       np.empty((n, *self.dataset.hr_shape), np.uint8))
                lr, hr = read_batch(idx, out=out)
                yield torch.from_numpy(lr), torch.from_numpy(hr)


class ChunkLoader(BatchReadLoader):
    """Chunk-aligned batches from a chunked store (``dataset.chunk_len``)."""

    def __init__(self, dataset, batch_size: int | None = None, shuffle: bool = True, seed: int = 0,
                 reuse_buffers: bool = True, drop_last: bool = False):
        chunk_len = int(getattr(dataset, "chunk_len", 0) or 0)
        if chunk_len <= 0:
            raise TypeError(f"{type(dataset).__name__} has no chunk_len: not a chunked store")
        batch_size = int(batch_size or chunk_len)
        sampler = ChunkBatchSampler(len(dataset), chunk_len, batch_size, shuffle, seed, drop_last)
        super().__init__(dataset, batch_size, batch_sampler=sampler, shuffle=shuffle, seed=seed,
                         reuse_buffers=reuse_buffers, drop_last=drop_last)


class ThreadLoader(BatchReadLoader):
    """Batches filled by ``num_threads`` threads of this process (the SPDL way: reads and decodes
    that release the GIL run in parallel, and nothing crosses a process boundary).

    ``slots`` preallocated uint8 NHWC batch arrays (default ``num_threads + 1``); batch ``b`` is
    filled by ``dataset.read_batch(idx, out=slot)`` (else per sample) in a pool thread while the
    consumer holds batch ``b - 1``; yielded in order. A batch is valid until the next ``next()``
    (its slot is then refilled). A reader's exception is raised in the consumer as it is. The
    readers are daemon threads: when the loop stops before its last batch (the consumer had enough, a
    deadline, Ctrl-C) they are told to stop (a per-sample fill stops between samples) and given
    :data:`LET_GO_S` for the read in hand; one still in a read then is abandoned, never joined, in one
    line (:meth:`_let_go`)."""

    def __init__(self, dataset, batch_size: int, num_threads: int = 2, slots: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False):
        if num_threads < 1:
            raise ValueError(f"threads: num_workers (threads) must be >= 1, got {num_threads}")
        self.dataset = dataset
        self.batch_size, self.num_threads = int(batch_size), int(num_threads)
        self.slots = int(slots or self.num_threads + 1)
        self.batch_sampler, self.shuffle, self.seed, self.drop_last = None, shuffle, seed, drop_last
        self.reuse_buffers, self.epoch = True, 0
        self._slots = [self._alloc(self.batch_size) for _ in range(self.slots)]
        self._tensors = [tuple(torch.from_numpy(b) for b in s) for s in self._slots]

    def _fill(self, slot: int, idx, stop: threading.Event | None = None) -> int:
        lr, hr = self._slots[slot]
        n = len(idx)
        read_batch = getattr(self.dataset, "read_batch", None)
        if read_batch is not None:
            a, b = read_batch(idx, out=(lr[:n], hr[:n]))
            if not (np.shares_memory(a, lr) and np.shares_memory(b, hr)):
                lr[:n], hr[:n] = a, b
        else:
            for k, i in enumerate(idx):
                if stop is not None and stop.is_set():   # the loop stopped: the rest of this batch is not wanted
                    return k
                lr[k], hr[k] = self.dataset[i]
        return n

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        from collections import deque

        batches = list(self._batches())
        self.epoch += 1
        jobs: queue.SimpleQueue = queue.SimpleQueue()
        stop = threading.Event()
        threads = [threading.Thread(target=_reader, args=(jobs, self._fill, stop), name=f"feedlab-threads-{k}",
                                    daemon=True) for k in range(self.num_threads)]
        for t in threads:
            t.start()
        fired = deadlines_fired()
        pending: deque = deque()
        free = list(range(self.slots))
        nxt = 0
        try:
            while nxt < len(batches) or pending:
                while free and nxt < len(batches):
                    slot, fut = free.pop(), Future()
                    jobs.put((fut, slot, batches[nxt]))
                    pending.append((slot, fut))
                    nxt += 1
                slot, fut = pending.popleft()
                n = fut.result()
                lr, hr = self._tensors[slot]
                yield (lr, hr) if n == len(lr) else (lr[:n], hr[:n])
                free.append(slot)  # the consumer asked for the next batch: this one is done with
        finally:
            early = bool(pending) or nxt < len(batches)   # the consumer stopped before the last batch
            stop.set()
            for _slot, fut in pending:
                fut.cancel()
            interrupted = deadlines_fired() > fired or isinstance(sys.exc_info()[1], KeyboardInterrupt)
            self._let_go(threads, jobs, LET_GO_S if interrupted or early else LET_GO_NORMAL_S)

    def _let_go(self, threads: list, jobs, wait_s: float = 2.0) -> None:
        """Stop the reader threads: each is told to end and given ``wait_s`` to finish the read in hand
        (:data:`LET_GO_S` when the loop stopped before its last batch: the consumer had enough, a deadline,
        a Ctrl-C; :data:`LET_GO_NORMAL_S` after the last batch, when no read is in hand). One still reading then (a read that never returns: a
        hung mount, a FIFO) is abandoned, never joined, said in one line: a daemon thread, it ends with
        the process, and the slots it may still write into are replaced. A Ctrl-C here ends the wait at once."""
        for _ in threads:
            jobs.put(None)
        end = time.monotonic() + wait_s
        for t in threads:
            t.join(max(0.0, end - time.monotonic()))
        stuck = [t for t in threads if t.is_alive()]
        if stuck:
            self._slots = [self._alloc(self.batch_size) for _ in range(self.slots)]
            self._tensors = [tuple(torch.from_numpy(b) for b in s) for s in self._slots]
            print(f"feedlab: loader threads: {len(stuck)} reader thread(s) of {type(self.dataset).__name__} still "
                  f"in a read after {wait_s:g} s: abandoned, not joined (they end with the process)",
                  file=sys.stderr, flush=True)


#: seconds the threads kind gives its reader threads to finish the read in hand when the loop stops before
#: its last batch (the consumer stopped early, a deadline, a Ctrl-C), and after its last batch
LET_GO_S = 2.0
LET_GO_NORMAL_S = 30.0


def _reader(jobs, fill, stop: threading.Event) -> None:
    """A reader thread of :class:`ThreadLoader`: fills the slots it is given until told to end."""
    while True:
        job = jobs.get()
        if job is None:
            return
        fut, slot, idx = job
        if not fut.set_running_or_notify_cancel():
            continue
        try:
            fut.set_result(fill(slot, idx, stop))
        except BaseException as exc:  # the consumer raises it as it is
            fut.set_exception(exc)
