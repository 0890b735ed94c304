"""Issue 33 (round three), output folders: the runner replaces only its own records, the orphan sweep
removes only what feedlab made, the GPU runbook stops on a machine without a GPU (and stops its
children on a signal), the README says when committed results are gone and regenerates the same way
twice, a stopped run prints no ZMQError wall, notebook worker counts keep the cap."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
from PIL import Image

import data_prep
from feedlab import paths
from feedlab import run as R
from feedlab.formats._common import sweep_orphans

REPO = Path(__file__).resolve().parents[2]


def _env(**extra):
    return dict(os.environ, PYTHONPATH=f"{REPO / 'lib'}{os.pathsep}{REPO}", FEEDLAB_PROFILE="smoke", **extra)


def _snapshot(d: Path) -> dict:
    return {str(p.relative_to(d)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(d.rglob("*"))}


def _one_error_line(err: str, prog: str = "python -m feedlab.run") -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    return lines[0]


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


# ---------------------------------------------------------------- the runner's output folders
@pytest.fixture()
def runner(tmp_path, monkeypatch):
    """The runner with a fake papermill, scratch and figures in tmp_path (nothing of the repository's)."""
    import papermill

    from feedlab import run_record

    figs = tmp_path / "figures"
    for key in ("cpu-2c", "h100-16c"):  # two machines' committed records of 04
        rec = figs / "04_print_overhead" / key
        rec.mkdir(parents=True)
        for name in ("04_print_overhead.executed.ipynb", "results.json", "fingerprint.json", "fig.png"):
            (rec / name).write_text(f"{key} {name}")
    monkeypatch.setattr(paths, "SCRATCH_DIR", tmp_path / "runs")
    monkeypatch.setattr(paths, "FIGURES_DIR", figs)
    monkeypatch.setattr(run_record, "FIGURES_DIR", figs, raising=False)
    monkeypatch.setenv("FEEDLAB_MACHINE", "cpu-2c")
    monkeypatch.setenv("FEEDLAB_PROFILE", "quick")  # main() sets it: put back after the test
    ran = []

    def execute(nb, executed, parameters, **kw):
        out = Path(parameters["out_dir"])
        ran.append(out)
        (out / "results.json").write_text('{"reading": "new"}')
        (out / "fingerprint.json").write_text("{}")   # every run writes its record's files (a committed record
        (out / "fig.png").write_bytes(b"png")         # is never replaced by one that lacks some: test_fresh_clone)
        (out / f"fig{len(ran)}.png").write_bytes(b"png")
        Path(executed).write_text('{"cells": "all"}')

    monkeypatch.setattr(papermill, "execute_notebook", execute)
    return SimpleNamespace(main=R.main, ran=ran)


def _main(runner, capsys, *args, only="04"):
    try:
        rc = runner.main(["--no-data", "--only", *only.split(), *args])
    except SystemExit as exc:
        rc = exc.code
    return rc, capsys.readouterr()


def test_out_dir_holding_a_users_files_is_refused_and_nothing_of_them_is_touched(tmp_path, runner, capsys,
                                                                                 monkeypatch):
    mine = tmp_path / "mine"
    (mine / "src").mkdir(parents=True)
    (mine / "src" / "main.py").write_text("print('mine')\n")
    (mine / "NOTES.md").write_text("my notes\n")
    before = _snapshot(mine)
    rc, out = _main(runner, capsys, "-p", "out_dir", str(mine))
    line = _one_error_line(out.err)
    assert rc == 2 and str(mine) in line and "NOTES.md" in line and "src/" in line and "--out-root" in line
    assert _snapshot(mine) == before and runner.ran == []
    # the folder the command was typed in
    monkeypatch.chdir(mine)
    rc, out = _main(runner, capsys, "-p", "out_dir", ".")
    assert rc == 2 and "not a record of 04_print_overhead" in _one_error_line(out.err)
    assert _snapshot(mine) == before and runner.ran == []


def test_out_dir_a_new_or_empty_folder_takes_the_record_and_is_kept_as_the_users_folder(tmp_path, runner, capsys):
    mine = tmp_path / "empty"
    mine.mkdir()
    inode = mine.stat().st_ino
    rc, _ = _main(runner, capsys, "-p", "out_dir", str(mine))
    assert rc == 0 and {p.name for p in mine.iterdir()} >= {"results.json", "fig1.png",
                                                             "04_print_overhead.executed.ipynb"}
    rc, _ = _main(runner, capsys, "-p", "out_dir", str(mine))  # a record of 04 now: replaced file by file
    names = {p.name for p in mine.iterdir()}
    assert rc == 0 and "fig2.png" in names and "fig1.png" not in names
    assert mine.stat().st_ino == inode  # the user's folder itself is never renamed or removed
    (mine / "NOTES.md").write_text("mine")  # a record with a file of the user's beside it
    rc, out = _main(runner, capsys, "-p", "out_dir", str(mine))
    assert rc == 2 and "NOTES.md" in _one_error_line(out.err) and (mine / "NOTES.md").read_text() == "mine"
    assert "fig2.png" in {p.name for p in mine.iterdir()}


def test_a_users_png_or_json_beside_a_record_is_theirs_and_never_removed(tmp_path, runner, capsys):
    """Review: any .png/.json/.csv counted as the record's, so a user's holiday.png beside a record in their
    -p out_dir folder was unlinked by the next run. Only the files the run listed (its manifest) are its own."""
    mine = tmp_path / "mine"
    mine.mkdir()
    assert _main(runner, capsys, "-p", "out_dir", str(mine))[0] == 0
    (mine / "holiday.png").write_bytes(b"\x89PNG mine")
    (mine / "budget.json").write_text("{}")
    rc, out = _main(runner, capsys, "-p", "out_dir", str(mine))
    line = _one_error_line(out.err)
    assert rc == 2 and "holiday.png" in line and "budget.json" in line
    assert (mine / "holiday.png").read_bytes() == b"\x89PNG mine" and (mine / "budget.json").is_file()
    legacy = tmp_path / "legacy"   # a record from before manifests, outside figures/: nothing is assumed ours
    legacy.mkdir()
    (legacy / "04_print_overhead.executed.ipynb").write_text("{}")
    (legacy / "holiday.png").write_bytes(b"mine")
    rc, out = _main(runner, capsys, "-p", "out_dir", str(legacy))
    assert rc == 2 and (legacy / "holiday.png").read_bytes() == b"mine"


def test_out_root_figures_is_refused_and_every_machines_records_stay(tmp_path, runner, capsys):
    figs = paths.FIGURES_DIR
    before = _snapshot(figs)
    for flag in (["--out-root", str(figs)], ["--out-root", str(figs / "elsewhere")],
                 ["-p", "out_dir", str(figs / "04_print_overhead")]):
        rc, out = _main(runner, capsys, *flag)
        line = _one_error_line(out.err)
        assert rc == 2 and "inside figures/" in line and "figures/04_print_overhead/cpu-2c" in line, line
    assert _snapshot(figs) == before and runner.ran == []
    rc, _ = _main(runner, capsys, "--out-root", str(tmp_path / "elsewhere"))  # outside figures/: a folder of its own
    assert rc == 0 and (tmp_path / "elsewhere" / "04_print_overhead" / "results.json").is_file()
    assert _snapshot(figs) == before


def test_a_gpu_profile_run_never_writes_a_machine_folder_without_a_gpu(tmp_path, runner, capsys, monkeypatch):
    figs = paths.FIGURES_DIR
    before = _snapshot(figs)
    rc, out = _main(runner, capsys, "--profile", "gpu")
    line = _one_error_line(out.err)
    assert rc == 2 and "--profile gpu on cpu-2c" in line and "without a GPU" in line
    assert _snapshot(figs) == before and runner.ran == []
    monkeypatch.setenv("FEEDLAB_MACHINE", "h100-16c")  # a GPU machine writes its own folder
    monkeypatch.setattr("feedlab.run_record.cuda_here", lambda: True)
    rc, _ = _main(runner, capsys, "--profile", "gpu")
    assert rc == 0 and (figs / "04_print_overhead" / "h100-16c" / "fig1.png").is_file()
    assert (figs / "04_print_overhead" / "cpu-2c" / "fig.png").read_text() == "cpu-2c fig.png"


def test_the_runners_own_error_no_longer_points_at_out_dir_for_one_notebook(runner, capsys, tmp_path):
    rc, out = _main(runner, capsys, "-p", "out_dir", str(tmp_path / "o"), only="04 02")
    line = _one_error_line(out.err.splitlines()[-1] if out.err else "")
    assert rc == 2 and "--out-root DIR" in line and "--only one notebook" not in line


def test_notebook_worker_counts_keep_the_cap(runner, capsys):
    from feedlab.profiles import resolve

    rc, out = _main(runner, capsys, "-p", "worker_counts", "[2, 3000]", only="01")
    line = _one_error_line(out.err)
    assert rc == 2 and "worker_counts" in line and "3000" in line and "cap" in line and runner.ran == []
    with pytest.raises(ValueError, match="01_worker_scaling: worker_counts.*over the cap"):
        resolve("01_worker_scaling", "quick", _create_out_dir=False, worker_counts=[0, 3000])
    with pytest.raises(ValueError, match="max_workers.*over the cap"):
        resolve("01_worker_scaling", "quick", _create_out_dir=False, max_workers="cores * 1000")


# ---------------------------------------------------------------- the orphan sweep
def _users_lookalikes(parent: Path) -> dict:
    """A user's names of the temporaries' shape, of a process that is gone, old enough to sweep."""
    pid, old = _dead_pid(), time.time() - 3600
    f = parent / f"thesis.tex.tmp-{pid}-c0ffee"
    f.write_text("chapter 1")
    d = parent / f"photos.old-{pid}-beefed"
    d.mkdir()
    (d / "p.jpg").write_bytes(b"jpg")
    for p in (f, d):
        os.utime(p, (old, old))
    return _snapshot(parent)


def test_the_sweep_never_removes_a_users_name_of_the_temporaries_shape(tmp_path):
    before = _users_lookalikes(tmp_path)
    assert sweep_orphans(tmp_path) == []
    assert _snapshot(tmp_path) == before


def _photos(d: Path, n=3) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for k in range(n):
        rng = np.random.default_rng(k)
        Image.fromarray(rng.integers(0, 256, (72, 80, 3), dtype=np.uint8), "RGB").save(d / f"p{k}.png")
    return d


def test_data_prep_sr_and_the_runner_leave_a_users_lookalikes_beside_their_output(tmp_path, runner, capsys):
    parent = tmp_path / "data"
    parent.mkdir()
    before = _users_lookalikes(parent)
    data_prep.build_sr(parent / "sr", 32, 2, 6, seed=0, source=_photos(tmp_path / "photos"), log=lambda _m: None)
    data_prep.pack(parent / "sr", "npy", log=lambda _m: None)
    assert {k: v for k, v in _snapshot(parent).items() if not k.startswith("sr")} == before
    out = tmp_path / "out"
    out.mkdir()
    before = _users_lookalikes(out)
    rc, _ = _main(runner, capsys, "--out-root", str(out))
    assert rc == 0 and {k: v for k, v in _snapshot(out).items() if not k.startswith("04_")} == before


def test_the_sweep_removes_what_a_killed_feedlab_process_left(tmp_path):
    code = textwrap.dedent("""
        import os, sys
        from pathlib import Path
        from feedlab.formats._io import tmp_sibling
        t = tmp_sibling(Path(sys.argv[1]) / "sr64"); t.mkdir(); (t / "half").write_text("x")
        print(t.name, flush=True)
        os.kill(os.getpid(), 9)
    """)
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=_env(),
                       timeout=60)
    assert r.returncode == -9
    left = tmp_path / r.stdout.strip()
    assert left.is_dir()
    assert sweep_orphans(tmp_path, min_age_s=0) == [left] and not left.exists()


