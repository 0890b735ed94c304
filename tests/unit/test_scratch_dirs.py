"""Only feedlab.run writes the committed folder figures/<notebook>/<machine>/: a notebook run
any other way (nbval, JupyterLab, an executed notebook run again) writes under runs/, and what
it shows names no machine's checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

from feedlab import paths, run_record


@pytest.fixture()
def dirs(monkeypatch, tmp_path):
    monkeypatch.setattr(paths, "FIGURES_DIR", tmp_path / "figures")
    monkeypatch.setattr(paths, "SCRATCH_DIR", tmp_path / "runs")
    monkeypatch.setenv("FEEDLAB_MACHINE", "cpu-2c")
    monkeypatch.delenv(paths.RUNNER_ENV, raising=False)
    return tmp_path


def test_outside_the_runner_a_notebook_writes_under_runs(dirs):
    assert paths.figure_dir("03_x", "", "quick", create=False) == dirs / "runs" / "quick" / "03_x"
    assert paths.figure_dir("03_x", "", "smoke", create=False) == dirs / "runs" / "smoke" / "03_x"
    assert not (dirs / "figures").exists()


def test_the_runner_writes_the_machine_folder(dirs, monkeypatch):
    from feedlab.machines import machine_key
    from feedlab.profiles import resolve

    monkeypatch.setenv(paths.RUNNER_ENV, "1")
    key = machine_key()
    assert paths.figure_dir("03_x", "", "quick", create=False, machine=key) == dirs / "figures" / "03_x" / "cpu-2c"
    assert paths.figure_dir("03_x", "", "smoke", create=False) == dirs / "runs" / "smoke" / "03_x"
    with pytest.raises(ValueError, match="machine key"):   # paths knows no machine: the caller says which
        paths.figure_dir("03_x", "", "quick", create=False)
    P = resolve("03_pinned_memory_by_input_size", "quick", _create_out_dir=False)
    assert P.out_dir == dirs / "figures" / "03_pinned_memory_by_input_size" / "cpu-2c"
    # the runner's own process asks explicitly, without the variable
    monkeypatch.delenv(paths.RUNNER_ENV)
    assert paths.figure_dir("03_x", "", "full", create=False, committed=True, machine=key) == \
        dirs / "figures" / "03_x" / "cpu-2c"


def test_an_out_dir_inside_figures_given_outside_the_runner_is_moved(dirs):
    """The injected cell of a committed executed notebook, run again by nbval or in Lab."""
    committed = dirs / "figures" / "03_x" / "cpu-2c"
    got = paths.figure_dir("03_x", str(committed), "quick")
    assert got == dirs / "runs" / "quick" / "03_x" and got.is_dir() and not committed.exists()
    elsewhere = dirs / "mine"
    assert paths.figure_dir("03_x", str(elsewhere), "quick") == elsewhere  # anywhere else: as given


def test_rel_names_paths_from_the_repository_root(tmp_path):
    assert paths.rel(paths.REPO_ROOT / "figures" / "a.png") == "figures/a.png"
    assert paths.rel(paths.REPO_ROOT) == "."
    assert paths.rel(tmp_path / "x") == str(tmp_path / "x")


def test_resolved_parameters_show_no_checkout(monkeypatch):
    from feedlab.profiles import resolve

    monkeypatch.delenv(paths.RUNNER_ENV, raising=False)
    monkeypatch.setattr(paths, "SCRATCH_DIR", paths.REPO_ROOT / "runs")
    P = resolve("03_pinned_memory_by_input_size", "smoke", _create_out_dir=False)
    assert isinstance(P.out_dir, Path) and P.out_dir.is_absolute()  # the code gets real paths
    shown = repr(P)
    assert str(paths.REPO_ROOT) not in shown
    assert "out_dir='runs/smoke/03_pinned_memory_by_input_size'" in shown


def test_more_workers_than_cores_is_said_once_and_torchs_warning_silenced():
    import warnings

    import torch
    from torch.utils.data import DataLoader

    from feedlab.profiles import expect_more_workers_than_cores

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert expect_more_workers_than_cores({"worker_counts": [0, 2], "max_workers": 2}, 2) == ""
        note = expect_more_workers_than_cores({"worker_counts": [0, 2, 4], "max_workers": 6}, 2)
        assert note.startswith("Note: this run measures 4, 6 DataLoader worker(s) on 2 usable core(s)")
        dl = DataLoader(torch.arange(4), num_workers=64)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            expect_more_workers_than_cores({"worker_counts": [64]}, 2)  # filters go on top of "always"
            dl.check_worker_number_rationality()
        assert not [w for w in caught if "worker processes in total" in str(w.message)]


# ---------------------------------------------------------------- the runner's scratch folder and folder names
@pytest.fixture()
def fake_run(tmp_path, monkeypatch):
    """The runner with papermill replaced by a recorder: whatever fails here fails in the runner, not a cell."""
    import papermill

    from feedlab import run

    ran = []
    monkeypatch.setenv("FEEDLAB_MACHINE", "cpu-2c")
    monkeypatch.setenv("FEEDLAB_PROFILE", "smoke")
    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: ran.append(a))

    def main(*args):
        try:
            return run.main(["--no-data", "--only", "04", *args]), ran
        except SystemExit as exc:
            return exc.code, ran

    return main


def test_feedlab_scratch_set_to_a_file_is_one_line_before_the_notebook_runs(fake_run, tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("FEEDLAB_SCRATCH", str(blocker))
    monkeypatch.setattr(paths, "SCRATCH_DIR", blocker)
    rc, ran = fake_run("--out-root", str(tmp_path / "o"))
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and ran == [] and len(err) == 1, err
    assert f"FEEDLAB_SCRATCH={blocker}: not a folder" in err[0] and "failed in" not in err[0]
    assert blocker.read_text() == "not a folder"
    monkeypatch.setattr(paths, "SCRATCH_DIR", tmp_path / "runs")   # a file where its locks go: named too
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "locks").write_text("x")
    with pytest.raises(ValueError, match=r"not a folder \(.*locks is a file\)"):
        paths.check_scratch()


def test_feedlab_scratch_a_fifo_is_refused_by_the_dry_run_as_by_the_run_and_nothing_made(fake_run, tmp_path,
                                                                                         monkeypatch, capsys):
    """attack59 W4: FEEDLAB_SCRATCH naming a FIFO passed the dry run (rc 0), the run refused it; the plan agrees
    now, and makes nothing (a scratch folder not there yet is not made by a dry run)."""
    import os

    fifo = tmp_path / "ff"
    os.mkfifo(fifo)
    monkeypatch.setenv("FEEDLAB_SCRATCH", str(fifo))
    monkeypatch.setattr(paths, "SCRATCH_DIR", fifo)
    rc, ran = fake_run("--dry-run")
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and ran == [] and len(err) == 1 and f"FEEDLAB_SCRATCH={fifo}: not a folder" in err[0], err
    monkeypatch.setattr(paths, "SCRATCH_DIR", tmp_path / "new" / "runs")
    assert paths.check_scratch(make=False) == tmp_path / "new" / "runs"
    assert sorted(os.listdir(tmp_path)) == ["ff"]


def test_a_folder_name_too_long_for_its_temporary_is_one_line_and_a_long_one_still_locks(fake_run, tmp_path,
                                                                                         monkeypatch, capsys):
    from feedlab.run_record import SIBLING_SUFFIX, run_lock

    monkeypatch.setattr(paths, "SCRATCH_DIR", tmp_path / "runs")
    rc, ran = fake_run("-p", "out_dir", str(tmp_path / ("x" * 240)))
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and ran == [] and len(err) == 1, err
    assert "the folder name is 240 bytes" in err[0] and "failed in" not in err[0]
    longest = tmp_path / ("y" * (255 - len(SIBLING_SUFFIX)))   # the longest a record folder may be named
    with run_lock(longest):   # its lock file's name is cut, the folder named by a hash: it fits
        pass
    assert len(list((tmp_path / "runs" / "locks").iterdir())) == 1


KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from feedlab.formats._io import tmp_sibling   # what pack's atomic_output names its temporary with
t = tmp_sibling(Path(sys.argv[1]) / "lmdb")
t.mkdir()
(t / "data.mdb").write_bytes(b"half")
print(t.name, flush=True)
os.kill(os.getpid(), signal.SIGKILL)            # a pack killed mid-write
"""


