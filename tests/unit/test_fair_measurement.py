"""Issue 20's measurement side: steady epochs by construction and their labels, the GPU-busy
meter (CUDA events, fake here) and NVML's sample window (fake NVML), the GPU workload choice
(fake timer), the working-tree hash of the fingerprint, CPU saturation from the process tree."""

from __future__ import annotations

import subprocess

import numpy as np
import pandas as pd
import pytest
import torch
from torch.utils.data import Dataset

from feedlab import gpu_busy, monitor, pipeline, timing
from feedlab.experiments import loader_grid as G
from feedlab.experiments import worker_scaling as W
from feedlab.pipeline import PipelineSpec
from feedlab.timing import EpochTiming

# ------------------------------------------------------------------ steady sizing and labels


def test_warmup_and_steady_batches_follow_the_setting():
    assert pipeline.warmup_batches(PipelineSpec(batch_size=8, num_workers=0)) == 1
    assert pipeline.warmup_batches(PipelineSpec(batch_size=8, num_workers=16)) == 16 * 2 + 1
    assert pipeline.warmup_batches(PipelineSpec(batch_size=8, num_workers=3, prefetch_factor=4)) == 13
    assert pipeline.steady_batches(PipelineSpec(batch_size=128, num_workers=16), 50) == 33 + 50
    with pytest.raises(ValueError, match="min_timed_batches"):
        pipeline.steady_batches(PipelineSpec(batch_size=8), 0)


def test_epoch_batches_sizes_by_samples_batches_or_the_steady_floor():
    s16 = PipelineSpec(batch_size=128, num_workers=16)
    # issue 20's case: 768 samples at b128 were 6 batches, fewer than 16 workers' prefetch
    assert G.epoch_batches(s16, max_samples=768) == 6
    assert G.epoch_batches(s16, max_samples=768, min_timed_batches=50) == 83
    assert G.epoch_batches(s16, min_timed_batches=50) == 83            # no sample count: the setting decides
    assert G.epoch_batches(s16, max_samples=128 * 200, min_timed_batches=50) == 200  # a floor, not a cap
    assert G.epoch_batches(PipelineSpec(batch_size=8), max_batches=3) == 3
    assert G.epoch_batches(PipelineSpec(batch_size=8)) is None           # the whole set once


def _et(n_batches, first=1.0, each=0.1, bs=10):
    waits = [first] + [each] * (n_batches - 1)
    ph = np.zeros((n_batches, 4))
    ph[:, 0] = waits
    return EpochTiming(phases_s=ph, batch_sizes=np.full(n_batches, bs), wall_s=sum(waits), first_batch_s=first)


def test_rate_of_labels_and_never_falls_back_silently():
    rate, kind, timed = pipeline.rate_of(_et(60), warmup=5, min_timed=50)
    assert kind == "steady" and timed == 55 and rate == pytest.approx(100.0)
    rate, kind, timed = pipeline.rate_of(_et(54), warmup=5, min_timed=50)
    assert kind == "startup_inclusive" and timed == 49
    assert rate == pytest.approx(_et(54).samples_per_s)                 # the whole epoch's, labelled
    assert pipeline.steady_rate(_et(54), skip=5, min_timed=50) is None  # the old helper: no silent mix
    assert pipeline.steady_rate(_et(6), skip=5) == pytest.approx(100.0)
    assert pipeline.rate_of(_et(1), warmup=0, min_timed=1)[1] == "steady"
    empty = EpochTiming(np.zeros((0, 4)), np.zeros(0, dtype=int), 0.0, float("nan"))
    assert pipeline.rate_of(empty, 1) == (None, "startup_inclusive", 0)


