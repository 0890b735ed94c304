"""Readings, titles and payloads of notebooks 01, 02, 03, 04 and 09, from small made-up summaries:
the notebook prints and records what these functions return (issue 23 item 4, issue 25 item 3)."""

from __future__ import annotations

import pandas as pd
import pytest

from feedlab.experiments import worker_scaling as W
from feedlab.results import summary_median


def _summary(rows, keys):
    df = pd.DataFrame(rows, columns=[*keys, "median"])
    df["q25"], df["q75"] = df["median"] * 0.9, df["median"] * 1.1
    return df


def test_summary_median_picks_the_row_and_names_a_missing_one():
    s = _summary([(0, 8, 1.0), (2, 8, 3.0), (2, 32, 5.0)], ["num_workers", "batch_size"])
    assert summary_median(s, num_workers=2, batch_size=32) == 5.0
    assert summary_median(s, "q75", num_workers=2, batch_size=8) == pytest.approx(3.3)
    with pytest.raises(KeyError, match="num_workers=4"):
        summary_median(s, num_workers=4)


# ------------------------------------------------------------------ 01


def _nb01():
    tl = pd.DataFrame([("sleep", 1, 4, "wall_s", 8.0), ("sleep", 3, 4, "wall_s", 2.9),
                       ("sleep", 3, 32, "wall_s", 8.1), ("sleep", 3, 32, "max_concurrency", 1.0)],
                      columns=["variant", "num_workers", "batch_size", "metric", "median"])
    tp = _summary([("none", 0, 100.0), ("none", 1, 110.0), ("none", 2, 300.0), ("none", 4, 250.0),
                   ("srcnn_small", 0, 50.0), ("srcnn_small", 1, 60.0), ("srcnn_small", 2, 90.0),
                   ("srcnn_small", 4, 80.0)], ["model", "num_workers"])
    ms = _summary([(0, 8, 4.0), (0, 32, 2.0), (2, 8, 3.0), (2, 32, 1.0)], ["num_workers", "batch_size"])
    wait = _summary([(0, 8, 0.5), (0, 32, 0.4), (2, 8, 0.2), (2, 32, 0.1)], ["num_workers", "batch_size"])
    return tl, tp, ms, wait


def test_01_titles_state_the_measured_finding():
    tl, tp, ms, _ = _nb01()
    assert W.throughput_title(tp, 32) == "2 workers: ×2.7 the 1-worker rate at batch 32, loader alone"
    assert W.throughput_title(tp, 32, "srcnn_small").startswith("2 workers: ×1.5 the 1-worker rate")
    # batch 8 over batch 32: ×2 at 0 workers, ×3 at 2 workers: the larger is the finding
    assert W.batch_title(ms, [8, 32]) == "batch 8: ×3 the time per sample of batch 32 at 2 workers"
    assert W.timeline_title(tl, 1, 3, 4).startswith("3 workers: ×2.8 the 1-worker speed at batch 4")
    assert "(ideal ×3)" in W.timeline_title(tl, 1, 3, 4)


def test_01_readings_say_what_was_measured():
    tl, tp, ms, wait = _nb01()
    lines = W.readings(tl, tp, ms, wait, timeline_workers=[1, 3], sleep_batch_size=4, sleep_items=32,
                       sleep_s=0.25, worker_counts=[0, 2], batch_sizes=[8, 32], model="srcnn_small",
                       has_gpu_busy=False, has_gpu_util=False)
    assert lines[0].startswith("(a) 32 items × 0.25 s: 8.00 s with 1 worker, 2.90 s with 3 workers")
    assert "a worker builds a whole batch" in lines[0]
    assert "(b) loader alone: 100 samples/s at 0 workers, 110 at 1, best 300 at 2 workers (2.73× over 1 worker)." in lines
    assert any(x.startswith("(b) with srcnn_small: 50 samples/s") for x in lines)
    assert "(c) 2 workers: 3.00 ms/sample at batch 8 vs 1.00 at batch 32" in lines[4]
    assert "blocked on data 20% vs 10%" in lines[4]
    assert lines[-1] == "GPU busy could not be measured: no CUDA on this run."


