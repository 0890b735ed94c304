"""``data_prep pack --engine ray``: the same bytes as the default engine, or one line saying why not."""

from __future__ import annotations

import sys

import pytest

import data_prep
from data_prep.errors import DataPrepError


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
