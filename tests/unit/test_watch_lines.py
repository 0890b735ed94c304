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


def test_a_dataloader_worker_killed_from_outside_is_named_with_its_signal():
    """attack53 K05: torch's 'DataLoader worker (pid 2658) is killed by signal: Terminated.' came through as the
    script's RuntimeError. The line names the worker, the signal by its name, the batches, and that the command sent
    none; a fault signal is a crash; 'exited unexpectedly' is said without a signal; anything else is not ours."""
    from pathlib import Path

    from feedlab.doctor.watch_lines import worker_died_line

    term = RuntimeError("DataLoader worker (pid 2658) is killed by signal: Terminated. ")
    line = worker_died_line(term, Path("wkr.py"), " at wkr.py:9", 40)
    assert line == ("--script wkr.py: its DataLoader worker (pid 2658) was killed by SIGTERM at wkr.py:9 after 40 "
                    "batches, from outside the command (a kill by its pid, or the out-of-memory killer?): the command "
                    "sent none")
    segv = RuntimeError("DataLoader worker (pid 7) is killed by signal: Segmentation fault. ")
    assert "worker (pid 7) crashed with SIGSEGV" in worker_died_line(segv, Path("s.py"), "", 3)
    gone = RuntimeError("DataLoader worker (pid(s) 3438, 3439) exited unexpectedly")
    # attack57 W3: a worker's native abort() reads "exited unexpectedly" too: the line never says only "from outside"
    assert "a native abort in the worker" in worker_died_line(gone, Path("s.py"), "", 5)
    assert "its DataLoader worker(s) (pid(s) 3438, 3439) exited unexpectedly after 5 batches" in \
        worker_died_line(gone, Path("s.py"), "", 5)
    assert worker_died_line(RuntimeError("CUDA error"), Path("s.py"), "", 5) is None
    assert worker_died_line(ValueError("DataLoader worker (pid 1) exited unexpectedly"), Path("s.py"), "", 5) is None
