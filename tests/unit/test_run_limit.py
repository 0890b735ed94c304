"""``feedlab.run --limit-s``: a notebook past its limit is stopped with its kernel and the
processes it started, and what it executed comes home (runs/failed/<name>/ with STOPPED.json,
in --tar as runs/stopped/<machine>/<name>/), never as a result."""

from __future__ import annotations

import json
import tarfile
import time

import nbformat
import psutil
import pytest

from feedlab import paths, run
from feedlab.run_limit import NotebookLimit, all_cells_finished, describe, limit, stopped_record

SLOW_CELL = ("import subprocess, time\n"
             "from pathlib import Path\n"
             "child = subprocess.Popen(['sleep', '300'])\n"
             "loner = subprocess.Popen(['sleep', '301'], start_new_session=True)  # its own session, as a daemon\n"
             "Path(out_dir, 'child.pid').write_text(f'{child.pid} {loner.pid}')\n"
             "time.sleep(300)")


def _slow_notebook(tmp_path):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("profile = 'quick'\nout_dir = '.'")
    params.metadata.tags = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("import time\ntime.sleep(0.3)\nprint('first')"),
                nbformat.v4.new_code_cell(SLOW_CELL), nbformat.v4.new_code_cell("print('never reached')")]
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "nb" / "99_slow.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    return path