# ---------------------------------------------------------------- the README
def _fake_repo(tmp_path, monkeypatch, reading):
    from feedlab.report import readme
    from feedlab.report.claims import ledger

    figs = tmp_path / "figures"
    for nb, key in (("01_a", "cpu-2c"), ("01_a", "h100-16c"), ("02_b", "cpu-2c")):
        d = figs / nb / key
        d.mkdir(parents=True)
        gpus = [{"name": "NVIDIA H100"}] if key.startswith("h100") else []
        (d / "fingerprint.json").write_text(json.dumps({"cpu_usable": int(key.split("-")[1][:-1]), "gpus": gpus,
                                                        "time_utc": "2026-01-01T10:00:00+00:00"}))
        (d / "results.json").write_text(json.dumps({"reading": reading}))
    monkeypatch.setattr(readme, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(readme, "FIGURES_DIR", figs)
    real_section = readme.section
    monkeypatch.setattr(readme, "section", lambda *a, **k: real_section(figs))
    monkeypatch.setattr(readme, "doctor_block", lambda *a, **k: "")
    monkeypatch.setattr(ledger, "update_readme_block", lambda text, *a, **k: text)
    path = tmp_path / "README.md"
    path.write_text(f"intro\n{readme.DOCTOR_START}\n{readme.DOCTOR_END}\n{readme.START}\nold\n{readme.END}\noutro\n")
    return readme, path, figs


def test_the_readme_says_so_when_committed_results_it_lists_are_gone(tmp_path, monkeypatch, capsys):
    readme, path, figs = _fake_repo(tmp_path, monkeypatch, ["read"])
    readme.update_readme(path)
    assert "figures/01_a/h100-16c/" in path.read_text()
    shutil.rmtree(figs / "01_a" / "h100-16c")
    before = path.read_text()
    wrote = []
    for name in ("update_readme", "input_problems"):
        monkeypatch.setattr(readme, name, lambda *a, _n=name, **k: wrote.append(_n) or [])
    monkeypatch.setattr(readme.compare, "write_all", lambda *a, **k: wrote.append("compare"))
    monkeypatch.setattr(readme.claims_ledger, "write_claims", lambda *a, **k: wrote.append("claims"))
    monkeypatch.setattr(readme.gpu_readings, "write", lambda *a, **k: wrote.append("gpu"))
    with pytest.raises(SystemExit) as ex:
        readme.main([])
    line = _one_error_line(capsys.readouterr().err, "python -m feedlab.report.readme")
    assert ex.value.code == 2 and "figures/01_a/h100-16c" in line and "--drop-missing" in line
    assert wrote == [] and path.read_text() == before
    assert readme.vanished_records(before, figs) == ["figures/01_a/h100-16c"]


def test_a_crafted_reading_line_cannot_grow_the_readme(tmp_path, monkeypatch):
    from feedlab.report.claims import ledger

    crafted = [f"x {m} y" for m in ("<!-- figures:end -->", "<!-- figures:start -->", "<!-- doctor:end -->",
                                     ledger.START, ledger.END)] + ["two\nlines ### 99 · fake", "z" * 100_000]
    readme, path, _figs = _fake_repo(tmp_path, monkeypatch, crafted)
    readme.update_readme(path)
    first = path.read_text()
    assert readme.update_readme(path) is False and path.read_text() == first  # idempotent
    for marker in (readme.START, readme.END, readme.DOCTOR_START, readme.DOCTOR_END):
        assert first.count(marker) == 1, marker
    assert first.endswith(f"{readme.END}\noutro\n")
    assert max(len(ln) for ln in first.splitlines()) <= readme.MAX_LINE_CHARS + 2
    assert "\n- two lines ### 99 · fake" in first


def test_the_readmes_path_scrub_is_linear_in_a_long_adversarial_line(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(render(report))")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                           text="doctor · /root/repo/data/sr64 · png\n" + "/" * 300_000 + "\n")]
    nb.cells = [cell]
    nbformat.write(nb, tmp_path / "10.ipynb")
    code = ("import sys; from feedlab.report.readme import doctor_output\n"
            "out = doctor_output(sys.argv[1]); print(out.splitlines()[0], len(out))")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "10.ipynb")], capture_output=True, text=True,
                       env=_env(), timeout=90)  # quadratic: about 9 minutes for these 300,000 slashes
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["doctor", "·", "data/sr64", "·", "png", str(len("doctor · data/sr64 · png\n") + 300_000)]


