"""FFCV: one ``.beton`` file written by ``DatasetWriter``, read by its JIT-compiled ``Loader``.

As its ImageNet example: ``DatasetWriter(path, {"image": RGBImageField(...),
"label": IntField(), ...})`` then ``Loader(path, batch_size, num_workers,
order=OrderOption.RANDOM, os_cache=True, pipelines={...})`` with
``RandomResizedCropRGBImageDecoder``, ``RandomHorizontalFlip``, ``ToTensor``,
``ToTorchImage`` (SR: ``NDArrayField`` / ``NDArrayDecoder``). FFCV's threads do
the work (``num_workers`` >= 1, so 0 workers means 1 thread here). Without
augmentation it uses ``CenterCropRGBImageDecoder`` (ratio 1), which is not a
plain resize: its pixels are not compared, only identities and counts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ._common import SRPairs
from .base import Conversion, Source, Spec, timed_conversion

VERIFY_PIXELS = False


class _Cls:
    def __init__(self, source: Source):
        self.paths, self.labels = source.paths, source.labels

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image

        return Image.open(self.paths[i]).convert("RGB"), int(self.labels[i]), int(i)


def convert(source: Source, work) -> Conversion:
    from ffcv.fields import IntField, NDArrayField, RGBImageField
    from ffcv.writer import DatasetWriter

    def write(tmp: Path) -> None:
        path = str(tmp / "data.beton")
        if source.kind == "sr":
            fields = {"lr": NDArrayField(np.dtype("uint8"), source.lr.shape[1:]),
                      "hr": NDArrayField(np.dtype("uint8"), source.hr.shape[1:])}
            ds = SRPairs(source)
        else:
            fields = {"image": RGBImageField(write_mode="jpg", max_resolution=512), "label": IntField(),
                      "idx": IntField()}
            ds = _Cls(source)
        DatasetWriter(path, fields, num_workers=1).from_indexed_dataset(ds)

    note = ".beton (NDArrayField pairs)" if source.kind == "sr" else ".beton (RGBImageField jpg mode, max_resolution 512)"
    return timed_conversion(work, write, note)


def loader(source: Source, work, spec: Spec):
    from ffcv.fields.decoders import (
        CenterCropRGBImageDecoder,
        IntDecoder,
        NDArrayDecoder,
        RandomResizedCropRGBImageDecoder,
    )
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import RandomHorizontalFlip, ToTensor, ToTorchImage

    s = spec.size
    if source.kind == "sr":
        pipes = {"lr": [NDArrayDecoder(), ToTensor()], "hr": [NDArrayDecoder(), ToTensor()]}
    else:
        img = ([RandomResizedCropRGBImageDecoder((s, s)), RandomHorizontalFlip()] if spec.augment
               else [CenterCropRGBImageDecoder((s, s), ratio=1.0)])
        pipes = {"image": img + [ToTensor(), ToTorchImage()], "label": [IntDecoder(), ToTensor()],
                 "idx": [IntDecoder(), ToTensor()]}
    order = OrderOption.RANDOM if spec.shuffle else OrderOption.SEQUENTIAL
    return Loader(str(Path(work) / "data.beton"), batch_size=spec.batch_size, num_workers=max(1, spec.workers),
                  order=order, seed=spec.seed, os_cache=True, drop_last=False, pipelines=pipes)