def test_a_notebook_past_its_limit_is_stopped_with_its_processes_and_its_record_comes_home(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(paths, "SCRATCH_DIR", tmp_path / "runs")
    nb = _slow_notebook(tmp_path)
    monkeypatch.setattr(run, "list_notebooks", lambda: [nb])
    figs, tar = tmp_path / "figs", tmp_path / "out" / "r.tar"
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    t0 = time.perf_counter()
    rc = run.main(["--only", "99", "--no-data", "--out-root", str(figs), "--limit-s", "12", "--tar", str(tar)])
    took = time.perf_counter() - t0
    out = capsys.readouterr()
    assert rc == 1
    assert took < 60, f"the limit did not stop the notebook ({took:.0f} s)"
    line = next(x for x in out.out.splitlines() if "STOPPED" in x)
    # papermill's injected-parameters cell comes after the parameters cell: the slow cell is 3 of 5
    assert "99_slow stopped at its limit of 12 s in cell 3" in line and "3 of 5 code cells finished" in line
    assert "Traceback" not in out.err and "never retrieved" not in out.err
    kept, = (tmp_path / "runs" / "failed").glob("99_slow-*")   # --out-root's run: keyed by its folder
    rec = json.loads((kept / "STOPPED.json").read_text())
    assert rec["stopped_in"]["cell"] == 3 and rec["finished"] == 3 and set(rec["cell_seconds"]) == {"0", "1", "2"}
    assert rec["cell_seconds"]["2"] >= 0.3
    time.sleep(0.5)
    for pid in map(int, (kept / "child.pid").read_text().split()):  # the kernel's child and a loner
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
    # the kept notebook says which cell was cut (papermill's clean-up marks every cell completed)
    cells = json.loads((kept / "99_slow.executed.ipynb").read_text())["cells"]
    assert cells[3]["metadata"]["papermill"]["status"] == "stopped at the limit"
    # nothing of it is a result, and no kernel is left behind
    assert not (figs / "99_slow").exists() or not any((figs / "99_slow").iterdir())
    assert [p for p in psutil.Process().children(recursive=True) if p.pid not in before] == []
    with tarfile.open(tar) as tf:
        names = tf.getnames()
    key = run.machine_key()
    assert f"runs/failed/{key}/99_slow/STOPPED.json" in names
    assert not any(n.startswith("figures/") for n in names)


def test_limit_raises_with_the_snapshot_taken_at_the_alarm_and_restores_the_timer():
    import signal

    with pytest.raises(NotebookLimit) as ex:
        with limit(0.2, snapshot=lambda: {"taken": True}):
            time.sleep(5)
    assert ex.value.snapshot == {"taken": True} and ex.value.seconds == 0.2
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    with limit(None):  # no limit: no timer
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def _cell(status, duration=None, src="x = 1", start=None):
    meta = {"status": status, "duration": duration}
    if start:
        meta["start_time"] = start
    return {"cell_type": "code", "source": src, "metadata": {"papermill": meta}}


def test_stopped_record_names_the_running_cell_and_the_finished_cells_seconds():
    nb = {"cells": [{"cell_type": "markdown", "source": "# t", "metadata": {}},
                    _cell("completed", 0.5), _cell("completed", 12.25, src="res = grid()\nplot(res)"),
                    _cell("running", None, src="doc.measure()", start="2026-11-25T10:00:00Z"), _cell("pending")]}
    rec = stopped_record(nb, 90, 91.04)
    assert rec["cells"] == 4 and rec["finished"] == 2 and rec["cell_seconds"] == {"1": 0.5, "2": 12.25}
    assert rec["stopped_in"] == {"cell": 3, "first_line": "doc.measure()", "started": "2026-11-25T10:00:00Z"}
    assert rec["elapsed_s"] == 91.0
    line = describe("10_doctor", rec)
    assert "in cell 3 ('doc.measure()')" in line and "cell 2 12 s" in line
    whole = stopped_record({"cells": [_cell("completed", 1.0), _cell("completed", 2.0)]}, 90, 90.5)
    assert whole["stopped_in"] is None and "after its last cell" in describe("x", whole)
    assert all_cells_finished(whole) and not all_cells_finished(rec)
    starting = stopped_record({"cells": [_cell("pending"), _cell("pending")]}, 90, 90.5)
    assert "before its first cell ran" in describe("x", starting) and not all_cells_finished(starting)
    empty = stopped_record(None, 90, 1.0)
    assert empty["stopped_in"] is None and "no partly executed notebook" in empty["note"]
    assert describe("10_doctor", empty).startswith("10_doctor stopped at its limit of 90 s before its first cell ran")
    assert "no cell finished" in describe("10_doctor", empty)


def test_limit_s_must_be_positive(tmp_path):
    with pytest.raises(SystemExit) as ex:
        run.main(["--only", "01", "--no-data", "--limit-s", "0"])
    assert ex.value.code == 2


def test_limits_one_for_all_or_one_per_notebook_in_order():
    a, b = run.list_notebooks()[:2]
    assert run.notebook_limits([a, b], None) == {a: None, b: None}
    assert run.notebook_limits([a, b], [90]) == {a: 90, b: 90}
    assert run.notebook_limits([b, a], [90, 30]) == {b: 90, a: 30}
    with pytest.raises(ValueError, match="3 values for 2 notebooks"):
        run.notebook_limits([a, b], [1, 2, 3])


def test_within_deadline_cuts_a_limit_to_what_is_left_and_starts_nothing_too_late():
    assert run.within_deadline(200, None, 1000) == 200
    assert run.within_deadline(200, 570, 0) == 200
    assert run.within_deadline(200, 570, 400) == 570 - 400 - run.STOP_MARGIN_S
    assert run.within_deadline(None, 570, 400) == 570 - 400 - run.STOP_MARGIN_S
    assert run.within_deadline(200, 570, 570 - run.STOP_MARGIN_S - run.MIN_START_S + 1) == 0
    assert run.within_deadline(10, 570, 570 - run.STOP_MARGIN_S - 15) == 10  # a short limit that fits starts


def test_a_deadline_runs_what_fits_with_cut_limits_and_names_the_rest(monkeypatch, capsys, tmp_path):
    clock = {"t": 0.0}
    monkeypatch.setattr(run.time, "perf_counter", lambda: clock["t"])
    ran = []

    def fake_run(nb, profile, params, out_root, limit_s=None):
        ran.append((nb.stem[:2], limit_s))
        clock["t"] += 150  # each notebook takes 150 s of the command
        raise RuntimeError("stop here")  # a failure is fine: --keep-going goes on

    monkeypatch.setattr(run, "run_notebook", fake_run)
    rc = run.main(["--only", "10", "01", "09", "--no-data", "--keep-going", "--out-root", str(tmp_path),
                   "--limit-s", "200", "100", "150", "--deadline-s", "400"])
    out = capsys.readouterr().out
    # 10: min(200, 400-0-20); 01: min(100, 400-150-20); 09: 400-300-20 = 80 left, more than 30: cut to 80
    assert ran == [("10", 200), ("01", 100), ("09", 400 - 300 - run.STOP_MARGIN_S)]
    assert rc == 1
    clock["t"] = 0.0
    ran.clear()
    rc = run.main(["--only", "10", "01", "09", "--no-data", "--keep-going", "--limit-s", "200",
                   "--out-root", str(tmp_path), "--deadline-s", "330"])
    out = capsys.readouterr().out
    assert [r[0] for r in ran] == ["10", "01"] and "not started" in out and "09_batch_size_breakdown" in out


def test_an_older_failed_folder_is_not_carried_as_this_runs(tmp_path, monkeypatch):
    import os

    stale = tmp_path / "runs" / "failed" / "01_worker_scaling"
    stale.mkdir(parents=True)
    (stale / "STOPPED.json").write_text("{}")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))  # an earlier invocation's
    tars = []
    monkeypatch.setattr(run, "tar_results", lambda dest, root=None, key=None, extra=None: tars.append(extra))

    def fails(nb, profile, params, out_root, limit_s=None):
        raise RuntimeError("cell 3")  # failed before anything was kept

    monkeypatch.setattr(run, "run_notebook", fails)
    assert run.main(["--only", "01", "--no-data", "--tar", str(tmp_path / "r.tar")]) == 1
    assert tars == [{}]
    # a folder this run kept is carried, under the machine's name
    mine = tmp_path / "runs" / "failed" / "01_worker_scaling-now"

    def fails_and_keeps(nb, profile, params, out_root, limit_s=None):
        exc = RuntimeError("cell 4")
        exc.feedlab_kept = mine
        raise exc

    monkeypatch.setattr(run, "run_notebook", fails_and_keeps)
    assert run.main(["--only", "01", "--no-data", "--tar", str(tmp_path / "r.tar")]) == 1
    assert tars[-1] == {f"runs/failed/{run.machine_key()}/01_worker_scaling": mine}


