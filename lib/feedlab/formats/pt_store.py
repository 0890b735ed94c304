"""``torch.save`` per sample: ``pt/000000.pt`` holding ``{"lr": uint8 HWC, "hr": uint8 HWC}``
tensors, loaded with ``torch.load(weights_only=True)`` (no arbitrary unpickling)."""

from __future__ import annotations

import io
import pickle
import warnings
from pathlib import Path

import torch

from feedlab.errors import SampleError

from ._common import (
    SRDataset,
    atomic_output,
    count_from_manifest_or_files,
    first_shapes,
    iter_checked,
    open_regular,
    read_files,
    tree_bytes,
)


def quiet_protocol_warning() -> None:
    """Torch warns (two lines) about a pickle protocol it did not write before ``weights_only`` refuses the
    file: the refusal is one line naming the file (``PtDataset._unpickle``), the warning before it only noise.
    Installed at import (a command line's start), for that warning only."""
    warnings.filterwarnings("ignore", message=r"Detected pickle protocol \d+ in the checkpoint",
                            category=UserWarning, module=r"torch\._weights_only_unpickler")


quiet_protocol_warning()

DIRNAME = "pt"


def pt_name(i: int) -> str:
    return f"{i:06d}.pt"


def write(root, samples, **_opts) -> Path:
    root = Path(root)
    final = root / DIRNAME
    lr_shape, hr_shape = first_shapes(samples)
    with atomic_output(final, is_dir=True) as tmp:
        for i, (lr, hr) in enumerate(iter_checked(samples, lr_shape, hr_shape)):
            # clone: a tensor sharing a larger buffer would save the whole buffer
            torch.save({"lr": torch.from_numpy(lr).clone(), "hr": torch.from_numpy(hr).clone()}, tmp / pt_name(i))
    return final


class PtDataset(SRDataset):
    fmt = "pt"

    def __init__(self, root, as_tensor: bool = False):
        super().__init__(root, as_tensor)
        self.dir = self.root / DIRNAME
        if not self.dir.is_dir():
            raise FileNotFoundError(f"pt: no {DIRNAME}/ under {self.root}")
        self._n = count_from_manifest_or_files(self.root, self.dir, "*.pt")
        if self._n:
            lr, hr = self._load(0)
            self.lr_shape, self.hr_shape = tuple(lr.shape), tuple(hr.shape)

    def _load(self, i: int):
        with open_regular(self.dir / pt_name(i)) as fh:
            d = self._unpickle(fh, f"sample {i} ({self.dir / pt_name(i)})")
        return d["lr"], d["hr"]

    def _unpickle(self, fh, what: str) -> dict:
        """``torch.load(weights_only=True)``; a file holding other pickled objects is one line
        naming it (not torch's advice to load it with ``weights_only=False``)."""
        try:
            return torch.load(fh, weights_only=True, map_location="cpu")
        except pickle.UnpicklingError:
            raise SampleError(f"pt: {what} holds pickled objects, not only tensors: "
                              "feedlab refuses pickle in stored samples (unpickling can run code); rebuild the store "
                              f"with `python -m data_prep pack {self.root} --to pt`") from None

    def _read(self, i: int):
        lr, hr = self._load(i)
        return lr.numpy(), hr.numpy()

    def _sample_path(self, i: int) -> str:
        return str(self.dir / pt_name(i))

    decode_name = "torch.load"

    def read_raw(self, i: int):
        return read_files((self.dir / pt_name(self._index(i)),))

    def decode_raw(self, raw):
        d = self._unpickle(io.BytesIO(raw[0]), f"a sample under {self.dir}")
        return d["lr"].numpy(), d["hr"].numpy()

    def store_files(self, indices):
        return [self.dir / pt_name(int(i)) for i in indices]


def bytes_on_disk(root) -> int:
    return tree_bytes(Path(root) / DIRNAME)
