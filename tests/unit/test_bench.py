"""`python -m feedlab.bench`: the JSON it prints and the errors it gives."""

from __future__ import annotations

import json

import pytest
from inproc import run_cli

from feedlab import bench


@pytest.mark.parametrize("fmt,collate", [("png", "totensor"), ("lmdb", "fast")])
def test_bench_json_has_the_fields(sr_root, capsys, fmt, collate):
    assert bench.main(["--data", str(sr_root), "--format", fmt, "--batch-size", "16", "--num-workers", "0",
                       "--collate", collate, "--epochs", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("samples_per_s", "batches", "data_wait_s", "batch_size", "num_workers", "format",
                "collate", "pin_memory", "samples_per_s_runs", "timer_overhead_s_per_batch"):
        assert key in out, key
    assert out["format"] == fmt and out["collate"] == collate and out["batch_size"] == 16
    assert out["samples"] == 48 and out["batches"] == 3          # every sample, once per epoch
    assert len(out["samples_per_s_runs"]) == 2 and out["samples_per_s"] > 0
    assert out["samples_per_s_q25"] <= out["samples_per_s"] <= out["samples_per_s_q75"]


def test_bench_pin_memory_without_cuda_is_reported_not_applied(sr_root, capsys):
    import torch

    bench.main(["--data", str(sr_root), "--format", "npy_mmap", "--batch-size", "8", "--num-workers", "0",
                "--pin-memory", "--epochs", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["pin_memory_requested"] is True
    assert out["pin_memory"] is torch.cuda.is_available()


def test_bench_missing_data_names_it_and_the_fix(tmp_path):
    missing = tmp_path / "nope"
    r = run_cli("feedlab.bench", "--data", str(missing), "--json")  # as python -m runs it, in this process
    assert r.returncode != 0
    assert str(missing) in r.stderr and "data_prep sr" in r.stderr


def test_bench_and_pack_over_a_sample_file_say_it_is_a_file_not_a_data_set(tmp_path, capsys):
    """attack58 W8: `bench --data set/hr/000001.png` advised packing the file; pack then said it "does not exist"."""
    from data_prep.__main__ import main as data_prep

    sample = tmp_path / "000001.png"
    sample.write_bytes(b"\x89PNG")
    r = run_cli("feedlab.bench", "--data", str(sample), "--num-workers", "0")
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode != 0 and len(err) == 1 and "is a file, not a data set folder" in err[0], err
    assert "data_prep pack" not in err[0]
    assert data_prep(["pack", str(sample), "--to", "png"]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a data set folder" in err and "does not exist" not in err, err
    assert sample.read_bytes() == b"\x89PNG" and sorted(p.name for p in tmp_path.iterdir()) == ["000001.png"]


def test_bench_over_a_folder_of_images_data_prep_never_built_says_how_to_build_one_not_pack_it(tmp_path):
    """attack60 D6: `bench --data work/img` (a folder of photos, no manifest.json) advised `data_prep pack`, which
    refuses a folder that is not an SR set: the advice looped."""
    img = tmp_path / "img"
    img.mkdir()
    (img / "a.jpg").write_bytes(b"\xff\xd8")
    r = run_cli("feedlab.bench", "--data", str(img), "--format", "png", "--num-workers", "0")
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode != 0 and len(err) == 1, err
    assert f"data_prep sr --source {img}" in err[0] and "data_prep pack" not in err[0], err
    assert sorted(p.name for p in img.iterdir()) == ["a.jpg"]


def test_bench_trace_that_is_a_fifo_is_refused_before_anything_is_measured(tmp_path, capsys):
    """attack60 O1: `bench --trace work/ff` (a FIFO) was refused only after 21 s of measuring."""
    import os

    from feedlab.bench import main

    fifo = tmp_path / "ff"
    os.mkfifo(fifo)
    with pytest.raises(SystemExit) as e:
        main(["--data", str(tmp_path / "nope"), "--trace", str(fifo)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"--trace {fifo} is a FIFO, not a regular file" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ff"]


@pytest.mark.parametrize("argv, says", [(["--samples", "5"], "--samples time(s) a contender of notebook 13"),
                                        (["--kind", "cls", "--cold"], "--kind, --cold time(s) a contender"),
                                        (["--peer", "torch_stock", "--samples", "0"], "--samples 0: the first N")])
def test_bench_peer_flags_without_a_peer_or_out_of_range_are_one_line(capsys, argv, says):
    """attack60 W7/W8: `bench --samples 0` without --peer was dropped silently; with --peer it failed as "output
    check failed — ValueError: num_samples …"."""
    from feedlab.bench import main

    with pytest.raises(SystemExit) as e:
        main(["--data", "nope", *argv])
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_bench_over_a_classification_set_says_what_reads_it_not_pack_it(tmp_path):
    """attack52 B08: `bench --data data/cls-smoke` said "png: no hr/ and lr/ folders …; pack it with `data_prep pack
    data/cls-smoke --to png`": pack takes SR sets, so the advice could not work."""
    cls = tmp_path / "cls"
    (cls / "cat").mkdir(parents=True)
    (cls / "manifest.json").write_text(json.dumps({"kind": "cls", "count": 0}))
    r = run_cli("feedlab.bench", "--data", str(cls), "--format", "png", "--num-workers", "0")
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode != 0 and len(err) == 1, err
    assert "is a classification set" in err[0] and "--kind cls" in err[0] and "data_prep pack" not in err[0], err
    assert sorted(p.name for p in cls.iterdir()) == ["cat", "manifest.json"]


def test_bench_over_a_set_whose_manifest_is_nested_too_deeply_is_one_line(tmp_path):
    """attack54 D17: a manifest.json of '[' * 100000 beside an unpacked set escaped _manifest_kind as a
    RecursionError traceback; it is read as no kind, and the one line says what to do."""
    data = tmp_path / "sr"
    data.mkdir()
    (data / "manifest.json").write_text("[" * 100000 + "]" * 100000)
    r = run_cli("feedlab.bench", "--data", str(data), "--format", "png", "--num-workers", "0")
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode != 0 and len(err) == 1 and "Traceback" not in r.stderr, err
    assert err[0].startswith("python -m feedlab.bench: error: ") and "data_prep pack" in err[0], err


_HUNG_HDF5 = '''
import signal, sys, time
from feedlab.formats import hdf5_store
def stuck(self, *a, **k):   # a read blocked inside C code (a hung mount): SIGALRM never answered
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
    while True:
        time.sleep(3600)
hdf5_store.Hdf5Dataset._read = hdf5_store.Hdf5Dataset.read_batch = stuck
from feedlab.bench import main
sys.argv = ["bench", *sys.argv[1:]]
sys.exit(main())
'''


def test_a_hdf5_read_blocked_inside_c_code_ends_at_the_timeout_with_one_line(sr_root, tmp_path):
    """Issue 47: bench's --timeout bounds a read that SIGALRM cannot interrupt (HDF5's or LMDB's C code on a hung
    mount): the command line is watched from a second process, which ends the run and says so in one line."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from leftovers import session_processes, shm_leaked, shm_names

    repo = Path(__file__).resolve().parents[2]
    script, tmp = tmp_path / "hung_hdf5.py", tmp_path / "tmp"
    script.write_text(_HUNG_HDF5)
    tmp.mkdir()
    env = dict(os.environ, PYTHONPATH=f"{repo / 'lib'}{os.pathsep}{repo}", TMPDIR=str(tmp))
    shm, t0 = shm_names(), time.monotonic()
    p = subprocess.Popen([sys.executable, str(script), "--data", str(sr_root), "--format", "hdf5", "--timeout", "3",
                          "--epochs", "1", "--num-workers", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, start_new_session=True)
    try:
        _out, err = p.communicate(timeout=150)   # the test's own deadline: a hung bench fails, never hangs
    finally:
        left = session_processes(p.pid)
        if p.poll() is None or left:
            os.killpg(p.pid, 9)
            p.wait()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, err
    assert "no progress within 3 s (--timeout)" in lines[0] and "hdf5" in lines[0], lines[0]
    assert time.monotonic() - t0 < 120
    assert not left and not shm_leaked(shm)
    assert [f for f in os.listdir(tmp) if not f.startswith("torchinductor_")] == []


def test_a_trace_inside_figures_is_refused_before_the_bench_runs(tmp_path, monkeypatch, capsys):
    # attack49 O02: `bench --trace figures/<nb>/<machine>/fingerprint.json` replaced a committed record's file, rc 0
    from feedlab import paths
    figs = tmp_path / "figures"
    record = figs / "04_print_overhead" / "cpu-2c"
    record.mkdir(parents=True)
    (record / "fingerprint.json").write_text("{}")
    monkeypatch.setattr(paths, "FIGURES_DIR", figs)

    def ran(*a, **k):
        raise AssertionError("the bench ran")
    monkeypatch.setattr(bench, "bench", ran)
    with pytest.raises(SystemExit) as e:
        bench.main(["--data", str(tmp_path), "--format", "npy", "--num-workers", "0",
                    "--trace", str(record / "fingerprint.json")])
    assert e.value.code == 2
    assert "--trace" in capsys.readouterr().err and (record / "fingerprint.json").read_text() == "{}"
