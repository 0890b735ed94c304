"""Which machine a run is on, and what its size implies.

* :func:`machine_key` — a short name for the machine that made a result, derived
  from its fingerprint (``cpu-2c``, ``h100-16c``, ``2xa100-64c``). Results are
  written under ``figures/<notebook>/<machine_key>/`` so that runs on different
  machines sit side by side instead of replacing each other. ``$FEEDLAB_MACHINE``
  overrides it.
* :func:`usable_cores` — the cores this process may run on (its affinity), or the
  count ``$FEEDLAB_CORES`` pretends (``python -m feedlab.run --dry-run --cores 16``
  shows the plan for a 16-core machine).
* :func:`expand_workers` — worker counts in ``notebooks/profiles.yaml`` may be
  written against the core count (``cores``, ``cores // 2``, ``min(cores, 4)``,
  ``cores + 2``) so that one profile sizes itself to a 2-core laptop and to a
  16-core GPU box alike.
* :func:`machine_dirs` — the machines whose results a notebook has committed.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from feedlab import fingerprint
from feedlab.files import load_json
from feedlab.monitor import usable_cores  # noqa: F401  (one definition, re-exported)
from feedlab.paths import FIGURES_DIR, env_number

#: parameters whose values are worker counts (one int, or a list of ints)
WORKER_KEYS = ("worker_counts", "max_workers", "num_workers", "fetch_workers", "timeline_workers")

_DROP = {"nvidia", "geforce", "tesla", "quadro", "amd", "radeon", "instinct", "graphics", "pcie", "sxm",
         "sxm4", "sxm5", "nvl"}




def worker_cap(cores: int | None = None) -> int:
    """The most DataLoader workers feedlab starts: 4 per usable core, at least 16
    (``$FEEDLAB_MAX_WORKERS`` sets another cap). More only thrash memory and the scheduler."""
    cap = env_number("FEEDLAB_MAX_WORKERS", None, int, low=1, unit="workers")
    return cap if cap is not None else max(16, 4 * (cores if cores is not None else usable_cores()))


def gpu_short_name(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100'; 'NVIDIA GeForce RTX 4090' -> 'rtx4090'."""
    words = [w for w in re.split(r"[^A-Za-z0-9]+", name) if w and w.lower() not in _DROP]
    words = [w for w in words if not re.fullmatch(r"\d+(gb|g)", w, re.I)]
    if not words:
        return "gpu"
    first = words[0].lower()
    if first.isalpha() and len(words) > 1:  # "RTX 4090", "A 100"
        first += words[1].lower()
    return first


def machine_key(fp: dict | None = None) -> str:
    """A short, stable name for the machine of a fingerprint (this machine when None)."""
    override = os.environ.get("FEEDLAB_MACHINE", "").strip()
    if override:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", override):
            raise ValueError(f"FEEDLAB_MACHINE={override!r}: use letters, digits, '.', '_' or '-'")
        return override
    return fingerprint_key(fp)


def fingerprint_key(fp: dict | None = None) -> str:
    """The key a fingerprint gives (this machine's when None), whatever ``$FEEDLAB_MACHINE`` says:
    what a machine is, as against what it is called."""
    if fp is None:
        fp = fingerprint.machine_fingerprint()
    cores = fp.get("cpu_usable") or fp.get("cpu_logical") or 0
    gpus = [g.get("name", "") for g in fp.get("gpus") or []]
    if not gpus:
        return f"cpu-{cores}c"
    short = gpu_short_name(gpus[0])
    count = f"{len(gpus)}x" if len(gpus) > 1 else ""
    return f"{count}{short}-{cores}c"


def key_names_gpu(key: str) -> bool:
    """A key shaped as :func:`machine_key` names a GPU machine (``h100-16c``, ``2xa100-64c``,
    ``rtx4090-8c``): a GPU model with digits, then the cores. ``box-1c`` or ``my-box`` do not."""
    return bool(re.fullmatch(r"(\d+x)?[a-z]+\d+[a-z0-9]*-\d+c", key)) and not key.startswith("cpu-")


def key_has_gpu(key: str) -> bool:
    """A machine key names a GPU unless it is ``cpu-...`` (what :func:`machine_key` gives a
    machine without one)."""
    return not key.startswith("cpu-")


# --------------------------------------------------------------------------
# worker counts written against the core count
# --------------------------------------------------------------------------

_ALLOWED = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Call, ast.Load,
            ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.USub)


