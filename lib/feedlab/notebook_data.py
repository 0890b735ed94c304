"""The data a notebook measures: the embedded set of its profile, or the user's own.

Every notebook that reads an SR set calls :func:`ensure_data` right after
:func:`feedlab.profiles.resolve`::

    ensure_data(P, ["lmdb"])   # the storage formats this notebook reads besides the PNGs

- ``data_root`` left empty: the embedded set of the profile is built (or completed)
  by ``data_prep.ensure_sr``.
- ``data_root`` given (``python -m feedlab.run -p data_root DIR``): ``DIR`` must be an
  SR set built by ``python -m data_prep sr``; the formats the notebook needs and the
  set lacks are packed into it once, with a progress bar. Nothing of the user's set
  is rebuilt or deleted. Anything else stops with one line saying what to run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable


class DataRootError(ValueError):
    """``data_root`` cannot be measured as given (one line: the folder and what to run)."""


def missing_formats(root: Path, wanted: Iterable[str]) -> list[str]:
    """Formats of ``wanted`` that ``root`` has not packed from its current PNGs."""
    from feedlab.formats import FORMATS, read_manifest

    man = read_manifest(root)
    have = man.get("formats", {})
    return [f for f in wanted
            if f not in have or have[f].get("content_sha256") != man.get("content_sha256")
            or FORMATS[f].bytes_on_disk(root) == 0]


def check_user_set(root: Path) -> dict:
    """The manifest of the user's SR set at ``root``; :class:`DataRootError` otherwise."""
    from data_prep.images import IMAGE_EXTS

    from feedlab.formats import read_manifest

    if not root.exists():
        raise DataRootError(f"data_root={root}: no such folder. Build an SR set there from your photos: "
                            f"python -m data_prep sr --out {root} --source PHOTOS_DIR")
    if not root.is_dir():
        raise DataRootError(f"data_root={root} is a file; give the folder of an SR set built by "
                            f"python -m data_prep sr")
    try:
        man = read_manifest(root)
    except ValueError as exc:  # json.JSONDecodeError
        raise DataRootError(f"data_root={root}: manifest.json is not valid JSON ({exc}); "
                            f"rebuild the set with python -m data_prep sr --out {root} --source PHOTOS_DIR") from None
    if man.get("kind") == "sr":
        n = int(man.get("count", 0))
        last = f"{n - 1:06d}.png"
        if n < 1 or not ((root / "hr" / last).is_file() and (root / "lr" / last).is_file()):
            raise DataRootError(f"data_root={root}: manifest.json lists {n} pairs but hr/{last} or "
                                f"lr/{last} is missing; rebuild it with python -m data_prep sr --out {root}")
        return man
    has_images = any(p.suffix.lower() in IMAGE_EXTS for p in root.rglob("*") if p.is_file())
    if has_images:
        raise DataRootError(f"data_root={root} is a folder of images, not an SR set: make one from it with "
                            f"python -m data_prep sr --out {root.name}-sr --source {root} "
                            f"and pass -p data_root {root.name}-sr")
    raise DataRootError(f"data_root={root} is not an SR set (no manifest.json of kind 'sr'): build one with "
                        f"python -m data_prep sr --out {root} --source PHOTOS_DIR")


def ensure_data(P, formats: str | Iterable[str] = (), *, log=print) -> Path:
    """Make ``P.data_root`` hold the PNG pairs and ``formats``; returns it.

    ``P`` is the namespace from :func:`feedlab.profiles.resolve`. ``formats``: storage
    formats besides ``png`` (``"all"`` for every packable one)."""
    import data_prep

    root = Path(P.data_root)
    if not getattr(P, "user_data", False):
        return data_prep.ensure_sr(root, patch=P.patch, scale=P.scale, count=P.dataset_count,
                                   formats=formats, log=None)
    man = check_user_set(root)
    try:
        wanted = data_prep.parse_formats(formats if formats else [], default_all=False)
    except data_prep.DataPrepError as exc:
        raise DataRootError(f"{P.notebook}: {exc}") from None
    missing = missing_formats(root, wanted)
    if missing:
        log(f"data_root={root}: packing {', '.join(missing)} once (python -m data_prep pack {root} "
            f"--to {','.join(missing)})")
        data_prep.pack(root, missing, log=log)
    log(f"data: your set {root} ({man.get('count')} pairs, HR {man.get('patch')} px, x{man.get('scale')})")
    return root
