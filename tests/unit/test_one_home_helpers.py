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
