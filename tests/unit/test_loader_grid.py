"""The shared loader grid and the worker-scaling helpers."""

from __future__ import annotations

import pytest

from feedlab import like_for_like as L
from feedlab.experiments import loader_grid as G
from feedlab.experiments import worker_scaling as W


def test_grid_is_the_product_and_rejects_unknown_names():
    s = G.grid(batch_size=[8, 16], num_workers=[0, 2], format="png")
    assert len(s) == 4
    assert {(x.batch_size, x.num_workers) for x in s} == {(8, 0), (8, 2), (16, 0), (16, 2)}
    with pytest.raises(TypeError):
        G.grid(batch_size=[8], workers=[1])
    with pytest.raises(ValueError):
        G.grid(batch_size=[])


def test_pin_memory_not_applicable_without_cuda():
    s = G.grid(batch_size=8, pin_memory=[False, True])
    run, skipped = G.split_applicable(s, "cpu")
    assert [x.pin_memory for x in run] == [False]
    assert len(skipped) == 1 and "CUDA" in skipped[0][1]
    run, skipped = G.split_applicable(s, "cuda")
    assert len(run) == 2 and not skipped
    with pytest.raises(ValueError):
        G.run_grid("/nonexistent", [G.PipelineSpec(batch_size=8, pin_memory=True)], device="cpu")


def test_prefetch_needs_workers_and_model_names():
    assert not G.applicable(G.PipelineSpec(batch_size=8, num_workers=0, prefetch_factor=4), "cpu")[0]
    assert G.applicable(G.PipelineSpec(batch_size=8, num_workers=1, prefetch_factor=4), "cpu")[0]
    assert not G.applicable(G.PipelineSpec(batch_size=8, model="vgg"), "cpu")[0]
    assert G.resolve_model_name("auto", "cpu") == "srcnn_small"
    assert G.resolve_model_name("auto", "cuda") == "srcnn"


@pytest.mark.parametrize("fmt,collate", [("png", "totensor"), ("lmdb", "fast")])
def test_run_grid_rows(sr_root, fmt, collate):
    settings = G.grid(batch_size=[4, 8], num_workers=[0, 1], format=fmt, collate=collate, model="srcnn_small")
    res = G.run_grid(sr_root, settings, repeats=2, max_batches=3, warmup=1, device="cpu")
    df = res.frame()
    for col in ("batch_size", "num_workers", "pin_memory", "format", "collate", "repeat", "metric", "value", "unit"):
        assert col in df.columns
    rates = df[df.metric == "samples_per_s"]
    assert len(rates) == len(settings) * 2
    assert (rates["value"] > 0).all()
    assert set(df[df.metric == "samples"]["value"]) == {12.0, 24.0}  # 3 batches of 4 or 8
    ph = G.phase_table(df, ["batch_size", "num_workers"])
    assert len(ph) == 4 and (ph["forward"] > 0).all() and (ph["total"] >= ph["data_wait"]).all()
    assert (df[df.metric == "data_wait_fraction"]["value"].between(0, 1)).all()
    # the invariants the one judge reads (issue 45), from what the grid did: shuffled, pixels checked, warm
    assert df[list(L.INVARIANT_COLUMNS)].notna().all().all()
    assert set(df["order"]) == {"global"} and set(df["cache"]) == {"warm"} and set(df["epoch_batches"]) == {0}
    assert set(df["pixel_error"]) == {0.0}   # PNG and LMDB hold the PNG's pixels exactly
    assert (df["window_s"] > 0).all() and (df["window_s"] <= df[df.metric == "epoch_s"]["value"].max()).all()


