"""A storage format written for the tests: one raw ``.bin`` file per sample (lr bytes then
hr bytes), shapes in ``rawbin/shapes.json``. It is the whole of what a new format needs
besides its registration (see test_new_format.py and docs/ARCHITECTURE.md)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from feedlab.formats import SRDataset, tree_bytes

DIRNAME = "rawbin"


def write(root, samples, **_opts) -> Path:
    d = Path(root) / DIRNAME
    d.mkdir(parents=True, exist_ok=True)
    lr0, hr0 = samples[0]
    for i, (lr, hr) in enumerate(samples):
        (d / f"{i:06d}.bin").write_bytes(np.ascontiguousarray(lr).tobytes() + np.ascontiguousarray(hr).tobytes())
    (d / "shapes.json").write_text(json.dumps({"n": len(samples), "lr": lr0.shape, "hr": hr0.shape}))
    return d


def bytes_on_disk(root) -> int:
    return tree_bytes(Path(root) / DIRNAME)


class RawBinDataset(SRDataset):
    fmt = "rawbin"
    decode_name = "frombuffer"

    def __init__(self, root, as_tensor: bool = False):
        super().__init__(root, as_tensor)
        self.dir = self.root / DIRNAME
        meta = json.loads((self.dir / "shapes.json").read_text())
        self._n, self.lr_shape, self.hr_shape = meta["n"], tuple(meta["lr"]), tuple(meta["hr"])

    def read_raw(self, i: int) -> bytes:
        return (self.dir / f"{self._index(i):06d}.bin").read_bytes()

    def decode_raw(self, raw):
        k = int(np.prod(self.lr_shape))
        a = np.frombuffer(raw, np.uint8)
        return a[:k].reshape(self.lr_shape).copy(), a[k:].reshape(self.hr_shape).copy()

    def _read(self, i: int):
        return self.decode_raw(self.read_raw(i))

    def store_files(self, indices):
        return [self.dir / f"{int(i):06d}.bin" for i in indices]
