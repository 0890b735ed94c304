"""DataLoader workers and ``/dev/shm``: checked before the workers start, one line when it runs out.

Workers hand each batch to the main process through shared memory, ``prefetch_factor`` batches per
worker in flight. A container's small ``/dev/shm`` then ends in a bus error or ``No space left on
device`` inside a worker, which torch reports as a 70-line traceback, and a worker killed while
writing leaves ``torch_<pid>_*`` files that stay until reboot.

* :func:`worker_shm_problem` — one line when ``/dev/shm`` has less free than
  ``batch bytes × prefetch_factor × workers`` (the free space read by
  :func:`feedlab.pipeline.ring.shm_free_bytes`, the ring's own reading);
* :class:`CheckedDataLoader` — a ``DataLoader`` whose workers' shared-memory failure is one
  :class:`SharedMemoryError` line naming the fix, with the ``torch_*`` files of its workers and of
  this process removed.
"""

from __future__ import annotations

import errno
import glob
import os
import re

from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from .ring import SHM_DIR, shm_free_bytes

#: what to do when DataLoader workers run out of shared memory
FIX = ("torch.multiprocessing.set_sharing_strategy('file_system') at the top of your script, fewer workers "
       "(num_workers), a smaller batch_size or prefetch_factor, or a larger /dev/shm (docker run --shm-size=...)")
_SIGNS = ("shared memory", "no space left on device", "bus error", "torch_shm", "/torch_", "shm_open")


class SharedMemoryError(ValueError):
    """DataLoader workers ran, or would run, out of shared memory; the message is one line with the fix."""


def nbytes(obj) -> int:
    """Bytes held by a sample or a batch: arrays and tensors, inside tuples, lists and dicts."""
    if isinstance(obj, (tuple, list)):
        return sum(nbytes(x) for x in obj)
    if isinstance(obj, dict):
        return sum(nbytes(x) for x in obj.values())
    if hasattr(obj, "element_size") and hasattr(obj, "numel"):
        return int(obj.element_size() * obj.numel())
    return int(getattr(obj, "nbytes", 0) or 0)


def worker_shm_problem(batch_bytes: int, workers: int, prefetch_factor: int, path: str = SHM_DIR,
                       free: int | None = None, batches: int | None = None) -> str | None:
    """One line when ``path`` has less free than the workers' in-flight batches need
    (``batch_bytes × prefetch_factor × workers``, at most ``batches``: a loader of known length never has more
    in flight than it has batches, attack53 P01), else None (also where it cannot be read)."""
    flight = int(prefetch_factor) * int(workers)
    capped = batches is not None and 0 <= int(batches) < flight
    need = int(batch_bytes) * (int(batches) if capped else flight)
    free = shm_free_bytes(path) if free is None else free
    if not workers or free is None or free >= need:
        return None
    cap = f" (at most the loader's {int(batches)} batches)" if capped else ""
    return (f"{path} has {size_words(free)} free, but {workers} DataLoader worker(s) × prefetch_factor "
            f"{prefetch_factor}{cap} × {size_words(batch_bytes)} batches need {size_words(need)}; use {FIX}")


def size_words(n: int) -> str:
    """Bytes for the line: MiB to one decimal (a whole number without it), KiB under 1 MiB, so that a small
    /dev/shm and small batches never read "has 0 MiB free, but ... need 0 MiB" (attack50 M02)."""
    if n >= 2**20:
        return f"{n / 2**20:,.1f}".rstrip("0").rstrip(".") + " MiB"
    return f"{n / 1024:,.1f}".rstrip("0").rstrip(".") + " KiB"


#: free space in /dev/shm above which the check reads no sample: in-flight batches past this much are caught as the
#: workers run (one line, :class:`SharedMemoryError`), not guessed here
ROOMY_BYTES = 4 << 30


