"""A busy machine is flagged: CPU used by other processes is recorded and warned about."""

from __future__ import annotations

import pytest

from feedlab import monitor
from feedlab.fingerprint import fingerprint_line


class FakeClock:
    def __init__(self):
        self.t = 100.0
        self.busy = 0.0   # CPU seconds on the usable cores, everyone
        self.own = 0.0    # CPU seconds of this process tree

    def advance(self, wall, busy, own):
        self.t += wall
        self.busy += busy
        self.own += own


@pytest.fixture()
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(monitor.time, "monotonic", lambda: c.t)
    monkeypatch.setattr(monitor, "_busy_seconds", lambda: (c.busy, 0.0))
    monkeypatch.setattr(monitor, "_own_tree_seconds", lambda: c.own)
    monkeypatch.setattr(monitor, "usable_cores", lambda: 2)
    monitor.start_run()
    return c


def test_own_work_is_not_load(clock):
    clock.advance(10, busy=20, own=20)  # we (and our workers) kept both cores busy
    lines = []
    s = monitor.check_busy("a", log=lines.append)
    assert s["other_cpu_cores"] == 0 and not s["busy"] and not lines


def test_other_processes_over_threshold_warn_in_one_line_and_reach_the_fingerprint(clock):
    clock.advance(10, busy=5, own=5)
    monitor.check_busy("quiet", log=lambda _m: None)
    clock.advance(10, busy=19, own=10)  # others used 0.9 cores of 2
    lines = []
    s = monitor.check_busy("the batch-size grid", log=lines.append)
    assert s["other_cpu_cores"] == pytest.approx(0.9) and s["busy"]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "the batch-size grid" in lines[0] and "0.90 of 2 usable cores (45%" in lines[0]
    assert lines[0].startswith("The machine was busy") and "re-run on an idle machine" in lines[0]
    rec = monitor.load_record()
    assert rec["busy"] and rec["busiest_window"]["what"] == "the batch-size grid"
    assert rec["whole_run"]["other_cpu_cores"] == pytest.approx(0.45)
    fp = {"cpu_model": "x", "other_load": rec}
    assert "BUSY: other processes used 45% of the cores" in fingerprint_line(fp)
    clock.advance(10, busy=19, own=10)
    monitor.check_busy("the figure", log=lines.append)  # said once in full, then briefly
    assert lines[1] == "Busy again during the figure: other processes used 0.90 of 2 usable cores (45%)."


def test_below_threshold_is_quiet(clock):
    clock.advance(10, busy=12, own=10)  # 0.2 cores of 2 = 10%
    lines = []
    assert not monitor.check_busy("x", log=lines.append)["busy"] and not lines
    assert "BUSY" not in fingerprint_line({"other_load": monitor.load_record()})


def test_real_counters_give_a_record():
    monitor.start_run()
    sum(i * i for i in range(200000))
    s = monitor.check_busy("real", log=lambda _m: None)
    assert s["available"] and s["other_cpu_cores"] >= 0 and s["window_s"] > 0


def _burning_grandchild(burn_s: float, then: str = "time.sleep(60)"):
    """``sh -c 'python <burn burn_s of CPU, then ...> & wait'`` and its python, once it has burnt ``burn_s``."""
    import subprocess
    import sys
    import time

    import psutil

    code = f"import time\nt = time.process_time()\nwhile time.process_time() - t < {burn_s}: pass\n{then}"
    sh = subprocess.Popen(["sh", "-c", f'"{sys.executable}" -c "$0" & wait', code])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        kids = psutil.Process(sh.pid).children()
        try:
            if kids and sum(kids[0].cpu_times()[:2]) >= burn_s * 0.95:
                return sh, kids[0]
        except psutil.Error:
            pass
        time.sleep(0.02)
    sh.kill()
    raise AssertionError(f"the grandchild did not burn its {burn_s} s in 20 s")


def _own_since(before):
    return monitor._own_tree_seconds() - before


def test_the_cpu_of_a_descendant_that_leaves_the_tree_stays_ours():
    """A grandchild whose parent is killed is reparented away from this tree (a local Ray's workers at its
    shutdown): the CPU it used, seen once, stays ours rather than turning into other load."""
    import os
    import signal

    start = monitor._own_tree_seconds()
    sh, grandchild = _burning_grandchild(0.6)
    try:
        monitor.note_own_tree()                  # seen once, with its 0.6 s
        sh.kill()
        sh.wait(timeout=10)                      # its child now belongs to init, not to us
    finally:
        try:
            os.kill(grandchild.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        sh.kill()
    assert 0.55 <= _own_since(start) < 0.9     # credited once, not more


@pytest.mark.parametrize("noted", [True, False])
def test_a_descendant_reaped_inside_the_tree_is_counted_once(noted):
    """A grandchild seen while it ran, then waited for by its parent, which this process waits for: its CPU
    is in our reaped children's times and, noted or not, counted once, not twice (which would hide others)."""
    start = monitor._own_tree_seconds()
    sh, _grandchild = _burning_grandchild(0.5, then="time.sleep(0.2)")
    if noted:
        monitor.note_own_tree()
    sh.wait(timeout=20)
    own = _own_since(start)
    assert 0.45 <= own < 0.8, own


class _Scripted(monitor._OwnTree):
    """An _OwnTree whose looks are given: (total, reaped, {pid: (start, own)}, {pid: start} present)."""

    def __init__(self, looks):
        super().__init__()
        self.looks = iter(looks)

    def _look(self):
        return next(self.looks)


def test_a_noted_pid_reused_or_a_clock_step_adds_no_phantom_seconds():
    # 1: a note sees pid 7 (started at 100 s) with 5 s; 2: it was reaped inside the tree (children_* +5)
    # and pid 7 now names a new process (started at 300 s): the old one is gone, its 5 s already counted
    tree = _Scripted([(10.0, 0.0, {7: (100.0, 5.0)}, {1: 0.0, 7: 100.0}),
                      (10.0, 5.0, {7: (300.0, 0.0)}, {1: 0.0, 7: 300.0}),
                      (10.0, 5.0, {}, {1: 0.0})])
    tree.note()
    assert tree.seconds() == 10.0 and tree.seconds() == 10.0   # no credit when the new pid 7 leaves either
    # a clock step moves a live process's start time by a fraction of a second: still the same process
    tree = _Scripted([(10.0, 0.0, {7: (100.0, 5.0)}, {1: 0.0, 7: 100.0}),
                      (10.0, 0.0, {7: (100.4, 6.0)}, {1: 0.0, 7: 100.4})])
    tree.note()
    assert tree.seconds() == 10.0 and tree.noted


def test_a_process_that_cannot_be_read_is_not_credited_as_gone():
    tree = _Scripted([(10.0, 0.0, {7: (100.0, 5.0)}, {1: 0.0, 7: 100.0}),
                      (5.0, 0.0, {}, {1: 0.0, 7: None})])   # pid 7 present but unreadable (access denied)
    tree.note()
    assert tree.seconds() == 5.0 and 7 in tree.noted


def test_a_window_whose_tree_cannot_be_listed_says_so(monkeypatch):
    w = monitor.LoadWindow()

    def fail():
        raise RuntimeError("no /proc")

    monkeypatch.setattr(monitor, "_own_tree_seconds", fail)
    assert w.summary()["available"] is False
