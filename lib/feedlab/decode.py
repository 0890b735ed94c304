"""Image decoders behind one function.

``decode(data, backend)`` turns the bytes of one JPEG or PNG into an HWC uint8
RGB numpy array, whichever library does the work. ``available_backends()``
says which libraries this environment has, and for each missing one why and
how to get it: a backend is never dropped silently.

Backends (``supports(name, kind)`` tells which formats each reads):

============  ==========  ===================================================
name          formats     library
============  ==========  ===================================================
pil           jpeg, png   Pillow (or Pillow-SIMD, which replaces it in place)
pillow-simd   jpeg, png   the same code path, available only when ``PIL`` is
                          the SIMD fork (its version ends in ``.postN``)
torchvision   jpeg, png   ``torchvision.io`` decoders on a uint8 byte tensor
accimage      jpeg        Intel IPP via accimage (conda-forge only)
simplejpeg    jpeg        bundled libjpeg-turbo; decodes into a given buffer
turbojpeg     jpeg        PyTurboJPEG over the system libturbojpeg
pyspng        png         libspng
cuda          jpeg        nvJPEG through ``torchvision.io.decode_jpeg(device=)``
============  ==========  ===================================================

The per-call path is kept thin on purpose (one dict look-up, then the
library call): the notebooks compare the best decoder with libjpeg-turbo's
own C benchmark (``tjbench``), so Python overhead is part of what is measured.
"""

from __future__ import annotations

import contextlib
import functools
import io
from typing import Callable

import numpy as np

__all__ = [
    "BACKENDS",
    "BackendInfo",
    "available_backends",
    "backend_names",
    "decode",
    "decode_resize",
    "decode_cuda_batch",
    "image_kind",
    "is_pillow_simd",
    "supports",
    "with_image_backend",
]

from feedlab.decode_support import (  # noqa: F401  (re-exported: one import for callers)
    BACKENDS,
    BackendInfo,
    available_backends,
    backend_names,
    image_kind,
    is_pillow_simd,
    supports,
)

# --------------------------------------------------------------------------
# decoders: each takes (data, out) and returns an HWC uint8 RGB array
# --------------------------------------------------------------------------

def _to_rgb_array(arr: np.ndarray) -> np.ndarray:
    """Grayscale / gray+alpha / RGBA -> RGB, uint16 -> uint8."""
    if arr.dtype != np.uint8:
        if arr.dtype == np.uint16:
            arr = (arr >> 8).astype(np.uint8)
        else:
            raise ValueError(f"unsupported decoded dtype {arr.dtype}")
    if arr.ndim == 2:
        return np.repeat(arr[:, :, None], 3, axis=2)
    c = arr.shape[2]
    if c == 3:
        return arr
    if c == 1:
        return np.repeat(arr, 3, axis=2)
    if c == 2:  # gray + alpha: drop alpha
        return np.repeat(arr[:, :, :1], 3, axis=2)
    if c == 4:  # RGBA: drop alpha (what PIL's convert('RGB') does)
        return np.ascontiguousarray(arr[:, :, :3])
    raise ValueError(f"unsupported channel count {c}")


