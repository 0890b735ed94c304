"""The decode backend a dataset of encoded images holds, and how it crosses into a worker.

A dataset keeps ``decode`` (a backend name of :mod:`feedlab.decode`, or a user callable) and
``_decode``, the function built from it. That function may be a closure over a decoder
library, which does not pickle; so a dataset travels to a spawned (or forkserver) worker with
``decode`` alone and rebuilds ``_decode`` there. :class:`DecoderState` does this once for
every store of encoded images (``png``, ``imagefolder``/``jpeg``, ``images``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from feedlab import decode as _dec


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
