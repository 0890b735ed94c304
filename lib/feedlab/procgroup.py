"""A command in a process group of its own, killed whole at its limit, at a stall or when interrupted, with
its output read from files (no pipe a leftover grandchild could hold open) and decoded leniently. The one home
of this: the peers' runs in their own venvs (:mod:`feedlab.peers._process`) and every install
(:mod:`feedlab.installer`, which runs before feedlab is installed: the standard library only here)."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path


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
