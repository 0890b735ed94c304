"""LMDB: one key per sample, value = fixed header + lr bytes + hr bytes.

Layout (``lmdb/`` with lz4, ``lmdb_raw/`` without; both are LMDB env dirs):

* key: the sample index as 8 bytes, big-endian unsigned (so LMDB's byte order
  is index order and a cursor walks samples in order). The key ``b"__len__"``
  holds the count as ASCII.
* value: a 24-byte little-endian header ``HEADER`` then the payload:

  ====== ===== =====================================================
  offset bytes meaning
  ====== ===== =====================================================
  0      4     magic ``b"FLSR"``
  4      1     version (1)
  5      1     dtype code (1 = uint8)
  6      1     compression (0 = raw, 1 = lz4.frame)
  7      1     reserved (0)
  8      6     lr shape H, W, C (uint16 each)
  14     6     hr shape H, W, C (uint16 each)
  20     4     uncompressed payload length (uint32)
  ====== ===== =====================================================

  payload = ``lr.tobytes() + hr.tobytes()``, raw or lz4.frame-compressed.
  No pickle anywhere: a value is readable from any language.

The writer starts with a small ``map_size`` and doubles it on
``lmdb.MapFullError`` (retrying the transaction), so nobody guesses a size.
The reader opens the environment lazily in each process (``readonly=True,
lock=False, readahead=False, meminit=False``), one env per path shared by the
datasets of that process and closed before any ``fork`` (py-lmdb refuses a
second open of the same env in one process, and a forked child inherits that
refusal), and reads with ``buffers=True``: one copy from the mapped page into
the destination array (plus lz4 decompression for ``lmdb``).

Deadlines: a read blocked inside LMDB (its reads are page faults of a memory map), e.g. on a hung
network mount, never answers the SIGALRM of :func:`feedlab.errors.deadline`. From the command line
the doctor bounds it from a second process (:func:`feedlab.doctor.script_watch.watch_deadline`: one
line, its processes stopped); a library caller's deadline cannot, and says nothing until the read
returns.
"""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path
from typing import Sequence

import lmdb
import lz4.frame
import numpy as np

from ._common import FormatError, SRDataset, atomic_output, files_in, first_shapes, iter_checked, tree_bytes

MAGIC = b"FLSR"
VERSION = 1
DTYPE_UINT8 = 1
COMP_RAW = 0
COMP_LZ4 = 1
HEADER = struct.Struct("<4sBBBB3H3HI")
HEADER_SIZE = HEADER.size  # 24
LEN_KEY = b"__len__"
INITIAL_MAP_SIZE = 1 << 20  # 1 MiB: grown by doubling as needed
TXN_SAMPLES = 256

DIRS = {"lmdb": "lmdb", "lmdb_raw": "lmdb_raw"}


def key(i: int) -> bytes:
    return int(i).to_bytes(8, "big")


def encode_value(lr: np.ndarray, hr: np.ndarray, compress: bool) -> bytes:
    payload = lr.tobytes() + hr.tobytes()
    head = HEADER.pack(MAGIC, VERSION, DTYPE_UINT8, COMP_LZ4 if compress else COMP_RAW, 0,
                       *lr.shape, *hr.shape, len(payload))
    if compress:
        payload = lz4.frame.compress(payload, store_size=True, content_checksum=True)
    return head + payload


def decode_header(buf) -> tuple[int, tuple, tuple, int]:
    magic, ver, dt, comp, _r, lh, lw, lc, hh, hw, hc, n = HEADER.unpack_from(buf, 0)
    if magic != MAGIC or ver != VERSION or dt != DTYPE_UINT8:
        raise FormatError(f"lmdb: bad value header (magic={magic!r}, version={ver}, dtype={dt})")
    return comp, (lh, lw, lc), (hh, hw, hc), n


def _put_batch(env: lmdb.Environment, items: list[tuple[bytes, bytes]]) -> None:
    """Write one transaction; on MapFullError double the map and retry."""
    while True:
        try:
            with env.begin(write=True) as txn:
                for k, v in items:
                    txn.put(k, v)
            return
        except lmdb.MapFullError:
            env.set_mapsize(env.info()["map_size"] * 2)


