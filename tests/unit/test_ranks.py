"""feedlab.scale.ranks: each rank's loader over any SR format; every sample seen as often as the
sampler promises (exactly once without padding), a new order each epoch, the same order
for the same seed; and one real 2-rank gloo launch through torch.distributed.run."""

from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np
import pytest
from torch.utils.data import Subset

from feedlab import pipeline as P
from feedlab.formats import sr_formats
from feedlab.scale import ranks


def _sha(pair):
    return hashlib.sha1(b"".join(np.ascontiguousarray(np.asarray(a)).tobytes() for a in pair)).hexdigest()


class Tagged:
    """The dataset's samples with their index (the synthetic set holds some identical pairs)."""

    def __init__(self, ds):
        self.ds = ds

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        return i, self.ds[i]


def _ids(batch):
    """Collate: ``index:sha1`` of each pair, so a sample is known by where it is and what it holds."""
    return [f"{i}:{_sha(pair)}" for i, pair in batch]


@pytest.fixture(scope="module")
def ref_ids(sr_reference):
    return [f"{i}:{_sha(pair)}" for i, pair in enumerate(sr_reference)]


def _epoch(dataset, world, epoch, seed=0, drop_last=False, even=True, workers=0, fmt="png"):
    """What every rank reads in one epoch (ranks simulated in this process)."""
    spec = P.PipelineSpec(format=fmt, batch_size=5, num_workers=workers)
    dataset = Tagged(dataset)
    seen = []
    for rank in range(world):
        loader, sampler = ranks.make_rank_loader(dataset, spec, rank, world, seed=seed, drop_last=drop_last,
                                                 even=even, collate_fn=_ids)
        sampler.set_epoch(epoch)
        seen.append([h for b in loader for h in b])
    return seen


def _check_counts(seen, universe, world, drop_last, even):
    counts = Counter(h for s in seen for h in s)
    assert set(counts) <= set(universe)                       # nothing from outside the set
    once, twice, never = ranks.expected_counts(len(universe), world, drop_last, even)
    assert sum(1 for h in universe if counts[h] == 1) == once
    assert sum(1 for h in universe if counts[h] == 2) == twice
    assert sum(1 for h in universe if counts[h] == 0) == never
    assert max(counts.values()) <= 2
    if even:
        assert len({len(s) for s in seen}) == 1               # DDP needs the same length on every rank
    else:
        assert max(map(len, seen)) - min(map(len, seen)) <= 1


@pytest.mark.parametrize("fmt", sr_formats())
def test_every_format_every_sample_exactly_once_across_ranks(sr_root, ref_ids, fmt):
    ds = P.open_dataset(sr_root, P.PipelineSpec(format=fmt))
    seen = _epoch(ds, 3, epoch=0, even=False, fmt=fmt)
    assert sorted(h for s in seen for h in s) == sorted(ref_ids)


@pytest.mark.parametrize("n", [48, 47, 45])
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("even", [True, False])
def test_counts_match_the_sampler_promise_uneven_sizes(sr_root, ref_ids, n, world, drop_last, even):
    ds = Subset(P.open_dataset(sr_root, P.PipelineSpec(format="npy_mmap")), range(n))
    seen = _epoch(ds, world, epoch=1, drop_last=drop_last, even=even)
    _check_counts(seen, ref_ids[:n], world, drop_last, even)


@pytest.mark.parametrize("drop_last,even", [(False, False), (True, True), (False, True)])
def test_across_ranks_and_workers(sr_root, ref_ids, drop_last, even):
    ds = Subset(P.open_dataset(sr_root, P.PipelineSpec(format="lmdb")), range(47))
    seen = _epoch(ds, 2, epoch=0, drop_last=drop_last, even=even, workers=2, fmt="lmdb")
    _check_counts(seen, ref_ids[:47], 2, drop_last, even)


