"""A peer in its own venv, measured by feedlab's own code: the subprocess protocol.

The parent (:func:`feedlab.peers.measure.run_peer`, in feedlab's venv) writes one JSON
request — the peer, the source (kind, root, sample limit), the work folder and every
measurement argument — to the child's standard input and starts

    <peer venv>/bin/python -m feedlab.peers.remote <answer.json>

with ``PYTHONPATH`` set to this checkout's ``lib`` and ``FEEDLAB_PEER_IN_VENV=1`` (so the
child measures in-process and does not hand on again). The child rebuilds the same
:class:`~feedlab.peers.base.Source`, runs the same :func:`~feedlab.peers.measure.run_peer`
(conversion, output checksums, timed epochs) and writes ``{"rows": [...], "info": {...},
"interpreter": ..., "python": ..., "versions": {...}}`` to the answer file, atomically.
The parent turns the rows back into :class:`~feedlab.results.Results` and records the
interpreter in the info. A child that crashes, times out or writes no answer leaves the
peer *unavailable* with the last line of its error.

The child runs in its own process group, killed whole (the peer's own workers and helpers too)
at ``timeout`` seconds, after ``stall_s`` seconds without a sign of progress (:func:`beat`:
a batch, a phase begun; ``bench --peer --timeout S``), or when the caller is interrupted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IN_VENV = "FEEDLAB_PEER_IN_VENV"
# one peer on one data set, every worker count: a bound against a hung child, not a budget (the full
# profile's slowest peers take tens of minutes); FEEDLAB_PEER_TIMEOUT_S sets another
TIMEOUT_S = float(os.environ.get("FEEDLAB_PEER_TIMEOUT_S", 4 * 3600))


BEAT = "FEEDLAB_PEER_BEAT"   # the file the child touches as it makes progress
_last_beat = [0.0]


def in_venv() -> bool:
    return os.environ.get(IN_VENV) == "1"


def beat() -> None:
    """The child's sign of progress to its parent (a file's mtime, at most once a second); a no-op
    outside a venv run."""
    path = os.environ.get(BEAT)
    if path and time.monotonic() - _last_beat[0] > 1.0:
        _last_beat[0] = time.monotonic()
        Path(path).touch()


class Stalled(subprocess.TimeoutExpired):
    """The child made no progress (no :func:`beat`) for ``timeout`` seconds."""


def run_group(cmd, input: str = "", timeout: float | None = None, env=None, stall_s: float | None = None,
              beat_file: Path | None = None, **_kw) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, input=..., capture_output=True, text=True, timeout=...)`` in a process group
    of its own: at the limit (``TimeoutExpired``), after ``stall_s`` s without a touch of ``beat_file``
    (:class:`Stalled`) or when interrupted, the whole group is killed, the child's children too."""
    with tempfile.TemporaryFile() as fin, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        fin.write(input.encode())
        fin.seek(0)
        proc = subprocess.Popen(cmd, stdin=fin, stdout=out, stderr=err, env=env, start_new_session=True)
        t0 = time.time()
        try:
            while True:
                try:
                    code = proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.time()
                if timeout is not None and now - t0 > timeout:
                    raise subprocess.TimeoutExpired(cmd, timeout)
                try:
                    last = max(t0, beat_file.stat().st_mtime) if beat_file is not None else now
                except OSError:
                    last = t0
                if stall_s and now - last > stall_s:
                    raise Stalled(cmd, stall_s)
        except BaseException:
            if proc.returncode is None:  # the leader is not reaped yet: the group is still its own
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        finally:   # whatever the peer left running in its group (a daemon, a grandchild) ends with it;
            try:   # the group's id is not reused while a member lives, so this reaches only the peer's
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(cmd, code, out.read().decode("utf-8", "replace"),
                                           err.read().decode("utf-8", "replace"))


def request(name: str, source, work_root, batch_size: int, worker_counts, size: int, warmup: int, repeats: int,
            cold: bool, device, seed: int, check: bool, window: dict | None = None) -> dict:
    return {"peer": name, "kind": source.kind, "root": str(Path(source.root).resolve()), "limit": source.limit,
            "work_root": str(Path(work_root).resolve()), "batch_size": int(batch_size),
            "worker_counts": [int(w) for w in worker_counts], "size": int(size), "warmup": int(warmup),
            "repeats": int(repeats), "cold": bool(cold), "device": str(device), "seed": int(seed),
            "check": bool(check), "window": dict(window or {})}


def _lib_dir() -> Path:
    return Path(__file__).resolve().parents[2]


