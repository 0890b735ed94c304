"""feedlab.run_kernel: the runner's line for a kernel ended from outside the runner (attack53 R10/R11)."""

from __future__ import annotations

import json

from nbclient.exceptions import DeadKernelError
from papermill.exceptions import PapermillExecutionError

from feedlab import run_kernel
from feedlab.run_kernel import kernel_failure


def test_a_sigint_sent_to_the_kernel_alone_is_said_so_not_blamed_on_the_cell():
    exc = PapermillExecutionError(cell_index=5, exec_count=5, source="x", ename="KeyboardInterrupt", evalue="",
                                  traceback=[])
    line = kernel_failure("04_print_overhead.ipynb", exc, None)
    assert line.startswith("04_print_overhead.ipynb: its kernel got SIGINT from outside the runner")
    assert "cell [5]" in line


def test_a_kernel_that_died_names_the_cell_it_was_in_and_what_to_suspect(tmp_path, monkeypatch):
    monkeypatch.setattr(run_kernel, "_KERNEL_EXIT", {})   # its exit status unknown
    cells = [{"cell_type": "code", "source": "import x", "metadata": {"papermill": {"status": "completed",
                                                                                      "duration": 0.1}}},
             {"cell_type": "code", "source": "grid = run_all()\nmore", "metadata": {"papermill": {"status": "running"}}}]
    (tmp_path / "04_print_overhead.executed.ipynb").write_text(json.dumps({"cells": cells}))
    line = kernel_failure("04_print_overhead.ipynb", DeadKernelError("Kernel died"), tmp_path)
    assert "its kernel died in the cell at index 1 (`grid = run_all()`)" in line
    assert "out-of-memory killer, or a kill -9?" in line
    assert "its kernel died without a Python error" in kernel_failure("n.ipynb", DeadKernelError("Kernel died"), None)


def test_any_other_failure_keeps_the_cells_own_line():
    exc = PapermillExecutionError(cell_index=2, exec_count=2, source="x", ename="ValueError", evalue="bad",
                                  traceback=[])
    assert kernel_failure("n.ipynb", exc, None) is None
    assert kernel_failure("n.ipynb", OSError("disk"), None) is None


def test_the_kernels_exit_signal_is_read_into_the_line(monkeypatch):
    """attack53 R11: papermill drops the kernel process with its status. While a notebook runs (run_kernel.watch)
    the status is noted as jupyter_client polls it: a kill -9 is named, and nbclient's stray 'Kernel died while
    waiting for execute reply.' is not logged over the runner's line. Put back after."""
    import asyncio
    import logging
    import signal
    import subprocess

    from jupyter_client.provisioning.local_provisioner import LocalProvisioner

    before = LocalProvisioner.poll
    monkeypatch.setattr(run_kernel, "_KERNEL_EXIT", {})
    unnote = run_kernel._note_kernel_exit()
    proc = subprocess.Popen(["sleep", "30"])
    try:
        prov = LocalProvisioner.__new__(LocalProvisioner)
        prov.process = proc
        proc.kill()
        proc.wait(10)
        assert asyncio.run(prov.poll()) == -signal.SIGKILL
        dropped = logging.getLogger("papermill").filter(
            logging.LogRecord("papermill", logging.ERROR, "x", 1, "Kernel died while waiting for execute reply.",
                              None, None))
        assert not dropped
    finally:
        unnote()
    assert LocalProvisioner.poll is before
    assert logging.getLogger("papermill").filter(
        logging.LogRecord("papermill", logging.ERROR, "x", 1, "Kernel died while waiting for execute reply.", None,
                          None))
    line = kernel_failure("04_print_overhead.ipynb", DeadKernelError("Kernel died"), None)
    assert line == ("04_print_overhead.ipynb: its kernel was killed by SIGKILL from outside the runner (the "
                    "out-of-memory killer, or a kill -9?); nothing of this run is a result")
    run_kernel._KERNEL_EXIT["code"] = -signal.SIGSEGV
    assert "its kernel was ended by SIGSEGV without a Python error: a crash in native code" in kernel_failure(
        "n.ipynb", DeadKernelError("Kernel died"), None)


def test_a_kernel_ended_by_a_signal_from_outside_is_not_offered_a_native_crash(monkeypatch):
    """attack54 R24b: SIGTERM to the kernel read "a crash in native code (SIGSEGV, SIGBUS, SIGABRT) or a signal from
    outside". The crash words are for fault signals only; TERM, HUP, INT, QUIT, USR1/2 say they came from outside."""
    import signal

    monkeypatch.setattr(run_kernel, "_KERNEL_EXIT", {})
    for sig in ("SIGTERM", "SIGHUP", "SIGINT", "SIGQUIT", "SIGUSR1", "SIGUSR2"):
        run_kernel._KERNEL_EXIT["code"] = -getattr(signal, sig)
        line = kernel_failure("n.ipynb", DeadKernelError("Kernel died"), None)
        assert line == (f"n.ipynb: its kernel was ended by {sig} from outside the runner (a kill by its pid?); "
                        "nothing of this run is a result"), line
    for sig in ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGFPE", "SIGILL", "SIGSYS", "SIGTRAP"):
        run_kernel._KERNEL_EXIT["code"] = -getattr(signal, sig)
        line = kernel_failure("n.ipynb", DeadKernelError("Kernel died"), None)
        assert f"ended by {sig} without a Python error: a crash in native code" in line and "outside" not in line
