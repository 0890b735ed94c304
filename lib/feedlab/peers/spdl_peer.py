"""SPDL (Meta's Scalable and Performant Data Loading): a thread-based pipeline, concurrency per stage.

As its docs ("Getting started", ``examples/image_dataloading.py``): a
``PipelineBuilder().add_source(...).pipe(fn, concurrency=C)...aggregate(B)
.add_sink(buffer).build(num_threads=T)``; the stages run as tasks of one
asyncio loop on its own thread pool of ``T`` threads, no worker processes.
``workers`` W here is that pool and each heavy stage's concurrency (at least 1:
SPDL has no in-line mode). One pipeline per epoch over a fresh permutation of
the sample ids (seed + epoch), as its PyTorch guide does for map-style data.

* SR: the pairs stored as two ``.npy`` arrays (what ``np.save`` writes, read
  memory-mapped); source of ids -> ``aggregate(B)`` -> one gather stage
  (``concurrency=W``) copying the batch out of the maps, as its batch-loading
  examples aggregate before loading.
* JPEG: its own decoder, ``spdl.io.load_image`` (FFmpeg's, released from the
  GIL), with the random-resized crop, the resize and the flip done by the FFmpeg
  filter graph it takes (``filter_desc``, built the way
  ``spdl.io.get_video_filter_desc`` builds one) in a ``pipe`` stage of
  ``concurrency=W`` per image, then ``aggregate(B)`` and a collate stage. It
  reads the source JPEG files in place (no conversion).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .base import Conversion, Source, Spec, rrc_box, timed_conversion

BUFFER = 4  # the sink's queue of batches (its examples use a few to 16)


def convert(source: Source, work) -> Conversion:
    if source.kind == "cls":
        return Conversion(0.0, 0, str(work), "reads the source JPEG files in place")

    def write(tmp: Path) -> None:
        np.save(tmp / "lr.npy", source.lr)
        np.save(tmp / "hr.npy", source.hr)

    return timed_conversion(work, write, "lr.npy + hr.npy (read memory-mapped)")


def data_files(source: Source, work):
    if source.kind == "cls":
        return [Path(p) for p in source.paths]
    return [Path(work) / "lr.npy", Path(work) / "hr.npy"]


def image_filter(h: int, w: int, size: int, rng: np.random.Generator | None) -> str:
    """The FFmpeg filter graph of one image: random-resized crop (torchvision's box) + flip, or a resize."""
    parts = []
    if rng is not None:
        top, left, ch, cw = rrc_box(h, w, rng)
        parts.append(f"crop=w={cw}:h={ch}:x={left}:y={top}")
    parts.append(f"scale=w={size}:h={size}:flags=bilinear")
    if rng is not None and rng.random() < 0.5:
        parts.append("hflip")
    parts.append("format=pix_fmts=rgb24")
    return ",".join(parts)


class SPDLLoader:
    """Re-iterable: each ``iter`` builds and runs one SPDL pipeline over one epoch."""

    def __init__(self, source: Source, work: Path, spec: Spec):
        self.source, self.work, self.spec = source, Path(work), spec
        self.epoch = 0
        self.threads = max(1, spec.workers)
        if source.kind == "sr":
            self.lr = np.load(self.work / "lr.npy", mmap_mode="r")
            self.hr = np.load(self.work / "hr.npy", mmap_mode="r")
        else:
            from PIL import Image

            self.paths = [str(p) for p in source.paths]
            self.sizes = []
            for p in self.paths:  # the crop box needs each image's size (a header read, once)
                with Image.open(p) as im:
                    self.sizes.append((im.height, im.width))

    def __len__(self) -> int:
        b = self.spec.batch_size
        return -(-self.source.n // b)

    def _ids(self) -> list[int]:
        n = self.source.n
        if not self.spec.shuffle:
            return list(range(n))
        return np.random.default_rng((self.spec.seed, self.epoch)).permutation(n).tolist()

    def build(self):
        from spdl.pipeline import PipelineBuilder

        spec, t = self.spec, self.threads
        b = PipelineBuilder().add_source(self._ids())
        if self.source.kind == "sr":
            lr, hr = self.lr, self.hr

            def gather(ids):
                ids = np.sort(np.asarray(ids))
                return lr[ids], hr[ids]

            b = b.aggregate(spec.batch_size).pipe(gather, concurrency=t)
        else:
            import spdl.io

            labels, paths, sizes, size = self.source.labels, self.paths, self.sizes, spec.size
            seed = (spec.seed, self.epoch)

            def decode(i):
                rng = np.random.default_rng((*seed, i)) if spec.augment else None
                buf = spdl.io.load_image(paths[i], filter_desc=image_filter(*sizes[i], size, rng))
                img = spdl.io.to_numpy(buf)
                return img.reshape(size, size, 3), int(labels[i]), i

            def collate(items):
                return (np.stack([x[0] for x in items]), np.array([x[1] for x in items], np.int64),
                        np.array([x[2] for x in items], np.int64))

            b = b.pipe(decode, concurrency=t).aggregate(spec.batch_size).pipe(collate)
        return b.add_sink(BUFFER).build(num_threads=t)

    def __iter__(self):
        pipeline = self.build()
        self.epoch += 1
        with pipeline.auto_stop():
            yield from pipeline.get_iterator(timeout=300)


def loader(source: Source, work, spec: Spec):
    return SPDLLoader(source, Path(work), spec)
