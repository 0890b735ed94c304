"""The runner's records: where a notebook's record lands (:func:`destination`), checked before
anything runs (:func:`check_destination`: a folder holding anything but that notebook's record, a
folder inside ``figures/`` that is not the runner's own layout, a gpu run into a machine folder
without a GPU are refused), put in place without touching anything else (:func:`install_record`),
one run at a time into it (:func:`run_lock`), a failed run's folder kept outside the committed
results (:func:`keep_failed`), and this machine's results carried in one tar (:func:`tar_results`,
checked writable before anything runs: :func:`check_tar_dest`), and the figure files a record's
cells saved but did not display shown in it (:func:`show_figure_files`). Used by :mod:`feedlab.run`."""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import sys
from contextlib import contextmanager
from pathlib import Path

from feedlab import files, paths
from feedlab.findings import notebook_cells
from feedlab.machines import fingerprint_key, key_has_gpu, key_names_gpu, machine_key, usable_cores
from feedlab.paths import FIGURES_DIR, figure_dir, outside_figures, rel
from feedlab.results import atomic_write


def restore_env(before: dict[str, str | None]) -> None:
    """Put the environment variables of ``before`` back as they were (None: unset)."""
    for k, v in before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def tar_results(dest: Path, root: Path | None = None, key: str | None = None,
                extra: dict[str, Path] | None = None) -> int:
    """Write ``dest``, a tar of ``root/*/<key>/`` (this machine's results), whole or not at all;
    names in it start at ``root``'s parent (``figures/01_x/h100-16c/...``). ``extra`` adds
    folders under names of their own (a stopped or failed run's record: ``runs/failed/<key>/<name>``).
    Returns the result folders."""
    import tarfile

    from feedlab.formats._io import atomic_output

    root = Path(root or paths.FIGURES_DIR)
    key = key or machine_key()
    folders = sorted(p for p in root.glob(f"*/{key}") if p.is_dir())
    dest = Path(dest)
    with atomic_output(dest, is_dir=False) as tmp:    # tarfile writes to a path: the streamed atomic write
        with tarfile.open(tmp, "w:gz" if dest.name.endswith(".gz") else "w") as tf:
            for folder in folders:
                tf.add(folder, arcname=folder.relative_to(root.parent).as_posix())
            for arcname, folder in (extra or {}).items():
                if Path(folder).is_dir():
                    tf.add(folder, arcname=arcname)
    return len(folders)


#: the characters of a record folder's name its lock file keeps (the rest is named by a hash of its path)
LOCK_NAME_CHARS = 64
#: what the runner adds to a record folder's name for its temporary and the old record it swaps out
SIBLING_SUFFIX = ".tmp-4194304-000000"