def test_steady_rate_leaves_out_the_first_batch():
    import numpy as np

    from feedlab.timing import EpochTiming

    et = EpochTiming(phases_s=np.array([[1.0, 0, 0, 0], [0.1, 0, 0, 0], [0.1, 0, 0, 0]]),
                     batch_sizes=np.array([10, 10, 10]), wall_s=1.2, first_batch_s=1.0)
    assert G.steady_rate(et) == pytest.approx(20 / 0.2)
    et1 = EpochTiming(phases_s=np.array([[1.0, 0, 0, 0]]), batch_sizes=np.array([10]), wall_s=1.0, first_batch_s=1.0)
    assert G.steady_rate(et1) is None  # too short to skip anything: no steady rate, never a silent whole-epoch one
    from feedlab.pipeline import rate_of

    assert rate_of(et1, 1) == (et1.samples_per_s, "startup_inclusive", 0)  # the whole-epoch rate only with its label


def test_sleep_timeline_parallel_and_one_batch_serial():
    items, batches, wall = W.fetch_timeline(12, 0.03, num_workers=3, batch_size=2)
    assert sorted(items["item"]) == list(range(12))
    assert set(items["worker"]) == {0, 1, 2}
    assert W.max_concurrency(items) >= 2
    assert (items["end"] > items["start"]).all()
    items1, _, _ = W.fetch_timeline(12, 0.01, num_workers=3, batch_size=12)
    assert W.max_concurrency(items1) == 1  # one batch = one worker, fetched item after item
    items0, _, _ = W.fetch_timeline(4, 0.0, num_workers=0, batch_size=2)
    assert set(items0["worker"]) == {-1}


def test_sleep_timeline_rows_say_pixels_and_cache_do_not_apply():
    res, _ = W.timeline_runs([(0, 2)], 4, 0.0)
    df = res.frame()
    assert set(df["pixel_error"]) == {L.NOT_APPLICABLE} and set(df["cache"]) == {L.NOT_APPLICABLE}
    assert set(df["order"]) == {"global"} and set(df["timed_batches"]) == {2} and (df["window_s"] > 0).all()


def test_steady_rate_skips_the_prefetch_burst():
    """Batches prefetched during start-up arrive at no cost; the steady rate must not
    count them (else 3 workers on 2 cores appear to beat 2 by far)."""
    import numpy as np

    from feedlab.experiments import loader_grid as G
    from feedlab.timing import EpochTiming

    # batch 0 waits 1 s (start-up), batches 1-3 were prefetched (no wait), then 0.1 s each
    waits = [1.0, 0.0, 0.0, 0.0] + [0.1] * 6
    phases = np.zeros((10, 4))
    phases[:, 0] = waits
    et = EpochTiming(phases_s=phases, batch_sizes=np.full(10, 10), wall_s=sum(waits), first_batch_s=1.0)
    assert abs(G.steady_rate(et, skip=4) - 100.0) < 1e-9          # 60 samples in 0.6 s
    assert G.steady_rate(et, skip=1) > 140                          # the burst inflates it
    assert G.prefetch_depth(G.PipelineSpec(batch_size=8, num_workers=3)) == 6
    assert G.prefetch_depth(G.PipelineSpec(batch_size=8, num_workers=0)) == 1
    short = EpochTiming(phases_s=phases[:4], batch_sizes=np.full(4, 10), wall_s=1.0, first_batch_s=1.0)
    assert G.steady_rate(short, skip=4) is None    # too short: no steady rate (never the whole-epoch one unlabelled)


def test_02_times_reads_without_the_checksum_check(monkeypatch):
    """02 compares the formats' read speed alone: every format's dataset is opened with
    verify=False unless asked (the rows would otherwise include a crc32c per sample)."""
    from feedlab.experiments import lmdb_vs_png

    seen = {}
    monkeypatch.setattr(lmdb_vs_png, "run_grid", lambda *a, **kw: seen.update(kw.get("dataset_opts") or {}))
    lmdb_vs_png.run_formats("root", ["png", "lmdb"], [8], [0], model="none", device="cpu")
    assert seen == {"png": {"verify": False}, "lmdb": {"verify": False}}
    lmdb_vs_png.run_formats("root", ["lmdb"], [8], [0], model="none", device="cpu", verify=True)
    assert seen["lmdb"] == {"verify": True}