def write(root, samples, compress: bool = True, map_size: int = INITIAL_MAP_SIZE,
          txn_samples: int = TXN_SAMPLES, name: str | None = None) -> Path:
    """Write an LMDB env to ``root/lmdb`` (or ``root/lmdb_raw`` when not compressed).

    ``map_size`` is only the starting size; it doubles whenever full.
    """
    root = Path(root)
    final = root / (name or ("lmdb" if compress else "lmdb_raw"))
    lr_shape, hr_shape = first_shapes(samples)
    with atomic_output(final, is_dir=True) as tmp:
        env = lmdb.open(str(tmp), map_size=int(map_size), subdir=True, meminit=False,
                        map_async=True, sync=False, metasync=False)
        try:
            items: list[tuple[bytes, bytes]] = []
            n = 0
            for i, (lr, hr) in enumerate(iter_checked(samples, lr_shape, hr_shape, len(samples), "lmdb")):
                items.append((key(i), encode_value(lr, hr, compress)))
                n = i + 1
                if len(items) >= txn_samples:
                    _put_batch(env, items)
                    items = []
            items.append((LEN_KEY, str(n).encode()))
            _put_batch(env, items)
            env.sync(True)
        finally:
            env.close()
    return final


def write_raw(root, samples, **opts) -> Path:
    return write(root, samples, compress=False, **opts)


def open_env(path: str) -> lmdb.Environment:
    """Open read-only, after checking that ``data.mdb`` holds every page the environment's
    own meta page counts: reading a page past the end of a truncated file through the
    memory map kills the process with SIGBUS, so a short file is a named error instead."""
    data = os.path.join(path, "data.mdb")
    try:
        size = os.stat(data).st_size
        env = lmdb.open(path, readonly=True, lock=False, readahead=False, meminit=False,
                        subdir=True, max_readers=2048)
    except lmdb.Error as exc:
        raise FormatError(f"lmdb: cannot open {path} ({type(exc).__name__}: {exc}); "
                          "repack it with `python -m data_prep pack <set> --to lmdb,lmdb_raw`") from None
    need = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    if size < need:
        env.close()
        raise FormatError(f"lmdb: {data} is truncated ({size} bytes, its pages need {need}); "
                          "repack it with `python -m data_prep pack <set> --to lmdb,lmdb_raw`")
    return env


# One read-only env per path per process, shared by every dataset on that path.
# py-lmdb (>= 3) refuses to open an environment twice in one process, and a
# forked child inherits that bookkeeping: if the parent still has the env open,
# the child cannot open its own (seen by the 08 notebook: a worker's open failed
# with "already open in this process" once the parent had read a sample).
# So the envs are closed just before any fork
# (the parent reopens lazily, ~0.1 ms once) and each process opens its own.
_ENVS: dict[str, tuple[int, lmdb.Environment, int]] = {}  # path -> (pid, env, inode of data.mdb)


def _inode(path: str) -> int:
    try:
        return os.stat(os.path.join(path, "data.mdb")).st_ino
    except OSError:
        return -1


_ENVS_LOCK = threading.Lock()  # threads of one process (loader="threads") open the env once, not each


def _env_for(path: str, check_inode: bool = False) -> lmdb.Environment:
    with _ENVS_LOCK:
        return _env_for_locked(path, check_inode)


def _env_for_locked(path: str, check_inode: bool) -> lmdb.Environment:
    entry = _ENVS.get(path)
    pid = os.getpid()
    if entry is not None and entry[0] == pid and not (check_inode and entry[2] != _inode(path)):
        return entry[1]
    if entry is not None and entry[0] == pid:  # files replaced (repacked): drop the stale env
        entry[1].close()
    env = open_env(path)
    _ENVS[path] = (pid, env, _inode(path))
    return env


