"""feedlab.files: multiprocessing's folder (where a DataLoader worker's hand-over socket binds) under a $TMPDIR too
long for AF_UNIX's 107 bytes: made in /tmp, where a socket binds, and nothing left in $TMPDIR (the doctor said
"batch 0 of your script's DataLoader did not return" after its worker failed with "AF_UNIX path too long")."""

from __future__ import annotations

import multiprocessing.connection
import multiprocessing.process
import tempfile
from pathlib import Path

from feedlab import files


def test_multiprocessing_sockets_fit_under_a_long_tmpdir(tmp_path, monkeypatch):
    long_dir = tmp_path / ("d" * 60) / ("e" * 60)
    long_dir.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(long_dir))
    monkeypatch.setattr(tempfile, "tempdir", None)
    config = multiprocessing.process.current_process()._config
    old = config.pop("tempdir", None)   # as in a process that has made none yet; put back below
    try:
        folder = files.mp_sockets_fit()
        assert folder is not None and folder.parent == Path("/tmp"), folder
        assert folder.name.startswith("pymp-feedlab.tmp-"), folder   # a registered temporary: swept if killed
        with multiprocessing.connection.Listener(family="AF_UNIX") as listener:   # where a worker's hand-over binds
            assert Path(listener.address).parent == folder
        assert files.mp_temp_dir() == folder   # the watched run's folder is the same one
        files.remove(folder)
        assert not folder.exists() and list(long_dir.iterdir()) == []
        # where the sockets fit, nothing is made: multiprocessing makes its own folder as ever
        config.pop("tempdir", None)
        monkeypatch.setenv("TMPDIR", "/tmp")   # short (pytest's tmp_path may itself be near the limit)
        monkeypatch.setattr(tempfile, "tempdir", None)
        assert files.mp_sockets_fit() is None and "tempdir" not in config
    finally:
        config.pop("tempdir", None)
        if old is not None:
            config["tempdir"] = old


def test_a_worker_killed_by_a_group_signal_leaves_no_multiprocessing_folder(tmp_path):
    """A command's DataLoader workers made each their own ``pymp-*`` folder (their batch hand-over listener) that
    only their own clean exit removed: a signal sent to the whole group (``kill -- -PGID``, a terminal's hang-up)
    killed them and left the folders, sockets inside, in $TMPDIR (attack51 N11b: bench --peer torch_stock).
    :func:`files.mp_folder_owned`, called by the command before any worker forks: the workers share its folder,
    and the command's exit removes it."""
    import os
    import subprocess
    import sys
    import textwrap

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = textwrap.dedent("""
        import multiprocessing as mp, multiprocessing.util as u, os, signal, sys, time
        from feedlab import files
        owned = files.mp_folder_owned()
        def worker(q):
            q.put(u.get_temp_dir())                   # where a worker's listener binds
            time.sleep(30)
        q = mp.get_context("fork").Queue()
        p = mp.get_context("fork").Process(target=worker, args=(q,))
        p.start()
        seen = q.get(timeout=20)
        os.kill(p.pid, signal.SIGTERM)                # killed as a group signal kills it: no clean exit
        p.join(timeout=20)
        print(seen == str(owned), flush=True)
    """)
    env = {**os.environ, "TMPDIR": str(tmp)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr[-1500:]
    assert list(tmp.iterdir()) == [], list(tmp.iterdir())


def test_load_json_names_the_file_for_json_it_cannot_take(tmp_path):
    """attack54 B22/B25/B24/R31/D17: '[' * 100000 raised RecursionError, not a ValueError, and escaped every caller
    as a traceback. load_json turns it, bad UTF-8 and bad JSON into one ValueError naming the file."""
    import pytest

    good = tmp_path / "good.json"
    good.write_text('{"a": [1, 2]}')
    assert files.load_json(good) == {"a": [1, 2]}
    for name, data, reason in (("deep.json", b"[" * 100000 + b"]" * 100000, "nested too deeply to read"),
                               ("cut.json", b'{"a": ', "Expecting value"),
                               ("latin.json", b'{"a": "\xff"}', "can't decode byte 0xff")):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ValueError) as exc:
            files.load_json(tmp_path / name, "its manifest")
        assert str(exc.value).startswith(f"{tmp_path / name}: its manifest is not valid JSON (") and \
            reason in exc.value.reason and "\n" not in str(exc.value)