# ---------------------------------------------------------------- a stopped run: one line, no ZMQError wall
def test_a_stopped_run_prints_no_zmq_error(tmp_path):
    code = textwrap.dedent("""
        import sys, nbformat
        from pathlib import Path
        from feedlab import paths, run
        tmp = Path(sys.argv[1])
        paths.SCRATCH_DIR = tmp / "runs"
        nb = nbformat.v4.new_notebook()
        params = nbformat.v4.new_code_cell("profile = 'quick'\\nout_dir = '.'")
        params.metadata.tags = ["parameters"]
        nb.cells = [params, nbformat.v4.new_code_cell("print('first')"),
                    nbformat.v4.new_code_cell("import time\\ntime.sleep(300)")]
        nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
        p = tmp / "nb" / "99_slow.ipynb"
        p.parent.mkdir()
        nbformat.write(nb, p)
        run.list_notebooks = lambda: [p]
        sys.exit(run.main(["--only", "99", "--no-data", "--out-root", str(tmp / "figs"), "--limit-s", "8"]))
    """)
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=_env(),
                       timeout=180, cwd=tmp_path)
    assert r.returncode == 1 and "99_slow stopped at its limit of 8 s" in r.stdout
    assert "ZMQError" not in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]


# ---------------------------------------------------------------- the GPU runbook on the wrong machine
def _gpu_call_copy(tmp_path, setup: str, fake_python: str | None) -> tuple[Path, dict]:
    """.ci/gpu-call in a folder of its own with a stand-in gpu-setup (``setup``: its bash lines), and
    (with ``fake_python``) a python3 first on PATH."""
    root = tmp_path / "r"
    (root / ".ci").mkdir(parents=True)
    shutil.copy2(REPO / ".ci" / "gpu-call", root / ".ci" / "gpu-call")
    (root / ".ci" / "gpu-setup").write_text("#!/usr/bin/env bash\n" + setup)
    (tmp_path / "out").mkdir()
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    if fake_python is not None:
        bin_ = tmp_path / "bin"
        bin_.mkdir()
        py = bin_ / "python3"
        py.write_text("#!/usr/bin/env bash\n" + fake_python)
        py.chmod(py.stat().st_mode | stat.S_IEXEC)
        path = f"{bin_}{os.pathsep}{path}"
    env = dict(os.environ, PATH=path, OUT=str(tmp_path / "out"), PYTHONPATH="")
    return root, env


