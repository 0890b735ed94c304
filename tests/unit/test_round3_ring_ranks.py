"""Issue 33, round three: the shared-memory ring under pressure (pages reserved, no name to leak,
bounded by RAM, every worker death one line), and the processes bench starts for --ranks and
--peer (their own process group, stopped on SIGTERM/SIGHUP and at the command's --timeout).

Every wait here has a deadline; every test leaves no process and no /dev/shm entry behind."""

from __future__ import annotations

import errno
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from feedlab.pipeline.ring import RingLoader, RingWorkerError

REPO = Path(__file__).resolve().parents[2]
SHM = "/dev/shm"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "lib"), str(REPO)]), "OMP_NUM_THREADS": "1"}


def _shm() -> set[str]:
    return set(os.listdir(SHM)) if os.path.isdir(SHM) else set()


def _shm_unchanged(before: set[str], wait_s: float = 3.0) -> set[str]:
    """Entries added since ``before`` that are still there after ``wait_s`` (others' short-lived files pass)."""
    end = time.monotonic() + wait_s
    while True:
        new = _shm() - before
        if not new or time.monotonic() > end:
            return new
        time.sleep(0.1)


def _gone(pids, wait_s: float = 10.0) -> list[int]:
    """The pids of ``pids`` still running (not zombies) after up to ``wait_s``."""
    end = time.monotonic() + wait_s
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.1)


