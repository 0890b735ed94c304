"""report.costs: what the notebooks took, from the runner's own records (papermill's duration in each committed
executed notebook), and which run each committed record comes from; the README and docs/GPU_RUN.md blocks
generated from them are current."""

from __future__ import annotations

import json
import re

import pytest

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
    results = (REPO_ROOT / "docs" / "RESULTS.md").read_text()
    block = results.split(costs.COSTS_START)[1].split(costs.COSTS_END)[0]
    assert block.strip() == costs.costs_markdown().strip(), "RESULTS.md cost lines stale: python -m feedlab.report.readme"
    readme = (REPO_ROOT / "README.md").read_text()
    block = readme.split(costs.TARGET_START)[1].split(costs.TARGET_END)[0]
    assert block.strip() == costs.targets_markdown().strip(), "README target costs stale: python -m feedlab.report.readme"
    gpu = costs.GPU_RUN_MD.read_text()
    block = gpu.split(costs.RECORDS_START)[1].split(costs.RECORDS_END)[0]
    assert block == "\n" + costs.records_markdown(), "docs/GPU_RUN.md stale: python -m feedlab.report.readme"


def test_a_target_never_measured_says_so_and_a_recorded_one_prints_its_record(tmp_path):
    _record(tmp_path, "01_worker_scaling", "cpu-2c", 90.0)
    _record(tmp_path, "02_lmdb_vs_png", "cpu-2c", 30.0)
    _record(tmp_path, "01_worker_scaling", "h100-16c", 10.0)   # a partial run elsewhere: not the whole record
    path = tmp_path / "costs.json"
    lines = costs.target_lines(tmp_path, path)
    assert lines["test"] == lines["peers"] == lines["doctor"] == costs.NOT_MEASURED
    assert lines["figures"].startswith("its 2 notebooks 2.0 minutes on cpu-2c (quick profile")
    assert "data and disk: not measured yet" in lines["figures"]
    costs.record_target("test", 421.0, machine="cpu-2c", path=path)
    costs.record_target("figures", 3000.0, disk_bytes=10_000_000_000, machine="cpu-2c", path=path)
    lines = costs.target_lines(tmp_path, path)
    assert lines["test"].startswith("7.0 minutes on cpu-2c (") and lines["test"].endswith("disk not measured yet")
    assert lines["figures"].startswith("the whole target 50.0 minutes on cpu-2c (") and "10.0 GB on disk" in lines["figures"]
    assert "its 2 notebooks 2.0 minutes" in lines["figures"] and "not measured yet" not in lines["figures"]
    assert "- `make test`: 7.0 minutes" in costs.targets_markdown(tmp_path, path)


def test_record_refuses_an_unknown_target_or_a_duration_not_measured(tmp_path, capsys):
    import pytest

    path = tmp_path / "costs.json"
    with pytest.raises(ValueError, match="target 'tests'"):
        costs.record_target("tests", 10.0, path=path)
    with pytest.raises(ValueError, match="above 0"):
        costs.record_target("test", 0.0, path=path)
    assert not path.exists()
    with pytest.raises(SystemExit) as ex:
        costs.main(["--record", "test", "ten"])
    assert ex.value.code == 2 and "SECONDS 'ten'" in capsys.readouterr().err


def test_make_help_prints_each_targets_measured_cost():
    make = (REPO_ROOT / "Makefile").read_text()
    help_rule = make.split("\nhelp:", 1)[1].split("\n\n", 1)[0]
    assert "feedlab.report.costs" in help_rule
    assert "about 7 minutes" not in make   # a typed duration: the measured one is printed by make help


def test_a_record_nested_too_deeply_is_left_out_not_a_traceback(tmp_path):
    """attack54 FAIL 1: an executed notebook or costs.json of '[' * 100000 raised RecursionError past the
    guards (they catch ValueError): an executed notebook is read as no record; a costs.json is one line naming it
    (attack61 C9/C10: read as every target "not measured yet", the damage was silent)."""
    deep = "[" * 100000 + "]" * 100000
    _record(tmp_path, "01_worker_scaling", "cpu-2c", 90.5)
    _record(tmp_path, "02_lmdb_vs_png", "cpu-2c", 30.0)
    (tmp_path / "02_lmdb_vs_png" / "cpu-2c" / "02_lmdb_vs_png.executed.ipynb").write_text(deep)
    assert list(costs.notebook_seconds(tmp_path)[("cpu-2c", "quick")]) == ["01_worker_scaling"]
    (tmp_path / "costs.json").write_text(deep)
    with pytest.raises(ValueError, match="nested too deeply"):
        costs.target_records(tmp_path / "costs.json")