def test_01_the_best_rate_is_labelled_by_the_precision_rule_where_its_rows_are_given():
    """audit54 S7: "best 1890 at 2 workers (2.17× over 1 worker)" stood on a 1-repeat imprecise rate (±7.4%) with
    no label; given (b)'s rows, the best carries the precision rule's words and its ratio is measured, not judged.
    The copy path prints a recorded line the same way (report.stage_judge.ladder_line)."""
    from feedlab.report.claims.core import Run
    from feedlab.report.stage_judge import ladder_line

    tl, tp, ms, wait = _nb01()
    rows = [dict(experiment="throughput_vs_workers", model="none", num_workers=w, batch_size=32, repeat=r,
                 metric="samples_per_s", value=v, rate_kind=k, rate_half_width=h, timed_batches=60, window_s=2.0)
            for w, v, k, h, reps in ((1, 110.0, "steady", 0.02, 3), (2, 300.0, "imprecise", 0.074, 1))
            for r in range(reps)]
    frame = pd.DataFrame(rows)
    lines = W.readings(tl, tp[tp.model == "none"], ms, wait, timeline_workers=[1, 3], sleep_batch_size=4,
                       sleep_items=32, sleep_s=0.25, worker_counts=[0, 2], batch_sizes=[8, 32], model="none",
                       has_gpu_busy=False, has_gpu_util=False, frame=frame)
    want = ("(b) loader alone: 100 samples/s at 0 workers, 110 at 1, best 300 at 2 workers (imprecise: ±7.4% > ±5% "
            "asked; 1 repeat < 3) (2.73× over 1 worker: measured, not judged).")
    assert want in lines, lines
    old = "(b) loader alone: 100 samples/s at 0 workers, 110 at 1, best 300 at 2 workers (2.73× over 1 worker)."
    run = Run({}, fingerprint={}, frame=frame)
    assert ladder_line(old, run) == want and ladder_line(want, run) == want
    steady = Run({}, fingerprint={}, frame=frame.assign(rate_kind="steady", rate_half_width=0.02))
    assert ladder_line(old, steady) == old


def test_01_payload_keys_and_values():
    tl, tp, ms, wait = _nb01()
    rows = []
    for exp, w, b in (("throughput_vs_workers", 0, 32), ("batch_size_table", 2, 8)):
        rows.append(dict(experiment=exp, num_workers=w, batch_size=b, metric="steady_samples_per_s",
                         value=1.0, rate_kind="steady"))
    df = pd.DataFrame(rows)
    p = W.payload(profile="smoke", device="cpu", model="srcnn_small", tl_sum=tl, cases=[(1, 4), (3, 4), (3, 32)],
                  tp_df=df[df.experiment == "throughput_vs_workers"], tp_sum=tp,
                  bs_df=df[df.experiment == "batch_size_table"], ms_sum=ms, wait_sum=wait,
                  min_timed_batches=None, time_budget_s=None)
    assert p["sleep_wall_s"] == {"w1_b4": 8.0, "w3_b4": 2.9, "w3_b32": 8.1}
    assert p["samples_per_s_loader"] == {0: 100.0, 1: 110.0, 2: 300.0, 4: 250.0}
    assert p["samples_per_s_with_model"][2] == 90.0
    assert p["ms_per_sample"]["w2_b32"] == 1.0 and p["data_wait_fraction"]["w0_b8"] == 0.5
    assert p["rate_kinds"] == {"batch_size_table_w2_b8": ["steady"], "throughput_vs_workers_w0_b32": ["steady"]}
    assert p["gpu_busy"] == {} and p["gpu_util_measured"] is False and p["gpu_workload"] is None
    assert p["batch_sizes"] == [8] and p["worker_counts"] == [2] and p["throughput_workers"] == [0]


