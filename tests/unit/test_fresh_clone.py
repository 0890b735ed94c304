"""The README's two commands on a fresh clone (issue 31): `make figures` installs what its notebooks
need (every extra of pyproject.toml, the `ray` one included), and a run that could not make a figure the
committed record has (notebook 14 without Ray) never deletes it nor leaves it stale beside the new run:
the committed record is kept whole and the runner says which files and which parts are missing."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from unittest import mock

import pytest
from inproc import run_cli

from feedlab import run_record as RR

REPO = Path(__file__).resolve().parents[2]
NAME = "14_ranks_and_remote_decode"
NO_RAY = "unavailable: ModuleNotFoundError: No module named 'ray' (pip install -e '.[ray]')"


def _record(folder: Path, files: dict[str, bytes], manifest: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    if manifest:
        RR.write_manifest(folder)
    return folder


def _results(remote_pays: dict) -> bytes:
    return json.dumps({"notebook": NAME, "remote_pays": remote_pays}).encode()


COMMITTED = {f"{NAME}.executed.ipynb": b"{}", "results.json": _results({"available": True, "reason": ""}),
             "ranks_workers.png": b"old ranks", "remote_pays.png": b"committed png",
             "remote_pays.svg": b"committed svg"}


@pytest.fixture
def figures(tmp_path, monkeypatch) -> Path:
    """A figures/ folder of our own, the runner's committed results for these tests."""
    root = tmp_path / "figures"
    root.mkdir()
    monkeypatch.setattr(RR, "FIGURES_DIR", root)
    return root


def _run_without_ray(tmp_path: Path) -> Path:
    return _record(tmp_path / "run.tmp", {f"{NAME}.executed.ipynb": b'{"new": 1}',
                                          "results.json": _results({"available": False, "reason": NO_RAY}),
                                          "ranks_workers.png": b"new ranks"})


@pytest.mark.parametrize("manifest", [False, True], ids=["record-before-manifests", "record-with-manifest"])
def test_a_run_lacking_a_committed_figure_keeps_the_committed_record_whole(figures, tmp_path, manifest):
    final = _record(figures / NAME / "cpu-2c", COMMITTED, manifest=manifest)
    before = {p.name: p.read_bytes() for p in final.iterdir()}
    tmp = _run_without_ray(tmp_path)
    with pytest.raises(ValueError) as err:   # the runner keeps this run as a failed one
        RR.install_record(tmp, final, NAME, whole=True)
    msg = str(err.value)
    assert "\n" not in msg
    assert "remote_pays.png" in msg and "remote_pays.svg" in msg     # which files
    assert "No module named 'ray'" in msg and ".[ray]" in msg        # which part did not run, and the cure
    assert {p.name: p.read_bytes() for p in final.iterdir()} == before  # nothing deleted, nothing stale mixed in
    assert (tmp / "ranks_workers.png").read_bytes() == b"new ranks"   # this run stays for a look (runs/failed/)


def test_the_file_by_file_install_into_the_committed_folder_deletes_nothing_either(figures, tmp_path):
    final = _record(figures / NAME / "cpu-2c", COMMITTED)
    with pytest.raises(ValueError):
        RR.install_record(_run_without_ray(tmp_path), final, NAME, whole=False)
    assert (final / "remote_pays.png").read_bytes() == b"committed png"
    assert (final / "ranks_workers.png").read_bytes() == b"old ranks"


def test_a_run_with_every_committed_file_replaces_the_record(figures, tmp_path):
    final = _record(figures / NAME / "cpu-2c", COMMITTED)
    new = {**COMMITTED, "remote_pays.png": b"new png", "setting_costs.json": b"{}"}
    RR.install_record(_record(tmp_path / "run.tmp", new), final, NAME, whole=True)
    assert (final / "remote_pays.png").read_bytes() == b"new png"
    assert (final / "setting_costs.json").is_file()
    assert not (tmp_path / "run.tmp").exists()


def test_a_run_outside_figures_replaces_its_own_older_record(figures, tmp_path):
    """--out-root DIR: the runner's own earlier output there is replaced as before (nothing committed)."""
    final = _record(tmp_path / "out" / NAME, COMMITTED, manifest=True)
    RR.install_record(_run_without_ray(tmp_path), final, NAME, whole=True)
    assert not (final / "remote_pays.png").exists()
    assert (final / "ranks_workers.png").read_bytes() == b"new ranks"


def test_the_runner_names_the_missing_files_in_its_failure_line(tmp_path):
    from feedlab import run

    why = RR.RecordWouldLose(f"this run of {NAME} did not make remote_pays.png")
    with mock.patch.object(run, "run_notebook", side_effect=why):
        out = run_cli("feedlab.run", "--profile", "smoke", "--only", "14", "--no-data", cwd=tmp_path)
    assert out.returncode == 1
    assert f"{NAME}.ipynb: this run of {NAME} did not make remote_pays.png" in out.stderr
    assert "failed in a cell" not in out.stderr + out.stdout