def test_a_killed_packs_temporary_is_swept_by_the_next_pack_under_another_scratch(tmp_path):
    """Temporaries are registered by the checkout, not the scratch folder: a temporary left by a SIGKILLed
    ``data_prep pack`` under ``FEEDLAB_SCRATCH=a`` is swept by the next pack under ``FEEDLAB_SCRATCH=b``
    (before: b's registry did not know it, and it stayed for ever). Nothing else is touched."""
    import os
    import subprocess
    import sys
    import time

    import data_prep

    repo = Path(__file__).resolve().parents[2]
    root = tmp_path / "sr"
    data_prep.build_sr(root, 32, 2, 4, seed=0, log=lambda _m: None)
    mine = root / "lmdb.tmp-999999-c0ffee"   # a user's folder of the same shape: never ours
    mine.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo / "lib"), str(repo)]),
           "XDG_STATE_HOME": str(tmp_path / "state"), "TMPDIR": str(tmp_path)}
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(root)], capture_output=True, text=True,
                            env={**env, "FEEDLAB_SCRATCH": str(tmp_path / "a")}, timeout=60)
    assert killed.returncode == -9
    left = root / killed.stdout.strip()
    old = time.time() - 3600
    for p in (left, mine):
        os.utime(p, (old, old))
    r = subprocess.run([sys.executable, "-m", "data_prep", "pack", str(root), "--to", "npy"], capture_output=True,
                       text=True, env={**env, "FEEDLAB_SCRATCH": str(tmp_path / "b")}, timeout=120, cwd=repo)
    assert r.returncode == 0, r.stderr
    assert f"removed {left.name}, left by a killed run" in r.stdout
    assert not left.exists() and mine.is_dir()
    assert sorted(p.name for p in root.iterdir() if ".tmp-" in p.name) == [mine.name]


