"""data_root in notebooks: the user's SR set gets the formats it lacks; anything else gets one line."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import pytest

from feedlab.notebook_data import DataRootError, ensure_data


def _P(root, notebook="02_lmdb_vs_png"):
    return SimpleNamespace(data_root=root, user_data=True, notebook=notebook, patch=64, scale=2,
                           dataset_count=16)


@pytest.fixture()
def user_set(tmp_path):
    import data_prep

    root = tmp_path / "mine"
    data_prep.build_sr(root, 16, 2, 12, seed=1, log=lambda _m: None)
    return root


def _digest(root):
    h = hashlib.sha256()
    for p in sorted((root / "hr").glob("*.png")) + sorted((root / "lr").glob("*.png")):
        h.update(p.read_bytes())
    return h.hexdigest()


def test_user_set_gets_missing_formats_packed_and_keeps_its_pngs(user_set):
    from feedlab.formats import open_dataset, read_manifest

    before = _digest(user_set)
    lines = []
    ensure_data(_P(user_set), ["lmdb", "npy_mmap"], log=lines.append)
    assert {"lmdb", "npy_mmap"} <= set(read_manifest(user_set)["formats"])
    assert len(open_dataset(user_set, "lmdb")) == 12
    assert _digest(user_set) == before
    assert any("packing lmdb, npy_mmap" in line for line in lines)
    lines.clear()
    ensure_data(_P(user_set), ["lmdb"], log=lines.append)  # already there: nothing packed
    assert not any("packing" in line for line in lines)


def test_flat_folder_of_images_says_what_to_run(tmp_path):
    import numpy as np
    from PIL import Image

    photos = tmp_path / "photos"
    photos.mkdir()
    for i in range(3):
        Image.fromarray(np.full((40, 40, 3), i * 50, np.uint8)).save(photos / f"{i}.jpg")
    with pytest.raises(DataRootError) as err:
        ensure_data(_P(photos), ["lmdb"])
    msg = str(err.value)
    assert "\n" not in msg and "folder of images" in msg and "python -m data_prep sr" in msg
    assert f"--source {photos}" in msg


@pytest.mark.parametrize("kind", ["missing", "empty", "file"])
def test_not_a_set_is_one_line(tmp_path, kind):
    root = tmp_path / "x"
    if kind == "empty":
        root.mkdir()
    elif kind == "file":
        root.write_text("hi")
    with pytest.raises(DataRootError) as err:
        ensure_data(_P(root), ())
    assert "\n" not in str(err.value) and f"data_root={root}" in str(err.value)


def test_unknown_format_names_the_notebook(user_set):
    with pytest.raises(DataRootError, match="02_lmdb_vs_png: unknown format 'tiff'"):
        ensure_data(_P(user_set), ["tiff"])
