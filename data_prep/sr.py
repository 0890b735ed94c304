"""DIV2K-style super-resolution patch pairs from natural photos.

``hr/NNNNNN.png``: a ``patch``x``patch`` crop at a random position of a random
source photo (optionally flipped); ``lr/NNNNNN.png``: that crop downscaled by
``scale`` with PIL BICUBIC. Every draw comes from one ``numpy`` generator
seeded by ``seed``, and PNGs are written at a fixed compression level, so a
seed gives the same bytes every time (in one environment: Pillow's resampler
and zlib are part of the recipe).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

from feedlab.files import remove, sweep_orphans, tmp_sibling
from feedlab.formats import png as png_fmt
from feedlab.formats._common import (
    CHECKSUMS,
    MANIFEST,
    checksum_rows,
    write_json_atomic,
)

from .errors import DataPrepError
from .images import builtin_photo_paths, find_images, load_photos
from .outdir import check_out, install
from .progress import track

MANIFEST_VERSION = 1
CHECKSUMS_ENTRY = {"file": CHECKSUMS, "algorithm": "crc32c",
                   "layout": "(count, 2) uint32: crc32c of lr.tobytes(), of hr.tobytes() (uint8 HWC, C order)"}


def sr_params(patch: int, scale: int, count: int, seed: int, source, flip: bool) -> dict:
    return {"kind": "sr", "patch": int(patch), "scale": int(scale), "count": int(count), "seed": int(seed),
            "source": "builtin" if source is None else str(Path(source).resolve()), "flip": bool(flip)}


def _check_args(patch: int, scale: int, count: int) -> None:
    if scale < 1:
        raise DataPrepError(f"--scale must be >= 1, got {scale}")
    if patch < 2 or patch % scale:
        raise DataPrepError(f"--patch must be a multiple of --scale ({scale}) and >= 2, got {patch}")
    if count < 1:
        raise DataPrepError(f"--count must be >= 1, got {count}")


def source_paths(source) -> list[tuple[str, Path]]:
    if source is None:
        paths = builtin_photo_paths()
        if not paths:
            raise DataPrepError("no bundled photos found (scikit-image / scikit-learn / matplotlib); pass --source DIR")
        return paths
    src = Path(source)
    files = find_images(src)
    if not files:
        raise DataPrepError(f"source folder {src} holds no images ({', '.join(sorted({'.png', '.jpg', '.jpeg'}))}...)")
    return [(p.relative_to(src).as_posix(), p) for p in files]


def make_pair(photo: np.ndarray, y: int, x: int, patch: int, scale: int, flip: bool) -> tuple[np.ndarray, np.ndarray]:
    hr = photo[y:y + patch, x:x + patch]
    if flip:
        hr = hr[:, ::-1]
    hr = np.ascontiguousarray(hr)
    small = patch // scale
    lr = np.asarray(Image.fromarray(hr, "RGB").resize((small, small), Image.Resampling.BICUBIC))
    return lr, hr


def build_sr(out, patch: int = 64, scale: int = 2, count: int = 4096, *, source=None, seed: int = 0,
             flip: bool = False, skip_bad: bool = False, force: bool = False,
             log: Callable[[str], None] = print, built_by: str = "data_prep sr") -> Path:
    """Build an SR set at ``out``, atomically: everything is written into
    ``out.tmp-<pid>-XXXXXX`` (manifest last) and then put at ``out``. ``out`` must be
    missing, empty or an SR set (replaced); any other folder is refused unless
    ``force`` (then the set is added beside its files; see :mod:`data_prep.outdir`)."""
    _check_args(patch, scale, count)
    t0 = time.perf_counter()
    out = Path(out)
    mode = check_out(out, "sr", force)
    if out.parent.is_dir():
        for p in sweep_orphans(out.parent):
            log(f"removed {p.name}, left by a killed run")
    photos, report = load_photos(source_paths(source), min_side=patch, skip_bad=skip_bad, log=log)
    if not photos:
        raise DataPrepError(f"no usable source images (all unreadable or smaller than {patch}x{patch})")

    rng = np.random.default_rng(seed)
    which = rng.integers(0, len(photos), size=count)
    fy = rng.random(count)
    fx = rng.random(count)
    flips = rng.random(count) < 0.5 if flip else np.zeros(count, bool)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_sibling(out)
    digest = hashlib.sha256()
    used = np.zeros(len(photos), np.int64)
    crc = np.zeros((count, 2), np.uint32)
    # every photo resident: samples in index order, hashed as they go; otherwise photo by
    # photo (each decoded once, then released) and the content hash read back in index order
    resident = all(ph.resident for ph in photos)
    order = np.arange(count) if resident else np.argsort(which, kind="stable")
    try:
        (tmp / "hr").mkdir(parents=True)
        (tmp / "lr").mkdir()
        current = None
        for i in track(order.tolist(), count, f"build {out.name}", unit="pair"):
            ph = photos[which[i]]
            if not resident and current is not ph:
                if current is not None:
                    current.release()
                current = ph
            h, w = ph.shape[:2]
            y = int(fy[i] * (h - patch + 1))
            x = int(fx[i] * (w - patch + 1))
            lr, hr = make_pair(ph.rgb, y, x, patch, scale, bool(flips[i]))
            if resident:
                digest.update(lr.tobytes())
                digest.update(hr.tobytes())
            crc[i, 0] = checksum_rows(lr[None])[0]
            crc[i, 1] = checksum_rows(hr[None])[0]
            name = png_fmt.sample_name(i)
            (tmp / "hr" / name).write_bytes(png_fmt.encode_png(hr))
            (tmp / "lr" / name).write_bytes(png_fmt.encode_png(lr))
            used[which[i]] += 1
        if current is not None:
            current.release()
        if not resident:
            for i in range(count):
                name = png_fmt.sample_name(i)
                digest.update(png_fmt.read_png_rgb(tmp / "lr" / name).tobytes())
                digest.update(png_fmt.read_png_rgb(tmp / "hr" / name).tobytes())
        small = patch // scale
        np.save(tmp / CHECKSUMS, crc, allow_pickle=False)
        manifest = {
            **sr_params(patch, scale, count, seed, source, flip),
            "version": MANIFEST_VERSION,
            "built_by": built_by,
            "hr_shape": [patch, patch, 3],
            "lr_shape": [small, small, 3],
            "dtype": "uint8",
            "layout": "HWC",
            "resample": "PIL.Image.Resampling.BICUBIC",
            "png_compress_level": png_fmt.PNG_COMPRESS_LEVEL,
            "content_sha256": digest.hexdigest(),
            "content_hash_recipe": "sha256 over lr.tobytes() then hr.tobytes() (uint8 HWC, C order) per sample, index order",
            "sources": {p.name: int(n) for p, n in zip(photos, used)},
            "skipped": report.as_dict(),
            "png_bytes": png_fmt.bytes_on_disk(tmp),
            "build_seconds": round(time.perf_counter() - t0, 3),
            "formats": {},
            "checksums": CHECKSUMS_ENTRY,
        }
        write_json_atomic(tmp / MANIFEST, manifest)
        install(tmp, out, "sr", mode)
    except BaseException:
        remove(tmp)
        raise
    log(f"wrote {count} SR pairs ({patch}px HR, x{scale}) from {len(photos)} photo(s) to {out} "
        f"in {time.perf_counter() - t0:.1f} s")
    return out