def _finish(arr: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    if out is None:
        return arr
    np.copyto(out, arr)
    return out


def _as_bytes_like(data):
    # BytesIO and the C decoders take any buffer; numpy arrays need their memory
    return data.data if isinstance(data, np.ndarray) else data


def _pil_open(data):
    from PIL import Image

    return Image.open(io.BytesIO(_as_bytes_like(data)))


def undecodable(exc: BaseException, nbytes: int | None) -> tuple[str, str]:
    """``(what is wrong, what to do)``, in words, for an encoded image whose decode raised ``exc``;
    ``nbytes`` is the file's size (None: not known). Empty, over Pillow's decompression-bomb limit,
    not an image, truncated or damaged, else the decoder's own first line."""
    import re

    name, text = type(exc).__name__, " ".join(str(exc).split())
    low = f"{name} {text}".lower()
    size = f" ({nbytes:,} bytes)" if nbytes else ""
    if nbytes == 0:
        return "the file is empty (0 bytes)", "copy it again from its source, or remove it"
    if "decompressionbomb" in low or "decompression bomb" in low:
        m = re.search(r"\((\d+) pixels\) exceeds limit of (\d+)", text)
        px = f"{int(m[1]):,} pixels, over Pillow's limit of {int(m[2]):,}" if m else "over Pillow's pixel limit"
        return (f"it is a decompression bomb to Pillow ({px})",
                "shrink it, or raise PIL.Image.MAX_IMAGE_PIXELS if you trust the file")
    if "cannot identify image" in low or "unidentified" in low or "not a jpeg" in low or "unknown image" in low:
        return (f"it is not an image this decoder reads{size}",
                "move it out of the folder, or convert it to JPEG/PNG")
    if any(w in low for w in ("truncated", "broken", "premature end", "corrupt", "unexpected end", "damaged")):
        return f"it is truncated or damaged{size}", "copy it again from its source, or remove it"
    return f"{name}: {text.splitlines()[0] if text else 'no message'}{size}", "remove it, or convert it to JPEG/PNG"


def _decode_pil(data, out):
    im = _pil_open(data)
    if im.mode != "RGB":
        im = im.convert("RGB")
    arr = np.asarray(im)
    return _finish(arr, out)


def _tv_ops():
    """torchvision's registered ops, called directly.

    The public ``torchvision.io.decode_*`` wrappers add an API-usage log and a
    deprecation warning on every call (torchvision >= 0.29): a few µs that
    would show up at 96×96. Fall back to them when the ops are not exposed.
    """
    import torch
    import torchvision.io as tvio

    rgb = tvio.ImageReadMode.RGB
    try:
        ops = torch.ops.image
        dj, dp, di = ops.decode_jpeg, ops.decode_png, ops.decode_image
        mode = rgb.value

        def jpeg(t):
            return dj(t, mode, False)

        def png(t):
            return dp(t, mode, False)

        def anyimg(t):
            return di(t, mode, False)

        return jpeg, png, anyimg
    except (AttributeError, RuntimeError):  # pragma: no cover - older/newer torchvision
        return (
            lambda t: tvio.decode_jpeg(t, mode=rgb),
            lambda t: tvio.decode_png(t, mode=rgb),
            lambda t: tvio.decode_image(t, mode=rgb),
        )


@functools.lru_cache(maxsize=1)
def _tv():
    import warnings

    import torch

    # torch.frombuffer on read-only bytes warns (once per process) that the
    # tensor could write to them. Decoders only read, so spend that one
    # warning here, silenced, instead of on a user's first decode.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.frombuffer(b"\x00", dtype=torch.uint8)
    jpeg, png, anyimg = _tv_ops()
    return torch, jpeg, png, anyimg


def _byte_tensor(torch, data):
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    # frombuffer shares memory with bytes, memoryview and arrays alike
    return torch.frombuffer(data, dtype=torch.uint8)


def _decode_torchvision(data, out):
    torch, jpeg, png, anyimg = _tv()
    t = _byte_tensor(torch, data)
    kind = image_kind(data)
    chw = jpeg(t) if kind == "jpeg" else png(t) if kind == "png" else anyimg(t)
    # the decoders fill HWC memory and hand back a CHW-permuted view, so the
    # permute back is free and contiguous
    arr = chw.permute(1, 2, 0).numpy()
    return _finish(arr, out)


@functools.lru_cache(maxsize=1)
def _simplejpeg():
    import simplejpeg

    return simplejpeg.decode_jpeg


def _decode_simplejpeg(data, out, fast=False):
    dj = _simplejpeg()
    if out is not None and out.flags.c_contiguous:
        got = dj(data, "RGB", fast, fast, buffer=out)
        if got.shape != out.shape:
            raise ValueError(f"decoded shape {got.shape} does not match out {out.shape}")
        return out
    return _finish(dj(data, "RGB", fast, fast), out)


@functools.lru_cache(maxsize=1)
def _turbo():
    import turbojpeg

    return turbojpeg.TurboJPEG(), turbojpeg.TJPF_RGB, getattr(turbojpeg, "TJFLAG_FASTDCT", 2048), getattr(
        turbojpeg, "TJFLAG_FASTUPSAMPLE", 256
    )


def _decode_turbojpeg(data, out, fast=False):
    tj, rgb, fastdct, fastup = _turbo()
    flags = (fastdct | fastup) if fast else 0
    return _finish(tj.decode(_as_bytes_like(data), pixel_format=rgb, flags=flags), out)


@functools.lru_cache(maxsize=1)
def _pyspng():
    import pyspng

    return pyspng.load


def _decode_pyspng(data, out):
    arr = _pyspng()(bytes(data) if not isinstance(data, bytes) else data)
    return _finish(_to_rgb_array(arr), out)


def _decode_accimage(data, out):
    import accimage

    img = accimage.Image(bytes(_as_bytes_like(data)))
    target = out if out is not None else np.empty((img.height, img.width, 3), np.uint8)
    # accimage's copyto fills a CHW or HWC uint8 array depending on its shape
    img.copyto(target)
    return target


def _decode_cuda(data, out):
    import torchvision.io as tvio

    torch = _tv()[0]
    t = _byte_tensor(torch, data)
    img = tvio.decode_jpeg(t, mode=tvio.ImageReadMode.RGB, device="cuda")
    return _finish(img.permute(1, 2, 0).cpu().numpy(), out)


_DECODERS: dict[str, Callable] = {
    "pil": _decode_pil,
    "pillow-simd": _decode_pil,
    "torchvision": _decode_torchvision,
    "accimage": _decode_accimage,
    "simplejpeg": _decode_simplejpeg,
    "turbojpeg": _decode_turbojpeg,
    "pyspng": _decode_pyspng,
    "cuda": _decode_cuda,
}
_FAST_CAPABLE = {"simplejpeg": _decode_simplejpeg, "turbojpeg": _decode_turbojpeg}


def _unknown(backend: str) -> ValueError:
    return ValueError(f"unknown backend {backend!r}; one of: {', '.join(BACKENDS)}")


def decode(data, backend: str = "pil", out: np.ndarray | None = None, *, fast: bool = False) -> np.ndarray:
    """Decode one encoded image to an HWC uint8 RGB array.

    ``data`` is ``bytes``, a ``memoryview`` or a 1-D uint8 ``np.ndarray``.
    With ``out`` (a preallocated HWC uint8 array of the right shape, e.g. a
    batch slot) the pixels land there: simplejpeg decodes straight into it,
    the others copy once. ``fast=True`` asks libjpeg-turbo backends for the
    fast DCT and upsampling (slightly lower quality, ~5-10% faster).
    Unavailable backends raise ``RuntimeError`` with the install hint.
    """
    try:
        fn = _DECODERS[backend]
    except KeyError:
        raise _unknown(backend) from None
    try:
        if fast and backend in _FAST_CAPABLE:
            return fn(data, out, True)
        return fn(data, out)
    except ImportError as exc:
        info = available_backends()[backend]
        raise RuntimeError(f"decode backend {backend!r} unavailable: {info.reason}") from exc


def decoder(backend: str = "pil", *, fast: bool = False) -> Callable:
    """The bare ``fn(data, out=None)`` for one backend, for hot loops that skip dispatch."""
    try:
        fn = _DECODERS[backend]
    except KeyError:
        raise _unknown(backend) from None
    info = available_backends()[backend]
    if not info.available:
        raise RuntimeError(f"decode backend {backend!r} unavailable: {info.reason}")
    if fast and backend in _FAST_CAPABLE:
        return functools.partial(fn, fast=True)

    def call(data, out=None):
        return fn(data, out)

    return call


def decode_cuda_batch(datas, device="cuda"):
    """Decode a list of JPEGs on the GPU in one nvJPEG batch call; a list of CHW uint8 CUDA tensors."""
    import torchvision.io as tvio

    torch = _tv()[0]
    tensors = [_byte_tensor(torch, d) for d in datas]
    return tvio.decode_jpeg(tensors, mode=tvio.ImageReadMode.RGB, device=device)


# --------------------------------------------------------------------------
# decode + resize
# --------------------------------------------------------------------------

def _hw(size) -> tuple[int, int]:
    if isinstance(size, int):
        return size, size
    h, w = size
    return int(h), int(w)


def decode_resize(
    data,
    size,
    backend: str = "pil",
    out: np.ndarray | None = None,
    *,
    use_draft: bool = True,
    return_info: bool = False,
):
    """Decode and resize to ``size`` (int or (h, w)); HWC uint8 RGB.

    JPEG lets a decoder skip work by decoding at 1/2, 1/4 or 1/8 scale in the
    DCT domain: PIL does it through ``Image.draft()``, simplejpeg through
    ``min_height``/``min_width``. Both keep the scaled image no smaller than
    ``size``; a bilinear resize (Pillow's, antialiased) finishes the job.
    Other backends decode at full size first.

    ``return_info=True`` returns ``(array, info)`` with ``info['draft']``
    (whether reduced-scale decoding was used), ``info['decoded_hw']`` and
    ``info['source_hw']``.
    """
    from PIL import Image

    h, w = _hw(size)
    kind = image_kind(data)
    info = {"backend": backend, "draft": False, "source_hw": None, "decoded_hw": None}
    if backend in ("pil", "pillow-simd"):
        im = _pil_open(data)
        info["source_hw"] = (im.height, im.width)
        if use_draft and kind == "jpeg" and (im.width >= 2 * w and im.height >= 2 * h):
            # draft only ever scales by 1/2^k while staying >= the request
            im.draft("RGB", (w, h))
            info["draft"] = (im.width, im.height) != (info["source_hw"][1], info["source_hw"][0])
        if im.mode != "RGB":
            im = im.convert("RGB")
        info["decoded_hw"] = (im.height, im.width)
        if (im.height, im.width) != (h, w):
            im = im.resize((w, h), Image.BILINEAR)
        arr = np.asarray(im)
    else:
        if backend == "simplejpeg" and use_draft and kind == "jpeg":
            import simplejpeg

            sh, sw, _, _ = simplejpeg.decode_jpeg_header(data)
            info["source_hw"] = (sh, sw)
            full = simplejpeg.decode_jpeg(data, "RGB", min_height=h, min_width=w)
            info["draft"] = full.shape[:2] != (sh, sw)
        else:
            full = decode(data, backend)
            info["source_hw"] = full.shape[:2]
        info["decoded_hw"] = tuple(full.shape[:2])
        if full.shape[:2] != (h, w):
            arr = np.asarray(Image.fromarray(full).resize((w, h), Image.BILINEAR))
        else:
            arr = full
    arr = _finish(arr, out)
    return (arr, info) if return_info else arr


# --------------------------------------------------------------------------
# torchvision's image backend (the accimage-through-torchvision path)
# --------------------------------------------------------------------------

@contextlib.contextmanager
def with_image_backend(name: str):
    """Temporarily switch ``torchvision.set_image_backend`` ('PIL' or 'accimage').

    torchvision's ``default_loader`` (ImageFolder) and ``ToTensor`` follow
    this switch; the write-ups' accimage numbers come from this path.
    Raises ``RuntimeError`` with the install hint when accimage is missing.
    """
    import torchvision

    if name.lower() in ("pil", "pillow"):
        name = "PIL"
    elif name.lower() == "accimage":
        name = "accimage"
        info = available_backends()["accimage"]
        if not info.available:
            raise RuntimeError(f"accimage unavailable: {info.reason}")
    else:
        raise ValueError(f"unknown torchvision image backend {name!r}; one of: PIL, accimage")
    previous = torchvision.get_image_backend()
    torchvision.set_image_backend(name)
    try:
        yield name
    finally:
        torchvision.set_image_backend(previous)

