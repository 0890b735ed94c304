"""A worker -> main hand-over at memory speed: batch slots in a shared-memory ring.

``torch.utils.data.DataLoader`` with workers pickles every batch: the worker moves the
batch's storage into a fresh shared-memory segment, sends its handle, and the main
process maps it, rebuilds the tensors and unmaps it later (tens of µs per sample for
small samples). :class:`RingLoader` allocates its shared memory once: ``slots`` batch
slots of uint8 ``(batch_size, *lr_shape)`` + ``(batch_size, *hr_shape)`` in one file in
``/dev/shm``, mapped by the main process and by every worker. A worker fills a slot
(``read_batch(indices, out=slot)`` when the dataset has one, i.e. the format is
``batched``; else one sample at a time, copied into the slot) and sends the main process
``(epoch, batch number, slot, n)`` over a pipe: a few dozen bytes, not the batch.

* **Order, exactly once**: batch ``b`` of an epoch goes to worker ``b % num_workers``;
  the main process yields batches in order, each index of the epoch's permutation
  (``loaders.index_batches``, seeded per epoch) exactly once.
* **Lifetime**: a yielded batch is a view of its slot, valid until the next ``next()``
  on the iterator (the slot is then handed to a worker again). Copy it
  (``x.clone()``, or ``.to(device)`` synchronously) to keep it longer. A training loop
  that consumes each batch before asking for the next needs no copy.
* **Shutdown**: a worker that raises sends its error's one line; the main process stops
  every worker (≤ 1 s: a polite stop, then terminate, then kill) and raises
  ``RingWorkerError`` naming the worker, the batch and the error. A worker that dies
  without a word (killed, segfault) is named the same way with its exit code or signal,
  whichever pipe notices it (a ``ChildProcessError``: a command prints its one line).
* **No leaks**: the ring's file has no name (``O_TMPFILE``; else unlinked once created);
  workers get its descriptor (inherited, or passed under spawn/forkserver), so even a main
  process killed during start-up leaves nothing in ``/dev/shm``. Workers are stopped by
  :meth:`RingLoader.close`, by leaving a ``with`` block, or when the loader is collected.
* **Room**: every page is reserved before use (``posix_fallocate``: two rings that each fit
  but not together get an error, not a SIGBUS), and the ring must fit the memory available
  too. A shortage is one line naming the size needed and the way out (fewer ``slots``, a
  smaller batch, ``docker run --shm-size``).
* **Pinned**: with ``pin=True`` (CUDA present) the ring is page-locked once with
  ``cudaHostRegister``, so ``batch.to("cuda", non_blocking=True)`` is an async DMA
  with no second pinned copy.

Workers start with the ``start_method`` given (``fork``, ``spawn``, ``forkserver``; default
the platform's). The dataset is pickled to them under spawn.
"""

from __future__ import annotations

import errno
import mmap
import multiprocessing as mp
import os
import signal
import tempfile
import time
import traceback
import weakref
from multiprocessing.reduction import DupFd
from typing import Iterator

import numpy as np
import psutil
import torch

from feedlab.pipeline.loaders import index_batches

SHM_DIR = "/dev/shm"
_WAY_OUT, _MORE = "use fewer slots or a smaller batch", ", or give the container more (docker run --shm-size=...)"


class RingWorkerError(ChildProcessError, RuntimeError):
    """A ring worker failed or died; the message is one line naming it, the batch and the error."""


def _shapes(dataset) -> tuple[tuple, tuple]:
    lr, hr = getattr(dataset, "lr_shape", None), getattr(dataset, "hr_shape", None)
    if lr is None or hr is None:
        a, b = dataset[0]
        lr, hr = np.asarray(a).shape, np.asarray(b).shape
    return tuple(int(x) for x in lr), tuple(int(x) for x in hr)


def shm_free_bytes(path: str = SHM_DIR) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def check_shm(nbytes: int, path: str = SHM_DIR, free: int | None = None, available: int | None = None) -> str | None:
    """One line when ``path`` has less than ``nbytes`` free, or the memory available
    (``psutil.virtual_memory().available``) is less (None: fine or not a thing here)."""
    free = shm_free_bytes(path) if free is None else free
    if free is not None and free < nbytes:
        return (f"ring: {path} has {free / 2**20:.0f} MiB free, the ring needs {nbytes / 2**20:.0f} MiB "
                f"(slots x batch bytes): {_WAY_OUT}{_MORE}")
    available = psutil.virtual_memory().available if available is None else available
    if available < nbytes:
        return (f"ring: the ring needs {nbytes / 2**20:.0f} MiB of memory (slots x batch bytes, held in {path}) "
                f"and {available / 2**20:.0f} MiB is available: {_WAY_OUT}")
    return None


