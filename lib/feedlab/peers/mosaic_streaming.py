"""MosaicML ``streaming``: MDS shards written by ``MDSWriter``, read by ``StreamingDataset``.

As its README's quick start: ``MDSWriter(out=..., columns={...})`` (SR:
``ndarray:uint8:H,W,C`` columns; classification: the JPEG ``bytes``, ``label``
and ``idx`` as ``int``), then ``StreamingDataset(local=..., shuffle=True,
batch_size=B)`` under ``torch.utils.data.DataLoader(batch_size=B,
num_workers=W, persistent_workers=True)``; the classification transform runs in ``__getitem__`` of a
subclass, as its ImageNet example does.
"""

from __future__ import annotations

import io
from pathlib import Path

from torch.utils.data import DataLoader

from ._common import MapBatches
from .base import Conversion, Source, Spec, timed_conversion, torchvision_cls_transform


def convert(source: Source, work) -> Conversion:
    from streaming import MDSWriter

    def write(tmp: Path) -> None:
        if source.kind == "sr":
            lh, lw, lc = source.lr.shape[1:]
            hh, hw, hc = source.hr.shape[1:]
            cols = {"lr": f"ndarray:uint8:{lh},{lw},{lc}", "hr": f"ndarray:uint8:{hh},{hw},{hc}"}
        else:
            cols = {"image": "bytes", "label": "int", "idx": "int"}
        with MDSWriter(out=str(tmp / "mds"), columns=cols, size_limit="64mb") as out:
            for i in range(source.n):
                if source.kind == "sr":
                    out.write({"lr": source.lr[i], "hr": source.hr[i]})
                else:
                    out.write({"image": source.jpeg_bytes(i), "label": int(source.labels[i]), "idx": i})

    return timed_conversion(work, write, "MDS shards, size_limit=64mb")


def loader(source: Source, work, spec: Spec):
    from streaming import StreamingDataset

    transform = torchvision_cls_transform(spec.size, spec.augment) if source.kind == "cls" else None

    class _Cls(StreamingDataset):
        def __getitem__(self, i):
            from PIL import Image

            row = super().__getitem__(i)
            img = transform(Image.open(io.BytesIO(row["image"])).convert("RGB"))
            return {"image": img, "label": row["label"], "idx": row["idx"]}

    cls = _Cls if source.kind == "cls" else StreamingDataset
    ds = cls(local=str(Path(work) / "mds"), shuffle=spec.shuffle, shuffle_seed=spec.seed,
             batch_size=spec.batch_size)
    dl = DataLoader(ds, batch_size=spec.batch_size, num_workers=spec.workers, persistent_workers=spec.workers > 0)
    if source.kind == "sr":
        return MapBatches(dl, lambda b: (b["lr"], b["hr"]))
    return MapBatches(dl, lambda b: (b["image"], b["label"], b["idx"]))