def test_order_changes_with_the_epoch_and_repeats_with_the_seed(sr_root):
    ds = P.open_dataset(sr_root, P.PipelineSpec(format="npy_mmap"))
    e0, e1 = _epoch(ds, 2, 0, seed=7), _epoch(ds, 2, 1, seed=7)
    assert e0 != e1 and e0[0] != e1[0]                         # set_epoch reshuffles every rank
    assert _epoch(ds, 2, 1, seed=7) == e1                      # same seed, same epoch: same order
    assert _epoch(ds, 2, 1, seed=8) != e1
    for even in (True, False):                                 # without set_epoch the order would repeat
        s = ranks.rank_sampler(ds, 0, 2, seed=7, even=even)
        first = list(s)
        assert list(s) == first
        s.set_epoch(1)
        assert list(s) != first


def test_exact_sampler_follows_distributed_sampler_order(sr_root):
    ds = P.open_dataset(sr_root, P.PipelineSpec(format="npy_mmap"))
    for rank in range(3):
        a, b = ranks.rank_sampler(ds, rank, 3, seed=3), ranks.rank_sampler(ds, rank, 3, seed=3, even=False)
        a.set_epoch(2)
        b.set_epoch(2)
        assert list(a) == list(b)                              # 48 / 3: no padding, same split


def test_bad_rank_names_the_arguments(sr_root):
    ds = P.open_dataset(sr_root, P.PipelineSpec(format="npy_mmap"))
    with pytest.raises(ValueError, match="rank 2 of world_size 2"):
        ranks.rank_sampler(ds, 2, 2)


def test_core_shares_are_disjoint_and_cover():
    shares = ranks.core_shares(3, list(range(8)))
    assert sorted(c for s in shares for c in s) == list(range(8)) and all(shares)
    assert ranks.core_shares(3, [0, 1]) == [[0], [1], [0]]


