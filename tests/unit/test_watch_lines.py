"""feedlab.doctor.watch_lines: the one lines of a watched run."""

from __future__ import annotations

import signal

import pytest

from feedlab.doctor.watch_lines import killed_line


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM, signal.SIGPIPE])
def test_a_sent_signal_that_is_not_a_crash_is_said_to_come_from_outside(sig):
    """attack53 K09: a script that SIGUSR1ed itself read 'the process doing the run crashed with SIGUSR1'."""
    line = killed_line(sig, 0)
    assert "crashed" not in line
    assert f"ended by {signal.Signals(sig).name} from outside the command (the script itself, or a kill" in line


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGFPE, signal.SIGILL])
def test_a_fault_signal_is_a_crash(sig):
    assert f"crashed with {signal.Signals(sig).name}; stopping the 2 process(es) it left" in killed_line(sig, 2)


def test_a_kill_9_names_the_out_of_memory_killer():
    assert "killed by SIGKILL from outside (the out-of-memory killer, or a kill -9?)" in killed_line(signal.SIGKILL, 0)
