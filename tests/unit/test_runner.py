"""The runner passes each -p key only to the notebooks that take it, says which measure
built-in data and why, and starts kernels that have no transport warning to print."""

from __future__ import annotations

import shutil
import tempfile

import nbformat
import pytest

from feedlab import run

NOTEBOOKS = {p.stem[:2]: p for p in run.list_notebooks()}


def test_data_root_declined_by_builtin_data_notebooks_with_the_reason():
    lines: list[str] = []
    chosen = [NOTEBOOKS[k] for k in ("02", "03", "04", "07")]
    plan = run.plan_parameters(chosen, {"data_root": "/d", "repeats": 2}, log=lines.append)
    assert plan[NOTEBOOKS["02"]] == {"data_root": "/d", "repeats": 2}
    for k in ("03", "04", "07"):
        assert plan[NOTEBOOKS[k]] == {"repeats": 2}
        line = next(x for x in lines if x.startswith(NOTEBOOKS[k].stem))
        assert "measures built-in data" in line and "no data_root parameter" not in line
    assert len(lines) == 3


def test_every_notebook_takes_data_root_or_says_why_not():
    for nb in NOTEBOOKS.values():
        if "data_root" not in run.notebook_parameters(nb):
            assert run.builtin_data_reason(nb) != "it has no data_root parameter", \
                f"{nb.name}: no data_root and no metadata.feedlab.builtin_data saying why"


def test_key_no_notebook_takes_is_an_error_and_partial_keys_are_named():
    with pytest.raises(SystemExit, match="no selected notebook has a parameter 'batchsizes'"):
        run.plan_parameters([NOTEBOOKS["01"]], {"batchsizes": [8]}, log=lambda _m: None)
    lines: list[str] = []
    run.plan_parameters([NOTEBOOKS["01"], NOTEBOOKS["04"]], {"batch_sizes": [8]}, log=lines.append)
    assert lines == [f"-p batch_sizes: not a parameter of {NOTEBOOKS['04'].stem} (not passed there)"]


def test_kernel_keeps_real_warnings_and_has_no_tcp_warning(tmp_path, capfd):
    import papermill as pm

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import warnings\nwarnings.warn('a real warning')\nprint('ran')")]
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    src, out = tmp_path / "a.ipynb", tmp_path / "b.ipynb"
    nbformat.write(nb, src)
    pm.execute_notebook(str(src), str(out), kernel_name="python3", progress_bar=False, **run.kernel_options())
    outputs = nbformat.read(out, as_version=4).cells[0].outputs
    assert any("a real warning" in o.get("text", "") for o in outputs)
    assert any("ran" in o.get("text", "") for o in outputs)
    assert "without encryption" not in capfd.readouterr().err


def test_executed_records_name_files_relative_to_the_repository(tmp_path):
    import json

    from feedlab import run
    from feedlab.paths import REPO_ROOT
    from feedlab.results import record_results

    nb = tmp_path / "x.executed.ipynb"
    nb.write_text(json.dumps({"metadata": {"papermill": {"input_path": f"{REPO_ROOT}/notebooks/x.ipynb"}},
                              "cells": [{"outputs": [{"text": f"data: {REPO_ROOT}/data/sr64\n"}]}]}))
    run.scrub_paths(nb)
    text = nb.read_text()
    assert str(REPO_ROOT) not in text and '"notebooks/x.ipynb"' in text and "data: data/sr64" in text
    record_results({"root": f"{REPO_ROOT}/data/sr64"}, tmp_path)
    assert json.loads((tmp_path / "results.json").read_text())["root"] == "data/sr64"


def test_main_gives_the_caller_its_environment_back(monkeypatch):
    """run.main set FEEDLAB_PROFILE for its kernels and left it set: a later --profile-less run in the same
    process (the test suite) ran as gpu and was refused on a CPU machine."""
    import os

    monkeypatch.delenv("FEEDLAB_PROFILE", raising=False)
    monkeypatch.delenv("FEEDLAB_CORES", raising=False)
    assert run.main(["--dry-run", "--profile", "gpu", "--cores", "16", "--only", "04"]) == 0
    assert "FEEDLAB_PROFILE" not in os.environ and "FEEDLAB_CORES" not in os.environ