def test_env_numbers_are_read_by_one_helper_that_names_the_variable(monkeypatch):
    """FEEDLAB_MAX_WORKERS=0 was taken as 1 in silence, and FEEDLAB_PEER_TIMEOUT_S=soon was a traceback at import."""
    from feedlab.machines import worker_cap
    from feedlab.peers import remote

    monkeypatch.setenv("FEEDLAB_MAX_WORKERS", "0")
    with pytest.raises(ValueError, match=r"FEEDLAB_MAX_WORKERS='0': must be at least 1$"):
        worker_cap(2)
    monkeypatch.setenv("FEEDLAB_MAX_WORKERS", "lots")
    with pytest.raises(ValueError, match=r"FEEDLAB_MAX_WORKERS='lots': must be a whole number of workers"):
        worker_cap(2)
    monkeypatch.setenv("FEEDLAB_MAX_WORKERS", "8")
    assert worker_cap(2) == 8
    monkeypatch.delenv("FEEDLAB_MAX_WORKERS")
    assert worker_cap(2) == 16
    for bad in ("soon", "nan", "inf", "-1"):
        monkeypatch.setenv("FEEDLAB_PEER_TIMEOUT_S", bad)
        with pytest.raises(ValueError, match=rf"FEEDLAB_PEER_TIMEOUT_S='{bad}': must be") as err:
            remote.timeout_s()
        assert "\n" not in str(err.value)
    monkeypatch.setenv("FEEDLAB_PEER_TIMEOUT_S", "90")
    assert remote.timeout_s() == 90.0
    monkeypatch.setenv("FEEDLAB_PEER_TIMEOUT_S", "")
    assert remote.timeout_s() == remote.TIMEOUT_S
    assert paths.env_number("FEEDLAB_NOT_SET_ANYWHERE", 7) == 7
    from feedlab.files import max_file_bytes
    from feedlab.monitor import usable_cores

    for name, read in (("FEEDLAB_CORES", usable_cores), ("FEEDLAB_MAX_FILE_BYTES", max_file_bytes)):
        for bad in ("abc", "0", "1.5"):
            monkeypatch.setenv(name, bad)
            with pytest.raises(ValueError, match=rf"{name}='{bad}': must be") as err:
                read()
            assert "\n" not in str(err.value)
        monkeypatch.setenv(name, "3")
        assert read() == 3


def test_feedlab_scratch_inside_a_committed_record_is_refused_and_nothing_written(fake_run, tmp_path, monkeypatch,
                                                                                  capsys):
    record = tmp_path / "figures" / "04_print_overhead" / "cpu-2c"
    record.mkdir(parents=True)
    (record / "results.json").write_text("{}")
    monkeypatch.setattr(paths, "FIGURES_DIR", tmp_path / "figures")
    monkeypatch.setenv("FEEDLAB_SCRATCH", str(record))
    monkeypatch.setattr(paths, "SCRATCH_DIR", record)
    rc, ran = fake_run("--out-root", str(tmp_path / "o"))
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and ran == [] and len(err) == 1, err
    assert f"FEEDLAB_SCRATCH={record}: lies inside figures/" in err[0]
    assert sorted(p.name for p in record.iterdir()) == ["results.json"]   # no locks/, temps/, failed/ in it