def _kill_all(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _grandchildren(pid: int) -> list[int]:
    """The children of ``pid``'s children: a watched command's workers (its forked working process between)."""
    try:
        return [g.pid for c in psutil.Process(pid).children() for g in c.children()]
    except psutil.NoSuchProcess:
        return []


def _tree(pid: int) -> list[int]:
    try:
        return [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


class Samples:
    lr_shape, hr_shape = (2, 2, 3), (4, 4, 3)

    def __init__(self, n: int, sleep_s: float = 0.0):
        self.n, self.sleep_s = n, sleep_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import numpy as np

        if self.sleep_s:
            time.sleep(self.sleep_s)
        return np.full(self.lr_shape, i % 251, np.uint8), np.full(self.hr_shape, i % 253, np.uint8)


@pytest.fixture()
def no_leaks():
    """/dev/shm and this process's children as they were."""
    before, kids = _shm(), {c.pid for c in psutil.Process().children(recursive=True)}
    yield
    new = [c.pid for c in psutil.Process().children(recursive=True) if c.pid not in kids]
    assert not _gone(new, 5.0), "a process was left behind"
    assert not _shm_unchanged(before), "a /dev/shm entry was left behind"


# ---------------------------------------------------------------- the ring: room, names, RAM


def test_the_ring_reserves_its_pages_and_no_room_is_one_line(monkeypatch, no_leaks):
    """posix_fallocate is how the pages are reserved; ENOSPC from it is one line naming /dev/shm and the size."""
    calls = []

    def full(fd, offset, length):
        calls.append(length)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    ld = RingLoader(Samples(16), 4, num_workers=2, start_method="fork")
    with pytest.raises(ValueError) as exc:
        next(iter(ld))
    msg = str(exc.value)
    assert calls == [ld.layout.nbytes]
    assert "\n" not in msg and SHM in msg and f"{ld.layout.nbytes / 2**20:.0f} MiB" in msg and "slots" in msg
    assert ld._w is None


def test_the_ring_is_bounded_by_the_memory_available(monkeypatch, no_leaks):
    """A /dev/shm larger than the RAM left: the ring that does not fit in memory is refused in one line."""
    real = psutil.virtual_memory()
    monkeypatch.setattr(psutil, "virtual_memory", lambda: real._replace(available=1 << 16))
    ld = RingLoader(Samples(4096), 512, num_workers=1, start_method="fork")
    with pytest.raises(ValueError, match=r"MiB of memory .* available") as exc:
        next(iter(ld))
    assert "\n" not in str(exc.value)


_TWO_RINGS = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from test_round3_ring_ranks import Samples
    from feedlab.pipeline import ring
    from feedlab.pipeline.ring import RingLoader

    class Big(Samples):
        lr_shape, hr_shape = (1024, 1024), (1, 1)  # batch 8, 2 slots: 16 MiB a ring

    ring.check_shm = lambda *a, **k: None  # both rings checked before either took its pages (started together)
    first, second = (RingLoader(Big(8), 8, num_workers=1, slots=2, start_method="fork") for _ in range(2))
    next(iter(first))
    print("first ring up", flush=True)
    try:
        next(iter(second))
    except ValueError as exc:
        print("error:", exc, flush=True)
        first.close()
        sys.exit(2)
    print("second ring up", flush=True)
""")


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1) for a private, small /dev/shm")
def test_two_rings_that_fit_alone_but_not_together_get_one_line_not_sigbus(tmp_path, no_leaks):
    """In a private mount namespace with a 24 MiB /dev/shm: two 16 MiB rings whose checks both passed.
    The second cannot reserve its pages: one line, exit 2 (before: SIGBUS, rc 135, its file left)."""
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
                           capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip("no private mount namespace here: " + probe.stderr.decode(errors="replace").strip())
    script = tmp_path / "two_rings.py"
    script.write_text(_TWO_RINGS.format(tests=str(Path(__file__).parent)))
    cmd = ["unshare", "-rm", "sh", "-c",
           f"mount -t tmpfs -o size=24m tmpfs /dev/shm && exec {sys.executable} {script}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=ENV, start_new_session=True)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr[-2000:])
    lines = r.stdout.splitlines()
    assert lines[0] == "first ring up" and lines[1].startswith("error: ring: /dev/shm has no room")
    assert "16 MiB" in lines[1] and "Traceback" not in r.stderr


_VICTIM = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from test_round3_ring_ranks import Samples

    class SlowToStart(Samples):
        def __setstate__(self, state):  # a spawned worker unpickles this: start-up takes long
            self.__dict__.update(state)
            time.sleep(120)

    if __name__ == "__main__":
        from feedlab.pipeline.ring import RingLoader
        ld = RingLoader(SlowToStart(16), 4, num_workers=1, start_method="spawn", timeout_s=120)
        print("starting", flush=True)
        next(iter(ld))
""")


def test_a_main_process_killed_during_ring_start_up_leaves_no_file(tmp_path, no_leaks):
    """The main process killed while its worker is still starting: nothing of the ring stays in /dev/shm."""
    script = tmp_path / "victim.py"
    script.write_text(_VICTIM.format(tests=str(Path(__file__).parent)))
    before = _shm()
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=ENV,
                            start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "starting"
        end = time.monotonic() + 60
        while len(_tree(proc.pid)) < 2 and time.monotonic() < end:  # its worker is being spawned
            time.sleep(0.05)
        assert len(_tree(proc.pid)) >= 2
        time.sleep(1.0)                                               # ... and waited for
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
        proc.stdout.close()
    assert not _shm_unchanged(before)


# ---------------------------------------------------------------- the ring: a worker killed mid-epoch


def _wait_dead(p, wait_s: float = 10.0) -> None:
    p.join(wait_s)
    assert not p.is_alive()


def test_a_worker_killed_while_the_main_sends_to_it_is_the_rings_one_line(no_leaks):
    """Worker 1 killed after the first batch: the next batch is sent to it (before: a raw BrokenPipeError)."""
    ld = RingLoader(Samples(40), 4, num_workers=2, start_method="fork", timeout_s=20)
    it = iter(ld)
    next(it)
    victim = ld._w.procs[1]
    os.kill(victim.pid, signal.SIGKILL)
    _wait_dead(victim)
    with pytest.raises(RingWorkerError) as exc:
        next(it)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("ring worker 1 was killed by SIGKILL before batch")
    assert ld._w is None


def test_a_worker_killed_at_random_points_is_always_the_rings_one_line(no_leaks):
    """Eight tries, a random worker killed at a random moment: always RingWorkerError naming it and SIGKILL."""
    rng = random.Random(33)
    for attempt in range(8):
        ld = RingLoader(Samples(48, sleep_s=0.002), 4, num_workers=rng.choice([2, 3]), start_method="fork",
                        timeout_s=20)
        it = iter(ld)
        k = rng.randrange(ld.num_workers)
        pid = ld._w.procs[k].pid
        timer = threading.Timer(rng.uniform(0.0, 0.3), os.kill, (pid, signal.SIGKILL))
        timer.start()
        end = time.monotonic() + 30
        try:
            with pytest.raises(RingWorkerError) as exc:
                while time.monotonic() < end:  # epochs until the kill is noticed
                    for _ in it:
                        pass
                    it = iter(ld)
        finally:
            timer.cancel()
            timer.join()
            ld.close()
        msg = str(exc.value)
        assert "\n" not in msg and f"ring worker {k} was killed by SIGKILL" in msg, (attempt, msg)


def _alive(pids) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:   # gone (or reaped between the two looks)
            pass
    return out


def test_bench_with_a_ring_worker_killed_prints_one_line(sr_root, no_leaks):
    """Through ``python -m feedlab.bench --loader ring``: a ring worker SIGKILLed at a random moment is one line
    naming the worker, exit 2, no traceback (two tries). Then the process the watched bench forked to run the
    loader (the ring workers' parent) SIGKILLed from outside — the OOM killer's way — is one line naming SIGKILL,
    exit 137, the ring workers stopped: it was a silent 137 (CI, 2026-11-28, when this test's random kill picked
    that process instead of a worker)."""
    rng = random.Random(3)
    for attempt in range(3):
        cmd = [sys.executable, "-m", "feedlab.bench", "--data", str(sr_root), "--format", "npy", "--loader", "ring",
               "--num-workers", "2", "--batch-size", "4", "--epochs", "100000", "--warmup", "0", "--model", "none",
               "--device", "cpu", "--collate", "fast", "--timeout", "60"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                                start_new_session=True)
        try:
            end = time.monotonic() + 90
            while len(_grandchildren(proc.pid)) < 2 and time.monotonic() < end and proc.poll() is None:
                time.sleep(0.05)
            workers = _grandchildren(proc.pid)   # the ring's workers: below the process the watcher forked
            assert workers, proc.communicate(timeout=10)
            time.sleep(rng.uniform(0.2, 1.0))
            target = rng.choice(workers) if attempt < 2 else psutil.Process(proc.pid).children()[0].pid
            os.kill(target, signal.SIGKILL)
            out, err = proc.communicate(timeout=60)
        finally:
            _kill_all(_tree(proc.pid))
            proc.wait(timeout=10)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        if attempt < 2:
            assert proc.returncode == 2 and len(lines) == 1, (attempt, proc.returncode, err[-3000:])
            assert "ring worker" in lines[0] and "SIGKILL" in lines[0] and "Traceback" not in err
        else:
            assert proc.returncode == 137 and len(lines) == 1, (proc.returncode, err[-3000:])
            assert "killed by SIGKILL" in lines[0] and lines[0].startswith("python -m feedlab.bench: ")
            assert not _alive(workers)


# ---------------------------------------------------------------- bench --ranks: signals and a stopped rank


def _bench_ranks(sr_root, tmp: Path, timeout: int) -> subprocess.Popen:
    tmp.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "feedlab.bench", "--data", str(sr_root), "--format", "npy", "--ranks", "2",
           "--num-workers", "0", "--batch-size", "4", "--epochs", "100000", "--warmup", "0", "--model", "none",
           "--device", "cpu", "--timeout", str(timeout)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**ENV, "TMPDIR": str(tmp)}, start_new_session=True)


