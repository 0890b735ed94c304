"""--dry-run predicts each notebook's seconds from the committed records: the same profile on the same
machine, else a machine with the same cores; it says where it has no record, and gives the total."""

from __future__ import annotations

import json

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
    assert out.strip().splitlines()[-1] == "total: 170 s of notebooks from records (1 of 2); no record for 1: 02_b"
