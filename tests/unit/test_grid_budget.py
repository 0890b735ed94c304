"""Grids that spend where the answer is (issue 31): the worker ladder's stop rule, a notebook's budget leaving
settings out and its table saying so, rates timed to a precision carrying that precision, and the grids of
01, 02 and 09 ordered so the settings their claims read come first."""

from __future__ import annotations

import itertools
import math

import pandas as pd
import pytest

from feedlab.budget import Budget
from feedlab.errors import deadline
from feedlab.experiments import _grid_spend as S
from feedlab.experiments import batch_size_breakdown as B
from feedlab.experiments import lmdb_vs_png as L
from feedlab.experiments import loader_grid as G
from feedlab.experiments._rate_kinds import rate_kind_note, steady_rows
from feedlab.pipeline import PipelineSpec
from feedlab.profiles import profile_values
from feedlab.results import Results, summarize

LIMIT_S = 120   # each grid below ends in seconds when it works


# ---------------------------------------------------------------- the ladder's stop rule
def test_a_curve_has_turned_once_two_successive_points_are_no_faster_than_the_best_beyond_their_spread():
    rising = [(0, 100.0, 5.0), (1, 150.0, 5.0), (2, 300.0, 5.0)]
    assert S.curve_turned(rising) is None
    # 2 workers best; 3 and 4 slower: turned at 2
    assert S.curve_turned(rising + [(3, 280.0, 5.0), (4, 282.0, 5.0)]) == 2
    # a point above the best but inside its own spread is no faster: still turned (3 the fastest measured)
    assert S.curve_turned(rising + [(3, 303.0, 5.0), (4, 290.0, 5.0)]) == 3
    # one of the two clearly faster: still rising
    assert S.curve_turned(rising + [(3, 280.0, 5.0), (4, 340.0, 5.0)]) is None
    assert S.curve_turned(rising + [(3, 290.0, 5.0)]) is None   # the last two: 2 is still a rise over 1
    assert S.curve_turned([(0, 100.0, 1.0), (1, 90.0, 1.0), (2, 95.0, 1.0)]) == 0   # 0 workers fastest (a CPU model)
    assert S.curve_turned([(0, 100.0, 1.0), (1, 90.0, 1.0)]) is None                 # no best before two points
    with pytest.raises(ValueError, match="last"):
        S.curve_turned(rising, last=0)


def test_the_ladder_keeps_the_counts_a_claim_names():
    two = [0, 1, 2, 3, 4]   # worker_ladder(cores + 2, also=(7, cores - 1)) on 2 cores
    assert S.claim_workers(two, 2, beyond_cores=True) == {0, 1, 2, 3}     # 001: one count above the cores
    assert S.claim_workers(two, 2, beyond_cores=False) == {0, 1, 2}
    sixteen = [0, 1, 2, 3, 4, 6, 7, 8, 12, 15, 16]
    assert S.claim_workers(sixteen, 16, beyond_cores=True) == {0, 1, 7, 15, 16}   # 002: 1, 7, cores − 1, cores


def _rate_rows(model, rates):
    res = Results()
    for w, values in rates.items():
        for r, v in enumerate(values):
            res.add("throughput_vs_workers", f"w{w}", "steady_samples_per_s", v, "samples/s", r, model=model,
                    num_workers=w, rate_kind="steady", rate_half_width=0.02)
    return res


def test_a_turned_ladder_leaves_out_only_counts_no_claim_needs():
    res = _rate_rows("m", {0: [310, 309, 300], 1: [199, 200, 195], 2: [195, 190, 197]})
    skip = S.turned_ladder(lambda m: {0, 1, 2})
    why = skip(PipelineSpec(batch_size=32, num_workers=3, model="m"), res)
    assert "turned" in why and "fastest measured: 0 workers" in why
    assert skip(PipelineSpec(batch_size=32, num_workers=2, model="m"), res) == ""     # required: always run
    other = skip(PipelineSpec(batch_size=32, num_workers=3, model="none"), res)     # another line: its own curve
    assert other == ""
    rising = _rate_rows("m", {0: [100] * 3, 1: [200] * 3, 2: [300] * 3})
    assert skip(PipelineSpec(batch_size=32, num_workers=3, model="m"), rising) == ""


# ---------------------------------------------------------------- the budget and the table of what was left out
def _stepping_clock(step=6.0):
    t = itertools.count()
    return lambda: step * next(t)


