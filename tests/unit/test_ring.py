"""The ring loader: ordered, exactly-once delivery, clean shutdown, nothing left behind."""

import glob
import multiprocessing as mp
import os
import time

import numpy as np
import pytest

from feedlab.pipeline.loaders import index_batches
from feedlab.pipeline.ring import RingLoader, RingWorkerError, check_shm

LR, HR = (2, 2, 3), (4, 4, 3)


def _sample(i: int):
    lr = np.full(LR, i % 251, np.uint8)
    lr.reshape(-1)[:4] = np.frombuffer(np.uint32(i).tobytes(), np.uint8)
    hr = np.full(HR, (i * 7) % 253, np.uint8)
    return lr, hr


def _ids(lr) -> list[int]:
    flat = lr.numpy().reshape(len(lr), -1)[:, :4]
    return np.ascontiguousarray(flat).view(np.uint32).reshape(-1).tolist()


class Samples:
    """Per-sample reads only (no read_batch): the ring copies each sample into its slot."""

    lr_shape, hr_shape = LR, HR

    def __init__(self, n: int, fail_at: int = -1, die_at: int = -1):
        self.n, self.fail_at, self.die_at = n, fail_at, die_at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fail_at:
            raise ValueError(f"sample {i} is broken on purpose")
        if i == self.die_at:
            os._exit(3)
        return _sample(i)


class Batched(Samples):
    """A ``batched`` format: read_batch fills the slot it is given."""

    def read_batch(self, indices, out=None):
        lr, hr = out
        for k, i in enumerate(indices):
            lr[k], hr[k] = self[i]
        return lr[:len(indices)], hr[:len(indices)]


def _leftovers():
    return glob.glob("/dev/shm/feedlab-ring-*")


def _check_epoch(loader, n, bs, epoch, seed=0, drop_last=False):
    want = index_batches(n, bs, True, seed, epoch, drop_last)
    got = []
    for lr, hr in loader:
        ids = _ids(lr)
        got.append(ids)
        for k, i in enumerate(ids):  # the slot holds exactly sample i's bytes
            a, b = _sample(i)
            assert np.array_equal(lr[k].numpy(), a) and np.array_equal(hr[k].numpy(), b)
    assert got == want  # in order, each index once


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("cls", [Samples, Batched])
def test_ordered_exactly_once_over_epochs(workers, cls):
    n, bs = 37, 5
    before = _leftovers()
    with RingLoader(cls(n), bs, num_workers=workers, slots=workers + 2, start_method="fork") as ld:
        for epoch in range(3):
            _check_epoch(ld, n, bs, epoch)
        procs = [p for p in ld._w.procs]
        assert _leftovers() == before  # the ring's name is gone once every worker mapped it
    assert not any(p.is_alive() for p in procs)
    assert _leftovers() == before


def test_spawn_start_method_and_drop_last():
    n, bs = 23, 4
    with RingLoader(Batched(n), bs, num_workers=2, start_method="spawn", drop_last=True) as ld:
        assert len(ld) == 5
        for epoch in range(2):
            _check_epoch(ld, n, bs, epoch, drop_last=True)


def test_leaving_an_epoch_early_keeps_the_next_one_exact():
    n, bs = 40, 4
    with RingLoader(Batched(n), bs, num_workers=2, start_method="fork") as ld:
        for k, _ in enumerate(ld):
            if k == 2:
                break
        _check_epoch(ld, n, bs, 1)


def test_a_slot_is_not_refilled_while_the_consumer_holds_it():
    n, bs = 60, 3
    with RingLoader(Batched(n), bs, num_workers=2, slots=2, start_method="fork") as ld:
        it = iter(ld)
        lr, _ = next(it)
        first = _ids(lr)
        time.sleep(0.2)  # workers had time to overwrite it, were it free
        assert _ids(lr) == first
        rest = [_ids(x) for x, _ in it]
        assert [first, *rest] == index_batches(n, bs, True, 0, 0)


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_worker_error_stops_everything_fast_with_one_line(start):
    before = _leftovers()
    ld = RingLoader(Samples(50, fail_at=17), 4, num_workers=2, start_method=start)
    it = iter(ld)
    procs = list(ld._w.procs)
    t0 = time.monotonic()
    with pytest.raises(RingWorkerError) as exc:
        for _ in it:
            pass
    assert time.monotonic() - t0 < 1.5  # includes reading up to the broken batch
    msg = str(exc.value)
    assert "\n" not in msg and "ValueError: sample 17 is broken on purpose" in msg and "ring worker" in msg
    assert not any(p.is_alive() for p in procs)
    assert ld._w is None and _leftovers() == before


def test_a_worker_that_dies_silently_is_named():
    ld = RingLoader(Samples(40, die_at=9), 4, num_workers=2, start_method="fork")
    with pytest.raises(RingWorkerError, match=r"ring worker \d exited \(code 3\)"):
        list(ld)
    assert ld._w is None


