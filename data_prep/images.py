"""Source photos: discovery, robust loading, explicit conversion to 8-bit RGB."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image, ImageOps

from .errors import DataPrepError
from .progress import track

IMAGE_EXTS = {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".gif", ".ppm", ".pgm", ".pnm"}

# Photos that ship inside installed packages (no network, no pooch download).
# (name, package, path inside the package). Colour photos first: the default
# classification set takes its classes from the head of this list.
BUILTIN_PHOTOS: tuple[tuple[str, str, str], ...] = (
    ("astronaut", "skimage", "data/astronaut.png"),
    ("chelsea", "skimage", "data/chelsea.png"),
    ("coffee", "skimage", "data/coffee.png"),
    ("rocket", "skimage", "data/rocket.jpg"),
    ("china", "sklearn", "datasets/images/china.jpg"),
    ("flower", "sklearn", "datasets/images/flower.jpg"),
    ("grace_hopper", "matplotlib", "mpl-data/sample_data/grace_hopper.jpg"),
    ("motorcycle_left", "skimage", "data/motorcycle_left.png"),
    ("motorcycle_right", "skimage", "data/motorcycle_right.png"),
    ("hubble_deep_field", "skimage", "data/hubble_deep_field.jpg"),
    ("ihc", "skimage", "data/ihc.png"),
    ("retina", "skimage", "data/retina.jpg"),
    ("camera", "skimage", "data/camera.png"),      # grayscale: converted to RGB
    ("brick", "skimage", "data/brick.png"),
    ("grass", "skimage", "data/grass.png"),
    ("gravel", "skimage", "data/gravel.png"),
    ("moon", "skimage", "data/moon.png"),
)


#: decoded source photos kept in memory at once, at most (larger sources are decoded again
#: when used, one at a time: a folder of 8000² photos never sits decoded in RAM all together)
KEEP_DECODED_BYTES = 512 << 20


class Photo:
    """A source photo: its name, path and shape; ``rgb`` (H, W, 3) uint8, decoded on use
    and kept until :meth:`release` (a photo decoded by :func:`load_photos` within the
    ``keep_bytes`` budget stays resident)."""

    def __init__(self, name: str, path: Path, rgb: np.ndarray | None = None, shape=None):
        self.name, self.path = name, Path(path)
        self._rgb = rgb
        self.shape = tuple(rgb.shape) if rgb is not None else tuple(shape)

    @property
    def rgb(self) -> np.ndarray:
        if self._rgb is None:
            self._rgb = load_rgb8(self.path)[0]
        return self._rgb

    @property
    def resident(self) -> bool:
        return self._rgb is not None

    def release(self) -> None:
        self._rgb = None


@dataclass
class LoadReport:
    unreadable: list[str] = field(default_factory=list)
    too_small: list[str] = field(default_factory=list)
    converted: dict[str, int] = field(default_factory=dict)  # source mode -> count

    def as_dict(self) -> dict:
        return {"unreadable": list(self.unreadable), "too_small": list(self.too_small),
                "converted_modes": dict(sorted(self.converted.items()))}


def _package_dir(pkg: str) -> Path | None:
    try:
        import importlib.util
        spec = importlib.util.find_spec(pkg)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def builtin_photo_paths() -> list[tuple[str, Path]]:
    """The bundled photos present in this environment (missing ones are left out)."""
    out = []
    dirs: dict[str, Path | None] = {}
    for name, pkg, rel in BUILTIN_PHOTOS:
        if pkg not in dirs:
            dirs[pkg] = _package_dir(pkg)
        base = dirs[pkg]
        if base is not None and (base / rel).is_file():
            out.append((name, base / rel))
    return out


def find_images(src: str | os.PathLike) -> list[Path]:
    """Image files under ``src`` (recursive), sorted by relative path."""
    src = Path(src)
    if not src.exists():
        raise DataPrepError(f"source folder {src} does not exist")
    if not src.is_dir():
        raise DataPrepError(f"source {src} is not a folder")
    files = [p for p in src.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_EXTS
             and not any(part.startswith(".") for part in p.relative_to(src).parts)]
    return sorted(files, key=lambda p: p.relative_to(src).as_posix())


def to_rgb8(im: Image.Image) -> np.ndarray:
    """Explicit conversion of any Pillow mode to (H, W, 3) uint8 RGB.

    * 16-bit and 32-bit integer grayscale (``I;16*``, ``I``): scaled to 8 bits
      (``>> 8`` for values up to 65535, else by the maximum), then replicated.
    * float (``F``): [0, 1] scaled by 255, [0, 255] rounded, else by its max.
    * alpha (``RGBA``, ``LA``, ``PA``, palette with transparency): composited
      over white, so transparent regions do not turn into arbitrary colours.
    * palette, 1-bit, grayscale, CMYK, YCbCr...: Pillow's ``convert("RGB")``.
    * EXIF orientation is applied first (``ImageOps.exif_transpose``).
    """
    im = ImageOps.exif_transpose(im)
    mode = im.mode
    if mode.startswith("I;16") or mode == "I":
        a = np.asarray(im).astype(np.int64)
        a = np.clip(a, 0, None)
        top = int(a.max()) if a.size else 0
        if mode.startswith("I;16") or top <= 65535:
            g = (a >> 8).astype(np.uint8)
        else:
            g = (a * 255 // max(top, 1)).astype(np.uint8)
        return np.ascontiguousarray(np.repeat(g[:, :, None], 3, axis=2))
    if mode == "F":
        a = np.nan_to_num(np.asarray(im, dtype=np.float64))
        a = np.clip(a, 0, None)
        top = float(a.max()) if a.size else 0.0
        if top <= 1.0:
            a = a * 255.0
        elif top > 255.0:
            a = a * (255.0 / top)
        g = np.clip(np.rint(a), 0, 255).astype(np.uint8)
        return np.ascontiguousarray(np.repeat(g[:, :, None], 3, axis=2))
    has_alpha = mode in ("RGBA", "LA", "PA", "La", "RGBa") or (mode == "P" and "transparency" in im.info)
    if has_alpha:
        rgba = im.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return np.array(Image.alpha_composite(white, rgba).convert("RGB"))
    if mode != "RGB":
        im = im.convert("RGB")
    return np.array(im)


def load_rgb8(path: str | os.PathLike) -> tuple[np.ndarray, str]:
    """Decode an image file fully; returns ``(rgb, source_mode)``. Raises
    ``DataPrepError`` naming the file if it cannot be read."""
    from feedlab.files import open_regular

    try:
        with open_regular(path) as fh, Image.open(fh) as im:
            im.load()
            mode = im.mode
            return to_rgb8(im), mode
    except (KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except Exception as exc:  # Pillow raises many types for corrupt files
        raise DataPrepError(f"cannot read image {path}: {type(exc).__name__}: {exc}") from None


def load_photos(named_paths: list[tuple[str, Path]], *, min_side: int, skip_bad: bool,
                log: Callable[[str], None] = print,
                keep_bytes: int = KEEP_DECODED_BYTES) -> tuple[list[Photo], LoadReport]:
    """Check every source photo by decoding it (one at a time); unreadable ones raise (or are
    skipped and counted with ``skip_bad``), ones smaller than ``min_side`` on a side are
    skipped and counted. Photos stay decoded while their total is within ``keep_bytes``;
    the rest are decoded again when used (``Photo.rgb``)."""
    photos: list[Photo] = []
    kept = 0
    report = LoadReport()
    errors: list[str] = []
    for name, path in track(named_paths, len(named_paths), "load photos", unit="photo"):
        try:
            rgb, mode = load_rgb8(path)
        except DataPrepError as exc:
            errors.append(str(exc).removeprefix("cannot read image "))
            report.unreadable.append(str(path))
            continue
        if rgb.shape[0] < min_side or rgb.shape[1] < min_side:
            report.too_small.append(str(path))
            continue
        if mode != "RGB":
            report.converted[mode] = report.converted.get(mode, 0) + 1
        if kept + rgb.nbytes <= keep_bytes:
            kept += rgb.nbytes
            photos.append(Photo(name, Path(path), rgb))
        else:
            photos.append(Photo(name, Path(path), shape=rgb.shape))
        del rgb
    if errors and not skip_bad:  # every bad file in one run, not one per run
        raise DataPrepError(f"{len(errors)} unreadable image(s): " + "; ".join(errors)
                            + " (fix or remove them, or use --skip-bad to skip them)")
    if report.unreadable:
        log(f"skipped {len(report.unreadable)} unreadable image(s): " + ", ".join(report.unreadable))
    if report.too_small:
        log(f"skipped {len(report.too_small)} image(s) smaller than {min_side}x{min_side}: "
            + ", ".join(report.too_small))
    if report.converted:
        log("converted to 8-bit RGB: " + ", ".join(f"{n} {m}" for m, n in sorted(report.converted.items())))
    return photos, report
