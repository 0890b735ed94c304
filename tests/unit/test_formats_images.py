"""formats.images / formats.imagefolder: a link in a folder of images that leads nowhere, loops, or leads back
into the folder is one line naming it (issue 47), never a traceback, a class of duplicates or a silent skip."""

from __future__ import annotations

import os

import numpy as np
import pytest
from leftovers import nothing_left
from PIL import Image

from feedlab import formats as F
from feedlab.formats.images import LinkError


def _photos(d, n=3):
    d.mkdir(parents=True, exist_ok=True)
    for k in range(n):
        Image.fromarray(np.full((8, 8, 3), k, np.uint8)).save(d / f"p{k}.png")
    return d


def _open(root):
    return F.open_dataset(root, F.guess_format(root))


@pytest.fixture()
def quiet(tmp_path):
    with nothing_left(tmp_path / "tmp", 60, "opening a folder of images"):
        yield


@pytest.mark.parametrize("make,name,words", [
    (lambda d: os.symlink("/nonexistent/x.png", d / "gone.png"), "gone.png", "which does not exist"),
    (lambda d: (os.symlink("b.png", d / "a.png"), os.symlink("a.png", d / "b.png")), "a.png", "a loop of links"),
    (lambda d: (d / "sub").mkdir() or os.symlink("..", d / "sub" / "up"), "sub/up", "a folder already read"),
])
def test_a_bad_link_in_a_folder_of_images_is_one_line_naming_it(tmp_path, quiet, make, name, words):
    root = _photos(tmp_path / "photos")
    make(root)
    with pytest.raises(LinkError) as err:
        _open(root)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{name} under ") and words in line, line


@pytest.mark.parametrize("make,name,words", [
    (lambda d: os.symlink(".", d / "loop"), "loop", "a folder already read"),
    (lambda d: os.symlink("../nope", d / "c"), "c", "which does not exist"),
    (lambda d: os.symlink("/nonexistent/x.png", d / "a" / "gone.png"), "a/gone.png", "which does not exist"),
])
def test_a_bad_link_in_an_imagefolder_is_one_line_naming_it_never_a_class(tmp_path, quiet, make, name, words):
    root = tmp_path / "set"
    _photos(root / "a"), _photos(root / "b")
    make(root)
    with pytest.raises(LinkError) as err:
        _open(root)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{name} under ") and words in line, line


def test_a_link_to_a_folder_elsewhere_is_followed_once(tmp_path, quiet):
    root = _photos(tmp_path / "photos")
    os.symlink(_photos(tmp_path / "more", 2), root / "more")
    ds = F.open_dataset(root, "images")
    assert len(ds) == 5 and ds[4].shape == (8, 8, 3)
