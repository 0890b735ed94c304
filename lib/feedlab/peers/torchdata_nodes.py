"""torchdata.nodes: the composable replacement of DataLoader (torchdata >= 0.10).

Its "migrating from DataLoader" recipe: ``SamplerWrapper(RandomSampler)`` ->
``ParallelMapper(map_fn=dataset.__getitem__, num_workers=W, method="thread")``
-> ``Batcher(batch_size)`` -> ``Mapper(default_collate)`` -> ``Prefetcher(2)``
-> ``Loader``. Threads are its default (the per-sample work here, memcpy out of
a map and JPEG decode, releases the GIL). The map-style datasets are feedlab's
best per-sample ones: the memory-mapped ``.npy`` pair for SR, and the
torchvision recipe on PIL images (``PILToTensor``, uint8) for JPEG.
"""

from __future__ import annotations

from torch.utils.data import RandomSampler, SequentialSampler, default_collate

from feedlab.formats import open_dataset

from . import feedlab_best
from ._common import ImageFolderIds, generator
from .base import Conversion, Source, Spec, torchvision_cls_transform


def convert(source: Source, work) -> Conversion:
    return feedlab_best.convert(source, work)


def data_files(source: Source, work):
    return feedlab_best.data_files(source, work)


def loader(source: Source, work, spec: Spec):
    import torchdata.nodes as tn

    if source.kind == "sr":
        ds = open_dataset(work, "npy_mmap")
    else:
        ds = ImageFolderIds(source, torchvision_cls_transform(spec.size, spec.augment))
    sampler = RandomSampler(ds, generator=generator(spec.seed)) if spec.shuffle else SequentialSampler(ds)
    node = tn.SamplerWrapper(sampler)
    if spec.workers > 0:
        node = tn.ParallelMapper(node, map_fn=ds.__getitem__, num_workers=spec.workers, method="thread")
    else:
        node = tn.Mapper(node, map_fn=ds.__getitem__)
    node = tn.Batcher(node, batch_size=spec.batch_size, drop_last=False)
    node = tn.Mapper(node, map_fn=default_collate)
    node = tn.Prefetcher(node, prefetch_factor=2)
    return tn.Loader(node)
