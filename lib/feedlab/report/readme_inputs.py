"""The committed results checked before ``python -m feedlab.report.readme`` writes anything: one line per result that
cannot be read as written (re-exported by :mod:`feedlab.report.readme`)."""

from __future__ import annotations

import re
from pathlib import Path

from feedlab.errors import one_line
from feedlab.files import JSONFileError, load_json, read_regular
from feedlab.findings import notebook_cells
from feedlab.fingerprint import git_fields
from feedlab.machines import gpu_short_name, machine_dirs
from feedlab.paths import FIGURES_DIR
from feedlab.run_record import missing_files, tracked_files

RESULT_MAX_BYTES = 256 << 20


def _load_json(path: Path):
    try:
        return load_json(path, limit=RESULT_MAX_BYTES)
    except JSONFileError as exc:   # nested too deeply included (attack54 R31)
        raise ValueError(f"{path}: not valid JSON ({exc.reason})") from None


def _check_fingerprint(path: Path, folder: Path) -> str:
    fp = _load_json(path)
    if not isinstance(fp, dict):
        return f"{path}: holds {type(fp).__name__}, not a fingerprint object"
    for k, types in (("gpus", list), ("git", dict), ("packages", dict), ("other_load", dict),
                     ("cpu_usable", int), ("cpu_logical", int), ("memory_bytes", int), ("time_utc", str),
                     ("cpu_model", str), ("started_utc", str)):
        if fp.get(k) is not None and not isinstance(fp[k], types):
            return f"{path}: {k} is {type(fp[k]).__name__}, not {types.__name__}"
    try:   # git.commit/git.tree text, git.dirty true/false (attack56 B53, B54)
        git_fields(fp, str(path))
    except ValueError as exc:
        return str(exc)
    gpus = fp.get("gpus") or []
    if not all(isinstance(g, dict) and isinstance(g.get("name"), str) for g in gpus):
        return f"{path}: gpus is not a list of objects with a name"
    # the folder a result sits in is the machine it names: a stray or renamed folder would
    # become a machine column of its own (the key is computed as machines.machine_key does)
    cores = fp.get("cpu_usable") or fp.get("cpu_logical") or 0
    key = (f"{len(gpus)}x" if len(gpus) > 1 else "") + f"{gpu_short_name(gpus[0]['name'])}-{cores}c" \
        if gpus else f"cpu-{cores}c"
    if folder.name not in (key, fp.get("machine_key")):
        return (f"{folder}: its fingerprint.json is of machine {key!r}, not {folder.name!r}: move the "
                f"results to {folder.parent / key}/ or remove the stray folder")
    return ""


def _check_csv(path: Path) -> str:
    import csv
    import io


    try:
        text = read_regular(path, RESULT_MAX_BYTES).decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"{path}: not UTF-8 text ({exc.reason})"
    if not text.strip():
        return f"{path}: empty"
    if not text.endswith("\n"):
        return f"{path}: truncated (its last line is not complete)"
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        return f"{path}: not a CSV table ({exc})"
    width = len(rows[0])
    for n, row in enumerate(rows[1:], start=2):
        if row and len(row) != width:
            return f"{path}: line {n} has {len(row)} fields, the header {width}: truncated or damaged"
    return ""


def input_problems(figures_dir: Path = FIGURES_DIR) -> list[str]:
    """One line per committed result that cannot be read as written (truncated or unparseable
    ``results.csv``, JSON of the wrong type, a machine folder whose fingerprint names another
    machine). Checked before anything is drawn, written or removed."""
    out: list[str] = []
    tracked = tracked_files(Path(figures_dir))
    for nb_dir in sorted(p for p in Path(figures_dir).iterdir() if p.is_dir() and re.match(r"\d\d_", p.name)):
        for key, folder in machine_dirs(nb_dir.name, figures_dir).items():
            gone = missing_files(folder, tracked)
            if gone:
                path = (folder / gone[0]).relative_to(Path(figures_dir).parent).as_posix()
                out.append(f"record missing: {path}" + (f" (and {len(gone) - 1} more of that record)" if len(gone) > 1
                                                        else "") + f"; restore it (git checkout -- {path})")
                continue
            try:
                fp = folder / "fingerprint.json"
                why = _check_fingerprint(fp, folder) if fp.exists() else f"{folder}: no fingerprint.json"
                res = folder / "results.json"
                if not why and res.exists():
                    r = _load_json(res)
                    if not isinstance(r, dict):
                        why = f"{res}: holds {type(r).__name__}, not a results object"
                    elif r.get("reading") is not None and not (isinstance(r["reading"], str) or (
                            isinstance(r["reading"], list) and all(isinstance(x, str) for x in r["reading"]))):
                        why = f"{res}: reading is not text or a list of lines"
                csv_path = folder / "results.csv"
                if not why and csv_path.exists():
                    why = _check_csv(csv_path)
                executed = folder / f"{nb_dir.name}.executed.ipynb"
                if not why and executed.exists():   # its cells a list of cells as nbformat reads them (attack56 B59, 57 K4)
                    notebook_cells(_load_json(executed), str(executed), each=True)
            except (OSError, ValueError) as exc:
                why = one_line(exc)
            if why:
                out.append(why)
    return out
