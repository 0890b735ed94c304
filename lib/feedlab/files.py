"""Files without anything half-written and without touching what is not ours: the ground floor's file helpers,
behind every atomic write (:func:`feedlab.results.atomic_write`, :mod:`feedlab.formats._io`'s streamed form,
data_prep, the runner's records), and the reads that accept regular files only.

Temporaries are siblings named ``<name>.tmp-<pid>-<6 hex>`` (``.old-`` for a replaced set), swapped into
place atomically (:func:`replace_path`); each is entered in a registry when its name is made, and
:func:`sweep_orphans` removes only registered ones whose process is gone, never a name by its shape alone (a
user's ``thesis.tex.tmp-4242-c0ffee`` stays). The registry is keyed by the checkout, not by the scratch folder
(``$XDG_STATE_HOME/feedlab/temps-<checkout hash>/``, one small file per temporary; the scratch folder's
``temps/`` where that cannot be written, and read too): a temporary of a killed run is swept whatever
``FEEDLAB_SCRATCH`` the next run uses. A process stopped by a signal removes its own registered temporaries
(:func:`remove_mine`, run by :func:`feedlab.procgroup.stopped`). Files are created with the process umask.

* :func:`tmp_sibling`, :func:`release`, :func:`replace_path`, :func:`remove`, :func:`sweep_orphans`,
  :func:`remove_mine` — temporaries; :func:`mp_temp_dir`, :func:`mp_sockets_fit` — multiprocessing's folder (a
  registered temporary; in ``/tmp`` where ``$TMPDIR`` is too long for its sockets).
* :func:`open_regular`, :func:`read_regular`, :func:`check_regular_tree`, :func:`max_file_bytes`,
  :func:`kind_of` — reads of regular files only, size-bounded.
* :func:`current_umask`, :func:`tree_bytes`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import time
from pathlib import Path

from feedlab import paths, procgroup


def current_umask() -> int:
    """This process's umask, read without changing it where /proc allows."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def tmp_sibling(final: Path, kind: str = "tmp") -> Path:
    """``<final>.tmp-<pid>-<6 hex>``, registered as this process's temporary: the only names
    :func:`sweep_orphans` removes (once this process is gone). :func:`release` (called by
    :func:`replace_path` and :func:`remove`) takes it off the registry."""
    tmp = final.with_name(f"{final.name}.{kind}-{os.getpid()}-{os.urandom(3).hex()}")
    _register(tmp)
    return tmp


def registries() -> list[Path]:
    """Where temporaries are registered: the checkout's folder in the user's state directory first, then the
    scratch folder's ``temps/`` (where the first cannot be written, and where older runs wrote)."""
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    checkout = hashlib.sha256(str(Path(paths.REPO_ROOT).resolve()).encode()).hexdigest()[:16]
    return [state / "feedlab" / f"temps-{checkout}", Path(paths.SCRATCH_DIR) / "temps"]


def _key(path: Path) -> str:
    full = os.path.join(os.path.realpath(path.parent), path.name)
    return hashlib.sha256(full.encode()).hexdigest()[:32]


def entry(path: Path) -> Path:
    """The registry entry of temporary ``path`` (where it is, else where it would be written)."""
    key = _key(Path(path))
    found = [r / key for r in registries() if (r / key).is_file()]
    return found[0] if found else registries()[0] / key


