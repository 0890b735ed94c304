"""report.costs: what the notebooks took, from the runner's own records (papermill's duration in each committed
executed notebook), and which run each committed record comes from; the README and docs/GPU_RUN.md blocks
generated from them are current."""

from __future__ import annotations

import json

from feedlab.paths import REPO_ROOT
from feedlab.report import costs


def _record(figs, nb, machine, seconds, profile="quick", commit="abcdef1234", day="2026-11-26"):
    d = figs / nb / machine
    d.mkdir(parents=True)
    meta = {"papermill": {"duration": seconds, "end_time": f"{day}T21:00:00", "parameters": {"profile": profile}}}
    (d / f"{nb}.executed.ipynb").write_text(json.dumps({"cells": [], "metadata": meta}))
    (d / "fingerprint.json").write_text(json.dumps({"time_utc": f"{day}T21:00:00", "cpu_usable": 2, "gpus": [],
                                                    "git": {"commit": commit, "dirty": False}}))
    (d / "results.json").write_text("{}")


def test_the_notebooks_seconds_are_the_runners_own(tmp_path):
    _record(tmp_path, "01_worker_scaling", "cpu-2c", 90.5)
    _record(tmp_path, "02_lmdb_vs_png", "cpu-2c", 30.0)
    _record(tmp_path, "10_doctor", "cpu-2c", 12.0, profile="smoke")
    secs = costs.notebook_seconds(tmp_path)
    assert set(secs) == {("cpu-2c", "quick"), ("cpu-2c", "smoke")}
    md = costs.costs_markdown(tmp_path)
    assert "**cpu-2c**, quick profile: 2 notebooks, 120 s of notebooks (2.0 minutes)" in md
    assert "the longest 01 (90 s)" in md and "not in the runner's records, so no number" in md


def test_records_are_listed_by_the_run_that_made_them(tmp_path):
    _record(tmp_path, "02_lmdb_vs_png", "h100-16c", 10.0, commit="0288277abc", day="2026-11-23")
    _record(tmp_path, "10_doctor", "h100-16c", 10.0, commit="bc1be8b000", day="2026-11-26")
    md = costs.records_markdown("h100-16c", tmp_path)
    assert "- 2026-11-23, 0288277: 02" in md and "- 2026-11-26, bc1be8b: 10" in md


def test_the_committed_cost_and_record_blocks_are_current():
    readme = (REPO_ROOT / "README.md").read_text()
    block = readme.split(costs.COSTS_START)[1].split(costs.COSTS_END)[0]
    assert block.strip() == costs.costs_markdown().strip(), "README cost lines stale: python -m feedlab.report.readme"
    gpu = costs.GPU_RUN_MD.read_text()
    block = gpu.split(costs.RECORDS_START)[1].split(costs.RECORDS_END)[0]
    assert block == "\n" + costs.records_markdown(), "docs/GPU_RUN.md stale: python -m feedlab.report.readme"