HANG = '''
import sys
from pathlib import Path
import nbformat
from feedlab import run
tmp = Path(sys.argv[1])
nb = nbformat.v4.new_notebook()
params = nbformat.v4.new_code_cell("profile = ''\\nout_dir = ''")
params.metadata.tags = ["parameters"]
sem = ("import multiprocessing as mp, pathlib, sys, time\\n"   # a named semaphore in /dev/shm, as a DataLoader's
       "s = mp.get_context('spawn').Semaphore()\\n"
       "pathlib.Path(sys.argv[1], 'sem').write_text(s._semlock.name)\\n"
       "time.sleep(300)")
cell = (f"SEM = {sem!r}\\n"
        "import subprocess, sys, time, os\\nfrom pathlib import Path\\n"
        f"child = subprocess.Popen([sys.executable, '-c', SEM, {str(tmp)!r}], stderr=subprocess.DEVNULL)  # 04's child\\n"
        f"while not Path({str(tmp)!r}, 'sem').exists(): time.sleep(0.05)\\n"
        f"Path({str(tmp)!r}, 'pids.tmp').write_text(f'{{os.getpid()}} {{child.pid}}')\\n"
        f"os.replace(Path({str(tmp)!r}, 'pids.tmp'), Path({str(tmp)!r}, 'pids'))\\n"
        "time.sleep(300)")
nb.cells = [params, nbformat.v4.new_code_cell(cell)]
nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
path = tmp / "nb" / "99_hang.ipynb"
path.parent.mkdir(parents=True)
nbformat.write(nb, path)
run.list_notebooks = lambda: [path]


class SlowFinalisation:   # the interpreter's finalisation after the line (torch's C++ static destructors: 1-2 s
    def __del__(self, sleep=__import__("time").sleep):   # quiet, over 5 s busy), made long: not to be waited for
        sleep(30)


slow = SlowFinalisation()
sys.argv[0] = "feedlab-run"   # the console script: a command line (errors.command_line), as a user runs it
sys.exit(run.main(["--only", "99", "--no-data", "--profile", "smoke", "--out-root", str(tmp / "out")]))
'''


