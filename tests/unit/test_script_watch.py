"""doctor.script_watch: a watched run's end removes the torch_* files in /dev/shm its DataLoader workers left
(issue 47's attack: `--script` with workers out of a small /dev/shm left five `torch_<pid>_*` files), and the one
line of a script that ran its workers out of shared memory names the fix."""

from __future__ import annotations

import os
import subprocess

import pytest
from leftovers import nothing_left

from feedlab.doctor import script_watch as W


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm here")
def test_the_end_of_a_watched_run_removes_torch_files_of_gone_processes_only(tmp_path, monkeypatch):
    monkeypatch.setattr(W, "_shm_before", set(os.listdir("/dev/shm")))
    dead, mine = f"torch_{_dead_pid()}_h1_0", f"torch_{os.getpid()}_h1_1"
    with nothing_left(tmp_path / "tmp", 30, "the torch_* sweep"):
        try:
            for n in (dead, mine):
                with open(f"/dev/shm/{n}", "wb") as fh:
                    fh.write(b"x")
            gone = W._sweep_torch_shm()
            assert dead in gone and not os.path.exists(f"/dev/shm/{dead}")
            assert mine not in gone and os.path.exists(f"/dev/shm/{mine}")   # a live process's file is its own
        finally:
            for n in (dead, mine):
                if os.path.exists(f"/dev/shm/{n}"):
                    os.unlink(f"/dev/shm/{n}")


def test_a_script_whose_workers_ran_out_of_shared_memory_is_told_the_fix():
    exc = RuntimeError("unable to allocate shared memory(shm) for file </torch_1_2_0>: No space left on device (28)")
    assert "set_sharing_strategy('file_system')" in W.shm_hint(exc)
    assert W.shm_hint(RuntimeError("CUDA out of memory")) == ""


_KILLED = """
import os, sys
from feedlab import files
print(files.mp_temp_dir(), flush=True)
os.kill(os.getpid(), 9)   # what a SIGKILL to the watching process leaves: nothing of ours runs
"""
_NEXT = """
from feedlab import files
files.MP_ORPHAN_MIN_AGE_S = 0
d = files.mp_temp_dir()
print(d, flush=True)
files.remove(d)
"""


def test_a_sigkilled_runs_multiprocessing_folder_is_swept_by_the_next_run(tmp_path):
    """Issue 47's attack (S08): SIGKILL to `doctor --script` left `$TMPDIR/pymp-*/` (multiprocessing's folder, made
    before the fork) for ever; made as a registered temporary, the next watched run sweeps it."""
    import shutil
    import sys
    import tempfile
    from pathlib import Path

    from leftovers import session_processes

    repo = Path(__file__).resolve().parents[2]
    # short: under a $TMPDIR too long for multiprocessing's sockets (pytest's tmp_path can be) the folder goes to /tmp
    tmp = Path(tempfile.mkdtemp(prefix="sw-", dir="/tmp"))
    env = dict(os.environ, PYTHONPATH=f"{repo / 'lib'}{os.pathsep}{repo}", TMPDIR=str(tmp),
               XDG_STATE_HOME=str(tmp_path / "state"))
    runs = []
    try:
        for code in (_KILLED, _NEXT):
            p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env,
                                 start_new_session=True)
            out, _ = p.communicate(timeout=60)   # the test's own deadline
            assert not session_processes(p.pid)
            runs.append((p.returncode, Path(out.strip())))
        left_in_tmp = os.listdir(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)   # the folder this test made
    (rc1, left), (rc2, mine) = runs
    assert rc1 == -9 and left.parent == tmp and left.name.startswith("pymp-feedlab.tmp-"), runs
    assert rc2 == 0 and mine != left
    assert left_in_tmp == []   # the killed run's folder swept, the next run's own removed
