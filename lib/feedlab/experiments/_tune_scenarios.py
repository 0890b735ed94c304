"""Notebook 16's scenarios: loaders where the best setting is not obvious, each small enough for 2 cores.

Every scenario is a user's job as the tuner sees it: a factory returning a plain ``DataLoader`` (the user's start),
a step (or none), the epochs it runs and, where it has one, a memory limit. The datasets are module-level classes
(a spawned or forked worker rebuilds them); none stores a pickle, none writes outside the process.

* (a) ``storage``: each fetch waits on storage latency (a remote disk), little CPU: the best is far above the
  core count, or threads;
* (b) ``jpeg``: the embedded JPEG set decoded and resized by PIL on the CPU, with a small model's step;
* (c) ``compute``: a step that keeps every core busy; extra workers steal its cores;
* (d) ``large``: large samples (MiBs each) with a cheap fetch: the worker → main hand-over bounds;
* (e) ``memory``: a data set already in memory (a ``TensorDataset``): no worker can beat the main process;
* (f) ``cow``: a data set of many small Python objects, copied page by page into each worker that touches them
  (reference counts), under a memory limit, several epochs;
* (g) ``script``: a training script run unmodified through ``--script`` (``feedlab.doctor.script``), tuned with
  its step's measured time standing in for the step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np


class Latency:
    """(a) A remote read: ``latency_s`` waiting, then a small sample (a few µs of CPU)."""

    def __init__(self, n: int, latency_s: float):
        self.n, self.latency_s = int(n), float(latency_s)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch

        time.sleep(self.latency_s)
        return torch.full((3, 16, 16), float(i % 255), dtype=torch.uint8)


class Jpegs:
    """(b) The embedded JPEG set: each sample read, decoded by PIL and resized to ``size`` on the CPU."""

    def __init__(self, root: str, size: int = 64, n: int | None = None):
        files = sorted(str(p) for p in Path(root).rglob("*.jpg"))
        if not files:
            raise FileNotFoundError(f"{root}: no .jpg files (build the embedded set: python -m data_prep classify)")
        self.files = (files * (1 + (n or len(files)) // len(files)))[: n or len(files)]
        self.size = int(size)

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        import torch
        from PIL import Image

        with Image.open(self.files[i]) as im:
            im.draft("RGB", (2 * self.size, 2 * self.size))    # libjpeg's DCT scaling: decode at 1/2–1/8 size
            arr = np.asarray(im.convert("RGB").resize((self.size, self.size)))
        return torch.from_numpy(arr.copy()).permute(2, 0, 1)


class Light:
    """(c) A light fetch: a small random image and a flip (tens of µs)."""

    def __init__(self, n: int, size: int = 32):
        self.n, self.size = int(n), int(size)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch

        g = torch.Generator().manual_seed(i)
        return torch.rand(3, self.size, self.size, generator=g).flip(-1)


class Large:
    """(d) Large samples: ``mib`` MiB each, copied out of one array in memory (a cheap fetch)."""

    def __init__(self, n: int, mib: float):
        self.n = int(n)
        side = int(((mib * 2**20) / (3 * 4)) ** 0.5)
        self.base = np.random.default_rng(0).random((3, side, side), dtype=np.float32)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch

        return torch.from_numpy(self.base.copy())


class CopyOnAccess:
    """(f) Many small Python objects (a list of tuples): each fetch reads one and sums it in Python (CPU under the
    GIL); touching an object writes its reference count, so a forked worker copies the pages it touches and
    grows per sample it has seen (pytorch#13246)."""

    def __init__(self, n: int, width: int = 48):
        self.items = [tuple(float(i + k) for k in range(width)) for i in range(int(n))]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        import torch

        row = self.items[i]
        s = 0.0
        for _ in range(6):
            s += sum(row) / len(row)
        return torch.tensor(row[:16]) * (s / 1e6)


class TinyNet:
    """A small conv step (forward, backward, SGD) on a batch of images: ``step(batch)``."""

    def __init__(self, channels: int = 8, width: int = 1):
        import torch

        self.net = torch.nn.Sequential(torch.nn.Conv2d(3, channels * width, 3, padding=1), torch.nn.ReLU(),
                                       torch.nn.Conv2d(channels * width, channels, 3, padding=1),
                                       torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(channels, 4))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01)

    def __call__(self, batch):
        x = batch.float() / 255.0 if not batch.is_floating_point() else batch
        self.opt.zero_grad(set_to_none=True)
        self.net(x).square().mean().backward()
        self.opt.step()