def name_problem(final: Path, flag: str = "") -> str:
    """"" where the runner can make its siblings of ``final`` (``<name>.tmp-<pid>-<hex>``); else one line: a
    folder name so long that its temporary's would pass the file system's limit on a name (a run that made
    it only to fail writing its first file)."""
    parent = next((p for p in (final.parent, *final.parent.parents) if p.is_dir()), Path("/"))
    try:
        most = os.pathconf(parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        most = 255
    size = len(os.fsencode(final.name)) + len(SIBLING_SUFFIX)
    if size <= most:
        return ""
    return (f"{flag or rel(final)}: the folder name is {len(os.fsencode(final.name))} bytes; the runner's temporary "
            f"beside it needs {len(SIBLING_SUFFIX)} more, over this file system's limit of {most} bytes a name: "
            f"give a name of at most {most - len(SIBLING_SUFFIX)} bytes")


class RunLocked(OSError):
    """Another run of this notebook into this folder is under way."""


def destination(name: str, profile: str, params: dict, out_root: Path | None) -> Path:
    """Where a notebook's record lands: ``--out-root``/<name>, ``-p out_dir``, or its figure folder."""
    if out_root:
        return out_root / name
    if params.get("out_dir"):
        return Path(params["out_dir"])
    return figure_dir(name, "", profile, create=False, committed=True,  # the runner's own folder
                      machine=machine_key())


#: the files a notebook's record holds besides ``<name>.executed.ipynb``: its tables and payloads
#: (``results.csv``, ``results.json``, ``fingerprint.json``, ``STOPPED.json``, a notebook's own
#: ``*.csv`` / ``*.json``) and its figures (``*.png``, ``*.svg``: ``plots.save_figure``)
RECORD_SUFFIXES = (".json", ".csv", ".png", ".svg")


#: the list of the files a run wrote, kept in its record: only those are ever replaced or removed
MANIFEST = ".feedlab-record.json"


def is_record_file(name: str, path: Path) -> bool:
    """``path`` has the shape of a file of notebook ``name``'s record (a plain file, not a link or folder)."""
    return (path.is_file() and not path.is_symlink() and not path.name.startswith(".")
            and (path.name == f"{name}.executed.ipynb" or path.suffix in RECORD_SUFFIXES))


def written_by_run(name: str, final: Path) -> set[str]:
    """The files of ``final`` that a run of ``name`` wrote: those its manifest lists; a record from before
    manifests counts by its files' shape only inside ``figures/`` (the runner's own committed folders),
    never in a folder a user named, where a ``holiday.png`` beside an old record is the user's."""
    listed = None
    try:
        listed = set(files.load_json(final / MANIFEST)["files"])   # a FIFO: no manifest, never a wait
    except (OSError, ValueError, KeyError, TypeError):
        pass
    legacy = listed is None and final.resolve().is_relative_to(FIGURES_DIR.resolve())
    return {p.name for p in (final.iterdir() if final.is_dir() else [])
            if is_record_file(name, p) and (p.name in listed if listed is not None else legacy)}


def write_manifest(folder: Path) -> None:
    """List the files a finished run wrote (``folder``: its temporary folder, before it is put in place)."""
    atomic_write(folder / MANIFEST, json.dumps({"files": sorted(p.name for p in folder.iterdir()
                                                                  if p.name != MANIFEST)}) + "\n")


def missing_files(folder: Path, tracked: set[Path]) -> list[str]:
    """The files of a record that its run wrote (its manifest, ``run_record.MANIFEST``) or git tracks (``tracked``)
    and that are gone: a deleted committed figure is a record missing, never "not measured on this machine"."""
    try:
        listed = set(files.load_json(folder / MANIFEST)["files"])
    except (OSError, ValueError, KeyError, TypeError):
        listed = set()
    listed |= {p.name for p in tracked if p.parent == folder}
    return sorted(n for n in listed if isinstance(n, str) and not (folder / n).exists())


def tracked_files(folder: Path) -> set[Path]:
    """The files git tracks under ``folder`` (absolute paths); empty outside a git work tree."""
    import subprocess

    try:
        r = subprocess.run(["git", "-C", str(folder), "ls-files", "-z", "--full-name", "--", "."],
                           capture_output=True, timeout=60)
        top = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return set()
    return {Path(top) / n.decode(errors="surrogateescape") for n in r.stdout.split(b"\0") if n} if top else set()


def record_problem(name: str, final: Path) -> str:
    """"" where ``final`` may take notebook ``name``'s record: missing, empty, or a record of that
    notebook (the files a run of it wrote, :func:`written_by_run`, nothing else); otherwise one line
    naming the folder, what it holds and what to do."""
    if final.is_symlink():   # its target's name would be a folder the user never gave (attack53 X02)
        return (f"{final} is a link (to {os.readlink(final)}): the runner does not write through links; remove "
                f"the link, or give a new or empty folder for {name}'s record")
    if final.exists() and not final.is_dir():
        return f"{rel(final)} is not a folder: give a new or empty folder for {name}'s record"
    entries = sorted(final.iterdir()) if final.is_dir() else []
    odd = _irregular_record_file(name, entries)
    if odd:
        return odd
    ours = written_by_run(name, final)
    foreign = [p.name + ("/" if p.is_dir() else "") for p in entries if p.name not in ours and p.name != MANIFEST]
    if not entries or (not foreign and (final / f"{name}.executed.ipynb").is_file()):
        return ""
    what = (", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")) if foreign \
        else "files but no record"
    return (f"{rel(final)} holds {what}, not a record of {name}: the runner replaces only its own records "
            f"and never removes what it did not write; give a new or empty folder, or --out-root DIR "
            f"(it writes DIR/{name}/)")