def test_two_real_gloo_ranks_split_the_epoch(sr_root):
    """zarr in chunks of 16 (the fixture's): the launched ranks split by whole chunks (the format's own
    split), 3 chunks over 2 ranks: 32 + 16 samples, the short rank padded from its own chunk."""
    spec = P.PipelineSpec(format="zarr", batch_size=8, num_workers=0, device="cpu")
    out = ranks.launch(2, sr_root, spec, epochs=2, warmup=0, seed=5, record_indices=True, timeout_s=120)
    assert out["backend"] == "gloo" and out["ranks"] == 2 and out["split"] == "chunks"
    rows = out["rows"]
    assert {(r["rank"], r["epoch"]) for r in rows} == {(0, 0), (1, 0), (0, 1), (1, 1)}
    for e in (0, 1):
        per = [set(r["indices"]) for r in rows if r["epoch"] == e]
        assert set.union(*per) == set(range(48))              # every index read
        chunks = [{i // 16 for i in p} for p in per]
        assert not chunks[0] & chunks[1]                       # no chunk read by both ranks
        assert all(r["samples"] == 32 for r in rows if r["epoch"] == e)   # even: padded to the larger rank
    assert [r["indices"] for r in rows if r["epoch"] == 0] != [r["indices"] for r in rows if r["epoch"] == 1]
    assert len(out["per_rank"]) == 2 and out["aggregate_samples_per_s"] > 0
    assert out["slowest_rank_per_epoch"] and set(out["slowest_rank_per_epoch"]) <= {0, 1}


def test_bench_ranks_hands_the_flags_to_launch_and_prints_its_summary(sr_root, capsys, monkeypatch):
    """The bench hook without a second real launch: ``launch`` gets the flags; rows are summarised."""
    import json

    from feedlab import bench

    rows = [{"rank": r, "epoch": e, "cores": [r], "samples": 24, "wall_s": w, "samples_per_s": 24 / w,
             "data_wait_fraction": 0.5, "first_batch_s": 0.01, "reshuffle_s": 1e-4, "indices": None}
            for e, walls in enumerate([(0.1, 0.2), (0.3, 0.1)]) for r, w in enumerate(walls)]
    got = {}

    def fake_launch(n, data, spec, epochs, warmup, max_batches=None, **limits):
        got.update(n=n, data=data, spec=spec, epochs=epochs, warmup=warmup, **limits)
        return {**ranks.summarize_ranks(rows), "ranks": n, "backend": "gloo", "launch_s": 1.0, "sync": True,
                **spec.as_dict()}

    monkeypatch.setattr(ranks, "launch", fake_launch)
    assert bench.main(["--data", str(sr_root), "--format", "npy", "--batch-size", "8", "--num-workers", "0",
                       "--device", "cpu", "--ranks", "2", "--epochs", "2", "--warmup", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert got["n"] == 2 and got["spec"].format == "npy" and got["epochs"] == 2 and got["warmup"] == 0
    assert got["stall_s"] == bench.STALL_S and got["timeout_s"] is None  # --timeout reaches the launcher
    assert out["slowest_rank_per_epoch"] == [1, 0]                   # the rank with the longest wall
    assert out["aggregate_runs"] == pytest.approx([48 / 0.2, 48 / 0.3])  # all samples ÷ the slowest wall
    assert [p["rank"] for p in out["per_rank"]] == [0, 1]
    text = ranks.render(out)
    assert "slowest rank per epoch [1, 0]" in text and "rank 1 on cores [1]" in text


def test_bench_ranks_missing_data_is_one_line(tmp_path, capsys):
    from feedlab import bench

    with pytest.raises(SystemExit):
        bench.main(["--data", str(tmp_path / "nope"), "--ranks", "2"])
    err = capsys.readouterr().err
    assert str(tmp_path / "nope") in err and "Traceback" not in err


def test_ray_missing_is_reported_with_the_reason(monkeypatch):
    import sys

    from feedlab.scale import remote_decode

    monkeypatch.setitem(sys.modules, "ray", None)           # import ray now fails as if not installed
    ok, why = remote_decode.available()
    assert not ok and why.startswith("unavailable:") and "pip install" in why
    res, info = remote_decode.compare("/nonexistent", P.PipelineSpec(), 1, 1, 0, log=lambda _m: None)
    assert len(res) == 0 and info["available"] is False
    assert remote_decode.readings(res.frame(), info) == [f"Ray Data part: {why}"]


def test_grid_settings_leave_out_what_cannot_run_and_say_why():
    from feedlab.experiments.ranks_grid import settings

    run, skipped = settings([1, 2, 4], [0, 2], cores=2)
    assert run == [(1, 0), (1, 2), (2, 0), (2, 2)]
    assert {(r, w) for r, w, _ in skipped} == {(4, 0), (4, 2)} and all("4 ranks > 2 cores" in s for *_, s in skipped)
    run, skipped = settings([1, 2], [0], cores=16, device="cuda", gpus=1)
    assert run == [(1, 0)] and skipped[0][2] == "2 ranks > 1 GPUs"


def test_grid_readings_are_computed_from_the_rows():
    import pandas as pd

    rows = [dict(metric="aggregate_samples_per_s", ranks=r, workers_per_rank=w, rank="all", repeat=k, value=v)
            for r, w, v in [(1, 0, 100.0), (1, 1, 150.0), (2, 0, 180.0), (2, 1, 170.0)] for k in range(2)]
    rows += [dict(metric="wall_s", ranks=2, workers_per_rank=0, rank=rk, repeat=0, value=v)
             for rk, v in [(0, 1.0), (1, 1.5)]]
    lines = ranks_grid_readings(pd.DataFrame(rows))
    assert "1 rank(s): best at 1 workers per rank, 150 samples/s" in lines[0]
    assert "Best on this budget: 2 rank(s) × 0 workers, 180 samples/s." in lines
    assert any("x1.50" in x for x in lines)


def ranks_grid_readings(df):
    from feedlab.experiments.ranks_grid import readings

    return readings(df)


def test_quiet_ray_data_silences_rays_loggers_and_restores_them():
    """Ray Data's one INFO line per dataset names its /tmp session folder in the executed notebook:
    off while measuring, even on a child logger Ray configured with its own level."""
    import logging

    from feedlab.scale import ray_cluster as RC
    from feedlab.scale import remote_decode as RD

    child = logging.getLogger("ray.data._internal.execution.streaming_executor")
    child.setLevel(logging.INFO)
    with RD.quiet_ray_data():
        assert not child.isEnabledFor(logging.INFO) and not logging.getLogger("ray").isEnabledFor(logging.WARNING)
        assert child.isEnabledFor(logging.ERROR)
    assert child.level == logging.INFO
    assert RC.quiet_ray_data is RD.quiet_ray_data


def test_grid_readings_of_a_grid_where_nothing_ran_say_so():
    """Every setting failed (the smoke run saw it when ranks aborted): an empty frame has no columns."""
    import pandas as pd

    from feedlab.experiments import ranks_grid as RG

    assert RG.readings(pd.DataFrame()) == ["No setting ran; the table above says why."]


def test_ray_side_counts_its_exactly_once_check_as_its_first_warm_up_epoch(monkeypatch):
    """The check is an untimed Ray epoch through the same decode tasks: the Ray side runs warmup - 1 more untimed
    epochs after it (not warmup), then the same timed epochs, with the same orders, as before; the DataLoader's
    warm-up is unchanged."""
    pytest.importorskip("ray")
    from feedlab.scale import remote_decode as RD
    from feedlab.timing import EpochTiming

    monkeypatch.setattr(RD, "available", lambda: (True, ""))
    class Eight(list):
        verify = True

    monkeypatch.setattr(RD.pl, "open_dataset", lambda *a, **k: Eight(range(8)))
    monkeypatch.setattr(RD.pl, "make_training", lambda *a, **k: (None, None, None))
    monkeypatch.setattr(RD.pl, "make_loader", lambda *a, **k: "dataloader")
    monkeypatch.setattr(RD, "start", lambda n: (False, 0.0))
    monkeypatch.setattr(RD, "check_once", lambda *a, **k: {"ok": True})
    monkeypatch.setattr(RD, "ray_epoch", lambda root, spec, n, seed, e, **k: f"ray{e}")
    seen = []

    def fake_epoch(it, *a, **k):
        seen.append(it)
        return EpochTiming(np.full((2, 4), 0.01), np.full(2, 4), 0.08, 0.01, {})

    monkeypatch.setattr(RD, "run_epoch", fake_epoch)
    res, info = RD.compare("unused", P.PipelineSpec(device="cpu"), 1, epochs=2, warmup=1, log=lambda _m: None)
    assert seen == ["dataloader"] * 3 + ["ray1", "ray2"] and info["check"]["ok"]
    df = res.frame()
    assert sorted(df[df.metric == "samples_per_s"].groupby("variant").size().items()) == [("DataLoader", 2),
                                                                                         ("Ray Data", 2)]


def test_a_failed_rank_is_one_line_without_torchrun_s_prefix_or_the_module_path():
    """attack52 M02: `rank 0 exited with status 1: [rank1]: feedlab.pipeline.shm.SharedMemoryError: /dev/shm has…`
    (rank 0 and [rank1] in one line, the class by its module path)."""
    text = ("[rank1]: Traceback (most recent call last):\n"
            "[rank1]: feedlab.pipeline.shm.SharedMemoryError: /dev/shm has 2 MiB free, but 1 DataLoader worker(s)\n"
            "Root Cause (first observed failure):\n[0]:\n  time      : x\n  host      : h\n"
            "  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 12)\n")
    line = ranks.failed_rank(text, 1)
    assert line == "rank 0 exited with status 1: SharedMemoryError: /dev/shm has 2 MiB free, but 1 DataLoader worker(s)"
