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
