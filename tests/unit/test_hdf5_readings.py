"""08_hdf5_concurrency's reading, title and payload (feedlab.experiments._hdf5_readings), on tables
that hdf5_concurrency.tally makes from synthetic per-epoch checks: no loader runs here."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from feedlab.experiments import _hdf5_readings as R
from feedlab.experiments import hdf5_concurrency as H
from feedlab.report import claims as C

V = {"h5py": "3.16.0", "hdf5": "2.0.0", "h5py_info": "Summary of the h5py configuration ...",
     "lmdb_py": "1.6.2", "lmdb_lib": "0.9.31", "torch": "2.5.0", "default_start_method": "fork",
     "start_methods": ["fork", "spawn", "forkserver"]}
N = 40  # samples per epoch
CPU = {"cuda_available": False, "gpus": [], "cpu_usable": 2, "cpu_logical": 2}


def check(reader, method="fork", workers=2, epoch=0, wrong=0, missing=0, error=""):
    """One row as hdf5_concurrency.run appends it to ``checks``."""
    parent = H.READERS[reader][1]
    return {"reader": reader, "format": H.READERS[reader][0], "opened_in_parent": parent,
            "start_method": method, "num_workers": workers, "epoch": epoch, "expected": N,
            "delivered": N - missing, "right": N - wrong - missing, "wrong": wrong, "missing": missing,
            "duplicated": 0, "error": error, "wrong_indices": [], "seconds": 0.1}


def clean_fork():
    return [check(r, workers=w, epoch=e) for r in ("hdf5_parent", "hdf5_per_worker", "lmdb_parent",
                                                   "lmdb_per_worker") for w in (2, 3) for e in (0, 1)]


def P(**kw):
    base = dict(profile="smoke", samples=N, epochs=2, worker_counts=[2, 3],
                readers=["hdf5_parent", "hdf5_per_worker", "lmdb_parent", "lmdb_per_worker"], start_methods=["fork"])
    return SimpleNamespace(**{**base, **kw})


PICKLED = {"hdf5_parent": "TypeError: h5py objects cannot be pickled", "hdf5_per_worker": "ok"}


def test_clean_fork_run_says_the_corruption_did_not_reproduce():
    tab = H.tally(clean_fork())
    lines = R.readings(tab, V)
    text = "\n".join(lines)
    assert lines[0] == "HDF5 2.0.0 through h5py 3.16.0; py-lmdb 1.6.2 (LMDB 0.9.31)."
    assert "corruption did NOT reproduce" in text and "returned wrong data or failed" not in text
    assert "Per-worker opening (the fix): 4 of 4 settings returned every sample right." in lines
    assert "spawn workers were not started in this profile" in text
    assert "spawn + " not in text
    per = lines[lines.index("Per setting:") + 1:]
    assert len(per) == len(tab) == 8
    assert per[0] == f"  {'hdf5_parent':24s} fork   2 workers, 2 epochs: every sample right"


def test_corruption_under_fork_names_the_settings_and_counts():
    checks = clean_fork()
    checks[0] = check("hdf5_parent", workers=2, epoch=0, wrong=3)          # silent corruption
    checks[2] = check("hdf5_parent", workers=3, epoch=0, missing=5, error="OSError: bad read")
    tab = H.tally(checks)
    lines = R.readings(tab, V)
    text = "\n".join(lines)
    assert "did NOT reproduce" not in text
    assert ("Under fork, 2 parent-opened setting(s) returned wrong data or failed: hdf5_parent/2w, hdf5_parent/3w"
            in lines)
    assert "Per-worker opening (the fix): 4 of 4 settings" in text
    assert f"  {'hdf5_parent':24s} fork   2 workers, 2 epochs: 3 wrong, 0 missing of 80" in lines
    assert f"  {'hdf5_parent':24s} fork   3 workers, 2 epochs: 0 wrong, 5 missing of 80; raised OSError: bad read" \
        in lines


def test_state_strings():
    tab = H.tally([check("lmdb_parent"), check("lmdb_parent", workers=3, wrong=2, missing=1),
                   check("lmdb_parent", workers=4, missing=N, error="lmdb.Error: env already open")])
    states = [R.state(r) for _, r in tab.iterrows()]
    assert states == ["every sample right", "2 wrong, 1 missing of 40",
                      "0 wrong, 40 missing of 40; raised lmdb.Error: env already open"]


def test_naive_reopen_and_spawn_lines():
    err = "lmdb.Error: /x: environment already open in this process"
    checks = [check("lmdb_reopen_naive", "fork", 2, missing=30, error=err), check("lmdb_reopen_naive", "fork", 3),
              check("lmdb_reopen_naive", "spawn", 2),
              check("hdf5_parent", "spawn", 2, missing=N, error="TypeError: h5py objects cannot be pickled"),
              check("lmdb_per_worker", "spawn", 2), check("lmdb_parent", "spawn", 2)]
    lines = R.readings(H.tally(checks), V)
    assert (f"A per-worker LMDB reopen that leaves the inherited env open, fork: 30 of 40 samples missing over "
            f"1 setting(s); {err}") in lines
    assert "A per-worker LMDB reopen that leaves the inherited env open, spawn: every sample right" in lines
    assert "spawn + hdf5_parent: TypeError: h5py objects cannot be pickled" in lines
    assert "spawn + lmdb_parent: every sample right" in lines
    assert not any("spawn workers were not started" in s for s in lines)
    # the naive reopen is not the fix: only lmdb_per_worker counts as per-worker opening
    assert "Per-worker opening (the fix): 1 of 1 settings returned every sample right." in lines
    # fork ran, but only the naive reopen: nothing is said of parent-opened handles under fork
    assert not any(s.startswith("Under fork") for s in lines)
    pay = R.payload(P(), H.tally(checks), V, {}, False)
    assert pay["parent_fork_corrupted"] is None and pay["per_worker_all_right"] is True


def test_empty_table_is_said_not_raised():
    import pandas as pd

    assert R.readings(pd.DataFrame(), V)[-1] == "No setting ran: nothing to read."
    pay = R.payload(P(), pd.DataFrame(), V, {}, False)
    assert pay["settings"] == {} and pay["per_worker_all_right"] is None and pay["parent_fork_corrupted"] is None


def test_title_states_counts_and_versions():
    tab = H.tally(clean_fork())
    t = R.title(tab, 2, N, V)
    head, tail = t.split("\n")
    assert head == "fork + a handle opened in the parent: 0 of 4 setting(s) wrong; opened per worker: 4 of 4 right"
    assert tail.startswith("2 epoch(s) × 40 samples per setting; h5py 3.16.0 / HDF5 2.0.0, py-lmdb 1.6.2")
    assert H.title is R.title and H.readings is R.readings and H.payload is R.payload  # re-exported


@pytest.mark.parametrize("corrupt", [False, True])
def test_payload_keys_types_and_json(corrupt):
    checks = clean_fork()
    if corrupt:
        checks[0] = check("hdf5_parent", workers=2, epoch=0, wrong=3)
    tab = H.tally(checks)
    pay = R.payload(P(), tab, V, PICKLED, False)
    assert set(pay) == {"notebook", "profile", "samples", "epochs", "worker_counts", "readers", "start_methods",
                        "pickle_for_spawn", "versions", "settings", "verify_checksums", "per_worker_all_right",
                        "parent_fork_corrupted"}
    assert pay["notebook"] == "08_hdf5_concurrency" and "h5py_info" not in pay["versions"]
    assert pay["versions"]["hdf5"] == "2.0.0" and pay["pickle_for_spawn"] == PICKLED
    assert pay["verify_checksums"] is False and pay["per_worker_all_right"] is True
    assert pay["parent_fork_corrupted"] is corrupt
    s = pay["settings"]["hdf5_parent/fork/w2"]
    assert set(s) == {"right", "wrong", "missing", "expected", "raised", "error"}
    assert all(type(s[k]) is int for k in ("right", "wrong", "missing", "expected", "raised"))
    assert s["wrong"] == (3 if corrupt else 0) and s["expected"] == 2 * N and s["error"] == ""
    assert len(pay["settings"]) == len(tab)
    assert json.loads(json.dumps(pay)) == pay  # plain types only


def test_per_worker_failure_and_no_fork_are_told_apart():
    checks = [check("hdf5_per_worker", "spawn", 2, missing=4, error="OSError: x"), check("hdf5_parent", "spawn", 2)]
    pay = R.payload(P(start_methods=["spawn"]), H.tally(checks), V, {}, True)
    assert pay["per_worker_all_right"] is False
    assert pay["parent_fork_corrupted"] is None  # no fork setting ran: not "False"
    assert pay["verify_checksums"] is True


@pytest.mark.parametrize("corrupt", [False, True])
def test_the_claims_ledger_reads_the_payload(corrupt):
    checks = clean_fork() + [check("hdf5_chunked_parent", workers=2)]
    if corrupt:
        checks[0] = check("hdf5_parent", workers=2, epoch=0, wrong=3)
    pay = R.payload(P(profile="quick"), H.tally(checks), V, PICKLED, False)  # smoke is not judged
    for cid in ("004-hdf5-wrong-labels", "000-hdf5-parallel"):
        v = C.judge(C.BY_ID[cid], C.Run(pay, fingerprint=CPU))
        assert v.status == (C.REPRODUCED if corrupt else C.NOT_REPRODUCED), (cid, v)


def test_notebook_reads_through_the_library():
    from feedlab.paths import NOTEBOOKS_DIR

    nb = json.loads((NOTEBOOKS_DIR / "08_hdf5_concurrency.ipynb").read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "\ndef " not in f"\n{code}" and "payload = {" not in code and ".iterrows()" not in code
    assert "H.readings(tab, V)" in code and "H.payload(" in code and "H.title(" in code
