"""Notebooks 05 (storage formats) and 08 (HDF5 under concurrency) as nbval ran them (smoke, see
nbrun.py). Their library: tests/unit/test_storage_formats.py, tests/unit/test_hdf5_concurrency.py."""

from __future__ import annotations

import pytest

from nbrun import recorded, smoke

pytestmark = pytest.mark.notebook


def test_nb_05_storage_formats():
    payload, df, out = recorded("05_storage_formats")
    P = smoke("05_storage_formats")
    fmts = P["formats"]
    assert payload["formats"] == fmts and payload["repeats"] == P["repeats"]
    assert payload["ceiling_samples_per_s"] > 0 and payload["baseline_samples_per_s"] > 0
    assert payload["ratio_best_to_baseline"] > 0
    assert payload["verify_checksums"] is False
    read = df[(df["mode"] == "read") & (df.metric == "batch_load_ms") & df.variant.str.contains("/")]
    assert set(read["format"]) == set(fmts)
    assert (read.groupby("variant").size() == P["repeats"]).all()   # one row per repeat per setting
    assert (df[df.metric == "samples_per_s"].value > 0).all()
    assert {"zarr_chunk/chunk", "zarr/plain", "lmdb/batched"} <= set(read.variant)
    # settings are (format, loader kind, num_workers) from the registries: Zarr by chunks is (zarr, chunk)
    from feedlab.pipeline.kinds import LOADER_KINDS

    assert set(read["loader"]) <= set(LOADER_KINDS) and ("zarr", "chunk") in set(zip(read["format"], read["loader"]))
    assert "dl_w" not in payload["best_read"] and "/" not in payload["best_single_process"]
    hand = payload["handover"]   # the worker -> main hand-over, DataLoader vs ring, and its targets
    assert hand["ring_handover_gb_s"] > 0 and hand["dataloader_handover_gb_s"] > 0
    assert isinstance(hand["ring_main_us_met"], bool) and hand["lmdb_vs_png"] > 0
    assert hand["ring_delivered_gb_s"] > 0 and hand["dataloader_delivered_gb_s"] > 0   # wall time, both sides
    assert "like for like" in hand["ring_vs_dataloader_words"]   # what the ring adds, judged or not and why
    # every rate says how it was timed (smoke windows are below the steady floor, and say so)
    from feedlab.pipeline import RATE_KINDS

    assert set(read["rate_kind"]) <= set(RATE_KINDS) and (read["timed_batches"] >= 1).all()
    assert payload["budget"]["budget_s"] == P["budget_s"]
    assert set(payload["bytes_on_disk"]) == set(fmts)
    assert (out / "batch_load_time.png").stat().st_size > 0


def test_nb_08_hdf5_concurrency():
    payload, df, out = recorded("08_hdf5_concurrency")
    P = smoke("08_hdf5_concurrency")
    assert payload["worker_counts"] == P["worker_counts"] and payload["epochs"] == P["epochs"]
    settings = payload["settings"]
    epochs = P["epochs"]
    for reader in payload["readers"]:
        for method in payload["start_methods"]:
            for w in P["worker_counts"]:
                s = settings[f"{reader}/{method}/w{w}"]
                assert s["expected"] == epochs * payload["samples"]
                assert s["right"] + s["wrong"] + s["missing"] >= s["expected"]
    assert payload["per_worker_all_right"] is True
    assert payload["verify_checksums"] is False
    for reader in ("hdf5_per_worker", "lmdb_per_worker"):
        for w in P["worker_counts"]:
            assert settings[f"{reader}/fork/w{w}"]["right"] == epochs * payload["samples"]
    assert payload["pickle_for_spawn"]["hdf5_parent"].startswith("TypeError")
    assert payload["versions"]["hdf5"]
    assert set(df["num_workers"]) == set(P["worker_counts"])
    assert (out / "wrong_samples.png").stat().st_size > 0