def shm_problem_of(dataset, batch_size: int | None, workers: int, prefetch_factor: int) -> str | None:
    """:func:`worker_shm_problem` for a DataLoader over ``dataset``: a batch's bytes from its first sample
    (read here, in this process) × ``batch_size`` (None: the dataset's items are batches); None where there
    are no workers or the sample cannot be read here (the loader then says what is wrong as it runs). Where
    /dev/shm has :data:`ROOMY_BYTES` free no sample is read (the check costs nothing on a roomy machine)."""
    if not workers:
        return None
    free = shm_free_bytes()
    if free is None or free >= ROOMY_BYTES:   # no sample read where a batch could not plausibly overflow it:
        return None                           # reading one costs the user a fetch (and is seen by a logging dataset)
    try:
        one = nbytes(dataset[0])
    except Exception:  # an iterable data set, a sample that fails: not this check's to report
        return None
    try:   # the batches a loader over it has (a map-style data set's length, read without a fetch)
        count = -(-len(dataset) // batch_size) if batch_size else len(dataset)
    except Exception:  # no length (an iterable data set): every in-flight batch counts
        count = None
    return worker_shm_problem(one * (batch_size or 1), workers, prefetch_factor, free=free, batches=count)


def is_shm_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (what a DataLoader raised in the main process) is its workers running out of shared memory."""
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(s in text for s in _SIGNS)


def sweep_torch_files(pids, path: str = SHM_DIR) -> list[str]:
    """Remove ``path/torch_<pid>_*`` of each of ``pids`` (torch's shared-memory files of processes we started):
    the names removed."""
    gone = []
    for pid in pids:
        for f in glob.glob(os.path.join(path, f"torch_{int(pid)}_*")):
            try:
                os.unlink(f)
                gone.append(os.path.basename(f))
            except OSError:   # removed meanwhile, or not ours to remove
                pass
    return gone


def shm_names() -> set[str]:
    """The names in /dev/shm now (empty where it cannot be listed): the ``before`` of :func:`sweep_orphans_since`."""
    try:
        return set(os.listdir(SHM_DIR))
    except OSError:
        return set()


def _mapped(path: str) -> set[str]:
    """The names of ``path/torch_*`` files some process maps now (/proc/<pid>/maps): a file still in use."""
    held = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as fh:
                held.update(ln.rsplit("/", 1)[-1].strip() for ln in fh if f"{path}/torch_" in ln)
        except OSError:   # gone meanwhile, or not ours to read
            continue
    return held


def sweep_orphans_since(before: set[str], path: str = SHM_DIR) -> list[str]:
    """The one sweeper of torch's shared-memory files left by processes we ran whose pids we never saw (a peer's
    DataLoader workers, a ``--script``'s: ``doctor.script_watch`` at the end of a watched run): remove the
    ``torch_<pid>_*`` files in ``path`` that appeared since ``before`` (its names then: :func:`shm_names`) whose
    process is gone and that no process maps (an orphan nobody will remove; a live process's file is left to it).
    The names removed."""
    try:
        new = sorted(n for n in set(os.listdir(path)) - set(before) if n.startswith("torch_"))
    except OSError:
        return []
    dead = [n for n in new if (m := re.match(r"torch_(\d+)_", n)) and not os.path.exists(f"/proc/{m.group(1)}")]
    held = _mapped(os.path.abspath(path)) if dead else set()
    gone = []
    for name in dead:
        if name in held:
            continue
        try:
            os.unlink(os.path.join(path, name))
            gone.append(name)
        except OSError:   # removed meanwhile, or not ours to remove
            pass
    return gone


class _CheckedIter(_MultiProcessingDataLoaderIter):
    def __init__(self, loader):
        try:
            super().__init__(loader)
        except (OSError, RuntimeError) as exc:
            # half built (ENOSPC making a queue or a semaphore in /dev/shm): torch's __del__ would shut down workers
            # it never listed ("Exception ignored … no attribute '_workers'", attack53 M06c); the started ones stop here
            self._shutdown = True
            started = [w for w in getattr(self, "_workers", []) if w.pid]
            for w in started:
                w.terminate()
                w.join(timeout=5)
            if getattr(exc, "errno", None) != errno.ENOSPC and not is_shm_failure(exc):
                raise
            sweep_torch_files([os.getpid(), *(w.pid for w in started)])
            raise SharedMemoryError(f"DataLoader workers could not start: shared memory ran out ({exc}): "
                                    f"use {FIX}") from None

    def _next_data(self):
        try:
            return super()._next_data()
        except RuntimeError as exc:
            if not is_shm_failure(exc):
                raise
            pids = [os.getpid(), *(w.pid for w in getattr(self, "_workers", []) if w.pid)]
            self._shutdown_workers()
            sweep_torch_files(pids)
            free = shm_free_bytes()
            now = f" ({SHM_DIR}: {free / 2**20:,.0f} MiB free now)" if free is not None else ""
            raise SharedMemoryError(f"DataLoader workers ran out of shared memory{now}: use {FIX}") from None


class CheckedDataLoader(DataLoader):
    """A ``DataLoader`` whose workers running out of shared memory is one :class:`SharedMemoryError`
    line, their ``torch_*`` files in /dev/shm removed."""

    def _get_iterator(self):
        if self.num_workers == 0:
            return super()._get_iterator()
        self.check_worker_number_rationality()
        return _CheckedIter(self)