def test_gpu_call_on_a_machine_without_a_gpu_stops_in_one_line_before_anything_runs(tmp_path):
    import torch

    if torch.cuda.is_available():  # pragma: no cover - the CI machine has none
        pytest.skip("this machine has a GPU")
    # this environment's python3 (torch without CUDA); a setup that leaves a mark and stops the call
    root, env = _gpu_call_copy(tmp_path, f"touch {tmp_path / 'setup-ran'}\nexit 1\n", None)
    r = subprocess.run(["bash", str(root / ".ci" / "gpu-call"), "1"], capture_output=True, text=True, env=env,
                       timeout=120)
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "no CUDA GPU" in lines[0], r.stdout + r.stderr
    assert not (tmp_path / "setup-ran").exists() and list((tmp_path / "out").iterdir()) == []


def test_a_sigterm_to_gpu_call_stops_its_steps_and_what_they_started(tmp_path):
    pidfile = tmp_path / "step.pid"
    # "a GPU" (python3 says yes to anything), and a setup step that runs long
    root, env = _gpu_call_copy(tmp_path, f"echo $$ > {pidfile}\nexec sleep 300\n", "exit 0\n")
    p = subprocess.Popen(["bash", str(root / ".ci" / "gpu-call"), "1"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    family = []
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.1)
        assert pidfile.exists(), p.communicate(timeout=10)
        time.sleep(0.3)
        family = psutil.Process(p.pid).children(recursive=True)
        assert any(c.name() == "timeout" for c in family) and any(c.name() == "sleep" for c in family)
        p.send_signal(signal.SIGTERM)
        _out, err = p.communicate(timeout=60)
        assert p.returncode == 143 and "stopped by SIGTERM" in err, err
        _gone, alive = psutil.wait_procs(family, timeout=20)
        assert alive == [], f"left running: {[c.name() for c in alive]}"
    finally:
        for c in family:
            try:
                c.kill()
            except psutil.Error:
                pass
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


def test_a_gpu_run_under_a_custom_machine_name_on_a_cpu_box_is_refused(tmp_path, runner, capsys, monkeypatch):
    """Review: key_has_gpu trusted any FEEDLAB_MACHINE name, so `--profile gpu` could replace its records here."""
    from feedlab import run_record

    monkeypatch.setenv("FEEDLAB_MACHINE", "mybox-16c")
    monkeypatch.setattr(run_record, "cuda_here", lambda: False)
    before = _snapshot(paths.FIGURES_DIR)
    rc, out = _main(runner, capsys, "--profile", "gpu")
    assert rc == 2 and "without a GPU" in _one_error_line(out.err) and runner.ran == []
    assert _snapshot(paths.FIGURES_DIR) == before