def test_a_duration_that_is_not_seconds_is_skipped_with_its_name(tmp_path, monkeypatch, capsys):
    """attack56 W1 B65: metadata.papermill.duration "abc" in a committed record ended report.costs with `error:
    could not convert string to float: 'abc'`, naming neither file nor field; a fingerprint that is a list or
    whose git.commit is a number is no run to list."""
    from feedlab.errors import deadline

    _record(tmp_path, "01_worker_scaling", "cpu-2c", "abc")
    _record(tmp_path, "02_lmdb_vs_png", "cpu-2c", 30.0)
    (tmp_path / "02_lmdb_vs_png" / "cpu-2c" / "fingerprint.json").write_text('{"git": {"commit": 12345}}')
    _record(tmp_path, "03_x", "cpu-2c", 5.0)
    (tmp_path / "03_x" / "cpu-2c" / "fingerprint.json").write_text("[1]")
    skipped: list[str] = []
    with deadline(2, "report.costs over a bad duration"):
        secs = costs.notebook_seconds(tmp_path, skipped)
        by_run = costs.records_by_run("cpu-2c", tmp_path)
    assert secs == {("cpu-2c", "quick"): {"02_lmdb_vs_png": {"seconds": 30.0, "end": "2026-11-26"},
                                          "03_x": {"seconds": 5.0, "end": "2026-11-26"}}}
    assert skipped == [f"{tmp_path}/01_worker_scaling/cpu-2c/01_worker_scaling.executed.ipynb: "
                       "metadata.papermill.duration holds str 'abc', not seconds (the record is skipped)"]
    assert by_run == {("2026-11-26", "abcdef1"): ["01"], ("?", "?"): ["02"]}


def test_record_never_drops_the_other_targets_nor_takes_a_value_out_of_range(tmp_path):
    """attack60 C3/C5: a costs.json with a merge-conflict line was rewritten with only the new entry (the other
    targets' measured costs gone, rc 0); `--record test 1e300 --machine ../x` replaced the committed record."""
    path = tmp_path / "costs.json"
    costs.record_target("test", 421.0, machine="cpu-2c", path=path)
    good = path.read_text()
    for kw, says in (({"seconds": 1e300}, "at most 1e+09"), ({"seconds": float("nan")}, "a measured duration"),
                     ({"seconds": 5.0, "machine": "../x"}, "--machine '../x': a machine key is one name"),
                     ({"seconds": 5.0, "disk_bytes": -7}, "--disk-bytes -7")):
        with pytest.raises(ValueError, match=re.escape(says)):
            costs.record_target("test", path=path, **kw)
    assert path.read_text() == good
    path.write_text("<<<<<<< HEAD\n" + good)
    with pytest.raises(ValueError, match=r"is not valid JSON .*: left as it is, nothing recorded"):
        costs.record_target("figures", 3000.0, machine="cpu-2c", path=path)
    assert path.read_text() == "<<<<<<< HEAD\n" + good


@pytest.mark.parametrize("targets, field", [({"figures": {"seconds": "lots"}}, "targets.figures.seconds is 'lots'"),
                                            ({"peers": [1]}, "targets.peers is list"),
                                            ({"test": {"seconds": 5.0, "disk_bytes": -1}}, "targets.test.disk_bytes"),
                                            ([1], "targets is list")])
def test_a_costs_record_of_the_wrong_shape_is_one_line_naming_the_field(tmp_path, targets, field):
    """attack61 C4: `targets.figures.seconds = "lots"` was a TypeError traceback from report.costs (and the README
    generator that reads it)."""
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"targets": targets}))
    with pytest.raises(ValueError, match=re.escape(field)):
        costs.target_lines(tmp_path, path)


@pytest.mark.parametrize("text, says", [("[1, 2]", "holds list"), ("<<<<<<< HEAD\n{}", "is not valid JSON")])
def test_a_costs_record_that_does_not_load_is_named_never_read_as_not_measured(tmp_path, text, says):
    """attack61 C9/C10: a costs.json of `[1,2]` was an AttributeError; one that does not load read as every target
    "not measured yet", silently."""
    path = tmp_path / "costs.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(says)):
        costs.target_lines(tmp_path, path)
    assert costs.target_records(tmp_path / "absent.json") == {}