# ------------------------------------------------------------------ 02


def _nb02():
    from feedlab.experiments import lmdb_vs_png as L

    keys = ["num_workers", "batch_size", "format"]
    rate = _summary([(0, 8, "png", 100.0), (0, 8, "lmdb", 150.0), (0, 8, "lmdb_raw", 160.0),
                     (2, 8, "png", 200.0), (2, 8, "lmdb", 400.0), (2, 8, "lmdb_raw", 380.0)], keys)
    wait = _summary([(0, 8, "png", 0.010), (0, 8, "lmdb", 0.004), (0, 8, "lmdb_raw", 0.003),
                     (2, 8, "png", 0.002), (2, 8, "lmdb", 0.001), (2, 8, "lmdb_raw", 0.001)], keys)
    store = pd.DataFrame({"format": ["png", "lmdb", "lmdb_raw"], "bytes": [3 * 2**20, 2**20, 2 * 2**20],
                          "MiB": [3.0, 1.0, 2.0], "build_s": [1.0, 0.5, 0.4]})
    store.attrs["lz4_ratio"] = 2.0
    return L, rate, wait, store


def test_02_ratios_title_and_readings():
    L, rate, wait, store = _nb02()
    fmts = ["png", "lmdb", "lmdb_raw"]
    ratios = L.throughput_ratios(rate, fmts, [0, 2], [8])
    assert ratios == {"lmdb_w0_b8": 1.5, "lmdb_raw_w0_b8": 1.6, "lmdb_w2_b8": 2.0, "lmdb_raw_w2_b8": 1.9}
    assert L.title(ratios) == "LMDB (lz4): ×2 the PNG rate at 2 workers, batch 8 (median ×1.8 over 2 settings)"
    lines = L.readings(wait, rate, store, fmts, [0, 2], [8])
    assert lines[0] == ("0 workers, batch 8: data wait PNG 10.00 ms; lmdb 4.00 ms (throughput 1.50× PNG); "
                        "lmdb_raw 3.00 ms (throughput 1.60× PNG)")
    assert lines[2] == "LMDB (lz4) throughput over PNG: median 1.75× across 2 settings (range 1.50–2.00×)."
    # lz4 vs raw: 150/160 and 400/380 -> 0.94..1.05: did not pay
    assert "lz4 shrank the LMDB by 2.00× on disk (2.0 → 1.0 MiB)" in lines[3] and "did not pay" in lines[3]
    assert lines[4] == "smallest on disk here: lmdb (png 3.0 MiB, lmdb 1.0 MiB, lmdb_raw 2.0 MiB)."


def test_02_payload():
    L, rate, wait, store = _nb02()
    df = pd.DataFrame({"format": ["png", "lmdb"], "batch_size": [8, 8], "num_workers": [0, 2]})
    p = L.payload(profile="smoke", device="cpu", model="m", df=df, store=store, ratios={"lmdb_w0_b8": 1.5},
                  verify=False, map_growth={"grew": True})
    assert p["formats"] == ["lmdb", "png"] and p["worker_counts"] == [0, 2] and p["batch_sizes"] == [8]
    assert p["bytes_on_disk"] == {"png": 3 * 2**20, "lmdb": 2**20, "lmdb_raw": 2 * 2**20}
    assert p["lz4_ratio"] == 2.0 and p["verify_checksums"] is False and p["lmdb_map_growth"] == {"grew": True}


def test_01_throughput_title_when_one_worker_is_best():
    tp = _summary([("none", 0, 100.0), ("none", 1, 300.0), ("none", 2, 200.0)], ["model", "num_workers"])
    assert W.throughput_title(tp, 8) == "1 worker: ×3 the 0-worker rate at batch 8, loader alone"


# ------------------------------------------------------------------ 09