def test_feedlab_scratch_a_link_loop_is_one_line_not_a_traceback_at_import(tmp_path):
    import os
    import subprocess
    import sys

    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    env = {**os.environ, "FEEDLAB_SCRATCH": str(loop), "FEEDLAB_DATA": str(loop)}
    code = "from feedlab import paths\ntry:\n    paths.check_scratch()\nexcept ValueError as e:\n    print(e)\n"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stdout.startswith(f"FEEDLAB_SCRATCH={loop}: {loop} is a link that leads nowhere"), r.stdout
    assert len(r.stdout.splitlines()) == 1, r.stdout
    assert paths.outside_figures(loop, "--trace") is None   # a loop named for a side output: no traceback either


@pytest.mark.parametrize("value", ["", " ", " \t "])
def test_an_empty_or_blank_scratch_or_data_variable_is_unset(value):
    """attack53 X01/X05: FEEDLAB_SCRATCH= (empty) silently meant the current folder (locks/ failed/ temps/ in the
    checkout's root), FEEDLAB_DATA= the same for the data sets: an empty value is the default. attack54 X14:
    FEEDLAB_SCRATCH=' ' was a folder named " " in the current folder: a blank value is unset too."""
    import os
    import subprocess
    import sys

    code = ("from feedlab import paths; print(paths.SCRATCH_DIR == paths.REPO_ROOT / 'runs', "
            "paths.DATA_DIR == paths.REPO_ROOT / 'data')")
    env = {**os.environ, "FEEDLAB_SCRATCH": value, "FEEDLAB_DATA": value}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                         cwd="/")
    assert out.stdout.split() == ["True", "True"], out.stderr[-2000:]


@pytest.mark.parametrize("folder", ["notebooks", "lib/feedlab", "data_prep", "tests", "docs", ".git", "."])
def test_a_scratch_folder_among_the_checkouts_sources_is_refused_before_anything_is_written(monkeypatch, folder):
    """attack53 X06: FEEDLAB_SCRATCH=notebooks was taken, and an executed notebook with its locks/ and failed/
    landed among the tracked sources. One line naming the variable, nothing made."""
    root = paths.REPO_ROOT / folder
    before = sorted(p.name for p in root.iterdir())
    monkeypatch.setattr(paths, "SCRATCH_DIR", root)
    monkeypatch.setenv("FEEDLAB_SCRATCH", str(root))
    with pytest.raises(ValueError) as err:
        paths.check_scratch()
    line = str(err.value)
    assert line.startswith(f"FEEDLAB_SCRATCH={root}: ") and "nothing written" in line and "\n" not in line
    assert ("the checkout itself" if folder == "." else f"inside {folder.split('/')[0]}/") in line
    assert sorted(p.name for p in root.iterdir()) == before



def test_env_path_strips_and_a_blank_value_is_unset(monkeypatch):
    monkeypatch.setenv("FEEDLAB_SCRATCH", "  work/sx \n")
    assert paths.env_path("FEEDLAB_SCRATCH") == "work/sx"
    monkeypatch.setenv("FEEDLAB_SCRATCH", " ")
    assert paths.env_path("FEEDLAB_SCRATCH") == ""
    monkeypatch.delenv("FEEDLAB_SCRATCH")
    assert paths.env_path("FEEDLAB_SCRATCH") == ""