def _irregular_record_file(name: str, entries: list[Path]) -> str:
    """A line for an entry with a record file's name that is a FIFO, socket, device, folder or link (attack59 W3,
    attack60 J1/J2: the runner's own folder was called "not a record", and the advice to give another folder
    repaired nothing)."""
    for p in entries:
        try:
            mode = p.lstat().st_mode
        except OSError:
            continue
        if stat.S_ISREG(mode) or p.name.startswith("."):
            continue
        if p.name == f"{name}.executed.ipynb" or p.suffix in RECORD_SUFFIXES:
            tracked = bool(tracked_files(p.parent)) and p.parent.resolve().is_relative_to(FIGURES_DIR.resolve())
            restore = f"restore the record (git checkout -- {rel(p.parent)}) or remove it" if tracked else "remove it"
            what = f"a link (to {os.readlink(p)})" if stat.S_ISLNK(mode) else files.kind_of(mode)
            return (f"{rel(p)} is {what}, not a regular file: a record's files are plain files; "
                    f"{restore}, nothing was run")
    return ""


def cuda_here() -> bool:
    """This process sees a CUDA device (a machine key may be any name a user set)."""
    import torch

    return bool(torch.cuda.is_available())


def check_destination(name: str, profile: str, params: dict, out_root: Path | None, planning: bool = False) -> Path:
    """Where ``name``'s record would land, refused (``ValueError``, one line) before anything runs
    when the folder holds anything that is not a record of that notebook; when ``--out-root`` or
    ``-p out_dir`` lies inside ``figures/`` elsewhere than the runner's own folder for this run
    (``figures/<notebook>/<machine>/``, never for a smoke run); when a gpu-profile run would
    write the folder of a machine without a GPU (this machine's committed CPU records)."""
    final = destination(name, profile, params, out_root)
    flag = f"--out-root {out_root}" if out_root else f"-p out_dir {params['out_dir']}" if params.get("out_dir") else ""
    key = machine_key()
    inside = final.resolve().is_relative_to(FIGURES_DIR.resolve())
    if flag and inside:
        own = figure_dir(name, "", profile, create=False, committed=True, machine=key)
        if final.resolve() != own.resolve():
            raise ValueError(f"{flag}: {rel(final)} lies inside figures/, where the runner writes only its own "
                             f"folder for this run ({rel(own)}); leave {' '.join(flag.split()[:2 if flag.startswith('-p') else 1])} out to write there, "
                             f"or give a folder outside figures/")
    # every route, its links followed (attack54 X13/X17: FEEDLAB_SCRATCH/smoke -> figures/… or -> notebooks)
    scratch = paths.env_path("FEEDLAB_SCRATCH")
    default = (f"FEEDLAB_SCRATCH={scratch}" if scratch else "the scratch folder") if profile == "smoke" \
        else f"--profile {profile}"
    own = None if profile == "smoke" else figure_dir(name, "", profile, create=False, committed=True, machine=key)
    why = paths.landing_problem(final, flag or default, own)
    if why:
        raise ValueError(why)
    if profile == "gpu" and inside and not (key_has_gpu(key) and cuda_here()):   # a FEEDLAB_MACHINE name too
        raise ValueError(f"--profile gpu on {key}, a machine without a GPU: it would replace {rel(final)} "
                         "(this machine's committed records); run it on a GPU machine, or give --out-root DIR "
                         "outside figures/")
    if inside:
        _check_machine(key, final, planning)
    above = next((p for p in [final, *final.parents] if p.exists() or p.is_symlink()), None)
    if flag and above is not None and not above.is_dir():   # a file where the folder would be: refused up front
        raise ValueError(f"{flag}: {above} is a file, not a folder: give a folder (new or holding only this "
                         "notebook's record)")
    why = name_problem(final, flag) or record_problem(name, final)
    if why:
        raise ValueError(why)
    return final


