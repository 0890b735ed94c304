"""--dry-run predicts each notebook's seconds from the committed records: the same profile on the same
machine, else a machine with the same cores; it says where it has no record, and gives the total."""

from __future__ import annotations

import json

import pytest

from feedlab import run_plan


def _record(figs, nb, key, profile, seconds, when="2026-11-26T06:20:00+00:00"):
    d = figs / nb / key
    d.mkdir(parents=True)
    (d / "fingerprint.json").write_text("{}")
    meta = {"papermill": {"parameters": {"profile": profile}, "duration": seconds, "end_time": when}}
    (d / f"{nb}.executed.ipynb").write_text(json.dumps({"cells": [], "metadata": meta}))


def test_recorded_seconds_prefer_the_machine_then_its_core_count_and_match_the_profile(tmp_path):
    _record(tmp_path, "01_a", "h100-16c", "gpu", 170.2)
    _record(tmp_path, "01_a", "cpu-2c", "quick", 532.0)
    _record(tmp_path, "02_b", "h100-16c", "quick", 61.0)
    _record(tmp_path, "02_b", "cpu-16c", "gpu", 99.0)
    got = run_plan.recorded_seconds("01_a", "cpu-16c", "gpu", tmp_path)
    assert got == {"seconds": 170.2, "machine": "h100-16c", "when": "2026-11-26"}
    assert run_plan.recorded_seconds("02_b", "cpu-16c", "gpu", tmp_path)["machine"] == "cpu-16c"
    assert run_plan.recorded_seconds("01_a", "cpu-2c", "gpu", tmp_path) is None      # only a quick run on 2 cores
    assert run_plan.recorded_seconds("02_b", "h100-16c", "quick", tmp_path)["seconds"] == 61.0
    assert run_plan.recorded_seconds("03_c", "h100-16c", "gpu", tmp_path) is None


def test_the_plan_prints_each_recorded_cost_and_the_total(tmp_path, monkeypatch, capsys):
    _record(tmp_path, "01_a", "h100-16c", "gpu", 170.2)
    monkeypatch.setattr(run_plan, "planned_machine_key", lambda cores=None: "cpu-16c")
    run_plan.print_plan([("01_a", {"batch_size": 8}), ("02_b", {"batch_size": 8})], "gpu", 16, tmp_path)
    out = capsys.readouterr().out
    assert "170 (the gpu run on h100-16c, 2026-11-26)" in out and "no record of a gpu run on 16 cores" in out
    assert "\ntotal: 170 s of notebooks from records (1 of 2); no record for 1: 02_b\n" in out
    assert "call 1 (at most 540 s): about 335 s" in out and "planned without a record or a budget (1): 02_b" in out


def test_gpu_calls_pack_in_order_of_value_with_budgets_and_records(tmp_path, monkeypatch):
    """Each notebook is planned at its record, at its budget + start-up where that is less, else at
    FIRST_RUN_S (said); calls close before one would pass CALL_S; limits carry the margin."""
    _record(tmp_path, "15_cure", "h100-16c", "gpu", 80.0)
    _record(tmp_path, "01_w", "h100-16c", "gpu", 300.0)       # before its budget
    _record(tmp_path, "09_b", "h100-16c", "gpu", 200.0)
    monkeypatch.setattr(run_plan, "profile_values", lambda name, profile: {})
    rows = [("09_b", {}), ("01_w", {"budget_s": 100}), ("15_cure", {}), ("99_new", {})]
    calls = run_plan.gpu_calls(rows, "h100-16c", "gpu", tmp_path)
    flat = [nb for c in calls for nb in c["notebooks"]]
    assert [nb["name"] for nb in flat] == ["15_cure", "01_w", "09_b", "99_new"]   # value order, unknown last
    by = {nb["name"]: nb for nb in flat}
    assert by["01_w"]["seconds"] == 100 + run_plan.START_S and "300 s recorded before it" in by["01_w"]["how"]
    assert by["15_cure"]["limit"] == 80 * run_plan.MARGIN + run_plan.START_S
    assert by["99_new"]["seconds"] == run_plan.FIRST_RUN_S and not by["99_new"]["known"]
    # 45 + 80 + 120 + 200 = 445; + 120 would pass 540: a second call
    assert [len(c["notebooks"]) for c in calls] == [3, 1] and calls[0]["seconds"] == 445.0
    assert all(c["seconds"] <= run_plan.CALL_S for c in calls)


