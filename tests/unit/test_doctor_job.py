"""The doctor on a user's own job (issues 21 and 22): the step priced on full batches,
every failure of the user's loader or step as one named line, a deadline on every
wait (the user's own DataLoader timeout honoured), every --loader option honoured or
refused, small folders, the answer first with its code lines, --script and --report."""

import json
import os
import subprocess
import sys
import time
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest
import torch
from inproc import run_cli
from torch.utils.data import DataLoader, Dataset

from feedlab.doctor import diagnose_loader, render_user
from feedlab.doctor.guard import Hung, UserCodeError, deadline

ROOT = Path(__file__).resolve().parents[2]


class Items(Dataset):
    def __init__(self, n, shape=(3, 8, 8)):
        self.n, self.shape = n, shape

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full(self.shape, float(i % 7)), i % 3


def _step_2ms_per_sample(batch):
    time.sleep(0.002 * len(batch[0]))


def test_step_is_priced_on_full_batches_not_the_short_last_one():
    """40 samples in batches of 16: 16, 16, 8. A step of 2 ms per sample must read
    ≥ 2 ms/sample; the old code timed it on the last batch (8) and divided by 16 (1 ms)."""
    loader = DataLoader(Items(40), batch_size=16)
    rep = diagnose_loader(loader, step=_step_2ms_per_sample, batches=8, repeats=1, device="cpu", max_workers=0,
                          step_trials=())
    model = [r for r in rep["stages"] if r["stage"] == "model"]
    assert model and all(r["s_per_sample"] >= 1.9e-3 for r in model)
    assert rep["batches_seen"] == [16, 16, 8]


def test_fewer_samples_than_one_batch_says_so_and_divides_by_nothing():
    rep = diagnose_loader(DataLoader(Items(5), batch_size=8), step=_step_2ms_per_sample, batches=4, repeats=1,
                          device="cpu", max_workers=0, step_trials=())
    assert rep["measured_samples_per_s"] is None
    assert any("fewer than one batch" in n for n in rep["notes"])
    model = [r for r in rep["stages"] if r["stage"] == "model"][0]
    assert model["s_per_sample"] >= 1.9e-3            # 10 ms over the 5 samples it saw, not over 8
    assert "VERDICT" in render_user(rep)


Pair = namedtuple("Pair", "x y")


class Odd(Dataset):
    """Items whose default_collate gives namedtuples, dicts with strings, and nested lists."""

    def __init__(self, kind):
        self.kind = kind

    def __len__(self):
        return 24

    def __getitem__(self, i):
        x = torch.zeros(3, 4, 4)
        if self.kind == "namedtuple":
            return Pair(x, i)
        if self.kind == "dict":
            return {"name": f"img{i}.jpg", "image": x, "meta": {"id": i}}
        return [[x, x], "caption"]


@pytest.mark.parametrize("kind", ["namedtuple", "dict", "nested"])
def test_batch_types_the_loader_yields_do_not_crash_the_doctor(kind):
    seen = []
    rep = diagnose_loader(DataLoader(Odd(kind), batch_size=8), step=lambda b: seen.append(type(b)), batches=3,
                          repeats=1, device="cpu", max_workers=0, step_trials=())
    assert rep["batch_size"] == 8 and seen
    if kind == "namedtuple":
        assert seen[0] is Pair