def _register(tmp: Path) -> None:
    """Enter ``tmp`` (its full path, this pid) in the registry. Where the registry cannot be
    written the temporary is simply not swept later: safe, never a reason to fail a write."""
    record = json.dumps({"path": os.path.join(os.path.realpath(tmp.parent), tmp.name), "pid": os.getpid()})
    for registry in registries():
        try:
            registry.mkdir(parents=True, exist_ok=True)
            fd = os.open(registry / _key(tmp), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            with os.fdopen(fd, "w") as fh:
                fh.write(record)
            procgroup.on_stop(remove_mine)   # a signal that stops us takes our temporaries too
            return
        except OSError:
            continue


def release(tmp: str | os.PathLike) -> None:
    """``tmp`` was put in place or removed: take it off the registry."""
    for registry in registries():
        try:
            (registry / _key(Path(tmp))).unlink(missing_ok=True)
        except OSError:
            pass


def _read_entry(path) -> dict | None:
    """A registry entry's record, or None where it is not one anything can match: not a regular file (a FIFO
    is refused without being opened for reading, so it never blocks), over 4 KiB, not JSON, nested too deeply,
    or not an object holding ``path`` (text) and ``pid`` (int)."""
    try:
        rec = load_json(path, "registry entry", limit=4096)
    except (OSError, ValueError):   # JSONFileError (RecursionError included) is a ValueError
        return None
    ok = isinstance(rec, dict) and isinstance(rec.get("path"), str) and type(rec.get("pid")) is int \
        and 0 < rec["pid"] <= PID_MAX   # a pid no process can have matches nothing: the entry is pruned
    return rec if ok else None


def _registered(path: Path, pid: int) -> bool:
    """Did process ``pid`` of feedlab make ``path`` (a registry entry for exactly this path and pid)?"""
    rec = _read_entry(entry(path))
    if rec is None:
        return False
    full = os.path.join(os.path.realpath(path.parent), path.name)
    return isinstance(rec, dict) and rec.get("path") == full and rec.get("pid") == pid


def _prune_registry() -> None:
    """Drop the entries of processes that are gone whose temporary is gone too (put in place
    by a caller that did not :func:`release` it)."""
    for e in _entries():
        rec = _read_entry(e.path)   # None: unreadable, not an entry anything can match
        if rec is None or (not os.path.lexists(rec["path"]) and not _pid_alive(rec["pid"])):
            try:
                os.unlink(e.path)
            except OSError:
                pass


def _entries() -> list:
    out = []
    for registry in registries():
        try:
            out.extend(os.scandir(registry))
        except OSError:
            continue
    return out


def remove_mine() -> list[Path]:
    """Remove every temporary this process registered and has not put in place (a signal stops it: nothing
    half-written is left, whatever was unwinding). Returns what was removed."""
    removed = []
    for e in _entries():
        rec = _read_entry(e.path)   # never blocks (a FIFO entry), never raises: this runs on the signal path
        if rec is None or rec["pid"] != os.getpid():
            continue
        path = Path(rec["path"])
        if os.path.lexists(path):
            remove(path)
            removed.append(path)
        else:
            release(path)
    return removed


_ORPHAN = re.compile(r"^.+\.(?:tmp|old)-(?P<pid>\d+)-[0-9a-f]{6}$")
ORPHAN_MIN_AGE_S = 600.0


PID_MAX = 4194304   # the largest pid Linux gives (/proc/sys/kernel/pid_max can be set no higher)


def _pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists; a number no process can have (0, negative: a group; past
    :data:`PID_MAX`; too large for the OS) is none, never a signal sent to a group, never an error."""
    if not 0 < pid <= PID_MAX:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError, ValueError):
        return False
    except PermissionError:
        return True
    return True


def sweep_orphans(parent: str | os.PathLike, min_age_s: float = ORPHAN_MIN_AGE_S) -> list[Path]:
    """Remove the temporaries a killed writer left in ``parent``: only entries named
    ``<name>.tmp-<pid>-<6 hex>`` or ``<name>.old-<pid>-<6 hex>`` that a feedlab process made
    (registered by :func:`tmp_sibling` under that pid: a name of that shape the user wrote is
    never touched), whose process is gone and that were last changed ``min_age_s`` ago or
    more. Returns what was removed."""
    parent = Path(parent)
    removed: list[Path] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    now = time.time()
    for e in entries:
        m = _ORPHAN.match(e.name)
        if m is None:
            continue
        pid = int(m.group("pid"))
        try:
            age = now - e.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        if pid == os.getpid() or _pid_alive(pid) or age < min_age_s or not _registered(Path(e.path), pid):
            continue
        remove(Path(e.path))
        removed.append(Path(e.path))
    _prune_registry()
    return removed


#: seconds a killed process's multiprocessing folder is left before a later run sweeps it (its workers die with it)
MP_ORPHAN_MIN_AGE_S = 60.0
#: the deepest socket in multiprocessing's folder: a listener (a DataLoader worker hands a batch's file over there)
MP_SOCKET_TAIL = "/pymp-feedlab.tmp-4194304-c0ffee/listener-XXXXXXXX"


def mp_temp_dir() -> Path:
    """multiprocessing's temporary folder for this process (its listeners, its workers' files), made here as a
    registered temporary (``$TMPDIR/pymp-feedlab.tmp-<pid>-<hex>``) where multiprocessing has made none yet, so the
    one a SIGKILLed feedlab process leaves is swept by a later run (those are swept first); the caller removes it
    (:func:`remove`): multiprocessing's own exit hook is for the folders it makes itself. In ``/tmp`` where
    ``$TMPDIR`` is so long that a socket in it would pass AF_UNIX's 107 bytes (:func:`feedlab.paths.socket_parent`):
    a worker's hand-over failed there with "AF_UNIX path too long" and the doctor waited for a batch 0 that never
    came."""
    import multiprocessing.process

    base = Path(paths.socket_parent(MP_SOCKET_TAIL))
    sweep_orphans(base, min_age_s=MP_ORPHAN_MIN_AGE_S)
    config = multiprocessing.process.current_process()._config   # where multiprocessing.util.get_temp_dir keeps it
    if config.get("tempdir"):
        return Path(config["tempdir"])
    folder = tmp_sibling(base / "pymp-feedlab")
    folder.mkdir(mode=0o700)
    config["tempdir"] = str(folder)
    return folder


def mp_sockets_fit() -> Path | None:
    """Where ``$TMPDIR`` is too long for multiprocessing's sockets (:func:`mp_temp_dir`) and multiprocessing has
    no folder yet, its folder is made now in ``/tmp`` and removed at this process's exit (multiprocessing's exit
    hook, as for its own); returns it. None (nothing done) where the sockets fit: multiprocessing makes its own
    folder when it needs one, as ever."""
    import multiprocessing.process
    import multiprocessing.util
    import tempfile

    if multiprocessing.process.current_process()._config.get("tempdir") or \
            paths.socket_parent(MP_SOCKET_TAIL) == tempfile.gettempdir():
        return None
    return mp_folder_owned()


def mp_folder_owned() -> Path:
    """multiprocessing's folder made by this process now (:func:`mp_temp_dir`), before any DataLoader worker forks,
    and removed at its exit (multiprocessing's exit hook, as for its own); returns it. Otherwise each worker makes
    its own ``pymp-*`` for its hand-over listener, which only the worker's clean exit removes: a signal sent to the
    whole group (``kill -- -PGID``, a hang-up) killed the workers and left those folders in $TMPDIR (attack51
    N11b). Forked workers share this one; a SIGKILLed command's is swept by a later run."""
    import multiprocessing.process
    import multiprocessing.util

    made = multiprocessing.process.current_process()._config.get("tempdir")
    if made:
        return Path(made)
    folder = mp_temp_dir()
    multiprocessing.util.Finalize(None, remove, args=(folder,), exitpriority=-100)
    return folder


def remove(path: Path) -> None:
    """Remove a file, link or folder (a temporary), and take it off the registry."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()
    release(path)


def replace_path(tmp: Path, final: Path) -> None:
    """Move a finished ``tmp`` file or directory onto ``final``.

    A directory cannot be ``os.replace``d onto a non-empty one, so an existing
    ``final`` is first renamed aside, then removed once the new one is in place.
    """
    try:
        mode = os.lstat(final).st_mode
    except OSError:
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
        remove(tmp)   # a device, FIFO or socket at the destination is never renamed aside and removed
        raise OSError(f"{final} is {kind_of(mode)}, not a regular file: left as it is, nothing written; "
                      "give the path of a file to write")
    if final.exists() or final.is_symlink():
        old = tmp_sibling(final, "old")
        os.replace(final, old)
        os.replace(tmp, final)
        remove(old)
    else:
        os.replace(tmp, final)
    release(tmp)


#: the largest file a read accepts unless told otherwise ($FEEDLAB_MAX_FILE_BYTES overrides it)
MAX_FILE_BYTES = 1 << 30


def max_file_bytes() -> int:
    """The size bound of one read: ``$FEEDLAB_MAX_FILE_BYTES`` or :data:`MAX_FILE_BYTES`."""
    return paths.env_number("FEEDLAB_MAX_FILE_BYTES", MAX_FILE_BYTES, int, low=1, unit="bytes")


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words ('a FIFO', 'a folder')."""
    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return word
    return "not a regular file"


def write_target_problem(path, flag: str) -> str | None:
    """One line where ``path``, a file a command will write, exists and is not a regular file (a FIFO, a device, a
    folder, a link that leads nowhere): checked before anything is measured (attack60 O1, attack61 W4)."""
    p = Path(path)
    if not (p.exists() or p.is_symlink()) or p.is_file():
        return None
    kind = kind_of(p.stat().st_mode) if p.exists() else "a link that leads nowhere"
    return f"{flag} {path} is {kind}, not a regular file: left as it is, nothing run; give the path of a file to write"


def _refuse_irregular(path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        link = " (a link, followed)" if os.path.islink(path) else ""
        raise OSError(f"{path}{link} is {kind_of(mode)}, not a regular file: only regular files are read "
                      "(replace it with the file itself)")


def open_regular(path: str | os.PathLike, limit: int | None = None):
    """Open ``path`` for binary reading only if it is a regular file of at most ``limit``
    bytes (default :func:`max_file_bytes`); returns the file object. A FIFO, socket or
    device, or a link to one, is refused at once (the link followed, checked before it is
    opened, then opened non-blocking and checked again with ``fstat`` on the descriptor, so it
    never blocks and cannot be swapped in between check and read): ``OSError`` naming the file
    and what it is."""
    limit = max_file_bytes() if limit is None else int(limit)
    _refuse_irregular(path, os.stat(path).st_mode)   # a link to a device is never even opened
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        _refuse_irregular(path, st.st_mode)
        if st.st_size > limit:
            raise OSError(f"{path} is {st.st_size} bytes, over the {limit}-byte bound of one read "
                          "(set FEEDLAB_MAX_FILE_BYTES to allow it)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular_tree(path: str | os.PathLike, limit: int = 10_000) -> None:
    """Refuse a store holding a FIFO, socket or device (a library opening it would block for
    ever): ``OSError`` naming it. Looks at ``path`` and, for a folder, up to ``limit`` entries
    under it (stat only, nothing is opened); stores of one file per sample are checked as each
    file is read (:func:`open_regular`)."""
    path = Path(path)
    seen = 0
    todo = [path]
    while todo and seen < limit:
        p = todo.pop()
        try:
            st = os.stat(p)
        except OSError:
            continue
        seen += 1
        if stat.S_ISDIR(st.st_mode):
            try:
                todo.extend(Path(e.path) for e in os.scandir(p))
            except OSError:
                continue
        elif not stat.S_ISREG(st.st_mode):
            raise OSError(f"{p} is {kind_of(st.st_mode)}, not a regular file: only regular files are read "
                          "(replace it with the file itself)")


def read_regular(path: str | os.PathLike, limit: int | None = None) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes (see :func:`open_regular`)."""
    lim = max_file_bytes() if limit is None else int(limit)
    parts, total = [], 0
    with open_regular(path, lim) as fh:
        want = os.fstat(fh.fileno()).st_size + 1   # its size, and one byte more to see it grew
        while total <= lim:
            part = fh.read(min(want, lim + 1 - total))   # never a buffer of the whole bound at once
            if not part:
                break
            parts.append(part)
            total += len(part)
            want = READ_CHUNK
    if total > lim:  # grew after the check
        raise OSError(f"{path} grew past the {lim}-byte bound of one read while it was read")
    return parts[0] if len(parts) == 1 else b"".join(parts)


class JSONFileError(ValueError):
    """A file :func:`load_json` read is not JSON it can take; ``reason`` is why, in a few words."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def load_json(path: str | os.PathLike, what: str = "", limit: int | None = None):
    """The JSON value in ``path``, read with :func:`read_regular` (``OSError`` for a FIFO, folder, over-large
    file). Not UTF-8, not JSON, or nested too deeply for Python to read (``'[' * 100000``, a RecursionError):
    :class:`JSONFileError` (a ``ValueError``), one line naming the file (``what``: how the caller calls it)."""
    data = read_regular(path, limit)
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError:
        reason = "nested too deeply to read"
    except ValueError as exc:   # JSONDecodeError and UnicodeDecodeError are ValueErrors
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:100]
    raise JSONFileError(f"{path}: {what + ' ' if what else ''}is not valid JSON ({reason})", reason) from None


#: bytes :func:`read_regular` asks for at a time past a file's stated size
READ_CHUNK = 1 << 20


def tree_bytes(path: str | os.PathLike) -> int:
    """Apparent size in bytes of a file, or of every file under a directory."""
    path = Path(path)
    if not path.exists():
        return 0
    if path.is_file():
        return path.stat().st_size
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            total += os.stat(os.path.join(dirpath, name)).st_size
    return total
