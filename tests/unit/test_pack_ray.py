"""``data_prep pack --engine ray``: the same bytes as the default engine, or one line saying why not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import data_prep
from data_prep.errors import DataPrepError

REPO = Path(__file__).resolve().parents[2]


def _small_set(tmp_path, name):
    root = tmp_path / name
    data_prep.build_sr(root, 16, 2, 20, seed=3, log=lambda _m: None)
    return root


def test_ray_engine_packs_what_the_local_engine_packs(tmp_path):
    pytest.importorskip("ray.data")
    a, b = _small_set(tmp_path, "a"), _small_set(tmp_path, "b")
    data_prep.pack(a, "npy_mmap", log=lambda _m: None)
    data_prep.pack(b, "npy_mmap", log=lambda _m: None, engine="ray")
    for f in ("lr.npy", "hr.npy"):
        assert (a / "npy_mmap" / f).read_bytes() == (b / "npy_mmap" / f).read_bytes()
    assert data_prep.verify(b, "npy_mmap", log=lambda _m: None) == {"npy_mmap": 20}


def test_ray_engine_without_ray_says_so(tmp_path, monkeypatch):
    root = _small_set(tmp_path, "c")
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(DataPrepError, match="--engine ray: unavailable:.*leave --engine out"):
        data_prep.pack(root, "npy", log=lambda _m: None, engine="ray")
    assert not (root / "npy").exists()                         # nothing half-written


def test_unknown_engine_names_the_choices(tmp_path):
    with pytest.raises(DataPrepError, match="one of local, ray"):
        data_prep.pack(tmp_path, "npy", engine="spark")


_IN_A_KERNEL = r'''
import sys, types

class ZMQInteractiveShell:            # what Ray and tqdm look for: a Jupyter kernel
    config = {"IPKernelApp": {}}
    events = types.SimpleNamespace(register=lambda *a, **k: None)

fake = types.ModuleType("IPython")
fake.get_ipython = lambda: ZMQInteractiveShell()
sys.modules["IPython"] = fake
if "--bare" in sys.argv:              # the positive control: Ray imported without available()
    import ray.data
    print("bare")
else:
    from data_prep.ray_engine import available
    print(available())
'''


def test_ray_checked_in_a_kernel_without_ipywidgets_prints_no_warning_and_no_info_line():
    """A notebook's executed record carries no raw TqdmWarning and no Ray INFO line asking for ipywidgets (14's
    record of 2026-11-26 had both): the first import of Ray, in ``available()``, keeps them out."""
    pytest.importorskip("ray.data")
    bare = subprocess.run([sys.executable, "-c", _IN_A_KERNEL, "--bare"], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    if "IProgress" not in bare.stderr and "Missing packages" not in bare.stderr:
        pytest.skip("this Ray and tqdm print nothing in the fake kernel: nothing to keep out")
    out = subprocess.run([sys.executable, "-c", _IN_A_KERNEL], capture_output=True, text=True, timeout=120,
                         cwd=REPO)
    assert out.stdout.strip() == "(True, '')", out.stderr[-500:]
    assert "IProgress" not in out.stderr and "Missing packages" not in out.stderr, out.stderr[-500:]


def test_ray_engine_gets_a_short_temp_dir_under_a_long_tmpdir(tmp_path, monkeypatch):
    """Under a long ``$TMPDIR`` ``pack --engine ray`` failed "AF_UNIX path length cannot exceed 107 bytes" (Ray's
    sockets under ``$TMPDIR/ray/session_…/sockets/``) and left ``ray/`` in $TMPDIR (attack50 X02): its
    ``ray.init`` is given Ray's /tmp/ray there (paths.ray_temp_dir), as the notebooks' Ray is."""
    import tempfile

    ray = pytest.importorskip("ray")
    from data_prep import ray_engine

    long_dir = tmp_path / ("d" * 60) / ("e" * 60)
    long_dir.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(long_dir))
    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)
    seen: dict = {}

    class Stop(Exception):
        pass

    def fake_init(**kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", fake_init)
    with pytest.raises(Stop):
        ray_engine.decode_all(tmp_path, 1, (2, 2, 3), (4, 4, 3), num_cpus=1)
    assert seen.get("_temp_dir") == "/tmp/ray", seen
    assert not list(long_dir.iterdir())