def _nb09():
    keys = ["pipeline", "num_workers", "pin_memory", "batch_size"]
    ms = _summary([("baseline", 2, False, 8, 8.0), ("baseline", 2, False, 32, 4.0),
                   ("fixed", 2, False, 8, 4.0), ("fixed", 2, False, 32, 1.0)], keys)
    wait = _summary([("baseline", 2, False, 8, 0.6), ("baseline", 2, False, 32, 0.5),
                     ("fixed", 2, False, 8, 0.2), ("fixed", 2, False, 32, 0.05)], keys)
    return ms, wait


def test_09_gains_title_and_readings():
    from feedlab.experiments import batch_size_breakdown as B

    ms, wait = _nb09()
    g = B.gains(ms, [8, 32])
    assert g == {"w2_pin0_b8": 2.0, "w2_pin0_b32": 4.0}
    assert B.title(g) == "LMDB + FastCollate: ×4 the PNG baseline's speed per sample at 2 workers, batch 32"
    assert B.title({"w0_pin1_b8": 1.5}).endswith("at 0 workers, batch 8, pinned")
    lines = B.readings(ms, wait, [8, 32], has_gpu_busy=False, has_gpu_util=False)
    assert lines[0] == "2 workers, pin_memory=False: baseline 8.00 ms/sample at batch 8, 4.00 at 32 (2.00× from the batch size)."
    assert lines[2] == ("   batch 32: fixed pipeline runs at 4.00× the baseline speed per sample; "
                        "waiting for data 50% → 5% of the time")
    assert "pin_memory=True was not run" in lines[3] and "no CUDA" in lines[4]
    assert B.timer_reading(2e-6, 0.001).startswith("The phase timer itself costs 2.0 µs per batch: 0.200% ")


def test_09_payload():
    from feedlab.experiments import batch_size_breakdown as B

    ms, _ = _nb09()
    df = pd.DataFrame([dict(pipeline=p, num_workers=2, pin_memory=False, batch_size=b, metric="steady_samples_per_s",
                            value=1.0, rate_kind="steady") for p in ("baseline", "fixed") for b in (8, 32)])
    p = B.payload(profile="smoke", device="cpu", model="m", df=df, ms_sum=ms, gain={"w2_pin0_b8": 2.0},
                  skipped=[], overhead_s=1e-6, min_timed_batches=3, time_budget_s=None)
    assert p["ms_per_sample"] == {"baseline_w2_pin0_b8": 8.0, "baseline_w2_pin0_b32": 4.0,
                                  "fixed_w2_pin0_b8": 4.0, "fixed_w2_pin0_b32": 1.0}
    assert p["rate_kinds"]["fixed_w2_pin0_b32"] == ["steady"] and p["pipelines"] == ["baseline", "fixed"]
    assert p["pin_memory_run"] == [False] and p["pin_memory_not_applicable"] == []
    assert p["gpu_busy"] == {} and p["min_timed_batches"] == 3 and p["timer_overhead_s_per_batch"] == 1e-6


# ------------------------------------------------------------------ 03


def _nb03(cuda: bool):
    rows = []
    for rep, f in enumerate((0.9, 1.1)):
        rows += [dict(variant="host_memcpy", metric="gb_per_s", bytes=2**20, value=8.0 * f, repeat=rep)]
        for s, b in ((16, 8), (64, 8)):
            rows.append(dict(variant="collate", metric="ms_per_batch", input_size=s, batch_size=b,
                             value=(0.1 if s == 16 else 0.4) * f, repeat=rep))
        if cuda:
            rows += [dict(variant="pageable", metric="gb_per_s", bytes=2**20, value=5.0 * f, repeat=rep),
                     dict(variant="pinned", metric="gb_per_s", bytes=2**20, value=10.0 * f, repeat=rep)]
            for s, b, pin, cp, pg in ((16, 8, 0.05, 0.01, 0.02), (64, 8, 0.05, 0.1, 0.3)):
                for v, x in (("pin", pin), ("h2d_pinned", cp), ("h2d_pageable", pg)):
                    rows.append(dict(variant=v, metric="ms_per_batch", input_size=s, batch_size=b, value=x * f,
                                     repeat=rep))
                for v, x in (("pageable", 2.0), ("pinned", 1.6 if s == 64 else 2.0)):
                    rows.append(dict(variant=v, metric="step_ms", input_size=s, batch_size=b, value=x * f,
                                     repeat=rep))
    return pd.DataFrame(rows)