def close_envs() -> None:
    """Close this process's cached read-only envs (they reopen on next use)."""
    pid = os.getpid()
    for path, (owner, env, _ino) in list(_ENVS.items()):
        if owner == pid:
            env.close()
        del _ENVS[path]  # an env inherited from a parent is dropped, never closed


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=close_envs)


class LmdbDataset(SRDataset):
    fmt = "lmdb"

    def __init__(self, root, as_tensor: bool = False, name: str = "lmdb"):
        super().__init__(root, as_tensor)
        self.fmt = name
        self.path = self.root / name
        if not (self.path / "data.mdb").is_file():
            raise FileNotFoundError(f"{name}: no LMDB env at {self.path}")
        self._path = str(self.path)
        # read count and shapes; leave no env open unless this process already had one
        cached = self._path in _ENVS and _ENVS[self._path][0] == os.getpid()
        env = _env_for(self._path, check_inode=True) if cached else open_env(self._path)
        try:
            with env.begin(buffers=False) as txn:
                n = txn.get(LEN_KEY)
                if n is None:
                    raise FormatError(f"{name}: {self.path} has no {LEN_KEY!r} key")
                self._n = int(n)
                first = txn.get(key(0)) if self._n else None
        finally:
            if not cached:
                env.close()
        if first is not None:
            _c, self.lr_shape, self.hr_shape, _ = decode_header(first)
            self._lr_size = int(np.prod(self.lr_shape))
            self._hr_size = int(np.prod(self.hr_shape))

    def _environment(self) -> lmdb.Environment:
        """The env to read from. Subclasses (the concurrency experiments) may set
        ``self._env`` to an object with ``get()`` to use another opening policy."""
        handle = self.__dict__.get("_env")
        if handle is not None:
            return handle.get()
        return _env_for(self._path)

    def _decode_into(self, buf, i: int, lr: np.ndarray, hr: np.ndarray) -> None:
        comp, lr_shape, hr_shape, n = decode_header(buf)
        if lr_shape != tuple(self.lr_shape) or hr_shape != tuple(self.hr_shape):
            raise FormatError(f"{self.fmt}: sample {i} has shapes {lr_shape}, {hr_shape}")
        body = memoryview(buf)[HEADER_SIZE:]
        if comp == COMP_LZ4:
            body = memoryview(lz4.frame.decompress(body, return_bytearray=True))
        elif comp != COMP_RAW:
            raise FormatError(f"{self.fmt}: sample {i} has unknown compression {comp}")
        if len(body) != n or n != self._lr_size + self._hr_size:
            raise FormatError(f"{self.fmt}: sample {i} payload is {len(body)} bytes, expected {n}")
        # one copy from the mapped page (or the decompressed buffer) into the destination
        np.copyto(lr, np.frombuffer(body, np.uint8, self._lr_size, 0).reshape(lr.shape))
        np.copyto(hr, np.frombuffer(body, np.uint8, self._hr_size, self._lr_size).reshape(hr.shape))

    def _get(self, txn, i: int):
        buf = txn.get(key(i))
        if buf is None:
            raise FormatError(f"{self.fmt}: key for sample {i} is missing")
        return buf

    def _read(self, i: int):
        lr = np.empty(self.lr_shape, np.uint8)
        hr = np.empty(self.hr_shape, np.uint8)
        with self._environment().begin(buffers=True) as txn:
            self._decode_into(self._get(txn, i), i, lr, hr)
        return lr, hr

    def _sample_path(self, i: int) -> str:
        return f"{self.path}, key {i}"

    def __getitems__(self, indices: Sequence[int]) -> list:
        """All of a batch in one read transaction."""
        lr_b, hr_b = self.read_batch(indices)
        return [self._wrap(lr_b[k], hr_b[k]) for k in range(len(lr_b))]

    def read_batch(self, indices: Sequence[int], out=None):
        """One read transaction (``buffers=True``: each value is a view of its mapped page);
        each value's bytes are copied once, straight into its batch slots: a raw value whose
        header is the expected one by two memoryview slice assignments (views, no per-sample
        numpy objects, no intermediate buffer); an lz4 value with the expected header is
        decompressed (python-lz4 cannot decompress into a caller's buffer: one fresh buffer)
        and that buffer copied into the slots the same way. Anything else (a bad header, a
        non-contiguous ``out``) goes through ``_decode_into``, which names the sample."""
        lr_b, hr_b = self._batch_out(len(indices), out)
        idx = self._indices(indices).tolist()
        fast = lr_b.flags.c_contiguous and hr_b.flags.c_contiguous and len(idx) > 0
        if fast:
            lr_mv = memoryview(lr_b.reshape(-1))  # flat byte views of the batch slots
            hr_mv = memoryview(hr_b.reshape(-1))
            ls, hs = self._lr_size, self._hr_size
            raw_head = self._raw_header()
            lz4_head = self._raw_header(COMP_LZ4)
            end = HEADER_SIZE + ls + hs
            decompress = lz4.frame.decompress
        i = idx[0] if idx else -1
        try:
            with self._environment().begin(buffers=True) as txn:
                get = txn.get
                for k, i in enumerate(idx):
                    buf = get(i.to_bytes(8, "big"))
                    if buf is None:
                        raise FormatError(f"{self.fmt}: key for sample {i} is missing")
                    if fast:
                        head = buf[:HEADER_SIZE].tobytes()
                        if head == raw_head and len(buf) == end:
                            lr_mv[k * ls:(k + 1) * ls] = buf[HEADER_SIZE:HEADER_SIZE + ls]
                            hr_mv[k * hs:(k + 1) * hs] = buf[HEADER_SIZE + ls:end]
                            continue
                        if head == lz4_head:
                            body = memoryview(decompress(buf[HEADER_SIZE:]))
                            if len(body) == ls + hs:
                                lr_mv[k * ls:(k + 1) * ls] = body[:ls]
                                hr_mv[k * hs:(k + 1) * hs] = body[ls:]
                                continue
                    self._decode_into(buf, i, lr_b[k], hr_b[k])
        except Exception as exc:
            raise self._read_error(i, exc) from exc
        self._verify_batch(idx, lr_b, hr_b)
        return lr_b, hr_b

    @property
    def decode_name(self) -> str:
        return "copy" if self.fmt.endswith("_raw") else "lz4"

    def read_raw(self, i: int) -> bytes:
        """The stored value of sample ``i`` (header + payload), copied out of the map."""
        i = self._index(i)
        with self._environment().begin(buffers=True) as txn:
            return bytes(self._get(txn, i))

    def decode_raw(self, raw):
        lr = np.empty(self.lr_shape, np.uint8)
        hr = np.empty(self.hr_shape, np.uint8)
        self._decode_into(raw, -1, lr, hr)
        return lr, hr

    def store_files(self, indices):
        return files_in(self.path)

    def _raw_header(self, comp: int = COMP_RAW) -> bytes:
        """The header every well-formed value of this store carries (``comp``: raw or lz4)."""
        cache = self.__dict__.setdefault("_heads", {})
        head = cache.get(comp)
        if head is None:
            head = HEADER.pack(MAGIC, VERSION, DTYPE_UINT8, comp, 0, *self.lr_shape, *self.hr_shape,
                               self._lr_size + self._hr_size)
            cache[comp] = head
        return head

    def close(self) -> None:
        """Close the env for this path in this process (any dataset on it reopens lazily)."""
        entry = _ENVS.pop(self._path, None)
        if entry is not None and entry[0] == os.getpid():
            entry[1].close()


class EnvOpener:
    """Picklable opener ``() -> read-only env`` (for custom handle policies)."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self):
        return open_env(self.path)


class LmdbRawDataset(LmdbDataset):
    def __init__(self, root, as_tensor: bool = False):
        super().__init__(root, as_tensor=as_tensor, name="lmdb_raw")


def bytes_on_disk(root, name: str = "lmdb") -> int:
    return tree_bytes(Path(root) / name)


def bytes_on_disk_raw(root) -> int:
    return bytes_on_disk(root, "lmdb_raw")
