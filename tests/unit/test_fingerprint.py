"""feedlab.fingerprint: the source tree hashes never open a special file nor follow a link (attack54 F2/R29b:
an untracked link to a FIFO hung every runner command, a dry run too)."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from feedlab.fingerprint import content_hash, entry_digest, fingerprint_line, git_fields, tree_hash

DEADLINE_S = 20.0  # a regression blocks on the FIFO or reads /dev/zero for ever: fail, never hang the suite


def _within_deadline(fn, *args):
    """``fn(*args)`` in a daemon thread, failing the test if it has not returned in :data:`DEADLINE_S`."""
    box: dict = {}

    def go():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(DEADLINE_S)
    if t.is_alive():
        pytest.fail(f"{fn.__name__} still running after {DEADLINE_S} s (it opened a FIFO or read a device?)")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _repo(root: Path) -> Path:
    for args in (("init", "-q"), ("config", "user.email", "t@t"), ("config", "user.name", "t")):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    (root / "a.py").write_text("x = 1\n")
    subprocess.run(["git", "add", "a.py"], cwd=root, check=True, capture_output=True)
    subprocess.run(["git", "commit", "-qm", "one"], cwd=root, check=True, capture_output=True)
    return root


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_entry_digest_marks_a_fifo_and_hashes_links_by_their_text(tmp_path):
    os.mkfifo(tmp_path / "p.fifo")
    (tmp_path / "to_fifo").symlink_to("p.fifo")
    (tmp_path / "to_zero").symlink_to("/dev/zero")
    (tmp_path / "f.txt").write_bytes(b"abc" * 1000)
    assert _within_deadline(entry_digest, tmp_path / "p.fifo") == b"kind:fifo"
    to_fifo = _within_deadline(entry_digest, tmp_path / "to_fifo")
    to_zero = _within_deadline(entry_digest, tmp_path / "to_zero")
    assert to_fifo.startswith(b"link:") and to_zero.startswith(b"link:") and to_fifo != to_zero
    assert _within_deadline(entry_digest, Path("/dev/zero")) == b"kind:character device"
    # a regular file read in small chunks hashes as one read whole
    import hashlib
    assert entry_digest(tmp_path / "f.txt", chunk=7) == hashlib.sha256(b"abc" * 1000).digest()
    assert entry_digest(tmp_path / "gone") is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_tree_and_content_hash_return_with_untracked_fifo_links_and_dev_zero(tmp_path):
    root = _repo(tmp_path)
    before_tree, before_content = tree_hash(root), content_hash(root)
    work = root / "work"
    work.mkdir()
    os.mkfifo(work / "t01.fifo")
    (work / "t01.lnk").symlink_to("t01.fifo")     # git lists the link (not the FIFO); it used to be followed
    (work / "zero.lnk").symlink_to("/dev/zero")   # would have read without end
    tree = _within_deadline(tree_hash, root)
    content = _within_deadline(content_hash, root)
    assert tree and tree != before_tree and content and content != before_content  # the links count as code
    (work / "zero.lnk").unlink()
    (work / "zero.lnk").symlink_to("/dev/null")   # a link's target text is what it is
    assert _within_deadline(tree_hash, root) != tree
    assert _within_deadline(content_hash, root) != content


def test_sent_source_over_a_fifo_or_json_nested_too_deeply_is_none_without_a_wait(tmp_path):
    """attack55 F24/F25: `.whl/SOURCE.json` a FIFO waited with no deadline; nested too deeply, a 48-line
    RecursionError. Either is no carried source."""
    import os
    import threading

    from feedlab import fingerprint

    (tmp_path / fingerprint.SOURCE_FILE).parent.mkdir(parents=True, exist_ok=True)
    deep = tmp_path / fingerprint.SOURCE_FILE
    deep.write_text("[" * 100000 + "]" * 100000)
    assert fingerprint.sent_source(tmp_path) is None
    deep.unlink()
    os.mkfifo(deep)
    got: list = []
    t = threading.Thread(target=lambda: got.append(fingerprint.sent_source(tmp_path)), daemon=True)
    t.start()
    t.join(20)
    assert got == [None], "sent_source waited on a FIFO"


def test_a_share_of_the_cores_that_is_no_number_is_never_formatted():
    """attack55 B45: fingerprint.json's other_fraction a string gave a TypeError in busy_flag."""
    from feedlab.fingerprint import busy_flag, other_fraction

    assert other_fraction({"other_fraction": 0.3}) == 0.3
    assert other_fraction({"other_fraction": "0.3"}) is None and other_fraction({"other_fraction": 7}) is None
    assert other_fraction("x") is None and other_fraction({"other_fraction": True}) is None
    fp = {"other_load": {"busy": True, "whole_run": {"other_fraction": "lots"}}}
    assert busy_flag(fp) == " · BUSY"
    assert busy_flag({"other_load": {"busy": True, "whole_run": {"other_fraction": 0.4}}}).endswith("40% of the cores")
    assert busy_flag({"other_load": "busy"}) == ""