def test_a_scratch_profile_folder_linked_into_figures_is_refused_before_the_run(fake_run, tmp_path, monkeypatch,
                                                                                   capsys):
    """attack54 X13: FEEDLAB_SCRATCH=work/sx2 with sx2/smoke -> figures/04_print_overhead: the runner wrote a whole
    smoke record inside figures/, rc 0. Now one line, in the run and the dry run, nothing run or made. (X17, the
    same link into notebooks/, is pinned without a run below: a regression would write into the checkout.)"""
    figures = tmp_path / "figures"
    committed = figures / "04_print_overhead"
    (committed / "cpu-2c").mkdir(parents=True)
    monkeypatch.setattr(paths, "FIGURES_DIR", figures)
    monkeypatch.setattr(run_record, "FIGURES_DIR", figures)
    scratch = tmp_path / "sx2"
    scratch.mkdir()
    (scratch / "smoke").symlink_to(committed)
    monkeypatch.setenv("FEEDLAB_SCRATCH", str(scratch))
    monkeypatch.setattr(paths, "SCRATCH_DIR", scratch)
    for dry in ([], ["--dry-run"]):
        rc, ran = fake_run(*dry)
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert rc == 2 and ran == [] and len(err) == 1, err
        assert f"FEEDLAB_SCRATCH={scratch}: " in err[0] and "through a link" in err[0] and "inside figures/" in err[0]
        assert sorted(p.name for p in committed.iterdir()) == ["cpu-2c"]


def test_every_route_to_a_record_folder_is_resolved_through_links(tmp_path, monkeypatch):
    """--out-root and -p out_dir through a link into a source folder or figures/ are refused as FEEDLAB_SCRATCH is;
    the runner's own committed folder (no flag, a measuring profile) stays allowed."""
    figures = tmp_path / "figures"
    (figures / "04_print_overhead" / "cpu-2c").mkdir(parents=True)
    monkeypatch.setattr(paths, "FIGURES_DIR", figures)
    monkeypatch.setattr(run_record, "FIGURES_DIR", figures)
    monkeypatch.setattr(paths, "SCRATCH_DIR", tmp_path / "runs")
    monkeypatch.setenv("FEEDLAB_MACHINE", "cpu-2c")
    monkeypatch.setattr(run_record, "fingerprint_key", lambda fp=None: "cpu-2c")
    (tmp_path / "to_docs").symlink_to(paths.REPO_ROOT / "docs")
    (tmp_path / "to_fig").symlink_to(figures / "04_print_overhead")
    (tmp_path / "to_top").symlink_to(paths.REPO_ROOT)
    name = "04_print_overhead"
    for profile, params, out_root, says in [
            ("smoke", {}, tmp_path / "to_docs", "--out-root"),
            ("smoke", {"out_dir": str(tmp_path / "to_docs" / "x")}, None, "-p out_dir"),
            ("quick", {"out_dir": str(tmp_path / "to_top")}, None, "the checkout itself"),
            ("smoke", {"out_dir": str(tmp_path / "to_fig" / "cpu-2c")}, None, "inside figures/")]:
        with pytest.raises(ValueError) as err:
            run_record.check_destination(name, profile, params, out_root, planning=True)
        assert says in str(err.value) and "\n" not in str(err.value), str(err.value)
    sx5 = tmp_path / "sx5"
    sx5.mkdir()
    (sx5 / "smoke").symlink_to(paths.REPO_ROOT / "notebooks")       # attack54 X17
    monkeypatch.setattr(paths, "SCRATCH_DIR", sx5)
    with pytest.raises(ValueError, match="inside notebooks/"):
        run_record.check_destination(name, "smoke", {}, None, planning=True)
    monkeypatch.setattr(paths, "SCRATCH_DIR", tmp_path / "to_fig")   # the scratch root itself a link into figures/
    with pytest.raises(ValueError, match="inside figures/"):
        run_record.check_destination(name, "smoke", {}, None, planning=True)
    assert run_record.check_destination(name, "quick", {}, None, planning=True) == figures / name / "cpu-2c"
    assert not list((figures / name / "cpu-2c").iterdir()) and not (paths.REPO_ROOT / "docs" / "x").exists()


def test_a_scratch_subfolder_linked_into_figures_is_refused_and_nothing_written(tmp_path, monkeypatch):
    """The runner's locks/, failed/ and temps/ under the scratch folder are resolved through links as its records are."""
    figures = tmp_path / "figures"
    (figures / "04_print_overhead").mkdir(parents=True)
    monkeypatch.setattr(paths, "FIGURES_DIR", figures)
    scratch = tmp_path / "runs"
    scratch.mkdir()
    (scratch / "failed").symlink_to(figures / "04_print_overhead")
    monkeypatch.setattr(paths, "SCRATCH_DIR", scratch)
    monkeypatch.delenv("FEEDLAB_SCRATCH", raising=False)
    with pytest.raises(ValueError, match=r"failed \(through a link: .*\) lies inside figures/"):
        paths.check_scratch()
    assert not list((figures / "04_print_overhead").iterdir())
