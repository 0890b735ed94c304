"""The baseline: ``torch.utils.data.DataLoader`` as the tutorials write it.

SR: the PNG pairs decoded by PIL per sample, ``ToTensor`` + ``default_collate``
(feedlab's ``totensor_collate``). Classification: an ImageFolder with the
torchvision ImageNet recipe (``RandomResizedCrop``, ``RandomHorizontalFlip``,
``ToTensor``). ``shuffle=True``, ``num_workers`` as given, ``persistent_workers``
with workers (every contender keeps its workers across epochs: the embedded sets' epochs are a few
batches long, and a worker start every few batches would be timed as the loader's rate; a long epoch's
steady state is what a user gets), everything else at its default (prefetch 2).
"""

from __future__ import annotations

from torch.utils.data import DataLoader, Subset

from feedlab.collate import totensor_collate
from feedlab.formats import open_dataset

from ._common import ImageFolderIds, generator, png_bytes
from .base import Conversion, Source, Spec, torchvision_cls_transform


def convert(source: Source, work) -> Conversion:
    size = png_bytes(source) if source.kind == "sr" else source.source_bytes()
    return Conversion(0.0, size, str(source.root), "reads the source files (PNG pairs / JPEGs)")


def data_files(source: Source, work):
    if source.kind == "sr":
        return [source.root / s / f"{i:06d}.png" for s in ("lr", "hr") for i in range(source.n)]
    return list(source.paths)


def loader(source: Source, work, spec: Spec):
    if source.kind == "sr":
        ds = Subset(open_dataset(source.root, "png"), range(source.n))
        collate = totensor_collate
    else:
        ds = ImageFolderIds(source, torchvision_cls_transform(spec.size, spec.augment, to_tensor=True))
        collate = None
    return DataLoader(ds, batch_size=spec.batch_size, shuffle=spec.shuffle, num_workers=spec.workers,
                      collate_fn=collate, generator=generator(spec.seed), persistent_workers=spec.workers > 0)
