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


# ---------------------------------------------------------------- the doctor's report: one typed builder

# what `python -m feedlab.doctor --json` printed for the fixed report below before the report was typed
USER_JSON = (
    '{"kind": "user", "batch_size": 4, "num_workers": 0, "device": "cpu", "cuda": false, "cores": 2, "eff'
    'ective_cores": 2.0, "stages": [{"stage": "fetch", "variant": "your dataset\'s __getitem__", "measurab'
    'le": true, "note": "", "s_per_sample": 0.002, "s_per_sample_q25": 0.0015, "s_per_sample_q75": 0.0025'
    ', "cpu_s_per_sample": 0.001, "samples_per_s_per_core": 500.0, "repeats": 3}, {"stage": "decode", "va'
    'riant": "inside fetch", "measurable": true, "note": "not measured: inside your fetch", "s_per_sample'
    '": 0.0, "s_per_sample_q25": 0.0, "s_per_sample_q75": 0.0, "cpu_s_per_sample": 0.0, "samples_per_s_pe'
    'r_core": null, "repeats": 1}, {"stage": "transform", "variant": "inside fetch", "measurable": true, '
    '"note": "not measured: inside your fetch", "s_per_sample": 0.0, "s_per_sample_q25": 0.0, "s_per_samp'
    'le_q75": 0.0, "cpu_s_per_sample": 0.0, "samples_per_s_per_core": null, "repeats": 1}, {"stage": "col'
    'late", "variant": "your collate_fn (batch 4)", "measurable": true, "note": "", "s_per_sample": 0.000'
    '1, "s_per_sample_q25": 0.0001, "s_per_sample_q75": 0.0001, "cpu_s_per_sample": 0.0001, "samples_per_'
    's_per_core": 10000.0, "repeats": 1}, {"stage": "startup", "variant": "1 fresh worker(s) to a first b'
    'atch", "measurable": true, "note": "seconds, not per sample", "s_per_sample": 0.05, "s_per_sample_q2'
    '5": 0.05, "s_per_sample_q75": 0.05, "cpu_s_per_sample": 0.0, "samples_per_s_per_core": 20.0, "repeat'
    's": 1}, {"stage": "h2d", "variant": "batch to cpu, 1 thread(s)", "measurable": true, "note": "", "s_'
    'per_sample": 1e-06, "s_per_sample_q25": 1e-06, "s_per_sample_q75": 1e-06, "cpu_s_per_sample": 1e-06,'
    ' "samples_per_s_per_core": 1000000.0, "repeats": 1}, {"stage": "model", "variant": "your step, 1 thr'
    'ead(s)", "measurable": true, "note": "", "s_per_sample": 0.0005, "s_per_sample_q25": 0.0005, "s_per_'
    'sample_q75": 0.0005, "cpu_s_per_sample": 0.0005, "samples_per_s_per_core": 2000.0, "repeats": 1}], "'
    'end_to_end": [{"num_workers": 0, "predicted_samples_per_s": 384.46751249519417, "bound_stage": "read'
    '", "samples_per_s": 450.0, "error": -0.14562775001067962}, {"num_workers": 1, "predicted_samples_per'
    '_s": 476.1904761904762, "bound_stage": "read"}], "measured_samples_per_s": 450.0, "predicted_samples'
    '_per_s": 384.46751249519417, "bound_stage": "read", "verdict": "data-bound", "binding_term": "serial'
    ' (num_workers=0: every stage in the main process)", "advice": [{"setting": "num_workers", "value": 1'
    ', "config": {"format": "user", "decode": "user", "transform": "none", "collate": "user", "batch_size'
    '": 4, "num_workers": 1, "pin_memory": false, "prefetch_factor": null, "persistent_workers": false, "'
    'device": "cpu", "model": "none", "loader": "dataloader"}, "predicted_samples_per_s": 476.19047619047'
    '62, "expected_gain": 1.2385714285714287, "bound_stage_after": "read", "why": "read bounds it; 1 work'
    'ers on 2.0 effective cores build batches in parallel"}], "repeats": 3, "batches": 8, "notes": ["a no'
    'te"], "config": {"format": "user", "decode": "user", "transform": "none", "collate": "user", "batch_'
    'size": 4, "num_workers": 0, "pin_memory": false, "prefetch_factor": null, "persistent_workers": fals'
    'e, "device": "cpu", "model": "none", "loader": "dataloader"}, "headroom": 0.23798191337458355}'
)