def test_a_large_untracked_file_is_named_by_size_mtime_and_inode_not_read_and_listed(tmp_path):
    """attack55 W6 (F23): a 3 GB untracked file made every dry run 11 s slower, silently (read whole for the tree
    hash). Past LARGE_UNTRACKED_BYTES it is named by (size, mtime_ns, inode), not its content, and the fingerprint's
    git record lists it (`untracked_large`); a change of its size or mtime still changes the hash."""
    from feedlab import fingerprint as F

    root = _repo(tmp_path)
    big = root / "work" / "big.bin"
    big.parent.mkdir()
    with open(big, "wb") as f:
        f.truncate(F.LARGE_UNTRACKED_BYTES + 1)   # sparse: no disk, no time to write
    (root / "small.py").write_text("y = 2\n")
    st = _within_deadline(F.git_state, root)
    assert st["dirty"] is True and st["untracked_large"] == ["work/big.bin"], st
    tree = st["tree"]
    before = os.stat(big)
    with open(big, "r+b") as f:   # new content, same size and mtime: not read, so the same hash
        f.write(b"changed")
    os.utime(big, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert F.tree_hash(root) == tree
    os.utime(big, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))   # touched: another hash
    assert F.tree_hash(root) != tree
    big.unlink()
    st = F.git_state(root)
    assert "untracked_large" not in st and st["tree"] != tree   # a small tree's record is as before
    assert F.entry_digest(root / "small.py", large=4).startswith(b"large:")   # past the size given
    assert F.entry_digest(root / "small.py", large=None) == F.entry_digest(root / "small.py")   # read: its content


def test_git_fields_of_the_wrong_shape_are_named_or_read_as_not_recorded():
    # attack56 B53/B54: git.commit or git.tree a number made fingerprint_line a TypeError traceback
    for git in ({"commit": 12345}, {"commit": "abcdef0123", "dirty": True, "tree": 5}, {"dirty": "yes"}, [1]):
        line = fingerprint_line({"git": git, "cpu_model": "x"})
        assert "x · " in line and "abcdef01+dirty:" not in line
        with pytest.raises(ValueError, match=r"^figures/a/fingerprint\.json: git(\.\w+)? is "):
            git_fields({"git": git}, "figures/a/fingerprint.json")
    assert git_fields({"git": {"commit": "abcdef0123", "dirty": True, "tree": "0123456789"}}, "f") == \
        ("abcdef0123", True, "0123456789")
    assert "abcdef01" in fingerprint_line({"git": {"commit": "abcdef0123", "dirty": True, "tree": "0123456789"}}) \
        and "+dirty:01234567" in fingerprint_line({"git": {"commit": "a", "dirty": True, "tree": "0123456789"}})
    assert git_fields({}, "f") == (None, False, None)
