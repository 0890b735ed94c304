"""One vocabulary for an input pipeline, and the one way to build it.

A :class:`PipelineSpec` names every choice of an input pipeline with the words the
CLI flags (``--format``, ``--num-workers`` ...), the notebooks' parameters, the
doctor, bench and the experiments all use:

============================  ====================================================
``format``                    a registered storage format (``feedlab.formats.FORMATS``)
``decode``                    image decode backend for formats that hold encoded
                              images (``pil``, ``pyspng``, ``simplejpeg`` ...);
                              ``"auto"``: the format's default
``transform``                 per-sample transform: ``none``, ``flip`` (random
                              horizontal flip of a pair), ``center_crop``
                              (to ``crop``²), ``default`` (flip for pairs, crop else)
``collate``                   a name in :data:`COLLATES`
``batch_size``, ``num_workers``, ``pin_memory``, ``prefetch_factor``,
``persistent_workers``        as in ``torch.utils.data.DataLoader``
``device``                    ``auto`` (CUDA when present), ``cpu``, ``cuda`` ...
``model``                     a name in :data:`MODEL_VARIANTS` or ``auto``
============================  ====================================================

Builders: :func:`make_collate` (the collate registry), :func:`open_dataset` (format +
decode + transform), :func:`make_loader` (the one DataLoader builder). The step a pipeline
feeds — the model names, the device choice, :func:`make_training` and :func:`train_step` — lives
in :mod:`feedlab.pipeline.training` and is re-exported here, with the rates of a timed epoch
(:mod:`feedlab.pipeline.rates`).
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np

from feedlab.gpu_decode import EncodedCollate, EncodedView, is_device_decode
from feedlab.machines import worker_cap
from feedlab.pipeline import kinds as loader_kinds
from feedlab.pipeline.kinds import kind_problems
from feedlab.pipeline.training import (  # noqa: F401  (the step a pipeline feeds, re-exported)
    MODEL_VARIANTS,
    build_model,
    default_device,
    make_training,
    resolve_device,
    resolve_model_name,
    train_step,
)

# ---------------------------------------------------------------- collate registry

COLLATES: dict[str, tuple[Callable[[], Callable], str]] = {}


def register_collate(name: str, factory: Callable[[], Callable], doc: str) -> None:
    COLLATES[name] = (factory, doc)


def _totensor():
    from feedlab.collate import totensor_collate

    return totensor_collate


def _fast(memory_format: str):
    def factory():
        from feedlab.collate import FastCollate

        return FastCollate(memory_format=memory_format)
    return factory


register_collate("totensor", _totensor, "ToTensor per image + default_collate (float CHW)")
register_collate("fast", _fast("nchw"), "FastCollate: uint8 NCHW, one copy per image")
register_collate("fast_cl", _fast("channels_last"), "FastCollate: uint8 channels-last, a memcpy per image")


def make_collate(name: str):
    try:
        return COLLATES[name][0]()
    except KeyError:
        raise ValueError(f"collate {name!r}: one of {', '.join(COLLATES)}") from None


# ---------------------------------------------------------------- transforms

TRANSFORMS = ("none", "default", "flip", "center_crop")


def center_crop_resize(img: np.ndarray, size: int) -> np.ndarray:
    """The largest centered square of ``img``, resized to ``size``² (bilinear)."""
    from PIL import Image

    h, w = img.shape[:2]
    s = min(h, w)
    top, left = (h - s) // 2, (w - s) // 2
    sq = img[top:top + s, left:left + s]
    if s != size:
        sq = np.array(Image.fromarray(np.ascontiguousarray(sq)).resize((size, size), Image.BILINEAR))
    return np.ascontiguousarray(sq)


class PairFlip:
    """Random horizontal flip of an (lr, hr) pair, as contiguous copies."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def __call__(self, sample):
        lr, hr = sample
        if self.rng.random() < 0.5:
            return np.ascontiguousarray(lr[:, ::-1]), np.ascontiguousarray(hr[:, ::-1])
        return np.array(lr, copy=True), np.array(hr, copy=True)


class CenterCrop:
    """Center crop + resize to ``size``² of an image, or of the image of an (image, label) pair."""

    def __init__(self, size: int = 96):
        self.size = int(size)

    def __call__(self, sample):
        if isinstance(sample, np.ndarray):
            return center_crop_resize(sample, self.size)
        img, label = sample
        return center_crop_resize(img, self.size), label


def make_transform(name: str, kind: str, crop: int = 96, seed: int = 0):
    """The transform ``name`` for a format of ``kind`` (``sr``, ``cls``, ``img``); None for none."""
    if name == "default":
        name = "flip" if kind == "sr" else "center_crop"
    if name == "none":
        return None
    if name == "flip":
        if kind != "sr":
            raise ValueError(f"transform flip needs (lr, hr) pairs; this format holds {kind!r} samples")
        return PairFlip(seed)
    if name == "center_crop":
        return CenterCrop(crop)
    raise ValueError(f"transform {name!r}: one of {', '.join(TRANSFORMS)}")


