"""Pack an SR set into the storage formats, and verify them against the PNGs."""

from __future__ import annotations

import hashlib
import inspect
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from feedlab import formats as F
from feedlab.errors import ChecksumError
from feedlab.files import sweep_orphans
from feedlab.formats._common import (
    CHECKSUMS,
    MANIFEST,
    atomic_output,
    checksum_rows,
    read_manifest,
    write_json_atomic,
)
from feedlab.procgroup import signals_deferred

from .errors import DataPrepError, VerifyError, write_failed
from .progress import Tracked, track

IN_MEMORY_LIMIT = 2 << 30  # decode the PNGs once into RAM below this size


def parse_formats(spec: str | Iterable[str] | None, *, default_all: bool = True) -> list[str]:
    """``"all"``, ``"lmdb,hdf5"`` or a list -> validated packable format names (order kept).

    ``png`` is accepted and ignored (the PNGs are the source, always present)."""
    if spec is None:
        return list(F.PACKABLE) if default_all else []
    items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else [str(s).strip() for s in spec]
    items = [s for s in items if s]
    out: list[str] = []
    for s in items:
        if s == "all":
            out.extend(F.PACKABLE)
        elif s == "png":
            continue
        elif s in F.PACKABLE:
            out.append(s)
        else:
            raise DataPrepError(f"unknown format {s!r}; supported: {', '.join(F.PACKABLE)} (or 'all')")
    return list(dict.fromkeys(out))


def sr_manifest(root) -> dict:
    root = Path(root)
    if root.exists() and not root.is_dir():   # a sample file: "does not exist" read wrong (attack58 W8)
        raise DataPrepError(f"{root} is a file, not a data set folder: give the folder `python -m data_prep sr` "
                            "built (the one holding manifest.json)")
    if not root.is_dir():
        raise DataPrepError(f"{root} does not exist: build it with `python -m data_prep sr --out {root}`")
    man = read_manifest(root)
    if man.get("kind") != "sr":
        raise DataPrepError(f"{root} is not an SR set (no SR manifest.json): build it with `python -m data_prep sr`")
    return man


class _Reference(Sequence):
    """The PNG samples as a sized sequence, decoded once into RAM when small enough."""

    def __init__(self, root: Path, man: dict, engine: str = "local"):
        try:
            self.ds = F.PngDataset(root)
        except ChecksumError as exc:
            raise self._changed(exc, root) from None
        n = len(self.ds)
        if n != man["count"]:
            raise DataPrepError(f"{root}: manifest says {man['count']} samples, found {n} PNGs")
        per = int(np.prod(man["hr_shape"])) + int(np.prod(man["lr_shape"]))
        self.cached = n * per <= IN_MEMORY_LIMIT
        self.lr = self.hr = None
        if self.cached:
            self.lr = np.empty((n, *man["lr_shape"]), np.uint8)
            self.hr = np.empty((n, *man["hr_shape"]), np.uint8)
            digest = hashlib.sha256()
            if engine == "ray":
                from .ray_engine import decode_all

                self.lr[:], self.hr[:] = decode_all(root, n, man["lr_shape"], man["hr_shape"])
            for i in track(range(n), n, f"decode {root.name} PNGs"):
                if engine == "ray":
                    digest.update(self.lr[i].tobytes())
                    digest.update(self.hr[i].tobytes())
                    continue
                lr, hr = self._png(i)
                if lr.shape != self.lr.shape[1:] or hr.shape != self.hr.shape[1:]:
                    raise DataPrepError(f"png: sample {i} has shapes {lr.shape}, {hr.shape}, "
                                        f"manifest says {man['lr_shape']}, {man['hr_shape']}")
                self.lr[i] = lr
                self.hr[i] = hr
                digest.update(self.lr[i].tobytes())
                digest.update(self.hr[i].tobytes())
            if man.get("content_sha256") and digest.hexdigest() != man["content_sha256"]:
                raise VerifyError(f"png: the PNGs under {root} no longer match the manifest's content_sha256")

    @staticmethod
    def _changed(exc: ChecksumError, root) -> VerifyError:
        """The PNGs are the source every format is checked against and packed from: one that no longer matches the
        checksum recorded when the set was built is named with the one fix (the advice to verify or repack it
        pointed back at this very command)."""
        what = str(exc).split(" does not match", 1)[0]
        return VerifyError(f"{what} no longer matches the checksum recorded when the set was built: the PNGs, the "
                           "source every format is checked against, changed since; rebuild the set with "
                           f"`python -m data_prep sr --out {root}` (or restore the PNGs)")

    def _png(self, i: int):
        try:
            return self.ds._read(i)
        except ChecksumError as exc:
            raise self._changed(exc, self.ds.root) from None
        except Exception as exc:
            raise DataPrepError(f"png: sample {i} ({self.ds._sample_path(i)}) cannot be decoded "
                                f"({type(exc).__name__}: {exc}): rebuild the set with `python -m data_prep sr`") from None

    def checksums(self) -> np.ndarray:
        """The (N, 2) uint32 crc32c table of the reference samples."""
        table = np.empty((len(self), 2), np.uint32)
        for i in range(len(self)):
            lr, hr = self[i]
            table[i, 0] = checksum_rows(np.asarray(lr)[None])[0]
            table[i, 1] = checksum_rows(np.asarray(hr)[None])[0]
        return table

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if self.cached:
            return self.lr[i], self.hr[i]
        return self._png(i)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]


