"""feedlab.report.compare: one figure per notebook question with every committed machine in it."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from feedlab.report import compare

CPU_FP = {"cpu_model": "Test CPU", "cpu_usable": 2, "memory_bytes": 2 ** 34, "gpus": [], "python": "3.11",
          "torch": "2", "git": {"commit": "abcdef123456", "dirty": False}, "time_utc": "2026-01-01T10:00"}
GPU_FP = {**CPU_FP, "cpu_usable": 16, "gpus": [{"name": "NVIDIA H100 80GB HBM3"}], "cuda_available": True}

VIEW = compare.View("01_worker_scaling", "workers", "Samples/s vs workers", "throughput_vs_workers",
                    "samples_per_s", "num_workers", series=("model",), baseline_x=1, logy=True)


def _machine(figs, key, fp, rates, model="srcnn"):
    """A machine's tidy rows: three repeats of each worker count's rate (±1%)."""
    d = figs / "01_worker_scaling" / key
    d.mkdir(parents=True)
    rows = [{"experiment": "throughput_vs_workers", "variant": f"w{w}", "num_workers": w, "model": m,
             "repeat": r, "metric": "samples_per_s", "value": v * f, "unit": "samples/s"}
            for w, v in rates.items() for m in (model, "none") for r, f in enumerate((0.99, 1.0, 1.01))]
    rows.append({"experiment": "throughput_vs_workers", "variant": "w1", "num_workers": 1, "model": model,
                 "repeat": 0, "metric": "epoch_s", "value": 9.0, "unit": "s"})  # another metric: not drawn
    pd.DataFrame(rows).to_csv(d / "results.csv", index=False)
    (d / "fingerprint.json").write_text(json.dumps(fp))
    (d / "results.json").write_text("{}")
    return d


@pytest.fixture
def figs(tmp_path, monkeypatch):
    monkeypatch.setenv("FEEDLAB_STRICT_FIGURES", "1")  # a figure defect fails the test
    monkeypatch.setattr(compare, "VIEWS", (VIEW,))
    return tmp_path


def test_points_are_medians_per_series_and_normalised_within_the_machine(figs):
    _machine(figs, "cpu-2c", CPU_FP, {0: 100.0, 1: 150.0, 2: 300.0})
    frame = pd.read_csv(figs / "01_worker_scaling" / "cpu-2c" / "results.csv")
    pts = compare.points(VIEW, frame)
    assert set(pts) == {"srcnn", "none"}
    s = pts["srcnn"]
    assert s["x"] == [0, 1, 2] and s["median"] == [100.0, 150.0, 300.0] and s["n"] == [3, 3, 3]
    assert s["q25"][2] < 300.0 < s["q75"][2]
    assert s["rel"] == [pytest.approx(100 / 150), 1.0, 2.0]  # ÷ its own 1-worker median


def test_baseline_series_divides_each_x_by_that_series():
    view = compare.View("04", "v", "t", "e", "ms", "sink", series=("variant",), baseline_series="none")
    frame = pd.DataFrame([{"experiment": "e", "metric": "ms", "sink": s, "variant": v, "value": x}
                          for s, v, x in (("file", "none", 2.0), ("file", "print", 8.0), ("pty", "print", 5.0))])
    pts = compare.points(view, frame)
    assert pts["print"]["rel"] == [4.0, None]  # pty has no "none" row: no ratio drawn, none made up
    assert pts["none"]["rel"] == [1.0]


def test_two_machines_are_drawn_one_is_not(figs):
    _machine(figs, "cpu-2c", CPU_FP, {0: 100.0, 1: 150.0, 2: 300.0})
    assert compare.write_all(figs, log=lambda *_: None) == []  # one machine: nothing to compare
    assert compare.problems(figs) == []
    _machine(figs, "h100-16c", GPU_FP, {0: 900.0, 1: 1000.0, 8: 6000.0, 16: 5000.0})
    assert compare.problems(figs) == ["01_worker_scaling/machines_workers: missing: run `python -m feedlab.report.readme`"]
    written = compare.write_all(figs, log=lambda *_: None)
    assert {p.suffix for p in written} == {".png", ".svg", ".json"}
    rec = json.loads((figs / "01_worker_scaling" / "machines_workers.json").read_text())
    assert list(rec["machines"]) == ["cpu-2c", "h100-16c"]
    assert rec["machines"]["h100-16c"]["series"]["srcnn"]["x"] == [0, 1, 8, 16]
    assert "H100" in rec["machines"]["h100-16c"]["fingerprint"]
    assert compare.problems(figs) == []
    # the comparison files are not taken for a machine
    from feedlab.machines import machine_dirs

    assert list(machine_dirs("01_worker_scaling", figs)) == ["cpu-2c", "h100-16c"]
    assert [p.name for p in compare.figures_for("01_worker_scaling", figs)] == ["machines_workers.png"]


def test_a_changed_result_makes_the_figure_stale_and_a_gone_machine_removes_it(figs):
    _machine(figs, "cpu-2c", CPU_FP, {0: 100.0, 1: 150.0})
    gpu = _machine(figs, "h100-16c", GPU_FP, {0: 900.0, 1: 1000.0})
    compare.write_all(figs, log=lambda *_: None)
    frame = pd.read_csv(gpu / "results.csv")
    frame.loc[frame.num_workers == 1, "value"] *= 2
    frame.to_csv(gpu / "results.csv", index=False)
    assert [p.split(":")[1].strip() for p in compare.problems(figs)] == ["stale (the committed results changed)"]
    compare.write_all(figs, log=lambda *_: None)
    assert compare.problems(figs) == []
    for f in gpu.iterdir():
        f.unlink()
    gpu.rmdir()
    assert "fewer than two machines" in compare.problems(figs)[0]
    compare.write_all(figs, log=lambda *_: None)
    assert not list((figs / "01_worker_scaling").glob("machines_*"))
    assert (figs / "01_worker_scaling" / "cpu-2c" / "results.csv").is_file()  # theirs untouched


def test_a_machine_without_the_rows_is_left_out(figs):
    _machine(figs, "cpu-2c", CPU_FP, {0: 100.0, 1: 150.0})
    _machine(figs, "h100-16c", GPU_FP, {0: 900.0, 1: 1000.0})
    odd = figs / "01_worker_scaling" / "laptop-8c"
    odd.mkdir()
    (odd / "results.json").write_text("{}")  # a machine that has no tidy table
    data = compare.machine_data(VIEW, figs)
    assert list(data) == ["cpu-2c", "h100-16c"]


def test_every_registered_view_names_a_notebook_and_files_stay_unique():
    from feedlab.paths import NOTEBOOKS_DIR

    names = [(v.notebook, v.name) for v in compare.VIEWS]
    assert len(names) == len(set(names))
    for v in compare.VIEWS:
        assert (NOTEBOOKS_DIR / f"{v.notebook}.ipynb").is_file(), v
        assert not (v.baseline_x is not None and v.baseline_series is not None), v


def test_committed_comparison_figures_are_current():
    """figures/<notebook>/machines_* is what `python -m feedlab.report.readme` draws from the committed results."""
    assert compare.problems() == []


def test_an_unreadable_machine_is_left_out_in_one_line(figs, capsys):
    _machine(figs, "cpu-2c", CPU_FP, {0: 100.0, 1: 150.0})
    _machine(figs, "h100-16c", GPU_FP, {0: 900.0, 1: 1000.0})
    bad = _machine(figs, "laptop-8c", CPU_FP, {0: 1.0})
    (bad / "fingerprint.json").write_text("{not json")
    assert list(compare.machine_data(VIEW, figs)) == ["cpu-2c", "h100-16c"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "laptop-8c" in err[0] and "re-run" in err[0]


def test_a_machine_whose_fingerprint_is_nested_too_deeply_is_left_out_in_one_line(figs, capsys):
    """attack54 FAIL 1: '[' * 100000 raised RecursionError, which the ValueError/OSError guard did not catch."""
    _machine(figs, "cpu-2c", CPU_FP, {0: 100.0, 1: 150.0})
    bad = _machine(figs, "laptop-8c", CPU_FP, {0: 1.0})
    (bad / "fingerprint.json").write_text("[" * 100000 + "]" * 100000)
    assert list(compare.machine_data(VIEW, figs)) == ["cpu-2c"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "laptop-8c" in err[0] and "nested too deeply" in err[0], err


@pytest.mark.parametrize("damage", ['{"a":', "[" * 100000])
def test_a_damaged_comparison_record_is_one_line_naming_its_file(figs, damage):
    """attack55 W5 (B44): a truncated machines_*.json gave `error: not valid JSON: Expecting value …` naming no file;
    B43: one nested too deeply a RecursionError traceback."""
    import time

    _machine(figs, "cpu-2c", CPU_FP, {0: 100.0, 1: 150.0})
    _machine(figs, "h100-16c", GPU_FP, {0: 900.0, 1: 1000.0})
    compare.write_all(figs, log=lambda *_: None)
    rec = figs / "01_worker_scaling" / "machines_workers.json"
    rec.write_text(damage)
    t0 = time.monotonic()
    found = compare.problems(figs)
    assert time.monotonic() - t0 < 2.0
    assert len(found) == 1 and found[0].startswith("01_worker_scaling/machines_workers: ") and str(rec) in found[0]
    assert "\n" not in found[0] and "Traceback" not in found[0]


def test_check_refuses_a_fingerprint_git_field_of_the_wrong_shape_in_one_line(figs, monkeypatch, capsys):
    """attack56 B54: git.tree = 5 in a machine's fingerprint.json made `report.compare --check` a TypeError traceback
    (fingerprint_line); now one line naming the file and the field, before anything is drawn."""
    _machine(figs, "cpu-2c", CPU_FP, {0: 100.0, 1: 150.0})
    _machine(figs, "h100-16c", {**GPU_FP, "git": {"commit": "abc", "dirty": True, "tree": 5}}, {0: 900.0, 1: 1000.0})
    monkeypatch.setattr(compare, "FIGURES_DIR", figs)
    for argv in (["--check"], []):
        with pytest.raises(SystemExit) as stop:
            compare.main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert stop.value.code == 2 and len(err) == 1, err
        assert "h100-16c/fingerprint.json: git.tree is int" in err[0] and "Traceback" not in err[0]
    assert not list(figs.glob("01_worker_scaling/machines_*"))
    assert "abc+dirty · " in compare.machine_data(VIEW, figs)["h100-16c"]["fingerprint"]


@pytest.mark.parametrize("kind, word", [("fifo", "a FIFO"), ("folder", "a folder")])
def test_a_comparison_file_that_is_no_regular_file_is_named_for_what_it_is_never_missing(figs, kind, word):
    """attack56 W2 (B60): machines_workers.json a FIFO was called "missing"; it is there, so it is named for what it
    is, with what to do, and never waited on."""
    import os
    import time

    _machine(figs, "cpu-2c", CPU_FP, {0: 100.0, 1: 150.0})
    _machine(figs, "h100-16c", GPU_FP, {0: 900.0, 1: 1000.0})
    compare.write_all(figs, log=lambda *_: None)
    rec = figs / "01_worker_scaling" / "machines_workers.json"
    rec.unlink()
    os.mkfifo(rec) if kind == "fifo" else rec.mkdir()
    t0 = time.monotonic()
    found = compare.problems(figs)
    assert time.monotonic() - t0 < 2.0
    assert found == [f"01_worker_scaling/machines_workers: {rec} is {word}, not a regular file: remove it, then "
                     "`python -m feedlab.report.readme` redraws it"], found