class Transformed:
    """A map-style dataset with a per-sample transform after its reads (pickles to workers)."""

    def __init__(self, dataset, transform):
        self.dataset, self.transform = dataset, transform

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        return self.transform(self.dataset[i])


# ---------------------------------------------------------------- models

# ---------------------------------------------------------------- the spec


@dataclass(frozen=True)
class PipelineSpec:
    """One input pipeline, named with the vocabulary of the module doc."""

    format: str = "png"
    decode: str = "auto"
    transform: str = "none"
    collate: str = "totensor"
    batch_size: int = 64
    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int | None = None     # None: DataLoader's default (2) with workers
    persistent_workers: bool = False
    device: str = "auto"
    model: str = "none"
    loader: str = "dataloader"             # a kind in feedlab.pipeline.kinds.LOADER_KINDS

    def replace(self, **kw) -> "PipelineSpec":
        return dataclasses.replace(self, **kw)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def decode_backend(self) -> str:
        """``decode`` with ``auto`` resolved to the format's default."""
        if self.decode != "auto":
            return self.decode
        from feedlab.formats import get_format

        return get_format(self.format).default_decode

    def label(self, *names: str) -> str:
        """Short label: ``label()`` → ``png/pil totensor b64 w0``; ``label("num_workers")`` → ``w0``."""
        short = {"batch_size": "b", "num_workers": "w", "pin_memory": "pin", "prefetch_factor": "pf"}
        if not names:
            fmt = self.format if self.decode_backend in ("none", "") else f"{self.format}/{self.decode_backend}"
            rest = [self.collate, f"b{self.batch_size}", f"w{self.num_workers}"]
            if self.pin_memory:
                rest.append("pin+")
            if self.loader != "dataloader":
                rest.append(self.loader)
            return " ".join([fmt, *rest])
        parts = []
        for n in names:
            v = getattr(self, n)
            if n in short:
                parts.append(f"{short[n]}{('+' if v else '-') if isinstance(v, bool) else int(v or 0)}")
            else:
                parts.append(str(v))
        return " ".join(parts)

    def problems(self, device=None) -> list[str]:
        """Why this spec would not mean what it says on ``device`` (empty: fine)."""
        from feedlab.formats import FORMATS

        dev = resolve_device(device if device is not None else self.device, check=False)
        out = []
        if self.format not in FORMATS:
            out.append(f"unknown format {self.format!r} (one of {', '.join(FORMATS)})")
        if self.collate not in COLLATES:
            out.append(f"unknown collate {self.collate!r} (one of {', '.join(COLLATES)})")
        if self.model != "auto" and self.model not in MODEL_VARIANTS:
            out.append(f"unknown model {self.model!r}")
        if self.transform not in TRANSFORMS:
            out.append(f"unknown transform {self.transform!r}")
        if self.batch_size < 1 or self.num_workers < 0:
            out.append("batch_size must be >= 1 and num_workers >= 0")

        if self.num_workers > worker_cap():
            out.append(f"num_workers {self.num_workers} is over the cap of {worker_cap()} (4 per usable core, "
                       "at least 16; FEEDLAB_MAX_WORKERS sets another)")
        if self.pin_memory and not dev.startswith("cuda"):
            out.append("pin_memory needs CUDA (DataLoader ignores it without a GPU)")
        if self.decode == "cuda":
            from feedlab.formats import get_format

            if self.format in FORMATS and get_format(self.format).image_codec != "jpeg":
                out.append(f"decode=cuda (nvJPEG) decodes JPEG; format {self.format!r} does not hold JPEGs")
            if not dev.startswith("cuda"):
                out.append("decode=cuda decodes on the GPU: it needs a CUDA device")
        if self.num_workers == 0 and (self.prefetch_factor is not None or self.persistent_workers):
            out.append("prefetch_factor / persistent_workers need num_workers > 0")
        elif self.prefetch_factor is not None and self.prefetch_factor < 1:   # else run silently at 2
            out.append(f"prefetch_factor {self.prefetch_factor}: give 1 or more (batches each worker keeps "
                       "ready), or leave it out for 2")

        caps = FORMATS[self.format].capabilities() if self.format in FORMATS else None
        return out + kind_problems(self.loader, caps, self.num_workers, self.collate)


SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(PipelineSpec))