def test_run_grid_keeps_the_budget_and_names_what_it_left_out(sr_root):
    specs = [PipelineSpec(format="npy_mmap", batch_size=4, num_workers=0, model="none"),
             PipelineSpec(format="npy_mmap", batch_size=8, num_workers=0, model="none")]
    budget = Budget(10, "nb", clock=_stepping_clock())   # 6 s a clock read: the first fits, then no time is left
    with deadline(LIMIT_S, "run_grid with a budget"):
        res = G.run_grid(sr_root, specs, repeats=1, warmup=0, max_batches=2, device="cpu", budget=budget)
    df = res.frame()
    assert set(df["batch_size"]) == {4}
    assert [w for w, _ in res.left_out] == ["loader_grid: npy_mmap totensor b8 w0 model=none"]
    table = S.left_out_table(res)
    assert list(table["setting"]) == ["loader_grid: npy_mmap totensor b8 w0 model=none"] and "no time left" in table["why"][0]
    assert "loader_grid: npy_mmap totensor b8 w0" in budget.note()
    rec = S.spend_record(budget, res, rate_precision=0.05, rate_cap_s=15)
    assert rec["left_out"] == [{"setting": "loader_grid: npy_mmap totensor b8 w0 model=none", "why": table["why"][0]}]
    assert rec["budget"]["budget_s"] == 10 and rec["rate_precision"] == 0.05
    merged = Results()
    merged.extend(res)
    assert merged.left_out == res.left_out            # a notebook's merged results keep what was left out
    none = G.run_grid(sr_root, specs[:1], repeats=1, warmup=0, max_batches=2, device="cpu",
                      budget=Budget(None), skip=lambda s, r: "a reason")
    assert none.left_out == [("loader_grid: npy_mmap totensor b4 w0 model=none", "a reason")] and len(none) == 0
    assert S.left_out_table().empty and list(S.left_out_table().columns) == ["setting", "why"]


def test_a_budget_never_leaves_out_a_setting_a_claim_reads(sr_root):
    specs = [PipelineSpec(format="npy_mmap", batch_size=b, num_workers=0, model="none") for b in (4, 16, 8)]
    budget = Budget(10, "nb", clock=_stepping_clock())
    with deadline(LIMIT_S, "run_grid with essential settings"):
        res = G.run_grid(sr_root, specs, repeats=1, warmup=0, max_batches=2, device="cpu", budget=budget,
                         essential=S.ends([4, 8, 16]))   # the batch ends: 4 and 16 run whatever is left
    assert set(res.frame()["batch_size"]) == {4, 16}
    assert [w for w, _ in res.left_out] == ["loader_grid: npy_mmap totensor b8 w0 model=none"]
    assert set(budget.costs) == {"loader_grid: npy_mmap totensor b4 w0 model=none",
                                 "loader_grid: npy_mmap totensor b16 w0 model=none"}


def test_one_setting_in_two_grids_of_a_notebook_keeps_two_names():
    """01's throughput ladder and batch table both hold png b32 w0 with the model: one cost each, one left-out line each."""
    spec = PipelineSpec(format="png", batch_size=32, num_workers=0, model="srcnn_small")
    assert S.setting_name(spec, "throughput_vs_workers") != S.setting_name(spec, "batch_size_table")
    budget = Budget(100)
    for exp in ("throughput_vs_workers", "batch_size_table"):
        budget.charge(S.setting_name(spec, exp), 1.0, S.budget_group(spec))
    assert len(budget.costs) == 2


# ---------------------------------------------------------------- rates carry their precision
def test_rates_timed_to_a_precision_carry_it_their_interval_and_their_timed_batches(sr_root):
    spec = PipelineSpec(format="npy_mmap", batch_size=4, num_workers=0, model="none")
    with deadline(LIMIT_S, "run_grid to a precision"):
        df = G.run_grid(sr_root, [spec], repeats=1, warmup=0, rate_precision=0.5, rate_cap_s=5.0,
                        min_timed_batches=10, device="cpu").frame()
    assert (df["rate_target"] == 0.5).all() and df["rate_half_width"].notna().all()
    assert (df["timed_batches"] >= 10).all()
    rate = df[df.metric == "steady_samples_per_s"].iloc[0]
    assert rate["rate_low"] <= rate["value"] <= rate["rate_high"]
    hw = rate["rate_half_width"]
    assert rate["rate_low"] == pytest.approx(rate["value"] / (1 + hw))
    assert "±50%" in rate_kind_note(df[df.metric == "steady_samples_per_s"])
    with pytest.raises(ValueError, match="min_timed_batches=5"):
        G.run_grid(sr_root, [spec], rate_precision=0.05, min_timed_batches=5, device="cpu")
    assert G.rate_interval(100.0, math.inf) == {"rate_low": 0.0, "rate_high": math.inf}


def test_an_imprecise_rate_is_drawn_and_named_not_dropped():
    rows = pd.DataFrame([
        {"metric": "steady_samples_per_s", "value": 10.0, "rate_kind": "steady", "timed_batches": 20,
         "rate_target": 0.05, "rate_half_width": 0.03, "format": "png", "batch_size": 8, "num_workers": 0},
        {"metric": "steady_samples_per_s", "value": 5.0, "rate_kind": "imprecise", "timed_batches": 30,
         "rate_target": 0.05, "rate_half_width": 0.09, "format": "png", "batch_size": 128, "num_workers": 2}])
    assert len(steady_rows(rows)) == 2          # a setting whose rate hit its cap keeps its point, labelled
    note = rate_kind_note(rows)
    assert "IMPRECISE" in note and "batch_size=128" in note and "±5%" in note


