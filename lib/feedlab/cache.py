"""Drop files from the OS page cache, and check that they went.

A "cold" epoch needs the data set out of RAM first. Without root (or a
writable ``/proc/sys/vm/drop_caches``) the kernel still accepts a per-file
hint: ``posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)`` drops the file's clean
pages. Dirty pages (written but not yet on disk) cannot be dropped, so each
file is ``fsync``-ed first.

:func:`evict` returns an :class:`EvictionReport`: how many files and bytes were
asked for, and how many pages were resident before and after, counted with
``mincore(2)`` (through ``ctypes``) where the platform has it. When it does not,
``verified`` is ``"unverified"`` and the reason says why; a caller can still
compare a cold and a warm read time.

    >>> rep = evict(files_under(root / "lmdb"))
    >>> rep.ok, rep.resident_fraction_after

:func:`warm` reads files back in: a warm measurement after something evicted them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

_PAGE = mmap.PAGESIZE


@dataclass
class EvictionReport:
    files: int = 0                       # files asked for
    bytes: int = 0                       # their total size
    evicted_files: int = 0               # files fadvise accepted
    failed: list[str] = field(default_factory=list)   # "path: error"
    pages: int = 0                       # pages the files span (0 when unverified)
    resident_pages_before: int | None = None
    resident_pages_after: int | None = None
    verified: str = "unverified"         # "mincore" or "unverified"
    reason: str = ""                     # why eviction or verification was not possible

    @property
    def supported(self) -> bool:
        return hasattr(os, "posix_fadvise")

    @property
    def resident_fraction_after(self) -> float | None:
        if self.resident_pages_after is None or self.pages == 0:
            return None
        return self.resident_pages_after / self.pages

    @property
    def ok(self) -> bool:
        """Every file accepted the hint and (where checked) under 5% of pages stayed."""
        if not self.supported or self.failed or self.evicted_files != self.files:
            return False
        frac = self.resident_fraction_after
        return frac is None or frac < 0.05

    def as_dict(self) -> dict:
        d = asdict(self)
        d["failed"] = list(self.failed)[:10]
        d["ok"] = self.ok
        d["resident_fraction_after"] = self.resident_fraction_after
        return d

    def summary(self) -> str:
        if not self.supported:
            return f"eviction not possible here: {self.reason}"
        s = f"evicted {self.evicted_files}/{self.files} files ({self.bytes / 2**20:.1f} MiB)"
        if self.verified == "mincore":
            s += (f"; resident pages {self.resident_pages_before} -> {self.resident_pages_after}"
                  f" of {self.pages} (mincore)")
        else:
            s += f"; not verified ({self.reason})"
        if self.failed:
            s += f"; {len(self.failed)} failed, e.g. {self.failed[0]}"
        return s


def files_under(*paths: str | os.PathLike) -> list[Path]:
    """Every regular file of the given files or directories (recursively), sorted."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            out.extend(sorted(q for q in p.rglob("*") if q.is_file()))
    return out


class _Mincore:
    """``mincore`` over a private read-only mapping of each file."""

    def __init__(self) -> None:
        self.error = ""
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            libc.mmap.restype = ctypes.c_void_p
            libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_int, ctypes.c_long]
            libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
            self.libc = libc
        except (OSError, AttributeError) as exc:
            self.libc = None
            self.error = f"no mincore: {exc}"

    @property
    def available(self) -> bool:
        return self.libc is not None

    def resident(self, path: Path) -> tuple[int, int]:
        """(resident pages, pages) of one file."""
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            n = -(-size // _PAGE)
            if size == 0:
                return 0, 0
            addr = self.libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), "mmap failed")
            try:
                vec = (ctypes.c_ubyte * n)()
                if self.libc.mincore(ctypes.c_void_p(addr), size, vec) != 0:
                    raise OSError(ctypes.get_errno(), "mincore failed")
                return int((np.frombuffer(vec, np.uint8) & 1).sum()), n
            finally:
                self.libc.munmap(ctypes.c_void_p(addr), size)
        finally:
            os.close(fd)


_MINCORE: _Mincore | None = None


def _mincore() -> _Mincore:
    global _MINCORE
    if _MINCORE is None:
        _MINCORE = _Mincore()
    return _MINCORE


def resident_pages(paths: Iterable[str | os.PathLike]) -> tuple[int, int] | None:
    """(resident, total) pages of the files, or None where mincore is unavailable."""
    mc = _mincore()
    if not mc.available:
        return None
    res = tot = 0
    try:
        for p in paths:
            r, n = mc.resident(Path(p))
            res += r
            tot += n
    except OSError:
        return None
    return res, tot


def evict(paths: Iterable[str | os.PathLike], verify: bool = True) -> EvictionReport:
    """fsync then ``POSIX_FADV_DONTNEED`` every file; count resident pages before/after."""
    files = [Path(p) for p in paths]
    rep = EvictionReport(files=len(files))
    rep.bytes = sum(p.stat().st_size for p in files if p.is_file())
    if not hasattr(os, "posix_fadvise"):
        rep.reason = "os.posix_fadvise is not available on this platform"
        return rep
    before = resident_pages(files) if verify else None
    for p in files:
        try:
            fd = os.open(p, os.O_RDONLY)  # fsync works on a read-only descriptor on Linux
            try:
                try:
                    os.fsync(fd)   # dirty pages cannot be dropped: write them first
                except OSError:
                    pass
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            rep.evicted_files += 1
        except OSError as exc:
            rep.failed.append(f"{p}: {exc}")
    after = resident_pages(files) if verify else None
    if before is not None and after is not None:
        rep.verified = "mincore"
        rep.resident_pages_before, rep.pages = before
        rep.resident_pages_after = after[0]
    else:
        rep.reason = "verification off" if not verify else (_mincore().error or "mincore failed")
    return rep


def warm(paths: Iterable[str | os.PathLike], chunk: int = 1 << 20, report: bool = True) -> float | None:
    """Read every file through once, so what reads it next finds its pages in the page cache (a warm
    measurement after something evicted them, a cold-cache run say); the resident fraction after, by
    ``mincore`` (None where it is unavailable; ``report=False``: not checked, None — the check maps every
    file again and costs several times the read on a store of many small files). Files that cannot be read
    are skipped."""
    files = [Path(p) for p in paths]
    buf = bytearray(chunk)
    for p in files:
        try:
            with open(p, "rb", buffering=0) as f:
                while f.readinto(buf):
                    pass
        except OSError:
            continue
    if not report:
        return None
    got = resident_pages(files)
    return None if got is None or not got[1] else got[0] / got[1]
