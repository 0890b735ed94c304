"""05_storage_formats: cache eviction, the non-DataLoader loops, the experiment (the notebook: tests/notebooks)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from feedlab import cache, formats
from feedlab.experiments import storage_formats as S
from feedlab.pipeline.loaders import BatchReadLoader, ChunkLoader, index_batches, plain_loop

# ---------------------------------------------------------------- cache

def test_evict_drops_pages_and_says_so(tmp_path):
    p = tmp_path / "blob.bin"
    p.write_bytes(os.urandom(1 << 20))   # dirty pages: evict must fsync them first
    p.read_bytes()
    rep = cache.evict([p])
    assert rep.files == 1 and rep.bytes == 1 << 20
    if not rep.supported:
        pytest.skip(rep.summary())
    assert rep.evicted_files == 1 and not rep.failed
    if rep.verified == "mincore":
        assert rep.pages == 256 or rep.pages == -(-(1 << 20) // cache._PAGE)
        assert rep.resident_pages_after <= rep.pages // 10, rep.summary()
        assert rep.ok
        p.read_bytes()
        res, tot = cache.resident_pages([p])
        assert res == tot  # read back in: resident again


def test_evict_reports_missing_file(tmp_path):
    ok = tmp_path / "a"
    ok.write_bytes(b"x" * 10)
    rep = cache.evict([ok, tmp_path / "missing"], verify=False)
    assert rep.evicted_files == 1 and len(rep.failed) == 1 and not rep.ok
    assert "missing" in rep.summary()


def test_files_under(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_bytes(b"1")
    (tmp_path / "y").write_bytes(b"2")
    assert [p.name for p in cache.files_under(tmp_path / "d", tmp_path / "y")] == ["x", "y"]


# ---------------------------------------------------------------- loaders

def test_index_batches_cover_each_index_once():
    b = index_batches(50, 16, seed=3, epoch=1)
    flat = sorted(i for batch in b for i in batch)
    assert flat == list(range(50)) and [len(x) for x in b] == [16, 16, 16, 2]
    assert index_batches(50, 16, seed=3, epoch=1) == b != index_batches(50, 16, seed=3, epoch=2)
    assert len(index_batches(50, 16, drop_last=True)) == 3


def _digest(lr, hr) -> bytes:
    import hashlib

    return hashlib.sha1(np.ascontiguousarray(lr).tobytes() + np.ascontiguousarray(hr).tobytes()).digest()


def _epoch_pairs(loader, ds):
    """The multiset of (lr, hr) digests one epoch returns, and the data set's own."""
    from collections import Counter

    got = Counter()
    for lr, hr in loader:
        assert lr.dtype == torch.uint8 and lr.ndim == 4 and hr.shape[0] == lr.shape[0]
        for k in range(len(hr)):
            got[_digest(lr[k].numpy(), hr[k].numpy())] += 1
    want = Counter(_digest(*ds[i]) for i in range(len(ds)))
    return got, want


@pytest.mark.parametrize("fmt", ["lmdb", "npy_mmap", "hdf5"])
def test_plain_and_batched_loops_return_every_sample(sr_root, fmt):
    ds = formats.open_dataset(sr_root, fmt)
    for loader in (plain_loop(ds, 10), BatchReadLoader(ds, 10, reuse_buffers=False)):
        got, want = _epoch_pairs(loader, ds)
        assert got == want


