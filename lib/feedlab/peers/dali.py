"""NVIDIA DALI, CPU backend (``device_id=None``): readers, decoders and augmentations in C++ threads.

As its docs recommend for PyTorch: a ``@pipeline_def`` with
``fn.readers.numpy`` (SR: one ``.npy`` per sample and side, the layout its
numpy reader reads; two readers with the same seed and ``shuffle_after_epoch``
walk the same permutation) or ``fn.readers.file`` over the JPEGs
(classification: ``fn.decoders.image_random_crop`` — decodes only the crop —
``fn.resize`` and ``fn.crop_mirror_normalize(mirror=fn.random.coin_flip())``
kept uint8), iterated by ``DALIGenericIterator`` with
``LastBatchPolicy.PARTIAL`` (its default FILL pads the last batch with repeats).
``workers`` is ``num_threads`` (0 means 1 thread).
"""

from __future__ import annotations

from pathlib import Path

import torch

from feedlab import formats

from ._common import MapBatches, SRPairs
from .base import Conversion, Source, Spec, timed_conversion


def convert(source: Source, work) -> Conversion:
    if source.kind == "cls":
        return Conversion(0.0, source.source_bytes(), str(source.root), "reads the source JPEGs")
    return timed_conversion(work, lambda tmp: formats.write("npy", tmp, SRPairs(source)),
                            "one .npy per sample and side")


def data_files(source: Source, work):
    if source.kind == "cls":
        return list(source.paths)
    return sorted((Path(work) / "npy").glob("*.npy"))


def loader(source: Source, work, spec: Spec):
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.base_iterator import LastBatchPolicy
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    threads = max(1, spec.workers)
    common = dict(random_shuffle=False, shuffle_after_epoch=spec.shuffle, seed=spec.seed + 1)
    if source.kind == "sr":
        root = str(Path(work) / "npy")

        @pipeline_def(batch_size=spec.batch_size, num_threads=threads, device_id=None, seed=spec.seed + 1)
        def pipe():
            lr = fn.readers.numpy(file_root=root, file_filter="lr_*.npy", name="Reader", **common)
            hr = fn.readers.numpy(file_root=root, file_filter="hr_*.npy", **common)
            return lr, hr

        names, to_tuple = ["lr", "hr"], (lambda b: (b[0]["lr"], b[0]["hr"]))
    else:
        files = [str(p) for p in source.paths]
        labels = torch.from_numpy(source.labels)
        s = spec.size

        @pipeline_def(batch_size=spec.batch_size, num_threads=threads, device_id=None, seed=spec.seed + 1)
        def pipe():
            jpegs, ids = fn.readers.file(files=files, labels=list(range(len(files))), name="Reader", **common)
            if spec.augment:
                img = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                                    random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])
                img = fn.resize(img, resize_x=s, resize_y=s)
                img = fn.crop_mirror_normalize(img, dtype=types.UINT8, output_layout="HWC",
                                               mirror=fn.random.coin_flip())
            else:
                img = fn.resize(fn.decoders.image(jpegs, device="cpu", output_type=types.RGB),
                                resize_x=s, resize_y=s)
            return img, ids

        def to_tuple(b):
            ids = b[0]["ids"].reshape(-1).long()
            return b[0]["images"], labels[ids], ids

        names = ["images", "ids"]
    it = DALIGenericIterator(pipe(), names, reader_name="Reader", auto_reset=True,
                             last_batch_policy=LastBatchPolicy.PARTIAL)
    return MapBatches(it, to_tuple)
