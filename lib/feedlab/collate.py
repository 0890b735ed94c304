"""Collate: the stock path, a fast path, and the memory-copy ceiling.

Items are tuples such as ``(lr, hr)`` or ``(img, label)`` whose images are
HWC uint8 numpy arrays (a bare array per item works too).

* ``totensor_collate`` is what most tutorials do: ``transforms.ToTensor()``
  on every image (HWC uint8 -> CHW float /255, one transpose and one
  conversion per item) and then ``default_collate`` (one more copy into the
  batch).
* ``FastCollate`` keeps the batch uint8 and copies each image once, straight
  into a preallocated batch tensor. The uint8 -> float division happens
  later on the device, where it is nearly free (``to_float``). With
  ``memory_format='channels_last'`` the copy is a plain memcpy per item (the
  HWC bytes already are channels-last) and the result is exposed as an
  NCHW-shaped tensor with channels-last strides; with ``'nchw'`` each item
  is transposed HWC -> CHW while it is copied.
* ``memcpy_ceiling`` is the floor no collate can beat: each item's bytes
  copied into its batch slot.
* ``copy_ceiling`` is the ceiling no loader beats: the fastest of several
  copies of a data set's bytes into a preallocated batch buffer (numpy copy of
  contiguous batches, a gather of shuffled ones, ``readinto`` from the file,
  a slice copy out of its memory map), each method's best run, in one run;
  ``pick_ceiling`` is its choice, a pure function of the timings.

Measured choice of copy (128 × 96×96×3, one core): numpy ``np.copyto`` of
each item's transposed view into its NCHW slot beat ``np.stack`` followed by
one transposed copy, ``torch`` ``copy_`` of permuted views (per item and per
batch) by 1.2-5×; for channels-last, ``np.stack(..., out=)`` into the batch
buffer is as fast as a per-item memcpy loop.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np
import torch
from torch.utils.data import default_collate, get_worker_info

__all__ = [
    "FastCollate",
    "MEMORY_FORMATS",
    "memcpy_ceiling",
    "copy_ceiling",
    "pick_ceiling",
    "CEILING_METHODS",
    "to_float",
    "to_float_on_device",
    "totensor_collate",
]

MEMORY_FORMATS = ("nchw", "channels_last")

_to_tensor = None


def _totensor():
    global _to_tensor
    if _to_tensor is None:
        from torchvision import transforms

        _to_tensor = transforms.ToTensor()
    return _to_tensor


def _is_image(x: Any) -> bool:
    return isinstance(x, np.ndarray) and x.dtype == np.uint8 and x.ndim in (2, 3)


# --------------------------------------------------------------------------
# stock
# --------------------------------------------------------------------------

def totensor_collate(batch: Sequence[Any]):
    """The stock path: ``ToTensor()`` on every HWC uint8 image, then ``default_collate``.

    Images come out float32 CHW in [0, 1]; labels and anything else go
    through ``default_collate`` unchanged. Same output structure as
    ``default_collate`` (a tuple item gives a list of batched fields).
    """
    tt = _totensor()
    first = batch[0]
    if _is_image(first):
        return default_collate([tt(x) for x in batch])
    converted = [tuple(tt(f) if _is_image(f) else f for f in item) for item in batch]
    return default_collate(converted)


# --------------------------------------------------------------------------
# fast
# --------------------------------------------------------------------------

def _alloc(shape: tuple[int, ...], shared: bool, pin: bool) -> torch.Tensor:
    n = int(np.prod(shape))
    if shared:
        # In a DataLoader worker the batch travels to the main process through
        # shared memory. Allocating it there up front (as default_collate
        # does) spares the pickler a second copy of the whole batch.
        try:
            storage = torch.UntypedStorage._new_shared(n)
            return torch.empty(0, dtype=torch.uint8).set_(storage).view(shape)
        except (AttributeError, RuntimeError):  # pragma: no cover - private API moved
            return torch.empty(shape, dtype=torch.uint8).share_memory_()
    return torch.empty(shape, dtype=torch.uint8, pin_memory=pin)


alloc_batch = _alloc  # the public name: a uint8 batch buffer, in shared memory for a worker's batch


class FastCollate:
    """Collate HWC uint8 images into one uint8 batch tensor with a single copy per item.

    ``memory_format``: ``'nchw'`` (contiguous NCHW; each item transposed
    while copied) or ``'channels_last'`` (NHWC memory, a memcpy per item,
    returned as an NCHW-shaped tensor with channels-last strides, which
    ``model(x.to(memory_format=torch.channels_last))`` style code and
    ``to_float`` keep).

    ``reuse_buffer``: hand back the same batch memory on every call instead
    of allocating. Off by default, because a returned batch is only valid
    until the next call: keep a reference (``list(loader)``, an async
    ``.to(device, non_blocking=True)`` still in flight, the pin-memory thread)
    and it changes under you. Inside DataLoader workers it is always off:
    the tensor is handed to the main process through shared memory, and
    refilling it while the main process still reads it would corrupt
    batches; workers allocate each batch in shared memory instead. Safe use:
    ``num_workers=0``, and each batch consumed (copied to the device
    synchronously, or used) before the next is fetched.

    ``pin_memory``: allocate the batch in page-locked memory (needs CUDA;
    ignored in workers, where pinning is the DataLoader's job). A
    DataLoader with ``pin_memory=True`` would pin a second copy, so use one
    or the other.

    Images are HWC (or HW, treated as one channel) uint8 numpy arrays; other
    fields (labels, float targets) go through ``default_collate``. The
    output structure follows ``default_collate``: a tuple item gives a list.
    """

    def __init__(self, memory_format: str = "nchw", reuse_buffer: bool = False, pin_memory: bool = False):
        if memory_format not in MEMORY_FORMATS:
            raise ValueError(f"memory_format={memory_format!r}; one of: {', '.join(MEMORY_FORMATS)}")
        self.memory_format = memory_format
        self.reuse_buffer = bool(reuse_buffer)
        self.pin_memory = bool(pin_memory)
        self._buffers: dict[int, torch.Tensor] = {}  # field index -> storage-order buffer
        self._warned = False

    def __repr__(self) -> str:
        return (
            f"FastCollate(memory_format={self.memory_format!r}, reuse_buffer={self.reuse_buffer}, "
            f"pin_memory={self.pin_memory})"
        )

    # The buffers are a cache; a pickled collate (sent to workers) starts empty.
    def __getstate__(self):
        state = self.__dict__.copy()
        state["_buffers"] = {}
        return state

    def _buffer(self, field: int, n: int, h: int, w: int, c: int) -> torch.Tensor:
        """A (n, C, H, W) or (n, H, W, C) uint8 tensor to fill (storage order)."""
        nchw = self.memory_format == "nchw"
        shape = (n, c, h, w) if nchw else (n, h, w, c)
        in_worker = get_worker_info() is not None
        if in_worker:
            if self.reuse_buffer and not self._warned:
                warnings.warn(
                    "FastCollate(reuse_buffer=True) inside a DataLoader worker: reuse disabled "
                    "(batches are shared with the main process)",
                    RuntimeWarning,
                    stacklevel=3,
                )
                self._warned = True
            return _alloc(shape, shared=True, pin=False)
        pin = self.pin_memory and torch.cuda.is_available()
        if not self.reuse_buffer:
            return _alloc(shape, shared=False, pin=pin)
        buf = self._buffers.get(field)
        if buf is None or buf.shape[1:] != shape[1:] or buf.shape[0] < n:
            buf = _alloc(shape, shared=False, pin=pin)
            self._buffers[field] = buf
        return buf[:n]

    def _collate_images(self, field: int, images: Sequence[np.ndarray]) -> torch.Tensor:
        first = images[0]
        if first.ndim == 2:
            images = [x[:, :, None] for x in images]
            first = images[0]
        h, w, c = first.shape
        n = len(images)
        buf = self._buffer(field, n, h, w, c)
        dst = buf.numpy()
        try:
            if self.memory_format == "nchw":
                for i, x in enumerate(images):
                    np.copyto(dst[i], x.transpose(2, 0, 1))
                return buf
            np.stack(images, out=dst)
        except ValueError as exc:
            shapes = sorted({tuple(x.shape) for x in images})
            raise ValueError(f"FastCollate needs images of one shape per field; got {shapes}") from exc
        return buf.permute(0, 3, 1, 2)

    def __call__(self, batch: Sequence[Any]):
        first = batch[0]
        if isinstance(first, torch.Tensor) or _is_image(first):
            return self._collate_images(0, [_as_image(x) for x in batch])
        if not isinstance(first, (tuple, list)):
            return default_collate(batch)
        out = []
        for j, field in enumerate(zip(*batch)):
            f0 = field[0]
            if _is_image(f0) or (isinstance(f0, torch.Tensor) and f0.dtype == torch.uint8 and f0.dim() == 3):
                out.append(self._collate_images(j, [_as_image(x) for x in field]))
            else:
                out.append(default_collate(list(field)))
        return out


def _as_image(x) -> np.ndarray:
    """HWC uint8 numpy from an array or an HWC uint8 CPU tensor."""
    if isinstance(x, np.ndarray):
        return x
    return x.numpy()


# --------------------------------------------------------------------------
# on the device
# --------------------------------------------------------------------------

def _float_one(x: torch.Tensor, device, non_blocking: bool, mean, std, dtype) -> torch.Tensor:
    x = x.to(device, non_blocking=non_blocking) if device is not None else x
    y = x.to(dtype)  # keeps channels-last strides (preserve_format)
    y.div_(255)  # the same division ToTensor does, so results match bit for bit
    if mean is not None:
        c = y.shape[1]
        m = torch.as_tensor(mean, dtype=dtype, device=y.device).reshape(1, c, 1, 1)
        y.sub_(m)
    if std is not None:
        c = y.shape[1]
        s = torch.as_tensor(std, dtype=dtype, device=y.device).reshape(1, c, 1, 1)
        y.div_(s)
    return y


def to_float(
    batch,
    device=None,
    non_blocking: bool = True,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    dtype: torch.dtype = torch.float32,
):
    """The deferred part of ``ToTensor`` (and ``Normalize``), done after the copy to ``device``.

    uint8 tensors are moved to ``device`` (``non_blocking`` pays off from a
    pinned batch), converted to ``dtype`` and divided by 255; with ``mean``
    and ``std`` (per channel, on the [0, 1] scale) they are normalized too.
    Channels-last batches stay channels-last. A list/tuple batch (from
    ``FastCollate`` on ``(lr, hr)`` or ``(img, label)`` items) is handled
    field by field: non-uint8 tensors are only moved.
    """
    if isinstance(batch, torch.Tensor):
        if batch.dtype != torch.uint8:
            return batch.to(device, non_blocking=non_blocking) if device is not None else batch
        return _float_one(batch, device, non_blocking, mean, std, dtype)
    if isinstance(batch, (list, tuple)):
        out = [to_float(b, device, non_blocking, mean, std, dtype) for b in batch]
        return type(batch)(out) if isinstance(batch, tuple) else out
    raise TypeError(f"to_float expects a tensor or a list/tuple of tensors, got {type(batch).__name__}")


#: The name docs/ARCHITECTURE.md uses.
to_float_on_device = to_float


# --------------------------------------------------------------------------
# ceiling
# --------------------------------------------------------------------------

def memcpy_ceiling(items: Sequence[Any], out) -> Any:
    """Copy each item's bytes into slot ``i`` of ``out``: the ceiling for any collate.

    ``items``: C-contiguous numpy arrays (any shape) or bytes-like objects;
    ``out``: a preallocated numpy array or CPU tensor whose first dimension
    indexes slots, each slot holding exactly one item's bytes (e.g.
    ``(N, H, W, C)`` uint8). Returns ``out``.
    """
    dst = out.numpy() if isinstance(out, torch.Tensor) else out
    n = len(items)
    if n > dst.shape[0]:
        raise ValueError(f"{n} items do not fit {dst.shape[0]} slots")
    if not dst.flags.c_contiguous:
        raise ValueError("memcpy_ceiling needs a C-contiguous out (a reshape would copy)")
    flat = dst.reshape(dst.shape[0], -1)
    if flat.dtype != np.uint8:
        flat = flat.view(np.uint8)
    if n == 0:
        return out
    if isinstance(items[0], np.ndarray):
        for i, x in enumerate(items):
            flat[i] = x.reshape(-1).view(np.uint8)
    else:
        for i, x in enumerate(items):
            flat[i] = np.frombuffer(x, np.uint8)
    return out


# --------------------------------------------------------------------------
# the ceiling that is one: the fastest copy of the same bytes, several ways
# --------------------------------------------------------------------------

#: the ways :func:`copy_ceiling` copies a batch's bytes into a preallocated batch buffer
CEILING_METHODS = ("numpy_copy", "gather", "readinto", "mmap_slice")


def pick_ceiling(timings: dict, nbytes: int, samples: int | None = None) -> dict:
    """The ceiling from per-method run times (seconds of one pass, several runs each): each
    method's best run, then the fastest method. ``{"method", "best_s", "gb_s", "samples_per_s",
    "per_method": {method: best_s}}``; methods with no run are left out."""
    best = {m: float(min(ts)) for m, ts in timings.items() if len(ts) and min(ts) > 0}
    if not best:
        raise ValueError("copy ceiling: no method produced a timing")
    method = min(best, key=best.get)
    s = best[method]
    return {"method": method, "best_s": s, "gb_s": nbytes / s / 1e9,
            "samples_per_s": (samples / s) if samples else None, "per_method": best}


def _ceiling_passes(sides, batch_size: int, order: np.ndarray):
    """One callable per method: a pass copying every sample of every side into its batch buffer
    (returned too, with a ``close()`` of the files and maps).
    ``sides``: ``(array (N, ...) uint8 in RAM, path of the same bytes as a file or None, offset)``."""
    import mmap

    n = len(order)
    bufs = [np.zeros((batch_size, *a.shape[1:]), np.uint8) for a, _p, _o in sides]  # faulted in
    flat = [b.reshape(-1) for b in bufs]
    items = [int(np.prod(a.shape[1:])) for a, _p, _o in sides]
    starts = range(0, n, batch_size)

    def numpy_copy():
        for s in starts:
            k = min(batch_size, n - s)
            for (a, _p, _o), b in zip(sides, bufs):
                np.copyto(b[:k], a[s:s + k])

    def gather():
        for s in starts:
            idx = order[s:s + batch_size]
            for (a, _p, _o), b in zip(sides, bufs):
                np.take(a, idx, axis=0, out=b[:len(idx)], mode="clip")

    out = {"numpy_copy": numpy_copy, "gather": gather}
    if all(p is not None for _a, p, _o in sides):
        files = [open(p, "rb", buffering=0) for _a, p, _o in sides]  # noqa: SIM115 - closed by the caller
        maps = [mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) for f in files]
        views = [memoryview(m) for m in maps]
        mvs = [memoryview(f_) for f_ in flat]

        def readinto():
            for s in starts:
                k = min(batch_size, n - s)
                for f, (_a, _p, off), it, mv in zip(files, sides, items, mvs):
                    f.seek(off + s * it)
                    f.readinto(mv[:k * it])

        def mmap_slice():
            for s in starts:
                k = min(batch_size, n - s)
                for v, (_a, _p, off), it, mv in zip(views, sides, items, mvs):
                    mv[:k * it] = v[off + s * it:off + (s + k) * it]

        out.update(readinto=readinto, mmap_slice=mmap_slice)

        def close():
            mvs.clear()
            for v in views:
                v.release()
            for m in maps:
                m.close()
            for f in files:
                f.close()
        return out, close, bufs
    return out, lambda: None, bufs


def copy_ceiling(sides, batch_size: int, repeats: int = 5, warmup: int = 1, seed: int = 0,
                 methods=CEILING_METHODS, clock=None) -> dict:
    """The fastest copy of a data set's bytes into a preallocated batch buffer on one core, warm
    cache: every method of :data:`CEILING_METHODS` (those needing a file only when each side has
    one) timed ``repeats`` times after ``warmup`` passes, in the same run, interleaved; the result
    is :func:`pick_ceiling`'s, plus ``runs`` (every method's pass times) and ``bytes``.

    ``sides``: one ``(array, path, offset)`` per array of a sample (``lr`` and ``hr``): the bytes in
    RAM, and the same bytes in a file (``path``, data starting at ``offset``; None: RAM methods only)."""
    import time

    clock = clock or time.perf_counter
    n = len(sides[0][0])
    order = np.random.default_rng(seed).permutation(n)
    passes, close, _bufs = _ceiling_passes(sides, batch_size, order)
    try:
        run = {m: passes[m] for m in methods if m in passes}
        times: dict[str, list[float]] = {m: [] for m in run}
        for _ in range(warmup):
            for fn in run.values():
                fn()
        for _ in range(repeats):  # interleaved: every method once per round
            for m, fn in run.items():
                t0 = clock()
                fn()
                times[m].append(clock() - t0)
    finally:
        close()
    nbytes = int(sum(a.nbytes for a, _p, _o in sides))
    return {**pick_ceiling(times, nbytes, n), "runs": times, "bytes": nbytes}
