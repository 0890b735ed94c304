"""Issue 16: nothing lost, nothing silent, one line per bad input."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import lmdb
import numpy as np
import pytest
from inproc import run_cli
from PIL import Image

import data_prep
from data_prep import DataPrepError
from feedlab import formats as F
from feedlab.errors import ChecksumError, SampleError, one_line, strict_json
from feedlab.formats._common import _remove, sweep_orphans, write_json_atomic
from feedlab.timing import close_iterator

REPO = Path(__file__).resolve().parents[2]
QUIET = dict(log=lambda _m: None)


def _env():
    return dict(os.environ, PYTHONPATH=f"{REPO / 'lib'}{os.pathsep}{REPO}", FEEDLAB_PROFILE="smoke")


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO, env=_env(),
                          timeout=timeout)


def _one_line_error(r):
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode != 0, r.stdout
    assert "Traceback" not in r.stderr, r.stderr
    errors = [ln for ln in lines if ": error: " in ln]
    assert len(errors) == 1 and errors[0] == lines[-1], r.stderr  # argparse prints its usage above
    return lines[-1]


def _snapshot(d: Path) -> dict:
    return {str(p.relative_to(d)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(d.rglob("*"))}


def _photos(d: Path, n=3) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for k in range(n):
        rng = np.random.default_rng(k)
        Image.fromarray(rng.integers(0, 256, (72, 80, 3), dtype=np.uint8), "RGB").save(d / f"p{k}.png")
    return d


def _copy_set(sr_root, tmp_path, fmts) -> Path:
    root = tmp_path / "set"
    root.mkdir()
    for name in ("hr", "lr", "manifest.json", "crc32c.npy", *fmts):
        src = sr_root / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, root / name)
    return root


# -- --out never deletes a user's folder ------------------------------------------------
@pytest.mark.parametrize("cmd", ["sr", "classify"])
def test_out_on_a_foreign_folder_is_refused_and_left_byte_identical(tmp_path, cmd):
    photos = _photos(tmp_path / "photos")
    (photos / "notes.txt").write_text("mine")
    before = _snapshot(photos)
    extra = ["--patch", "32", "--count", "4"] if cmd == "sr" else ["--per-class", "2", "--min-size", "16",
                                                                   "--max-size", "32"]
    r = run_cli("data_prep", cmd, "--out", str(photos), "--source", str(photos), *extra, cwd=REPO)
    line = _one_line_error(r)
    assert "--force" in line and str(photos) in line
    assert _snapshot(photos) == before
    assert [p.name for p in tmp_path.iterdir()] == ["photos"]


def test_force_adds_the_set_beside_the_files_and_removes_none(tmp_path):
    photos = _photos(tmp_path / "photos")
    (photos / "notes.txt").write_text("mine")
    before = _snapshot(photos)
    data_prep.build_sr(photos, 32, 2, 4, source=photos, force=True, **QUIET)
    after = _snapshot(photos)
    assert all(after.get(k) == v for k, v in before.items())
    assert (photos / "hr" / "000003.png").is_file() and (photos / "manifest.json").is_file()
    # a set of the same kind is ours: rebuilding it needs no --force and keeps the user's files
    data_prep.build_sr(photos, 32, 2, 6, source=photos, **QUIET)
    assert (photos / "hr" / "000005.png").is_file() and (photos / "notes.txt").read_text() == "mine"


def test_empty_folder_and_same_kind_set_are_accepted_other_kind_refused(tmp_path, src=None):
    out = tmp_path / "empty"
    out.mkdir()
    data_prep.build_sr(out, 32, 2, 3, **QUIET)
    data_prep.build_sr(out, 32, 2, 5, **QUIET)
    assert len(list((out / "hr").iterdir())) == 5
    with pytest.raises(DataPrepError, match="'sr' set"):
        data_prep.build_cls(out, classes=1, per_class=2, min_size=16, max_size=32, **QUIET)


# -- truncated LMDB, full disk, endless writer, orphans, SIGTERM ------------------------
def test_truncated_lmdb_is_a_named_error_not_sigbus(sr_root, tmp_path):
    root = _copy_set(sr_root, tmp_path, ["lmdb_raw"])
    data = root / "lmdb_raw" / "data.mdb"
    with open(data, "r+b") as fh:
        fh.truncate(data.stat().st_size // 2)
    code = (f"from feedlab.formats import open_dataset\nds = open_dataset({str(root)!r}, 'lmdb_raw')\n"
            "print(ds.read_batch(list(range(len(ds))))[1].sum())")
    r = _cli("-c", code)
    assert r.returncode != -signal.SIGBUS, "SIGBUS"
    assert "truncated" in r.stderr and str(data) in r.stderr
    r = _cli("-m", "feedlab.bench", "--data", str(root), "--format", "lmdb_raw", "--workers", "0",
             "--epochs", "1", "--batch-size", "8")
    assert "truncated" in _one_line_error(r)


def test_npy_mmap_full_disk_is_one_line_and_leaves_no_temp(sr_root, tmp_path, monkeypatch):
    root = _copy_set(sr_root, tmp_path, [])

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(DataPrepError) as err:
        data_prep.pack(root, "npy_mmap", **QUIET)
    assert "npy_mmap" in str(err.value) and "\n" not in str(err.value)
    assert not (root / "npy_mmap").exists()
    assert not [p for p in root.iterdir() if ".tmp-" in p.name]


def test_npy_mmap_is_written_with_plain_writes(sr_root, sr_reference, tmp_path, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(np.lib.format, "open_memmap", lambda *a, **k: pytest.fail("sparse memmap write"))
        F.write("npy_mmap", tmp_path, sr_reference)
    ds = F.open_dataset(tmp_path, "npy_mmap")
    np.testing.assert_array_equal(ds[5][1], sr_reference[5][1])


class _Endless(list):
    def __iter__(self):
        while True:
            yield from list.__iter__(self)


@pytest.mark.parametrize("fmt", ["lmdb", "lmdb_raw", "npy", "npy_mmap", "zarr", "hdf5", "pt"])
def test_writers_stop_an_iterator_that_outlives_its_length(sr_reference, tmp_path, fmt):
    with pytest.raises(ValueError, match="len\\(samples\\) was 4"):
        F.write(fmt, tmp_path, _Endless(sr_reference[:4]))
    assert list(tmp_path.iterdir()) == []


def test_sweep_removes_only_our_dead_and_old_temporaries(tmp_path):
    # temporaries a feedlab process made (registered by tmp_sibling), that process gone
    made = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path\n"
                           "from feedlab.formats._io import tmp_sibling\n"
                           "for final, kind in (('sr64', 'tmp'), ('lmdb', 'old'), ('young', 'tmp')):\n"
                           "    t = tmp_sibling(Path(sys.argv[1]) / final, kind); t.mkdir(); print(t.name)",
                           str(tmp_path)], capture_output=True, text=True, env=_env(), timeout=60, check=True)
    ours, young = made.stdout.split()[:2], made.stdout.split()[2]
    dead_pid = int(ours[0].split("-")[-2])
    old = time.time() - 3600
    names = {**{n: True for n in ours}, f"sr64.tmp-{os.getppid()}-abcdef": False, "sr64.tmp-notes": False,
             "photos": False, f"thesis.tmp-{dead_pid}-abcdef": False}  # the right shape, not ours
    for n in names:
        (tmp_path / n).mkdir(exist_ok=True)
        os.utime(tmp_path / n, (old, old))
    removed = {p.name for p in sweep_orphans(tmp_path)}
    assert removed == {n for n, gone in names.items() if gone}
    assert (tmp_path / young).exists()
    _remove(tmp_path / young)  # and off the registry


def test_sigterm_is_handled_like_sigint(tmp_path):
    out = tmp_path / "sr"
    p = subprocess.Popen([sys.executable, "-m", "data_prep", "sr", "--out", str(out), "--patch", "32",
                          "--count", "200000"], cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not any(".tmp-" in q.name for q in tmp_path.iterdir()):
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    _out, err = p.communicate(timeout=60)
    assert p.returncode == 143 and "terminated" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


# -- corruption never reads as data ----------------------------------------------------
def test_flipped_byte_raises_naming_the_sample_unless_verify_is_off(sr_root, sr_reference, tmp_path):
    root = _copy_set(sr_root, tmp_path, ["npy_mmap", "lmdb_raw"])
    ds = F.open_dataset(root, "npy_mmap")
    with open(root / "npy_mmap" / "hr.npy", "r+b") as fh:  # one byte of sample 7's HR
        off = os.path.getsize(root / "npy_mmap" / "hr.npy") - (len(ds) - 7) * int(np.prod(ds.hr_shape))
        fh.seek(off + 5)
        b = fh.read(1)
        fh.seek(off + 5)
        fh.write(bytes([b[0] ^ 0x10]))
    for read in (lambda d: d[7], lambda d: d.read_batch([3, 7, 9])):
        with pytest.raises(ChecksumError, match="sample 7"):
            read(F.open_dataset(root, "npy_mmap"))
    quiet = F.open_dataset(root, "npy_mmap", verify=False)  # the benchmarks' off switch
    assert not np.array_equal(quiet[7][1], sr_reference[7][1])
    env = lmdb.open(str(root / "lmdb_raw"), map_size=1 << 26)
    with env.begin(write=True) as txn:
        v = bytearray(txn.get((11).to_bytes(8, "big")))
        v[-3] ^= 0xFF
        txn.put((11).to_bytes(8, "big"), bytes(v))
    env.close()
    with pytest.raises(ChecksumError, match="sample 11"):
        F.open_dataset(root, "lmdb_raw").read_batch(list(range(16)))


def test_missing_zarr_chunk_is_an_error_not_zeros(sr_root, tmp_path):
    root = _copy_set(sr_root, tmp_path, ["sr.zarr"])
    ds = F.open_dataset(root, "zarr", verify=False)
    chunk = root / "sr.zarr" / "hr" / ds._arrays.get()[1].metadata.encode_chunk_key((1, 0, 0, 0))
    chunk.unlink()
    ds = F.open_dataset(root, "zarr", verify=False)
    for read in (lambda: ds[ds.chunk_len + 1], lambda: ds.read_batch([0, ds.chunk_len])):
        with pytest.raises(SampleError, match="chunk 1 of hr"):
            read()


# -- errors that name the thing ------------------------------------------------------------
def test_corrupt_png_names_index_and_path_even_through_workers(sr_root, tmp_path):
    from torch.utils.data import DataLoader

    root = _copy_set(sr_root, tmp_path, [])
    (root / "hr" / "000005.png").write_bytes(b"\x89PNG\r\n\x1a\n not a png")
    ds = F.open_dataset(root, "png")
    with pytest.raises(SampleError, match=r"sample 5 .*000005\.png"):
        ds[5]
    loader = DataLoader(ds, batch_size=4, num_workers=2)
    it = iter(loader)
    try:
        with pytest.raises(Exception) as err:
            for _ in it:
                pass
    finally:  # err's traceback holds the iterator: stop its workers now, not at a later test's gc (2 x 5 s joins)
        close_iterator(loader, it)
    line = one_line(err.value)
    assert "sample 5" in line and "000005.png" in line and "\n" not in line
    r = _cli("-m", "feedlab.bench", "--data", str(root), "--format", "png", "--workers", "2",
             "--epochs", "1", "--batch-size", "4")
    assert "000005.png" in _one_line_error(r)


def test_invalid_manifest_is_one_line(sr_root, tmp_path):
    root = _copy_set(sr_root, tmp_path, [])
    (root / "manifest.json").write_text("{ not json")
    r = run_cli("data_prep", "verify", str(root), cwd=REPO)
    assert "manifest.json" in _one_line_error(r)


def test_every_unreadable_source_is_named_in_one_run(tmp_path):
    src = _photos(tmp_path / "src")
    for n in ("a.jpg", "b.png", "c.jpg"):
        (src / n).write_bytes(b"garbage")
    with pytest.raises(DataPrepError) as err:
        data_prep.build_sr(tmp_path / "out", 32, 2, 4, source=src, **QUIET)
    assert all(n in str(err.value) for n in ("a.jpg", "b.png", "c.jpg"))


@pytest.mark.parametrize("args,word", [
    (["-m", "data_prep", "pack", "{root}", "--to", "zarr", "--chunk-len", "0"], "--chunk-len"),
    (["-m", "feedlab.bench", "--data", "{root}", "--max-batches", "0"], "--max-batches"),
    (["-m", "feedlab.bench", "--data", "{root}", "--format", "jpeg"], "invalid choice"),
    (["-m", "feedlab.bench", "--data", "{root}", "--format", "hdf5", "--workers", "0"], "data_prep pack"),
    (["-m", "feedlab.doctor", "--data", "{root}", "--samples", "0"], "--samples"),
    (["-m", "feedlab.doctor", "--data", "{root}", "--num-workers", "-3"], "--num-workers"),
    (["-m", "feedlab.run", "--profile", "huge", "--list"], "huge"),
    (["-m", "feedlab.run", "--only", "03", "--no-data", "-p", "x=1;open('p','w');y", "1"], "allowed"),
    (["-m", "feedlab.run", "--only", "03", "--no-data", "-p", "batchsizes", "[8]"], "batch_sizes"),
])
def test_bad_parameters_are_one_line(tmp_path, args, word):
    """Refused while parsing: checked in this process (inproc.run_cli, as ``python -m`` runs it);
    each command's real ``python -m`` process is tested by the other tests here."""
    root = tmp_path / "set"
    data_prep.build_sr(root, 32, 2, 4, **QUIET)
    assert args[0] == "-m"
    r = run_cli(*[a.format(root=root) for a in args[1:]], cwd=REPO)
    assert word in _one_line_error(r)
    assert not (REPO / "notebooks" / "p").exists()


