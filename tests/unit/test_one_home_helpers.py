"""Each helper has one home (issue 35): a module uses another's public names only, and a helper
written once is the one every caller uses."""

import ast
import queue
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "lib" / "feedlab"


def _private_names_imported(path: Path) -> list[str]:
    """The ``_``-prefixed names ``path`` imports from feedlab modules (``x as _y`` of a public ``x`` is fine)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("feedlab")):
            out += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    return out


def test_the_doctor_and_the_hdf5_experiment_use_public_names_only():
    for rel in ("doctor/user.py", "doctor/script.py", "experiments/hdf5_concurrency.py"):
        assert _private_names_imported(LIB / rel) == [], rel


def test_wrap_reads_the_instruments_queue_per_stage_without_the_warm_up_call():
    from feedlab.doctor.wrap import stage_costs

    q = queue.Queue()
    for rec in [("fetch", 9.0, 9.0, 1), ("fetch", 2.0, 1.0, 1), ("fetch", 4.0, 2.0, 2), ("collate", 8.0, 4.0, 4)]:
        q.put(rec)
    costs = stage_costs(q)
    assert costs["fetch"] == ([2.0, 2.0], [1.0, 1.0])       # the first call (a warm-up) left out
    assert costs["collate"] == ([2.0], [1.0])               # the only call kept


# ---------------------------------------------------------------- one atomic write


def test_a_trace_that_cannot_be_written_leaves_no_temporary(tmp_path):
    """trace.Tracer.write had its own rename, which left ``.<name>.tmp-<pid>`` behind when the
    JSON failed halfway; it is results.atomic_write now."""
    import pytest

    from feedlab.trace import Tracer

    out = tmp_path / "out"
    out.mkdir()
    with Tracer(tmp_path / "spans") as tr:
        tr.metadata["bad"] = object()          # not JSON
        with pytest.raises(TypeError):
            tr.write(out / "trace.json")
    assert list(out.iterdir()) == []


def test_text_is_written_as_utf8_whatever_the_locale(tmp_path):
    """atomic_write opened text in the locale's encoding: under an ASCII locale a report with
    "µs" failed (UnicodeEncodeError) and under Latin-1 it wrote other bytes."""
    import os
    import subprocess
    import sys

    path = tmp_path / "r.txt"
    code = ("import sys; from pathlib import Path; from feedlab.results import atomic_write; "
            "atomic_write(Path(sys.argv[1]), '3.5 \\u00b5s/sample')")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    r = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-500:]
    assert path.read_bytes() == "3.5 µs/sample".encode("utf-8")
    assert [p.name for p in tmp_path.iterdir()] == ["r.txt"]


def test_a_store_manifest_is_written_by_the_one_write_with_a_registered_temporary(tmp_path, monkeypatch):
    import json

    from feedlab import results
    from feedlab.formats import _io

    seen = []
    real = results.atomic_write
    monkeypatch.setattr(_io, "atomic_write", lambda p, d, tmp=None: (seen.append(tmp), real(p, d, tmp=tmp)))
    _io.write_json_atomic(tmp_path / "manifest.json", {"b": 1, "a": "µ"})
    assert json.loads((tmp_path / "manifest.json").read_text()) == {"a": "µ", "b": 1}
    assert (tmp_path / "manifest.json").read_text() == '{\n  "a": "\\u00b5",\n  "b": 1\n}\n'
    assert seen and seen[0].name.startswith("manifest.json.tmp-") and not seen[0].exists()
    assert not _io._entry(seen[0]).exists()                  # taken off the registry once in place


def test_the_peers_read_memory_and_sync_through_the_ground_floor():
    from feedlab import monitor
    from feedlab.peers import measure

    assert measure.RssPeak is monitor.RssPeak
    with monitor.RssPeak(interval=0.01) as rss:
        pass
    assert rss.peak() > 0
    assert _private_names_imported(LIB / "peers" / "measure.py") == []
    assert _private_names_imported(LIB / "doctor" / "stepside.py") == []


def test_checksums_added_to_an_old_set_go_through_the_streamed_atomic_write(tmp_path):
    import data_prep
    from feedlab.formats._common import CHECKSUMS

    root = tmp_path / "sr"
    data_prep.build_sr(root, 8, 2, 4, seed=0, log=lambda _m: None)
    want = (root / CHECKSUMS).read_bytes()
    before = sorted(p.name for p in root.iterdir())
    (root / CHECKSUMS).unlink()
    data_prep.add_checksums(root, log=lambda _m: None)
    assert (root / CHECKSUMS).read_bytes() == want
    assert sorted(p.name for p in root.iterdir()) == before      # no temporary left beside it
