"""feedlab.files: multiprocessing's folder (where a DataLoader worker's hand-over socket binds) under a $TMPDIR too
long for AF_UNIX's 107 bytes: made in /tmp, where a socket binds, and nothing left in $TMPDIR (the doctor said
"batch 0 of your script's DataLoader did not return" after its worker failed with "AF_UNIX path too long")."""

from __future__ import annotations

import json
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


def test_registry_entries_that_are_not_records_never_block_or_raise(tmp_path, monkeypatch):
    """attack56 B61/J3/B62: a FIFO as a registry entry blocked bench and the doctor with no deadline (open() of
    it), and one holding '[' * 100000 raised RecursionError, in _prune_registry, _registered and remove_mine (the
    last on the signal path). Each entry is now read as a regular file of at most 4 KiB: a FIFO, deep JSON, a
    list or a record of the wrong shape is no entry; the prune drops it and the others skip it."""
    import os

    from feedlab import paths
    from feedlab.errors import deadline

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(paths, "SCRATCH_DIR", tmp_path / "scratch")
    regs = files.registries()
    bad = {}
    for i, reg in enumerate(regs):
        reg.mkdir(parents=True)
        os.mkfifo(reg / f"fifo{i}")
        (reg / f"deep{i}").write_bytes(b"[" * 100000 + b"]" * 100000)
        (reg / f"list{i}").write_text("[1]")
        (reg / f"shape{i}").write_text('{"path": 5, "pid": "x"}')
        pids = {f"pid{i}_{k}": v for k, v in enumerate((10 ** 23, -10 ** 23, -1, 0))}   # attack57 J10: no process
        for name, pid in pids.items():
            (reg / name).write_text(json.dumps({"path": str(tmp_path / "gone"), "pid": pid}))
        bad[reg] = {f"fifo{i}", f"deep{i}", f"list{i}", f"shape{i}", *pids}
    work = tmp_path / "w"
    work.mkdir()
    tmp = files.tmp_sibling(work / "out.bin")   # one real entry of ours, among the bad ones
    tmp.write_text("x")
    with deadline(2, "the registry with a FIFO entry"):
        assert files._registered(tmp, os.getpid())
        assert files.remove_mine() == [tmp] and not tmp.exists()
        os.mkfifo(files.entry(work / "f.bin"))   # the entry _registered would read for f.bin: a FIFO
        assert not files._registered(work / "f.bin", os.getpid())
        files._prune_registry()
        assert files.sweep_orphans(work) == []
    for reg in regs:
        assert not bad[reg] & {p.name for p in reg.iterdir()}, list(reg.iterdir())   # pruned


#: bare ``json.load(``/``json.loads(`` under lib/ that are allowed, as ``(path, text of the line)``: each is not a read
#: of a file a user or an earlier run can put anything in (a child's stdout or argv, a string in memory), or one of
#: our own child's answer in a temporary folder this process made. A new reader of a file uses files.load_json (or
#: read_regular and a typed reader): a FIFO there must never block, deep JSON never raise a RecursionError.
JSON_READS_ALLOWED = {
    ("feedlab/doctor/script_watch.py", "apply(json.loads(ln))"): "a line of our watched child's pipe",
    ("feedlab/doctor/whatif.py", "return json.loads(answer.read_text())"): "our child's answer, in our temp folder",
    ("feedlab/trace.py", "rows.append(json.loads(line))"): "a line of a trace our own workers write",
    ("feedlab/report/compare.py", "json.loads(json.dumps(record))"): "a record in memory, round-tripped",
    ("feedlab/report/rerun.py", 'value = json.loads(executed)["metadata"]["papermill"]["duration"]'):
        "git show's bytes, RecursionError caught",
    ("feedlab/peers/remote.py", "got = json.loads(answer.read_text())"): "our child's answer, in our temp folder",
    ("feedlab/peers/child.py", "req = json.loads(sys.stdin.read())"): "the request on our child's stdin",
    ("feedlab/peers/whatif.py", "out = serve(json.loads(sys.stdin.read())"): "the request on our child's stdin",
    ("feedlab/scale/ranks.py", "rows = json.loads(out.read_text())"): "our launcher's answer, in our temp folder",
    ("feedlab/scale/ranks.py", "_cfg = json.loads(sys.argv[1])"): "our child's argv",
    ("feedlab/results.py", "display(JSON(_finite(json.loads(text)))"): "text this process just wrote",
    ("feedlab/run_record.py", 'nb = json.loads(executed.read_text(encoding="utf-8"))'):
        "the notebook papermill wrote in this run",
    ("feedlab/experiments/decode_backends.py", "return json.loads(op.read_text())"): "our child's answer",
    ("feedlab/experiments/beyond.py", 'meta = json.loads(sample["json"])'): "a sample's bytes in memory",
    ("feedlab/experiments/print_overhead.py", "got = json.loads(result_path.read_text())"): "our child's answer",
    ("feedlab/experiments/print_overhead.py", "spec = json.loads(spec_json)"): "our child's argv",
    ("feedlab/experiments/_pil_bench_worker.py", "spec = json.load(open(spec_path))"): "our parent's spec file",
}


def test_no_new_bare_json_read_of_a_file_under_lib():
    """attack56 F1: three readers (the temporaries registry, the peer venv stamp, report.rerun) read files with a
    bare json.load/loads after files.load_json existed; a FIFO blocked, deep JSON gave a traceback. Any new bare
    read under lib/ outside files.py fails here until it goes through files.load_json or is allowed above."""
    import re

    lib = Path(files.__file__).resolve().parents[1]
    for path in sorted(lib.rglob("*.py")):
        rel = path.relative_to(lib).as_posix()
        if rel == "feedlab/files.py":
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if re.search(r"\bjson\.loads?\(", line):
                key = next((k for k in JSON_READS_ALLOWED if k[0] == rel and k[1] in line), None)
                assert key is not None, f"{rel}: {line.strip()}: read the file with files.load_json, or allow it " \
                                        "in JSON_READS_ALLOWED saying why it is not a file read"
