"""The child's side of a peer run in its own venv (:mod:`feedlab.peers.remote` is the parent's):

    <peer venv>/bin/python -m feedlab.peers.child <answer.json>   < request.json

(a request, or a list of them answered as ``{"answers": [...]}``) rebuilds the :class:`~feedlab.peers.base.Source`, runs :func:`~feedlab.peers.measure.run_peer` in this
interpreter and writes the answer file atomically."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from feedlab.peers._process import IN_VENV
from feedlab.peers.base import Source, installed_versions
from feedlab.peers.measure import Window, run_peer
from feedlab.results import atomic_write


def serve(req: dict) -> dict:
    """The child's side: the same measurement, in this interpreter."""
    source = Source(req["kind"], req["root"], req["limit"])
    res, info = run_peer(req["peer"], source, Path(req["work_root"]), req["batch_size"], req["worker_counts"],
                         size=req["size"], warmup=req["warmup"], repeats=req["repeats"], cold=req["cold"],
                         device=req["device"], seed=req["seed"], check=req["check"],
                         window=Window(**(req.get("window") or {})), augment=req.get("augment", True))
    info.pop("trace", None)
    for st in info.get("runs") or []:
        st.pop("trace", None)
    return {"rows": res.rows, "info": info, "interpreter": sys.executable,
            "python": sys.version.split()[0], "versions": installed_versions(everything=True)}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m feedlab.peers.child ANSWER.json < request.json", file=sys.stderr)
        return 2
    os.environ[IN_VENV] = "1"
    req = json.loads(sys.stdin.read())   # one request, or a list (one peer's data sets: one start of this Python)
    out = {"answers": [serve(r) for r in req]} if isinstance(req, list) else serve(req)
    atomic_write(Path(argv[0]), json.dumps(out, default=_json_default))
    return 0


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON: {type(o).__name__}")


if __name__ == "__main__":
    sys.exit(main())
