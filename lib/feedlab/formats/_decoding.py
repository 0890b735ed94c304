"""The decode backend a dataset of encoded images holds, and how it crosses into a worker.

A dataset keeps ``decode`` (a backend name of :mod:`feedlab.decode`, or a user callable) and
``_decode``, the function built from it. That function may be a closure over a decoder
library, which does not pickle; so a dataset travels to a spawned (or forkserver) worker with
``decode`` alone and rebuilds ``_decode`` there. :class:`DecoderState` does this once for
every store of encoded images (``png``, ``imagefolder``/``jpeg``, ``images``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from feedlab import decode as _dec
from feedlab.errors import shown


def resolve_decoder(decode: str | Callable[[bytes], np.ndarray]) -> Callable:
    """A function ``fn(data: bytes, out=None) -> HWC uint8`` for a backend name or a
    callable. Backends decode into ``out`` when given (one copy at most); a user
    callable is called as ``decode(data)`` and ``out`` is ignored."""
    if callable(decode):
        user = decode

        def call(data: bytes, out=None, _f=user) -> np.ndarray:
            return _f(data)

        return call

    return _dec.decoder(str(decode))


class DecoderState:
    """Mixin: ``self.decode`` (name or callable) and ``self._decode`` (the function), pickled
    without the function and rebuilt from ``decode`` where it is unpickled."""

    decode: str | Callable
    _decode: Callable

    def _use_decoder(self, decode: str | Callable) -> None:
        self.decode = decode
        self._decode = resolve_decoder(decode)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_decode"] = None  # rebuilt in the worker: closures over a decoder do not pickle
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._decode = resolve_decoder(self.decode)

    @property
    def decode_name(self) -> str:
        return self.decode if isinstance(self.decode, str) else getattr(self.decode, "__name__", "custom")


#: seconds :func:`file_of` looks for the file a failed decode's bytes came from
FIND_FILE_S = 2.0


def file_of(paths: Sequence[Path], raw, limit_s: float = FIND_FILE_S) -> Path | None:
    """The file among ``paths`` whose bytes are ``raw`` (the split read → decode hands the decode
    bytes, not a name): same size first, then the same bytes; None when not found within ``limit_s``.
    Only a failed decode looks, so a read costs nothing for it."""
    try:
        data = memoryview(raw).cast("B")
    except TypeError:
        return None
    end = time.monotonic() + limit_s
    for p in paths:
        if time.monotonic() > end:
            return None
        try:
            if os.stat(p).st_size != data.nbytes:
                continue
            with open(p, "rb") as fh:
                if fh.read(data.nbytes + 1) == data:
                    return Path(p)
        except OSError:
            continue
    return None


def cannot_decode(fmt: str, root: Path, path: Path | None, exc: BaseException) -> ValueError:
    """One line for a file under ``root`` that did not decode: which file (relative to ``root``), what is
    wrong with it and what to do (:func:`feedlab.decode.undecodable`)."""
    nbytes = None
    if path is not None:
        try:
            nbytes = os.stat(path).st_size
        except OSError:
            pass
        try:
            name = shown(Path(path).relative_to(root))
        except ValueError:
            name = shown(path)
        where = f"{name} under {shown(root)}"
    else:
        where = f"a file under {shown(root)}"
    kind = _readable_elsewhere(path) if path is not None and nbytes else None
    if kind:   # a good file the chosen decoder does not read (simplejpeg on a PNG): the file is not at fault
        return ValueError(f"{fmt}: cannot decode {where} with this decoder: it is a valid {kind} image that the "
                          f"decoder does not read ({type(exc).__name__}); use decode='pil' (or 'auto'), "
                          "the file is fine")
    what, todo = _dec.undecodable(exc, nbytes)
    return ValueError(f"{fmt}: cannot decode {where}: {what}; {todo}")


def _readable_elsewhere(path: Path) -> str | None:
    """The image format Pillow names where it decodes ``path`` whole (the error path only), else None."""
    try:
        from PIL import Image

        with Image.open(path) as im:
            im.load()
            return str(im.format or "image")
    except Exception:   # noqa: BLE001 - not decodable by Pillow either: the file is at fault
        return None
