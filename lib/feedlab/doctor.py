"""The bottleneck doctor: which stage of an input pipeline bounds training, and what to change.

    python -m feedlab.doctor --data data/sr64 --format png [--batch-size 64] [--model none]
        [--device auto] [--workers 2] [--num-workers 0] [--repeats 3] [--json] [--trace out.json]

Each stage is timed on its own, from memory prepared outside the clock, with a
warm-up round and ``--repeats`` timed rounds (median and interquartile range):

==========  ==============================================================
read        the stored bytes of a sample into memory, no decoding (warm page
            cache; cold too, after evicting the files with ``feedlab.cache``)
decode      bytes → HWC uint8 arrays (image decoder, lz4, ``np.load`` ...)
transform   the per-sample augmentation (SR: random flip; ImageFolder: crop)
collate     a list of samples → the batch (stock ToTensor + default_collate,
            and feedlab's FastCollate)
h2d         what the training loop does to a batch before the step: the copy
            to the GPU (pageable and pinned) and the uint8 → float conversion;
            on a machine without CUDA only the conversion exists
model       forward + backward + optimizer step on a batch already on the device
==========  ==============================================================

plus the DataLoader end to end for 0..``--workers`` workers.

The prediction: with ``W`` workers on ``C`` cores, workers deliver at most
``min(W, C) / (read + decode + transform + collate)`` samples/s (wall time per
sample), the main process consumes at most ``1 / (h2d + model)``, and all the
CPU time per sample (workers and main, measured with ``time.process_time``)
must fit on ``C`` cores. The smallest of the three is the ceiling; the term
that sets it names the bounding stage. With ``W = 0`` everything runs in
series. Advice: every single change of a setting (``num_workers``, collate,
decode backend, format, ``batch_size``, ``pin_memory``) whose predicted
ceiling, from the same measured stage costs, beats the current one.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

BOUND_STAGES = ("read", "decode", "transform", "collate", "transfer", "h2d", "model")
WORKER_STAGES = ("read", "decode", "transform", "collate")
MAIN_STAGES = ("transfer", "h2d", "model")  # transfer: worker → main hand-over, only with workers
COLLATES = ("totensor", "fast")
VERDICTS = ("data-bound", "compute-bound")
ARRAY_FORMATS = ("hdf5", "zarr", "npy_mmap")
MIN_GAIN = 1.05


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True)
class Config:
    """One input-pipeline setting the doctor can predict and measure."""

    fmt: str
    decode: str = "pil"
    collate: str = "totensor"
    num_workers: int = 0
    batch_size: int = 64
    pin_memory: bool = False

    def replace(self, **kw) -> "Config":
        return dataclasses.replace(self, **kw)

    def label(self) -> str:
        dec = f"/{self.decode}" if self.decode not in ("", "none") else ""
        pin = ", pinned" if self.pin_memory else ""
        return (f"{self.fmt}{dec}, {self.collate} collate, {self.num_workers} workers, "
                f"batch {self.batch_size}{pin}")

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------- pipelines


def _center_crop_resize(img: np.ndarray, size: int) -> np.ndarray:
    from PIL import Image

    h, w = img.shape[:2]
    s = min(h, w)
    top, left = (h - s) // 2, (w - s) // 2
    sq = img[top:top + s, left:left + s]
    if s != size:
        sq = np.asarray(Image.fromarray(np.ascontiguousarray(sq)).resize((size, size), Image.BILINEAR))
    return np.ascontiguousarray(sq)


class SRFlip:
    """Random horizontal flip of an (lr, hr) pair, as contiguous copies."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def __call__(self, sample):
        lr, hr = sample
        if self.rng.random() < 0.5:
            return np.ascontiguousarray(lr[:, ::-1]), np.ascontiguousarray(hr[:, ::-1])
        return np.array(lr, copy=True), np.array(hr, copy=True)


class CenterCrop:
    """Center crop + resize of an (image, label) pair to ``size``²."""

    def __init__(self, size: int = 96):
        self.size = int(size)

    def __call__(self, sample):
        img, label = sample
        return _center_crop_resize(img, self.size), label


@dataclass
class Pipeline:
    """A sample's path through the input pipeline, split into stages.

    ``read(i)`` returns the stored bytes (or arrays) of sample ``i``;
    ``decode(raw)`` the sample tuple; ``transform(sample)`` the augmented one;
    ``nbytes(raw)`` how many stored bytes ``raw`` holds. ``files(indices)``
    lists what to evict for a cold read (``None``: eviction not possible).
    """

    fmt: str
    decode_name: str
    n: int
    read: Callable[[int], Any]
    decode: Callable[[Any], Any]
    transform: Callable[[Any], Any] | None = None
    nbytes: Callable[[Any], int] = lambda raw: 0
    files: Callable[[Sequence[int]], list] | None = None
    kind: str = "sr"

    def item(self, i: int):
        s = self.decode(self.read(i))
        return self.transform(s) if self.transform is not None else s


class PipelineDataset:
    """Map-style dataset running a :class:`Pipeline` per item (what the DataLoader times)."""

    def __init__(self, pipeline: Pipeline):
        self.pipeline = pipeline

    def __len__(self) -> int:
        return self.pipeline.n

    def __getitem__(self, i):
        return self.pipeline.item(int(i))


class _FreshSharedBatch:
    """Hands out a copy of one collated batch per index, allocated in shared memory the
    way DataLoader's collate does inside a worker: what a worker must pass to the main
    process, at no other cost. Used to measure the worker → main transfer floor."""

    def __init__(self, batch, n: int):
        self.batch, self.n = batch, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        import torch

        def fresh(t):
            if isinstance(t, torch.Tensor):
                out = torch.empty_like(t, memory_format=torch.preserve_format).share_memory_()
                return out.copy_(t)
            return t

        b = self.batch
        return type(b)(fresh(t) for t in b) if isinstance(b, (list, tuple)) else fresh(b)


def _bytes_len(raw) -> int:
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return len(raw)
    if isinstance(raw, np.ndarray):
        return int(raw.nbytes)
    if isinstance(raw, (tuple, list)):
        return sum(_bytes_len(r) for r in raw)
    return 0