class Ragged(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.zeros(3, 8 + i, 8)


class Boom(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        raise OSError(f"cannot open /data/img{i}.jpg")


def test_user_failures_are_one_named_line():
    with pytest.raises(UserCodeError, match="different sizes"):
        diagnose_loader(DataLoader(Ragged(), batch_size=4), batches=2, repeats=1, device="cpu", max_workers=0)
    with pytest.raises(UserCodeError, match="img0.jpg"):
        diagnose_loader(DataLoader(Boom(), batch_size=4), batches=2, repeats=1, device="cpu", max_workers=0)
    with pytest.raises(UserCodeError, match="empty"):
        diagnose_loader(DataLoader(Items(0), batch_size=4), batches=2, repeats=1, device="cpu", max_workers=0)
    with pytest.raises(UserCodeError, match="not a torch.utils.data.DataLoader"):
        diagnose_loader([torch.zeros(2)], device="cpu", max_workers=0)

    def bad_step(batch):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    with pytest.raises(UserCodeError, match="step.*RuntimeError: mat1"):
        diagnose_loader(DataLoader(Items(16), batch_size=4), step=bad_step, batches=2, repeats=1, device="cpu",
                        max_workers=0)


# ---------------------------------------------------------------- the command line on user modules

USER_MOD = '''
import os, time
import torch
from torch.utils.data import DataLoader, Dataset

PIDS = os.environ.get("DOCTOR_TEST_PIDS")


class Ds(Dataset):
    def __init__(self, n=64, hang=False):
        self.n, self.hang = n, hang
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        if self.hang:
            if PIDS:
                with open(PIDS, "a") as f:
                    f.write(f"{os.getpid()}\\n")
            time.sleep(3600)
        return torch.full((3, 8, 8), float(i % 5)), i % 2


def make_loader():
    return DataLoader(Ds(), batch_size=8)

def make_raises():
    raise FileNotFoundError("/no/such/train_dir")

def make_empty():
    return DataLoader(Ds(0), batch_size=8)

def make_ragged():
    class R(Dataset):
        def __len__(self):
            return 16
        def __getitem__(self, i):
            return torch.zeros(3, 8 + i, 8)
    return DataLoader(R(), batch_size=4)

def make_hung():
    return DataLoader(Ds(hang=True), batch_size=4)

def make_hung_workers():
    return DataLoader(Ds(hang=True), batch_size=4, num_workers=1)

def make_hung_timeout():
    return DataLoader(Ds(hang=True), batch_size=4, timeout=2)

def step(batch):
    x, y = batch
    time.sleep(0.001)

def bad_step(batch):
    raise KeyError("labels")
'''


@pytest.fixture
def usermod(tmp_path):
    (tmp_path / "mymod.py").write_text(USER_MOD)
    return tmp_path


def _doctor(args, cwd, timeout=240, env_extra=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(cwd), os.environ.get("PYTHONPATH", "")]),
               **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "feedlab.doctor", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout)


def _in_process(args, cwd):
    """``python -m feedlab.doctor`` in this process (inproc.run_cli): refusals, and runs where the process
    is not what is tested; --script runs, hung loaders and the first --loader run stay real processes."""
    return run_cli("feedlab.doctor", *args, cwd=cwd, user_path=cwd)


