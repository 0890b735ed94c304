"""The doctor on a user's own DataLoader: `diagnose_loader` and `--loader/--step`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from inproc import run_cli
from torch.utils.data import Dataset
from user_loader import make_loader, train_step

from feedlab.doctor import diagnose, render_user


def test_diagnose_loader_names_the_slow_fetch():
    rep = diagnose(make_loader(1), step=train_step, batches=6, repeats=3, device="cpu", max_workers=1)
    stages = {r["stage"]: r for r in rep["stages"] if r.get("measurable")}
    assert stages["fetch"]["s_per_sample"] > 6e-3         # the 8 ms sleep, timed inside the dataset
    assert {"collate", "handover", "receive", "h2d", "model"} <= set(stages)
    # the fetch is filed under read, and bounds wherever the step measured well under it (a busy laptop can
    # slow the tiny step to the fetch's 8 ms a sample: then either may bound, and the prediction says which)
    if stages["model"]["s_per_sample"] < 0.5 * stages["fetch"]["s_per_sample"]:
        assert rep["bound_stage"] == "read", (stages["model"]["s_per_sample"], stages["fetch"]["s_per_sample"])
    else:
        assert rep["bound_stage"] in ("read", "model")
    row = [r for r in rep["end_to_end"] if r["num_workers"] == 1][0]
    assert row["samples_per_s"] > 0 and "error" in row
    # each pass's steady rate beside their median: the prediction table is judged on their spread (audit56 N11)
    assert row["repeats"] == len(row["steady_runs"]) and 1 <= row["repeats"] <= 3
    assert min(row["steady_runs"]) <= row["samples_per_s"] <= max(row["steady_runs"])
    # and the passes' timed batches and shortest window: the judge reads whether the rate is one (the benchmark's
    # tables read "0 workers' timed window was not recorded" without them)
    assert 1 <= row["timed_batches"] <= 6 and row["window_s"] > 0
    assert "your DataLoader" in render_user(rep)


def test_cli_loader_and_step():
    """A real ``python -m feedlab.doctor --loader --step`` run. Without step trials: on a loaded box the tiny step
    may read as the bound, and trying ``torch.compile`` on it then took a minute (the trials: test_doctor_job)."""
    root = Path(__file__).resolve().parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "feedlab.doctor", "--loader", "user_loader:make_loader",
                        "--step", "user_loader:train_step", "--batches", "4", "--repeats", "1", "--json",
                        "--device", "cpu", "--no-step-trials", "--predict-only"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads(r.stdout)
    assert rep["batch_size"] == 8 and rep["measured_samples_per_s"] > 0
    bad = run_cli("feedlab.doctor", "--loader", "no_such_mod:f")  # refused: checked in this process
    assert bad.returncode != 0 and "Traceback" not in bad.stderr and "no_such_mod" in bad.stderr


def test_user_loader_rate_counts_the_wait_of_every_counted_batch(monkeypatch):
    """The steady rate: samples of batches skip.. over the time from asking for batch skip,
    and a measurement even when skip is as large as the batches asked for."""
    import itertools

    from feedlab.doctor import user

    ticks = itertools.count()
    monkeypatch.setattr(user.time, "perf_counter", lambda: float(next(ticks)))
    import torch

    loader = [(torch.zeros(4, 1), torch.zeros(4)) for _ in range(10)]  # batches of 4
    out = user._run(loader, None, "cpu", batches=6, skip=2)
    # every clock read is one "second": t0=0; batch 0 asked 1, got 2 (the first batch: 2 s); batch 1: 3, 4;
    # before batch 2 (skip): 5; then each counted batch asked, got, stepped: 3 reads; end 18:
    # batches 2..5 (16 samples) in the 13 s from before asking for batch 2 to the end
    assert out["steady"] == 16 / 13 and out["first_batch_s"] == 2.0
    assert out["waits"] == [1.0] * 4 and out["steps"] == [1.0] * 4     # the loop's verdict: wait vs step
    out = user._run(loader, None, "cpu", batches=4, skip=16)  # skip capped at batches // 2
    assert out["steady"] == out["steady"] and out["steady"] > 0


class _MiBSamples(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        return torch.zeros(256, 1024)   # 1 MiB a sample


def test_your_loader_with_workers_is_checked_against_dev_shm_before_they_start(tmp_path, monkeypatch):
    """Issue 47: /dev/shm is checked for a user's own DataLoader where the doctor runs it with its workers, as for
    feedlab's loaders: one line with the fix, before a worker fills /dev/shm (a container's 64 MiB)."""
    from leftovers import nothing_left
    from torch.utils.data import DataLoader

    from feedlab.doctor.guard import UserCodeError
    from feedlab.pipeline import shm

    monkeypatch.setattr(shm, "shm_free_bytes", lambda *_a, **_k: 1 << 20)   # 1 MiB free, as in a small container
    loader = DataLoader(_MiBSamples(), batch_size=8, num_workers=2)
    with nothing_left(tmp_path / "tmp", 120, "the doctor on a loader /dev/shm cannot hold"):
        with pytest.raises(UserCodeError) as err:
            diagnose(loader, batches=4, repeats=1, max_workers=2)
    line = str(err.value)
    assert "\n" not in line and "/dev/shm has 1 MiB free" in line and "file_system" in line, line


def test_a_worker_killed_or_stopped_from_outside_is_named_never_blamed_on_your_loader(monkeypatch):
    """attack57 S63c: a SIGKILLed worker read "your loader raised RuntimeError … run one batch by hand"; S63: a
    SIGSTOPped worker was blamed on a sample (and, never resumed, held the stop that followed for 30 s)."""
    import signal
    import time

    from feedlab.doctor import user
    from feedlab.doctor.guard import Hung, UserCodeError

    class Dies:
        def __next__(self):
            raise RuntimeError("DataLoader worker (pid 4242) is killed by signal: Killed. ")

    with pytest.raises(UserCodeError) as exc:
        user._next(Dies(), 3, 5.0, "the doctor's deadline (--deadline)")
    assert str(exc.value).startswith("your loader: its DataLoader worker (pid 4242) was killed by SIGKILL")

    class Waits:
        def __next__(self):
            time.sleep(5)

    monkeypatch.setattr(user, "held_workers", lambda: [])
    with pytest.raises(Hung):   # nothing stopped: the deadline's own line (a sample that never returns)
        user._next(Waits(), 1, 0.2, "the doctor's deadline (--deadline)")
    held = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        os.kill(held.pid, signal.SIGSTOP)
        monkeypatch.setattr(user, "held_workers", lambda: [held.pid])
        with pytest.raises(UserCodeError) as exc:
            user._next(Waits(), 1, 0.2, "the doctor's deadline (--deadline)")
        assert f"(pid(s) {held.pid}) stopped (SIGSTOP or SIGTSTP" in str(exc.value) and "within 0.2 s" in str(exc.value)
        time.sleep(0.2)
        assert open(f"/proc/{held.pid}/stat").read().split(")")[1].split()[0] != "T"   # resumed, so a stop reaches it
    finally:
        held.kill()
        held.wait(timeout=10)