def _read_files(paths: Sequence[Path]) -> tuple:
    out = []
    for p in paths:
        with open(p, "rb") as fh:
            out.append(fh.read())
    return tuple(out)


class _FilePairReader:
    def __init__(self, lr_path: Callable[[int], Path], hr_path: Callable[[int], Path]):
        self.lr_path, self.hr_path = lr_path, hr_path

    def __call__(self, i: int):
        return _read_files((self.lr_path(i), self.hr_path(i)))

    def files(self, indices):
        return [p for i in indices for p in (self.lr_path(i), self.hr_path(i))]


class _ImageDecodePair:
    def __init__(self, backend: str):
        self.backend = backend
        self._fn = None

    def __call__(self, raw):
        if self._fn is None:
            from feedlab.formats.png import resolve_decoder

            self._fn = resolve_decoder(self.backend)
        return self._fn(raw[0]), self._fn(raw[1])

    def __getstate__(self):
        return {"backend": self.backend, "_fn": None}


def _npy_decode(raw):
    return (np.load(io.BytesIO(raw[0]), allow_pickle=False), np.load(io.BytesIO(raw[1]), allow_pickle=False))


def _pt_decode(raw):
    import torch

    d = torch.load(io.BytesIO(raw[0]), weights_only=True, map_location="cpu")
    return d["lr"].numpy(), d["hr"].numpy()


class _LmdbRead:
    def __init__(self, ds):
        self.ds = ds

    def __call__(self, i: int) -> bytes:
        from feedlab.formats import lmdb_store

        env = (self.ds._environment() if hasattr(self.ds, "_environment")
               else lmdb_store._env_for(self.ds._path))
        with env.begin(buffers=True) as txn:
            return bytes(txn.get(lmdb_store.key(i)))


class _LmdbDecode:
    def __init__(self, ds):
        self.ds = ds

    def __call__(self, raw):
        lr = np.empty(self.ds.lr_shape, np.uint8)
        hr = np.empty(self.ds.hr_shape, np.uint8)
        self.ds._decode_into(raw, -1, lr, hr)
        return lr, hr


class _ArrayRead:
    def __init__(self, ds):
        self.ds = ds

    def __call__(self, i: int):
        return self.ds._read(i)


def _identity(x):
    return x


def _imagefolder_decode(backend: str):
    dec = _ImageDecodePair(backend)

    def fn(raw, _dec=dec):
        if _dec._fn is None:
            _dec((raw[0], raw[0]))
        return _dec._fn(raw[0]), raw[1]
    return fn


_OPEN: dict[tuple[str, str], Any] = {}


def _open_once(root: Path, fmt: str):
    """One reader per (root, format) per process: py-lmdb refuses to open an
    environment twice in one process, and every Doctor over the same set shares it."""
    from feedlab import formats

    key = (str(Path(root).resolve()), fmt)
    if key not in _OPEN:
        _OPEN[key] = formats.open_dataset(root, fmt)
    return _OPEN[key]


def build_pipeline(root, fmt: str, decode: str = "pil", transform: str = "default",
                   crop: int = 96, seed: int = 0) -> Pipeline:
    """The stage-split pipeline of a data set in ``fmt`` under ``root``.

    ``decode`` is the image backend (png, imagefolder; ignored by the others).
    ``transform``: ``"default"`` (SR: random flip; ImageFolder: center crop to
    ``crop``), or ``"none"``.
    """
    from feedlab import formats
    from feedlab.cache import files_under

    root = Path(root)
    spec = formats.get_format(fmt)
    if fmt in ("imagefolder", "jpeg"):
        from feedlab.formats.imagefolder import scan

        _classes, samples = scan(root)
        if not samples:
            raise FileNotFoundError(f"imagefolder: no images under {root}")
        paths = [p for p, _l in samples]
        labels = [lab for _p, lab in samples]

        def read(i, _p=paths, _l=labels):
            with open(_p[i], "rb") as fh:
                return fh.read(), _l[i]

        tf = CenterCrop(crop) if transform == "default" else None
        return Pipeline(fmt, decode, len(samples), read, _imagefolder_decode(decode), tf,
                        nbytes=lambda raw: len(raw[0]), files=lambda idx, _p=paths: [_p[i] for i in idx],
                        kind="cls")
    tf = SRFlip(seed) if transform == "default" else None
    if fmt == "png":
        from feedlab.formats.png import sample_name

        n = len(formats.open_dataset(root, "png"))
        reader = _FilePairReader(lambda i: root / "lr" / sample_name(i), lambda i: root / "hr" / sample_name(i))
        return Pipeline(fmt, decode, n, reader, _ImageDecodePair(decode), tf, nbytes=_bytes_len,
                        files=reader.files)
    if fmt == "npy":
        from feedlab.formats.npy_store import NPY_DIR, npy_name

        d = root / NPY_DIR
        n = len(formats.open_dataset(root, "npy"))
        reader = _FilePairReader(lambda i: d / npy_name("lr", i), lambda i: d / npy_name("hr", i))
        return Pipeline(fmt, "np.load", n, reader, _npy_decode, tf, nbytes=_bytes_len, files=reader.files)
    if fmt == "pt":
        from feedlab.formats.pt_store import DIRNAME, pt_name

        d = root / DIRNAME
        n = len(formats.open_dataset(root, "pt"))

        def read(i, _d=d):
            return _read_files((_d / pt_name(i),))

        return Pipeline(fmt, "torch.load", n, read, _pt_decode, tf, nbytes=_bytes_len,
                        files=lambda idx, _d=d: [_d / pt_name(i) for i in idx])
    if fmt in ("lmdb", "lmdb_raw"):
        ds = _open_once(root, fmt)
        where = files_under(root / fmt)
        return Pipeline(fmt, "lz4" if fmt == "lmdb" else "copy", len(ds), _LmdbRead(ds), _LmdbDecode(ds), tf,
                        nbytes=_bytes_len, files=lambda idx, _w=where: list(_w))
    if fmt in ARRAY_FORMATS:
        ds = _open_once(root, fmt)
        where = files_under(root / spec.path.rstrip("/"))
        return Pipeline(fmt, "none", len(ds), _ArrayRead(ds), _identity, tf, nbytes=_bytes_len,
                        files=lambda idx, _w=where: list(_w))
    raise ValueError(f"doctor: format {fmt!r} not supported")