def test_a_base_profile_record_plans_only_a_notebook_the_profile_leaves_as_it_was(tmp_path, monkeypatch):
    _record(tmp_path, "02_same", "h100-16c", "quick", 57.0)
    _record(tmp_path, "10_diff", "h100-16c", "quick", 67.0)
    monkeypatch.setattr(run_plan, "profile_values",
                        lambda name, profile: {"model": "srcnn" if (name, profile) == ("10_diff", "gpu") else "none"})
    same = run_plan.predicted_seconds("02_same", {}, "h100-16c", "gpu", tmp_path)
    diff = run_plan.predicted_seconds("10_diff", {}, "h100-16c", "gpu", tmp_path)
    assert same[0] == 57.0 and "quick profile" in same[1]
    assert diff == (run_plan.FIRST_RUN_S, "no record and no budget: a first run's limit", False)


def test_call_items_are_what_gpu_call_reads(monkeypatch, capsys):
    monkeypatch.setattr(run_plan, "list_notebooks", lambda: [])
    monkeypatch.setattr(run_plan, "planned_machine_key", lambda cores=None: "h100-16c")
    monkeypatch.setattr(run_plan, "plan", lambda nbs, profile, params: [("15_cure", {}), ("03_pin", {})])
    monkeypatch.setattr(run_plan, "predicted_seconds", lambda *a, **k: (50.0, "recorded on h100-16c, x", True))
    assert run_plan.call_items(1) == "15:85 03:85"
    assert run_plan.main(["--call", "2"]) == 2
    assert "the plan has calls 1 to 1" in capsys.readouterr().err


def test_each_call_is_at_most_call_s_and_a_quarter_hour_leaves_a_second_calls_first_part(tmp_path, monkeypatch):
    """Every call of the plan at most CALL_S with its set-up (issue 31: two calls of at most 9 minutes); a
    rented quarter-hour holds its start, one call and the transfers, and SECOND_CALL_S is what it has left;
    a notebook's limit never passes its call's seconds less set-up."""
    monkeypatch.setattr(run_plan, "profile_values", lambda name, profile: {})
    assert run_plan.CALL_S <= 540 and run_plan.call_seconds(1) == run_plan.call_seconds(2) == run_plan.CALL_S
    assert run_plan.SECOND_CALL_S == 300    # 900 s less the start (35), one call (540) and the transfers (25)
    rows = [(f"{n:02d}_x", {"budget_s": 200}) for n in (15, 1, 3, 9)]   # 220 s each
    calls = run_plan.gpu_calls(rows, "h100-16c", "gpu", tmp_path)
    assert [len(c["notebooks"]) for c in calls] == [2, 2]               # 45 + 440 each
    assert [c["deadline_s"] for c in calls] == [540, 540] and [c["quarter"] for c in calls] == [1, 2]
    assert all(nb["limit"] <= c["deadline_s"] - run_plan.SETUP_S for c in calls for nb in c["notebooks"])
    assert run_plan.main(["--call", "2", "--seconds"]) == 0
    with pytest.raises(ValueError, match="count from 1"):
        run_plan.call_seconds(0)


def test_the_host_only_notebooks_are_left_out_of_the_gpu_plan_and_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run_plan, "profile_values", lambda name, profile: {})
    rows = [(f"{n}_x", {"budget_s": 10}) for n in ("15", "04", "07", "08", "11", "13")]
    calls = run_plan.gpu_calls(rows, "h100-16c", "gpu", tmp_path)
    assert [nb["name"] for c in calls for nb in c["notebooks"]] == ["15_x", "13_x"]
    assert run_plan.host_only(rows) == ["04_x", "07_x", "08_x", "11_x"]
    run_plan.print_calls(calls, run_plan.host_only(rows))
    assert "not on the GPU machine (4, every measurement on the host" in capsys.readouterr().out