def _opts_for(writer, opts: dict) -> dict:
    """The options this writer names explicitly (``chunk_len`` reaches zarr only, ...)."""
    names = {p.name for p in inspect.signature(writer).parameters.values()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in opts.items() if v is not None and k in names}


def pack(root, formats: str | Iterable[str] | None = "all", *, log: Callable[[str], None] = print,
         engine: str = "local", **writer_opts) -> dict:
    """Write each format under ``root`` and record it in ``manifest.json``
    (path, bytes on disk, write seconds). Returns the updated manifest.
    ``engine="ray"`` decodes the PNGs in parallel on a local Ray (``data_prep.ray_engine``) when the
    set fits in RAM (``IN_MEMORY_LIMIT``); a larger set is decoded here, sample by sample, as before."""
    if engine not in ("local", "ray"):
        raise DataPrepError(f"--engine {engine!r}: one of local, ray")
    root = Path(root)
    fmts = parse_formats(formats)
    man = sr_manifest(root)
    if writer_opts.get("chunk_len") is not None and int(writer_opts["chunk_len"]) < 1:
        raise DataPrepError(f"--chunk-len must be >= 1, got {writer_opts['chunk_len']}")
    if not fmts and (root / CHECKSUMS).is_file():
        return man
    for p in sweep_orphans(root):
        log(f"removed {p.name}, left by a killed run")
    ref = _Reference(root, man, engine)
    if not (root / CHECKSUMS).is_file():  # a set built before checksums: add them
        man = add_checksums(root, ref, log=log)
    _refuse_foreign(root, fmts, man)
    for fmt in fmts:
        spec = F.get_format(fmt)
        opts = _opts_for(spec.writer, writer_opts)
        t0 = time.perf_counter()
        try:
            try:
                F.write(fmt, root, Tracked(ref, f"pack {fmt}"), **opts)
            except Exception as exc:  # a known library error (EFBIG, ENOSPC, lmdb.Error, h5py's): one line
                err = write_failed(fmt, root / spec.path.rstrip("/"), exc)
                if err is None:
                    raise
                raise err from None
            dt, size = time.perf_counter() - t0, spec.bytes_on_disk(root)   # the tree walked before the hold
            with signals_deferred():   # the manifest records what is in place; a signal now acts just after
                man = _record(root, fmt, spec, dt, size)
        except (KeyboardInterrupt, SystemExit):   # a signal (procgroup.Signalled, Ctrl-C) anywhere after the
            _record_if_whole(root, fmt, spec, time.perf_counter() - t0)   # format was put in place: recorded
            raise
        log(f"packed {fmt:9s} {size / 2**20:8.1f} MiB in {dt:6.2f} s")
    return man


def _record(root: Path, fmt: str, spec, dt: float, size: int) -> dict:
    """``fmt`` recorded in the set's manifest (re-read first: another packer may have recorded a format
    meanwhile); the manifest returned."""
    man = read_manifest(root)
    man.setdefault("formats", {})[fmt] = {
        "path": spec.path, "bytes": int(size), "write_seconds": round(dt, 3),
        "content_sha256": man.get("content_sha256"),
    }
    write_json_atomic(root / MANIFEST, man)
    return man