def test_the_kernel_is_told_when_its_limit_falls(tmp_path, monkeypatch):
    """A notebook run under --limit-s sees FEEDLAB_DEADLINE (its budgets end its grids before the stop,
    feedlab.budget); one run without a limit sees none, and the caller's environment is left as it was."""
    import os
    import time as _time
    from pathlib import Path

    import papermill

    from feedlab import paths
    from feedlab.budget import DEADLINE_ENV

    monkeypatch.setattr(paths, "SCRATCH_DIR", tmp_path / "runs")
    monkeypatch.setenv("FEEDLAB_MACHINE", "box-1c")
    monkeypatch.setenv(DEADLINE_ENV, "caller's")
    seen = []

    def execute(nb, executed, parameters, **kw):
        seen.append(os.environ.get(DEADLINE_ENV))
        Path(executed).write_text('{"cells": []}')

    monkeypatch.setattr(papermill, "execute_notebook", execute)
    monkeypatch.setattr("feedlab.findings.add_findings", lambda executed: None)
    nb = next(p for p in run.list_notebooks() if p.stem == "04_print_overhead")
    t0 = _time.time()
    run.run_notebook(nb, "quick", {}, tmp_path / "a", limit_s=90)
    run.run_notebook(nb, "quick", {}, tmp_path / "b")
    assert t0 + 89 < float(seen[0]) <= _time.time() + 90
    assert seen[1] is None                        # no limit: no deadline, not the caller's stray value
    assert os.environ[DEADLINE_ENV] == "caller's"


def test_an_executed_notebook_nested_too_deeply_reads_as_not_saved(tmp_path):
    """attack54 FAIL 1: read_notebook over '[' * 100000 raised RecursionError past its ValueError guard."""
    from feedlab.run_limit import read_notebook

    (tmp_path / "x.executed.ipynb").write_text("[" * 100000 + "]" * 100000)
    assert read_notebook(tmp_path / "x.executed.ipynb") is None
