"""feedlab.tuner.epochs: the between-epochs re-tuner reacts to a CPU hog that starts mid-run, and logs why."""

import subprocess
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

from feedlab.tuner.epochs import Retuned, SteadyLoad

HOG = "import time\nt = time.time()\nwhile time.time() - t < 30: pass\n"   # ends by itself too
TUNE = dict(passes=1, window_s=0.05, max_window_s=0.3, budget_s=4.0, deadline_s=10.0, top=1, min_batches=10)


class _Work(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        time.sleep(0.001)            # a read that waits (a shared machine's load does not slow it much)
        return torch.full((4,), float(i))


class _HogWindow:
    """What other programs used over a window, read from the hogs this test starts (and only them: the
    helpers' and the CI's own load on a shared machine would otherwise decide the test, not the hog)."""

    def __init__(self, hogs):
        import psutil

        self.psutil, self.hogs, self.t0 = psutil, hogs, time.monotonic()
        self.cpu0 = {h.pid: self._cpu(h.pid) for h in hogs}

    def _cpu(self, pid):
        try:
            return sum(self.psutil.Process(pid).cpu_times()[:2])
        except self.psutil.Error:
            return None

    def summary(self):
        wall = time.monotonic() - self.t0
        used = 0.0
        for h in self.hogs:
            a, b = self.cpu0.get(h.pid), self._cpu(h.pid)
            used += (b or 0.0) - (a or 0.0) if b is not None else 0.0
        other = max(0.0, used / wall) if wall > 0 else 0.0
        return {"available": True, "usable_cores": 2, "other_cpu_cores": other, "other_fraction": other / 2,
                "busy": False, "steal_cores": 0.0}


def test_a_cpu_hog_that_starts_mid_run_makes_it_retune_at_the_boundary():
    logs: list[str] = []
    hogs: list = []
    loader = Retuned(lambda: DataLoader(_Work(), batch_size=16), core_change=0.05, wait_line=1.01,
                     log=logs.append, load_window=lambda: _HogWindow(list(hogs)), **TUNE)
    try:
        for epoch in range(4):
            if epoch == 2:       # a program starts beside the job: two cores' worth of spinning (on a
                # shared machine they get what is left: the change asked for is small)
                hogs += [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(2)]
            n = sum(len(b) for b in loader)
            assert n == 256                                   # every sample, every epoch, whatever the loader
            time.sleep(0.2)                                   # between epochs: the hogs get going
    finally:
        for h in hogs:
            h.kill()
            h.wait(timeout=10)
    assert [e["epoch"] for e in loader.events] == [1, 2, 3, 4]
    assert not any(e["why"] for e in loader.events[:2])       # quiet and under the line: left alone
    hit = [e for e in loader.events[2:] if any("free cores changed" in w for w in e["why"])]
    assert hit, f"no re-tune after the hog started: {loader.events}"
    assert any("re-tuning at the boundary" in m and "free cores" in m for m in logs)
    assert all("tune_s" in e for e in hit)                    # it re-tuned there (or said it was too busy)


class _Fixed:
    def __init__(self, other):
        self.other = other

    def summary(self):
        return {"available": True, "busy": False, "other_cpu_cores": self.other, "usable_cores": 2,
                "other_fraction": self.other / 2}


def test_a_load_that_stays_is_the_machine_and_one_that_moves_is_busy():
    assert not SteadyLoad(1.0, inner=lambda: _Fixed(1.05)).summary()["busy"]
    assert SteadyLoad(1.0, inner=lambda: _Fixed(0.1)).summary()["busy"]
    assert SteadyLoad(0.0, inner=lambda: _Fixed(1.0)).summary()["busy"]


def test_a_quiet_loop_under_the_line_is_left_alone():
    seen = []
    loader = Retuned(lambda: DataLoader(_Work(), batch_size=16), log=seen.append,
                     load_window=lambda: _Fixed(0.0), wait_line=1.0, **TUNE)
    for _ in range(2):
        for _b in loader:
            time.sleep(0.001)
    assert [e["why"] for e in loader.events] == [[], []] and not seen
