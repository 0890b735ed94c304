"""Provenance of a measurement: which machine, which software, which commit.

Every result table is written with ``fingerprint.json`` beside it, and every
figure carries :func:`fingerprint_line` as a footer.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shutil
import stat
import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from feedlab.files import load_json
from feedlab.monitor import load_record
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


SOURCE_PATHSPEC = ("--", ".", ":(exclude)figures")  # the run's own outputs are not its code


#: an untracked file past this size is named by its (size, mtime_ns, inode), not its content, in the tree hash:
#: a data set left unignored in the checkout (100 GB) is not read whole by every run and plot (attack55 W6, F23)
LARGE_UNTRACKED_BYTES = 64 << 20


def tree_hash(root: Path | str = REPO_ROOT, commit: str | None = None) -> str | None:
    """16 hex digits naming the code in the working tree, dirty or not: the sha256 of the
    commit, the tracked changes against it (``git diff HEAD --binary``) and every untracked,
    not ignored file (name and content; past :data:`LARGE_UNTRACKED_BYTES`, name, size, mtime and
    inode). Clean tree: a function of the commit alone; the same edits on the same commit: the same hash.
    ``figures/`` (the run's outputs) is left out. None outside a git work tree."""
    return tree_state(root, commit)[0]


def tree_state(root: Path | str = REPO_ROOT, commit: str | None = None) -> tuple[str | None, list[str]]:
    """(:func:`tree_hash`, the untracked files past :data:`LARGE_UNTRACKED_BYTES` it named by their size, mtime
    and inode rather than read: ``git_state`` lists them as ``untracked_large``)."""
    import hashlib

    def git(*args: str) -> bytes:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, timeout=30, check=True).stdout

    try:
        commit = commit or git("rev-parse", "HEAD").decode().strip()
        diff = git("diff", "HEAD", "--binary", *SOURCE_PATHSPEC)
        untracked = git("ls-files", "-z", "--others", "--exclude-standard", *SOURCE_PATHSPEC).split(b"\0")
    except (OSError, subprocess.SubprocessError):
        return None, []
    h, large = hashlib.sha256(commit.encode() + b"\0" + diff), []
    for name in sorted(n for n in untracked if n):
        h.update(b"\0untracked\0" + name + b"\0")
        digest = entry_digest(Path(root) / name.decode(errors="surrogateescape"), large=LARGE_UNTRACKED_BYTES)
        if digest is not None and digest.startswith(b"large:"):
            large.append(name.decode(errors="replace"))
        h.update(digest or b"missing")
    return h.hexdigest()[:16], large


_KINDS = ((stat.S_ISDIR, b"folder"), (stat.S_ISFIFO, b"fifo"), (stat.S_ISSOCK, b"socket"),
          (stat.S_ISCHR, b"character device"), (stat.S_ISBLK, b"block device"))


def entry_digest(path: Path, chunk: int = 1 << 20, large: int | None = None) -> bytes | None:
    """What a source tree hash takes from one name, never following a link and never opening
    anything but a regular file (a FIFO, a link to one or to ``/dev/zero`` would block or read
    without end): a link gives the sha256 of its target text (as git stores it), a regular file
    the sha256 of its content read in chunks (a huge one is never held whole), any other kind a
    marker of its kind (``b"kind:fifo"``), an unreadable file ``b"unreadable"``. None: no such name.
    ``large``: a regular file past that many bytes is not read, ``b"large:"`` + the sha256 of its size, mtime
    (ns) and inode."""
    import hashlib

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return b"unreadable"
    if stat.S_ISLNK(st.st_mode):
        try:
            return b"link:" + hashlib.sha256(os.fsencode(os.readlink(path))).digest()
        except OSError:
            return b"unreadable"
    if not stat.S_ISREG(st.st_mode):
        return b"kind:" + next((word for test, word in _KINDS if test(st.st_mode)), b"other")
    if large is not None and st.st_size > large:
        return b"large:" + hashlib.sha256(f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}".encode()).digest()
    h = hashlib.sha256()
    try:  # O_NOFOLLOW: a regular file swapped for a link since the lstat is not followed either
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return b"kind:changed"
            while block := f.read(chunk):
                h.update(block)
    except OSError:
        return b"unreadable"
    return h.digest()


def content_hash(root: Path | str = REPO_ROOT) -> str | None:
    """16 hex digits naming the source files as they are on disk, whatever commit the copy's git
    thinks it is at: the sha256 of every tracked or untracked, not ignored file outside
    ``figures/`` that exists (name and content). Two copies of the same tree give the same hash
    even when one's ``.git`` is older (the GPU machine's copy, docs/GPU_RUN.md)."""
    import hashlib

    try:
        names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                                *SOURCE_PATHSPEC], cwd=root, capture_output=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    h = hashlib.sha256()
    for name in sorted(set(n for n in names.split(b"\0") if n)):
        digest = entry_digest(Path(root) / name.decode(errors="surrogateescape"))
        if digest is not None and digest != b"kind:folder":  # a file the old index names but the copy
            h.update(name + b"\0" + digest)  # no longer has (or a submodule's folder) is not code that ran
    return h.hexdigest()[:16]


SOURCE_FILE = ".whl/SOURCE.json"  # written by .ci/gpu-wheels beside the carried wheels: the commit sent


