"""A steady rate at the cost of its window: timed until the 95% interval of its mean batch time is within a
stated half-width (after a floor of batches and a second), or to a cap, where it is labelled imprecise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from feedlab.experiments import loader_grid as G
from feedlab.pipeline import PipelineSpec, SteadyStop, rel_half_width


def test_the_interval_of_the_mean_batch_time_by_batch_means():
    assert rel_half_width([0.01] * 40) == pytest.approx(0.0, abs=1e-12)
    assert rel_half_width([0.01] * 19) == math.inf               # fewer than two batches per block
    rng = np.random.default_rng(0)
    noisy = rng.normal(0.01, 0.002, 400)
    assert 0.0 < rel_half_width(noisy) < 0.03                     # 20% noise per batch, 400 batches: ~1.4%
    assert rel_half_width(noisy[:40]) > rel_half_width(noisy)     # fewer batches, a wider interval
    with pytest.raises(ValueError, match="blocks"):
        rel_half_width(noisy, blocks=7)


def _drive(stop, durations):
    t, n = 0.0, 0
    for n, d in enumerate(durations, 1):
        t += d
        if stop(n, t):
            return n
    return None


def test_a_steady_stream_stops_at_its_floor_once_a_second_has_passed():
    stop = SteadyStop(warmup=3, min_timed=20, half_width=0.05, min_window_s=1.0)
    n = _drive(stop, [0.5] * 3 + [0.02] * 1000)
    # precise at 50 (the first whole second, 50 × 20 ms), confirmed at the next look, 5 batches on
    assert stop.precise and not stop.capped and n == 3 + 55
    fast = SteadyStop(warmup=3, min_timed=20, half_width=0.05, min_window_s=0.1)
    assert _drive(fast, [0.5] * 3 + [0.02] * 1000) == 3 + 25        # the floor, confirmed
    once = SteadyStop(warmup=3, min_timed=20, half_width=0.05, min_window_s=0.1, confirm=1)
    assert _drive(once, [0.5] * 3 + [0.02] * 1000) == 3 + 20        # confirm=1: the first precise look


def test_one_precise_look_between_imprecise_ones_does_not_end_a_pass():
    """Optional stopping: with many looks, the first narrow interval of a noisy stream is luck. A pass ends
    at the second precise look in a row; a lucky look followed by a wide one starts the count again."""
    looks = iter([True, False, True, False, True, True])
    stop = SteadyStop(warmup=0, min_timed=10, half_width=0.05, min_window_s=0.0)
    stop.finish = lambda: next(looks)                             # each look's verdict, scripted
    assert _drive(stop, [0.01] * 200) == 10 + 5 * 5                # the 5th and 6th looks: 35 batches


def test_a_batch_cap_waits_for_the_window_the_like_for_like_rule_asks():
    """The H100 cure (2026-11-26): 50 batches of a 7 ms step stopped a pass at 0.36 s, under the 1 s
    window, and the cure could not be judged. A batch cap now ends a pass only after min_window_s."""
    jittered = np.random.default_rng(3).uniform(0.004, 0.010, 2000)   # never precise to 0.1%
    stop = SteadyStop(warmup=0, min_timed=10, half_width=1e-3, min_window_s=1.0, max_timed=50)
    n = _drive(stop, jittered)
    assert stop.capped and n > 50 and jittered[1:n].sum() >= 1.0 > jittered[1:n - 1].sum()   # after the first batch
    slow = SteadyStop(warmup=0, min_timed=10, half_width=1e-3, min_window_s=1.0, max_timed=50)
    assert _drive(slow, np.random.default_rng(4).uniform(0.03, 0.05, 200)) == 50   # a second already: the cap


def test_the_cap_never_cuts_a_pass_below_its_floor():
    """Review: a 0.3 s cap at 50 ms a batch stopped after 6 timed batches, and the row read startup_inclusive."""
    stop = SteadyStop(warmup=1, min_timed=20, half_width=1e-9, min_window_s=0.1, max_window_s=0.3)
    jittered = np.random.default_rng(2).uniform(0.04, 0.06, 200)
    assert _drive(stop, jittered) == 1 + 20 and stop.capped and not stop.precise


def test_a_noisy_stream_runs_to_its_cap_and_is_labelled_not_precise():
    rng = np.random.default_rng(1)
    wild = np.abs(rng.standard_cauchy(5000)) * 0.01 + 0.001        # heavy tails: the interval never closes
    stop = SteadyStop(warmup=2, min_timed=20, half_width=0.01, min_window_s=0.1, max_window_s=2.0)
    n = _drive(stop, [0.1, 0.1, *wild])
    assert n is not None and stop.capped and not stop.precise and stop.achieved > 0.01


def test_run_grid_times_to_the_precision_and_labels_every_row(sr_root):
    spec = PipelineSpec(format="npy_mmap", batch_size=4, num_workers=0, model="none")
    df = G.run_grid(sr_root, [spec], repeats=1, warmup=0, rate_precision=0.5, rate_cap_s=5.0, device="cpu").frame()
    assert set(df["rate_kind"]) <= {"steady", "imprecise"} and "rate_half_width" in df.columns
    assert df[df.metric == "batches"]["value"].iloc[0] >= 1 + G.PRECISE_MIN_TIMED
    hw = df["rate_half_width"].iloc[0]
    assert (hw <= 0.5) == (df["rate_kind"].iloc[0] == "steady")
    capped = G.run_grid(sr_root, [spec], repeats=1, warmup=0, rate_precision=1e-9, rate_cap_s=0.3,
                        device="cpu").frame()
    assert set(capped["rate_kind"]) == {"imprecise"}                # its cap came before that precision
    with pytest.raises(ValueError, match="rate_precision"):
        G.run_grid(sr_root, [spec], rate_precision=5, device="cpu")


def test_an_imprecise_rate_is_not_steady_for_the_claims_and_says_why():
    import pandas as pd

    from feedlab.report.claims.core import Run
    from feedlab.report.claims.fair import steady_state

    rows = pd.DataFrame([{"variant": "a", "metric": "samples_per_s", "value": 1.0, "rate_kind": "imprecise",
                          "timed_batches": 400, "warmup_batches": 3}])
    ok, why = steady_state(Run({}, fingerprint={}, frame=rows), {"variant": "a"})
    assert ok is False and "imprecise" in why


def test_a_five_block_stop_uses_ten_blocks_once_it_has_twenty_batches():
    """A floor of 10 batches needs 5 block means; a long window of fast batches is judged on 10 (a narrower t):
    the same batches, the same rel_half_width as with 10 blocks asked."""
    rng = np.random.default_rng(1)
    steps = 0.01 * (1 + 0.3 * rng.standard_normal(400)).clip(0.2)

    def fed(blocks, n):
        stop = SteadyStop(warmup=1, min_timed=10, half_width=0.05, min_window_s=0.0, blocks=blocks)
        for i, t in enumerate(np.cumsum(steps[:n]), 1):
            stop(i, float(t))
        stop.finish()
        return stop.achieved

    assert fed(5, 400) == pytest.approx(fed(10, 400)) == pytest.approx(rel_half_width(np.diff(np.cumsum(steps)), 10))
    assert fed(5, 15) == pytest.approx(rel_half_width(np.diff(np.cumsum(steps[:15])), 5))   # 14 gaps: 5 blocks


def test_a_cap_under_the_imprecise_floor_is_refused():
    with pytest.raises(ValueError, match="max_timed=20 < min_capped=50"):
        SteadyStop(warmup=1, min_timed=10, max_timed=20, min_capped=50)