def _check_machine(key: str, final: Path, planning: bool = False) -> None:
    """A record inside ``figures/`` under a ``$FEEDLAB_MACHINE`` name that is not this machine's own
    key is refused (one line) where the name is a GPU machine's and no GPU is here, and where the
    folder already holds a record (its ``fingerprint.json``) another machine made. The name stays
    free for a machine's own folder under another name, and for a new folder a CPU run may take. A real
    run (not ``planning``, the dry run's pretend count) refuses ``$FEEDLAB_CORES`` above the cores it has."""
    real = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if not planning and os.environ.get("FEEDLAB_CORES", "").strip() and usable_cores() > real:
        raise ValueError(f"FEEDLAB_CORES={os.environ['FEEDLAB_CORES'].strip()}: more than the {real} cores this machine "
                         f"gives the run: its record in {rel(final)} would claim them; unset FEEDLAB_CORES (it "
                         "pretends only for --dry-run), or give --out-root DIR outside figures/")
    own = fingerprint_key()
    if key == own:
        return
    if key_names_gpu(key) and not cuda_here():
        raise ValueError(f"FEEDLAB_MACHINE={key}: names a GPU machine, and this one ({own}) has no GPU: it would "
                         f"replace {rel(final)}; unset FEEDLAB_MACHINE, or give --out-root DIR outside figures/")
    try:
        made_on = fingerprint_key(files.load_json(final / "fingerprint.json"))
    except (OSError, ValueError, AttributeError, TypeError):
        return
    if made_on != own:
        raise ValueError(f"FEEDLAB_MACHINE={key}: {rel(final)} holds a record made on {made_on} (its fingerprint.json), "
                         f"and this machine is {own}: unset FEEDLAB_MACHINE to write {own}'s own folder, or give "
                         "--out-root DIR outside figures/")


class RecordWouldLose(ValueError):
    """A run would replace a committed record (``figures/``) with one lacking some of its files."""


def _unavailable_parts(folder: Path) -> list[str]:
    """The parts a run's ``results.json`` says did not run (``{"available": false, "reason": ...}``)."""
    try:
        payload = files.load_json(folder / "results.json")
    except (OSError, ValueError):
        return []
    return [f"{k}: {v['reason']}" for k, v in (payload.items() if isinstance(payload, dict) else [])
            if isinstance(v, dict) and v.get("available") is False and v.get("reason")]


def check_nothing_lost(tmp: Path, final: Path, name: str) -> None:
    """A run whose record lacks files the committed record at ``final`` (inside ``figures/``) has (a
    figure of a part that could not run here: Ray not installed) is not put in place: deleting them
    would lose a committed reading, keeping them beside this run would show a stale one. Raises
    :class:`RecordWouldLose`, one line naming the files, the parts that did not run and what to do."""
    if not (final.is_dir() and final.resolve().is_relative_to(FIGURES_DIR.resolve())):
        return
    lost = sorted(written_by_run(name, final) - {p.name for p in tmp.iterdir()})
    if lost:
        why = "; ".join(_unavailable_parts(tmp)) or f"see runs/failed/{name}/{name}.executed.ipynb"
        raise RecordWouldLose(
            f"this run of {name} did not make {', '.join(lost)}, which the committed record {rel(final)} has "
            f"(what did not run: {why}): that record was kept as it was, nothing deleted and nothing stale "
            f"kept beside a new run; install what is missing and run it again, or remove those files "
            f"(git rm) to accept a record without them")


def install_record(tmp: Path, final: Path, name: str, whole: bool) -> None:
    """Put a finished run's folder ``tmp`` at ``final``. ``whole`` (a folder the runner names
    itself: its figure folder, ``--out-root``'s ``DIR/<name>/``) or a missing ``final``: in
    one rename. A folder the user named (``-p out_dir``) is kept: its old record files (all it
    holds, checked again here) are replaced file by file. A committed record (``figures/``) is
    never replaced by one that lacks some of its files (:func:`check_nothing_lost`)."""
    why = record_problem(name, final)
    if why:  # changed while the notebook ran: this run is kept as a failed one
        raise ValueError(why)
    check_nothing_lost(tmp, final, name)
    write_manifest(tmp)
    if whole or not final.exists():
        files.replace_path(tmp, final)
        return
    new = {p.name for p in tmp.iterdir()}
    for name_ in written_by_run(name, final) - new:   # the old run's own files only
        (final / name_).unlink()
    for p in tmp.iterdir():
        os.replace(p, final / p.name)
    tmp.rmdir()
    files.release(tmp)


@contextmanager
def run_lock(final: Path):
    """An exclusive, non-blocking lock on ``final`` (held in ``runs/locks/``, never beside the
    committed results): a second run of the same notebook into the same folder refuses at once."""
    import fcntl

    locks = paths.SCRATCH_DIR / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    path = locks / f"{final.name[:LOCK_NAME_CHARS]}-{folder_key(final)}.lock"   # the hash names the folder: any length fits
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            who = fh.read().strip() or "another process"
            raise RunLocked(f"{final} is being written by another run ({who}): wait for it to finish, "
                            "or give this one another --out-root") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}")
        fh.flush()
        try:
            yield
        finally:
            fh.seek(0)
            fh.truncate()
            fcntl.flock(fh, fcntl.LOCK_UN)