def _record_if_whole(root: Path, fmt: str, spec, dt: float) -> None:
    """A write stopped by a signal: where its format is in place (the writers rename a finished temporary into
    place, their last step) and the manifest does not record it, it is recorded (a second signal meanwhile acts
    just after)."""
    final = root / spec.path.rstrip("/")
    if not final.exists() or fmt in read_manifest(root).get("formats", {}):
        return
    size = spec.bytes_on_disk(root)
    with signals_deferred():
        if fmt not in read_manifest(root).get("formats", {}):
            _record(root, fmt, spec, dt, size)


def _refuse_foreign(root: Path, fmts: list[str], man: dict) -> None:
    """A format is written over only what the manifest records as that format: a folder or
    file of the same name that the set did not write (the user's own ``npy/``) is refused."""
    from .outdir import format_entries

    recorded = man.get("formats") or {}
    for fmt in fmts:
        if fmt in recorded:
            continue
        for name in sorted(format_entries(fmt)):
            p = root / name
            if p.exists() or p.is_symlink():
                raise DataPrepError(f"{p} already exists and the set's manifest does not record it as {fmt}: "
                                    f"data_prep did not write it and will not replace it; move it away, "
                                    f"or pack into a set of its own")


def add_checksums(root, ref: "_Reference | None" = None, *, log: Callable[[str], None] = print) -> dict:
    """Write the per-sample crc32c table of a set built before checksums existed."""
    from .sr import CHECKSUMS_ENTRY

    root = Path(root)
    man = sr_manifest(root)
    ref = ref if ref is not None else _Reference(root, man)
    table = ref.checksums()
    with atomic_output(root / CHECKSUMS, is_dir=False) as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, table, allow_pickle=False)
    man = read_manifest(root)
    man["checksums"] = CHECKSUMS_ENTRY
    write_json_atomic(root / MANIFEST, man)
    log(f"wrote per-sample checksums ({CHECKSUMS}) for {len(table)} samples")
    return man


#: seconds one sample may take in ``verify`` before it gives up naming it (``--timeout``)
VERIFY_STALL_S = 120.0


def verify(root, formats: str | Iterable[str] | None = None, *, log: Callable[[str], None] = print,
           max_report: int = 5, stall_s: float | None = VERIFY_STALL_S) -> dict[str, int]:
    """Re-read every sample of each packed format and compare it bit-exact to the PNGs.

    ``formats=None`` checks every format the manifest records. Raises
    ``VerifyError`` naming each failing format and the first failing indices.
    A sample that takes longer than ``stall_s`` seconds raises ``DeadlineError`` naming it.
    Returns ``{format: samples checked}``."""
    from feedlab.errors import DeadlineError, deadline

    root = Path(root)
    man = sr_manifest(root)
    fmts = parse_formats(formats) if formats is not None else [f for f in man.get("formats", {}) if f in F.PACKABLE]
    ref = _Reference(root, man)
    failures: list[str] = []
    checked: dict[str, int] = {}
    for fmt in fmts:
        try:
            ds = F.open_dataset(root, fmt)
        except Exception as exc:
            failures.append(f"{fmt}: cannot open ({type(exc).__name__}: {exc})")
            continue
        if len(ds) != len(ref):
            failures.append(f"{fmt}: {len(ds)} samples, PNGs have {len(ref)}")
            continue
        bad: list[str] = []
        nbad = 0
        where = [f"verify {fmt} under {root}"]
        with deadline(stall_s, lambda: where[0], "a file that never answers? check it, or --timeout 0") as d:
            for i in track(range(len(ref)), len(ref), f"verify {fmt}"):
                where[0] = f"verify {fmt}: sample {i} under {root}"
                d.reset()
                want_lr, want_hr = ref[i]
                try:
                    lr, hr = ds[i]
                    ok = (lr.dtype == np.uint8 and hr.dtype == np.uint8 and np.array_equal(lr, want_lr)
                          and np.array_equal(hr, want_hr))
                    why = "differs from the PNG"
                except DeadlineError:
                    raise
                except Exception as exc:  # a corrupt value may fail to decode at all
                    ok, why = False, f"unreadable ({type(exc).__name__}: {exc})"
                if not ok:
                    nbad += 1
                    if len(bad) < max_report:
                        bad.append(f"index {i} {why}")
        close = getattr(ds, "close", None)
        if close:
            close()
        checked[fmt] = len(ref)
        if nbad:
            failures.append(f"{fmt}: {nbad} bad sample(s): " + "; ".join(bad))
        else:
            log(f"verified {fmt:9s} {len(ref)} samples bit-exact")
    if failures:
        raise VerifyError("verify failed:\n  " + "\n  ".join(failures))
    return checked