def _ring_file(nbytes: int) -> int:
    """A descriptor of a file in ``/dev/shm`` with no name (nothing to leak), its ``nbytes`` reserved."""
    where = SHM_DIR if os.path.isdir(SHM_DIR) else tempfile.gettempdir()
    try:
        fd = os.open(where, os.O_TMPFILE | os.O_RDWR, 0o600)
    except (AttributeError, OSError):  # no O_TMPFILE here: a name for a moment
        fd, path = tempfile.mkstemp(prefix="feedlab-ring-", dir=where)
        os.unlink(path)
    try:  # every page now: no SIGBUS later when another ring took them first
        getattr(os, "posix_fallocate", lambda f, _o, n: os.ftruncate(f, n))(fd, 0, nbytes)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.ENOSPC, errno.ENOMEM):
            raise
        raise ValueError(f"ring: {where} has no room for the ring's {nbytes / 2**20:.0f} MiB (slots x batch "
                         f"bytes; other rings or files hold the rest): {_WAY_OUT}{_MORE}") from None
    return fd


class _RingFd:
    """The ring's descriptor as a worker's argument: inherited, or passed when pickled (spawn)."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        return _RingFd._rebuild, (DupFd(self.fd),)

    @staticmethod
    def _rebuild(dup) -> "_RingFd":
        return _RingFd(dup.detach())


class _Layout:
    """Offsets of slot ``s``'s lr and hr arrays in the ring (each 64-byte aligned)."""

    def __init__(self, slots: int, batch: int, lr_shape: tuple, hr_shape: tuple):
        self.slots, self.batch, self.lr_shape, self.hr_shape = slots, batch, lr_shape, hr_shape
        al = lambda n: -(-n // 64) * 64  # noqa: E731
        self.lr_bytes = al(batch * int(np.prod(lr_shape)))
        self.hr_bytes = al(batch * int(np.prod(hr_shape)))
        self.slot_bytes = self.lr_bytes + self.hr_bytes
        self.nbytes = slots * self.slot_bytes

    def arrays(self, buf) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for s in range(self.slots):
            o = s * self.slot_bytes
            lr = np.frombuffer(buf, np.uint8, self.batch * int(np.prod(self.lr_shape)), o)
            hr = np.frombuffer(buf, np.uint8, self.batch * int(np.prod(self.hr_shape)), o + self.lr_bytes)
            out.append((lr.reshape(self.batch, *self.lr_shape), hr.reshape(self.batch, *self.hr_shape)))
        return out


def _fill(dataset, idx, lr: np.ndarray, hr: np.ndarray) -> None:
    n = len(idx)
    read_batch = getattr(dataset, "read_batch", None)
    if read_batch is not None:
        a, b = read_batch(idx, out=(lr[:n], hr[:n]))
        if not (np.shares_memory(a, lr) and np.shares_memory(b, hr)):  # a reader that ignored out=
            lr[:n], hr[:n] = a, b
        return
    for k, i in enumerate(idx):
        x, y = dataset[i]
        lr[k] = x.numpy() if isinstance(x, torch.Tensor) else x
        hr[k] = y.numpy() if isinstance(y, torch.Tensor) else y


def _worker(rank: int, dataset, ring_fd: _RingFd, layout: _Layout, tasks, results) -> None:
    """Map the ring, say ready, then fill slots until told to stop (``None``)."""
    torch.set_num_threads(1)
    batch = -1
    try:
        try:
            ring = mmap.mmap(ring_fd.fd, layout.nbytes)
        finally:
            os.close(ring_fd.fd)
        views = layout.arrays(ring)
        results.send(("ready", rank))
        parent = os.getppid()
        while True:
            while not tasks.poll(1.0):  # a main process killed outright leaves no orphan behind
                if os.getppid() != parent:
                    return
            task = tasks.recv()
            if task is None:
                break
            epoch, batch, slot, idx = task
            lr, hr = views[slot]
            _fill(dataset, idx, lr, hr)
            results.send((epoch, batch, slot, len(idx)))
    except (KeyboardInterrupt, EOFError, BrokenPipeError):
        pass
    except BaseException as exc:  # noqa: BLE001 - every failure is reported in one line
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        at = f" at {os.path.basename(where.filename)}:{where.lineno}" if where else ""
        msg = str(exc).splitlines()[0] if str(exc) else ""
        try:
            results.send(("error", rank, batch, f"{type(exc).__name__}: {msg}{at}"))
        except (OSError, BrokenPipeError):
            pass


class _Workers:
    """The processes, their pipes and the ring's mapping; ``stop()`` is idempotent."""

    def __init__(self, dataset, layout: _Layout, num_workers: int, start_method: str | None, timeout_s: float):
        ctx = mp.get_context(start_method)
        self.procs, self.tasks, self.results = [], [], []
        self.ring = None
        self.nbytes = layout.nbytes
        self.on_stop: list = []
        fd = _ring_file(layout.nbytes)
        try:
            self.ring = mmap.mmap(fd, layout.nbytes)
            self.views = layout.arrays(self.ring)
            for v in self.views:  # fault the pages in now, not while timed
                v[0].fill(0)
                v[1].fill(0)
            for r in range(num_workers):
                t_recv, t_send = ctx.Pipe(duplex=False)
                r_recv, r_send = ctx.Pipe(duplex=False)
                p = ctx.Process(target=_worker, args=(r, dataset, _RingFd(fd), layout, t_recv, r_send),
                                name=f"feedlab-ring-{r}", daemon=True)
                p.start()
                t_recv.close()
                r_send.close()
                self.procs.append(p)
                self.tasks.append(t_send)
                self.results.append(r_recv)
            os.close(fd)  # every worker has it (or its copy on the way): the mappings keep the pages
            fd = -1
            for r in range(num_workers):
                msg = self._recv(r, timeout_s, batch=-1)
                if msg[0] != "ready":  # pragma: no cover - protocol
                    raise RingWorkerError(f"ring worker {r}: unexpected first message {msg!r}")
        except BaseException:
            if fd >= 0:
                os.close(fd)
            self.stop()
            raise

    def _recv(self, r: int, timeout_s: float, batch: int, poll_s: float = 0.05):
        conn, proc = self.results[r], self.procs[r]
        deadline = time.monotonic() + timeout_s
        while True:
            if conn.poll(poll_s) or not proc.is_alive() and conn.poll(0):
                try:
                    msg = conn.recv()
                except EOFError:  # its end of the pipe closed: it is gone
                    proc.join(0.5)
                    break
                if msg[0] == "error":
                    raise RingWorkerError(f"ring worker {msg[1]} failed on batch {msg[2]}: {msg[3]}")
                return msg
            if not proc.is_alive():
                break
            if time.monotonic() > deadline:
                raise RingWorkerError(f"ring worker {r}: no batch {batch} within {timeout_s:.0f} s")
        raise self.died(r, batch)

    def died(self, r: int, batch: int) -> RingWorkerError:
        """The one line for worker ``r`` gone without a word (its exit code, or the signal that killed it)."""
        proc = self.procs[r]
        proc.join(0.5)
        code = proc.exitcode
        how = f"exited (code {code})"
        if code is not None and -code in signal.valid_signals():
            how = f"was killed by {signal.Signals(-code).name}"
        return RingWorkerError(f"ring worker {r} {how} before batch {batch} without a word: "
                               "killed, out of memory or crashed")

    def stop(self, grace_s: float = 0.4) -> None:
        while self.on_stop:
            self.on_stop.pop()()
        for t in self.tasks:
            try:
                t.send(None)
            except (OSError, BrokenPipeError, ValueError):
                pass
        end = time.monotonic() + grace_s
        for p in self.procs:
            p.join(max(0.0, end - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(0.2)
            if p.is_alive():  # pragma: no cover - a worker that ignores SIGTERM
                p.kill()
                p.join(0.2)
        for c in (*self.tasks, *self.results):
            c.close()
        self.procs, self.tasks, self.results = [], [], []
        self.views = []
        if self.ring is not None:
            try:
                self.ring.close()
            except BufferError:  # a yielded batch still views it: unmapped when that is freed
                pass
            self.ring = None


def _pin(w: _Workers, cudart=None) -> bool:
    """Page-lock the ring once for async H2D copies (``cudaHostRegister``; unregistered by
    ``stop()`` before the unmap); False where not possible."""
    if cudart is None:
        if not torch.cuda.is_available():
            return False
        cudart = torch.cuda.cudart()
    ptr = w.views[0][0].ctypes.data  # slot 0 starts the mapping
    err = cudart.cudaHostRegister(ptr, w.nbytes, 0)
    if int(getattr(err, "value", err)) != 0:
        return False
    w.on_stop.append(lambda: cudart.cudaHostUnregister(ptr))
    return True


class RingLoader:
    """Batches of uint8 NHWC ``(lr, hr)`` tensors filled by worker processes in a shared-memory
    ring (see the module doc). Re-iterable: each ``iter()`` is one epoch; workers persist
    across epochs until :meth:`close`.

    ``slots``: ring size (default ``2 * num_workers + 1``: each worker has two batches in
    flight while the consumer holds one)."""

    def __init__(self, dataset, batch_size: int, num_workers: int = 2, slots: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False, pin: bool = False,
                 start_method: str | None = None, timeout_s: float = 120.0, cudart=None):
        if num_workers < 1:
            raise ValueError(f"ring: num_workers must be >= 1, got {num_workers}")
        self.dataset, self.batch_size, self.num_workers = dataset, int(batch_size), int(num_workers)
        self.slots = int(slots or 2 * self.num_workers + 1)
        if self.slots < 2:
            raise ValueError(f"ring: slots must be >= 2, got {self.slots}")
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.pin, self.start_method, self.timeout_s, self._cudart = pin, start_method, timeout_s, cudart
        self.layout = _Layout(self.slots, self.batch_size, *_shapes(dataset))
        self.epoch = 0
        self.pinned = False
        self._w: _Workers | None = None
        self._finalizer = None
        self._active = None
        self._tensors: list = []

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _start(self) -> _Workers:
        if self._w is None:
            problem = check_shm(self.layout.nbytes)
            if problem:
                raise ValueError(problem)
            self._w = _Workers(self.dataset, self.layout, self.num_workers, self.start_method, self.timeout_s)
            self._tensors = [(torch.from_numpy(a), torch.from_numpy(b)) for a, b in self._w.views]
            if self.pin:
                self.pinned = _pin(self._w, self._cudart)
            self._finalizer = weakref.finalize(self, _Workers.stop, self._w)
        return self._w

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._active is not None:  # an epoch left unfinished: collect its batches in flight first
            self._active.close()
        w = self._start()
        batches = index_batches(len(self.dataset), self.batch_size, self.shuffle, self.seed, self.epoch,
                                self.drop_last)
        epoch = self.epoch
        self.epoch += 1
        self._active = self._run(w, epoch, batches)
        return self._active

    def _run(self, w: _Workers, epoch: int, batches: list) -> Iterator:
        nw, nb = self.num_workers, len(batches)
        free = list(range(self.slots))
        sent = done = 0
        held = None
        try:
            while done < nb:
                if held is not None:  # the consumer asked for the next batch: its last slot is free
                    free.append(held)
                    held = None
                while free and sent < nb:
                    w.tasks[sent % nw].send((epoch, sent, free.pop(), batches[sent]))
                    sent += 1
                e, b, held, n = w._recv(done % nw, self.timeout_s, done)
                if (e, b) != (epoch, done):  # pragma: no cover - protocol
                    raise RingWorkerError(f"ring: got batch {b} of epoch {e}, expected {done} of {epoch}")
                done += 1
                lr, hr = self._tensors[held]
                yield (lr, hr) if n == self.batch_size else (lr[:n], hr[:n])
        except GeneratorExit:  # left early: collect what is in flight, keep the workers
            try:
                for b in range(done, sent if w.procs else done):  # (none once stopped)
                    w._recv(b % nw, self.timeout_s, b)
            except RingWorkerError:
                self.close()
            raise
        except (BrokenPipeError, ConnectionResetError):  # the worker sent batch `sent` is gone
            err = w.died(sent % nw, sent)
            self.close()
            raise err from None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop the workers (≤ 1 s) and unmap the ring; idempotent."""
        self._tensors = []
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self._w = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


__all__ = ["RingLoader", "RingWorkerError", "check_shm", "shm_free_bytes", "SHM_DIR"]
