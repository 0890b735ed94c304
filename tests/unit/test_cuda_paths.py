"""The CUDA-only branches, exercised on the CPU.

CI has no GPU, so each branch that only runs with CUDA gets a test of its control
flow here: with a fake asynchronous device and a fake clock where timing is the
point, or by asking the CUDA path to run on the CPU where the loop is the point.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from feedlab import timing


class _Squares(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.full((3, 4, 4), i % 256, dtype=torch.uint8), torch.tensor(i)


def test_run_epoch_max_batches_on_a_persistent_loader_many_times():
    """03's crash: shutting down a persistent loader's iterator by hand closed the queues
    that the loader reuses at the next iter() (ValueError: Queue ... is closed)."""
    loader = DataLoader(_Squares(), batch_size=4, num_workers=2, persistent_workers=True)
    seen = []
    for _ in range(4):
        et = timing.run_epoch(loader, None, "cpu", max_batches=3)
        seen.append(et.batches)
    assert seen == [3, 3, 3, 3]
    full = timing.run_epoch(loader, None, "cpu")  # an epoch to the end still works after
    assert full.samples == 64
    timing.close_iterator(loader, loader._iterator, final=True)
    assert loader._iterator is None


def test_close_iterator_stops_a_non_persistent_iterator():
    loader = DataLoader(_Squares(), batch_size=4, num_workers=2)
    it = iter(loader)
    next(it)
    timing.close_iterator(loader, it)
    assert it._shutdown and not any(w.is_alive() for w in it._workers)


class _FakeDevice:
    """An asynchronous device: a call queues ``cost`` seconds of work and returns at once;
    the clock moves only when work is waited for (synchronise) or done on the host."""

    def __init__(self, cost: float, queue_cost: float = 1e-6):
        self.now = 0.0
        self.pending = 0.0
        self.cost = cost
        self.queue_cost = queue_cost
        self.calls = 0

    def clock(self):
        return self.now

    def call(self):
        self.calls += 1
        self.pending += self.cost
        self.now += self.queue_cost

    def sync(self, device):
        if device is not None and str(device).startswith("cuda"):
            self.now += self.pending
            self.pending = 0.0


@pytest.fixture
def fake_device(monkeypatch):
    dev = _FakeDevice(cost=0.010)
    monkeypatch.setattr(timing, "perf_counter", dev.clock)
    monkeypatch.setattr(timing, "sync_device", dev.sync)
    return dev


def test_autorange_waits_for_asynchronous_work(fake_device):
    # 10 ms of device work per call: 8 calls pass 50 ms. Unsynchronised, only the
    # 1 µs of queuing was timed and the count ran up to the cap.
    n = timing.autorange_number(fake_device.call, min_time_s=0.05, max_number=100_000, device="cuda")
    assert n == 8
    assert fake_device.calls == 1 + 2 + 4 + 8


def test_time_callable_synchronises_each_round(fake_device):
    secs = timing.time_callable(fake_device.call, warmup=1, repeats=3, number=4, device="cuda")
    assert secs == pytest.approx([0.010 + 1e-6] * 3)


def test_print_overhead_loop_waits_for_queued_steps(fake_device, monkeypatch):
    """04's loop on a GPU: steps only queue work; the wall must include it (sync at both ends)."""
    from feedlab.experiments import print_overhead as po

    monkeypatch.setattr(po.time, "perf_counter", fake_device.clock)
    secs = po.run_loop("none", fake_device.call, batches=5, device="cuda")
    assert secs == pytest.approx(0.010 + 1e-6)
    assert fake_device.pending == 0.0


def test_autorange_honours_its_cap():
    # a call costing nothing would double forever: the cap is the count, not the next power of 2
    assert timing.autorange_number(lambda: None, min_time_s=60.0, max_number=10_000) == 10_000
    assert timing.autorange_number(lambda: None, min_time_s=60.0, max_number=1) == 1
    with pytest.raises(ValueError):
        timing.autorange_number(lambda: None, max_number=0)


def test_pinned_rounds_pass_the_device_to_autorange(fake_device):
    from feedlab.experiments import pinned_memory_by_input_size as pm

    secs = pm._rounds(fake_device.call, repeats=2, warmup=0, device="cuda", min_round_s=0.02)
    assert len(secs) == 2 and secs[0] == pytest.approx(0.010 + 1e-6)


def test_loader_steps_loop_runs_on_cpu_when_asked():
    from feedlab.experiments.pinned_memory_by_input_size import loader_steps

    res, why = loader_steps([8], [4], num_workers=2, batches=3, repeats=2, device="cpu",
                            model="srcnn", allow_cpu=True)
    assert why == ""
    df = res.frame()
    assert set(df["variant"]) == {"pageable", "pinned"}
    assert len(df[df.metric == "step_ms"]) == 2 * 2
    assert (df[df.metric == "samples_per_s"]["value"] > 0).all()
    assert set(df["order"]) == {"sequential"} and set(df["pixel_error"]) == {"not applicable"}   # issue 45
    assert set(df["timed_batches"]) == {3} and (df["window_s"] > 0).all()
    res, why = loader_steps([8], [4], device="cpu")
    assert len(res) == 0 and "no CUDA" in why


# ---- the other CUDA-only branches: nvJPEG (06), GPU monitor (01, 09), pin_memory (09),
# ---- CUDA-event phase timing (every loop on a GPU)

