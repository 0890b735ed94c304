"""The process plumbing of a peer run in its own venv (:mod:`feedlab.peers.remote`): whether this
interpreter is such a child, its sign of progress (:func:`beat`), a command in a process group of its
own killed whole at a limit or a stall (:func:`run_group`), and whether names import in another venv."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from feedlab.errors import progress
from feedlab.procgroup import Stalled, run_group  # noqa: F401  (re-exported: peers.remote)

IN_VENV = "FEEDLAB_PEER_IN_VENV"
BEAT = "FEEDLAB_PEER_BEAT"   # the file the child touches as it makes progress
_last_beat = [0.0]


def in_venv() -> bool:
    return os.environ.get(IN_VENV) == "1"


def beat() -> None:
    """A sign of progress, at most once a second: to the parent of a venv run (a file's mtime), and to
    the deadline of a run in this interpreter (:func:`feedlab.errors.progress`: ``--timeout``)."""
    now = time.monotonic()
    if now - _last_beat[0] > 1.0:
        _last_beat[0] = now
        progress()
        path = os.environ.get(BEAT)
        if path:
            Path(path).touch()


def check_imports(python, names, timeout: float = 300, run_=run_group) -> str:
    """"" when ``names`` import in the venv of ``python``, else one line naming the failing import."""
    code = "; ".join(f"import {n}" for n in names)
    try:
        r = run_([str(python), "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"import in {python} ran past {timeout:.0f} s"
    except OSError as exc:
        return f"{python}: {exc}"
    if r.returncode == 0:
        return ""
    lines = [ln.strip() for ln in (r.stderr or "").splitlines() if ln.strip()]
    return f"in its venv ({python}): {lines[-1] if lines else f'exit {r.returncode}'}"
