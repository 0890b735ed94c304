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
