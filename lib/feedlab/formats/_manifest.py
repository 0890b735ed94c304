"""What a manifest may say: every field it records has its type, every name it records
(classes, format folders, the checksum file) is a plain relative name inside the set.
:func:`feedlab.formats._common.read_manifest` refuses a manifest that fails this, so nothing
a damaged or hostile manifest names outside the set is ever touched. Re-exported by
:mod:`feedlab.formats._common`."""

from __future__ import annotations

CHECKSUMS = "crc32c.npy"   # (N, 2) uint32: crc32c of lr bytes, of hr bytes, per sample


def plain_name(name) -> bool:
    """A name a set may record for something under its root: one non-empty path component,
    relative, not ``.``/``..``, no separator, no NUL. Nothing else is ever touched."""
    return (isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name
            and "\0" not in name)


def _relative_path(text) -> bool:
    """``lmdb/``, ``npy_mmap/hr.npy``: a relative path made of plain names."""
    if not isinstance(text, str) or not text.strip():
        return False
    parts = [p for p in text.strip().split("/") if p]
    return not text.strip().startswith("/") and bool(parts) and all(plain_name(p) for p in parts)


_INT_FIELDS = ("count", "patch", "scale", "seed", "version", "per_class", "min_size", "max_size", "quality",
               "png_compress_level", "png_bytes", "jpeg_bytes")


def manifest_problem(man: dict) -> str:
    """Why ``man`` is not a manifest data_prep wrote ('' when it is): every field it records
    has its type, every name it records is a plain relative name."""
    kind = man.get("kind")
    if kind is not None and not isinstance(kind, str):
        return f"kind is {type(kind).__name__}, not a string"
    for k in _INT_FIELDS:
        v = man.get(k)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            return f"{k} is {v!r}, not a whole number >= 0"
    for k in ("hr_shape", "lr_shape"):
        v = man.get(k)
        if v is not None and not (isinstance(v, list) and len(v) == 3 and all(
                isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v) and v[2] == 3):
            return f"{k} is {v!r}, not [height, width, 3] of whole numbers > 0"
    for k in ("source", "content_sha256", "dtype", "layout", "built_by"):
        v = man.get(k)
        if v is not None and not isinstance(v, str):
            return f"{k} is {type(v).__name__}, not a string"
    if "flip" in man and not isinstance(man["flip"], bool):
        return f"flip is {man['flip']!r}, not true/false"
    classes = man.get("classes")
    if classes is not None:
        if not isinstance(classes, list):
            return f"classes is {type(classes).__name__}, not a list of folder names"
        bad = [c for c in classes if not plain_name(c)]
        if bad:
            return f"classes names {bad[0]!r}, not a plain folder name inside the set"
        if len(set(classes)) != len(classes):
            return "classes names a folder twice"
    fmts = man.get("formats")
    if fmts is not None:
        if not isinstance(fmts, dict):
            return f"formats is {type(fmts).__name__}, not an object"
        for name, entry in fmts.items():
            if not plain_name(name) or not isinstance(entry, dict):
                return f"formats entry {name!r} is not a format name with an object"
            path = entry.get("path")
            if path is not None and not all(_relative_path(q.strip()) for q in str(path).split("+")) \
                    or (path is not None and not isinstance(path, str)):
                return f"formats.{name}.path {path!r} is not a relative path inside the set"
    ck = man.get("checksums")
    if ck is not None and not (isinstance(ck, dict) and plain_name(ck.get("file", CHECKSUMS))):
        return f"checksums {ck!r} does not name a file inside the set"
    for k in ("sources", "skipped"):
        if k in man and not isinstance(man[k], dict):
            return f"{k} is {type(man[k]).__name__}, not an object"
    return ""