def open_dataset(root, spec: PipelineSpec, crop: int = 96, seed: int = 0, **opts):
    """The dataset ``spec`` reads: its format under ``root``, its decode backend (formats
    holding encoded images), its transform."""
    from feedlab import formats

    fs = formats.get_format(spec.format)
    if is_device_decode(spec.decode_backend):  # workers read bytes; the batch is decoded on the device
        return EncodedView(formats.open_dataset(root, spec.format, **opts), crop)
    if fs.image_codec is not None:
        opts.setdefault("decode", spec.decode_backend)
    ds = formats.open_dataset(root, spec.format, **opts)
    tf = make_transform(spec.transform, fs.kind, crop, seed)
    return Transformed(ds, tf) if tf is not None else ds


def make_loader(dataset, spec: PipelineSpec, seed: int = 0, shuffle: bool = True, drop_last: bool = False,
                collate_fn: Callable | None = None, **overrides):
    """The loader of kind ``spec.loader`` (``feedlab.pipeline.kinds``; default the DataLoader) over
    ``dataset``: seeded shuffle, the spec's collate (or ``collate_fn``), pinning only where CUDA
    makes it meaningful. ``overrides`` go to the DataLoader as they are (e.g. ``sampler``)."""
    import torch


    pin = bool(spec.pin_memory and resolve_device(spec.device).startswith("cuda") and torch.cuda.is_available())
    if collate_fn is None and hasattr(dataset, "encoded_size"):  # decode on the device: batches of bytes

        collate_fn = EncodedCollate(dataset.encoded_size)
    return loader_kinds.build(dataset, spec, collate_fn=collate_fn or make_collate(spec.collate), seed=seed,
                              shuffle=shuffle, drop_last=drop_last, pin=pin, **overrides)


from feedlab.pipeline.rates import (  # noqa: E402,F401  (the rates of a timed epoch, re-exported)
    MIN_TIMED_BATCHES,
    RATE_KINDS,
    SteadyStop,
    prefetch_depth,
    rate_of,
    rel_half_width,
    steady_batches,
    steady_rate,
    warmup_batches,
)

# ---------------------------------------------------------------- command line


_DEST = {"loader": "loader_kind"}  # --loader-kind: the doctor's --loader names a user's loader


def add_arguments(ap: argparse.ArgumentParser, defaults: PipelineSpec | None = None,
                  skip: tuple[str, ...] = (), formats=None) -> None:
    """``--format``, ``--decode``, ... one flag per spec field (``skip`` leaves some out;
    ``formats``: the formats ``--format`` accepts, default every registered one)."""
    from feedlab.formats import FORMATS

    d = defaults or PipelineSpec()
    helps = {
        "format": ("storage format", dict(choices=sorted(formats or FORMATS))),
        "decode": ("image decode backend (auto: the format's default)", {}),
        "transform": ("per-sample transform", dict(choices=list(TRANSFORMS))),
        "collate": ("; ".join(f"{k}: {v[1]}" for k, v in COLLATES.items()), dict(choices=list(COLLATES))),
        "batch_size": ("DataLoader batch_size", dict(type=int)),
        "num_workers": ("DataLoader num_workers", dict(type=int)),
        "prefetch_factor": ("DataLoader prefetch_factor (workers only)", dict(type=int)),
        "device": ("cpu, cuda or auto", {}),
        "model": ("the step fed by the loader", dict(choices=["auto", *MODEL_VARIANTS])),
        "loader": ("loader kind (feedlab.pipeline.kinds)", {}),
    }
    for name in SPEC_FIELDS:
        if name in skip:
            continue
        flag = "--" + _DEST.get(name, name).replace("_", "-")
        default = getattr(d, name)
        if name in ("pin_memory", "persistent_workers"):
            ap.add_argument(flag, action="store_true", default=default, help=f"DataLoader {name}")
            continue
        text, kw = helps[name]
        ap.add_argument(flag, dest=_DEST.get(name, name), default=default, help=f"{text} (default: {default})", **kw)


def spec_from_args(args: argparse.Namespace, base: PipelineSpec | None = None) -> PipelineSpec:
    base = base or PipelineSpec()
    kw = {n: getattr(args, _DEST.get(n, n)) for n in SPEC_FIELDS if hasattr(args, _DEST.get(n, n))}
    return base.replace(**kw)


__all__ = ["PipelineSpec", "SPEC_FIELDS", "COLLATES", "register_collate", "make_collate", "TRANSFORMS",
           "make_transform", "PairFlip", "CenterCrop", "center_crop_resize", "Transformed", "MODEL_VARIANTS",
           "default_device", "resolve_device", "resolve_model_name", "build_model", "make_training", "train_step",
           "prefetch_depth", "steady_rate", "rate_of", "warmup_batches", "steady_batches", "MIN_TIMED_BATCHES",
           "RATE_KINDS", "SteadyStop", "rel_half_width",
           "open_dataset", "make_loader", "add_arguments", "spec_from_args"]
