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
