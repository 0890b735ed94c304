"""A peer in its own venv, measured by feedlab's own code: the subprocess protocol.

The parent (:func:`feedlab.peers.measure.run_peer`, in feedlab's venv) writes one JSON
request — the peer, the source (kind, root, sample limit), the work folder and every
measurement argument — to the child's standard input and starts

    <peer venv>/bin/python -m feedlab.peers.child <answer.json>

with ``PYTHONPATH`` set to this checkout's ``lib`` and ``FEEDLAB_PEER_IN_VENV=1`` (so the
child measures in-process and does not hand on again). The child (:mod:`feedlab.peers.child`) rebuilds the same
:class:`~feedlab.peers.base.Source`, runs the same :func:`~feedlab.peers.measure.run_peer`
(conversion, output checksums, timed epochs) and writes ``{"rows": [...], "info": {...},
"interpreter": ..., "python": ..., "versions": {...}}`` to the answer file, atomically.
The parent turns the rows back into :class:`~feedlab.results.Results` and records the
interpreter in the info. A child that crashes, times out or writes no answer leaves the
peer *unavailable* with the last line of its error.

The child runs in its own process group, killed whole (the peer's own workers and helpers too)
at ``timeout`` seconds, after ``stall_s`` seconds without a sign of progress (:func:`~feedlab.peers._process.beat`:
a batch, a phase begun; ``bench --peer --timeout S``), or when the caller is interrupted.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from feedlab.paths import env_number
from feedlab.results import Results

from . import get
from ._process import BEAT, IN_VENV, Stalled, beat, check_imports, in_venv, run_group  # noqa: F401  (re-exported)

# one peer on one data set, every worker count: a bound against a hung child, not a budget (the full
# profile's slowest peers take tens of minutes); FEEDLAB_PEER_TIMEOUT_S sets another
TIMEOUT_S = 4 * 3600.0


def timeout_s() -> float:
    """``$FEEDLAB_PEER_TIMEOUT_S`` (seconds, > 0), else :data:`TIMEOUT_S`; a bad value is one line naming it."""
    return env_number("FEEDLAB_PEER_TIMEOUT_S", TIMEOUT_S, float, low=1e-3, unit="seconds")


def request(name: str, source, work_root, batch_size: int, worker_counts, size: int, warmup: int, repeats: int,
            cold: bool, device, seed: int, check: bool, window: dict | None = None, augment: bool = True) -> dict:
    return {"peer": name, "kind": source.kind, "root": str(Path(source.root).resolve()), "limit": source.limit,
            "work_root": str(Path(work_root).resolve()), "batch_size": int(batch_size),
            "worker_counts": [int(w) for w in worker_counts], "size": int(size), "warmup": int(warmup),
            "repeats": int(repeats), "cold": bool(cold), "device": str(device), "seed": int(seed),
            "check": bool(check), "window": dict(window or {}), "augment": bool(augment)}


def _lib_dir() -> Path:
    return Path(__file__).resolve().parents[2]


def run(python, req: dict, timeout: float | None = None, run_=run_group, stall_s: float | None = None):
    """Run ``req`` in the venv of ``python`` (:func:`run_group`: its process group killed at ``timeout``
    s (None: :func:`timeout_s`), or ``stall_s`` s without progress). Returns ``(Results, info)``; never raises
    for the child's failure."""
    return run_many(python, [req], timeout, run_, stall_s)[0]


def run_many(python, reqs: list[dict], timeout: float | None = None, run_=run_group,
             stall_s: float | None = None) -> list[tuple[Results, dict]]:
    """:func:`run` for several requests of one peer (its data sets) in one child, one after the other: the venv's
    Python and its imports start once (a few seconds each). One ``(Results, info)`` per request; a child that
    fails leaves every request with its reason."""
    timeout = timeout_s() if timeout is None else timeout
    peer = get(reqs[0]["peer"])
    infos = [{"name": peer.name, "label": peer.label, "kind": q["kind"], "parallelism": peer.parallelism,
              "shuffle": peer.shuffle, "recipe": peer.recipe, "interpreter": str(python), "available": False}
             for q in reqs]
    failed = lambda why: [(Results(), {**i, "reason": why}) for i in infos]  # noqa: E731
    env = {**os.environ, IN_VENV: "1",
           "PYTHONPATH": os.pathsep.join([str(_lib_dir()), *filter(None, [os.environ.get("PYTHONPATH")])])}
    with tempfile.TemporaryDirectory(prefix="feedlab-peer-", ignore_cleanup_errors=True) as tmp:
        answer, beat_file = Path(tmp) / "answer.json", Path(tmp) / "beat"
        scratch = Path(tmp) / "tmp"   # the peer's temporaries (mosaic's filelocks, pymp-*): removed with tmp
        scratch.mkdir()
        env.update({k: str(scratch) for k in ("TMPDIR", "TEMP", "TMP")})
        limits = {"stall_s": stall_s, "beat_file": beat_file} if stall_s else {}
        try:
            r = run_([str(python), "-m", "feedlab.peers.child", str(answer)],
                     input=json.dumps(reqs[0] if len(reqs) == 1 else reqs),
                     capture_output=True, text=True, timeout=timeout, env={**env, BEAT: str(beat_file)}, **limits)
        except Stalled:
            return failed(f"its venv's run ({python}) made no progress in {stall_s:g} s: it and its processes "
                          "were stopped (a hung peer? --timeout 0 waits)")
        except subprocess.TimeoutExpired:
            return failed(f"its venv's run ({python}) ran past {timeout:.0f} s: it and its processes were stopped")
        if not answer.is_file():
            lines = [ln for ln in (r.stderr or r.stdout or "").splitlines() if ln.strip()]
            return failed(f"its venv's run ({python}) exited {r.returncode} without an answer: "
                          f"{lines[-1].strip() if lines else 'no output'}")
        got = json.loads(answer.read_text())
    outs = []
    for info, out in zip(infos, got["answers"] if "answers" in got else [got]):
        res = Results()
        res.rows.extend(out["rows"])
        info.update(out["info"])
        info.update(interpreter=str(python), executable=out.get("interpreter", ""), python=out.get("python", ""),
                    versions=out.get("versions", {}))
        outs.append((res, info))
    return outs
