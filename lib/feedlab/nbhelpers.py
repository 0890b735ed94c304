"""Helpers the notebooks share instead of copying cells.

:func:`ensure_sr_data` is the data check every SR notebook runs after resolving its
parameters: the embedded set is built (and the formats the notebook reads packed)
when missing; a set the user named is checked, never modified, and what is missing
is said in one line with the command that fixes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable


class DataError(FileNotFoundError):
    """A user's data set lacks what a notebook needs (the message says what to run)."""


def _wanted(formats) -> list[str]:
    from feedlab.formats import PACKABLE

    if formats in (None, ()):
        return []
    if isinstance(formats, str):
        return list(PACKABLE) if formats == "all" else [f for f in formats.split(",") if f]
    return [f for f in formats if f != "png"]


def check_sr_data(root, formats: str | Iterable[str] = ()) -> Path:
    """``root`` must be an SR set built by data_prep with ``formats`` packed (png is its source)."""
    from feedlab.formats import read_manifest

    root = Path(root)
    if not (root / "hr").is_dir() or not (root / "lr").is_dir():
        raise DataError(f"{root}: not an SR set (no hr/ and lr/); build one with "
                        f"`python -m data_prep sr --out {root}`")
    have = set(read_manifest(root).get("formats", {}))
    missing = sorted(set(_wanted(formats)) - have)
    if missing:
        raise DataError(f"{root} lacks {', '.join(missing)}: pack it with "
                        f"`python -m data_prep pack {root} --to {','.join(missing)}`")
    return root


def ensure_sr_data(P, formats: str | Iterable[str] = (), log=None) -> Path:
    """The SR set of a notebook's resolved parameters ``P`` with ``formats`` packed:
    checked when the user named it (``P.user_data``), else built as the profile says."""
    if P.user_data:
        return check_sr_data(P.data_root, formats)
    import data_prep

    fmts = _wanted(formats)
    return data_prep.ensure_sr(P.data_root, patch=P.patch, scale=P.scale, count=P.dataset_count,
                               formats=fmts, log=log)


def ensure_cls_data(root, given: bool, log=None) -> Path:
    """The ImageFolder set: checked when the user named it, else built."""
    root = Path(root)
    if given:
        if not any(root.glob("*/*.jpg")):
            raise DataError(f"{root} has no <class>/*.jpg: build it with `python -m data_prep classify --out {root}`")
        return root
    import data_prep

    return data_prep.ensure_cls(root, log=log)
