"""Hugging Face ``datasets``: an Arrow table on disk, memory-mapped, under a DataLoader.

As its "Use with PyTorch" guide says: ``Dataset.from_dict(..., features=...)``
(SR: ``Array3D`` uint8 columns; classification: an ``Image`` column holding the
JPEG bytes, ``label`` and ``idx``), ``save_to_disk``; then ``load_from_disk``,
``with_format("torch")`` (SR) or ``with_transform`` (the torchvision recipe on
the decoded PIL images), and ``torch.utils.data.DataLoader(shuffle=True,
num_workers=W, persistent_workers=True)``, which fetches each batch with one ``__getitems__`` call.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import DataLoader

from ._common import MapBatches, generator
from .base import Conversion, Source, Spec, timed_conversion, torchvision_cls_transform


def convert(source: Source, work) -> Conversion:
    import datasets as hf

    def write(tmp: Path) -> None:
        if source.kind == "sr":
            feats = hf.Features({"lr": hf.Array3D(shape=source.lr.shape[1:], dtype="uint8"),
                                 "hr": hf.Array3D(shape=source.hr.shape[1:], dtype="uint8")})
            ds = hf.Dataset.from_dict({"lr": source.lr, "hr": source.hr}, features=feats)
        else:
            feats = hf.Features({"image": hf.Image(), "label": hf.Value("int64"), "idx": hf.Value("int64")})
            ds = hf.Dataset.from_dict({"image": [{"bytes": source.jpeg_bytes(i), "path": None}
                                                 for i in range(source.n)],
                                       "label": source.labels.tolist(), "idx": list(range(source.n))},
                                      features=feats)
        was_on = hf.is_progress_bar_enabled()
        hf.disable_progress_bars()   # its tqdm bar would fill the notebook's output
        try:
            ds.save_to_disk(str(tmp / "ds"))
        finally:
            if was_on:
                hf.enable_progress_bars()

    return timed_conversion(work, write, "Arrow (save_to_disk)")


class _ClsTransform:
    def __init__(self, size: int, augment: bool):
        self.t = torchvision_cls_transform(size, augment)

    def __call__(self, batch: dict) -> dict:
        return {"image": [self.t(im.convert("RGB")) for im in batch["image"]],
                "label": batch["label"], "idx": batch["idx"]}


def _sr(b):
    return b["lr"], b["hr"]


def _cls(b):
    return b["image"], b["label"], b["idx"]


def loader(source: Source, work, spec: Spec):
    import datasets as hf

    ds = hf.load_from_disk(str(Path(work) / "ds"))
    if source.kind == "sr":
        ds = ds.with_format("torch", dtype=torch.uint8)  # its default is int64 (maintainers' advice)
    else:
        ds = ds.with_transform(_ClsTransform(spec.size, spec.augment))
    dl = DataLoader(ds, batch_size=spec.batch_size, shuffle=spec.shuffle, num_workers=spec.workers,
                    generator=generator(spec.seed), persistent_workers=spec.workers > 0)
    return MapBatches(dl, _sr if source.kind == "sr" else _cls)


