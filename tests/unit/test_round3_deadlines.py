"""Issue 33, round three of "nothing lost, nothing hung": every wait inside one deadline, and a
bad sample is one line. Each command runs in a subprocess of its own session with a timeout (the
deadline of the test); the session's process group is killed if it outlives it, and checked empty
after it ends, so no test leaves a process behind."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from inproc import run_cli

import data_prep
from feedlab import formats as F
from feedlab.errors import DeadlineError, SampleError, deadline
from feedlab.formats._io import read_regular

REPO = Path(__file__).resolve().parents[2]
QUIET = dict(log=lambda _m: None)
LIMIT_S = 150   # the test's own deadline on one command (each ends in seconds when it works)

# Runs `python -m MOD ARGS` after making the store look larger than open_dataset's stat check
# (check_regular_tree looks at the first 10,000 entries; here at 3), and optionally making one
# read never return: a chunk file of zarr's (read by zarr's IO thread) or a batch of the npy store.
DRIVER = '''
import pathlib, runpy, sys, threading
import feedlab.formats._io as io

io.check_regular_tree.__defaults__ = (3,)
mode, mod, *argv = sys.argv[1:]


def stuck():
    print("stuck in a read", file=sys.stderr, flush=True)
    threading.Event().wait()


if mode == "hang-zarr":
    real = pathlib.Path.read_bytes

    def read_bytes(self):
        if "/c/5/" in self.as_posix():
            stuck()
        return real(self)

    pathlib.Path.read_bytes = read_bytes
elif mode == "hang-npy":
    from feedlab import formats as F

    real_batch = F.NpyDataset.read_batch

    def read_batch(self, indices, out=None):
        if 5 in [int(i) for i in indices]:
            stuck()
        return real_batch(self, indices, out=out)

    F.NpyDataset.read_batch = read_batch
sys.argv = [mod, *argv]
runpy.run_module(mod, run_name="__main__", alter_sys=True)
'''


def _env(extra_path: Path | None = None) -> dict:
    parts = [str(REPO / "lib"), str(REPO)] + ([str(extra_path)] if extra_path else [])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(parts), FEEDLAB_PROFILE="smoke")


def _group_gone(pgid: int, wait_s: float = 10.0) -> bool:
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def _run(argv: list[str], *, env=None, cwd=REPO, interrupt_on: str | None = None, preexec=None):
    """Run ``argv`` in a session of its own under :data:`LIMIT_S`; ``interrupt_on``: send one
    SIGINT once that text appears on stderr. Fails the test if it outlives the limit, or if any
    process of its session is left once it ended."""
    def setup():
        signal.signal(signal.SIGINT, signal.SIG_DFL)   # as in a terminal, whatever ran pytest
        if preexec:
            preexec()

    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                         env=env or _env(), start_new_session=True, preexec_fn=setup)
    t0 = time.monotonic()
    try:
        err_head = ""
        if interrupt_on:
            while interrupt_on not in err_head and time.monotonic() - t0 < LIMIT_S:
                line = p.stderr.readline()
                if not line:
                    break
                err_head += line
            time.sleep(0.5)
            p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=max(1.0, LIMIT_S - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        pytest.fail(f"{' '.join(argv[-12:])} still running after {LIMIT_S} s: hung")
    assert _group_gone(p.pid), "a process of the command was left running"
    return p.returncode, out, err_head + err


def _one_line_error(rc: int, err: str) -> str:
    assert rc != 0
    assert "Traceback" not in err and "MemoryError" not in err, err[-3000:]
    errors = [ln for ln in err.splitlines() if ": error: " in ln]
    assert len(errors) == 1, err[-3000:]
    return errors[0]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """Eight pairs; zarr with one sample per chunk (two files a sample), npy and pt."""
    root = tmp_path_factory.mktemp("round3") / "sr"
    data_prep.build_sr(root, 32, 2, 8, seed=0, **QUIET)
    data_prep.pack(root, "zarr,npy,pt", chunk_len=1, **QUIET)
    return root


def _copy(tiny: Path, tmp_path: Path) -> Path:
    root = tmp_path / "set"
    shutil.copytree(tiny, root, symlinks=True)
    return root


def _chunk(root: Path, name: str, c: int) -> Path:
    files = [p for p in (root / "sr.zarr" / name / "c" / str(c)).rglob("*") if p.is_file()]
    assert len(files) == 1, files
    return files[0]


def _driver(tmp_path: Path) -> Path:
    d = tmp_path / "driver.py"
    d.write_text(DRIVER)
    return d


BENCH = ["feedlab.bench", "--format", "zarr", "--num-workers", "0", "--epochs", "1", "--warmup", "0",
         "--batch-size", "2", "--model", "none"]


# ---------------------------------------------------------------- zarr chunks past the stat check
@pytest.mark.parametrize("cmd", ["bench", "verify"])
def test_a_fifo_chunk_past_the_entries_open_dataset_stats_is_one_line(tiny, tmp_path, cmd):
    root = _copy(tiny, tmp_path)
    victim = _chunk(root, "hr", 5)
    victim.unlink()
    os.mkfifo(victim)
    args = ([*BENCH, "--data", str(root), "--timeout", "15"] if cmd == "bench"
            else ["data_prep", "verify", str(root), "--formats", "zarr", "--timeout", "10"])
    rc, _out, err = _run([sys.executable, str(_driver(tmp_path)), "plain", *args])
    assert "FIFO" in err and "chunk 5 of hr" in err and str(victim) in err, err[-2000:]
    if cmd == "bench":
        _one_line_error(rc, err)
    else:
        assert rc == 1 and "Traceback" not in err   # verify's report: the bad sample named, the rest checked


@pytest.mark.parametrize("cmd", ["bench", "verify", "doctor"])
def test_a_zarr_read_that_never_returns_ends_within_the_deadline(tiny, tmp_path, cmd):
    """The read hangs in zarr's IO thread: the deadline fires in the main thread, the error is
    not retried sample by sample without one, and the process exits although that thread is
    still blocked (interpreter exit would join it)."""
    root = _copy(tiny, tmp_path)
    args = {"bench": [*BENCH, "--data", str(root), "--timeout", "3"],
            "verify": ["data_prep", "verify", str(root), "--formats", "zarr", "--timeout", "3"],
            "doctor": ["feedlab.doctor", "--data", str(root), "--format", "zarr", "--max-workers", "0",
                       "--batch-size", "2", "--model", "none", "--repeats", "1", "--deadline", "3"]}[cmd]
    rc, _out, err = _run([sys.executable, str(_driver(tmp_path)), "hang-zarr", *args])
    assert "stuck in a read" in err
    line = _one_line_error(rc, err)
    assert rc == 2 and "no progress in 3 s" in line, line
    assert {"bench": "bench zarr", "verify": "sample 5", "doctor": "doctor --data"}[cmd] in line, line


# ---------------------------------------------------------------- the threads kind
THREADS = ["feedlab.bench", "--format", "npy", "--loader", "threads", "--collate", "fast", "--num-workers", "2",
           "--epochs", "1", "--warmup", "0", "--batch-size", "2", "--model", "none", "--no-verify"]


@pytest.mark.parametrize("how", ["timeout", "ctrl-c"])
def test_the_threads_kind_abandons_a_stuck_reader_and_says_so(tiny, tmp_path, how):
    extra = ["--timeout", "3"] if how == "timeout" else []
    rc, _out, err = _run([sys.executable, str(_driver(tmp_path)), "hang-npy", *THREADS, "--data", str(tiny), *extra],
                         interrupt_on="stuck in a read" if how == "ctrl-c" else None)
    abandoned = [ln for ln in err.splitlines() if "abandoned, not joined" in ln]
    assert len(abandoned) == 1 and "1 reader thread(s) of NpyDataset" in abandoned[0], err[-2000:]
    if how == "timeout":
        assert "no progress in 3 s" in _one_line_error(rc, err)
    else:
        assert rc == 130 and "interrupted" in err and "Traceback" not in err, err[-2000:]


THREADS_UNDER_DEADLINE = '''
import sys, threading
import numpy as np
from feedlab.errors import DeadlineError, deadline
from feedlab.pipeline.loaders import ThreadLoader


class Hangs:
    lr_shape, hr_shape = (4, 4, 3), (8, 8, 3)

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            threading.Event().wait()
        return np.zeros(self.lr_shape, np.uint8), np.zeros(self.hr_shape, np.uint8)


try:
    with deadline(1.0, "a batch of the threads kind"):
        for _ in ThreadLoader(Hangs(), 2, num_threads=2, shuffle=False):
            pass
except DeadlineError as exc:
    print(f"stopped: {exc}", flush=True)
'''


def test_the_threads_kind_under_errors_deadline_stops_without_joining_the_stuck_thread(tmp_path):
    script = tmp_path / "threads.py"
    script.write_text(THREADS_UNDER_DEADLINE)
    rc, out, err = _run([sys.executable, str(script)])
    assert rc == 0 and "stopped: a batch of the threads kind: no progress in 1 s" in out, (out, err)
    assert "abandoned, not joined" in err


# ---------------------------------------------------------------- the doctor on a user's loader
USER_MOD = '''
import time
import torch
from torch.utils.data import DataLoader, Dataset


class Ds(Dataset):
    def __init__(self, len_blocks=False):
        self.len_blocks = len_blocks

    def __len__(self):
        if self.len_blocks:
            time.sleep(3600)
        return 32

    def __getitem__(self, i):
        return torch.full((3, 8, 8), float(i % 5)), i % 2


def make_loader():
    return DataLoader(Ds(), batch_size=8)


def make_len_blocks():
    return DataLoader(Ds(len_blocks=True), batch_size=8)


def make_hangs():
    time.sleep(3600)


def step_hangs(batch):
    time.sleep(3600)
'''


@pytest.mark.parametrize("args,names", [
    (["--loader", "hung3:make_len_blocks"], "your dataset's __len__ (Ds)"),
    (["--loader", "hung3:make_hangs"], "--loader hung3:make_hangs (your make_loader())"),
    (["--loader", "hung3:make_loader", "--step", "hung3:step_hangs"], "--step hung3:step_hangs"),
])
def test_the_doctor_names_the_part_of_a_users_job_that_hung(tmp_path, args, names):
    (tmp_path / "hung3.py").write_text(USER_MOD)
    rc, _out, err = _run([sys.executable, "-m", "feedlab.doctor", *args, "--deadline", "3", "--max-workers", "0",
                          "--repeats", "1", "--batches", "2", "--device", "cpu", "--no-step-trials"],
                         env=_env(tmp_path), cwd=tmp_path)
    line = _one_line_error(rc, err)
    assert names in line and "did not return within 3 s" in line and "--deadline" in line, line


# ---------------------------------------------------------------- deadlines nest
def test_an_inner_deadline_leaves_the_outer_one_armed():
    t0 = time.monotonic()
    with pytest.raises(DeadlineError, match="the outer wait"):
        with deadline(1.0, "the outer wait"):
            with deadline(30.0, "an inner wait"):
                pass
            time.sleep(8)   # the outer deadline must still stop this
    assert time.monotonic() - t0 < 6


def test_an_inner_deadline_never_lengthens_the_outer_one_nor_takes_its_name():
    from feedlab.doctor.guard import deadline as guard_deadline

    t0 = time.monotonic()
    with pytest.raises(DeadlineError, match="the whole run: no progress in 1 s"):
        with deadline(1.0, "the whole run"):
            with guard_deadline(30.0, "one call"):
                time.sleep(8)
    assert time.monotonic() - t0 < 6
    with deadline(5.0, "disarmed on the way out"):
        pass
    time.sleep(0.01)


# ---------------------------------------------------------------- bounded reads, links to devices
def _as_limit():
    four_gb = 4 << 30
    resource.setrlimit(resource.RLIMIT_AS, (four_gb, four_gb))


def test_verify_under_a_4gb_address_space_refuses_a_link_to_dev_zero_in_one_line(tiny, tmp_path):
    root = _copy(tiny, tmp_path)
    victim = root / "hr" / "000003.png"
    victim.unlink()
    victim.symlink_to("/dev/zero")
    rc, _out, err = _run([sys.executable, "-m", "data_prep", "verify", str(root), "--formats", "npy"],
                         preexec=_as_limit)
    line = _one_line_error(rc, err)
    assert "sample 3" in line and "000003.png" in line and "character device" in line, line


def test_a_read_is_bounded_in_chunks_and_follows_links_only_to_regular_files(tmp_path):
    data = os.urandom(3 << 20)   # past one chunk of the read
    f = tmp_path / "f.bin"
    f.write_bytes(data)
    (tmp_path / "link").symlink_to(f)
    assert read_regular(tmp_path / "link") == data
    with pytest.raises(OSError, match="over the 1000-byte bound"):
        read_regular(f, limit=1000)
    (tmp_path / "zero").symlink_to("/dev/zero")
    with pytest.raises(OSError, match=r"zero \(a link, followed\) is a character device"):
        read_regular(tmp_path / "zero")


# ---------------------------------------------------------------- a pickled .pt sample
def test_a_pickled_pt_sample_is_feedlabs_one_line_not_torchs_advice(tiny, tmp_path):
    import fractions

    import torch

    root = _copy(tiny, tmp_path)
    ds = F.open_dataset(root, "pt")
    lr, hr = ds[2]
    torch.save({"lr": torch.from_numpy(lr), "hr": torch.from_numpy(hr),
                "extra": fractions.Fraction(1, 3)}, root / "pt" / "000002.pt")
    with pytest.raises(SampleError) as info:
        F.open_dataset(root, "pt")[2]
    msg = str(info.value)
    assert "\n" not in msg and "000002.pt" in msg and "refuses pickle" in msg, msg
    assert f"python -m data_prep pack {root} --to pt" in msg and "weights_only" not in msg, msg


def test_the_pt_line_reaches_the_command_line(tiny, tmp_path):
    import fractions

    import torch

    root = _copy(tiny, tmp_path)
    torch.save({"lr": torch.zeros(16, 16, 3, dtype=torch.uint8), "hr": torch.zeros(32, 32, 3, dtype=torch.uint8),
                "extra": fractions.Fraction(1, 3)}, root / "pt" / "000004.pt")
    r = run_cli("feedlab.bench", "--data", str(root), "--format", "pt", "--num-workers", "0", "--epochs", "1",
                "--warmup", "0", "--batch-size", "4", "--model", "none")   # a refusal: in this process (inproc.py)
    line = _one_line_error(r.returncode, r.stderr)
    assert "sample 4" in line and "refuses pickle" in line and "weights_only" not in line, line
