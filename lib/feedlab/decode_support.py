"""Which image decoders this environment has, which formats each reads, and how to get a
missing one (the part of :mod:`feedlab.decode` that decodes nothing; re-exported there)."""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
from dataclasses import dataclass
from typing import Callable, Iterator

#: Every backend feedlab knows about, in the order tables list them.
BACKENDS: tuple[str, ...] = (
    "pil",
    "pillow-simd",
    "torchvision",
    "accimage",
    "simplejpeg",
    "turbojpeg",
    "pyspng",
    "cuda",
)

_KINDS: dict[str, frozenset[str]] = {
    "pil": frozenset({"jpeg", "png"}),
    "pillow-simd": frozenset({"jpeg", "png"}),
    "torchvision": frozenset({"jpeg", "png"}),
    "accimage": frozenset({"jpeg"}),
    "simplejpeg": frozenset({"jpeg"}),
    "turbojpeg": frozenset({"jpeg"}),
    "pyspng": frozenset({"png"}),
    "cuda": frozenset({"jpeg"}),
}

_HINTS: dict[str, str] = {
    "pil": "pip install pillow",
    "pillow-simd": (
        "Pillow-SIMD replaces Pillow in place (same `PIL` import), so it needs its own "
        "environment: apt-get install libjpeg62-turbo-dev zlib1g-dev; "
        "pip uninstall -y pillow; CC='cc -mavx2' pip install pillow-simd"
    ),
    "torchvision": "pip install torchvision",
    "accimage": "conda install -c conda-forge accimage (see environment.yml); not on PyPI",
    "simplejpeg": "pip install simplejpeg",
    "turbojpeg": (
        "apt-get install libturbojpeg0 && pip install 'pyturbojpeg<2' "
        "(PyTurboJPEG 2.x needs libjpeg-turbo >= 3.0; Debian 12 ships 2.1.5)"
    ),
    "pyspng": "pip install pyspng",
    "cuda": "needs a CUDA GPU and a CUDA build of torch + torchvision (nvJPEG)",
}


@dataclass(frozen=True)
class BackendInfo:
    """What ``available_backends()`` knows about one decoder.

    Unpacks as ``available, hint = info`` (the two-field form in
    docs/ARCHITECTURE.md); the other fields are for tables.
    """

    name: str
    available: bool
    version: str = ""
    reason: str = ""  # why unavailable (with the install hint); notes when available
    kinds: tuple[str, ...] = ()

    @property
    def hint(self) -> str:
        return self.reason

    def __iter__(self) -> Iterator[object]:
        return iter((self.available, self.reason))

    def as_row(self) -> dict[str, object]:
        return {
            "backend": self.name,
            "available": self.available,
            "version": self.version,
            "formats": ",".join(self.kinds),
            "note": self.reason,
        }


def backend_names() -> tuple[str, ...]:
    return BACKENDS


def supports(backend: str, kind: str) -> bool:
    """Whether ``backend`` can decode ``kind`` ('jpeg' or 'png'); says nothing of availability."""
    try:
        kinds = _KINDS[backend]
    except KeyError:
        raise ValueError(f"unknown backend {backend!r}; one of: {', '.join(BACKENDS)}") from None
    kind = kind.lower()
    if kind == "jpg":
        kind = "jpeg"
    if kind not in ("jpeg", "png"):
        raise ValueError(f"unknown image kind {kind!r}; one of: jpeg, png")
    return kind in kinds