def test_make_figures_installs_every_extra_the_notebooks_use(tmp_path):
    """`make figures` on a fresh clone: the extras it installs (dry run) are all of pyproject's."""
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    out = subprocess.run(["make", "-n", "figures", f"VENV={tmp_path / 'venv'}", "PYTHON=python3"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    installed = {e for group in re.findall(r"-e (['\"])\.\[([\w,-]+)\]\1", out.stdout) for e in group[1].split(",")}
    assert "ray" in installed
    assert extras <= installed, f"make figures does not install {sorted(extras - installed)}"


# a venv's python and uv that log each call: the installer script (run with -P) runs for real, pip and uv do not
_FAKE = """#!/bin/sh
echo "$(basename "$0") $*" >> {log}
[ "$1" = -P ] && exec python3 "$@"
case "$(basename "$0") $*" in
  "uv --version") echo "uv 0.13.9";;
  "uv pip install"*) exit {uv_rc};;
  "python -m pip install"*"uv") exit {boot_rc};;
  "python -m pip install"*) exit {pip_rc};;
esac
exit 0
"""


def _fake_venv(tmp_path, uv_rc=0, pip_rc=0, boot_rc=0, with_uv=True):
    venv, log = tmp_path / "venv", tmp_path / "calls.log"
    (venv / "bin").mkdir(parents=True)
    for exe in ("python", "uv") if with_uv else ("python",):
        (venv / "bin" / exe).write_text(_FAKE.format(log=log, uv_rc=uv_rc, pip_rc=pip_rc, boot_rc=boot_rc))
        (venv / "bin" / exe).chmod(0o755)
    return venv, log


def _make(venv, target, installer=""):
    env = {**os.environ, "FEEDLAB_INSTALLER": installer}
    return subprocess.run(["make", "-s", f"VENV={venv}", "PYTHON=python3", target], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("uv_rc, installer, want", [(0, "", ["uv"]), (1, "", ["uv", "pip"]), (0, "pip", ["pip"])])
def test_make_install_uses_uv_and_pip_takes_over_a_failed_uv_step(tmp_path, uv_rc, installer, want):
    """`make install` installs through the venv's uv (with the .pyc files pip would write); a uv step that fails is
    run again by pip, said in one line; FEEDLAB_INSTALLER=pip leaves uv out."""
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    venv, log = _fake_venv(tmp_path, uv_rc=uv_rc)
    out = _make(venv, f"{venv}/.feedlab-installed", installer)
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in log.read_text().splitlines() if " install " in ln and ln.endswith("-e .[dev,fast]")]
    kinds = ["uv" if ln.startswith("uv pip install") else "pip" for ln in lines]
    assert kinds == want
    assert all("-c constraints.txt -e .[dev,fast]" in ln for ln in lines)
    assert all("--compile-bytecode" in ln for ln in lines if ln.startswith("uv"))
    assert ("uv failed" in out.stdout and "pip installs feedlab[dev,fast] instead" in out.stdout) == \
        (kinds == ["uv", "pip"])
    assert out.stdout.strip().splitlines()[-1] == f"install: {want[-1]} installed feedlab[dev,fast]"
    assert (venv / ".feedlab-installed").is_file()


def test_make_install_bootstraps_uv_and_stops_without_a_stamp_when_nothing_installs(tmp_path):
    """No uv in the venv: it is installed (a wheel, at constraints.txt's pin); where it cannot be, one line and pip.
    Both installers failing stops make with one line and no stamp, so the next make tries again."""
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    venv, log = _fake_venv(tmp_path, pip_rc=1, boot_rc=1, with_uv=False)
    out = _make(venv, f"{venv}/.feedlab-installed")
    assert out.returncode != 0
    calls = log.read_text().splitlines()
    assert "python -m pip install -q --only-binary=:all: -c constraints.txt uv" in calls
    assert f"install: uv did not install in {venv / 'bin'} (no output); " in out.stdout
    assert [ln for ln in out.stderr.splitlines() if ln.startswith("install:")] == \
        ["install: pip install feedlab[dev,fast]: no output"]
    assert "Traceback" not in out.stderr
    assert not (venv / ".feedlab-installed").exists()


def test_make_ray_and_peers_install_their_extras_with_one_line_when_they_fail(tmp_path):
    """`make ray` runs its extra through the installer (no shell quoting in between); a failed extra says so in one
    line instead of disappearing into a pipe."""
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    venv, log = _fake_venv(tmp_path, uv_rc=1, pip_rc=1)
    (venv / ".feedlab-installed").write_text("")
    os.utime(venv / ".feedlab-installed", (2e9, 2e9))   # newer than pyproject.toml: the stamp holds
    out = _make(venv, "ray")
    assert out.returncode == 0, out.stderr
    calls = log.read_text().splitlines()
    assert any(ln.startswith("uv pip install") and ln.endswith(f"-c {venv}/core-constraints.txt -e .[ray]")
               for ln in calls)
    assert "install: pip install the [ray] extra: no output" in out.stderr
    out = _make(venv, "peers")
    assert out.returncode == 0, out.stderr
    assert "install: pip install the [peers] extra: no output" in out.stderr
    assert "peers: the [peers] extra did not install; notebook 13 reports those peers unavailable" in out.stdout
