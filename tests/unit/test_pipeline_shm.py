"""feedlab.pipeline.shm: DataLoader workers checked against /dev/shm before they start, and one line
(with the file_system sharing strategy as the fix) when they run out anyway, no torch_* file left.

A small /dev/shm is simulated: its free-space reading patched, and a worker that fails as torch's
shared-memory writer does (RuntimeError "unable to write to file </torch_...>: No space left on
device") after leaving a torch_<pid>_* file behind."""

from __future__ import annotations

import glob
import os
import time

import numpy as np
import psutil
import pytest

from feedlab import pipeline as P
from feedlab.pipeline import shm


class Images:
    """64 HWC uint8 images of 64×64."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return np.full((64, 64, 3), i, np.uint8), np.zeros((32, 32, 3), np.uint8)


class FullShm(Images):
    """A worker writes a torch_<pid>_* file, then fails as torch's writer does when /dev/shm is full."""

    def __getitem__(self, i):
        import torch.utils.data

        if torch.utils.data.get_worker_info() is None:   # the main process: the size check's sample
            return super().__getitem__(i)
        with open(f"/dev/shm/torch_{os.getpid()}_feedlab_test_{i}", "wb") as fh:
            fh.write(b"x" * 4096)
        raise RuntimeError(f"unable to write to file </torch_{os.getpid()}_1234_{i}>: No space left on device (28)")


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _spec(workers=2):
    return P.PipelineSpec(format="npy", num_workers=workers, batch_size=64, prefetch_factor=2, collate="totensor")


def test_workers_are_refused_before_they_start_when_dev_shm_is_too_small(monkeypatch):
    # 512 KiB free: not even one of the loader's batches (its only one: 64 samples of 64) fits
    monkeypatch.setattr(shm, "shm_free_bytes", lambda path=shm.SHM_DIR: 1 << 19)
    before = _children()
    with pytest.raises(shm.SharedMemoryError) as err:
        P.make_loader(Images(), _spec())
    line = str(err.value)
    assert "\n" not in line and "512 KiB free" in line and "2 DataLoader worker(s)" in line, line
    assert "set_sharing_strategy('file_system')" in line and "--shm-size" in line, line
    assert _children() == before                                   # no worker was started
    monkeypatch.setattr(shm, "shm_free_bytes", lambda path=shm.SHM_DIR: 1 << 40)
    assert isinstance(P.make_loader(Images(), _spec()), shm.CheckedDataLoader)   # room: built as before


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_workers_running_out_of_shared_memory_is_one_line_and_leaves_no_torch_file():
    t_end = time.monotonic() + 60                                  # the test's own deadline
    before = set(glob.glob("/dev/shm/torch_*"))
    kids = _children()                                             # what earlier tests left is not this loader's
    loader = P.make_loader(FullShm(), _spec(workers=1))
    with pytest.raises(shm.SharedMemoryError) as err:
        for _ in loader:
            assert time.monotonic() < t_end
    line = str(err.value)
    assert "\n" not in line and "ran out of shared memory" in line and "file_system" in line, line
    assert not set(glob.glob("/dev/shm/torch_*")) - before, "torch_* files left in /dev/shm"
    while _children() - kids and time.monotonic() < t_end:
        time.sleep(0.05)
    assert not _children() - kids, "a worker was left running"


def test_a_failure_that_is_not_shared_memory_is_raised_as_it_is():
    assert shm.is_shm_failure(RuntimeError("DataLoader worker (pid 7) is killed by signal: Bus error."))
    assert shm.is_shm_failure(RuntimeError("unable to write to file </torch_7_1_0>: No space left on device (28)"))
    assert not shm.is_shm_failure(RuntimeError("Caught ValueError in DataLoader worker process 0: bad sample"))
    assert not shm.is_shm_failure(ValueError("shared memory"))


def test_a_roomy_dev_shm_reads_no_sample_to_check(monkeypatch):
    """Sizing a batch reads a sample in this process: where /dev/shm has room for any plausible batch, none is
    read (a user's fetch is not paid twice, and a dataset that logs its reads sees only its workers' reads)."""
    reads = []

    class Logged(Images):
        def __getitem__(self, i):
            reads.append(i)
            return super().__getitem__(i)

    monkeypatch.setattr(shm, "shm_free_bytes", lambda path=shm.SHM_DIR: shm.ROOMY_BYTES)
    assert shm.shm_problem_of(Logged(), 64, 2, 2) is None and reads == []
    monkeypatch.setattr(shm, "shm_free_bytes", lambda path=shm.SHM_DIR: 1 << 19)   # under its one batch
    assert shm.shm_problem_of(Logged(), 64, 2, 2) and reads == [0]


def test_a_small_dev_shm_and_small_batches_are_sized_in_the_line_never_as_0_mib():
    """A 4 KiB /dev/shm and 0.1 MiB batches read "has 0 MiB free, but ... × 0.1 MiB batches need 0 MiB"
    (attack50 M02): each size is written so that the shortfall shows."""
    line = shm.worker_shm_problem(96 * 1024, 2, 2, free=4096)
    assert "has 4 KiB free" in line and "96 KiB batches need 384 KiB" in line, line
    line = shm.worker_shm_problem(3 << 20, 2, 2, free=(11 << 20) + (1 << 19))
    assert "has 11.5 MiB free" in line and "3 MiB batches need 12 MiB" in line, line
    assert shm.worker_shm_problem(1 << 20, 2, 2, free=4 << 20) is None


