"""LitData (Lightning): ``optimize`` into chunked binary files, ``StreamingDataset`` + ``StreamingDataLoader``.

As its README shows: ``ld.optimize(fn=..., inputs=..., output_dir=..., chunk_bytes="64MB")``
with one dict per sample (numpy arrays for SR; for classification the opened
PIL JPEG, which LitData stores as its original bytes, plus label and index),
then ``StreamingDataset(output_dir, shuffle=True, transform=...)`` under
``StreamingDataLoader(batch_size, num_workers, persistent_workers=True)``. Images come back as CHW
uint8 tensors (LitData decodes JPEG with torchvision); the crop and flip are
``torchvision.transforms.v2`` on the tensor.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ._common import MapBatches, usable_cores
from .base import Conversion, Source, Spec, timed_conversion


class _SRItem:
    def __init__(self, root: str, n: int):
        self.root, self.n, self._m = root, n, None

    def __call__(self, i: int) -> dict:
        if self._m is None:
            d = Path(self.root) / "npy_mmap"
            self._m = (np.load(d / "lr.npy", mmap_mode="r"), np.load(d / "hr.npy", mmap_mode="r"))
        return {"lr": np.ascontiguousarray(self._m[0][i]), "hr": np.ascontiguousarray(self._m[1][i])}


class _ClsItem:
    def __init__(self, paths, labels):
        self.paths, self.labels = [str(p) for p in paths], [int(x) for x in labels]

    def __call__(self, i: int) -> dict:
        from PIL import Image

        return {"image": Image.open(self.paths[i]), "label": self.labels[i], "idx": i}


def convert(source: Source, work) -> Conversion:
    import litdata as ld

    fn = _SRItem(str(source.root), source.n) if source.kind == "sr" else _ClsItem(source.paths, source.labels)

    def write(tmp: Path) -> None:
        ld.optimize(fn=fn, inputs=list(range(source.n)), output_dir=str(tmp), chunk_bytes="64MB",
                    num_workers=min(4, usable_cores()), verbose=False, mode="overwrite")

    return timed_conversion(work, write, "litdata optimize, chunk_bytes=64MB")


class _ClsTransform:
    def __init__(self, size: int, augment: bool):
        from torchvision.transforms import v2

        self.t = (v2.Compose([v2.RandomResizedCrop(size), v2.RandomHorizontalFlip()]) if augment
                  else v2.Resize((size, size)))

    def __call__(self, item: dict) -> dict:
        item["image"] = self.t(item["image"])
        return item


def _sr(b):
    return b["lr"], b["hr"]


def _cls(b):
    return b["image"], b["label"], b["idx"]


def loader(source: Source, work, spec: Spec):
    import litdata as ld

    transform = _ClsTransform(spec.size, spec.augment) if source.kind == "cls" else None
    ds = ld.StreamingDataset(str(Path(work).resolve()), shuffle=spec.shuffle, seed=spec.seed,
                             transform=transform)
    dl = ld.StreamingDataLoader(ds, batch_size=spec.batch_size, num_workers=spec.workers,
                                persistent_workers=spec.workers > 0)
    return MapBatches(dl, _sr if source.kind == "sr" else _cls)