def test_chunk_loader_batches_stay_in_one_chunk(sr_root):
    ds = formats.open_dataset(sr_root, "zarr")
    loader = ChunkLoader(ds, reuse_buffers=False)
    assert len(loader) == -(-len(ds) // ds.chunk_len)
    got, want = _epoch_pairs(loader, ds)
    assert got == want
    it = iter(ChunkLoader(ds, batch_size=ds.chunk_len // 2).batch_sampler)
    for b in it:
        assert len({i // ds.chunk_len for i in b}) == 1


def test_batch_read_loader_reuses_buffers(sr_root):
    ds = formats.open_dataset(sr_root, "npy_mmap")
    ptrs = {lr.data_ptr() for lr, _ in BatchReadLoader(ds, 8)}
    assert len(ptrs) == 1


def test_batch_read_loader_partial_batch_and_readers_that_ignore_out(sr_root):
    ds = formats.open_dataset(sr_root, "npy_mmap")
    n = len(ds)
    bs = 7 if n % 7 else 5
    batches = list((lr.clone(), hr.clone()) for lr, hr in BatchReadLoader(ds, bs, shuffle=False))
    assert [len(b[0]) for b in batches] == [min(bs, n - s) for s in range(0, n, bs)]
    lr_all, hr_all = ds.read_batch(range(n))
    np.testing.assert_array_equal(torch.cat([b[0] for b in batches]).numpy(), lr_all)
    np.testing.assert_array_equal(torch.cat([b[1] for b in batches]).numpy(), hr_all)

    class IgnoresOut:  # returns fresh arrays: the loader must yield those, not its buffers
        lr_shape, hr_shape = ds.lr_shape, ds.hr_shape

        def __len__(self):
            return n

        def read_batch(self, idx, out=None):
            return ds.read_batch(idx)

    got = [(lr.clone(), hr.clone()) for lr, hr in BatchReadLoader(IgnoresOut(), bs, shuffle=False)]
    np.testing.assert_array_equal(torch.cat([b[0] for b in got]).numpy(), lr_all)
    np.testing.assert_array_equal(torch.cat([b[1] for b in got]).numpy(), hr_all)


def _spec(fmt, loader="dataloader", num_workers=0, batch_size=8):
    return S.as_spec(fmt, batch_size).replace(loader=loader, num_workers=num_workers)


def test_measured_loaders_use_the_batched_fast_path(sr_root):
    from feedlab.formats.npy_store import NpyMmapDataset

    for lo in ("chunk", "batched"):
        ds = S.open_format(sr_root, _spec("npy_mmap", lo))
        assert ds.read_batch.__func__ is NpyMmapDataset.read_batch
        ld = S.make_loader(ds, _spec("npy_mmap", lo))
        inner = getattr(ld, "loader", ld)  # slot-filling kinds come wrapped in an NCHW view
        assert isinstance(inner, BatchReadLoader) and inner.dataset is ds
        assert isinstance(inner, ChunkLoader) == (lo == "chunk")


def test_settings_come_from_the_registries(sr_root):
    """Which kinds read a format is its capabilities against each kind's requirements: no table."""
    got = {(s.format, s.loader, s.num_workers) for s in S.settings(["hdf5", "zarr", "npy_mmap", "png"], [2], 8)}
    assert ("zarr", "chunk", 0) in got and ("npy_mmap", "chunk", 0) in got
    assert ("hdf5", "chunk", 0) not in got and ("png", "chunk", 0) not in got   # not chunked stores
    assert {("npy_mmap", "dataloader", w) for w in (0, 1, 2)} <= got and ("npy_mmap", "ring", 2) in got
    assert all(s.collate == S.COLLATE and not s.problems("cpu") for s in S.settings(["lmdb"], [2], 8))
    only = S.settings(["lmdb"], [2], 8, loaders=["batched", "dataloader"])
    assert {(s.loader, s.num_workers) for s in only} == {("batched", 0), ("dataloader", 0), ("dataloader", 1),
                                                         ("dataloader", 2)}
    # the keys the claims ledger reads, and words a reader reads
    assert S.variant(_spec("zarr", "chunk")) == "zarr_chunk/chunk" and S.variant(_spec("png", num_workers=2)) == \
        "png/dl_w2"
    assert S.loader_words("dataloader", 2) == "DataLoader, 2 workers"
    assert S.loader_words("chunk") == "one process, whole chunks"
    assert S.loader_words("batched") == "one process, a batch per read"
    assert all("dl_w" not in S.setting_words(s) for s in S.settings(["lmdb", "zarr"], [2], 8))


# ---------------------------------------------------------------- experiment

def test_per_sample_wrapper_hides_batched_reads(sr_root):
    ds = S.open_format(sr_root, _spec("zarr", "plain"))
    assert not hasattr(ds, "__getitems__") and not hasattr(ds, "read_batch")
    assert hasattr(S.open_format(sr_root, _spec("zarr", "chunk")), "read_batch")
    assert len(S.open_format(sr_root, "lmdb", samples=7)) == 7


def test_timed_reads_skip_the_checksum_check_unless_asked(sr_root):
    """Rows are read speed alone: every store the experiment times is opened without the
    per-sample checksum check (the set has a checksum table, so the check would run)."""
    assert (Path(sr_root) / "crc32c.npy").is_file()
    for spec in (_spec("png"), _spec("lmdb"), _spec("zarr"), _spec("zarr", "chunk"), _spec("npy_mmap")):
        ds = S.open_format(sr_root, spec)
        inner = ds.base.base if isinstance(ds.base, S.PerSample) else ds.base
        assert inner.verify is False, spec
    assert S.open_format(sr_root, "lmdb", verify=True).base.verify is True


def test_measure_rows(sr_root):
    res = S.measure(sr_root, _spec("lmdb", "plain"), None, repeats=2, warmup=0, samples=32)
    df = res.frame()
    assert set(df.metric) == {"batch_load_ms", "samples_per_s"}
    assert len(df) == 4 and (df.value > 0).all()
    assert set(df["format"]) == {"lmdb"} and set(df["batch_size"]) == {8}
    assert set(df["loader"]) == {"plain"} and set(df["num_workers"]) == {0}
    # issue 45: the invariants the judge reads, from what the code did (a shuffled plain loop over LMDB, whose
    # pixels the 4-sample check finds equal to the PNG's; warm; a window; epochs of 32 / 8 batches)
    assert set(df["order"]) == {"global"} and set(df["pixel_error"]) == {0.0} and set(df["cache"]) == {"warm"}
    assert (df["window_s"] > 0).all() and set(df["epoch_batches"]) == {4}


def test_cold_mode_records_eviction(sr_root):
    res = S.measure(sr_root, _spec("npy", "plain"), None, repeats=1, warmup=0, samples=16, mode="cold")
    df = res.frame()
    frac = df[df.metric == "resident_fraction_after_evict"].value.iloc[0]
    # -1: mincore unavailable here; otherwise the eviction must have dropped (nearly) every page
    assert frac == -1.0 or 0 <= frac <= 0.1, frac
    rate = df[df.metric == "samples_per_s"]
    assert set(rate["cache"]) == {"cold"} and set(rate["epoch_batches"]) == {0} and (rate["window_s"] > 0).all()


def test_train_mode_runs_a_step(sr_root):
    model, opt = S.make_step_model("srcnn", "cpu", f1=3, f2=1, f3=3, n1=4, n2=4)
    before = [p.detach().clone() for p in model.parameters()]
    res = S.measure(sr_root, _spec("npy_mmap", "chunk"), None, repeats=1, warmup=0, mode="train", model=model,
                    optimizer=opt)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert "step_ms" in set(res.frame().metric)


def test_auto_model_is_the_pipelines_choice():
    from feedlab.pipeline import make_training

    model, _opt = S.make_step_model("auto", "cpu")
    assert type(model) is type(make_training("auto", "cpu")[0])


def test_ceiling_is_positive(sr_root):
    df = S.memcpy_ceiling(sr_root, 8, repeats=2, warmup=0).frame()
    from feedlab.collate import CEILING_METHODS

    methods = {f"ceiling_{m}" for m in CEILING_METHODS}
    assert set(df.variant) == {"memcpy_ceiling", "memcpy_per_item", *methods} and (df.value > 0).all()
    summ = df[df.metric == "samples_per_s"].groupby("variant", as_index=False)["value"].median().rename(columns={"value": "median"})
    summ["metric"] = "samples_per_s"
    assert f"ceiling_{S.ceiling_method(summ)}" in methods
    assert set(df[df.variant == "ceiling_gather"]["order"]) == {"global"}   # issue 45: each copy's own order
    assert set(df[df.variant == "ceiling_numpy_copy"]["order"]) == {"sequential"}
    assert set(df["pixel_error"]) == {0.0} and (df["window_s"] > 0).all() and set(df["cache"]) == {"warm"}


# ---------------------------------------------------------------- notebook


@pytest.mark.parametrize("fmt", ["npy_mmap", "lmdb_raw"])
def test_cold_mode_evicts_mapped_formats_before_every_repeat(sr_root, fmt, tmp_path):
    """A reader holding a mapping keeps its pages resident: each cold repeat must close it,
    evict, and reopen, so every repeat (not only the first) starts from a cold cache.
    On a private copy: a page mapped by any other reader (another test's open store on the
    shared set) cannot be evicted, whatever this code does."""
    import shutil

    from feedlab.cache import resident_pages

    sr_root = Path(shutil.copytree(sr_root, tmp_path / "sr"))

    if resident_pages([next(p for p in S.store_files(sr_root, fmt))]) is None:
        pytest.skip("mincore unavailable here")
    df = S.measure(sr_root, _spec(fmt, "plain"), None, repeats=3, warmup=1, samples=16, mode="cold").frame()
    frac = df[df.metric == "resident_fraction_after_evict"].sort_values("repeat").value.tolist()
    assert len(frac) == 3 and all(f <= 0.1 for f in frac), frac


# ---------------------------------------------------------------- reading


def _summary(extra_rows=()):
    from feedlab.results import Results

    res = Results()
    rows = [("zarr", "chunk", 0, 9000.0), ("zarr", "plain", 0, 300.0), ("lmdb_raw", "batched", 0, 7000.0),
            ("npy_mmap", "chunk", 0, 9500.0), ("png", "dataloader", 2, 800.0), ("png", "plain", 0, 400.0),
            ("png", "dataloader", 1, 420.0), *extra_rows]
    for fmt, lo, w, v in rows:
        spec = S.as_spec(fmt, 32).replace(loader=lo, num_workers=w)
        for r in range(2):
            res.add(S.EXPERIMENT, S.variant(spec), "samples_per_s", v, "samples/s", repeat=r, format=fmt, loader=lo,
                    num_workers=w, batch_size=32, mode="read", samples=0)
    for name, v in (("memcpy_ceiling", 10000.0), ("ceiling_gather", 10000.0), ("ceiling_numpy_copy", 8000.0),
                    ("memcpy_per_item", 5000.0), ("baseline_png_pil_totensor", 500.0)):
        for r in range(2):
            res.add(S.EXPERIMENT, name, "samples_per_s", v, "samples/s", repeat=r, format="ram", loader=name,
                    num_workers=0, batch_size=32, mode="read", samples=0)
    return S.summary(res)


def test_reading_states_targets_in_words():
    import pandas as pd

    summ = _summary()
    nums = S.numbers(summ)
    assert nums["best_single_process"] == "npy_mmap, one process, whole chunks"
    assert nums["ratio_best_single_to_ceiling"] == pytest.approx(0.95)
    assert nums["ratio_best_lmdb_batched_to_ceiling"] == pytest.approx(0.70)
    assert nums["ceiling_method"] == "gather" and nums["ratio_best_to_baseline"] == pytest.approx(19.0)
    disk = pd.DataFrame([{"format": "png", "bytes": 2 << 20}, {"format": "lmdb_raw", "bytes": 1 << 20}])
    lines = S.readings(summ, disk, nums)
    text = "\n".join(lines)
    assert "dl_w" not in text and "/batched" not in text and "/chunk" not in text
    # Targets 1 and 1b are judged by the one judge on both sides' records (the loader's and the ceiling's rows):
    # with no table here, not like for like, never met or missed
    assert any(x.startswith("Target 1, ") and "0.95: not like for like (" in x and "measured, not judged" in x
               for x in lines)
    assert any(x.startswith("Target 1b, ") and "0.70: not like for like (" in x for x in lines)
    # Target 2 is judged by the one judge on both sides' records: none here, so never met or missed
    assert any(x.startswith("Target 2, ") and "19.0×: not like for like (" in x and "the ≥ 20× target" in x
               for x in lines)
    assert "30×" in text  # zarr by chunks ÷ zarr one sample at a time: 9000 / 300
    assert "PNG, a loop in one process vs the DataLoader with 1 worker: 400 vs 420" in text
    assert S.figure_title(nums, 32) == ("Reading alone, npy_mmap, one process, whole chunks (batch 32): ×19 the PNG + "
                                        "PIL + ToTensor baseline (DataLoader, 2 workers, batch 128)")
    assert S.panel_title(summ, "read", nums, 32).replace("\n", " ") == S.figure_title(nums, 32)  # wrapped, same words
    assert S.panel_title(summ, "train", nums, 32) == "Batch load time, with a training step per batch"  # none here
    tab = S.table(summ)
    assert "DataLoader, 2 workers" in set(tab["loader"]) and tab["samples/s (median)"].is_monotonic_decreasing


def _rows(variant: str, fmt: str, loader: str, samples: int, batch_size: int = 128, **recorded) -> dict:
    return {"experiment": "storage_formats", "variant": variant, "format": fmt, "loader": loader, "num_workers": 0,
            "batch_size": batch_size, "mode": "read", "samples": samples, "repeat": 0, "metric": "samples_per_s",
            "value": 1.0, "unit": "samples/s", **recorded}


@pytest.mark.parametrize("samples,fair", [(512, False), (128 * 51, True)])
def test_a_target_of_rates_not_timed_steady_is_shown_not_judged(samples, fair):
    """4 batches an epoch (512 samples at batch 128) are all start-up: Target 1, 1b and 2 say so, as the
    claims do; 51 batches (the first + 50 timed) are judged. Target 2 compares whole pipelines (the best reads
    whole chunks in one process, the baseline a global shuffle with 2 workers): the one judge never calls it
    met or missed, whatever the windows."""
    import pandas as pd

    summ = _summary()
    nums = S.numbers(summ)
    batches = samples // 128 - 1   # the first batch is the warm-up
    rec = dict(cache="warm", timed_batches=batches, window_s=batches * 0.05, rate_half_width=0.01, warmup_batches=1,
               order="global", pixel_error=0.0,
               rate_kind="steady" if fair else "startup_inclusive")
    frame = pd.DataFrame([_rows("npy_mmap/chunk", "npy_mmap", "chunk", samples, **rec),
                          _rows("lmdb_raw/batched", "lmdb_raw", "batched", samples, **rec),
                          _rows("png/dl_w2", "png", "dataloader", samples, **rec),
                          _rows("ceiling_gather", "ram", "ceiling_gather", samples, **rec)])
    lines = [x for x in S.readings(summ, pd.DataFrame(columns=["format", "bytes"]), nums, frame=frame)
             if x.startswith("Target 1") or x.startswith("Target 2")]
    assert len(lines) == 3
    for line in lines:
        if line.startswith("Target 2"):
            assert ": not like for like (" in line and line.endswith("measured, not judged.")
            assert "meets" not in line and "misses" not in line
            continue
        if fair:
            assert "not tested fairly" not in line and ("meets" in line or "misses" in line)
        else:   # the one judge on the loader's and the ceiling's windows: 3 timed batches in 0.15 s
            assert "not like for like (window: " in line and "timed 150.0 ms < 1 s" in line
            assert "meets" not in line and "misses" not in line and line.endswith("measured, not judged.")


def test_the_targets_floor_of_timed_batches_is_the_pipelines():
    from feedlab.pipeline import MIN_TIMED_BATCHES
    from feedlab.report.targets import MIN_TIMED

    assert MIN_TIMED == MIN_TIMED_BATCHES


def test_reading_has_the_handover_and_its_targets():
    ho = [{"pipeline": "png_totensor_dataloader", "samples_per_s": 1000.0, "main_us_per_sample": 40.0,
           "handover_gb_s": 0.5, "delivered_gb_s": 0.06},
          {"pipeline": "lmdb_fast_dataloader", "samples_per_s": 4000.0, "main_us_per_sample": 30.0,
           "handover_gb_s": 0.6, "delivered_gb_s": 0.4},
          {"pipeline": "lmdb_ring", "samples_per_s": 6000.0, "main_us_per_sample": 2.0, "handover_gb_s": 9.0,
           "delivered_gb_s": 0.75}]
    nums = S.numbers(_summary(), ho)
    lines = S.readings(_summary(), None, nums, handover_batch=128, handover_workers=2)
    hand = [x for x in lines if "ring" in x]
    # bytes per second of wall time on both sides; the main-thread-CPU figure (9.00) is no bandwidth
    assert any("0.40 GB/s" in x and "0.75 GB/s" in x and "wall time" in x for x in hand)
    assert not any("9.00 GB/s" in x for x in lines)
    assert any("2.0 µs" in x and "meets the ≤ 5 µs target" in x for x in hand)
    # rows that record no window, batch or repeats: the one judge cannot call them like for like
    assert any("6.0×" in x and "not like for like (" in x and "measured, not judged" in x and "the ring" in x
               for x in hand)
    full = dict(batch_size=128, num_workers=2, cache="warm", timed_batches=60, window_s=1.5, order="global",
                pixel_error=0.0)
    ho = [dict(r, repeat=k, **full) for r in ho for k in range(3)]
    lines = S.readings(_summary(), None, S.numbers(_summary(), ho), handover_batch=128, handover_workers=2)
    assert any("6.0×" in x and "meets the ≥ 5× target" in x and "the ring" in x for x in lines)


def test_progress_lines_are_words(sr_root):
    lines = []
    S.run(sr_root, ["zarr"], [1], 8, repeats=1, warmup=0, samples=16, loaders=["chunk"], log=lines.append)
    line = next(x for x in lines if "zarr" in x)   # the references (ceiling, baseline) come first
    assert line == line.split(": ")[0] + ": zarr, one process, whole chunks: " + line.split(": ")[-1]
    assert line.startswith("reading alone: ") and not any("/" in x or "dl_w" in x for x in lines)


def test_worker_kinds_in_words():
    assert S.loader_words("ring", 2) == "a shared-memory ring, 2 workers"
    assert S.loader_words("threads", 2) == "one process, 2 threads filling batch slots"
    assert S.loader_words("dataloader", 0) == "DataLoader, no workers"
