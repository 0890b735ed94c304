"""feedlab.scale.pagecache: the control flow of the shared-page-cache measurement on a tiny set
(no timing asserted): the documented fields, resident bytes within the store, every sample
requested once per epoch, Pss within Rss for the mmap store, and a failing rank as one line."""

from __future__ import annotations

import os

import pytest

from feedlab import cache
from feedlab import pipeline as P
from feedlab.formats import open_dataset
from feedlab.scale import pagecache as PC

FIELDS = {"ranks", "format", "split", "samples", "files", "file_bytes", "mmap", "requested_bytes_cold",
          "requested_bytes_total", "resident_bytes_before", "resident_bytes_after_cold",
          "resident_bytes_after_warm", "eviction", "evicted", "map_rss_sum", "map_pss_sum", "per_rank"}
RANK_FIELDS = {"rank", "split", "cores", "cold_s", "warm_s", "cold_samples", "warm_samples", "cold_samples_per_s",
               "warm_samples_per_s", "rss", "pss", "map_rss", "map_pss", "map_shared_clean",
               "requested_bytes_cold", "requested_bytes_warm", "warm_read_cold_by_others"}


def _needs_mincore(root):
    if not hasattr(os, "posix_fadvise"):
        pytest.skip("no posix_fadvise on this platform")
    f = next(p for p in root.rglob("*") if p.is_file())
    if cache.resident_pages([f]) is None:
        pytest.skip("no mincore on this platform")


@pytest.mark.parametrize("fmt,split", [("npy_mmap", "samples"), ("zarr", "chunks")])
def test_fields_and_bounds(sr_root, fmt, split):
    _needs_mincore(sr_root)
    spec = P.PipelineSpec(format=fmt, batch_size=8, num_workers=2)
    out = PC.page_cache_share(sr_root, spec, 2, seed=3, split=split, timeout_s=120)
    assert FIELDS <= set(out) and out["split"] == split and out["ranks"] == 2
    assert [set(r) >= RANK_FIELDS for r in out["per_rank"]] == [True, True]
    n = len(open_dataset(sr_root, fmt))
    assert out["samples"] == n
    assert sum(r["cold_samples"] for r in out["per_rank"]) == n      # exactly once per epoch over the ranks
    assert sum(r["warm_samples"] for r in out["per_rank"]) == n
    assert all(0 <= r["warm_read_cold_by_others"] <= 1 for r in out["per_rank"])
    assert out["requested_bytes_cold"] == pytest.approx(out["file_bytes"])
    assert out["requested_bytes_total"] == pytest.approx(2 * out["file_bytes"])
    for k in ("resident_bytes_before", "resident_bytes_after_cold", "resident_bytes_after_warm"):
        assert 0 <= out[k] <= out["file_bytes"]
    assert out["eviction"]["files"] == out["files"]
    assert out["mmap"] is (fmt == "npy_mmap")
    if fmt == "npy_mmap" and out["map_rss_sum"] is not None:
        assert 0 < out["map_pss_sum"] <= out["map_rss_sum"]          # proportional share ≤ resident set
        assert all(r["map_rss"] > 0 for r in out["per_rank"])       # each rank mapped the store it read
    lines = PC.readings(out)
    assert lines[0].startswith("Page cache, 2 ranks on one host") and len(lines) >= 3


def test_a_failing_rank_is_one_line(sr_root):
    with pytest.raises(ChildProcessError, match=r"page-cache run of 2 ranks .* failed: ValueError: split 'x'"):
        PC.page_cache_share(sr_root, P.PipelineSpec(format="npy_mmap"), 2, split="x", timeout_s=30)


def test_missing_data_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        PC.page_cache_share(tmp_path / "nope", P.PipelineSpec(format="npy_mmap"), 2)


def test_smaps_parsing_counts_only_the_named_files(tmp_path):
    import mmap

    f = tmp_path / "blob"
    f.write_bytes(b"x" * 3 * mmap.PAGESIZE)
    with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        _ = m[0] + m[mmap.PAGESIZE]                                 # touch two pages
        use = PC.map_usage([f])
        other = PC.map_usage([tmp_path / "other"])
    if use is None:
        pytest.skip("no /proc/self/smaps")
    assert 2 * mmap.PAGESIZE <= use["Rss"] <= 3 * mmap.PAGESIZE and use["Pss"] <= use["Rss"]
    assert other == dict.fromkeys(("Rss", "Pss", "Shared_Clean", "Private_Clean"), 0)


def _synthetic(rss, pss, resident, evicted=True):
    rank = {"rank": 0, "cold_samples_per_s": 10.0, "warm_samples_per_s": 20.0, "warm_read_cold_by_others": 0.5}
    return {"ranks": 2, "format": "npy_mmap", "split": "chunks", "file_bytes": 2 ** 20, "files": 2, "mmap": True,
            "requested_bytes_total": 2 ** 21, "resident_bytes_before": 0, "resident_bytes_after_cold": resident,
            "resident_bytes_after_warm": resident, "evicted": evicted, "map_rss_sum": rss, "map_pss_sum": pss,
            "per_rank": [rank, {**rank, "rank": 1}]}


def test_readings_verdicts_follow_the_numbers():
    mib = 2 ** 20
    assert "shared, not copied" in PC.readings(_synthetic(2 * mib, mib, mib))[-1]
    assert "nothing shared to show" in PC.readings(_synthetic(mib, mib, mib))[-1]          # Rss = Pss: no sharing
    assert "not shown to be shared" in PC.readings(_synthetic(3 * mib, 1.5 * mib, mib))[-1]  # Pss above resident
    lines = PC.readings(_synthetic(2 * mib, mib, mib, evicted=False))
    assert any("NOT evicted" in x for x in lines) and "50% of its warm samples" in lines[2]
    assert "no mincore" in PC.readings({**_synthetic(2 * mib, mib, None), "resident_bytes_after_warm": None})[1]