def test_workers_that_cannot_start_for_want_of_shared_memory_are_one_line_and_no_unraisable(monkeypatch):
    """attack53 M06c: ENOSPC while torch built the iterator (a queue or semaphore in /dev/shm) left a half-built
    iterator whose __del__ printed "Exception ignored … no attribute '_workers'" twice, then the OSError; now one
    SharedMemoryError line, and nothing unraisable."""
    import errno
    import gc
    import sys

    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    def half_built(self, loader):
        self._shutdown = False
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_MultiProcessingDataLoaderIter, "__init__", half_built)
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u))
    loader = shm.CheckedDataLoader(list(range(8)), batch_size=2, num_workers=1)
    with pytest.raises(shm.SharedMemoryError, match="could not start: shared memory ran out"):
        iter(loader)
    gc.collect()
    assert seen == []
    monkeypatch.setattr(_MultiProcessingDataLoaderIter, "__init__",
                        lambda self, loader: (_ for _ in ()).throw(OSError(errno.EACCES, "Permission denied")))
    with pytest.raises(OSError, match="Permission denied"):   # not a shared-memory failure: raised as it was
        iter(loader)
    gc.collect()
    assert seen == []


def test_a_failed_peers_orphan_torch_files_are_swept_and_a_live_processs_left():
    """attack53 M06: a peer's DataLoader out of /dev/shm left its dead workers' torch_* files until reboot; the
    sweep after such a failure removes the files that appeared since, whose process is gone, and leaves a live
    process's (another job's) alone."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          timeout=30)
    before = shm.shm_names()
    orphan = os.path.join(shm.SHM_DIR, f"torch_{int(dead.stdout)}_feedlab_test")
    live = os.path.join(shm.SHM_DIR, f"torch_{os.getpid()}_feedlab_test")
    try:
        for f in (orphan, live):
            with open(f, "wb") as fh:
                fh.write(b"x")
        assert shm.sweep_orphans_since(before) == [os.path.basename(orphan)]
        assert not os.path.exists(orphan) and os.path.exists(live)
    finally:
        for f in (orphan, live):
            if os.path.exists(f):
                os.unlink(f)


def test_the_batches_in_flight_are_capped_at_the_loaders_length(monkeypatch):
    """attack53 P01: 1 worker × prefetch_factor 1000000 over a loader of 2 batches was priced as 1,875,000 MiB in
    flight and refused; at most its 2 batches ever are. A loader without a length keeps the full count."""
    assert shm.worker_shm_problem(1 << 20, 1, 1_000_000, free=4 << 20, batches=2) is None
    line = shm.worker_shm_problem(1 << 20, 1, 1_000_000, free=1 << 20, batches=2)
    assert "(at most the loader's 2 batches)" in line and "need 2 MiB" in line, line
    assert "need 1,000,000 MiB" in shm.worker_shm_problem(1 << 20, 1, 1_000_000, free=4 << 20)
    monkeypatch.setattr(shm, "shm_free_bytes", lambda path=shm.SHM_DIR: 64 << 20)
    ds = Images()
    one = shm.nbytes(ds[0])
    batches = -(-len(ds) // 4)
    assert one * 4 * batches < 64 << 20, "the test's set must fit /dev/shm whole"
    assert shm.shm_problem_of(ds, 4, 1, 1_000_000) is None


def test_the_one_sweeper_leaves_a_file_a_live_process_maps_and_takes_any_folder(tmp_path):
    """pipeline.shm.sweep_orphans_since is the one home of the sweep of dead workers' torch_* files (doctor
    --script's end of run used its own copy): a dead pid's file that a live process still maps is left, an
    unmapped one removed, a name there before is never touched; a folder other than /dev/shm is swept too."""
    import mmap
    import subprocess

    p = subprocess.Popen(["true"])
    p.wait()
    dead = p.pid
    old = tmp_path / f"torch_{dead}_old"
    old.write_bytes(b"x")
    before = {old.name}
    held, orphan = tmp_path / f"torch_{dead}_held", tmp_path / f"torch_{dead}_orphan"
    for f in (held, orphan):
        f.write_bytes(b"x" * 4096)
    with open(held, "r+b") as fh, mmap.mmap(fh.fileno(), 4096):   # mapped by this live process
        assert shm.sweep_orphans_since(before, str(tmp_path)) == [orphan.name]
        assert held.exists() and old.exists() and not orphan.exists()
    assert shm.sweep_orphans_since(before, str(tmp_path)) == [held.name]   # no longer mapped: an orphan
    assert old.exists()


def test_the_doctors_end_of_run_sweep_is_the_pipelines(monkeypatch):
    from feedlab.doctor import script_watch as W

    seen = []
    monkeypatch.setattr(W, "sweep_orphans_since", lambda before: seen.append(before) or ["x"])
    assert W._sweep_torch_shm() == ["x"] and seen == [W._shm_before]