@pytest.mark.parametrize("sig", ["SIGHUP", "SIGTERM", "SIGINT"])
def test_a_signal_stops_the_runner_its_kernel_and_children_and_leaves_nothing(tmp_path, sig):
    """The runner died silently on SIGHUP, leaving its kernel, the kernel's child, its temporary folder and
    notebooks/kernel-ipc-N sockets. Now: one line, 128+n, and nothing left in its session, its out root,
    its TMPDIR, notebooks/ or /dev/shm (the child's named semaphore). And it ends within seconds of the signal:
    it printed its line and then sat in the interpreter's finalisation for over 5 s on a busy machine (an outer
    ``timeout -k 5`` SIGKILLed it, rc 137); the HANG runner's finalisation takes 30 s, which it must skip."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    import psutil

    from feedlab.paths import NOTEBOOKS_DIR, REPO_ROOT

    signum = getattr(signal, sig)
    # a short folder: the kernel's IPC sockets live under TMPDIR, and AF_UNIX paths stop at 107 bytes (make test-slow's
    # TMPDIR/pytest-of-…/test_…/ is already near that)
    tmpdir = Path(tempfile.mkdtemp(prefix="fl-", dir="/tmp"))
    sockets_before = set(NOTEBOOKS_DIR.glob("kernel-ipc-*"))
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "lib"), TMPDIR=str(tmpdir),
               FEEDLAB_SCRATCH=str(tmp_path / "runs"))
    p = subprocess.Popen([sys.executable, "-c", HANG, str(tmp_path)], env=env, start_new_session=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "pids").exists():
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline, "the notebook's cell never started"
            time.sleep(0.2)
        pids = [int(x) for x in (tmp_path / "pids").read_text().split()]   # the kernel and its child
        assert list((tmp_path / "out").glob("99_hang.tmp-*")), "no temporary folder while it runs"
        p.send_signal(signum)
        signalled = time.monotonic()
        out, err = p.communicate(timeout=60)
        took = time.monotonic() - signalled
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        left_in_tmpdir = sorted(x.name for x in tmpdir.iterdir()) if tmpdir.exists() else []
        shutil.rmtree(tmpdir, ignore_errors=True)   # the folder this test made
    assert p.returncode == 128 + signum, (p.returncode, err)
    # the stop's grace (3 s) at most, and the line; 1 s or less when quiet, under 2 s at a load of 6 on 2 cores
    assert took <= 8, f"{took:.1f} s from the signal to the runner's exit"
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip() and "%|" not in ln]   # tqdm's bar
    assert "Traceback" not in err and "Kernel died" not in err, err
    assert len(lines) == 1 and lines[0].startswith(f"python -m feedlab.run: stopped by {sig}"), err
    time.sleep(0.3)
    alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert alive == [], f"still running: {alive}"
    in_session = [q.pid for q in psutil.process_iter() if q.pid != p.pid and _sid(q.pid) == p.pid]
    assert in_session == [], f"left in the runner's session: {in_session}"
    assert left_in_tmpdir == [], left_in_tmpdir   # the kernel's sockets and connection file
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
    assert set(NOTEBOOKS_DIR.glob("kernel-ipc-*")) <= sockets_before
    shm = Path("/dev/shm") / f"sem.{(tmp_path / 'sem').read_text().lstrip('/')}"
    gone_by = time.monotonic() + 10   # the child's resource tracker unlinks it once the child is stopped
    while shm.exists() and time.monotonic() < gone_by:
        time.sleep(0.1)
    assert not shm.exists(), f"{shm} left in /dev/shm"


def _sid(pid: int) -> int | None:
    import os

    try:
        return os.getsid(pid)
    except OSError:
        return None


def test_a_signal_between_notebooks_is_one_line_and_the_handlers_come_back(monkeypatch, capsys, tmp_path):
    import os
    import signal

    from feedlab import paths

    monkeypatch.setattr(paths, "SCRATCH_DIR", tmp_path / "runs")
    monkeypatch.setattr(run, "run_notebook", lambda *a, **k: os.kill(os.getpid(), signal.SIGHUP))
    outer = signal.signal(signal.SIGHUP, signal.SIG_DFL)   # as in a terminal (under nohup it is ignored: left so)
    # someone else's SIGTERM handler, as ``ray.init`` leaves one: the runner leaves it alone and it is there after
    outer_term = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        before = {s: signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)}
        rc = run.main(["--no-data", "--profile", "smoke", "--only", "04", "--out-root", str(tmp_path / "o")])
        after = {s: signal.getsignal(s) for s in before}
    finally:
        signal.signal(signal.SIGHUP, outer)
        signal.signal(signal.SIGTERM, outer_term)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 128 + signal.SIGHUP and len(err) == 1, err
    # one line; between notebooks the runner's own processes are whatever is below it (in a full test run, what
    # an earlier test left below pytest: then "1 process it had started … stopped")
    assert err[0].startswith("python -m feedlab.run: stopped by SIGHUP: ") and "every record is as it was" in err[0]
    assert after == before


def test_run_kernel_watch_stops_a_daemon_the_notebook_left_outside_its_tree():
    """A process started inside ``watch`` (as the kernel and what it starts are) that escapes the tree with
    ``setsid`` and a double fork is found by the run's token and stopped when the run ends (issue 47)."""
    import os
    import subprocess
    import time

    from feedlab import procgroup, run_kernel

    with run_kernel.watch():
        out = subprocess.run(["bash", "-c", "setsid sleep 60 </dev/null >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, timeout=10).stdout
        daemon = int(out.split()[0])
        # the daemon may still be between fork and exec (its environ not yet readable): found within a deadline
        # (and for an instant within each exec, bash -> setsid -> sleep, its environ reads empty: carrying reads
        # those again, so one call that finds it is enough)
        found_by, found = time.monotonic() + 5, False
        while not found and time.monotonic() < found_by:
            found = daemon in procgroup.carrying(run_kernel._BEFORE["token"])
            time.sleep(0 if found else 0.05)
        assert found
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(daemon, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(daemon, 9)
        raise AssertionError("the escaped daemon outlived the run")
    assert procgroup.TOKENS not in os.environ or run_kernel._BEFORE["token"] is None


ADOPT = r"""
import os, subprocess, sys, time
from feedlab import run_kernel
run_kernel.adopt_orphans()
with run_kernel.watch():
    p = subprocess.Popen(["setsid", "sh", "-c", "echo $$; exec sleep 60"], env={"PATH": "/usr/bin:/bin"},
                         start_new_session=True, stdout=subprocess.PIPE, text=True)
    daemon = int(p.stdout.readline())
    p.wait(timeout=10)
    time.sleep(0.2)
    print(daemon, open(f"/proc/{daemon}/stat").read().rsplit(")", 1)[1].split()[1] == str(os.getpid()), flush=True)
time.sleep(0.3)
print(os.path.exists(f"/proc/{daemon}") and open(f"/proc/{daemon}/stat").read().rsplit(")", 1)[1].split()[0] != "Z")
"""


def test_run_kernel_watch_stops_an_orphan_with_a_cleared_environment(tmp_path):
    """Issue 47 F3: a daemon started with ``env={PATH}`` carries no token; the runner (a child subreaper on
    the command line: run_kernel.adopt_orphans) adopts it, and watch stops it when the notebook ends."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(root / "lib")}
    p = subprocess.Popen([sys.executable, "-c", ADOPT], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    lines = out.split("\n")
    daemon, adopted = lines[0].split()
    if os.path.exists(f"/proc/{daemon}"):
        os.kill(int(daemon), signal.SIGKILL)
    assert adopted == "True", out + err
    assert lines[1] == "False", "the orphan outlived the notebook's run"
    assert subprocess.run(["pgrep", "-s", str(p.pid)], capture_output=True).returncode == 1
    assert not list(tmp_path.iterdir())


def test_the_kernels_temporaries_live_in_the_runners_own_folder(tmp_path, monkeypatch):
    """Issue 47 W4: a kernel killed mid-cell left its TemporaryDirectory in $TMPDIR; its TMPDIR is now inside
    the runner's kernel folder, removed however the run ends."""
    import os
    import subprocess
    import sys
    import tempfile

    from feedlab import run_kernel

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    with pytest.raises(KeyboardInterrupt):
        with run_kernel.kernel_folder() as folder:
            assert os.environ["TMPDIR"].startswith(str(folder)) and os.environ["TEMP"] == os.environ["TMPDIR"]
            made = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.mkdtemp(prefix='feedlab_print_'))"],
                                  capture_output=True, text=True, timeout=30).stdout.strip()
            assert made.startswith(str(folder)), made
            raise KeyboardInterrupt   # a signal mid-cell
    assert os.environ["TMPDIR"] == str(tmp_path) and not folder.exists()
    assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())