def _fake_user_report() -> dict:
    from feedlab import pipeline as P
    from feedlab.doctor.costs import CostTable, Machine, Stage
    from feedlab.doctor.user import _report

    m = Machine(2, 2.0)
    t = CostTable(m)
    t[("read", "user", "user")] = Stage("fetch", "your dataset's __getitem__", [1e-3, 2e-3, 3e-3], [1e-3] * 3)
    t[("decode", "user", "user")] = Stage("decode", "inside fetch", [0.0], [0.0], note="not measured: inside your fetch")
    t[("transform", "user", "user")] = Stage("transform", "inside fetch", [0.0], [0.0],
                                             note="not measured: inside your fetch")
    t[("collate", "user", 4)] = Stage("collate", "your collate_fn (batch 4)", [1e-4], [1e-4])
    t[("startup", 1)] = Stage("startup", "1 fresh worker(s) to a first batch", [0.05], [0.0],
                              note="seconds, not per sample")
    t[("h2d", "user", 4, False, 1)] = Stage("h2d", "batch to cpu, 1 thread(s)", [1e-6], [1e-6])
    t[("model", 4, 1)] = Stage("model", "your step, 1 thread(s)", [5e-4], [5e-4])
    spec = P.PipelineSpec(format="user", decode="user", collate="user", batch_size=4, num_workers=0, device="cpu")
    return _report(t, spec, m, 1, 450.0, 0, 4, "cpu", ["a note"], 3, 8)


def test_the_doctors_json_is_byte_for_byte_what_users_read_before():
    from feedlab.doctor.report import json_default
    from feedlab.errors import strict_json

    assert strict_json(_fake_user_report(), default=json_default) == USER_JSON


def test_a_report_is_built_once_in_its_kinds_key_order_and_refuses_a_key_out_of_place():
    import pytest

    from feedlab.doctor.report import REPORT_KEYS, Report

    pred = {"predicted_samples_per_s": 100.0, "verdict": "data-bound", "bound_stage": "decode",
            "binding_term": "worker CPU", "efficiency": 0.5}            # what the report does not carry is left out
    extra = {"data": "data/sr", "format": "png", "capacity": {"1": 1.0}, "speed_one": 1.0, "model": "none",
             "calibration": {}, "refuted": [], "shm": {}, "warmup": 1}
    rep = Report("data", "cpu", False, 2, 2.0, 64, 1, {"format": "png"}, [], [], pred, 90.0, [], [], 3, None, extra)
    d = rep.as_dict()
    assert tuple(d) == REPORT_KEYS["data"]
    assert (d["verdict"], d["bound_stage"], d["measured_samples_per_s"]) == ("data-bound", "decode", 90.0)
    assert Report("data", "cpu", False, 2, 2.0, 64, 1, {}, [], [], None, None, [], [], 3, None,
                  extra).as_dict()["verdict"] is None
    with pytest.raises(ValueError, match="warmup"):
        Report("data", "cpu", False, 2, 2.0, 64, 1, {}, [], [], pred, None, [], [], 3, None,
               {k: v for k, v in extra.items() if k != "warmup"}).as_dict()


# the runner's records still import them lazily from formats._io (issue 47-A moves those imports to the top, onto files)
FILES_PENDING: set[str] = set()
FILE_HELPERS = {"tmp_sibling", "release", "replace_path", "remove", "_remove", "sweep_orphans", "open_regular",
                "read_regular", "check_regular_tree", "max_file_bytes", "kind_of", "_kind", "current_umask"}


def test_the_file_helpers_have_one_public_home_on_the_ground_floor():
    """``files`` holds the helpers behind the atomic write (issue 47): every room outside formats imports them
    from there, never from the private ``formats._io`` / ``formats._common`` (before: five rooms did)."""
    import feedlab.files as files
    from feedlab.formats import _common, _io

    repo = LIB.parents[1]
    bad = []
    for p in sorted([*LIB.rglob("*.py"), *(repo / "data_prep").rglob("*.py")]):
        if p.name in FILES_PENDING or p.name in ("_io.py", "_common.py"):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith(("._io", "._common")) \
                    and "peers" not in (node.module or "") and not (node.level and p.parent.name == "peers"):
                hit = sorted(FILE_HELPERS & {a.name for a in node.names})
                if hit:
                    bad.append(f"{p.relative_to(repo)}:{node.lineno} {', '.join(hit)}")
    assert not bad, "file helpers imported from formats' private modules: " + "; ".join(bad)
    for name in ("tmp_sibling", "replace_path", "sweep_orphans", "open_regular", "release"):
        assert getattr(_io, name) is getattr(files, name) is getattr(_common, name)   # one helper, re-exported
    assert _io._remove is files.remove and _common._remove is files.remove