def test_garbage_collected_loader_stops_its_workers():
    import gc

    ld = RingLoader(Batched(20), 4, num_workers=2, start_method="fork")
    next(iter(ld))
    procs = list(ld._w.procs)
    del ld
    gc.collect()
    time.sleep(0.1)
    assert not any(p.is_alive() for p in procs)
    assert not [c for c in mp.active_children() if c.name.startswith("feedlab-ring")]


def test_shm_too_small_is_one_line():
    msg = check_shm(64 << 20, free=8 << 20)
    assert msg and "\n" not in msg and "64 MiB" in msg and "--shm-size" in msg
    assert check_shm(1 << 20, free=8 << 20) is None


def test_pinning_registers_once_and_unregisters_before_unmap():
    calls = []

    class FakeCudart:
        def cudaHostRegister(self, ptr, size, flags):
            calls.append(("reg", ptr, size))
            return 0

        def cudaHostUnregister(self, ptr):
            calls.append(("unreg", ptr))
            return 0

    ld = RingLoader(Batched(12), 4, num_workers=1, pin=True, cudart=FakeCudart(), start_method="fork")
    list(ld)
    list(ld)
    assert ld.pinned and [c[0] for c in calls] == ["reg"] and calls[0][2] == ld.layout.nbytes
    ld.close()
    assert [c[0] for c in calls] == ["reg", "unreg"] and calls[1][1] == calls[0][1]


def test_bad_arguments_are_one_line():
    with pytest.raises(ValueError, match="num_workers must be >= 1"):
        RingLoader(Batched(4), 2, num_workers=0)


@pytest.mark.parametrize("start", ["fork", "spawn"])
@pytest.mark.parametrize("compress", [False, True])
def test_a_real_lmdb_store_through_the_ring(tmp_path, start, compress):
    from feedlab import formats
    from feedlab.formats import lmdb_store

    samples = [_sample(i) for i in range(21)]
    lmdb_store.write(tmp_path, samples, compress=compress)
    ds = formats.open_dataset(tmp_path, "lmdb" if compress else "lmdb_raw")
    ds[3]  # the parent has the env open: the workers must still open their own
    with RingLoader(ds, 4, num_workers=2, start_method=start) as ld:
        for epoch in range(2):
            _check_epoch(ld, 21, 4, epoch)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("cls", [Samples, Batched])
def test_threads_kind_ordered_exactly_once(threads, cls):
    from feedlab.pipeline.loaders import ThreadLoader

    ld = ThreadLoader(cls(29), 4, num_threads=threads)
    for epoch in range(3):
        _check_epoch(ld, 29, 4, epoch)


def test_threads_kind_raises_the_readers_error_and_leaves_no_thread():
    import threading

    from feedlab.pipeline.loaders import ThreadLoader

    with pytest.raises(ValueError, match="sample 11 is broken"):
        list(ThreadLoader(Samples(30, fail_at=11), 4, num_threads=2))
    time.sleep(0.05)
    assert not [t for t in threading.enumerate() if t.name.startswith("feedlab-threads")]


def test_workers_of_a_main_process_killed_outright_exit_too(tmp_path):
    import signal
    import subprocess
    import sys

    before = _leftovers()
    script = tmp_path / "victim.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path[:0] = {sys.path!r}\n"
        "from test_ring import Batched\n"
        "from feedlab.pipeline.ring import RingLoader\n"
        "ld = RingLoader(Batched(40), 4, num_workers=2, start_method='fork')\n"
        "it = iter(ld); next(it)\n"
        "print(' '.join(str(p.pid) for p in ld._w.procs), flush=True)\n"
        "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    pids = [int(x) for x in proc.stdout.readline().split()]
    assert len(pids) == 2
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 5
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in pids if os.path.exists(f"/proc/{p}") and "Z" not in _state(p)]
    assert not alive
    assert _leftovers() == before


def _state(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_the_doctors_ring_probe_on_image_data_says_why_it_is_not_run():
    """Every --data report on an image folder carried 'ring probe: ValueError: too many values to unpack':
    one image a sample has no (lr, hr) pair for the ring; the probe is not run, and says so."""
    import os
    from types import SimpleNamespace

    from feedlab.doctor.measure import Doctor

    before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    for sample, ran in ((np.zeros((16, 16, 3), np.uint8), False), ((np.zeros((16, 16, 3), np.uint8), 3), False),
                        ((np.zeros((4, 4, 3), np.uint8), np.zeros((8, 8, 3), np.uint8)), True)):
        fake = SimpleNamespace(_items=lambda bs, s=sample: [s] * bs, notes=[], table={},
                               effort=SimpleNamespace(repeats=1))
        Doctor.measure_ring(fake, 4)
        if ran:                                                   # a pair of uint8 arrays: measured as before
            assert ("ring_receive", 4) in fake.table and not fake.notes, fake.notes
        else:
            assert fake.table == {} and len(fake.notes) == 1, fake.notes
            note = fake.notes[0]
            assert "Error" not in note and "not run" in note and "(lr, hr)" in note, note
    left = (set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()) - before
    assert not [n for n in left if "feedlab" in n or n.startswith("torch_")], left