def test_the_kernels_sockets_fit_under_a_long_tmpdir(tmp_path, monkeypatch):
    """Under a ``$TMPDIR`` so long that a socket in it would pass AF_UNIX's 107 bytes (make test-slow's
    ``pytest-of-…`` folders: "File name too long"), the kernel's folder is made in /tmp, where a socket binds;
    removed on the way out, ``$TMPDIR`` left as it was."""
    import os
    import socket
    import tempfile

    from feedlab import paths, run_kernel

    long_dir = tmp_path / ("d" * 60) / ("e" * 60)
    long_dir.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(long_dir))
    monkeypatch.setattr(tempfile, "tempdir", None)
    with run_kernel.kernel_folder() as folder:
        path = str(folder / "kernel-ipc-12345")
        assert len(os.fsencode(path)) <= paths.SOCKET_MAX, path
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(path)
    assert not folder.exists() and os.environ["TMPDIR"] == str(long_dir)
    assert not list(long_dir.iterdir())


def test_ray_gets_a_short_temp_dir_under_a_long_tmpdir(tmp_path, monkeypatch):
    """Ray puts its sockets under ``$TMPDIR/ray/session_…/sockets/``: under a long ``$TMPDIR`` (the CI check's
    nested test folders) ``ray.init`` failed "AF_UNIX path length cannot exceed 107 bytes" and 14 lost its Ray
    cells. There, Ray is given /tmp/ray (its own choice with no $TMPDIR); a short $TMPDIR or a RAY_TMPDIR is
    left to Ray."""
    import tempfile

    from feedlab import paths

    long_dir = tmp_path / ("d" * 60)
    long_dir.mkdir()
    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setenv("TMPDIR", str(long_dir))
    assert paths.ray_temp_dir() == "/tmp/ray"
    assert len(("/tmp/ray" + paths.RAY_SOCKET_TAIL[4:]).encode()) <= paths.SOCKET_MAX
    monkeypatch.setenv("TMPDIR", "/tmp")
    monkeypatch.setattr(tempfile, "tempdir", None)
    assert paths.ray_temp_dir() is None
    monkeypatch.setenv("TMPDIR", str(long_dir))
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setenv("RAY_TMPDIR", "/tmp/mine")
    assert paths.ray_temp_dir() is None