def available_formats(root) -> list[str]:
    """SR formats present (non-empty) under ``root``."""
    from feedlab.formats import FORMATS, SR_FORMATS

    out = []
    for f in SR_FORMATS:
        try:
            if FORMATS[f].bytes_on_disk(Path(root)) > 0:
                out.append(f)
        except Exception:
            continue
    return out


def decode_alternatives(kind: str) -> list[str]:
    """Image decode backends this environment has for ``kind`` (png or jpeg), CPU only."""
    try:
        from feedlab import decode as dec
    except ImportError:
        return ["pil"]
    out = []
    for name, info in dec.available_backends().items():
        if name in ("cuda", "pillow-simd") or not getattr(info, "available", False):
            continue
        if dec.supports(name, kind):
            out.append(name)
    return out or ["pil"]


# ---------------------------------------------------------------- collate and model


def make_collate(name: str):
    """``totensor`` (per-item ToTensor + default_collate) or ``fast`` (uint8 NCHW)."""
    from feedlab import collate as col

    if name == "totensor":
        return col.totensor_collate
    if name == "fast":
        return col.FastCollate()
    raise ValueError(f"collate {name!r}: one of {', '.join(COLLATES)}")


def _first_tensor(batch):
    import torch

    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, (list, tuple)):
        return batch[0]
    raise TypeError(f"batch of type {type(batch).__name__}")


def _batch_nbytes(batch) -> int:
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.numel() * batch.element_size()
    if isinstance(batch, (list, tuple)):
        return sum(_batch_nbytes(b) for b in batch)
    return 0


def make_model(name: str, device):
    import torch

    if name == "none":
        return None, None
    from feedlab.models import make_model as mk

    model = mk(name).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)


# ---------------------------------------------------------------- measurement


@dataclass
class Stage:
    """Measured seconds per sample of one stage variant (one value per repeat)."""

    stage: str
    variant: str
    wall: list[float] = field(default_factory=list)   # s per sample
    cpu: list[float] = field(default_factory=list)    # process CPU s per sample
    bytes_per_sample: float = 0.0
    measurable: bool = True
    note: str = ""

    @property
    def t(self) -> float:
        return float(np.median(self.wall)) if self.wall else 0.0

    @property
    def c(self) -> float:
        return float(np.median(self.cpu)) if self.cpu else 0.0

    def row(self, workers: int, cores: int) -> dict:
        out = {"stage": self.stage, "variant": self.variant, "measurable": self.measurable, "note": self.note}
        if not self.measurable or not self.wall:
            return out
        q25, med, q75 = np.percentile(self.wall, [25, 50, 75])
        per_core = 1.0 / med if med > 0 else math.inf
        scale = max(1, min(workers, cores)) if self.stage in WORKER_STAGES else 1
        out.update({"s_per_sample": float(med), "s_per_sample_q25": float(q25), "s_per_sample_q75": float(q75),
                    "cpu_s_per_sample": self.c, "samples_per_s_per_core": per_core,
                    "samples_per_s_with_workers": per_core * scale, "repeats": len(self.wall)})
        if self.bytes_per_sample:
            out["bytes_per_s"] = self.bytes_per_sample / med if med > 0 else math.inf
            out["bytes_per_sample"] = self.bytes_per_sample
        return out


def _timed(fn: Callable[[], Any], per: int, warmup: int, repeats: int, device=None,
           setup: Callable[[], Any] | None = None) -> tuple[list[float], list[float]]:
    """(wall, cpu) seconds per unit of ``per`` units for each timed round (time_callable)."""
    from feedlab.timing import time_callable

    cpu: list[float] = []

    def call():
        c0 = time.process_time()
        fn()
        cpu.append(time.process_time() - c0)

    wall = time_callable(call, warmup=warmup, repeats=repeats, device=device, setup=setup)
    cpu = cpu[len(cpu) - repeats:]
    return [w / per for w in wall], [c / per for c in cpu]


def usable_cores() -> int:
    from feedlab.monitor import usable_cores as uc

    return uc()


def shm_report(batch_bytes: int, workers: int, prefetch_factor: int = 2, path: str = "/dev/shm") -> dict:
    """Size and free space of ``/dev/shm`` against what in-flight batches need
    (``batch_bytes × prefetch_factor × workers``): DataLoader workers hand batches
    over in shared memory, and a container's small /dev/shm ends in 'Bus error'."""
    need = int(batch_bytes) * int(prefetch_factor) * int(workers)
    try:
        du = shutil.disk_usage(path)
        total, free = int(du.total), int(du.free)
    except OSError as exc:
        return {"path": path, "available": False, "need_bytes": need, "fits": None,
                "warning": f"cannot read {path}: {exc}"}
    fits = need <= free
    warn = "" if fits else (f"{path} has {free / 2**20:.0f} MiB free but {workers} workers × prefetch_factor "
                            f"{prefetch_factor} × {batch_bytes / 2**20:.1f} MiB batches need {need / 2**20:.0f} MiB: "
                            "expect 'Bus error' / 'DataLoader worker killed'; enlarge it (docker --shm-size) "
                            "or lower num_workers, prefetch_factor or batch_size")
    return {"path": path, "available": True, "total_bytes": total, "free_bytes": free, "need_bytes": need,
            "batch_bytes": int(batch_bytes), "prefetch_factor": int(prefetch_factor), "workers": int(workers),
            "fits": fits, "warning": warn}