def image_kind(data) -> str:
    """'jpeg', 'png' or 'unknown', from the magic bytes."""
    head = bytes(memoryview(data)[:8]) if not isinstance(data, bytes) else data[:8]
    if head[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if head == b"\x89PNG\r\n\x1a\n":
        return "png"
    return "unknown"


# --------------------------------------------------------------------------
# availability
# --------------------------------------------------------------------------

def is_pillow_simd() -> bool:
    """True when the installed ``PIL`` is the Pillow-SIMD fork.

    Pillow-SIMD publishes every release as ``<pillow version>.postN`` (its
    maintainers' advice for telling the two apart at run time), and installs
    a distribution named ``Pillow-SIMD``. Either sign counts.
    """
    try:
        import PIL
    except ImportError:
        return False
    if ".post" in getattr(PIL, "__version__", ""):
        return True
    try:
        importlib.metadata.distribution("Pillow-SIMD")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def _probe_pil() -> tuple[bool, str, str]:
    import PIL
    from PIL import features

    notes = []
    if features.check_feature("libjpeg_turbo"):
        notes.append(f"libjpeg-turbo {features.version('libjpeg_turbo') or ''}".strip())
    else:
        notes.append(f"libjpeg {features.version('jpg') or ''}".strip())
    if is_pillow_simd():
        notes.append("Pillow-SIMD")
    return True, PIL.__version__, "; ".join(notes)


def _probe_pillow_simd() -> tuple[bool, str, str]:
    import PIL

    if not is_pillow_simd():
        return False, "", f"PIL {PIL.__version__} is stock Pillow. " + _HINTS["pillow-simd"]
    return True, PIL.__version__, ""


def _probe_torchvision() -> tuple[bool, str, str]:
    import torchvision
    from torchvision import io as tvio

    has_ops = getattr(tvio.image, "_has_image_ops", lambda: True)()
    if not has_ops:
        return False, torchvision.__version__, "torchvision's image extension failed to load"
    note = ""
    if hasattr(tvio.image, "_DEPRECATION_MSG"):
        note = "torchvision.io image decoding is deprecated upstream in favour of TorchCodec"
    return True, torchvision.__version__, note


def _probe_accimage() -> tuple[bool, str, str]:
    import accimage  # noqa: F401  (ImportError -> unavailable)

    return True, getattr(accimage, "__version__", ""), ""


def _probe_simplejpeg() -> tuple[bool, str, str]:
    import simplejpeg

    return True, simplejpeg.__version__, "bundled libjpeg-turbo"


def _probe_turbojpeg() -> tuple[bool, str, str]:
    import turbojpeg

    version = getattr(turbojpeg, "__version__", "")
    try:
        turbojpeg.TurboJPEG()  # loads libturbojpeg; raises when missing or too old
    except Exception as exc:  # noqa: BLE001 - the message is the report
        return False, version, f"PyTurboJPEG {version} cannot load libturbojpeg ({exc}). {_HINTS['turbojpeg']}"
    return True, version, ""


def _probe_pyspng() -> tuple[bool, str, str]:
    import pyspng

    return True, getattr(pyspng, "__version__", "") or _dist_version("pyspng"), ""


def _probe_cuda() -> tuple[bool, str, str]:
    import torch

    if not torch.cuda.is_available():
        cuda_build = torch.version.cuda or "none"
        return False, "", f"torch.cuda.is_available() is False (CUDA build: {cuda_build}). {_HINTS['cuda']}"
    import torchvision

    return True, f"torch {torch.__version__}, torchvision {torchvision.__version__}", torch.cuda.get_device_name()


_PROBES: dict[str, Callable[[], tuple[bool, str, str]]] = {
    "pil": _probe_pil,
    "pillow-simd": _probe_pillow_simd,
    "torchvision": _probe_torchvision,
    "accimage": _probe_accimage,
    "simplejpeg": _probe_simplejpeg,
    "turbojpeg": _probe_turbojpeg,
    "pyspng": _probe_pyspng,
    "cuda": _probe_cuda,
}


def _dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ""


@functools.lru_cache(maxsize=1)
def _available_cached() -> dict[str, BackendInfo]:
    out: dict[str, BackendInfo] = {}
    for name in BACKENDS:
        kinds = tuple(sorted(_KINDS[name]))
        try:
            ok, version, note = _PROBES[name]()
        except ImportError as exc:
            ok, version, note = False, "", f"not installed ({exc.name or exc}): {_HINTS[name]}"
        except Exception as exc:  # noqa: BLE001 - any failure is reported, never hidden
            ok, version, note = False, "", f"{type(exc).__name__}: {exc}. {_HINTS[name]}"
        out[name] = BackendInfo(name, bool(ok), version, note, kinds)
    return out


def available_backends(refresh: bool = False) -> dict[str, BackendInfo]:
    """Every known backend with ``available``, ``version`` and ``reason`` (why not / how to install).

    The probe imports each library once and is cached; ``refresh=True`` probes again.
    """
    if refresh:
        _available_cached.cache_clear()
    return dict(_available_cached())
