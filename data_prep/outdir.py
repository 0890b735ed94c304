"""The ``--out`` folder: what data_prep may replace, and how a finished build is put there.

A folder is ours to replace when it is empty, missing, or holds a data_prep set of
the same kind (its ``manifest.json`` says so). Anything else is refused before any
work starts, unless ``force``; even then only the entries a set consists of are
written, every other file stays, and a name we would write that already holds
something that is not ours is refused: data_prep never removes what it did not write.
"""

from __future__ import annotations

import os
from pathlib import Path

from feedlab.errors import FormatError
from feedlab.files import release, remove, replace_path, tmp_sibling
from feedlab.formats._common import MANIFEST, read_manifest

from .errors import DataPrepError


def format_entries(fmt: str) -> set[str]:
    """The top-level names under a set's root that format ``fmt`` writes (``npy``, ``sr.h5``)."""
    from feedlab.formats import FORMATS

    return {p.strip().strip("/").split("/")[0] for p in FORMATS[fmt].path.split("+") if p.strip()}


def _set_entries(kind: str, man: dict) -> set[str]:
    """Names a data_prep set of ``kind`` with manifest ``man`` wrote under its root: only what
    the manifest records (its formats, its classes), each a plain name (``read_manifest``
    checked them), never a format folder it does not record."""
    names = {MANIFEST}
    if kind == "sr":
        from feedlab.formats import FORMATS
        from feedlab.formats._common import CHECKSUMS

        names |= {"hr", "lr", CHECKSUMS}
        for fmt in man.get("formats") or {}:
            if fmt in FORMATS and FORMATS[fmt].kind == "sr":
                names |= format_entries(fmt)
    else:
        names |= set(man.get("classes") or [])
    return names


def _manifest_kind(out: Path) -> str | None:
    """The kind of set ``out`` holds (None: no manifest). A manifest that is damaged or names
    anything outside the set is refused here, before any work: nothing is touched."""
    try:
        return read_manifest(out).get("kind")
    except FormatError as exc:
        raise DataPrepError(f"--out {out}: {exc}") from None


def check_out(out: str | os.PathLike, kind: str, force: bool = False) -> str:
    """Decide, before building, what writing a ``kind`` set to ``out`` would do:
    ``"new"`` (missing or empty), ``"replace"`` (a set of this kind), ``"merge"``
    (another folder, with ``force``). Raises ``DataPrepError`` otherwise."""
    out = Path(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise DataPrepError(f"--out {out} exists and is not a folder: choose another --out")
    if not out.exists() or not any(out.iterdir()):
        return "new"
    found = _manifest_kind(out)
    if found == kind:
        return "replace"
    what = f"a data_prep {found!r} set" if found else "not a data_prep set (no manifest.json)"
    if not force:
        raise DataPrepError(f"--out {out} is {what}; refusing to replace a folder data_prep did not "
                            f"write: give a new or empty folder, or --force to add the {kind} set "
                            "beside the files there (nothing of theirs is removed)")
    return "merge"


def install(tmp: Path, out: Path, kind: str, mode: str) -> None:
    """Put the finished build ``tmp`` at ``out`` according to :func:`check_out`'s ``mode``."""
    if mode == "new":
        if out.is_dir():
            out.rmdir()  # empty: checked just before
        os.replace(tmp, out)
        release(tmp)
        return
    if mode == "replace":
        old_names = _set_entries(kind, read_manifest(out))
        foreign = [p.name for p in out.iterdir() if p.name not in old_names]
        if not foreign:
            replace_path(tmp, out)  # all ours: one atomic swap
            return
        ours = [out / n for n in old_names if (out / n).exists() or (out / n).is_symlink()]
    else:  # merge into a folder that is not a set of this kind
        clash = [p.name for p in tmp.iterdir() if (out / p.name).exists() or (out / p.name).is_symlink()]
        if clash:
            raise DataPrepError(f"--out {out}: {', '.join(sorted(clash))} already exist(s) there and are not "
                                "data_prep's: move them away or choose another --out")
        ours = []
    # entry by entry, manifest last: an interrupted install leaves no manifest, so the
    # set reads as incomplete (and is rebuilt), never as complete with old parts
    man = out / MANIFEST
    if man in ours:
        remove(man)
    for p in ours:
        if p != man:
            aside = tmp_sibling(p, "old")
            os.replace(p, aside)
            remove(aside)
    entries = sorted(tmp.iterdir(), key=lambda p: p.name == MANIFEST)
    for p in entries:
        os.replace(p, out / p.name)
    tmp.rmdir()
    release(tmp)
