"""04's loop blocks: the modes a claim judges are lengthened so their repeats pool to a window the judge accepts
(like_for_like's pooled window), and each row records the batches its block timed."""

from __future__ import annotations

from feedlab.experiments import print_overhead as E
from feedlab.like_for_like import MIN_POOLED_REPEATS
from feedlab.results import Results


def test_block_batches_lengthen_only_the_pooled_modes_to_the_pooled_window():
    cfg = E.LoopConfig(modes=["none", "print", "tqdm"], batches=50, repeats=7, pooled_s=1.25)
    seen = []
    count = E.block_batches(cfg, lambda mode: seen.append(mode) or 0.001)   # 1 ms a batch
    assert count == {"none": 179, "print": 179, "tqdm": 50}                  # 7 × 179 × 1 ms >= 1.25 s
    assert sorted(set(seen)) == ["none", "print"]                             # tqdm never calibrated


def test_the_sides_a_claim_compares_share_their_block_length():
    """The review of 2026-11-28: "none" (fast) had been lengthened up to ×20 more than "print", so a block's fixed
    cost (a flush, a sync) was spread over more batches on one side of 004-print-75x. Both get the longer."""
    cfg = E.LoopConfig(modes=["none", "print", "tqdm"], batches=50, repeats=7, pooled_s=1.25)
    count = E.block_batches(cfg, lambda mode: 0.001 if mode == "none" else 0.004)
    assert count["none"] == count["print"] == 179 and count["tqdm"] == 50


def test_block_batches_leave_blocks_alone_where_pooling_cannot_count():
    few = E.LoopConfig(batches=50, repeats=MIN_POOLED_REPEATS - 1)
    assert set(E.block_batches(few, lambda m: 1 / 0).values()) == {50}       # too few repeats: no calibration
    slow = E.LoopConfig(modes=["none"], batches=50, repeats=7)
    assert E.block_batches(slow, lambda m: 0.01)["none"] == 50               # already 7 × 0.5 s: never fewer
    fast = E.LoopConfig(modes=["none"], batches=50, repeats=7)
    assert E.block_batches(fast, lambda m: 1e-7)["none"] == E.MAX_STRETCH * 50   # bounded


def test_rows_record_the_batches_and_window_each_mode_timed():
    cfg = E.LoopConfig(modes=["none", "tqdm"], batches=50, repeats=2)
    times = {"none": [0.001, 0.002], "tqdm": [0.003, 0.003], f"{E.BATCHES}none": [200.0],
             f"{E.BATCHES}tqdm": [50.0]}
    res = Results()
    E._add_rows(res, times, cfg, "pty", "1", "child", "cpu")
    df = res.frame()
    none, tq = df[df["variant"] == "none"], df[df["variant"] == "tqdm"]
    assert list(none["timed_batches"]) == [200, 200] and list(none["window_s"]) == [0.2, 0.4]
    assert list(tq["timed_batches"]) == [50, 50] and set(df["variant"]) == {"none", "tqdm"}