def _versions(name: str) -> dict:
    from importlib import metadata

    out = {}
    for dist in {"mosaic_streaming": ["mosaicml-streaming"], "ffcv": ["ffcv", "numba"],
                 "spdl": ["spdl", "spdl-io", "spdl-core"]}.get(name, []) + ["torch", "numpy"]:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def check_imports(python, names, timeout: float = 300, run_=run_group) -> str:
    """"" when ``names`` import in the venv of ``python``, else one line naming the failing import."""
    code = "; ".join(f"import {n}" for n in names)
    try:
        r = run_([str(python), "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"import in {python} ran past {timeout:.0f} s"
    except OSError as exc:
        return f"{python}: {exc}"
    if r.returncode == 0:
        return ""
    lines = [ln.strip() for ln in (r.stderr or "").splitlines() if ln.strip()]
    return f"in its venv ({python}): {lines[-1] if lines else f'exit {r.returncode}'}"


def run(python, req: dict, timeout: float = TIMEOUT_S, run_=run_group, stall_s: float | None = None):
    """Run ``req`` in the venv of ``python`` (:func:`run_group`: its process group killed at ``timeout``
    s, or ``stall_s`` s without progress). Returns ``(Results, info)``; never raises for the child's failure."""
    from feedlab.results import Results

    from . import get

    peer = get(req["peer"])
    info = {"name": peer.name, "label": peer.label, "kind": req["kind"], "parallelism": peer.parallelism,
            "shuffle": peer.shuffle, "recipe": peer.recipe, "interpreter": str(python), "available": False}
    env = {**os.environ, IN_VENV: "1",
           "PYTHONPATH": os.pathsep.join([str(_lib_dir()), *filter(None, [os.environ.get("PYTHONPATH")])])}
    with tempfile.TemporaryDirectory(prefix="feedlab-peer-") as tmp:
        answer, beat_file = Path(tmp) / "answer.json", Path(tmp) / "beat"
        limits = {"stall_s": stall_s, "beat_file": beat_file} if stall_s else {}
        try:
            r = run_([str(python), "-m", "feedlab.peers.remote", str(answer)], input=json.dumps(req),
                     capture_output=True, text=True, timeout=timeout, env={**env, BEAT: str(beat_file)}, **limits)
        except Stalled:
            info["reason"] = (f"its venv's run ({python}) made no progress in {stall_s:g} s: it and its processes "
                              "were stopped (a hung peer? --timeout 0 waits)")
            return Results(), info
        except subprocess.TimeoutExpired:
            info["reason"] = f"its venv's run ({python}) ran past {timeout:.0f} s: it and its processes were stopped"
            return Results(), info
        if not answer.is_file():
            lines = [ln for ln in (r.stderr or r.stdout or "").splitlines() if ln.strip()]
            info["reason"] = (f"its venv's run ({python}) exited {r.returncode} without an answer: "
                              f"{lines[-1].strip() if lines else 'no output'}")
            return Results(), info
        out = json.loads(answer.read_text())
    res = Results()
    res.rows.extend(out["rows"])
    info.update(out["info"])
    info.update(interpreter=str(python), executable=out.get("interpreter", ""), python=out.get("python", ""),
                versions=out.get("versions", {}))
    return res, info


def serve(req: dict) -> dict:
    """The child's side: the same measurement, in this interpreter."""
    from feedlab.peers.base import Source
    from feedlab.peers.measure import Window, run_peer

    source = Source(req["kind"], req["root"], req["limit"])
    res, info = run_peer(req["peer"], source, Path(req["work_root"]), req["batch_size"], req["worker_counts"],
                         size=req["size"], warmup=req["warmup"], repeats=req["repeats"], cold=req["cold"],
                         device=req["device"], seed=req["seed"], check=req["check"],
                         window=Window(**(req.get("window") or {})))
    info.pop("trace", None)
    for st in info.get("runs") or []:
        st.pop("trace", None)
    return {"rows": res.rows, "info": info, "interpreter": sys.executable,
            "python": sys.version.split()[0], "versions": _versions(req["peer"])}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m feedlab.peers.remote ANSWER.json < request.json", file=sys.stderr)
        return 2
    os.environ[IN_VENV] = "1"
    out = serve(json.loads(sys.stdin.read()))
    dest = Path(argv[0])
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.write_text(json.dumps(out, default=_json_default))
    os.replace(tmp, dest)
    return 0


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON: {type(o).__name__}")


if __name__ == "__main__":
    sys.exit(main())