def _one_line(r, *words):
    assert r.returncode != 0, r.stdout[-500:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    err = [ln for ln in r.stderr.splitlines() if "error" in ln]
    assert len(err) == 1, r.stderr[-2000:]
    for w in words:
        assert w in err[0], err[0]


@pytest.mark.parametrize("factory,step,words", [
    ("make_raises", None, ["--loader mymod:make_raises", "/no/such/train_dir"]),
    ("make_empty", None, ["empty"]),
    ("make_ragged", None, ["different sizes"]),
    ("make_loader", "bad_step", ["--step mymod:bad_step", "KeyError"]),
])
def test_cli_user_failures_are_one_line(usermod, factory, step, words):
    args = ["--loader", f"mymod:{factory}", "--max-workers", "0", "--repeats", "1", "--batches", "2",
            "--device", "cpu", "--no-step-trials"] + (["--step", f"mymod:{step}"] if step else [])
    _one_line(_in_process(args, usermod), *words)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False


@pytest.mark.parametrize("factory,extra,words", [
    ("make_hung", ["--deadline", "3"], ["did not return within 3 s", "--deadline"]),
    ("make_hung_workers", ["--deadline", "3"], ["did not return within 3 s"]),
    ("make_hung_timeout", ["--deadline", "500"], ["timeout=2"]),     # the user's own timeout, not ours
])
def test_cli_hung_dataset_has_a_deadline_and_leaves_no_process(usermod, tmp_path, factory, extra, words):
    pids = tmp_path / "pids.txt"
    t0 = time.monotonic()
    r = _doctor(["--loader", f"mymod:{factory}", "--max-workers", "1", "--repeats", "1", "--batches", "2",
                 "--device", "cpu", "--predict-only", *extra], usermod, timeout=120, env_extra={"DOCTOR_TEST_PIDS": str(pids)})
    assert time.monotonic() - t0 < 110
    _one_line(r, *words)
    for line in pids.read_text().split() if pids.exists() else []:
        pid = int(line)
        for _ in range(50):
            if not _alive(pid):
                break
            time.sleep(0.1)
        assert not _alive(pid), f"process {pid} left behind"


def test_deadline_interrupts_a_blocking_wait():
    t0 = time.monotonic()
    with pytest.raises(Hung, match="the wait did not return within 0.5 s"):
        with deadline(0.5, "the wait"):
            time.sleep(30)
    assert time.monotonic() - t0 < 10
    with deadline(5, "nothing"):   # disarmed on exit
        pass
    time.sleep(0.01)


def test_cli_loader_honours_its_options(usermod):
    out = usermod / "trace.json"
    r = _doctor(["--loader", "mymod:make_loader", "--step", "mymod:step", "--max-workers", "1", "--ranks", "2",
                 "--pin-memory", "--trace", str(out), "--repeats", "1", "--batches", "4", "--device", "cpu",
                 "--no-step-trials", "--predict-only", "--json"], usermod)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout)
    assert [row["num_workers"] for row in rep["end_to_end"]] == [0, 1]          # --max-workers
    assert rep["ranks_advice"]["ranks"] == 2                                    # --ranks
    assert any("pin" in n for n in rep["notes"])                                # --pin-memory (no CUDA: said)
    assert out.exists() and json.loads(out.read_text())                         # --trace
    r = _in_process(["--loader", "mymod:make_loader", "--max-workers", "0", "--repeats", "1", "--batches", "3",
                     "--device", "cpu"], usermod)
    assert r.returncode == 0 and "VERDICT" in r.stdout
    assert "fetch + collate in isolation" in r.stderr and "end to end" in r.stderr   # progress, stage by stage
    for flag in (["--batch-size", "4"], ["--format", "png"], ["--num-workers", "2"], ["--samples", "9"]):
        _one_line(_in_process(["--loader", "mymod:make_loader", *flag], usermod), flag[0], "make_loader")


def test_cli_report_md_and_html(usermod):
    for name in ("r.md", "r.html"):
        r = _in_process(["--loader", "mymod:make_loader", "--max-workers", "0", "--repeats", "1", "--batches", "3",
                         "--device", "cpu", "--report", str(usermod / name)], usermod)
        assert r.returncode == 0, r.stderr[-2000:]
        text = (usermod / name).read_text()
        assert "VERDICT" in text
    assert (usermod / "r.png").exists() and "r.png" in (usermod / "r.md").read_text()
    assert "data:image/png;base64," in (usermod / "r.html").read_text()
    for bad in (usermod / "r.txt", usermod / "no" / "r.md"):   # refused before anything is measured
        r = _in_process(["--loader", "mymod:make_loader", "--report", str(bad)], usermod)
        _one_line(r, ".md")
        assert "…" not in r.stderr


TRAIN = '''
import argparse, time
import torch
from torch.utils.data import DataLoader, Dataset

class Ds(Dataset):
    def __len__(self):
        return 400
    def __getitem__(self, i):
        return torch.zeros(3, 8, 8), 0

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sleep", type=float, required=True)
    a = ap.parse_args()
    loader = DataLoader(Ds(), batch_size=10, num_workers=0, drop_last=True)
    for epoch in range(100):
        for x, y in loader:
            try:
                time.sleep(a.sleep)      # the step, of known cost
            except Exception:
                pass                     # a user's broad except must not swallow the stop
    raise SystemExit("ran to the end: the doctor did not stop the script")
'''