def test_a_claim_over_an_imprecise_rate_says_so_not_start_up_bound():
    from feedlab.report.claims.core import Outcome, Run
    from feedlab.report.claims.fair import unsteady_reason

    rows = pd.DataFrame([{"format": f, "metric": "steady_samples_per_s", "value": 1.0, "rate_kind": kind,
                          "timed_batches": 30, "warmup_batches": 5} for f, kind in (("png", "steady"),
                                                                                   ("lmdb", "imprecise"))])
    run = Run({}, fingerprint={}, frame=rows)
    why = unsteady_reason(run, Outcome("partly", "", settings=({"format": "png"}, {"format": "lmdb"})))
    assert why.startswith("rates not known to their precision") and "lmdb: imprecise" in why
    assert unsteady_reason(run, Outcome("partly", "", settings=({"format": "png"},))) == ""


# ---------------------------------------------------------------- grids in the order their claims need
def test_batch_sizes_spend_on_the_ends_first():
    assert S.extremes_first([8, 16, 32, 64, 128]) == [8, 128, 16, 32, 64]
    assert S.extremes_first([32, 8]) == [8, 32]


def test_notebook_09_pairs_both_pipelines_at_each_batch_size():
    settings, _ = B.plan([8, 32, 128], [2], [False], model="none", device="cpu")
    order = [(s.batch_size, s.format) for s in settings]
    assert order == [(8, "png"), (8, "lmdb"), (128, "png"), (128, "lmdb"), (32, "png"), (32, "lmdb")]


def test_notebook_02_runs_png_and_lmdb_everywhere_and_lmdb_raw_where_asked():
    settings = L.plan(["png", "lmdb", "lmdb_raw"], [8, 32, 128], [0, 2], raw_batch_sizes=[8, 32])
    main = [(s.format, s.batch_size, s.num_workers) for s in settings if s.format != "lmdb_raw"]
    assert set(main) == {(f, b, w) for f in ("png", "lmdb") for b in (8, 32, 128) for w in (0, 2)}
    raw = [(s.batch_size, s.num_workers) for s in settings if s.format == "lmdb_raw"]
    assert raw == [(8, 0), (8, 2), (32, 0), (32, 2)] and settings[-1].format == "lmdb_raw"
    everywhere = L.plan(["png", "lmdb", "lmdb_raw"], [8, 128], [0])
    assert len(everywhere) == 6


def _summary(rows, by):
    return summarize(pd.DataFrame(rows), by)


def test_readings_say_what_was_left_out_instead_of_failing():
    rate = _summary([{"format": f, "num_workers": 0, "batch_size": b, "value": v}
                     for f, b, v in (("png", 8, 100.0), ("lmdb", 8, 120.0), ("lmdb_raw", 8, 110.0),
                                     ("png", 128, 50.0), ("lmdb", 128, 55.0))], ["format", "num_workers", "batch_size"])
    ratios = L.throughput_ratios(rate, ["png", "lmdb", "lmdb_raw"], [0], [8, 128])
    assert set(ratios) == {"lmdb_w0_b8", "lmdb_raw_w0_b8", "lmdb_w0_b128"}
    store = pd.DataFrame([{"format": f, "bytes": 2 ** 20, "MiB": 1.0} for f in ("png", "lmdb", "lmdb_raw")])
    store.attrs["lz4_ratio"] = 1.5
    lines = L.readings(rate, rate, store, ["png", "lmdb", "lmdb_raw"], [0], [8, 128])
    assert any("(at batch 8 only)" in line for line in lines)
    ms = _summary([{"pipeline": p, "num_workers": 2, "pin_memory": False, "batch_size": b, "value": v}
                   for p, b, v in (("baseline", 8, 6.0), ("fixed", 8, 4.0), ("baseline", 128, 5.0))],
                  ["pipeline", "num_workers", "pin_memory", "batch_size"])
    assert B.gains(ms, [8, 128]) == {"w2_pin0_b8": 1.5}
    out = B.readings(ms, ms, [8, 128], has_gpu_busy=False, has_gpu_util=False)
    assert any("batch 128: not measured on both pipelines" in line for line in out)


# ---------------------------------------------------------------- the profiles
@pytest.mark.parametrize("nb", ["01_worker_scaling", "02_lmdb_vs_png", "09_batch_size_breakdown"])
def test_quick_and_gpu_time_to_a_precision_inside_a_budget_and_full_measures_everything(nb):
    for prof in ("quick", "gpu"):
        v = profile_values(nb, prof)
        assert v["rate_precision"] == 0.05 and v["rate_cap_s"] > 0 and v["budget_s"] > 0
        assert v["min_timed_batches"] >= G.PRECISE_FLOOR
    full = profile_values(nb, "full")
    assert full["budget_s"] is None and full["rate_precision"] is None
