"""Errors data_prep reports as a message and a non-zero exit (never a traceback)."""

from __future__ import annotations

from pathlib import Path


class DataPrepError(ValueError):
    """Bad input or arguments: exit status 2 (a ``ValueError``, so every command line's
    ``cli_errors`` reports it on one line too)."""

    exit_code = 2


class VerifyError(DataPrepError):
    """A packed format does not match the PNGs: exit status 1."""

    exit_code = 1


def _limit_words() -> str:
    """This process's file-size limit (``ulimit -f``) in words, or "" where there is none."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return ""
    if soft == resource.RLIM_INFINITY:
        return ""
    return f" (this process may write files of at most {soft:,} bytes: ulimit -f)"


def write_failed(fmt: str, target, exc: BaseException) -> DataPrepError | None:
    """One line for a write of ``fmt`` to ``target`` that a known library error stopped (an
    ``OSError`` such as EFBIG or ENOSPC, ``lmdb.Error``, h5py's ``OSError`` with the errno in its
    text), naming the file and the fix; None for anything else (then it is not ours to word)."""
    import errno
    import re

    text = " ".join(str(exc).split())
    code = getattr(exc, "errno", None)
    if code is None:
        m = re.search(r"errno = (\d+)", text)   # h5py: "... (file write failed: ..., errno = 27, ...)"
        code = int(m[1]) if m else None
    low = text.lower()
    is_lmdb = type(exc).__module__.split(".")[0] == "lmdb"
    is_h5 = isinstance(exc, RuntimeError) and "errno = " in text   # h5py's close after a failed write
    if not (isinstance(exc, OSError) or is_lmdb or is_h5):
        return None
    tail = "nothing half-written was left"
    if code == errno.EFBIG or "file too large" in low:
        return DataPrepError(f"{fmt}: cannot write {target}: the file grew past this process's file-size limit"
                             f"{_limit_words()}; raise it (ulimit -f unlimited) and pack again; {tail}")
    if code in (errno.ENOSPC, errno.EDQUOT) or "no space left" in low or "quota" in low:
        return DataPrepError(f"{fmt}: cannot write {target}: no space left on its device (or quota); free some "
                             f"(df -h {Path(target).parent}) or pack a copy "
                             f"of the set on a larger disk; {tail}")
    if is_lmdb and _limit_words():   # LMDB says EIO where the write met the limit
        return DataPrepError(f"{fmt}: cannot write {target}: LMDB: {text}, most likely the file-size limit"
                             f"{_limit_words()}; raise it (ulimit -f unlimited) and pack again; {tail}")
    if is_lmdb:
        return DataPrepError(f"{fmt}: cannot write {target}: LMDB: {text}; check the free space "
                             f"(df -h {Path(target).parent}) and pack again; {tail}")
    where = f" ({exc.filename})" if getattr(exc, "filename", None) and str(exc.filename) not in text else ""
    return DataPrepError(f"{fmt}: cannot write {target}: {getattr(exc, 'strerror', None) or text}{where}; {tail}")