def _eval_count(text: str, cores: int, key: str) -> int:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"{key}: cannot read {text!r} as a worker count "
                         "(use a number or an expression of `cores`, e.g. 'cores // 2')") from None
    for node in ast.walk(tree):
        ok = isinstance(node, _ALLOWED)
        if isinstance(node, ast.Name):
            ok = node.id in ("cores", "min", "max")
        if isinstance(node, ast.Call):
            ok = isinstance(node.func, ast.Name) and node.func.id in ("min", "max") and not node.keywords
        if isinstance(node, ast.Constant):
            ok = isinstance(node.value, int) and not isinstance(node.value, bool)
        if not ok:
            raise ValueError(f"{key}: {text!r} may use only whole numbers, `cores`, + - * //, "
                             "min() and max()")
    value = eval(compile(tree, "<workers>", "eval"), {"__builtins__": {}},  # noqa: S307 - checked above
                 {"cores": cores, "min": min, "max": max})
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"{key}: {text!r} gives {value!r} with {cores} cores; a worker count "
                         "is a whole number >= 0")
    return value


def expand_workers(value, cores: int, key: str = "workers"):
    """Resolve a worker-count setting against ``cores``.

    An int stays; a string is an expression of ``cores``; a list resolves each entry,
    then drops repeats and sorts (``[0, 2, 'cores // 2', 'cores']`` is ``[0, 2]`` on 2
    cores and ``[0, 2, 8, 16]`` on 16). ``None`` stays ``None``.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{key}: {value} workers; a worker count is a whole number >= 0")
        return value
    if isinstance(value, str):
        return _eval_count(value, cores, key)
    if isinstance(value, (list, tuple)):
        return sorted({expand_workers(v, cores, key) for v in value})
    raise ValueError(f"{key}: {value!r} is not a worker count or a list of them")


def worker_ladder(top: int, also=()) -> list[int]:
    """Worker counts worth measuring from 0 to ``top``: every count up to 4, then steps
    of about ×1.5 (6, 8, 12, 16, 24, ...), ``top`` itself, and the counts in ``also``
    that lie in 0..``top`` (those a claim is stated at, e.g. 7 or ``cores - 1``)."""
    top = int(top)
    extra = sorted({int(w) for w in also if 0 <= int(w) <= top})
    return sorted(set(_ladder(top)) | set(extra))


def _ladder(top: int) -> list[int]:
    out = [w for w in range(0, min(top, 4) + 1)]
    w = 4
    while True:
        nxt = w * 3 // 2 if (w & (w - 1)) == 0 else w * 4 // 3  # 4→6→8→12→16→24→32
        if nxt >= top:
            break
        out.append(nxt)
        w = nxt
    if top not in out:
        out.append(top)
    return out


# --------------------------------------------------------------------------
# committed results, per machine
# --------------------------------------------------------------------------

def machine_dirs(notebook: str, figures_dir: Path | None = None) -> dict[str, Path]:
    """``{machine_key: folder}`` for every machine with results of ``notebook`` (CPU first)."""
    base = Path(figures_dir or FIGURES_DIR) / notebook
    if not base.is_dir():
        return {}
    found = {p.name: p for p in base.iterdir()
             if p.is_dir() and not re.search(r"\.(tmp|old)-\d+-[0-9a-f]{6}$", p.name)  # a run under way, or killed
             and ((p / "results.json").exists() or (p / "fingerprint.json").exists())}
    return dict(sorted(found.items(), key=lambda kv: (not kv[0].startswith("cpu"), kv[0])))


def machine_fingerprints(notebook: str, figures_dir: Path | None = None) -> dict[str, dict]:
    out = {}
    for key, path in machine_dirs(notebook, figures_dir).items():
        fp = path / "fingerprint.json"
        out[key] = load_json(fp) if fp.exists() else {}
    return out


# --------------------------------------------------------------------------
# the host ↔ device link (a fact of the hardware, read by 03 and the targets)
# --------------------------------------------------------------------------

#: Payload bandwidth per PCIe lane after line encoding, GB/s (1e9 B/s): Gen1/2 8b/10b,
#: Gen3-5 128b/130b at 8/16/32 GT/s, Gen6 64 GT/s PAM4 with FLIT encoding.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def pcie_theoretical_gbps(gen: int, width: int) -> float:
    """PCIe payload ceiling (before packet overhead) for a link generation and lane count."""
    if gen not in PCIE_LANE_GBPS:
        raise ValueError(f"unknown PCIe generation {gen}")
    return PCIE_LANE_GBPS[gen] * width
