"""results.atomic_write and files.replace_path: a device, FIFO or socket at the destination is refused in one line
and left as it is (issue 47's attack: `bench --trace /dev/full` renamed a regular file over the device node)."""

from __future__ import annotations

import os
import stat

import pytest
from leftovers import nothing_left

from feedlab.files import replace_path, tmp_sibling
from feedlab.results import atomic_write


def test_atomic_write_over_a_fifo_leaves_it_a_fifo_and_writes_nothing(tmp_path):
    dest = tmp_path / "out" / "trace.json"
    dest.parent.mkdir()
    os.mkfifo(dest)
    with nothing_left(tmp_path / "tmp", 30, "an atomic write onto a FIFO"):
        with pytest.raises(OSError) as err:
            atomic_write(dest, "{}")
    assert stat.S_ISFIFO(os.lstat(dest).st_mode)
    assert os.listdir(dest.parent) == ["trace.json"]   # no temporary beside it
    line = str(err.value)
    assert "\n" not in line and "is a FIFO, not a regular file" in line and "nothing written" in line, line


def test_replace_path_onto_a_fifo_leaves_it_and_removes_the_temporary(tmp_path):
    dest = tmp_path / "out.tar"
    os.mkfifo(dest)
    tmp = tmp_sibling(dest)
    tmp.write_bytes(b"tar")
    with nothing_left(tmp_path / "tmp", 30, "a replace onto a FIFO"):
        with pytest.raises(OSError, match="is a FIFO, not a regular file"):
            replace_path(tmp, dest)
    assert stat.S_ISFIFO(os.lstat(dest).st_mode) and not tmp.exists()


def test_atomic_write_still_replaces_a_regular_file(tmp_path):
    dest = tmp_path / "r.json"
    dest.write_text("old")
    atomic_write(dest, "new")
    assert dest.read_text() == "new" and sorted(os.listdir(tmp_path)) == ["r.json"]
