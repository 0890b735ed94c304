"""feedlab.run_record.check_destination: a record inside figures/ is written only under a machine key
this machine is (issue 47 F1: ``FEEDLAB_MACHINE=h100-16c`` on a 2-core CPU box rewrote the committed
H100 record of 04, rc 0)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from feedlab import machines, run_record
from feedlab.paths import FIGURES_DIR

ROOT = Path(__file__).resolve().parents[2]
H100 = FIGURES_DIR / "04_print_overhead" / "h100-16c"


@pytest.fixture
def cpu_box(monkeypatch):
    monkeypatch.setattr(run_record, "fingerprint_key", lambda fp=None: "cpu-2c" if fp is None
                        else machines.fingerprint_key(fp))
    monkeypatch.setattr(run_record, "cuda_here", lambda: False)


def test_a_gpu_machine_key_on_a_machine_without_a_gpu_is_refused_whatever_the_profile(monkeypatch, cpu_box):
    monkeypatch.setenv("FEEDLAB_MACHINE", "h100-16c")
    for profile in ("quick", "full", "gpu"):
        with pytest.raises(ValueError, match=r"h100-16c|without a GPU") as err:
            run_record.check_destination("04_print_overhead", profile, {}, None)
        assert "\n" not in str(err.value)


def test_a_committed_record_of_another_machine_is_never_replaced(monkeypatch, cpu_box):
    if not (H100 / "fingerprint.json").is_file():
        pytest.skip("no committed h100 record of 04 in this checkout")
    monkeypatch.setattr(run_record, "cuda_here", lambda: True)      # even where a GPU is seen
    monkeypatch.setenv("FEEDLAB_MACHINE", "h100-16c")
    with pytest.raises(ValueError, match=r"holds a record made on h100-16c .*this machine is cpu-2c"):
        run_record.check_destination("04_print_overhead", "quick", {}, None)


def test_feedlab_machine_still_names_this_machines_own_folder(monkeypatch, cpu_box):
    monkeypatch.setenv("FEEDLAB_MACHINE", "cpu-2c")
    assert run_record.check_destination("04_print_overhead", "quick", {}, None).name == "cpu-2c"
    monkeypatch.setenv("FEEDLAB_MACHINE", "box-1c")   # a name of one's own, no record there yet
    assert run_record.check_destination("04_print_overhead", "quick", {}, None).name == "box-1c"
    assert not machines.key_names_gpu("box-1c") and machines.key_names_gpu("2xa100-64c")


def test_the_runner_refuses_before_anything_runs(tmp_path):
    """The command line of the attack, as a dry run: one line, rc 2, nothing left behind."""
    if machines.fingerprint_key().startswith("h100-16c"):
        pytest.skip("this machine is h100-16c")
    env = {**os.environ, "FEEDLAB_MACHINE": "h100-16c", "TMPDIR": str(tmp_path), "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": f"{ROOT / 'lib'}{os.pathsep}{ROOT}"}
    before = subprocess.run(["git", "status", "--porcelain", "--", "figures"], cwd=ROOT, capture_output=True,
                            text=True).stdout
    p = subprocess.Popen([sys.executable, "-m", "feedlab.run", "--profile", "quick", "--only", "04", "--dry-run"],
                         cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "FEEDLAB_MACHINE=h100-16c" in lines[0], out + err
    assert subprocess.run(["pgrep", "-s", str(p.pid)], capture_output=True).returncode == 1
    assert not list(tmp_path.iterdir())
    assert subprocess.run(["git", "status", "--porcelain", "--", "figures"], cwd=ROOT, capture_output=True,
                          text=True).stdout == before


@pytest.mark.parametrize("argv, says", [
    (["--profile", "smoke", "-p", "out_dir", "figures/04_print_overhead/cpu-2c/../cpu-2c/"],
     "leave -p out_dir out"),
    (["--profile", "smoke", "-p", "batch_size", "-5"], "batch_size=-5"),
])
def test_the_dry_run_refuses_what_the_run_refuses(tmp_path, argv, says):
    """Issue 47 W1/W3: the dry run gave rc 0 (the folder silently replaced; "cannot resolve" printed)."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": f"{ROOT / 'lib'}{os.pathsep}{ROOT}"}
    env.pop("FEEDLAB_MACHINE", None)
    p = subprocess.Popen([sys.executable, "-m", "feedlab.run", "--only", "04", *argv, "--dry-run"], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 2 and says in out + err, out + err
    assert subprocess.run(["pgrep", "-s", str(p.pid)], capture_output=True).returncode == 1
    assert not list(tmp_path.iterdir())


def test_a_pretend_core_count_never_reaches_a_record(monkeypatch, cpu_box):
    """Issue 47 W9: ``FEEDLAB_CORES=16`` on a 2-core machine would write figures/<nb>/cpu-16c/, a record
    claiming 16 cores. A real run refuses it in one line; the dry run (planning) still pretends."""
    monkeypatch.delenv("FEEDLAB_MACHINE", raising=False)
    real = len(os.sched_getaffinity(0))
    monkeypatch.setenv("FEEDLAB_CORES", str(real + 14))
    monkeypatch.setattr(run_record, "machine_key", lambda: f"cpu-{real + 14}c")
    with pytest.raises(ValueError, match=rf"FEEDLAB_CORES={real + 14}: more than the {real} cores") as err:
        run_record.check_destination("04_print_overhead", "quick", {}, None)
    assert "\n" not in str(err.value)
    planned = run_record.check_destination("04_print_overhead", "quick", {}, None, planning=True)
    assert planned.name == f"cpu-{real + 14}c" and not planned.exists()
    monkeypatch.setenv("FEEDLAB_CORES", str(real))   # no more than it has: as before
    run_record.check_destination("04_print_overhead", "quick", {}, None)


@pytest.mark.parametrize("where", ["root", "below"])
def test_an_out_root_that_is_a_file_is_refused_before_anything_runs(tmp_path, where):
    """Issue 47's attack (R03): ``--out-root FILE`` ran the data step and the notebook, then failed in it with
    ``[Errno 17] File exists``; it is one line before anything runs, the file left as it was."""
    from leftovers import nothing_left

    afile = tmp_path / "afile"
    afile.write_text("mine")
    out_root = afile if where == "root" else afile / "deeper"
    with nothing_left(tmp_path / "tmp", 30, "the destination check"):
        with pytest.raises(ValueError) as err:
            run_record.check_destination("04_print_overhead", "smoke", {}, out_root)
    line = str(err.value)
    assert "\n" not in line and f"{afile} is a file, not a folder" in line and "--out-root" in line, line
    assert afile.read_text() == "mine" and sorted(os.listdir(tmp_path)) == ["afile", "tmp"]


def test_a_tar_named_other_than_tar_or_tar_gz_is_refused_and_the_dry_run_makes_nothing(tmp_path):
    """Issue 47's attack (R07): ``--tar x.zip`` was taken silently (a plain tar under a .zip name); the dry run
    said nothing. The name is checked in the dry run too, which makes no folder and no probe file."""
    from leftovers import nothing_left

    with nothing_left(tmp_path / "tmp", 30, "the --tar check"):
        for planning in (True, False):
            with pytest.raises(ValueError, match=r"give a \.tar or \.tar\.gz name"):
                run_record.check_tar_dest(tmp_path / "out" / "x.zip", planning=planning)
        run_record.check_tar_dest(tmp_path / "new" / "r.tar.gz", planning=True)
    assert sorted(os.listdir(tmp_path)) == ["tmp"]


def test_a_tar_inside_figures_is_refused_in_the_dry_run_and_the_run(tmp_path, monkeypatch):
    """attack49 N01: ``feedlab.run --tar figures/04_print_overhead/cpu-2c/x.tar`` ran, rc 0, and left x.tar inside
    the committed record's folder (a tar of figures/*/<machine>/ written into one of them)."""
    from feedlab import paths

    figs = tmp_path / "figures"
    record = figs / "04_print_overhead" / "cpu-2c"
    record.mkdir(parents=True)
    monkeypatch.setattr(paths, "FIGURES_DIR", figs)
    for planning in (True, False):
        with pytest.raises(ValueError, match=r"--tar .*x\.tar: lies inside figures/"):
            run_record.check_tar_dest(record / "x.tar", planning=planning)
    assert os.listdir(record) == []
    run_record.check_tar_dest(tmp_path / "r.tar", planning=False)   # outside figures/: fine


def test_two_failed_runs_of_one_notebook_into_different_folders_keep_one_folder_each(tmp_path, monkeypatch):
    """attack53 R11: keep_failed kept one runs/failed/<name>/ per notebook, so a second failed run (another
    out_dir) replaced the first, whose line then named the other's notebook. A run into a folder of the caller's
    own is keyed by that folder; the default record's failed run keeps runs/failed/<name>/."""
    from feedlab import paths

    monkeypatch.setattr(paths, "SCRATCH_DIR", tmp_path / "runs")
    kept = []
    for out in ("k1", "k2"):
        tmp = tmp_path / f"{out}.tmp"
        tmp.mkdir()
        (tmp / "nb.executed.ipynb").write_text(out)
        kept.append(run_record.keep_failed(tmp, "04_print_overhead", tmp_path / out / "04_print_overhead"))
    assert kept[0] != kept[1]
    assert [(k / "nb.executed.ipynb").read_text() for k in kept] == ["k1", "k2"]
    tmp = tmp_path / "f.tmp"
    tmp.mkdir()
    default = run_record.keep_failed(tmp, "04_print_overhead", FIGURES_DIR / "04_print_overhead" / "cpu-2c")
    assert default == tmp_path / "runs" / "failed" / "04_print_overhead"


def test_a_run_folder_that_is_a_link_is_named_as_given_not_by_its_target(tmp_path):
    """attack53 X02: runs/smoke/04_print_overhead linked into figures/ was refused as 'figures/…/cpu-2c is not
    a folder', a folder the user never gave. The line names the link as written, and says it is one."""
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "smoke" / "04_print_overhead"
    link.parent.mkdir()
    link.symlink_to(target)
    line = run_record.record_problem("04_print_overhead", link)
    assert line.startswith(f"{link} is a link (to {target}): the runner does not write through links")


def test_a_records_manifest_that_is_a_fifo_or_too_deep_is_no_manifest_without_a_wait(tmp_path):
    """attack55 R40–R43, B41/B42: a `.feedlab-record.json` a FIFO hung the runner (dry run too) and
    report.readme; nested too deeply, a RecursionError traceback. Either reads as no manifest."""
    import os
    import threading

    from feedlab import run_record

    folder = tmp_path / "out"
    folder.mkdir()
    (folder / run_record.MANIFEST).write_text("[" * 100000 + "]" * 100000)
    assert run_record.written_by_run("04_print_overhead", folder) == set()
    assert run_record.missing_files(folder, set()) == []
    (folder / run_record.MANIFEST).unlink()
    os.mkfifo(folder / run_record.MANIFEST)
    got: list = []
    t = threading.Thread(target=lambda: got.append((run_record.written_by_run("04_print_overhead", folder),
                                                    run_record.missing_files(folder, set()))), daemon=True)
    t.start()
    t.join(20)
    assert got == [(set(), [])], "a FIFO manifest was waited on"


def test_a_record_file_that_is_a_fifo_is_named_for_what_it_is_not_called_a_foreign_file(tmp_path):
    """attack59 W3: a results.json that is a FIFO in the runner's own folder read "holds results.json, not a record
    … give a new or empty folder": the advice repaired nothing. Now the entry is named for what it is."""
    folder = tmp_path / "04_print_overhead"
    folder.mkdir()
    (folder / "04_print_overhead.executed.ipynb").write_text("{}")
    os.mkfifo(folder / "results.json")
    line = run_record.record_problem("04_print_overhead", folder)
    assert "results.json is a FIFO, not a regular file" in line and "remove it" in line, line
    assert "\n" not in line and "not a record of" not in line
    (folder / "results.json").unlink()
    (folder / "results.json").mkdir()   # attack60 J1: a folder; J2: a link to a device
    assert "results.json is a folder, not a regular file" in run_record.record_problem("04_print_overhead", folder)
    (folder / "results.json").rmdir()
    (folder / "fingerprint.json").symlink_to("/dev/zero")
    line = run_record.record_problem("04_print_overhead", folder)
    assert "fingerprint.json is a link (to /dev/zero), not a regular file" in line, line


def test_a_tar_that_is_a_fifo_is_refused_before_anything_runs_dry_run_too(tmp_path):
    """attack58 W6: `--tar f.tar` (a FIFO) passed the dry run and the start checks; the run refused it only after
    the notebook ran."""
    fifo = tmp_path / "f.tar"
    os.mkfifo(fifo)
    for planning in (True, False):
        with pytest.raises(ValueError, match=r"is a FIFO, not a regular file: left as it is, nothing run"):
            run_record.check_tar_dest(fifo, planning=planning)
    assert sorted(os.listdir(tmp_path)) == ["f.tar"]