class Doctor:
    """Measures stage costs for a data set and predicts/measures configurations.

    ``pipeline_factory(fmt, decode) -> Pipeline`` builds pipelines (default:
    :func:`build_pipeline` over ``root``); ``model`` may be a module instance
    (tests pass one with a known cost) or a name for ``feedlab.models``.
    """

    def __init__(self, root=None, fmt: str = "png", decode: str = "pil", batch_size: int = 64,
                 model: Any = "none", device: str = "auto", max_workers: int | None = None,
                 repeats: int = 3, warmup: int = 1, samples: int = 64, e2e_batches: int = 16,
                 transform: str = "default", cold: bool = True, alt_formats: Sequence[str] | None = None,
                 pipeline_factory: Callable[[str, str], Pipeline] | None = None,
                 collates: dict[str, Callable] | None = None, log: Callable[[str], None] | None = None):
        import torch

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = str(device)
        self.cuda = self.device.startswith("cuda") and torch.cuda.is_available()
        self.root = Path(root) if root is not None else None
        self.fmt, self.decode = fmt, decode
        self.batch_size = int(batch_size)
        self.cores = usable_cores()
        self.max_workers = self.cores if max_workers is None else int(max_workers)
        self.repeats, self.warmup = int(repeats), int(warmup)
        self.samples = int(samples)
        self.e2e_batches = int(e2e_batches)
        self.transform = transform
        self.cold = cold
        self.alt_formats = None if alt_formats is None else list(alt_formats)
        self._factory = pipeline_factory or (lambda f, d: build_pipeline(self.root, f, d, transform))
        self._collates = collates
        self.log = log or (lambda msg: None)
        if isinstance(model, str):
            self.model_name = model
            self.model, self.optimizer = make_model(model, self.device)
        else:
            self.model_name = type(model).__name__ if model is not None else "none"
            self.model = model.to(self.device) if model is not None else None
            self.optimizer = (torch.optim.SGD(self.model.parameters(), lr=1e-3)
                              if self.model is not None and any(p.requires_grad for p in self.model.parameters())
                              else None)
        self.pipelines: dict[tuple[str, str], Pipeline] = {}
        self.stages: dict[tuple, Stage] = {}
        self.e2e: dict[Config, list[float]] = {}
        self.batch_bytes: dict[tuple[str, int], int] = {}
        self._batches: dict[tuple[str, int], Any] = {}
        self.notes: list[str] = []

    # --------------------------------------------------------------- pieces
    def collate_fn(self, name: str):
        if self._collates is not None:
            return self._collates[name]
        return make_collate(name)

    def collate_names(self) -> list[str]:
        return list(self._collates) if self._collates is not None else list(COLLATES)

    def pipeline(self, fmt: str, decode: str) -> Pipeline:
        key = (fmt, decode)
        if key not in self.pipelines:
            self.pipelines[key] = self._factory(fmt, decode)
        return self.pipelines[key]

    def _indices(self, n: int) -> list[int]:
        rng = np.random.default_rng(0)
        m = min(self.samples, n)
        return sorted(rng.choice(n, size=m, replace=False).tolist()) if m < n else list(range(n))

    # --------------------------------------------------------------- stage measurements
    def measure_item_stages(self, fmt: str, decode: str, cold: bool | None = None) -> None:
        """read (warm, and cold when eviction works), decode, transform for one pipeline."""
        p = self.pipeline(fmt, decode)
        idx = self._indices(p.n)
        idx_shuffled = list(np.random.default_rng(1).permutation(idx))
        m = len(idx)
        raws = [p.read(i) for i in idx_shuffled]
        nbytes = float(np.mean([p.nbytes(r) for r in raws]))
        w, c = _timed(lambda: [p.read(i) for i in idx_shuffled], m, self.warmup, self.repeats)
        self.stages[("read", fmt, decode)] = Stage("read", f"{fmt} (warm cache)", w, c, nbytes)
        if (self.cold if cold is None else cold):
            self._measure_cold(p, fmt, decode, idx_shuffled, nbytes)
        w, c = _timed(lambda: [p.decode(r) for r in raws], m, self.warmup, self.repeats)
        self.stages[("decode", fmt, decode)] = Stage("decode", f"{fmt}: {p.decode_name}", w, c)
        samples = [p.decode(r) for r in raws]
        if p.transform is not None:
            w, c = _timed(lambda: [p.transform(s) for s in samples], m, self.warmup, self.repeats)
            self.stages[("transform", fmt, decode)] = Stage("transform", type(p.transform).__name__, w, c)
        else:
            self.stages[("transform", fmt, decode)] = Stage("transform", "none", [0.0], [0.0])
        self._samples = [p.transform(s) if p.transform else s for s in samples]

    def _measure_cold(self, p: Pipeline, fmt, decode, idx, nbytes) -> None:
        key = ("read_cold", fmt, decode)
        if p.files is None:
            self.stages[key] = Stage("read", f"{fmt} (cold cache)", measurable=False,
                                     note="no files to evict for this pipeline")
            return
        try:
            from feedlab.cache import evict
        except ImportError:
            self.stages[key] = Stage("read", f"{fmt} (cold cache)", measurable=False, note="feedlab.cache missing")
            return
        files = p.files(idx)
        rep = evict(files)
        if not rep.ok:
            self.stages[key] = Stage("read", f"{fmt} (cold cache)", measurable=False,
                                     note=f"eviction not possible here: {rep.reason or rep.failed[:1]}")
            return
        w, c = _timed(lambda: [p.read(i) for i in idx], len(idx), 0, self.repeats,
                      setup=lambda: evict(files, verify=False))
        self.stages[key] = Stage("read", f"{fmt} (cold cache)", w, c, nbytes,
                                 note=f"evicted with posix_fadvise ({rep.verified})")

    def _batch_items(self, batch_size: int) -> list:
        s = self._samples
        return [s[k % len(s)] for k in range(batch_size)]

    def measure_collate(self, name: str, batch_size: int) -> None:
        fn = self.collate_fn(name)
        items = self._batch_items(batch_size)
        w, c = _timed(lambda: fn(items), batch_size, self.warmup, self.repeats)
        self.stages[("collate", name, batch_size)] = Stage("collate", f"{name} (batch {batch_size})", w, c)
        batch = fn(items)
        self._batches[(name, batch_size)] = batch
        self.batch_bytes[(name, batch_size)] = _batch_nbytes(batch)

    def measure_h2d(self, collate: str, batch_size: int) -> None:
        """run_epoch's h2d phase on this batch: the copy (pageable, or pinned) and
        the uint8 → float conversion. Without CUDA: the conversion only."""
        import torch

        from feedlab.timing import _to_device_float

        batch = self._batches[(collate, batch_size)]
        x, y = (batch[0], batch[1]) if isinstance(batch, (list, tuple)) else (batch, None)
        dev = self.device

        def step(xx, yy):
            _to_device_float(xx, dev, True)
            if yy is not None:
                _to_device_float(yy, dev, True)

        pins = (False, True) if self.cuda else (False,)
        for pin in pins:
            if pin:
                xs, ys = x.pin_memory(), (y.pin_memory() if isinstance(y, torch.Tensor) else y)
            else:
                xs, ys = x, y
            w, c = _timed(lambda: step(xs, ys), batch_size, self.warmup, self.repeats,
                          device=dev if self.cuda else None)
            what = ("pinned" if pin else "pageable") if self.cuda else "uint8→float only (no CUDA)"
            self.stages[("h2d", collate, batch_size, pin)] = Stage(
                "h2d", f"{what}, {collate} batch", w, c, bytes_per_sample=self.batch_bytes[(collate, batch_size)] / batch_size)
        if not self.cuda:
            self.stages[("h2d_copy", collate, batch_size)] = Stage(
                "h2d", "copy to GPU, pageable and pinned", measurable=False, note="not measurable: no CUDA")

    def measure_transfer(self, collate: str, batch_size: int, batches: int = 24) -> None:
        """The worker → main hand-over per sample: a one-worker DataLoader whose items are
        ready-made batches in shared memory (as collate leaves them in a worker), timed in
        the main loop, less the in-process copy of the same batch that the collate stage
        already counts. Applies only when num_workers > 0."""
        import torch
        from torch.utils.data import DataLoader

        key = ("transfer", collate, batch_size)
        batch = self._batches[(collate, batch_size)]

        def copy_only():
            b = batch
            for t in (b if isinstance(b, (list, tuple)) else (b,)):
                if isinstance(t, torch.Tensor):
                    torch.empty_like(t).copy_(t)

        copy_w, _ = _timed(copy_only, batch_size, self.warmup, self.repeats)
        loader = DataLoader(_FreshSharedBatch(batch, batches), batch_size=None, num_workers=1,
                            persistent_workers=True, prefetch_factor=2)

        def epoch():
            for _ in loader:
                pass

        try:
            w, c = _timed(epoch, batches * batch_size, 1, self.repeats)
        except Exception as exc:  # e.g. no usable shared memory
            self.stages[key] = Stage("transfer", f"worker → main, {collate} batch", measurable=False,
                                     note=f"could not measure: {type(exc).__name__}: {exc}")
            return
        finally:
            del loader
        floor = float(np.median(copy_w))
        w = [max(0.0, x - floor) for x in w]
        self.stages[key] = Stage("transfer", f"worker → main, {collate} batch {batch_size}", w, w,
                                 bytes_per_sample=self.batch_bytes[(collate, batch_size)] / batch_size,
                                 note="one-worker DataLoader of ready batches, minus an in-process copy")

    def measure_model(self, collate: str, batch_size: int) -> None:
        import torch

        from feedlab.timing import _to_device_float

        key = ("model", batch_size)
        if self.model is None:
            self.stages[key] = Stage("model", "none", [0.0], [0.0], note="--model none: no step")
            return
        batch = self._batches[(collate, batch_size)]
        x, y = (batch[0], batch[1]) if isinstance(batch, (list, tuple)) else (batch, None)
        x = _to_device_float(x, self.device, False)
        y = _to_device_float(y, self.device, False) if isinstance(y, torch.Tensor) else None
        model, opt = self.model, self.optimizer

        def step():
            out = model(x)
            if y is not None and out.shape == y.shape:
                loss = torch.nn.functional.mse_loss(out, y)
            elif y is not None and y.dtype in (torch.int64, torch.int32):
                loss = torch.nn.functional.cross_entropy(out, y.long())
            else:
                loss = out.float().mean()
            if opt is not None:
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

        w, c = _timed(step, batch_size, self.warmup, self.repeats, device=self.device if self.cuda else None)
        self.stages[key] = Stage("model", f"{self.model_name} on {self.device} (batch {batch_size})", w, c)

    def measure(self, alternatives: bool = True, collate: str = "totensor") -> "Doctor":
        """Every stage of the configured pipeline; with ``alternatives``, the other
        collates, decode backends, formats present, and the model at twice the batch."""
        bs = self.batch_size
        self.log(f"measuring {self.fmt}/{self.decode} read, decode, transform")
        self.measure_item_stages(self.fmt, self.decode)
        for name in self.collate_names():
            self.log(f"measuring collate {name}")
            self.measure_collate(name, bs)
            self.measure_h2d(name, bs)
            if self.max_workers > 0:
                self.measure_transfer(name, bs)
        self.measure_model(collate if collate in self.collate_names() else self.collate_names()[0], bs)
        if alternatives:
            if self.model is not None:
                for name in self.collate_names():
                    self.measure_collate(name, 2 * bs)
                    self.measure_h2d(name, 2 * bs)
                    if self.max_workers > 0:
                        self.measure_transfer(name, 2 * bs)
                self.measure_model(self.collate_names()[0], 2 * bs)
            kind = self.pipeline(self.fmt, self.decode).kind
            if self.fmt in ("png", "imagefolder", "jpeg"):
                for b in decode_alternatives("png" if self.fmt == "png" else "jpeg"):
                    if b != self.decode:
                        self.log(f"measuring decode backend {b}")
                        try:
                            self.measure_item_stages(self.fmt, b, cold=False)
                        except Exception as exc:  # a backend that fails on these files is reported, not fatal
                            self.notes.append(f"decode backend {b}: {exc}")
            if self.root is not None and kind == "sr":
                present = available_formats(self.root)
                wanted = present if self.alt_formats is None else [f for f in self.alt_formats if f in present]
                for f in wanted:
                    if f != self.fmt:
                        self.log(f"measuring format {f}")
                        self.measure_item_stages(f, default_decode(f), cold=False)
            # restore the configured pipeline's samples for any later collate use
            self.measure_item_stages(self.fmt, self.decode, cold=False)
        return self

    # --------------------------------------------------------------- prediction
    def costs(self, cfg: Config) -> dict[str, tuple[float, float]] | None:
        """(wall, cpu) seconds per sample of every stage for ``cfg``; None if unmeasured."""
        keys = {"read": ("read", cfg.fmt, cfg.decode), "decode": ("decode", cfg.fmt, cfg.decode),
                "transform": ("transform", cfg.fmt, cfg.decode),
                "collate": ("collate", cfg.collate, cfg.batch_size),
                "h2d": ("h2d", cfg.collate, cfg.batch_size, bool(cfg.pin_memory and self.cuda)),
                "model": ("model", cfg.batch_size)}
        out = {}
        for stage, k in keys.items():
            s = self.stages.get(k)
            if s is None or not s.measurable:
                return None
            out[stage] = (s.t, s.c)
        out["transfer"] = (0.0, 0.0)
        if cfg.num_workers > 0:
            s = self.stages.get(("transfer", cfg.collate, cfg.batch_size))
            if s is not None and s.measurable:
                out["transfer"] = (s.t, s.c)
        return out

    def predict(self, cfg: Config) -> dict | None:
        """Predicted samples/s of ``cfg`` and the stage that bounds it."""
        costs = self.costs(cfg)
        if costs is None:
            return None
        W, C = int(cfg.num_workers), self.cores
        wall = {k: v[0] for k, v in costs.items()}
        cpu = {k: v[1] for k, v in costs.items()}
        worker_wall = sum(wall[s] for s in WORKER_STAGES)
        main_wall = sum(wall[s] for s in MAIN_STAGES)
        total_cpu = sum(cpu.values())
        if W == 0:
            t = worker_wall + main_wall
            rate = 1.0 / t if t > 0 else math.inf
            bound = max(BOUND_STAGES, key=lambda s: wall[s])
            term = "serial (num_workers=0: every stage in the main process)"
        else:
            terms = {
                "supply": (min(W, C) / worker_wall) if worker_wall > 0 else math.inf,
                "consumer": (1.0 / main_wall) if main_wall > 0 else math.inf,
                "cores": (C / total_cpu) if total_cpu > 0 else math.inf,
            }
            which = min(terms, key=terms.get)
            rate = terms[which]
            if which == "supply":
                bound = max(WORKER_STAGES, key=lambda s: wall[s])
                term = f"workers: {min(W, C)} × 1/(read+decode+transform+collate)"
            elif which == "consumer":
                bound = max(MAIN_STAGES, key=lambda s: wall[s])
                term = "main process: 1/(transfer+h2d+model)"
            else:
                bound = max(BOUND_STAGES, key=lambda s: cpu[s])
                term = f"CPU: {C} cores shared by workers and the main process"
        verdict = "compute-bound" if bound == "model" else "data-bound"
        share = {s: (wall[s] / sum(wall.values()) if sum(wall.values()) > 0 else 0.0) for s in BOUND_STAGES}
        return {"config": cfg.as_dict(), "predicted_samples_per_s": rate, "bound_stage": bound,
                "verdict": verdict, "binding_term": term, "stage_share_of_wall": share}

    def candidates(self, cfg: Config) -> list[tuple[str, Any, Config]]:
        out: list[tuple[str, Any, Config]] = []
        for w in range(0, self.max_workers + 1):
            if w != cfg.num_workers:
                out.append(("num_workers", w, cfg.replace(num_workers=w)))
        for c in self.collate_names():
            if c != cfg.collate:
                out.append(("collate", c, cfg.replace(collate=c)))
        decs = {k[2] for k in self.stages if k[0] == "read" and k[1] == cfg.fmt}
        for d in sorted(decs - {cfg.decode}):
            out.append(("decode backend", d, cfg.replace(decode=d)))
        fmts = {(k[1], k[2]) for k in self.stages if k[0] == "read" and k[1] != cfg.fmt}
        for f, d in sorted(fmts):
            out.append(("format", f, cfg.replace(fmt=f, decode=d)))
        for bs in sorted({k[1] for k in self.stages if k[0] == "model"} - {cfg.batch_size}):
            out.append(("batch_size", bs, cfg.replace(batch_size=bs)))
        if self.cuda:
            out.append(("pin_memory", not cfg.pin_memory, cfg.replace(pin_memory=not cfg.pin_memory)))
        return out

    def advise(self, cfg: Config, min_gain: float = MIN_GAIN) -> list[dict]:
        """Single-setting changes that raise the predicted ceiling, best first."""
        base = self.predict(cfg)
        if base is None:
            return []
        advice = []
        for setting, value, new in self.candidates(cfg):
            p = self.predict(new)
            if p is None or base["predicted_samples_per_s"] <= 0:
                continue
            gain = p["predicted_samples_per_s"] / base["predicted_samples_per_s"]
            if gain >= min_gain:
                advice.append({"setting": setting, "value": value, "config": new.as_dict(),
                               "predicted_samples_per_s": p["predicted_samples_per_s"],
                               "expected_gain": gain, "bound_stage_after": p["bound_stage"],
                               "why": self._why(setting, cfg, new, base)})
        advice.sort(key=lambda a: -a["expected_gain"])
        return advice

    def _why(self, setting: str, old: Config, new: Config, base: dict) -> str:
        co, cn = self.costs(old), self.costs(new)
        us = lambda x: f"{x * 1e6:.0f} µs"  # noqa: E731
        if setting == "num_workers":
            return (f"{base['bound_stage']} bounds it; {new.num_workers} workers on {self.cores} cores "
                    f"run read+decode+transform+collate in parallel")
        if setting == "collate":
            return f"collate {us(co['collate'][0])} → {us(cn['collate'][0])} per sample"
        if setting == "decode backend":
            return f"decode {us(co['decode'][0])} → {us(cn['decode'][0])} per sample"
        if setting == "format":
            o = co["read"][0] + co["decode"][0]
            n = cn["read"][0] + cn["decode"][0]
            return f"read+decode {us(o)} → {us(n)} per sample"
        if setting == "batch_size":
            return f"model {us(co['model'][0])} → {us(cn['model'][0])} per sample"
        if setting == "pin_memory":
            return f"h2d {us(co['h2d'][0])} → {us(cn['h2d'][0])} per sample"
        return ""

    # --------------------------------------------------------------- end to end
    def loader(self, cfg: Config, dataset=None, **kw):
        import torch
        from torch.utils.data import DataLoader

        ds = dataset if dataset is not None else PipelineDataset(self.pipeline(cfg.fmt, cfg.decode))
        extra = dict(kw)
        if cfg.num_workers > 0:
            extra.setdefault("prefetch_factor", 2)
        return DataLoader(ds, batch_size=cfg.batch_size, shuffle=True, num_workers=cfg.num_workers,
                          collate_fn=self.collate_fn(cfg.collate), pin_memory=bool(cfg.pin_memory and self.cuda),
                          generator=torch.Generator().manual_seed(0), drop_last=True, **extra)

    def measure_e2e(self, cfg: Config, repeats: int | None = None) -> list[float]:
        """Samples/s of the DataLoader + model loop (``e2e_batches`` batches per
        repeat, one untimed warm-up pass, each pass with fresh workers; the
        clock starts when the first batch is in hand)."""
        from feedlab.timing import run_epoch

        loader = self.loader(cfg)
        nb = max(2, min(self.e2e_batches, len(loader)))
        for _ in range(self.warmup):
            run_epoch(loader, self.model, self.device, self.optimizer, max_batches=nb)
        rates = []
        for _ in range(repeats or self.repeats):
            r = run_epoch(loader, self.model, self.device, self.optimizer, max_batches=nb)
            # the first batch carries worker start-up: rate over the batches after it
            walls = r.phases_s.sum(axis=1)
            if r.batches > 1:
                rates.append(float(r.batch_sizes[1:].sum() / max(walls[1:].sum(), 1e-12)))
            else:
                rates.append(r.samples_per_s)
        self.e2e[cfg] = rates
        return rates

    # --------------------------------------------------------------- report
    def diagnose(self, cfg: Config, e2e: bool = True) -> dict:
        """The full report for ``cfg``: stage table, prediction, measured rates
        for 0..max workers, verdict, advice, /dev/shm check."""
        if e2e:
            for w in range(0, self.max_workers + 1):
                self.log(f"end to end with {w} workers")
                self.measure_e2e(cfg.replace(num_workers=w))
        pred = self.predict(cfg)
        rows = []
        for key, st in self.stages.items():
            if key[0] in ("read", "decode", "transform") and (key[1], key[2]) != (cfg.fmt, cfg.decode):
                continue
            if key[0] == "read_cold" and (key[1], key[2]) != (cfg.fmt, cfg.decode):
                continue
            if key[0] in ("collate", "h2d", "h2d_copy") and key[2] != cfg.batch_size:
                continue
            if key[0] == "model" and key[1] != cfg.batch_size:
                continue
            rows.append(st.row(cfg.num_workers, self.cores))
        e2e_rows = []
        for w in range(0, self.max_workers + 1):
            c = cfg.replace(num_workers=w)
            p = self.predict(c)
            row = {"num_workers": w, "predicted_samples_per_s": p["predicted_samples_per_s"] if p else None}
            if c in self.e2e:
                q25, med, q75 = np.percentile(self.e2e[c], [25, 50, 75])
                row.update({"samples_per_s": float(med), "samples_per_s_q25": float(q25),
                            "samples_per_s_q75": float(q75), "repeats": len(self.e2e[c])})
            e2e_rows.append(row)
        measured = self.e2e.get(cfg)
        bb = self.batch_bytes.get((cfg.collate, cfg.batch_size), 0)
        return {
            "data": str(self.root) if self.root else None, "format": cfg.fmt, "device": self.device,
            "cuda": self.cuda, "cores": self.cores, "model": self.model_name, "batch_size": cfg.batch_size,
            "config": cfg.as_dict(), "stages": rows, "end_to_end": e2e_rows,
            "predicted_samples_per_s": pred["predicted_samples_per_s"] if pred else None,
            "measured_samples_per_s": float(np.median(measured)) if measured else None,
            "verdict": pred["verdict"] if pred else None, "bound_stage": pred["bound_stage"] if pred else None,
            "binding_term": pred["binding_term"] if pred else None,
            "advice": self.advise(cfg), "shm": shm_report(bb, max(cfg.num_workers, self.max_workers)),
            "notes": list(self.notes), "repeats": self.repeats, "warmup": self.warmup,
        }


