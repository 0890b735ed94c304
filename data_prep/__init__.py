"""Build the data sets feedlab measures, and pack them into storage formats.

Command line: ``python -m data_prep sr|classify|pack|verify`` (``--help`` on each).
From Python (notebooks, the runner)::

    root = ensure_sr(root, patch=64, scale=2, count=4096, formats=("lmdb", "hdf5"))
    cls_root = ensure_cls(root, classes=4, per_class=128)

``ensure_*`` build only what is missing: a set whose manifest records other
parameters is rebuilt; a requested format absent from the manifest (or from
disk) is packed.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable

from feedlab.formats._common import read_manifest

from .classify import build_cls, cls_params
from .errors import DataPrepError, VerifyError
from .pack import add_checksums, pack, parse_formats, verify
from .sr import build_sr, sr_params

__all__ = ["ensure_sr", "ensure_cls", "build_sr", "build_cls", "pack", "verify", "parse_formats", "add_checksums",
           "DataPrepError", "VerifyError"]


def _default_root(kind: str, patch: int = 64) -> Path:
    from feedlab import paths

    return paths.DATA_DIR / (f"sr{patch}" if kind == "sr" else "cls")


@contextmanager
def _build_lock(root: Path):
    """An exclusive lock beside ``root`` so concurrent ensure_* calls build once."""
    root.parent.mkdir(parents=True, exist_ok=True)
    lock = root.with_name(root.name + ".lock")
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _quiet(_msg: str) -> None:
    pass


def _sr_complete(root: Path, man: dict) -> bool:
    n = man.get("count", -1)
    last = f"{n - 1:06d}.png"
    return (root / "hr" / last).is_file() and (root / "lr" / last).is_file()


#: who built a set (manifest ``built_by``): ensure_* rebuild only what they built themselves
EMBEDDED = "ensure"


def _ours_to_rebuild(man: dict) -> bool:
    """A set ensure_* may rebuild: none there, one they built, or (sets from before the
    ``built_by`` field) one of the bundled photos. A set a user built is never rebuilt over."""
    if not man:
        return True
    if "built_by" in man:
        return man["built_by"] == EMBEDDED
    return man.get("source") == "builtin"


def _refuse_users_set(root: Path, man: dict, want: dict) -> None:
    theirs = ", ".join(f"{k} {man.get(k)!r}" for k in ("source", "count", "patch", "classes_requested", "per_class")
                       if k in want and man.get(k) != want[k])
    raise DataPrepError(f"{root} holds a {man.get('kind', '?')} set someone built ({theirs or 'incomplete'}), not the "
                        f"embedded set this run needs: it is not rebuilt over; move it away (mv {root} "
                        f"{root}-mine) and measure it with -p data_root {root}-mine, or delete it to let feedlab "
                        "rebuild the embedded set")


def ensure_sr(root: str | os.PathLike | None = None, patch: int = 64, scale: int = 2, count: int = 4096,
              formats: str | Iterable[str] | None = "all", seed: int = 0, *, source=None, flip: bool = False,
              log: Callable[[str], None] | None = print) -> Path:
    """Make sure ``root`` holds the SR set with these parameters and ``formats`` packed.

    ``root=None`` means ``feedlab.paths.DATA_DIR / f"sr{patch}"``. ``formats``:
    ``"all"``, a comma list, a sequence of names, or ``()`` for the PNGs only.
    Returns ``root`` as a ``Path``.
    """
    root = Path(root) if root is not None else _default_root("sr", patch)
    log = log or _quiet
    wanted = parse_formats(formats if formats else [], default_all=False)
    want = sr_params(patch, scale, count, seed, source, flip)

    def todo() -> tuple[bool, list[str]]:
        man = read_manifest(root)
        rebuild = any(man.get(k) != v for k, v in want.items()) or not _sr_complete(root, man)
        if rebuild:
            if not _ours_to_rebuild(man):
                _refuse_users_set(root, man, want)
            return True, wanted
        from feedlab.formats import FORMATS
        from feedlab.formats._common import CHECKSUMS

        have = man.get("formats", {})
        missing = [f for f in wanted
                   if f not in have or have[f].get("content_sha256") != man.get("content_sha256")
                   or FORMATS[f].bytes_on_disk(root) == 0]
        if not (root / CHECKSUMS).is_file():
            missing = missing or ["checksums"]
        return False, missing

    rebuild, missing = todo()
    if not rebuild and not missing:
        return root  # complete: no lock, nothing written (a set can be shared read-only)
    with _build_lock(root):
        rebuild, missing = todo()  # another process may have built it meanwhile
        if rebuild:
            build_sr(root, patch, scale, count, source=source, seed=seed, flip=flip, log=log, built_by=EMBEDDED)
        if missing:
            pack(root, [f for f in missing if f != "checksums"], log=log)
    return root


def ensure_cls(root: str | os.PathLike | None = None, classes: int | None = 4, per_class: int = 128, *,
               min_size: int = 160, max_size: int = 512, seed: int = 0, source=None, quality: int = 90,
               log: Callable[[str], None] | None = print) -> Path:
    """Make sure ``root`` holds the ImageFolder set with these parameters; returns ``root``."""
    root = Path(root) if root is not None else _default_root("cls")
    log = log or _quiet
    want = cls_params(classes, per_class, min_size, max_size, seed, source, quality)

    def needed() -> bool:
        man = read_manifest(root)
        complete = bool(man.get("classes")) and all(
            (root / c / f"{per_class - 1:06d}.jpg").is_file() for c in man.get("classes", []))
        need = any(man.get(k) != v for k, v in want.items()) or not complete
        if need and not _ours_to_rebuild(man):
            _refuse_users_set(root, man, want)
        return need

    if not needed():
        return root  # complete: no lock taken
    with _build_lock(root):
        if needed():
            build_cls(root, classes, per_class, min_size=min_size, max_size=max_size, seed=seed,
                      source=source, quality=quality, log=log, built_by=EMBEDDED)
    return root
