"""The process plumbing of a peer run in its own venv (:mod:`feedlab.peers.remote`): whether this
interpreter is such a child, its sign of progress (:func:`beat`), a command in a process group of its
own killed whole at a limit or a stall (:func:`run_group`), and whether names import in another venv."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

IN_VENV = "FEEDLAB_PEER_IN_VENV"
BEAT = "FEEDLAB_PEER_BEAT"   # the file the child touches as it makes progress
_last_beat = [0.0]


def in_venv() -> bool:
    return os.environ.get(IN_VENV) == "1"


def beat() -> None:
    """The child's sign of progress to its parent (a file's mtime, at most once a second); a no-op
    outside a venv run."""
    path = os.environ.get(BEAT)
    if path and time.monotonic() - _last_beat[0] > 1.0:
        _last_beat[0] = time.monotonic()
        Path(path).touch()


class Stalled(subprocess.TimeoutExpired):
    """The child made no progress (no :func:`beat`) for ``timeout`` seconds."""


def run_group(cmd, input: str = "", timeout: float | None = None, env=None, stall_s: float | None = None,
              beat_file: Path | None = None, **_kw) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, input=..., capture_output=True, text=True, timeout=...)`` in a process group
    of its own: at the limit (``TimeoutExpired``), after ``stall_s`` s without a touch of ``beat_file``
    (:class:`Stalled`) or when interrupted, the whole group is killed, the child's children too."""
    with tempfile.TemporaryFile() as fin, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        fin.write(input.encode())
        fin.seek(0)
        proc = subprocess.Popen(cmd, stdin=fin, stdout=out, stderr=err, env=env, start_new_session=True)
        t0 = time.time()
        try:
            while True:
                try:
                    code = proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.time()
                if timeout is not None and now - t0 > timeout:
                    raise subprocess.TimeoutExpired(cmd, timeout)
                try:
                    last = max(t0, beat_file.stat().st_mtime) if beat_file is not None else now
                except OSError:
                    last = t0
                if stall_s and now - last > stall_s:
                    raise Stalled(cmd, stall_s)
        except BaseException:
            if proc.returncode is None:  # the leader is not reaped yet: the group is still its own
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        finally:   # whatever the peer left running in its group (a daemon, a grandchild) ends with it;
            try:   # the group's id is not reused while a member lives, so this reaches only the peer's
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(cmd, code, out.read().decode("utf-8", "replace"),
                                           err.read().decode("utf-8", "replace"))


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