def default_decode(fmt: str) -> str:
    return {"png": "pil", "imagefolder": "pil", "jpeg": "pil", "npy": "np.load", "pt": "torch.load",
            "lmdb": "lz4", "lmdb_raw": "copy"}.get(fmt, "none")


# ---------------------------------------------------------------- text output


def _fmt_rate(x) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return f"{x:,.0f}"


def render(report: dict) -> str:
    cfg = Config(**report["config"])
    lines = [f"feedlab doctor · {report['data']} · {cfg.label()}",
             f"model {report['model']} on {report['device']} · {report['cores']} cores · "
             f"median of {report['repeats']} repeats after {report['warmup']} warm-up (IQR in brackets)", ""]
    W = cfg.num_workers
    lines.append(f"{'stage':<10} {'variant':<42} {'µs/sample':>18} {'per core/s':>11} {f'{W} workers/s':>12}")
    for r in report["stages"]:
        if not r["measurable"]:
            lines.append(f"{r['stage']:<10} {r['variant']:<42} {r['note']}")
            continue
        spread = f"{r['s_per_sample'] * 1e6:.1f} ({r['s_per_sample_q25'] * 1e6:.1f}–{r['s_per_sample_q75'] * 1e6:.1f})"
        extra = f"  {r['bytes_per_s'] / 1e6:,.0f} MB/s" if r.get("bytes_per_s") else ""
        extra += f"  [{r['note']}]" if r.get("note") else ""
        lines.append(f"{r['stage']:<10} {r['variant'][:42]:<42} {spread:>18} "
                     f"{_fmt_rate(r['samples_per_s_per_core']):>11} {_fmt_rate(r['samples_per_s_with_workers']):>12}{extra}")
    lines += ["", f"{'workers':>7} {'predicted/s':>12} {'measured/s (IQR)':>26}"]
    for r in report["end_to_end"]:
        meas = (f"{r['samples_per_s']:,.0f} ({r['samples_per_s_q25']:,.0f}–{r['samples_per_s_q75']:,.0f})"
                if "samples_per_s" in r else "not run")
        lines.append(f"{r['num_workers']:>7} {_fmt_rate(r['predicted_samples_per_s']):>12} {meas:>26}")
    lines += ["", f"verdict: {report['verdict']}, bounded by {report['bound_stage']} "
                  f"({report['binding_term']}); predicted {_fmt_rate(report['predicted_samples_per_s'])} samples/s, "
                  f"measured {_fmt_rate(report['measured_samples_per_s'])}"]
    if report["advice"]:
        lines.append("advice (each alone, predicted from the measured stage costs):")
        for a in report["advice"]:
            lines.append(f"  set {a['setting']} = {a['value']}: {_fmt_rate(a['predicted_samples_per_s'])} samples/s "
                         f"(×{a['expected_gain']:.2f}); {a['why']}")
    else:
        lines.append("advice: no single setting change is predicted to gain 5% or more")
    shm = report["shm"]
    if shm.get("available"):
        lines.append(f"/dev/shm: {shm['total_bytes'] / 2**20:,.0f} MiB, {shm['free_bytes'] / 2**20:,.0f} MiB free; "
                     f"in-flight batches need {shm['need_bytes'] / 2**20:,.1f} MiB"
                     + (f"\nWARNING: {shm['warning']}" if shm["warning"] else " (fits)"))
    else:
        lines.append(f"/dev/shm: {shm['warning']}")
    if not report["cuda"]:
        lines.append("no CUDA here: the copy to a GPU (pageable vs pinned) is not measurable; "
                     "h2d is only the uint8→float conversion")
    for n in report["notes"]:
        lines.append(f"note: {n}")
    return "\n".join(lines)


