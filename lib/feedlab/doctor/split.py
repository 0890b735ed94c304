"""A data set's path through the input pipeline, split into the stages the doctor times.

Built from the format registry and the stores' public ``read_raw`` / ``decode_raw`` /
``store_files``: any registered format works here without being named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from feedlab import decode as dec
from feedlab import formats
from feedlab import pipeline as pl
from feedlab.errors import one_line, shown


class StageSplit:
    """read → decode → transform of one dataset, through its public ``read_raw`` / ``decode_raw``."""

    def __init__(self, dataset, transform=None, kind: str = "sr"):
        self.dataset, self.transform, self.kind = dataset, transform, kind
        self.decode_name = str(getattr(dataset, "decode_name", "none"))

    def __len__(self) -> int:
        return len(self.dataset)

    def read(self, i: int):
        return self.dataset.read_raw(i)

    def decode(self, raw):
        return self.dataset.decode_raw(raw)

    def files(self, indices):
        f = getattr(self.dataset, "store_files", None)
        return f(indices) if f is not None else None

    def __getitem__(self, i):  # what the end-to-end DataLoader runs per item
        s = self.dataset.decode_raw(self.dataset.read_raw(int(i)))
        return self.transform(s) if self.transform is not None else s

    def named_failure(self, indices, chain, exc: BaseException) -> BaseException:
        """``exc`` (raised running ``chain`` over ``indices``) as one line naming the sample's file, relative to
        the data set's folder, and the stage it failed in; ``exc`` itself where no file can be named (an error
        that already names its file, a store that names none). The error path only: each index is rerun alone."""
        for i in indices:
            x, stage = i, "read"
            try:
                for stage, fn in chain:
                    x = fn(x)
            except Exception:   # noqa: BLE001 - this sample is the one that fails: name it
                files = self.files([i]) or []
                name = Path(files[0]).name if files else ""
                if not files or name in str(exc) or shown(name).strip("'\"") in str(exc):   # named already
                    return exc
                root = Path(getattr(self.dataset, "root", Path(files[0]).parent))
                try:
                    name = shown(Path(files[0]).relative_to(root))
                except ValueError:
                    name = shown(files[0])
                text = one_line(exc)
                todo = ("it holds 16-bit samples, which this path takes only as 8-bit: convert it to 8 bits, or "
                        "decode with pil (it converts)" if "<u2" in text or "uint16" in text else
                        "convert or remove it")
                return ValueError(f"the {stage} of {name} under {shown(root)} failed: "
                                  f"{type(exc).__name__}: {text}; {todo}")
        return exc


_OPEN: dict[tuple, Any] = {}


def open_split(root, fmt: str, decode: str, transform: str = "default", crop: int = 96) -> StageSplit:
    """The stage split of ``fmt`` under ``root`` (one reader per process and set: py-lmdb
    refuses to open an environment twice)."""
    spec = formats.get_format(fmt)
    opts = {"decode": decode} if spec.image_codec is not None else {}
    key = (str(Path(root).resolve()), fmt, decode)
    if key not in _OPEN:
        _OPEN[key] = formats.open_dataset(root, fmt, **opts)
    return StageSplit(_OPEN[key], pl.make_transform(transform, spec.kind, crop), spec.kind)


def decode_alternatives(codec: str | None) -> list[str]:
    """CPU image decode backends this environment has for ``codec`` (png or jpeg)."""
    if codec is None:
        return []

    out = [name for name, info in dec.available_backends().items()
           if name not in ("cuda", "pillow-simd") and getattr(info, "available", False) and dec.supports(name, codec)]
    return out or ["pil"]