def test_03_without_cuda_reads_the_host_side_only():
    from feedlab.experiments import pinned_memory_by_input_size as E

    df = _nb03(cuda=False)
    lines, head = E.readings(df, cuda=False, link={}, sizes=[2**20], input_sizes=[16, 64], batch_sizes=[8], repeats=2)
    assert lines[0].startswith("Host pageable memcpy of ") and lines[0].endswith(": 8.00 GB/s (median of 2).")
    assert lines[1].startswith("collate, input   16, batch    8: 0.100 ms")
    assert head["host_memcpy_gbps"] == 8.0 and head["collate_ms"] == {"16/8": pytest.approx(0.1), "64/8": pytest.approx(0.4)}
    assert "no GPU in this run" in E.bandwidth_title(df, [2**20], cuda=False)
    assert E.batch_costs_title(df, [16, 64], [8], cuda=False).startswith(
        "collate of input 64: ×4 the time of input 16 at batch 8")
    p = E.payload(profile="smoke", device="cpu", can_pin=False, pin_reason="no driver", input_sizes=[16, 64],
                  batch_sizes=[8], sizes=[2**20], link={}, not_measured=["b", "", "a"], headline=head)
    assert p["cuda"] is False and p["not_measured"] == ["a", "b"] and p["host_memcpy_gbps"] == 8.0


def test_03_pinned_over_pcie_is_judged_by_the_one_judge_never_on_the_point_ratio():
    """audit58 N17: 03's own Reading printed "0.85 (target ≥ 0.75: met)" for a record with no copy window, while
    GPU_READINGS and RESULTS read "measured, not judged": the notebook's line now goes through the same judge."""
    from feedlab.experiments import pinned_memory_by_input_size as E

    link = {"theoretical_gbps": 12.5, "basis": "gen3 x16"}

    def pcie_line(window: bool) -> str:
        w = {"timed_batches": 60, "window_s": 1.5} if window else {}
        copies = pd.DataFrame([dict(variant="pinned", metric="gb_per_s", direction="host_to_device", bytes=2**20,
                                    value=10.0 * (1 + r / 1000), repeat=r, **w) for r in range(5)])
        df = pd.concat([_nb03(cuda=True).query("not (variant == 'pinned' and metric == 'gb_per_s')"), copies])
        lines, _ = E.readings(df, cuda=True, link=link, sizes=[2**20], input_sizes=[16, 64], batch_sizes=[8],
                              repeats=5)
        return next(x for x in lines if x.startswith("Pinned ÷ PCIe"))

    assert pcie_line(window=False).endswith(
        "= 0.80 (target ≥ 0.75: measured, not judged (pinned copies' timed window was not recorded)).")
    assert pcie_line(window=True).endswith("= 0.80 (target ≥ 0.75: met).")
    from feedlab.report.targets import PCIE_FRACTION
    assert f"target ≥ {PCIE_FRACTION:g}:" in pcie_line(window=True)   # the targets' one bound, not a copy that drifts