def _rank_pids(pid: int) -> list[int]:
    out = []
    for p in _tree(pid):
        try:
            cmd = " ".join(psutil.Process(p).cmdline())
        except psutil.Error:
            continue
        if "feedlab.scale.ranks" in cmd and "torch.distributed.run" not in cmd:
            out.append(p)
    return out


def _wait_for_ranks(proc: subprocess.Popen, tmp: Path, wait_s: float = 120.0) -> list[int]:
    """The two ranks' pids once both run (and, where they write one, both beat: the launcher's sign of life)."""
    end = time.monotonic() + wait_s
    while time.monotonic() < end and proc.poll() is None:
        if len(_rank_pids(proc.pid)) == 2:
            break
        time.sleep(0.1)
    ranks = _rank_pids(proc.pid)
    assert len(ranks) == 2, proc.communicate(timeout=30)
    end = time.monotonic() + 30
    while len(list(tmp.glob("feedlab-ranks-*/beat-*"))) < 2 and time.monotonic() < end:
        time.sleep(0.1)
    return ranks


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_bench_ranks_stopped_by_a_signal_stops_the_launcher_and_its_ranks(sr_root, tmp_path, sig, no_leaks):
    """SIGTERM / SIGHUP to ``bench --ranks 2``: torchrun and both ranks end with it (before: orphaned)."""
    proc = _bench_ranks(sr_root, tmp_path / "tmp", 120)
    pids = []
    try:
        _wait_for_ranks(proc, tmp_path / "tmp")
        pids = _tree(proc.pid)
        assert len(pids) >= 4  # bench, torchrun, two ranks
        os.kill(proc.pid, sig)
        _out, err = proc.communicate(timeout=60)
        assert not _gone(pids, 30.0), "the launcher or a rank outlived bench"
    finally:
        _kill_all(pids + _tree(proc.pid))
        proc.wait(timeout=10)
    assert proc.returncode == 128 + sig, (proc.returncode, err[-2000:])
    assert err.strip().splitlines()[-1] == f"ranks: {sig.name}: the launcher and its ranks were stopped"
    assert not list((tmp_path / "tmp").iterdir())  # its temporary folder went with it


