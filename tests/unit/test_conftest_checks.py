"""tests/conftest.py's end-of-run /dev/shm check: a file another process on the machine holds (another test run's)
is not one this run left behind; a file nobody holds, or one this run's own process tree holds, is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import conftest
import pytest

SHM = Path("/dev/shm")


@pytest.mark.skipif(not SHM.is_dir(), reason="no /dev/shm here")
def test_a_shm_file_held_by_another_process_is_not_left_behind_one_held_by_this_run_is():
    held, loose = SHM / f"feedlab-conftest-held-{os.getpid()}", SHM / f"feedlab-conftest-loose-{os.getpid()}"
    holder = subprocess.Popen([sys.executable, "-c", f"import time; f = open({str(held)!r}, 'w'); "
                               "print('open', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        loose.write_bytes(b"x")
        as_another_runs = conftest.shm_held_by_others(ours={os.getpid()})
        assert held.name in as_another_runs and loose.name not in as_another_runs
        assert held.name not in conftest.shm_held_by_others()   # by default this run's children are its own
    finally:
        holder.kill()
        holder.wait(10)
        for f in (held, loose):
            f.unlink(missing_ok=True)


def test_what_a_test_leaves_changed_is_put_back_and_named():
    """The CI failure of the last submission: a runner left SIGTERM ignored, and a later test's child inherited it.
    conftest puts back a signal's handler, the signal mask, a FEEDLAB_* variable and the working folder."""
    import signal

    before = conftest.process_state()
    old_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGHUP])
    os.environ["FEEDLAB_CONFTEST_PROBE"] = "left"
    here = os.getcwd()
    os.chdir("/")
    try:
        said = conftest.put_back(before)
        put = (signal.getsignal(signal.SIGTERM), signal.pthread_sigmask(signal.SIG_BLOCK, []),
               os.environ.get("FEEDLAB_CONFTEST_PROBE"), os.getcwd())
    finally:   # this test's own changes never outlive it, whatever put_back did
        signal.signal(signal.SIGTERM, old_term)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGHUP])
        os.environ.pop("FEEDLAB_CONFTEST_PROBE", None)
        os.chdir(here)
    assert said == ["SIGTERM's handler", "the signal mask", "$FEEDLAB_CONFTEST_PROBE", "the working folder"], said
    assert put == (old_term, before["mask"], None, here)
    assert conftest.put_back(before) == []