class _Idx(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor([i]), torch.tensor([i])


def test_cycling_loader_runs_whole_shuffled_passes_over_a_small_set():
    ds = _Idx(10)
    s = PipelineSpec(batch_size=4, collate="totensor")
    plain = G.cycling_loader(ds, s, batches=2)
    assert len(plain) == 3                                   # fits: the ordinary loader
    ld = G.cycling_loader(ds, s, batches=10)                 # 40 samples from a set of 10
    seen = torch.cat([torch.as_tensor(x) for x, _ in ld]).flatten().tolist()
    assert len(seen) == 40
    for p in range(4):                                       # each pass is a permutation of the set
        assert sorted(seen[10 * p:10 * p + 10]) == list(range(10))
    assert seen[:10] != seen[10:20]


def test_run_grid_labels_every_row_and_sizes_steady_epochs(sr_root):
    spec = PipelineSpec(format="png", batch_size=4, num_workers=1, model="none")  # warm-up 1×2+1 = 3
    df = G.run_grid(sr_root, [spec], repeats=1, warmup=0, min_timed_batches=12, device="cpu").frame()
    assert {"rate_kind", "timed_batches", "warmup_batches"} <= set(df.columns)
    assert set(df["rate_kind"]) == {"steady"} and set(df["warmup_batches"]) == {3} and set(df["timed_batches"]) == {12}
    assert df[df.metric == "batches"]["value"].iloc[0] == 15
    assert "gpu_busy" not in set(df.metric)                  # no GPU: not measured, no row
    assert "cpu_system_saturation" in set(df.metric) or "cpu_saturation" not in set(df.metric)
    short = G.run_grid(sr_root, [spec], repeats=1, warmup=0, max_batches=4, device="cpu").frame()
    assert set(short["rate_kind"]) == {"startup_inclusive"} and set(short["timed_batches"]) == {1}
    rate = short[short.metric == "steady_samples_per_s"]["value"].iloc[0]
    assert rate == pytest.approx(short[short.metric == "samples_per_s"]["value"].iloc[0])  # labelled whole-epoch


def test_run_grid_time_budget_keeps_the_steady_floor(sr_root):
    spec = PipelineSpec(format="png", batch_size=4, num_workers=0, model="none")
    df = G.run_grid(sr_root, [spec], repeats=1, warmup=0, time_budget_s=1e-9, device="cpu").frame()
    assert df[df.metric == "batches"]["value"].iloc[0] == 1 + G.BUDGET_MIN_TIMED
    assert set(df["rate_kind"]) == {"steady"}
    with pytest.raises(ValueError, match="time_budget_s"):
        G.run_grid(sr_root, [spec], time_budget_s=0, device="cpu")


def _frame(kinds):
    return pd.DataFrame({"metric": "steady_samples_per_s", "value": [100.0 + i for i in range(len(kinds))],
                         "batch_size": [8 * (i + 1) for i in range(len(kinds))], "num_workers": 2,
                         "rate_kind": kinds, "timed_batches": [60 if k == "steady" else 2 for k in kinds],
                         "repeat": 0, "unit": "samples/s", "experiment": "x", "variant": "v"})


def test_plots_and_readings_use_steady_rows_only():
    mixed = _frame(["steady", "startup_inclusive"])
    assert list(G.steady_rows(mixed)["rate_kind"]) == ["steady"]
    assert list(W.ms_per_sample(mixed)["batch_size"]) == [8]            # the start-up row dropped
    assert list(G.metric_summary(mixed, "steady_samples_per_s", ["batch_size"])["batch_size"]) == [8]
    assert "left out as start-up inclusive" in G.rate_kind_note(mixed) and "batch_size=16" in G.rate_kind_note(mixed)
    smoke = _frame(["startup_inclusive", "startup_inclusive"])
    assert len(W.ms_per_sample(smoke)) == 2 and set(W.ms_per_sample(smoke)["rate_kind"]) == {"startup_inclusive"}
    assert "START-UP INCLUSIVE" in G.rate_kind_note(smoke)
    assert G.rate_kind_note(_frame(["steady"])).startswith("rates: steady (≥ 60 timed batches")
    old = _frame(["steady"]).drop(columns=["rate_kind"])              # committed results before the column
    assert len(G.steady_rows(old)) == 1 and "unlabelled" in G.rate_kind_note(old)


# ------------------------------------------------------------------ GPU busy meter (fake CUDA)


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class _Stream:
    """A fake CUDA stream: an event records when the queued work before it finishes."""

    def __init__(self, clock):
        self.clock = clock
        self.done_at = 0.0
        self.syncs = 0

    def queue(self, seconds):
        self.done_at = max(self.done_at, self.clock.t) + seconds

    def event(self):
        stream = self

        class Ev:
            def record(self):
                self.t = max(stream.done_at, stream.clock.t)

            def elapsed_time(self, other):
                return 1e3 * (other.t - self.t)

        return Ev()

    def sync(self):
        self.syncs += 1
        self.clock.t = max(self.clock.t, self.done_at)


def test_busy_meter_sums_gpu_time_over_the_loop_and_syncs_once():
    clock = _Clock()
    gpu = _Stream(clock)
    m = gpu_busy.BusyMeter("cuda", event=gpu.event, sync=gpu.sync, clock=clock)
    m.start_window()
    for i in range(10):
        clock.t += 0.3 if i < 2 else 0.1       # waiting for data (the first two: start-up)
        m.step_begin()
        gpu.queue(0.1)                         # the step's device work, queued asynchronously
        clock.t += 0.001                       # launching it costs the host little
        m.step_end()
    r = m.end_window(skip_steps=2)
    assert gpu.syncs == 1                      # synchronised once, at the end of the window
    assert r["steps"] == 10 and r["gpu_step_s"] == pytest.approx(0.1)
    assert r["gpu_busy"] == pytest.approx(1.0 / r["window_s"])
    assert r["gpu_busy"] < r["gpu_busy_steady"] <= 1.0 + 1e-9  # start-up left out of the steady window
    assert m.end_window()["steps"] == 10 and gpu.syncs == 1     # reading again does not sync again


def test_busy_meter_reads_nan_off_cuda_and_run_epoch_drives_it():
    cpu = gpu_busy.BusyMeter("cpu")
    et = timing.run_epoch([torch.zeros(2, 3)] * 4, None, "cpu", busy=cpu)
    r = cpu.end_window()
    assert et.batches == 4 and np.isnan(r["gpu_busy"]) and r["steps"] == 0
    clock = _Clock()
    gpu = _Stream(clock)
    fake = gpu_busy.BusyMeter("cuda", event=gpu.event, sync=gpu.sync, clock=clock)
    timing.run_epoch([torch.zeros(2, 3)] * 5, None, "cpu", busy=fake)  # the CUDA path's control flow
    assert fake.end_window()["steps"] == 5 and gpu.syncs == 1
    with pytest.raises(RuntimeError):
        gpu_busy.BusyMeter("cpu").end_window()


def test_run_epoch_time_budget_stops_after_the_fewest_batches():
    et = timing.run_epoch([torch.zeros(1)] * 100, None, "cpu", time_budget_s=0.0, min_batches=7)
    assert et.batches == 7
    assert timing.run_epoch([torch.zeros(1)] * 5, None, "cpu", time_budget_s=0.0, min_batches=7).batches == 5


# ------------------------------------------------------------------ NVML sample window (fake NVML)


class _FakeNvml:
    NVML_GPU_UTILIZATION_SAMPLES = 1

    class NVMLError_NotFound(Exception):
        pass

    def __init__(self, samples):
        self.samples = list(samples)   # [(timestamp µs, value)]
        self.calls = []

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"gpu{i}"

    def nvmlDeviceGetSamples(self, handle, kind, last_seen):
        assert kind == self.NVML_GPU_UTILIZATION_SAMPLES
        self.calls.append(last_seen)
        got = [s for s in self.samples if s[0] > last_seen]
        if not got:
            raise self.NVMLError_NotFound()  # as pynvml does when no sample is newer

        class V:
            def __init__(self, v):
                self.uiVal = v

        class S:
            def __init__(self, t, v):
                self.timeStamp, self.sampleValue = t, V(v)

        return 0, [S(t, v) for t, v in got]


def test_nvml_window_reads_only_its_own_samples_over_ten_periods():
    clock = _Clock()
    old = [(1_000_000 + 166_667 * i, 0) for i in range(5)]
    nv = _FakeNvml(old)
    with gpu_busy.NvmlWindow("cuda", nvml=nv, clock=clock) as w:
        t0 = old[-1][0]
        nv.samples += [(t0 + 166_667 * (i + 1), 80) for i in range(15)]  # 15 periods of 1/6 s
        clock.t += 2.5
    r = w.summary()
    assert nv.calls == [0, old[-1][0]]                   # last-seen timestamp: the old samples are not read
    assert r["nvml_util"] == pytest.approx(80.0) and r["nvml_samples"] == 15
    assert r["nvml_period_s"] == pytest.approx(0.166667, rel=1e-3)


def test_nvml_window_shorter_than_ten_periods_is_not_measured():
    clock = _Clock()
    nv = _FakeNvml([(0, 0)])
    with gpu_busy.NvmlWindow("cuda", nvml=nv, clock=clock) as w:
        nv.samples += [(1_000_000 * (i + 1), 50) for i in range(3)]  # 1 s period
        clock.t += 3.0
    r = w.summary()
    assert np.isnan(r["nvml_util"])
    assert r["nvml_note"] == "not measured: window 3.00 s < 10 sample periods (10.00 s)"
    with gpu_busy.NvmlWindow("cuda", nvml=_FakeNvml([(5, 1)]), clock=clock) as w2:
        clock.t += 30                                     # no new sample at all
    assert np.isnan(w2.summary()["nvml_util"]) and "not measured" in w2.summary()["nvml_note"]


def test_nvml_window_off_cuda_or_without_nvml_says_why():
    w = gpu_busy.NvmlWindow("cpu")
    with w:
        pass
    assert np.isnan(w.summary()["nvml_util"]) and w.summary()["nvml_note"] == "not measured: no CUDA device"

    class Broken:
        def nvmlDeviceGetHandleByIndex(self, i):
            raise RuntimeError("driver not loaded")

    b = gpu_busy.NvmlWindow("cuda", nvml=Broken())
    with b:
        pass
    assert "NVML unavailable" in b.summary()["nvml_note"]


# ------------------------------------------------------------------ GPU workload choice (fake timer)


def test_choose_gpu_workload_takes_the_first_gpu_bound_step():
    steps = {"srcnn": 0.007, "srcnn_wide": 0.060, "bigger": 1.0}
    asked = []

    def step_s(name):
        asked.append(name)
        return steps[name]

    out = G.choose_gpu_workload(["srcnn", "srcnn_wide", "bigger"], step_s, loader_batch_s=0.020)
    assert out["model"] == "srcnn_wide" and out["gpu_bound"] and asked == ["srcnn", "srcnn_wide"]
    assert "srcnn_wide" in out["reading"] and "GPU-bound" in out["reading"] and "20.00 ms" in out["reading"]
    none = G.choose_gpu_workload(["srcnn", "srcnn_wide"], steps.get, loader_batch_s=0.5)
    assert none["model"] == "srcnn_wide" and not none["gpu_bound"] and "NOT GPU-bound" in none["reading"]
    with pytest.raises(ValueError):
        G.choose_gpu_workload([], steps.get, 0.1)
    assert "srcnn_wide" in pipeline.MODEL_VARIANTS


def test_measure_step_s_times_a_real_step_on_cpu():
    batch = (torch.zeros(2, 3, 8, 8, dtype=torch.uint8), torch.zeros(2, 3, 16, 16, dtype=torch.uint8))
    assert G.measure_step_s("srcnn_small", batch, "cpu", steps=2) > 0


# ------------------------------------------------------------------ provenance: the working tree's hash


def _git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def test_tree_hash_names_the_code_even_when_dirty(tmp_path):
    from feedlab.fingerprint import fingerprint_line, git_state, tree_hash

    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@t")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", "a.py")
    _git(tmp_path, "commit", "-qm", "one")
    clean = git_state(tmp_path)
    assert clean["dirty"] is False and len(clean["tree"]) == 16
    assert tree_hash(tmp_path) == clean["tree"]                        # stable
    (tmp_path / "a.py").write_text("x = 2\n")
    edit = git_state(tmp_path)
    assert edit["dirty"] and edit["commit"] == clean["commit"] and edit["tree"] != clean["tree"]
    (tmp_path / "b.py").write_text("y = 1\n")                          # an untracked source file
    more = tree_hash(tmp_path)
    assert more != edit["tree"]
    (tmp_path / "b.py").write_text("y = 2\n")
    assert tree_hash(tmp_path) != more                                 # its content counts, not only its name
    (tmp_path / "b.py").unlink()
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "r.csv").write_text("1\n")                 # the run's own outputs do not
    assert tree_hash(tmp_path) == edit["tree"]
    (tmp_path / "a.py").write_text("x = 1\n")
    assert tree_hash(tmp_path) == clean["tree"]                        # same code, same hash
    fp = {"git": dict(edit), "gpus": []}
    assert f"{edit['commit'][:8]}+dirty:{edit['tree'][:8]}" in fingerprint_line(fp)
    assert tree_hash(tmp_path / "nowhere") is None