def test_03_with_cuda_rows_judges_pinning_per_setting():
    """The CUDA branch of the reading, on rows made up as a GPU run would write them."""
    from feedlab.experiments import pinned_memory_by_input_size as E

    df = _nb03(cuda=True)
    link = {"theoretical_gbps": 12.5, "basis": "gen3 x16"}
    lines, head = E.readings(df, cuda=True, link=link, sizes=[2**20], input_sizes=[16, 64], batch_sizes=[8], repeats=2)
    assert head["h2d_pinned_gbps"] == 10.0 and head["pinned_over_pcie"] == pytest.approx(0.8)
    assert any("target ≥ 0.75: measured, not judged (" in x for x in lines)   # no host→device copy window rows
    # two rounds, no recorded window: the one judge judges neither setting (it read pageable / pinned wins)
    assert head["pinned_wins_per_batch"] == {"16/8": None, "64/8": None}
    assert all("measured, not judged" in x for x in lines if x.startswith("input "))
    assert head["step_ms"]["64/8"] == {"pageable_ms": pytest.approx(2.0), "pinned_ms": pytest.approx(1.6)}
    assert E.bandwidth_title(df, [2**20], cuda=True).startswith("pinned: ×2 the pageable H2D bandwidth")
    assert E.batch_costs_title(df, [16, 64], [8], cuda=True) == (
        "pin + pinned copy vs a pageable copy: measured, not judged in any of 2 settings")
    assert E.steps_title(df, 2) == "pin_memory on: ×1.2 the pageable step's speed at input 64, batch 8 (2 workers)"


def _copies(window_s: float, spread: float = 0.01):
    """03's batch-copy rows as a GPU run writes them now: 5 rounds each, with their invariants and windows."""
    import pandas as pd

    na = "not applicable"
    rows = []
    for rep, f in enumerate((1 - spread, 1 - spread / 2, 1.0, 1 + spread / 2, 1 + spread)):
        for s, b, pin, cp, pg in ((16, 8, 0.05, 0.01, 0.02), (64, 8, 0.05, 0.1, 0.3), (32, 8, 0.05, 0.05, 0.101)):
            for v, x in (("pin", pin), ("h2d_pinned", cp), ("h2d_pageable", pg)):
                rows.append(dict(variant=v, metric="ms_per_batch", input_size=s, batch_size=b, value=x * f,
                                 repeat=rep, order=na, pixel_error=na, cache=na, epoch_batches=na,
                                 window_s=window_s, timed_batches=1000))
    return pd.DataFrame(rows)


def test_03_pinning_is_judged_by_the_one_judge_not_from_point_values():
    """Pin + pinned copy vs a pageable copy: a win only where the one judge tells the sides apart (a 1% gap inside
    the rounds' spread is not told apart); rounds too short to give a rate: measured, not judged (audit53 F6)."""
    from feedlab.experiments import pinned_memory_by_input_size as E

    df = _copies(window_s=1.5)
    assert E.pinning_verdict(df, 16, 8).word == "missed" and E.pinning_verdict(df, 64, 8).word == "met"
    v = E.pinning_verdict(df, 32, 8)   # 0.100 vs 0.101 ms: a point value "wins", the spread does not tell
    assert v.word == "within spread", v
    assert E.pinning_words(E.pinning_verdict(df, 64, 8)).startswith("pinned wins (×2.00 faster, interval")
    assert E.batch_costs_title(df, [16, 32, 64], [8], cuda=True) == (
        "pin + pinned copy beat a pageable copy in 1 of 3 settings, from input 64")
    short = E.pinning_verdict(_copies(window_s=0.02), 64, 8)
    assert short.word == "not like for like" and "< 1 s" in short.why, short
    assert E.pinning_words(short).startswith("pinned ×2.00: measured, not judged: not like for like")


# ------------------------------------------------------------------ 04


def _nb04():
    from feedlab.experiments import print_overhead as E

    rows = []
    for sink, ms in (("jupyter", {"none": 1.0, "print": 1.5, "tqdm": 1.2}), ("pipe", {"none": 1.0, "print": 1.1, "tqdm": 3.0})):
        for rep, f in enumerate((0.95, 1.05)):
            for mode, m in ms.items():
                rows.append(dict(where="in_process" if sink == "jupyter" else "child", sink=sink, pythonunbuffered=None,
                                 variant=mode, print_every=None, metric="ms_per_batch", value=m * f, repeat=rep))
            rows.append(dict(where="child", sink=sink, pythonunbuffered=None, variant="print", print_every=None,
                             metric="us_per_call", value=(2.0 if sink == "pipe" else 9.0) * f, repeat=rep))
    df = pd.DataFrame(rows)
    return E, E.summary_table(df), E.call_table(df)


