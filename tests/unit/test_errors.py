"""feedlab.errors.leave_stuck ends a command line held by a thread stuck in what timed out, and never a
library caller (a kernel, pytest, a user's script that called a ``main``): it returns there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

STUCK = """
import sys, threading, time
from feedlab import errors
sys.argv[0] = {argv0!r}
threading.Thread(target=time.sleep, args=(30,), daemon=True).start()   # a read stuck in what timed out
since = errors.deadlines_fired()
try:
    with errors.deadline(0.2, "a read"):
        time.sleep(5)
except errors.DeadlineError:
    pass
errors.leave_stuck(2, since=since)
print("the caller goes on", flush=True)
"""


@pytest.mark.parametrize("argv0, ended", [("-c", False), ("my_training.py", False), ("feedlab-bench", True)])
def test_leave_stuck_ends_only_a_command_line(tmp_path, argv0, ended):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "lib"), TMPDIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", STUCK.format(argv0=argv0)], capture_output=True, text=True,
                       env=env, timeout=60)
    if ended:                                  # the positive control: a command line ends at once
        assert r.returncode == 2 and "goes on" not in r.stdout, (r.returncode, r.stdout, r.stderr[-1500:])
    else:
        assert r.returncode == 0 and "the caller goes on" in r.stdout, (r.returncode, r.stderr[-1500:])
    assert list(tmp_path.iterdir()) == []


def test_a_command_line_is_told_from_a_library_caller(monkeypatch):
    from feedlab import errors

    assert not errors.command_line()           # pytest: a library caller
    monkeypatch.setattr(sys, "argv", ["/usr/bin/feedlab-doctor", "--data", "x"])
    assert errors.command_line()
