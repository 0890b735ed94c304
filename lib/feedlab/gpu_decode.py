"""Decode on the accelerator: ``PipelineSpec(format="jpeg", decode="cuda")``.

With ``decode="cuda"`` the workers only *read*: each sample is its encoded JPEG bytes (a 1-D uint8
tensor) and its label, and a batch is an :class:`EncodedBatch`. The main process hands the whole
batch to nvJPEG in one call (``torchvision.io.decode_jpeg(list, device=...)``), then centre-crops and
resizes every image to ``size``² on the device and stacks them — so the CPU's decode cost moves to the
GPU, where it is paid once per batch. The DataLoader's pin-memory thread pins the encoded bytes
(:meth:`EncodedBatch.pin_memory`), which are small.

``timing.run_epoch`` recognises the batch (:func:`is_encoded`) and calls :meth:`EncodedBatch.decode_to`
where it would copy a tensor to the device. On a machine without CUDA the same path runs on the CPU
decoder (``device="cpu"``): that is how the tests check its control flow, and it is never offered as
advice there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEVICE_DECODERS = ("cuda",)   # decode names that run in the main process, on the device, per batch


def is_device_decode(decode: str) -> bool:
    return str(decode) in DEVICE_DECODERS


class EncodedView:
    """A map-style dataset of ``(encoded bytes as a uint8 tensor, label)`` over any dataset with the
    public stage split (``read_raw(i)`` → ``(bytes, label)`` or bytes); pickles to workers."""

    def __init__(self, dataset, size: int = 96):
        self.dataset, self.encoded_size = dataset, int(size)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        import torch

        raw = self.dataset.read_raw(int(i))
        data, label = raw if isinstance(raw, tuple) else (raw, -1)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8), int(label)


@dataclass
class EncodedBatch:
    """Encoded images of one batch, decoded on the device in one call by :meth:`decode_to`."""

    datas: list
    size: int

    def __len__(self) -> int:
        return len(self.datas)

    def pin_memory(self, device=None):  # the DataLoader's pin-memory thread calls this
        self.datas = [d.pin_memory() for d in self.datas]
        return self

    def decode_to(self, device, decode=None):
        """NCHW uint8 on ``device``: decode the batch in one call, centre-crop and resize each image
        to ``size``² there, stack. ``decode(list, device)`` replaces the decoder (tests)."""
        import torch
        import torchvision.io as tvio
        from torchvision.transforms.v2 import functional as F

        decode = decode or (lambda ds, dev: tvio.decode_jpeg(ds, mode=tvio.ImageReadMode.RGB, device=dev))
        imgs = decode(self.datas, str(device))
        out = torch.empty((len(imgs), 3, self.size, self.size), dtype=torch.uint8, device=device)
        for k, im in enumerate(imgs):
            side = min(int(im.shape[-2]), int(im.shape[-1]))
            out[k] = F.resize(F.center_crop(im, [side, side]), [self.size, self.size], antialias=True)
        return out


def is_encoded(x) -> bool:
    return isinstance(x, EncodedBatch)


class EncodedCollate:
    """``[(bytes tensor, label), ...]`` → ``(EncodedBatch, labels)``; pickles to workers."""

    def __init__(self, size: int = 96):
        self.size = int(size)

    def __call__(self, items):
        import torch

        return (EncodedBatch([d for d, _l in items], self.size),
                torch.as_tensor(np.asarray([lab for _d, lab in items], dtype=np.int64)))