def test_04_reading_title_and_payload():
    E, S, C = _nb04()
    f = E.factors(S)
    assert list(f) == ["Jupyter stream", "pipe"]
    assert f["pipe"] == {"none_ms": 1.0, "worst_mode": "tqdm", "worst_factor": pytest.approx(3.0),
                         "print_factor": pytest.approx(1.1)}
    lines = E.readings(S, C)
    assert lines[1].startswith("pipe") and "costliest: tqdm 3.000 ms (3.00×); print every batch 1.10×" in lines[1]
    assert any(x.startswith("one print() into pipe") and "2.00 µs" in x for x in lines)
    assert lines[-1] == ("A print per batch made a batch at most 1.50× slower in any sink measured; "
                         "one short print() costs 2.0–9.0 µs.")
    assert E.title(S, 64) == "print every batch into Jupyter stream: ×1.5 the no-output loop (step ≈ 1.00 ms, batch 64)"
    p = E.payload(profile="smoke", modes=["none", "print"], child_sinks=["pipe"], unbuffered=["0"],
                  pythonunbuffered_here="", sink_here="jupyter", batch_size=64, batches=10, repeats=2, summary=S, calls=C)
    assert p["unbuffered"] == [0] and p["print_us_per_call"]["pipe"] == pytest.approx(2.0)
    assert p["claim_factor"] == pytest.approx(76 / 1.02) and set(p["per_sink"]) == {"Jupyter stream", "pipe"}


# ------------------------------------------------------------------ the notebooks stay thin


@pytest.mark.parametrize("name", ["01_worker_scaling", "02_lmdb_vs_png", "03_pinned_memory_by_input_size",
                                  "04_print_overhead", "09_batch_size_breakdown"])
def test_notebook_reads_through_the_library(name):
    """No reading helper defined in the notebook, the payload built by the library, one device choice."""
    import json

    from feedlab.paths import NOTEBOOKS_DIR

    nb = json.loads((NOTEBOOKS_DIR / f"{name}.ipynb").read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "\ndef " not in f"\n{code}" and "payload = {" not in code
    assert "torch.cuda.is_available" not in code and "resolve_device" not in code
    if name != "04_print_overhead":  # 04's loop runs on the CPU by design
        assert "from feedlab.experiments.loader_grid import default_device" in code


def test_03_a_recorded_pinned_or_pageable_win_is_read_again_by_the_one_judge():
    """audit54 F6: the stale h100 executed notebook's "-> pinned wins / pageable wins" lines were copied into
    RESULTS as printed; report.targets now reads each again on the record's rows (stage_judge.pinning_line),
    today's words first and the recorded word kept in view, and leaves a line the judge agrees with as it is."""
    from feedlab.report.claims.core import Run
    from feedlab.report.stage_judge import pinning_line

    head = "input   64, batch    8: pin 0.050 + pinned copy 0.100 ms vs pageable copy 0.300 ms"
    run = Run({}, fingerprint={}, frame=_copies(window_s=0.02))
    line = pinning_line(f"{head} -> pinned wins", run)
    assert line.startswith(f"{head} -> pinned ×2.00: measured, not judged: not like for like")
    assert line.endswith("[recorded by the notebook: pinned wins]"), line
    judged = Run({}, fingerprint={}, frame=_copies(window_s=1.5))
    assert pinning_line(f"{head} -> pinned wins", judged) == f"{head} -> pinned wins"
    assert pinning_line("input 64, batch 8: other words", run) == "input 64, batch 8: other words"
