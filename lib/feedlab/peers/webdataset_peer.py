"""WebDataset: POSIX tar shards read sequentially, as its README's ImageNet example does.

Writer: ``wds.ShardWriter`` (SR: ``lr.npy``/``hr.npy`` per sample, its own npy
encoder; classification: the JPEG bytes as ``jpg``, ``cls`` and ``idx``).
Reader: ``wds.WebDataset(shards, shardshuffle=True)`` -> ``.shuffle(buffer)``
-> ``.decode(...)`` -> ``.to_tuple(...)`` -> ``.map_tuple(transform)`` ->
``.batched(batch_size, partial=True)``, under ``wds.WebLoader(batch_size=None,
num_workers=W, persistent_workers=True)``; each worker reads whole shards (``split_by_worker``).
"""

from __future__ import annotations

from pathlib import Path

from .base import Conversion, Source, Spec, timed_conversion, torchvision_cls_transform

SHARDS = 8          # enough shards for every worker count the profiles use (up to 8 workers)
BUFFER = 1000       # sample shuffle buffer (the README's value)


def _shards(work: Path) -> list[str]:
    return sorted(str(p) for p in Path(work).glob("shard-*.tar"))


def data_files(source: Source, work):
    return [Path(p) for p in _shards(work)]


def convert(source: Source, work) -> Conversion:
    import webdataset as wds

    per = max(1, -(-source.n // SHARDS))

    def write(tmp: Path) -> None:
        with wds.ShardWriter(str(tmp / "shard-%06d.tar"), maxcount=per, verbose=0) as sink:
            for i in range(source.n):
                if source.kind == "sr":
                    sink.write({"__key__": f"{i:06d}", "lr.npy": source.lr[i], "hr.npy": source.hr[i]})
                else:
                    sink.write({"__key__": f"{i:06d}", "jpg": source.jpeg_bytes(i),
                                "cls": int(source.labels[i]), "idx.cls": i})

    return timed_conversion(work, write, f"{SHARDS} tar shards")


def _identity(x):
    return x


def loader(source: Source, work, spec: Spec):
    import webdataset as wds

    urls = _shards(work)
    ds = wds.WebDataset(urls, shardshuffle=len(urls) if spec.shuffle else False, seed=spec.seed,
                        empty_check=False)
    if spec.shuffle:
        ds = ds.shuffle(BUFFER)
    if source.kind == "sr":
        ds = ds.decode().to_tuple("lr.npy", "hr.npy")
    else:
        ds = (ds.decode("pil").to_tuple("jpg", "cls", "idx.cls")
              .map_tuple(torchvision_cls_transform(spec.size, spec.augment), _identity, _identity))
    ds = ds.batched(spec.batch_size, partial=True)
    return wds.WebLoader(ds, batch_size=None, shuffle=False, num_workers=spec.workers,
                         persistent_workers=spec.workers > 0)