def test_zero_input_size_is_refused():
    from feedlab.profiles import resolve

    with pytest.raises(ValueError, match="input_sizes"):
        resolve("03_pinned_memory_by_input_size", "smoke", input_sizes=[0])


def test_p_keys_go_only_to_notebooks_that_declare_them():
    from feedlab.nbparams import notebook_parameters, route_params
    from feedlab.run import list_notebooks

    nbs = list_notebooks()
    n03 = [nb for nb in nbs if nb.stem.startswith("03")][0]
    assert "input_sizes" in notebook_parameters(n03)
    routed = route_params({"input_sizes": [16], "data_root": "/x"}, nbs)
    assert routed[n03]["input_sizes"] == [16]
    assert all("input_sizes" not in routed[nb] for nb in nbs if "input_sizes" not in notebook_parameters(nb))


def test_strict_json_and_readme_help_has_no_side_effects():
    assert json.loads(strict_json({"a": float("inf"), "b": [float("nan"), 1.0]})) == {"a": None, "b": [None, 1.0]}
    readme = (REPO / "README.md").read_bytes()
    mtime = (REPO / "README.md").stat().st_mtime_ns
    r = _cli("-m", "feedlab.report.readme", "--help")
    assert r.returncode == 0 and "usage" in r.stdout
    assert (REPO / "README.md").read_bytes() == readme and (REPO / "README.md").stat().st_mtime_ns == mtime