def folder_key(final: Path) -> str:
    """A short key of a record's folder (its resolved path hashed): a lock's name, a kept failed run's."""
    import hashlib

    return hashlib.sha256(str(Path(final).resolve()).encode()).hexdigest()[:16]


def keep_failed(tmp: Path, name: str, final: Path | None = None) -> Path | None:
    """Move a failed run's folder to ``runs/failed/<name>/`` (outside the committed results); a run into a
    folder of the caller's own (``final`` not under figures/: ``-p out_dir``, ``--out-root``) to
    ``runs/failed/<name>-<key of final>/``, so two failed runs of one notebook into different folders keep one
    folder each (attack53 R11: the second replaced the first, whose line then named the other's notebook)."""
    if not tmp.is_dir():
        return None
    mine = final is not None and paths.outside_figures(final, "") is None   # not the committed record's
    dest = paths.SCRATCH_DIR / "failed" / (f"{name}-{folder_key(final)}" if mine else name)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        files.replace_path(tmp, dest)
    except OSError:
        files.remove(tmp)
        return None
    print(f"    the failed run's notebook and results: {dest}", file=sys.stderr)
    return dest


def check_tar_dest(dest: Path, planning: bool = False) -> None:
    """``--tar FILE`` must be writable before the first notebook runs (not after it), and named ``.tar`` or
    ``.tar.gz`` (what it holds follows the name); ``planning`` (the dry run): the name only, nothing made."""
    import tempfile

    if dest.is_dir():
        raise ValueError(f"--tar {dest} is a folder: give a file name (.tar or .tar.gz)")
    try:
        mode = dest.stat().st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):   # a FIFO: refused before a notebook runs (attack58 W6)
        raise ValueError(f"--tar {dest} is {files.kind_of(mode)}, not a regular file: left as it is, nothing run; "
                         "give a new file name (.tar or .tar.gz)")
    if not dest.name.endswith((".tar", ".tar.gz")):
        raise ValueError(f"--tar {dest}: give a .tar or .tar.gz name (the file is a tar, gzipped by its name)")
    if outside_figures(dest, "--tar"):   # a tar of the records never goes into one (nor into itself)
        raise ValueError(outside_figures(dest, "--tar"))
    if planning:
        return
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=dest.parent, prefix=f".{dest.name}.probe-"):
            pass
    except OSError as exc:
        raise ValueError(f"--tar {dest}: cannot write there ({exc.strerror or exc}); "
                         "give a writable path") from None


_SAVES = re.compile(r"save_figure\([^\n]*?[\"']([\w.-]+)[\"']")
SHOWN_FROM_FILE = ("the kernel ran with a non-inline matplotlib backend, so this cell did not display the "
                   "figure it saved; the figure file this run wrote is shown in its place")


def show_figure_files(executed: Path) -> list[str]:
    """Show in ``executed`` each ``NAME.png`` beside it that the cell calling ``save_figure(..., "NAME")``
    saved but did not display (a kernel started with ``MPLBACKEND=Agg``): the file this run wrote becomes
    that cell's image output, marked ``metadata.feedlab.shown_from_file``. Returns the names shown;
    a record whose cells already hold as many images as they saved is left as it is."""
    nb = json.loads(executed.read_text(encoding="utf-8"))
    shown = []
    for cell in notebook_cells(nb, str(executed)):   # cells of the wrong shape: one line naming the file
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell.get("source", ""))
        outputs = cell.setdefault("outputs", [])
        if not isinstance(outputs, list) or any(not isinstance(o, dict) or not isinstance(o.get("data", {}), dict)
                                                or "image/png" in o.get("data", {}) for o in outputs):
            continue
        for name in _SAVES.findall(source):
            png = executed.parent / f"{name}.png"
            if not png.is_file():
                continue
            outputs.append({"output_type": "display_data",
                            "data": {"image/png": base64.b64encode(png.read_bytes()).decode("ascii"),
                                     "text/plain": [f"<figure {name}.png>"]},
                            "metadata": {"feedlab": {"shown_from_file": png.name, "why": SHOWN_FROM_FILE}}})
            shown.append(name)
    if shown:
        atomic_write(executed, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return shown