# ------------------------------------------------------------------ CPU saturation: the process tree


def test_cpu_saturation_is_the_loader_process_tree_not_the_machine(monkeypatch):
    monkeypatch.setattr(monitor, "usable_cores", lambda: 2)
    m = monitor.CpuMonitor()
    # psutil's system figure is 0..100 over all cores; the tree's is 100 per busy core
    m.samples = [(0.0, 100.0, 60.0), (0.1, 100.0, 64.0)]   # the machine full, the loader 0.62 cores
    s = m.summary()
    assert s["cpu_saturation"] == pytest.approx(0.31)
    assert s["cpu_system_saturation"] == pytest.approx(1.0)
    assert s["process_tree_cpu_percent_mean"] == pytest.approx(62.0)
    empty = monitor.CpuMonitor().summary()
    assert np.isnan(empty["cpu_saturation"]) and np.isnan(empty["cpu_system_saturation"])


def test_label_rate_kinds_classifies_results_committed_without_the_columns():
    rows = []
    for w, pf, batches in ((16, 2, 4), (16, 2, 64), (2, 2, 60), (0, 0, 51), (0, 0, 50)):
        for metric, value in (("batches", batches), ("steady_samples_per_s", 100.0)):
            rows.append({"experiment": "batch_size_table", "variant": f"w{w}_{batches}", "num_workers": w, "batch_size": 128,
                         "prefetch_factor": pf, "model": "srcnn", "repeat": 0, "metric": metric, "value": value})
    rows.append({"experiment": "sleep_timeline", "variant": "w1", "num_workers": 1, "repeat": 0,
                 "metric": "wall_s", "value": 1.0})
    df = pd.DataFrame(rows)
    out = G.label_rate_kinds(df)
    assert len(out) == len(df)
    r = out[out.metric == "steady_samples_per_s"].set_index("variant")
    got = list(zip(r["rate_kind"], r["timed_batches"], r["warmup_batches"], r["legacy_whole_epoch"]))
    assert got == [("startup_inclusive", 0, 33, True),    # 4 batches, 16 workers: first-batch latency
                   ("startup_inclusive", 31, 33, False),  # a post-prefetch rate, but over 31 batches
                   ("steady", 55, 5, False), ("steady", 50, 1, False), ("startup_inclusive", 49, 1, False)]
    assert out[out.metric == "wall_s"]["rate_kind"].isna().all()   # not a loader-grid row
    labelled = out.assign(rate_kind="steady")
    assert set(G.label_rate_kinds(labelled)["rate_kind"]) == {"steady"}  # existing labels are kept


