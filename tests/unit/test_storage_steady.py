"""05 (issues 31, 32): steady windows over the whole set, the notebook's budget, the hand-over read warm and
in wall-time bandwidth, what the ring adds judged like for like, the random-gather ceiling. No timing is
asserted: fake clocks, or the labels a window carries."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from feedlab import cache
from feedlab.budget import Budget
from feedlab.experiments import handover as H
from feedlab.experiments import storage_formats as S
from feedlab.report.claims.core import Outcome, Run
from feedlab.report.claims.fair import repeats_reason


def _spec(fmt, loader="dataloader", num_workers=0, batch_size=8):
    return S.as_spec(fmt, batch_size).replace(loader=loader, num_workers=num_workers)


# ---------------------------------------------------------------- steady windows
def test_a_read_window_is_steady_over_the_whole_set_cycled(sr_root):
    """48 samples at batch 8 are 6 batches an epoch: the window chains epochs past its warm-up + 50 timed
    batches and says so (the old 4-batch epochs carried no rate kind and read start-up)."""
    df = S.measure(sr_root, _spec("lmdb", "batched"), None, repeats=1, warmup=0, min_timed=50).frame()
    assert set(df["rate_kind"]) == {"steady"}
    assert (df["timed_batches"] >= 50).all() and set(df["warmup_batches"]) == {1}
    assert (df["window_s"] > 0).all() and df["rate_half_width"].notna().all()


def test_a_window_below_the_floor_is_labelled_start_up_inclusive(sr_root):
    df = S.measure(sr_root, _spec("npy_mmap", "plain"), None, repeats=1, warmup=0, samples=16, min_timed=2).frame()
    assert set(df["rate_kind"]) == {"startup_inclusive"} and set(df["timed_batches"]) == {2}


def test_a_train_window_is_steady_too(sr_root):
    model, opt = S.make_step_model("srcnn", "cpu", f1=3, f2=1, f3=3, n1=4, n2=4)
    df = S.measure(sr_root, _spec("npy_mmap", "chunk"), None, repeats=1, warmup=0, mode="train", model=model,
                   optimizer=opt, min_timed=50).frame()
    assert set(df["rate_kind"]) == {"steady"} and (df["timed_batches"] >= 50).all()
    assert {"step_ms", "wall_samples_per_s", "samples_per_s"} <= set(df.metric)


def _fed(durations, warmup=1, precision=0.05):
    stop = S.steady_stop(warmup, 50, precision, cap_s=1e9)
    t = 0.0
    for i, d in enumerate(durations, 1):
        t += d
        stop(i, t)
    return stop


def test_window_kind_names_a_window_that_missed_its_precision():
    even = _fed([0.01] * 61)
    jumpy = _fed(([0.01] * 6 + [0.2] * 6) * 5 + [0.01])
    assert S.window_kind(even, 60) == "steady"
    assert S.window_kind(jumpy, 60) == "imprecise" and jumpy.achieved > 0.05
    assert S.window_kind(even, 10) == "startup_inclusive"


def test_a_short_window_is_steady_only_where_it_reached_its_precision():
    def fed(durations, precision):
        stop = S.steady_stop(1, 10, precision, cap_s=1e9)
        for i, t in enumerate(np.cumsum(durations), 1):
            stop(i, float(t))
        return stop

    assert S.window_kind(fed([0.2] * 16, 0.05), 15) == "steady"              # 15 batches known to ±5%
    jumpy = fed(([0.1] * 2 + [0.5] * 2) * 4, 0.05)
    assert S.window_kind(jumpy, 15) == "startup_inclusive"                     # short and not precise
    assert S.window_kind(fed([0.2] * 16, None), 15) == "startup_inclusive"     # no precision asked: 50 batches


def test_one_precise_window_stands_for_the_repeats_a_claim_needs():
    rows = [dict(variant="zarr/plain", mode="read", repeat=0, metric="samples_per_s", value=1.0,
                 rate_kind="steady", rate_half_width=0.03)]
    out = Outcome("reproduced", "", settings=({"variant": "zarr/plain", "mode": "read"},))
    assert repeats_reason(Run({}, frame=pd.DataFrame(rows)), out) == ""
    loose = [dict(rows[0], rate_kind="startup_inclusive")]
    assert "too few repeats" in repeats_reason(Run({}, frame=pd.DataFrame(loose)), out)


# ---------------------------------------------------------------- the budget and the order
def test_the_grid_keeps_its_budget_and_names_what_it_left_out(sr_root):
    budget = Budget(1e-9, "05")
    res = S.run(sr_root, ["lmdb"], [1], 8, repeats=1, warmup=0, samples=16, loaders=["batched", "plain"],
                log=None, min_timed=2, budget=budget)
    variants = set(res.frame().variant)
    assert "memcpy_ceiling" in variants and "baseline_png_pil_totensor" in variants   # the references always
    assert not any("/" in v for v in variants)
    note = budget.note()
    assert "reading alone: lmdb, one process, a batch per read" in note and "no time left" in note


def test_a_setting_a_claim_compares_runs_past_the_budget(sr_root):
    """Tier 1 (what the write-ups' claims compare on PNG, HDF5 and Zarr) is essential: past the budget it still
    runs, a claim with a side left out could not be judged; the other formats' settings are left out."""
    budget = Budget(1e-9, "05")
    res = S.run(sr_root, ["png", "lmdb"], [1], 8, repeats=1, warmup=0, samples=16, loaders=["plain"],
                log=None, min_timed=2, budget=budget)
    variants = set(res.frame().variant)
    assert "png/plain" in variants and "lmdb/plain" not in variants
    assert "reading alone: lmdb, one process, a sample at a time" in budget.note()


def test_the_grid_runs_the_most_telling_settings_first():
    """A budget spends on the targets' readers first, then what the write-ups' claims compare (PNG, HDF5,
    Zarr: a sample at a time, 1 and the most workers, the training step), the DataLoader without workers
    and threads last."""
    fmts = ["png", "hdf5", "zarr", "lmdb", "npy"]
    todo = S.plan(S.settings(fmts, [2], 8, None), fmts, 8, with_model=True, cold=True, most=2)
    keys = [(m, s.format, s.loader, s.num_workers) for m, s in todo]
    assert {k[2] for k in keys[:4]} <= {"batched", "chunk"} and all(k[0] == "read" for k in keys[:4])
    first = keys.index(("train", "png", "dataloader", 2))
    for claimed in (("read", "zarr", "plain", 0), ("read", "png", "dataloader", 1), ("read", "hdf5", "plain", 0),
                    ("train", "hdf5", "dataloader", 2)):
        assert keys.index(claimed) < keys.index(("read", "npy", "plain", 0)) and first < keys.index(("cold", "png", "plain", 0))
    assert keys.index(("read", "lmdb", "ring", 2)) < keys.index(("train", "lmdb", "plain", 0))
    assert {k[2:] for k in keys[-2 * len(fmts):]} == {("threads", 2), ("dataloader", 0)}
    assert len(keys) == len(set(keys))


# ---------------------------------------------------------------- the hand-over
def test_every_hand_over_leg_reads_a_warm_cache(sr_root, tmp_path):
    """The committed 3,901 vs 36,498 samples/s: the hand-over ran after the cold-cache epochs had evicted
    LMDB, so its DataLoader leg read from disk. Each leg now reads its store in first."""
    root = Path(shutil.copytree(sr_root, tmp_path / "sr"))
    files = S.store_files(root, "lmdb")
    if cache.resident_pages(files) is None:
        pytest.skip("mincore unavailable here")
    cache.evict(files)
    rows = H.measure(root, ("lmdb_fast_dataloader",), batch_size=8, num_workers=0, batches=2, min_window_s=0.0)
    assert rows[0]["cache"] == "warm" and rows[0]["resident_before"] > 0.9


class Ticks:
    def __init__(self, step):
        self.t, self.step = 0.0, step

    def __call__(self):
        self.t += self.step
        return self.t


def test_the_hand_over_window_lasts_its_second():
    epoch = [(torch.zeros(4, 2, 2, 3, dtype=torch.uint8),)] * 3
    r = H.drive(epoch, batches=2, skip=1, clock=Ticks(0.1), cpu_clock=Ticks(0.01), min_window_s=1.0)
    assert r["timed_batches"] > 2 and r["window_s"] >= 1.0


def _leg(name, sps, timed=60, window=1.5, **kw):
    return dict(pipeline=name, samples_per_s=sps, main_us_per_sample=5.0, handover_gb_s=1.0, delivered_gb_s=0.5,
                batch_size=128, num_workers=2, cache="warm", timed_batches=timed, window_s=window, order="global",
                pixel_error=0.0, **kw)   # order and pixels as handover.measure records them (issue 45)


def test_what_the_ring_adds_is_judged_like_for_like():
    rows = [_leg("png_totensor_dataloader", 1000.0), _leg("lmdb_fast_dataloader", 4000.0), _leg("lmdb_ring", 6000.0)]
    t = H.targets(rows)
    assert t["ring_vs_dataloader"] == pytest.approx(1.5)
    assert t["ring_vs_dataloader_words"] == "like for like" and t["ring_vs_dataloader_differs"] == []
    short = [rows[0], rows[1], _leg("lmdb_ring", 6000.0, timed=50, window=0.1)]
    words = H.targets(short)["ring_vs_dataloader_words"]
    assert words.startswith("not like for like (") and "the ring timed" in words
    line = next(x for x in S.readings(_summ(), None, S.numbers(_summ(), short))
                if x.startswith("What the ring adds"))
    assert "1.50×" in line and "not like for like" in line
    whole = next(x for x in S.readings(_summ(), None, S.numbers(_summ(), rows)) if "÷ PNG + ToTensor" in x)
    assert "whole-pipeline comparison" in whole


# ---------------------------------------------------------------- the ceilings, the window line
def _summ():
    from feedlab.results import Results

    res = Results()
    for name, v in (("memcpy_ceiling", 10000.0), ("ceiling_gather", 4000.0), ("ceiling_numpy_copy", 8000.0),
                    ("ceiling_mmap_slice", 10000.0), ("memcpy_per_item", 5000.0), ("baseline_png_pil_totensor", 500.0)):
        res.add(S.EXPERIMENT, name, "samples_per_s", v, "samples/s", format="ram", loader=name, num_workers=0,
                batch_size=32, mode="read", samples=0)
    spec = _spec("lmdb", "batched", batch_size=32)
    res.add(S.EXPERIMENT, S.variant(spec), "samples_per_s", 7000.0, "samples/s", format="lmdb", loader="batched",
            num_workers=0, batch_size=32, mode="read", samples=0)
    return S.summary(res)


def test_the_random_gather_ceiling_stands_beside_the_contiguous_copy():
    nums = S.numbers(_summ())
    assert nums["contiguous_ceiling_method"] == "mmap_slice" and nums["gather_ceiling_samples_per_s"] == 4000.0
    line = next(x for x in S.readings(_summ(), None, nums) if "random sample order" in x)
    assert "10,000" in line and "4,000" in line and "0.40 of the contiguous copy" in line


def test_the_reading_says_how_its_rates_were_timed():
    frame = pd.DataFrame([dict(variant=v, mode="read", metric="samples_per_s", value=1.0, rate_kind=k,
                               rate_half_width=hw, timed_batches=t)
                          for v, k, hw, t in (("lmdb/batched", "steady", 0.02, 60), ("zarr/plain", "imprecise", 0.2, 55),
                                              ("png/plain", "steady", 0.04, 51))])
    line = next(x for x in S.readings(_summ(), None, S.numbers(_summ()), frame=frame)
                if x.startswith("Reading-alone rates"))
    assert line.startswith("Reading-alone rates: 2 of 3 settings steady") and "±4.0% at the widest" in line
    assert "imprecise: 1" in line


def test_cache_warm_reads_a_file_back_in(tmp_path):
    f = tmp_path / "blob"
    f.write_bytes(b"x" * (1 << 20))
    if cache.resident_pages([f]) is None:
        pytest.skip("mincore unavailable here")
    cache.evict([f])
    assert cache.warm([f]) == 1.0


def test_cache_warm_without_report_reads_the_file_and_skips_the_mincore_check(tmp_path, monkeypatch):
    """05 warms a store before every setting and never reads the fraction: ``report=False`` still reads the
    file back into the page cache, and maps nothing to check it (mincore over PNG's 8,192 files cost ~4x the read)."""
    f = tmp_path / "blob"
    f.write_bytes(b"x" * (1 << 20))
    if cache.resident_pages([f]) is None:
        pytest.skip("mincore unavailable here")
    cache.evict([f])
    checked = []
    monkeypatch.setattr(cache, "resident_pages", lambda files: checked.append(files) or (1, 1))
    assert cache.warm([f], report=False) is None and not checked
    monkeypatch.undo()
    assert cache.resident_pages([f])[0] == cache.resident_pages([f])[1]   # read back in all the same


def test_the_notebooks_target_lines_are_the_readmes():
    """The executed record and the README word a target alike: the README's rewrite of the notebook's own
    reading (report.targets.rewrite_reading on the same run) changes nothing, steady or not."""
    from feedlab.report.targets import rewrite_reading

    summ = _summ()
    nums = S.numbers(summ)
    for kind in ("steady", "startup_inclusive"):
        frame = pd.DataFrame([dict(experiment=S.EXPERIMENT, variant="lmdb/batched", format="lmdb", loader="batched",
                                   num_workers=0, batch_size=32, mode="read", samples=0, repeat=0,
                                   metric="samples_per_s", value=7000.0, rate_kind=kind, timed_batches=60,
                                   warmup_batches=1, rate_half_width=0.02)])
        lines = S.readings(summ, None, nums, frame=frame)
        assert any(x.startswith("Target 2, ") for x in lines)
        assert rewrite_reading("05_storage_formats", lines, Run(nums, frame=frame)) == lines


def test_the_ring_is_set_beside_the_dataloader_on_the_same_format():
    def row(fmt, loader, value, window=1.5, cache_="warm"):
        return dict(variant=f"{fmt}/{loader}", format=fmt, loader=loader, num_workers=2, batch_size=128, mode="read",
                    metric="samples_per_s", value=value, rate_kind="steady", timed_batches=60, window_s=window,
                    cache=cache_, order="global", pixel_error=0.0)   # as storage_formats records them (issue 45)
    frame = pd.DataFrame([row("lmdb", "ring", 9000.0), row("lmdb", "dataloader", 3000.0),
                          row("png", "ring", 1100.0, window=0.2), row("png", "dataloader", 1000.0)])
    line = S.ring_lines(frame)[0]
    assert "lmdb 3.00× (like for like)" in line
    assert "png 1.10× (not like for like (window: the ring timed" in line
    assert S.ring_lines(frame[frame["loader"] != "ring"]) == []


def test_a_window_under_fifty_batches_stops_only_where_precise():
    """05's floor of 10 lets a precise window stop early; at its cap an imprecise one still runs to 50 batches
    (the like-for-like window), so it is labelled imprecise, never start-up inclusive."""
    durations = np.random.default_rng(3).choice([0.001, 0.2], size=500, p=[0.9, 0.1])   # rare long batches
    stop = S.steady_stop(1, 10, 0.05, cap_s=0.05)
    t = 0.0
    for i, d in enumerate(durations, 1):
        t += float(d)
        if stop(i, t):
            break
    timed = i - 1
    assert timed == 50 and not stop.precise and S.window_kind(stop, timed) == "imprecise"
    even = S.steady_stop(1, 10, 0.05, cap_s=0.05)
    for i in range(1, 500):
        if even(i, 0.05 * i):     # a second of batches, then known at once
            break
    assert i - 1 < 50 and even.precise and S.window_kind(even, i - 1) == "steady"
