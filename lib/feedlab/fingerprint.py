"""Provenance of a measurement: which machine, which software, which commit.

Every result table is written with ``fingerprint.json`` beside it, and every
figure carries :func:`fingerprint_line` as a footer.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shutil
import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from feedlab.paths import DATA_DIR, REPO_ROOT

_PACKAGES = ("numpy", "pillow", "pillow-simd", "torchvision", "lmdb", "lz4", "h5py",
             "zarr", "simplejpeg", "pyspng", "PyTurboJPEG", "accimage", "papermill")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int | None:
    try:
        import psutil
        return int(psutil.virtual_memory().total)
    except Exception:
        return None


def _disk(path: Path) -> dict:
    path = path if path.exists() else path.parent
    info: dict = {"path_checked": "data_dir"}
    try:
        usage = shutil.disk_usage(path)
        info.update(total_bytes=usage.total, free_bytes=usage.free)
    except OSError:
        return info
    try:
        import psutil
        best = None
        for part in psutil.disk_partitions(all=True):
            if str(path.resolve()).startswith(part.mountpoint) and (
                    best is None or len(part.mountpoint) > len(best.mountpoint)):
                best = part
        if best is not None:
            info.update(fstype=best.fstype, device=best.device, mountpoint=best.mountpoint)
            dev = Path(best.device).name
            rot = Path(f"/sys/block/{dev}/queue/rotational")
            if rot.exists():
                info["rotational"] = rot.read_text().strip() == "1"
    except Exception:
        pass
    return info


def _git() -> dict:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip()
    try:
        commit = git("rev-parse", "HEAD")
        # the run's own outputs (figures/) are tracked: their rewriting is not a dirty source tree;
        # an untracked source file (not ignored) is: the code that ran is not the commit's
        dirty = bool(git("status", "--porcelain", "--untracked-files=all", "--", ".", ":(exclude)figures"))
        return {"commit": commit or None, "dirty": dirty}
    except Exception:
        return {"commit": None, "dirty": None}


def _versions() -> dict:
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


@lru_cache(maxsize=1)
def _static_fingerprint() -> dict:
    import torch

    cuda = torch.cuda.is_available()
    gpus = []
    if cuda:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append({"name": p.name, "memory_bytes": int(p.total_memory),
                         "capability": f"{p.major}.{p.minor}"})
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    try:
        import psutil
        physical = psutil.cpu_count(logical=False)
    except Exception:
        physical = None
    return {
        "cpu_model": _cpu_model(),
        "cpu_logical": os.cpu_count(),
        "cpu_physical": physical,
        "cpu_usable": affinity,
        "memory_bytes": _memory_bytes(),
        "disk": _disk(DATA_DIR),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda_build": torch.version.cuda,
        "cuda_available": cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "gpus": gpus,
        "torch_threads": torch.get_num_threads(),
        "packages": _versions(),
        "git": _git(),
    }


def _process_start_utc() -> str:
    """When this process (a notebook's kernel, the runner) started: the start of the run."""
    try:
        import psutil
        t = psutil.Process().create_time()
    except Exception:
        return ""
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="seconds")


def machine_fingerprint() -> dict:
    """Everything needed to say where and with what a number was measured."""
    fp = dict(_static_fingerprint())
    fp["pythonunbuffered"] = os.environ.get("PYTHONUNBUFFERED", "")
    fp["time_utc"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    fp["started_utc"] = _process_start_utc()
    fp["argv0"] = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    fp["other_load"] = _other_load()
    return fp


def _other_load() -> dict:
    """CPU used by other processes while this run measured (see feedlab.monitor)."""
    try:
        from feedlab.monitor import load_record

        return load_record()
    except Exception as exc:  # never lose a result over the load record
        return {"available": False, "error": f"{type(exc).__name__}: {exc}"}


def busy_flag(fp: dict) -> str:
    """' · BUSY: …' for a footer when other processes loaded the machine, else ''."""
    load = fp.get("other_load") or {}
    if not load.get("busy"):
        return ""
    worst = load.get("busiest_window") or load.get("whole_run") or {}
    frac = max((load.get("whole_run") or {}).get("other_fraction", 0), worst.get("other_fraction", 0))
    return f" · BUSY: other processes used {frac:.0%} of the cores"


def fingerprint_line(fp: dict | None = None) -> str:
    """One line for a figure footer: CPU, cores, memory, GPU, software, commit, date."""
    fp = fp or machine_fingerprint()
    mem = fp.get("memory_bytes")
    mem_s = f"{mem / 2**30:.0f} GiB" if mem else "? GiB"
    gpu = ", ".join(g["name"] for g in fp.get("gpus", [])) or "no GPU"
    commit = (fp.get("git") or {}).get("commit") or "no-git"
    dirty = "+dirty" if (fp.get("git") or {}).get("dirty") else ""
    return (f"{fp.get('cpu_model', '?')} · {fp.get('cpu_usable', '?')} cores · {mem_s} · {gpu} · "
            f"py {fp.get('python')} · torch {fp.get('torch')} · {commit[:8]}{dirty} · "
            f"{fp.get('time_utc', '')[:16]}Z{busy_flag(fp)}")