def test_bench_ranks_a_stopped_rank_ends_the_run_at_timeout_with_one_line(sr_root, tmp_path, no_leaks):
    """A rank stopped with SIGSTOP: ``--timeout`` reaches the launcher: one line naming the stopped rank,
    exit 2, nothing left running (before: no limit but launch()'s own 600 s)."""
    proc = _bench_ranks(sr_root, tmp_path / "tmp", 20)   # also bounds the ranks' start (to a first beat)
    pids = []
    try:
        ranks = _wait_for_ranks(proc, tmp_path / "tmp")
        pids = _tree(proc.pid)
        os.kill(max(ranks), signal.SIGSTOP)
        _out, err = proc.communicate(timeout=120)
        assert not _gone(pids, 30.0), "the launcher or a rank outlived bench"
    finally:
        _kill_all(pids + _tree(proc.pid))
        proc.wait(timeout=10)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, err[-3000:])
    assert "no progress in 20 s: rank" in lines[0] and "is stopped" in lines[0] and "stopped" in lines[0]
    assert not list((tmp_path / "tmp").iterdir())


# ---------------------------------------------------------------- bench --peer: a hung peer venv

_HUNG_PEER = """#!/bin/sh
# a peer venv's python that hangs, with a child of its own
sleep 300 &
echo $! > {pidfile}
wait
"""


def _hung_python(tmp_path: Path) -> tuple[Path, Path]:
    pidfile = tmp_path / "grandchild.pid"
    py = tmp_path / "venv-python"
    py.write_text(_HUNG_PEER.format(pidfile=pidfile))
    py.chmod(0o755)
    return py, pidfile


def _grandchild(pidfile: Path) -> int:
    end = time.monotonic() + 10
    while not (pidfile.is_file() and pidfile.read_text().strip()) and time.monotonic() < end:
        time.sleep(0.05)
    return int(pidfile.read_text())


def _request(tmp_path):
    from feedlab.peers import remote

    src = type("S", (), {"kind": "sr", "root": tmp_path, "limit": 4})()
    return remote.request("ffcv", src, tmp_path, 8, [0], 64, 1, 1, False, "cpu", 0, True)


@pytest.mark.parametrize("limit", ["timeout", "stall_s"])
def test_a_hung_peer_venv_is_stopped_with_its_own_children(tmp_path, limit, no_leaks):
    """At the run's limit (the whole run, or no progress for stall_s) the peer's process group goes:
    its own child too (before: the child of a timed-out peer kept running; no stall_s at all)."""
    from feedlab.errors import deadline
    from feedlab.peers import remote

    py, pidfile = _hung_python(tmp_path)
    grandchild = None
    try:
        with deadline(60, "the hung peer's run"):
            res, info = remote.run(py, _request(tmp_path), **({limit: 2} if limit == "timeout" else
                                                               {"timeout": 600, limit: 2}))
        grandchild = _grandchild(pidfile)
        assert not _gone([grandchild], 5.0), "the peer's own child was left running"
    finally:
        if grandchild is None and pidfile.is_file():
            grandchild = int(pidfile.read_text())
        _kill_all([grandchild] if grandchild else [])
    assert len(res) == 0 and not info["available"] and "\n" not in info["reason"]
    assert ("ran past 2 s" if limit == "timeout" else "made no progress in 2 s") in info["reason"]


def test_bench_peer_timeout_reaches_the_peers_venv_run(sr_root, tmp_path, monkeypatch, capsys, no_leaks):
    """``bench --peer NAME --timeout 3``: a hung peer venv is stopped after 3 s without progress, its child
    too, and said in one line (before: FEEDLAB_PEER_TIMEOUT_S, 4 h by default)."""
    from feedlab import bench
    from feedlab.errors import deadline
    from feedlab.peers import venvs

    py, pidfile = _hung_python(tmp_path)
    monkeypatch.setattr(venvs, "python_for", lambda name, root=None: py)
    monkeypatch.delenv("FEEDLAB_PEER_IN_VENV", raising=False)
    grandchild = None
    try:
        with deadline(60, "bench --peer on a hung venv"):
            rc = bench.main(["--peer", "ffcv", "--data", str(sr_root), "--kind", "sr", "--num-workers", "0",
                             "--batch-size", "8", "--epochs", "1", "--timeout", "3"])
        grandchild = _grandchild(pidfile)
        assert not _gone([grandchild], 5.0), "the peer's own child was left running"
    finally:
        if grandchild is None and pidfile.is_file():
            grandchild = int(pidfile.read_text())
        _kill_all([grandchild] if grandchild else [])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 3 and len(out) == 1 and "made no progress in 3 s" in out[0] and str(py) in out[0]
