"""Notebooks 01, 02, 09 and 11 ran end to end with the smoke profile (under nbval, see nbrun.py)
and recorded what the profile asked for."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.notebook


from nbrun import recorded, smoke  # noqa: E402


def test_01_worker_scaling_honours_batch_sizes():
    payload, df, out = recorded("01_worker_scaling")
    P = smoke("01_worker_scaling")
    assert payload["batch_sizes"] == P["batch_sizes"]
    table = df[df.experiment == "batch_size_table"]
    assert sorted(table["batch_size"].unique()) == sorted(P["batch_sizes"])
    assert sorted(table["num_workers"].unique()) == sorted(set(P["worker_counts"]))
    rates = table[table.metric == "samples_per_s"]
    assert len(rates) == len(P["batch_sizes"]) * len(set(P["worker_counts"])) * P["repeats"]
    assert (rates["value"] > 0).all()
    assert set(payload["samples_per_s_loader"]) == {"0", "1"}
    assert all(v > 0 for v in payload["samples_per_s_with_model"].values())
    assert set(df[df.experiment == "sleep_timeline"]["num_workers"]) >= {1, 3}
    for name in ("sleep_timeline", "throughput_vs_workers", "batch_size_epoch"):
        assert (out / f"{name}.png").is_file()


def test_02_lmdb_vs_png():
    payload, df, out = recorded("02_lmdb_vs_png")
    assert payload["formats"] == ["lmdb", "lmdb_raw", "png"]
    phases = df[df.metric.isin(["data_wait", "h2d", "forward", "backward"])]
    per_setting = phases.groupby(["format", "batch_size", "num_workers"]).size()
    assert len(per_setting) == 3 * len(payload["batch_sizes"]) * len(payload["worker_counts"])
    assert (per_setting == 4).all()  # 4 phases × 1 repeat
    assert all(v > 0 for v in payload["bytes_on_disk"].values())
    assert payload["lz4_ratio"] > 0
    assert payload["verify_checksums"] is False
    assert (out / "phases_by_format.png").is_file()


def test_09_batch_size_breakdown():
    payload, df, out = recorded("09_batch_size_breakdown")
    assert payload["batch_sizes"] == smoke("09_batch_size_breakdown")["batch_sizes"]
    assert payload["pipelines"] == ["baseline", "fixed"]
    assert set(zip(df["format"], df["collate"])) == {("png", "totensor"), ("lmdb", "fast")}
    if payload["device"] == "cpu":
        assert payload["pin_memory_run"] == [False] and payload["pin_memory_not_applicable"]
    assert all(v > 0 for v in payload["fixed_over_baseline"].values())
    assert (out / "phases_by_batch.png").is_file()


def test_11_worker_hygiene():
    payload, df, out = recorded("11_worker_hygiene")
    sc = payload["scenarios"]
    assert set(sc) == {"break", "worker_error", "keyboard_interrupt", "held_traceback"}
    for name, row in sc.items():
        assert row["workers_started"] == 2 and row["leftover"] == 0, (name, row)
    assert sc["held_traceback"]["alive_after_del"] == 2
    ec = payload["error_cleanup"]
    assert set(ec) == {"plain", "feedlab", "fix"}
    assert ec["feedlab"]["terminated"] == 0 and ec["fix"]["terminated"] == 0
    assert set(payload["first_batch_s_later_epochs"]) == {"True", "False"}