def touch(batch) -> None:
    """A step that reads every byte of a batch once (a large sample's step: the copy the model would make)."""
    float(batch.sum())


@dataclass
class Scenario:
    """One job as the tuner sees it."""
    key: str
    title: str
    why: str                                  # why the best setting is not obvious here
    make: Callable[[], Any]                   # the user's start: a DataLoader
    step: Callable[[Any], Any] | None = None
    epochs: int = 1
    ram_bytes: float | None = None            # a memory limit the workers must stay within
    start_workers: int = 0
    extra: dict = field(default_factory=dict)


def build(key: str, P, cls_root: str | None = None, script: str | None = None) -> Scenario:
    """Scenario ``key`` sized by the notebook's parameters ``P`` (``P.samples``, ``P.batch_size``, ...)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    n, B = int(P.samples), int(P.batch_size)
    if key == "storage":
        ds = Latency(n, P.latency_ms / 1e3)
        return Scenario(key, "(a) storage latency", f"each fetch waits {P.latency_ms:g} ms on storage, little CPU",
                        lambda: DataLoader(ds, batch_size=B, shuffle=True, num_workers=1), start_workers=1)
    if key == "jpeg":
        ds = Jpegs(cls_root, 64, n)
        net = TinyNet(8)
        return Scenario(key, "(b) JPEG decode + small model", "PIL decode on the CPU beside a small model's step",
                        lambda: DataLoader(ds, batch_size=B, shuffle=True, num_workers=1), step=net, start_workers=1)
    if key == "compute":
        ds = Light(n, 32)
        net = TinyNet(16, P.compute_width)
        return Scenario(key, "(c) compute-bound step", "the step keeps every core busy; workers take its cores",
                        lambda: DataLoader(ds, batch_size=B, shuffle=True, num_workers=2), step=net, start_workers=2)
    if key == "large":
        ds = Large(max(8, n // 8), P.large_mib)
        b = max(2, B // 8)
        return Scenario(key, "(d) large samples", f"{P.large_mib:g} MiB a sample, a cheap fetch: the hand-over bounds",
                        lambda: DataLoader(ds, batch_size=b, shuffle=True, num_workers=1), step=touch,
                        start_workers=1)
    if key == "memory":
        ds = TensorDataset(torch.rand(n, 3, 16, 16), torch.zeros(n, dtype=torch.long))
        return Scenario(key, "(e) data already in memory", "a TensorDataset: nothing to overlap, only hand-over",
                        lambda: DataLoader(ds, batch_size=B, shuffle=True, num_workers=2), start_workers=2)
    if key == "cow":
        ds = CopyOnAccess(P.cow_items)
        return Scenario(key, "(f) copy on access, memory limit",
                        f"each worker copies what it touches; {P.cow_limit_mb:g} MiB for the workers, "
                        f"{P.cow_epochs} epochs", lambda: DataLoader(ds, batch_size=B, shuffle=True, num_workers=0),
                        epochs=int(P.cow_epochs), ram_bytes=P.cow_limit_mb * 2**20, start_workers=0)
    if key == "script":
        return Scenario(key, "(g) a training script (--script)", "an unmodified script's own DataLoader and step",
                        None, extra={"script": script}, start_workers=2)
    raise ValueError(f"scenario {key!r}: one of storage, jpeg, compute, large, memory, cow, script")


KEYS = ("storage", "jpeg", "compute", "large", "memory", "cow", "script")