def test_a_signal_landing_inside_torch_s_import_stops_the_runner_in_one_line(tmp_path):
    """SIGINT a second into ``python -m feedlab.run`` landed inside ``import torch``: the runner's stop, raised
    from the signal handler there, aborted it through pybind11 ("terminate called after throwing ...", rc 134)
    or was caught inside the import and lost (the run went on to "ok", rc 0; attack50 R09). A stand-in torch
    that signals itself and swallows what is raised inside it: the runner stops after the import, in one line."""
    import os
    import signal
    import subprocess
    import sys

    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "import os, signal, time\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(0.3)\n"
        "except BaseException:   # an import that catches everything: a stop raised in here is lost\n"
        "    pass\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp),
               PYTHONPATH=os.pathsep.join([str(fake.parent), str(run.paths.REPO_ROOT / "lib"),
                                           str(run.paths.REPO_ROOT)]))
    proc = subprocess.Popen([sys.executable, "-m", "feedlab.run", "--only", "04", "--profile", "smoke", "--dry-run"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 128 + signal.SIGINT, (proc.returncode, out[-500:], err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("python -m feedlab.run: stopped by SIGINT: "), lines
    assert "plan:" not in out
    import psutil

    left = [q.pid for q in psutil.process_iter() if q.pid != proc.pid and _sid(q.pid) == proc.pid]
    assert left == [] and list(tmp.iterdir()) == []


def test_the_ok_line_names_the_executed_notebook_as_it_opens_from_here(tmp_path, monkeypatch):
    """attack53 X06: 'ok … -> smoke/04_print_overhead/04_print_overhead.executed.ipynb' named no file from the
    folder the command was typed in. Below it: relative to it; elsewhere: whole."""
    from feedlab.run import _shown

    nb = tmp_path / "runs" / "smoke" / "04_print_overhead" / "04_print_overhead.executed.ipynb"
    monkeypatch.chdir(tmp_path)
    assert _shown(nb) == "runs/smoke/04_print_overhead/04_print_overhead.executed.ipynb"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert _shown(nb) == str(nb)