def test_gpu_workload_measures_the_loader_and_the_candidates(sr_root):
    """The CUDA branch of 01/09 (a GPU-bound step chosen by measuring), run on the CPU."""
    out = G.gpu_workload(sr_root, "cpu", batch_size=4, num_workers=0, candidates=("srcnn_small", "srcnn"),
                         min_timed_batches=3)
    assert out["model"] in ("srcnn_small", "srcnn") and out["loader_batch_s"] > 0
    assert out["loader_rate_kind"] == "steady" and out["model"] in out["reading"]
    assert set(out["step_s"]) <= {"srcnn_small", "srcnn"} and all(v > 0 for v in out["step_s"].values())


def test_a_copy_with_an_older_git_is_named_by_the_commit_it_was_sent_from(tmp_path):
    """The GPU machine's copy carries an older .git with this commit's files over it: the carried
    .whl/SOURCE.json names the commit where the files hash the same, and only there."""
    import shutil
    import subprocess

    from feedlab.fingerprint import content_hash, fingerprint_line, git_state, write_source

    def git(root, *a):
        subprocess.run(["git", *a], cwd=root, check=True, capture_output=True)

    src = tmp_path / "main"
    src.mkdir()
    (src / ".gitignore").write_text("/.whl/\n")
    (src / "old.py").write_text("x = 1\n")
    git(src, "init", "-q")
    git(src, "-c", "user.email=a@b", "-c", "user.name=a", "add", ".")
    git(src, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "old")
    old_git = tmp_path / "old.git"
    shutil.copytree(src / ".git", old_git)
    (src / "old.py").unlink()
    (src / "new.py").write_text("y = 2\n")
    git(src, "-c", "user.email=a@b", "-c", "user.name=a", "add", "-A")
    git(src, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "new")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True).stdout.strip()
    write_source(src)

    dev = tmp_path / "device"                         # the new files, the old .git, the carried .whl
    shutil.copytree(src, dev, ignore=shutil.ignore_patterns(".git"))
    shutil.copytree(old_git, dev / ".git")
    assert content_hash(dev) == content_hash(src)
    st = git_state(dev)
    assert st["commit"] == head and st["dirty"] is False and st["sent"] is True and st["copy_head"] != head
    assert head[:8] in fingerprint_line({"git": st}) and "dirty" not in fingerprint_line({"git": st})

    (dev / "new.py").write_text("y = 3\n")            # the code that ran is not the commit's: say so
    st = git_state(dev)
    assert st["dirty"] is True and st["commit"] != head and "sent" not in st

    (src / "new.py").write_text("edited\n")           # a dirty tree is not a commit to send
    with pytest.raises(ValueError, match="commit first"):
        write_source(src)
