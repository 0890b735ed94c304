"""What a test leaves behind: processes in its session, files in /dev/shm that no process holds, files in a
temporary folder. Each test that starts processes or writes temporaries asserts all three are empty."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

SHM = "/dev/shm"


def session_processes(sid: int | None = None) -> list[str]:
    """The live processes of session ``sid`` (default: this process's) but this one, as ``pid: command``."""
    import psutil

    sid = os.getsid(0) if sid is None else sid
    left = []
    for p in psutil.process_iter(["pid", "status", "cmdline"]):
        try:
            if p.pid != os.getpid() and os.getsid(p.pid) == sid and p.info["status"] != psutil.STATUS_ZOMBIE:
                left.append(f"{p.pid}: {' '.join(p.info['cmdline'] or [])[:120]}")
        except (psutil.Error, ProcessLookupError, PermissionError):
            pass
    return left


def shm_names() -> set[str]:
    return set(os.listdir(SHM)) if os.path.isdir(SHM) else set()


def shm_held() -> set[str]:
    """/dev/shm names some process has open or mapped now (another program's live files are no leak)."""
    names = set()
    for n in os.listdir("/proc"):
        if not n.isdigit():
            continue
        try:
            with open(f"/proc/{n}/maps") as fh:
                names.update(ln.split("/dev/shm/", 1)[1].strip() for ln in fh if "/dev/shm/" in ln)
            for fd in os.listdir(f"/proc/{n}/fd"):
                target = os.readlink(f"/proc/{n}/fd/{fd}")
                if target.startswith("/dev/shm/"):
                    names.add(target.split("/dev/shm/", 1)[1])
        except OSError:
            pass
    return names


def shm_leaked(before: set[str]) -> set[str]:
    """``torch_*`` names (what DataLoader workers leave) new in /dev/shm since ``before`` that no process holds.
    Other names are left out: on a shared machine other programs' killed runs leave ``sem.mp-*`` meanwhile."""
    return {n for n in (shm_names() - before) - shm_held() if n.startswith("torch_")}


def files_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*")) if Path(folder).exists() else []


def children() -> list[str]:
    """This process's live descendants, as ``pid: command`` (an in-process test's workers and children)."""
    import psutil

    left = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{p.pid}: {' '.join(p.cmdline())[:120]}")
        except psutil.Error:
            pass
    return left


@contextlib.contextmanager
def nothing_left(tmp: Path, limit_s: float, what: str):
    """An in-process test's own deadline (``limit_s``, :func:`feedlab.errors.deadline`) and its temporary folder
    ``tmp`` as ``$TMPDIR``; afterwards no descendant of this process is left, nothing new and unheld in /dev/shm,
    and ``tmp`` is empty."""
    import tempfile

    from feedlab.errors import deadline

    tmp.mkdir(parents=True, exist_ok=True)
    kids, shm, old = children(), shm_names(), os.environ.get("TMPDIR")
    os.environ["TMPDIR"], tempfile.tempdir = str(tmp), None
    try:
        with deadline(limit_s, what):
            yield
    finally:
        if old is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old
        tempfile.tempdir = None
    assert children() == kids
    assert not shm_leaked(shm)
    assert [f for f in files_in(tmp) if not f.startswith("torchinductor_")] == []   # torch's cache, made on import
