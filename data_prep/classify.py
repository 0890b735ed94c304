"""A Caltech / Dogs-vs-Cats style ImageFolder of JPEGs with varying sizes.

``out/<class>/NNNNNN.jpg``. Each image is a crop of a source photo (random
position, random scale, the aspect of the target size), resized with BICUBIC to
a random width and height in ``[min_size, max_size]``, randomly mirrored, and
saved as a baseline JPEG at ``quality``. The class is the source photo (bundled
photos, or ``--source`` images) or the source sub-folder (``--source`` with
class folders). Deterministic for a seed.
"""

from __future__ import annotations

import hashlib
import io
import time
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

from feedlab.files import remove, sweep_orphans, tmp_sibling
from feedlab.formats._common import MANIFEST, write_json_atomic

from .errors import DataPrepError
from .images import builtin_photo_paths, find_images, load_photos
from .outdir import check_out, install
from .progress import track

MIN_SOURCE_SIDE = 32


def cls_params(classes, per_class: int, min_size: int, max_size: int, seed: int, source, quality: int) -> dict:
    return {"kind": "cls", "classes_requested": classes, "per_class": int(per_class), "min_size": int(min_size),
            "max_size": int(max_size), "seed": int(seed), "quality": int(quality),
            "source": "builtin" if source is None else str(Path(source).resolve())}


def class_sources(source, classes: int | None) -> dict[str, list[tuple[str, Path]]]:
    """``{class name: [(name, path), ...]}`` in sorted class order, first ``classes`` kept."""
    if source is None:
        photos = builtin_photo_paths()
        table = {name: [(name, path)] for name, path in photos}
        names = list(table)  # preference order of BUILTIN_PHOTOS
    else:
        src = Path(source)
        files = find_images(src)
        if not files:
            raise DataPrepError(f"source folder {src} holds no images")
        subdirs = sorted({p.relative_to(src).parts[0] for p in files if len(p.relative_to(src).parts) > 1})
        table = {}
        if subdirs:  # class folders (loose top-level images are ignored)
            for d in subdirs:
                table[d] = [(p.relative_to(src).as_posix(), p) for p in files
                            if p.relative_to(src).parts[0] == d and len(p.relative_to(src).parts) > 1]
        else:
            for p in files:
                table[p.stem] = [(p.name, p)]
        names = sorted(table)
    if classes is not None:
        if classes < 1:
            raise DataPrepError(f"--classes must be >= 1, got {classes}")
        if classes > len(names):
            raise DataPrepError(f"--classes {classes} asked for, but the source offers {len(names)}: {', '.join(names)}")
        names = names[:classes]
    return {n: table[n] for n in names}


def render(photo: np.ndarray, rng: np.random.Generator, min_size: int, max_size: int, quality: int) -> bytes:
    w = int(rng.integers(min_size, max_size + 1))
    h = int(rng.integers(min_size, max_size + 1))
    H, W = photo.shape[:2]
    aspect = w / h
    # largest crop of that aspect that fits, then a random fraction of it
    cw, ch = (W, W / aspect) if W / aspect <= H else (H * aspect, H)
    s = float(rng.uniform(0.4, 1.0))
    cw, ch = max(1, int(cw * s)), max(1, int(ch * s))
    x = int(rng.integers(0, W - cw + 1))
    y = int(rng.integers(0, H - ch + 1))
    mirror = bool(rng.random() < 0.5)
    im = Image.fromarray(np.ascontiguousarray(photo[y:y + ch, x:x + cw]), "RGB").resize((w, h), Image.Resampling.BICUBIC)
    if mirror:
        im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=int(quality), optimize=False, progressive=False)
    return buf.getvalue()


def build_cls(out, classes: int | None = 4, per_class: int = 128, *, min_size: int = 160, max_size: int = 512,
              seed: int = 0, source=None, quality: int = 90, skip_bad: bool = False, force: bool = False,
              log: Callable[[str], None] = print, built_by: str = "data_prep classify") -> Path:
    """Build the ImageFolder at ``out`` atomically (``out.tmp-<pid>-XXXXXX``, then put in
    place). ``out`` must be missing, empty or a classification set, unless ``force``."""
    if per_class < 1:
        raise DataPrepError(f"--per-class must be >= 1, got {per_class}")
    if not 8 <= min_size <= max_size:
        raise DataPrepError(f"need 8 <= --min-size <= --max-size, got {min_size}, {max_size}")
    if not 1 <= quality <= 100:
        raise DataPrepError(f"--quality must be in 1..100, got {quality}")
    t0 = time.perf_counter()
    out = Path(out)
    mode = check_out(out, "cls", force)
    if out.parent.is_dir():
        for p in sweep_orphans(out.parent):
            log(f"removed {p.name}, left by a killed run")
    table = class_sources(source, classes)
    loaded: dict[str, list] = {}
    skipped = {"unreadable": [], "too_small": []}
    for cname, paths in table.items():
        photos, report = load_photos(paths, min_side=MIN_SOURCE_SIDE, skip_bad=skip_bad, log=log)
        skipped["unreadable"] += report.unreadable
        skipped["too_small"] += report.too_small
        if photos:
            loaded[cname] = photos
        else:
            log(f"class {cname!r} has no usable image: left out")
    if not loaded:
        raise DataPrepError("no usable source images for any class")

    rng = np.random.default_rng(seed)
    tmp = tmp_sibling(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    total_bytes = 0
    try:
        tmp.mkdir()
        for cname, photos in loaded.items():
            lazy = [ph for ph in photos if not ph.resident]  # decoded for this class only
            (tmp / cname).mkdir(parents=True)
            for j in track(range(per_class), per_class, f"build {out.name}/{cname}", unit="image"):
                ph = photos[int(rng.integers(0, len(photos)))]
                data = render(ph.rgb, rng, min_size, max_size, quality)
                digest.update(data)
                total_bytes += len(data)
                (tmp / cname / f"{j:06d}.jpg").write_bytes(data)
            for ph in lazy:
                ph.release()
        manifest = {
            **cls_params(classes, per_class, min_size, max_size, seed, source, quality),
            "version": 1,
            "built_by": built_by,
            "classes": list(loaded),
            "count": per_class * len(loaded),
            "content_sha256": digest.hexdigest(),
            "content_hash_recipe": "sha256 over the JPEG file bytes, classes in order, files in order",
            "jpeg_bytes": total_bytes,
            "skipped": skipped,
            "build_seconds": round(time.perf_counter() - t0, 3),
        }
        write_json_atomic(tmp / MANIFEST, manifest)
        install(tmp, out, "cls", mode)
    except BaseException:
        remove(tmp)
        raise
    log(f"wrote {manifest['count']} JPEGs in {len(loaded)} classes to {out} in {time.perf_counter() - t0:.1f} s")
    return out
