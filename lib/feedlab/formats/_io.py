"""The formats' writes: a store written under a temporary name and renamed when complete
(:func:`atomic_output`), a manifest written by the one atomic write (:func:`write_json_atomic`).

The file helpers behind them (temporaries and their registry, the orphan sweep, reads of regular files
only) live on the ground floor, in :mod:`feedlab.files`; they are re-exported here for the formats'
writers (``formats._common``), and under their old private names for older callers.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from feedlab.files import (  # noqa: F401  (re-exported: the formats' writers read them here)
    MAX_FILE_BYTES,
    ORPHAN_MIN_AGE_S,
    READ_CHUNK,
    check_regular_tree,
    current_umask,
    entry,
    kind_of,
    max_file_bytes,
    open_regular,
    read_regular,
    release,
    remove,
    replace_path,
    sweep_orphans,
    tmp_sibling,
    tree_bytes,
)
from feedlab.results import atomic_write

_remove, _kind, _entry = remove, kind_of, entry   # the old private names


def write_json_atomic(path: str | os.PathLike, payload: dict) -> None:
    """Write JSON to a temporary file beside ``path``, then rename it over. The file
    gets the usual permissions (0666 less the umask), so others can read a shared set."""
    tmp = tmp_sibling(Path(path))
    try:
        atomic_write(path, json.dumps(payload, indent=2, sort_keys=True) + "\n", tmp=tmp)
    finally:
        release(tmp)


@contextmanager
def atomic_output(final: str | os.PathLike, is_dir: bool) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it onto ``final`` on success.

    On any exception (including KeyboardInterrupt) the temporary is removed, so
    an interrupted writer leaves either the old output or nothing.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    sweep_orphans(final.parent)
    tmp = tmp_sibling(final)
    if is_dir:
        tmp.mkdir()
    try:
        yield tmp
        replace_path(tmp, final)
    except BaseException:
        remove(tmp)
        raise