# ---------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    from feedlab.errors import cli_errors

    with cli_errors("python -m feedlab.doctor"):
        return _main(argv)


def _main(argv: list[str] | None = None) -> int:
    from feedlab.formats import FORMATS

    ap = argparse.ArgumentParser(prog="python -m feedlab.doctor", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=None, help="a data set built by data_prep, or an ImageFolder "
                    "with --format imagefolder (default: the embedded data/sr64)")
    ap.add_argument("--format", default="png", choices=[f for f in FORMATS if f != "jpeg"])
    ap.add_argument("--decode", default=None, help="image decode backend for png/imagefolder (default pil)")
    ap.add_argument("--collate", default="totensor", choices=list(COLLATES), help="the collate under diagnosis")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--model", default="none", choices=["none", "srcnn", "resnet"])
    ap.add_argument("--device", default="auto", help="cpu, cuda or auto")
    ap.add_argument("--workers", type=int, default=None, help="most DataLoader workers to try (default: cores)")
    ap.add_argument("--num-workers", type=int, default=None, help="the num_workers under diagnosis "
                    "(default: --workers)")
    ap.add_argument("--pin-memory", action="store_true", help="the setting under diagnosis (CUDA only)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--samples", type=int, default=64, help="samples per stage measurement")
    ap.add_argument("--batches", type=int, default=16, help="batches per end-to-end repeat")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold-cache read")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--trace", type=Path, default=None, help="write a Chrome trace JSON of a 20-batch run")
    args = ap.parse_args(argv)
    if args.batch_size < 1 or args.repeats < 1 or (args.workers is not None and args.workers < 0):
        ap.error("--batch-size and --repeats must be >= 1, --workers >= 0")
    if args.samples < 1 or args.batches < 1 or (args.num_workers is not None and args.num_workers < 0):
        ap.error("--samples and --batches must be >= 1, --num-workers >= 0")
    if args.data is None:
        from feedlab.paths import default_sr_root

        args.data = default_sr_root("quick")
    if not Path(args.data).exists():
        ap.error(f"--data {args.data}: no such folder (build one with `python -m data_prep sr --out DIR` "
                 "and `python -m data_prep pack DIR --to all`)")
    decode = args.decode or default_decode(args.format)
    log = (lambda m: None) if args.json else (lambda m: print(f"  … {m}", file=sys.stderr, flush=True))
    doc = Doctor(args.data, args.format, decode, args.batch_size, args.model, args.device, args.workers,
                 args.repeats, samples=args.samples, e2e_batches=args.batches, cold=not args.no_cold, log=log)
    nw = doc.max_workers if args.num_workers is None else args.num_workers
    cfg = Config(args.format, decode, args.collate, nw, args.batch_size, args.pin_memory)
    doc.measure(collate=args.collate)
    report = doc.diagnose(cfg)
    if args.trace is not None:
        from feedlab.trace import trace_run

        trace_run(PipelineDataset(doc.pipeline(cfg.fmt, cfg.decode)), report, args.trace,
                  batch_size=cfg.batch_size, workers=cfg.num_workers, collate=doc.collate_fn(cfg.collate),
                  max_batches=20, model=doc.model, device=doc.device, optimizer=doc.optimizer,
                  pin_memory=cfg.pin_memory and doc.cuda)
    if args.json:
        from feedlab.errors import strict_json

        print(strict_json(report, default=_json_default))  # no bare Infinity/NaN: null
    else:
        print(render(report))
        if args.trace is not None:
            print(f"trace: {report['trace']} (open in https://ui.perfetto.dev or chrome://tracing)")
    return 0


def _json_default(o):
    if isinstance(o, (np.generic,)):
        return o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return str(o)


if __name__ == "__main__":
    sys.exit(main())