def test_script_runs_an_unmodified_training_script(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    r = _doctor(["--script", "train.py", "--batches", "8", "--json", "--", "--sleep", "0.02"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout)
    assert s["batches"] == 8 and s["stopped"].startswith("stopped after")
    assert s["loader"]["batch_size"] == 10 and s["loader"]["num_workers"] == 0 and s["loader"]["drop_last"]
    # the verdict, or on a busy machine "too busy to judge" with the measured one kept (never a busy verdict)
    assert s["step_s_per_batch"] >= 0.02 and (s["verdict"] == "compute-bound" or (
        s["verdict"] == "too busy to judge" and s["measured_verdict"] == "compute-bound" and s["busy"]))
    r = _doctor(["--script", "train.py", "--batches", "8", "--", "--sleep", "0.02"], tmp_path)
    assert ("VERDICT: compute-bound" in r.stdout or "VERDICT: too busy to judge" in r.stdout) and \
        "--diagnose" in r.stdout
    r = _doctor(["--script", "train.py", "--batches", "6", "--diagnose", "--max-workers", "0", "--repeats", "1",
                 "--", "--sleep", "0.02"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "your script's step" in r.stdout and r.stdout.count("VERDICT") == 1   # one verdict a run
    r = _doctor(["--script", "train.py"], tmp_path)     # the script's own usage error, then the doctor's line
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert r.stderr.splitlines()[-1].endswith("--script train.py exited with status 2 before 16 batches")
    (tmp_path / "crash.py").write_text("import torch\nx = torch.zeros(2) @ torch.zeros(3)\n")
    _one_line(_doctor(["--script", "crash.py"], tmp_path), "crash.py:2", "RuntimeError")
    _one_line(_in_process(["--script", "nope.py"], tmp_path), "nope.py")
    _one_line(_in_process(["--script", "train.py", "--ranks", "2"], tmp_path), "--ranks", "--diagnose")
    _one_line(_in_process(["--script", "train.py", "--batch-size", "2"], tmp_path), "--batch-size", "your script")


# ---------------------------------------------------------------- small folders (the 20-JPEG case)


@pytest.mark.parametrize("fmt", [[], ["--format", "images"]])
def test_twenty_jpegs_in_a_flat_folder(tmp_path, fmt):
    from PIL import Image

    rng = np.random.default_rng(0)
    d = tmp_path / "flat"
    d.mkdir()
    for k in range(20):
        Image.fromarray(rng.integers(0, 255, (60 + k, 50, 3), dtype=np.uint8)).save(d / f"{k}.jpg")
    r = run_cli("feedlab.doctor", "--data", str(d), *fmt, "--max-workers", "1", "--no-cold", "--repeats", "1",
                "--samples", "8", "--predict-only")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "too few samples" in r.stdout and "nan" not in r.stdout


# ---------------------------------------------------------------- the report's text


def _user_rep(**kw):
    rep = diagnose_loader(DataLoader(Items(48), batch_size=8), step=None, batches=4, repeats=1, device="cpu",
                          max_workers=1, step_trials=())
    rep.update(kw)
    return rep


def test_report_units_and_not_measured():
    text = render_user(_user_rep())
    startup = [ln for ln in text.splitlines() if ln.startswith("startup")]
    assert startup and all("s per start" in ln and "µs" not in ln for ln in startup)
    for stage in ("decode", "transform", "model"):
        line = [ln for ln in text.splitlines() if ln.startswith(stage)][0]
        assert "not measured" in line and "0.0 µs" not in line
    assert text.index("VERDICT") < text.index("stage ")        # the answer first


def test_labels_are_never_cut_mid_word():
    from feedlab.doctor.report import fit

    s = "uint8→float only (no CUDA), totensor batch, 1 thread(s)"
    for w in range(10, 60):
        out = fit(s, w)
        assert len(out) <= max(w, len("uint8→float") + 1)     # a first word longer than w stays whole
        if out != s:
            assert out.endswith("…") and s.startswith(out[:-1]) and not s[len(out) - 1].isalnum()


def test_answer_gives_code_lines_and_the_headroom_sentence():
    from feedlab.doctor.answer import answer_lines, code_line

    rep = {"verdict": "data-bound", "bound_stage": "read", "binding_term": "t", "end_to_end": [],
           "num_workers": 0, "data": "data/photos", "cuda": True, "measured_samples_per_s": None,
           "advice": [{"setting": "num_workers", "value": 6, "expected_gain": 3.0},
                      {"setting": "format", "value": "npy_mmap", "expected_gain": 2.0},
                      {"setting": "decode", "value": "simplejpeg", "expected_gain": 1.5, "measured_gain": 1.4}]}
    text = "\n".join(answer_lines(rep))
    assert "DataLoader(..., num_workers=6, pin_memory=True)" in text
    assert "python -m data_prep pack data/photos --to npy_mmap" in text
    assert "decode=simplejpeg" in text and "×1.40 measured" in text
    assert "not measured" in text.splitlines()[0]
    assert code_line("batch_size", 64, rep) == "DataLoader(..., batch_size=64)"
    rep.update(verdict="compute-bound", bound_stage="model", headroom=4.2, advice=[],
               step_changes=[{"change": "channels_last", "measured": True, "gain": 0.8, "result": "slower",
                              "kept": False, "code": "x"}])
    text = "\n".join(answer_lines(rep))
    assert "your loader is predicted to have 4.2× headroom over the step" in text
    assert "no input-pipeline change will help" not in text     # only where the headspace measured under 5%
    assert "channels last measured slower" in text and "1. step" not in text


def test_headroom_from_the_table():
    from test_doctor import SPEC, table

    from feedlab.doctor.user import headroom

    h = headroom(table(read=10e-6, decode=10e-6, model=200e-6), SPEC.replace(num_workers=0))
    assert h is not None and h > 1.0      # the loader alone runs faster than the step


def test_zero_workers_advice_does_not_say_parallel():
    from test_doctor import SPEC, table

    from feedlab.doctor import predict as PR

    t = table(read=5e-6, decode=5e-6, handover=400e-6, receive=400e-6)
    adv = [a for a in PR.advise(t, SPEC.replace(num_workers=2), 2) if a["value"] == 0]
    assert adv and "parallel" not in adv[0]["why"]


def test_a_cheaper_decode_is_never_predicted_slower():
    """Read for the same stored bytes is one cost per format: noise in the read timed
    beside simplejpeg cannot price the cheaper decode slower than the dearer one."""
    from test_doctor import SPEC, table

    from feedlab.doctor import predict as PR
    from feedlab.doctor.costs import Stage

    t = table(read=10e-6, decode=100e-6)
    t[("read", "fake", "simplejpeg")] = Stage("read", "r", [300e-6], [300e-6])   # a noisy read
    t[("decode", "fake", "simplejpeg")] = Stage("decode", "d", [50e-6], [50e-6])
    t[("transform", "fake", "simplejpeg")] = Stage("transform", "t", [0.0], [0.0])
    fast = PR.predict(t, SPEC.replace(decode="simplejpeg"))["predicted_samples_per_s"]
    slow = PR.predict(t, SPEC)["predicted_samples_per_s"]
    assert fast > slow


# ---------------------------------------------------------------- step-side changes (CUDA with fakes)


def test_step_changes_kept_only_when_measured_faster():
    from feedlab.doctor import stepside

    calls = {"n": 0}

    def fake_timer(step, batches, device, repeats, ctx):
        calls["n"] += 1
        return {1: 1.0, 2: 2.0, 3: 0.5}[calls["n"]]     # baseline, threads (slower), channels_last (faster)

    kept = [((torch.zeros(4, 3, 8, 8), torch.zeros(4)), 4)]
    rows = stepside.try_step_changes(lambda b: None, kept, "cpu", 1, threads=1, cores=2,
                                     only=("threads", "channels_last"), timer=fake_timer,
                                     busy=lambda: None)   # a quiet machine (a busy one: test_doctor_advice_holds)
    by = {r["change"]: r for r in rows}
    assert by["threads"]["result"] == "slower" and not by["threads"]["kept"]
    assert by["channels_last"]["result"] == "faster" and by["channels_last"]["kept"]
    assert by["threads"]["code"] == "torch.set_num_threads(2)"


def test_cuda_step_changes_use_bf16_autocast_with_a_fake_device(monkeypatch):
    from feedlab.doctor import stepside

    batch = (torch.zeros(2, 3, 4, 4), torch.zeros(2))
    assert "autocast_bf16" in stepside.available("cuda:0", 1, 1, batch)
    assert "autocast_bf16" not in stepside.available("cpu", 1, 1, batch)
    seen = []

    class FakeAutocast:
        def __init__(self, device_type, dtype):
            seen.append((device_type, dtype))

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    monkeypatch.setattr(torch, "autocast", FakeAutocast)
    monkeypatch.setattr("feedlab.doctor.stepside.to_device", lambda b, d: b)     # no GPU to copy to

    def timer(step, batches, device, repeats, ctx):
        with ctx():
            step(batches[0][0])
        return 1.0 if not seen else 0.5

    rows = stepside.try_step_changes(lambda b: None, [(batch, 2)], "cuda:0", 1, threads=1, cores=1,
                                     only=("autocast_bf16",), timer=timer, busy=lambda: None)
    assert seen == [("cuda", torch.bfloat16)]
    assert rows[0]["kept"] and "torch.autocast(\"cuda\", dtype=torch.bfloat16)" in rows[0]["code"]


def test_pin_memory_rebuilds_the_loader_on_cuda_only():
    """--pin-memory's CUDA branch, with a fake device flag: the loader is rebuilt pinned,
    its other settings (the user's timeout among them) kept; off CUDA a note, no rebuild."""
    from feedlab.doctor.user import pinned

    loader = DataLoader(Items(16), batch_size=4, num_workers=1, timeout=7)
    notes = []
    assert pinned(loader, True, False, notes) is loader and "no CUDA" in notes[0]
    out = pinned(loader, True, True, notes)
    assert out is not loader and out.pin_memory and out.timeout == 7 and out.num_workers == 1
    assert out.batch_sampler is loader.batch_sampler
    assert pinned(loader, None, True, []) is loader


# ---------------------------------------------------------------- the dry run


def test_dry_run_resolves_06_and_names_the_machine_of_those_cores(capsys, monkeypatch):
    from feedlab import run

    monkeypatch.setattr("feedlab.fingerprint.machine_fingerprint", lambda: {"cpu_usable": 2, "gpus": []})
    monkeypatch.delenv("FEEDLAB_MACHINE", raising=False)
    monkeypatch.setenv("FEEDLAB_CORES", "2")   # main() sets it; restored after
    assert run.main(["--dry-run", "--profile", "quick", "--cores", "16", "--only", "06"]) == 0
    out = capsys.readouterr().out
    assert "cannot resolve" not in out and "figures/<notebook>/cpu-16c/" in out


def test_readme_first_section_is_the_doctor_on_your_job():
    text = (ROOT / "README.md").read_text()
    first = text.split("\n## ", 2)[1] if text.startswith("# ") else text
    assert "--script train.py" in first and "from feedlab.doctor import diagnose" in first
    assert "feedlab-doctor" in text and "feedlab-run" in text and "feedlab-bench" in text
    assert text.index("--script") < text.index("make figures")
    make = (ROOT / "Makefile").read_text()
    doctor = [ln for ln in make.splitlines() if ln.startswith("doctor:")][0]
    assert "data" in doctor.split("##")[0]