def git_state(root: Path | str = REPO_ROOT) -> dict:
    """``{"commit", "dirty", "tree"}`` of the work tree at ``root`` (Nones outside git). Where the
    copy carries :data:`SOURCE_FILE` (the commit it was sent from and that commit's
    :func:`content_hash`) and its files hash the same, that commit names the code: ``"sent": True``.
    ``"untracked_large"``: the untracked files the tree hash named by size, mtime and inode (:func:`tree_state`)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True,
                              text=True, timeout=10).stdout.strip()
    try:
        commit = git("rev-parse", "HEAD")
        # the run's own outputs (figures/) are tracked: their rewriting is not a dirty source tree;
        # an untracked source file (not ignored) is: the code that ran is not the commit's
        dirty = bool(git("status", "--porcelain", "--untracked-files=all", *SOURCE_PATHSPEC))
        tree, large = tree_state(root, commit) if commit else (None, [])
        out = {"commit": commit or None, "dirty": dirty, "tree": tree}
        if large:   # named by size, mtime and inode, not read (LARGE_UNTRACKED_BYTES): the record says which
            out["untracked_large"] = large
    except Exception:
        return {"commit": None, "dirty": None, "tree": None}
    sent = sent_source(root)
    if dirty and sent and sent.get("content") == content_hash(root):
        out.update(commit=sent["commit"], dirty=False, sent=True, copy_head=commit)
    return out


def sent_source(root: Path | str = REPO_ROOT) -> dict | None:
    """The carried :data:`SOURCE_FILE`, or None (absent or unreadable)."""

    try:
        d = load_json(Path(root) / SOURCE_FILE)   # a FIFO or JSON nested too deeply: None, never a wait
        return d if isinstance(d, dict) and d.get("commit") and d.get("content") else None
    except (OSError, ValueError):
        return None


def write_source(root: Path | str = REPO_ROOT) -> Path:
    """Record the commit this checkout is at and its content hash in :data:`SOURCE_FILE` (run by
    ``.ci/gpu-wheels`` on a clean tree, before the device calls). Refuses a dirty tree."""
    import json

    st = git_state(root)
    if st.get("commit") is None or st.get("dirty"):
        raise ValueError("commit first: the GPU run's fingerprint names the commit it was sent from")
    path = Path(root) / SOURCE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"commit": st["commit"], "content": content_hash(root)}) + "\n")
    return path


def _git() -> dict:
    return git_state(REPO_ROOT)


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
        return load_record()
    except Exception as exc:  # never lose a result over the load record
        return {"available": False, "error": f"{type(exc).__name__}: {exc}"}


def other_fraction(window) -> float | None:
    """A load window's ``other_fraction`` where it is a real share of the cores (a number in [0, 1]), else None:
    a damaged fingerprint.json (a string there) is never formatted as a share (attack55 B38, B45)."""
    v = window.get("other_fraction") if isinstance(window, dict) else None
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0
    return float(v) if ok else None


def busy_flag(fp: dict) -> str:
    """' · BUSY: …' for a footer when other processes loaded the machine, else ''."""
    load = fp.get("other_load") or {}
    if not isinstance(load, dict) or not load.get("busy"):
        return ""
    worst = load.get("busiest_window") or load.get("whole_run") or {}
    fracs = [f for f in (other_fraction(load.get("whole_run")), other_fraction(worst)) if f is not None]
    return f" · BUSY: other processes used {max(fracs):.0%} of the cores" if fracs else " · BUSY"


def git_fields(fp, where: str | None = None) -> tuple[str | None, bool, str | None]:
    """A fingerprint's ``git`` as ``(commit, dirty, tree)``: commit and tree text or None, dirty a bool.
    A field of the wrong shape (``git.commit`` a number, attack56 B53/B54) raises a ValueError naming
    ``where`` (the file) and the field; with no ``where`` it is read as not recorded (a figure footer)."""
    g = fp.get("git") if isinstance(fp, dict) else None
    if g is None:
        return None, False, None
    if not isinstance(g, dict):
        if where:
            raise ValueError(f"{where}: git is {type(g).__name__}, not an object; re-run that notebook there")
        return None, False, None
    out = []
    for k, types, what in (("commit", str, "text"), ("dirty", bool, "true/false"), ("tree", str, "text")):
        v = g.get(k)
        if v is not None and not isinstance(v, types):
            if where:
                raise ValueError(f"{where}: git.{k} is {type(v).__name__}, not {what}; re-run that notebook there")
            v = None
        out.append(v or None)
    return out[0], bool(out[1]), out[2]


def fingerprint_line(fp: dict | None = None) -> str:
    """One line for a figure footer: CPU, cores, memory, GPU, software, commit (with
    ``+dirty:<tree>`` when the working tree differed from it), date."""
    fp = fp or machine_fingerprint()
    mem = fp.get("memory_bytes")
    mem_s = f"{mem / 2**30:.0f} GiB" if mem else "? GiB"
    gpu = ", ".join(g["name"] for g in fp.get("gpus", [])) or "no GPU"
    commit, dirty, tree = git_fields(fp)
    commit = commit or "no-git"
    # +dirty names the working tree's code by its tree hash (fingerprint.tree_hash)
    dirty = (f"+dirty:{tree[:8]}" if tree else "+dirty") if dirty else ""
    return (f"{fp.get('cpu_model', '?')} · {fp.get('cpu_usable', '?')} cores · {mem_s} · {gpu} · "
            f"py {fp.get('python')} · torch {fp.get('torch')} · {commit[:8]}{dirty} · "
            f"{fp.get('time_utc', '')[:16]}Z{busy_flag(fp)}")