# -- shutdown ---------------------------------------------------------------------------------
def test_feedlab_loop_stops_workers_on_error_without_join_timeouts():
    from feedlab.experiments.worker_hygiene import error_cleanup

    for loop in ("feedlab", "fix"):
        o = error_cleanup(loop, num_workers=2)
        assert o["raised"] == "WorkerFailure" and o["terminated"] == 0 and o["leftover"] == 0


# -- sharing ----------------------------------------------------------------------------------
def test_files_are_written_with_the_usual_umask(tmp_path):
    from feedlab.results import record_results

    old = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "manifest.json", {"a": 1})
        record_results({"a": 1}, tmp_path)
    finally:
        os.umask(old)
    for name in ("manifest.json", "results.json"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644


def test_ensure_sr_takes_no_lock_when_complete(tmp_path, monkeypatch):
    root = data_prep.ensure_sr(tmp_path / "sr", patch=32, scale=2, count=4, formats=("npy",), **QUIET)

    def no_lock(_root):
        raise AssertionError("a lock was taken")

    monkeypatch.setattr(data_prep, "_build_lock", no_lock)
    assert data_prep.ensure_sr(root, patch=32, scale=2, count=4, formats=("npy",), **QUIET) == root


def test_figures_use_unique_temp_names(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from feedlab import plots

    seen = []
    real = os.replace
    monkeypatch.setattr(plots.os, "replace", lambda a, b: (seen.append(Path(a).name), real(a, b)))
    for _ in range(2):
        fig, _ax = plt.subplots()
        plots.save_figure(fig, tmp_path, "same", fingerprint={})
        plt.close(fig)
    assert len(seen) == len(set(seen)) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.png", "same.svg"]


# -- issue 47: a signal stops every process we started, with one line, nothing left ------------------------
# Each test sets its own deadline (communicate/wait timeouts) and checks its session, /dev/shm and its TMPDIR.

def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _still_running(pids, wait_s: float = 10.0) -> list[int]:
    end = time.monotonic() + wait_s
    while [p for p in pids if _running(p)] and time.monotonic() < end:
        time.sleep(0.05)
    return [p for p in pids if _running(p)]


def _procs_with(word: str) -> list[int]:
    out = []
    for n in os.listdir("/proc"):
        if n.isdigit():
            try:
                with open(f"/proc/{n}/cmdline", "rb") as fh:
                    if word.encode() in fh.read():
                        out.append(int(n))
            except OSError:
                pass
    return out


def _shm_new_and_unowned(before: set[str]) -> set[str]:
    """/dev/shm entries made since ``before`` that no process has open or mapped (others' live ones pass)."""
    new = (set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()) - before
    for n in os.listdir("/proc"):
        if not new:
            break
        if n.isdigit():
            try:
                with open(f"/proc/{n}/maps") as fh:
                    new -= {ln.split("/dev/shm/", 1)[1].strip() for ln in fh if "/dev/shm/" in ln}
                new -= {os.readlink(f"/proc/{n}/fd/{fd}").split("/dev/shm/", 1)[-1]
                        for fd in os.listdir(f"/proc/{n}/fd")}
            except OSError:
                pass
    return new


def _shm_left(before: set[str], settle_s: float = 5.0) -> set[str]:
    """What :func:`_shm_new_and_unowned` still finds after up to ``settle_s``: a semaphore whose process was
    stopped is unlinked by its resource tracker a moment later (one of this test's, or of any other run on
    the machine), and a file left behind stays."""
    end = time.monotonic() + settle_s
    while (left := _shm_new_and_unowned(before)) and time.monotonic() < end:
        time.sleep(0.2)
    return left


def _signalled(cmd, tmp: Path, ready, sig, wait_s: float = 120.0, env=None):
    """Run ``cmd`` with TMPDIR=``tmp``; once ``ready()`` returns pids (the processes it started), send ``sig``.
    Returns (returncode, stderr lines, those pids)."""
    shm = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    p = subprocess.Popen(cmd, cwd=REPO, env={**(env or _env()), "TMPDIR": str(tmp)}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        end = time.monotonic() + wait_s
        while not pids and time.monotonic() < end and p.poll() is None:
            pids = ready()
            time.sleep(0.05)
        assert pids, f"never got going: {p.poll()} {p.stderr.read() if p.poll() is not None else ''}"
        p.send_signal(sig)
        _out, err = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    left = _still_running(pids, 10.0)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"still running after {sig.name}: {left}"
    shm_left = _shm_left(shm)
    assert not shm_left, f"left in /dev/shm: {shm_left}"
    return p.returncode, [ln for ln in err.splitlines() if ln.strip()], pids


WHATIF_DRIVER = """
import sys
from feedlab import pipeline as P
from feedlab.doctor import whatif as W
from feedlab.errors import cli_errors
rep = {"stages": [{"stage": "model", "s_per_sample": 1e-3}], "measured_samples_per_s": 400.0, "advice": []}
spec = P.PipelineSpec(format="npy_mmap", transform="none", batch_size=4, num_workers=2)
log = open(sys.argv[2], "a")
with cli_errors("python -m feedlab.doctor"):   # the doctor's main, around the doctor's run_whatif
    W.run_whatif(rep, sys.argv[1], spec, samples=48, peers=("dali",), device="cpu", limit_s=300, stall_s=None,
                 repeats=20, say=lambda m: print(m, file=log, flush=True))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_to_the_doctor_stops_its_what_if_child_with_one_line(sr_root, tmp_path, sig):
    """``feedlab-doctor --what-if`` signalled while its ``peers.whatif`` child measures: one line, exit 128+n
    (130 for Ctrl-C), the child and everything it started stopped, its folder gone, nothing in /dev/shm
    (before: the child ran on in its own session with PPID 1, beside its temporary folder)."""
    driver, log, tmp = tmp_path / "driver.py", tmp_path / "said.txt", tmp_path / "tmp"
    driver.write_text(WHATIF_DRIVER)
    tmp.mkdir()

    def child():
        return _procs_with(str(tmp)) if log.is_file() and "your pipeline" in log.read_text() else []

    rc, lines, pids = _signalled([sys.executable, str(driver), str(sr_root), str(log)], tmp, child, sig)
    assert rc == (130 if sig == signal.SIGINT else 128 + sig) and len(lines) == 1, lines
    assert lines[0].startswith("python -m feedlab.doctor: ") and "Traceback" not in lines[0]
    assert not list(tmp.iterdir()), list(tmp.iterdir())


HUNG_PEER = """#!/bin/sh
# a peer venv's python that hangs after leaving a daemon in a session of its own
setsid sh -c 'sleep 300 & echo $! > "$0"' {pidfile} &
sleep 300
"""

BENCH_DRIVER = """
import sys
from feedlab.peers import venvs
venvs.python_for = lambda name, root=None: sys.argv[1]
from feedlab import bench
sys.exit(bench.main(sys.argv[2:]))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_bench_peer_stops_the_peers_venv_process_and_its_daemon(sr_root, tmp_path, sig):
    """``bench --peer NAME`` signalled while the peer's venv runs: one line, exit 128+n, the venv's process and
    the daemon it left with setsid stopped (before: both ran on)."""
    pidfile, tmp = tmp_path / "daemon.pid", tmp_path / "tmp"
    tmp.mkdir()
    py = tmp_path / "venv-python"
    py.write_text(HUNG_PEER.format(pidfile=pidfile))
    py.chmod(0o755)
    driver = tmp_path / "driver.py"
    driver.write_text(BENCH_DRIVER)
    env = {k: v for k, v in _env().items() if k != "FEEDLAB_PEER_IN_VENV"}

    def started():
        return [*_procs_with(str(py)), int(pidfile.read_text())] if pidfile.is_file() and pidfile.read_text() else []

    rc, lines, pids = _signalled([sys.executable, str(driver), str(py), "--peer", "ffcv", "--data", str(sr_root),
                                  "--kind", "sr", "--num-workers", "0", "--batch-size", "8", "--epochs", "1",
                                  "--timeout", "0"], tmp, started, sig, env=env)
    assert rc == 128 + sig and len(lines) == 1, lines
    assert lines[0].startswith("python -m feedlab.bench: ") and sig.name in lines[0]
    assert not list(tmp.iterdir()), list(tmp.iterdir())


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_a_signal_to_pack_leaves_no_temporary_and_says_so_in_one_line(tmp_path, sig):
    """``python -m data_prep pack`` hung up (or terminated) mid-write: one line, exit 128+n, no
    ``*.tmp-<pid>-<hex>`` left beside the set (before: SIGHUP ended it silently and left them). What it
    keeps is each format it wrote in full before the signal, recorded in the manifest: on a loaded machine
    the signal comes after lmdb (0.3 s) and hdf5 (0.1 s) are done, and hdf5's file is ``sr.h5``."""
    root, tmp = tmp_path / "sr", tmp_path / "tmp"
    tmp.mkdir()
    data_prep.build_sr(root, 32, 2, 3000, seed=0, log=lambda _m: None)
    before = {p.name for p in root.iterdir()}

    def writing():
        return _procs_with(str(root)) if any(".tmp-" in p.name for p in root.iterdir()) else []

    rc, lines, _ = _signalled([sys.executable, "-m", "data_prep", "pack", str(root), "--to", "lmdb,hdf5,npy"],
                              tmp, writing, sig)
    lines = [ln for ln in lines if "sample/s]" not in ln and "\r" not in ln]   # its progress bars
    assert rc == 128 + sig and len(lines) == 1, lines
    assert lines[0].startswith("data_prep pack: ") and sig.name in lines[0] and "no partial output" in lines[0]
    assert not [p.name for p in root.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
    packed = json.loads((root / "manifest.json").read_text()).get("formats", {})
    whole = {F.get_format(fmt).path.rstrip("/") for fmt in ("lmdb", "hdf5", "npy") if fmt in packed}
    now = {p.name for p in root.iterdir()}
    assert now - before == whole, (now - before, sorted(packed))   # nothing else, and nothing recorded is missing
    assert not [p for p in tmp.iterdir() if not p.name.startswith("torchinductor_")]   # torch's cache, at import