def test_nvjpeg_measurement_flow_without_a_gpu(monkeypatch):
    """06's nvJPEG path: the batching, the synchronised timing and the rows, with the
    decoder run on the CPU in place of the GPU."""
    import numpy as np

    from feedlab import decode
    from feedlab.experiments import decode_backends as db

    class _Info:
        available, reason = True, ""

    monkeypatch.setattr(decode, "available_backends", lambda: {"cuda": _Info()})
    real = decode.decode_cuda_batch
    calls = []

    def on_cpu(datas, device="cuda"):
        calls.append(len(datas))
        return real(datas, device="cpu")  # torchvision's decode_jpeg, on the CPU

    monkeypatch.setattr(decode, "decode_cuda_batch", on_cpu)
    jpeg = db._encode(np.zeros((16, 16, 3), np.uint8), "jpeg")
    st = db.ImageSet("jpeg_16", "jpeg", [jpeg] * 10, 16, 256.0)
    res, why = db.measure_cuda(st, repeats=2, warmup=0, batch=4, device="cpu")
    assert why == ""
    df = res.frame()
    assert set(df["variant"]) == {"cuda"} and set(df["op"]) == {"decode_batch"} and (df["value"] > 0).all()
    assert calls[:3] == [4, 4, 2]  # batches of 4, the remainder last


def test_gpu_monitor_reads_nvml_or_nvidia_smi(monkeypatch):
    import subprocess

    from feedlab import monitor

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "utilization", lambda device=None: 42)
    m = monitor.GpuMonitor(interval=0.01)
    assert m.available and m._how == "nvml"
    with m:
        import time
        time.sleep(0.05)
    s = m.summary()
    assert s["gpu_available"] and s["gpu_util_mean"] == 42.0

    def no_nvml(device=None):
        raise RuntimeError("pynvml missing")

    class _Out:
        stdout = "73\n"

    monkeypatch.setattr(torch.cuda, "utilization", no_nvml)
    monkeypatch.setattr(monitor.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(monitor.subprocess, "run", lambda *a, **k: _Out())
    m = monitor.GpuMonitor(interval=0.01)
    assert m._how == "smi" and m._sample()[1] == 73.0
    monkeypatch.setattr(monitor.shutil, "which", lambda name: None)
    m = monitor.GpuMonitor()
    assert not m.available and "nvidia-smi" in m.reason
    assert subprocess  # the real module is untouched outside this test


def test_phase_timer_cuda_events_control_flow(monkeypatch):
    """On CUDA the device phases come from events read once at finish(): fake events
    with known times stand in for the GPU."""
    clock = iter(range(1000))

    class _Event:
        def __init__(self):
            self.t = None

        def record(self):
            self.t = next(clock)

        def elapsed_time(self, other):  # milliseconds, as torch's
            return float(other.t - self.t) * 1000.0

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    timer = timing.PhaseTimer("cuda:0", capacity=1)
    timer._Event = _Event
    for _ in range(3):  # grows past capacity
        timer.start_batch()
        for phase in timing.PHASES:
            timer.mark(phase)
        timer.end_batch()
    out = timer.finish()
    assert out.shape == (3, 4)
    # data_wait from the host clock; h2d, forward, backward one fake second each
    assert (out[:, 1:] == 1.0).all()


def test_batch_size_table_pins_with_cuda_only(monkeypatch):
    """09 turns pin_memory on with CUDA (as the write-up did) and off without; the grid
    refuses pin_memory on a CPU (DataLoader would ignore it and the label would lie)."""
    from feedlab.experiments import worker_scaling
    from feedlab.experiments.loader_grid import PipelineSpec, applicable

    seen = {}

    def capture(root, settings, **kw):
        seen[kw["device"]] = {s.pin_memory for s in settings}
        return None

    monkeypatch.setattr(worker_scaling, "run_grid", capture)
    worker_scaling.batch_size_table("root", [8, 16], [2], device="cuda")
    worker_scaling.batch_size_table("root", [8, 16], [2], device="cpu")
    assert seen == {"cuda": {True}, "cpu": {False}}
    ok, why = applicable(PipelineSpec(batch_size=4, num_workers=2, pin_memory=True), "cpu")
    assert not ok and "CUDA" in why


def test_run_epoch_trains_sr_sets_of_any_scale_on_mse(monkeypatch):
    """A scale-4 pair through run_epoch with SRCNN: the output is asked at the target's size
    and the loss is the MSE against it (not a fallback mean over a wrong-sized output)."""
    from feedlab.models import make_model

    calls = []
    real = torch.nn.functional.mse_loss
    monkeypatch.setattr(torch.nn.functional, "mse_loss", lambda a, b: calls.append(a.shape == b.shape) or real(a, b))
    x = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
    y = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    net = make_model("srcnn", scale=2)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    et = timing.run_epoch([(x, y)] * 3, net, "cpu", opt)
    assert et.batches == 3 and calls == [True, True, True]


class _Fails(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        if i == 5:
            raise ValueError("sample 5 is bad")
        return torch.zeros(2), torch.tensor(i)


def test_loops_feedlab_owns_stop_their_workers_when_a_worker_raises():
    """After a worker's error the loop's workers are gone at once (no join timeouts later)."""
    import multiprocessing as mp

    from feedlab.experiments.storage_formats import read_epoch

    loader = DataLoader(_Fails(), batch_size=2, num_workers=2)
    with pytest.raises(ValueError, match="sample 5"):
        read_epoch(loader)
    assert not [p for p in mp.active_children() if p.is_alive()]
