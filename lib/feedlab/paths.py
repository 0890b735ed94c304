"""Every path feedlab uses, anchored at the repository root.

Nothing else in the project types a path: notebooks, the runner and the
tests all start from here, so the workbook works from any working directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
FIGURES_DIR = REPO_ROOT / "figures"
PROFILES_FILE = NOTEBOOKS_DIR / "profiles.yaml"


def _resolved(path) -> Path:
    """``path`` resolved; a link loop (or a path that cannot be followed) kept as written, made absolute, so a
    bad ``FEEDLAB_SCRATCH``/``FEEDLAB_DATA`` is named in one line where it is used, never a traceback at import."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def env_path(name: str) -> str:
    """``$name`` stripped of surrounding blanks: "" (unset) where it is unset, empty or blank. A blank value is
    no folder a user means (attack54 X14: FEEDLAB_SCRATCH=' ' was a folder named " " in the current folder)."""
    return os.environ.get(name, "").strip()


def user_path(text: str | os.PathLike, name: str) -> str:
    """A path a user gave (``-p out_dir``, ``--out-root``, ``-p data_root``, ``FEEDLAB_SCRATCH`` …) with ``~`` and
    ``~user`` expanded, else as given; ``ValueError``, one line naming ``name`` (how it was given), where a leading
    ``~`` cannot be expanded: never a folder literally named ``~`` in the current folder (attack56 R65–R71)."""
    text = os.fspath(text)
    out = os.path.expanduser(text)
    if out.startswith("~"):
        user = out[1:].split(os.sep, 1)[0]
        why = f"no user {user} to expand ~{user} for" if user else "no home folder to expand ~ for (HOME is unset)"
        raise ValueError(f"{name} {text!r}: {why}; give the folder's full path")
    return out


#: FEEDLAB_* folders that could not be read (a ``~`` with no home): raised in one line where a command starts
#: (:func:`env_problems`), never at import
_ENV_PROBLEMS: dict[str, str] = {}


def _env_dir(var: str, default: Path) -> Path:
    text = env_path(var)
    if not text:
        return _resolved(default)
    try:
        return _resolved(user_path(text, var))
    except ValueError as exc:
        _ENV_PROBLEMS[var] = str(exc)
        return _resolved(text)


def env_problems() -> list[str]:
    """One line each for a ``FEEDLAB_SCRATCH``/``FEEDLAB_DATA`` with a ``~`` that cannot be expanded."""
    return list(_ENV_PROBLEMS.values())


# smoke runs (tests, nbval) write here, never over the committed figures; an empty or blank value is unset (it
# silently meant the current folder: locks/ failed/ temps/ in the checkout's root, attack53 X01)
SCRATCH_DIR = _env_dir("FEEDLAB_SCRATCH", REPO_ROOT / "runs")   # ~ expanded as in -p out_dir (W4)
# an optional second environment with Pillow-SIMD (`make pillow-simd`): Pillow-SIMD
# replaces Pillow in place, so it cannot share an environment with it
PILLOW_SIMD_PYTHON = REPO_ROOT / ".venv-simd" / "bin" / "python"
DATA_DIR = _env_dir("FEEDLAB_DATA", REPO_ROOT / "data")


def default_sr_root(profile: str = "quick", patch: int = 64) -> Path:
    """The embedded super-resolution set a profile uses (built by data_prep)."""
    suffix = "-smoke" if profile == "smoke" else ""
    return DATA_DIR / f"sr{patch}{suffix}"


def default_cls_root(profile: str = "quick") -> Path:
    """The embedded ImageFolder (JPEG classification) set a profile uses."""
    return DATA_DIR / ("cls-smoke" if profile == "smoke" else "cls")


# set (to "1") by `feedlab.run` around each notebook it executes: only then does a notebook
# write its machine's committed folder figures/<notebook>/<machine>/. A notebook run any
# other way (nbval, JupyterLab, papermill by hand, an executed notebook run again) writes
# under runs/<profile>/<notebook>/ (ignored by git), so it never replaces committed results.
RUNNER_ENV = "FEEDLAB_RUNNER"


def scratch_dir(notebook_name: str, profile: str = "quick") -> Path:
    """Where a notebook run outside ``feedlab.run`` writes: ``runs/<profile>/<notebook>/``."""
    return SCRATCH_DIR / (profile or "quick") / notebook_name


def env_number(name: str, default, kind: type = int, low: float | None = None, unit: str = ""):
    """``$name`` read as a number of ``kind`` (``int``: a whole number; ``float``: a finite one) of at least
    ``low``; ``default`` where it is unset or empty. ``ValueError``, one line naming the variable and what it takes,
    otherwise: the one reading of feedlab's numeric variables (``FEEDLAB_MAX_WORKERS``, ``FEEDLAB_PEER_TIMEOUT_S``)."""
    import math

    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    what = ("a whole number" if kind is int else "a finite number") + (f" of {unit}" if unit else "")
    try:
        value = kind(raw)
        if kind is float and not math.isfinite(value):
            raise ValueError(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: must be {what}; unset it for the default"
                         + (f" ({default})" if default is not None else "")) from None
    if low is not None and value < low:
        raise ValueError(f"{name}={raw!r}: must be at least {low:g}")
    return value


#: the checkout's tracked source folders: never a scratch folder (attack53 X06: FEEDLAB_SCRATCH=notebooks put an
#: executed notebook, locks/ and failed/ into notebooks/)
SOURCE_DIRS = ("notebooks", "lib", "data_prep", "tests", "docs", ".git")


def check_scratch(subfolders: tuple[str, ...] = ("locks", "failed", "temps"), make: bool = True) -> Path:
    """The scratch folder (``$FEEDLAB_SCRATCH``, else ``runs/``) made ready for the runner's locks, failed runs and
    temporaries: ``ValueError``, one line naming the folder and what to do, where it (or one of ``subfolders``)
    is a file, cannot be made or cannot be written; raised before a notebook runs, never blamed on one of its cells.
    ``make=False`` (the dry run) makes nothing: a folder not there yet needs a writable folder above it."""
    for why in env_problems():
        raise ValueError(why)
    root = Path(SCRATCH_DIR)
    env = env_path("FEEDLAB_SCRATCH")
    name = f"FEEDLAB_SCRATCH={env}" if env else f"the scratch folder {root}"
    fix = "point FEEDLAB_SCRATCH at a folder you can write (or unset it: runs/ in the checkout)"
    if _inside(root, FIGURES_DIR):   # its locks, temporaries and failed runs would land in a committed record
        raise ValueError(f"{name}: lies inside figures/, which holds the committed records (only feedlab.run "
                         f"writes there, whole): nothing written; {fix}")
    source = [d for d in SOURCE_DIRS if _inside(root, REPO_ROOT / d)]
    if source or _resolved(root) == _resolved(REPO_ROOT):   # executed notebooks, locks … among the sources
        where = f"lies inside {source[0]}/, a folder of the checkout's sources" if source else "is the checkout itself"
        raise ValueError(f"{name}: {where} (runs, locks and failed runs would land among tracked files): nothing "
                         f"written; {fix}")
    for path in (root, *(root / sub for sub in subfolders)):
        why = landing_problem(path, name) if path != root else None   # runs/locks -> figures/… (attack54 X13's kin)
        if why:
            raise ValueError(why)
        for part in (*reversed(path.parents), path):
            if part.is_symlink() and not part.exists():
                raise ValueError(f"{name}: {part} is a link that leads nowhere (a loop, or its target is gone); {fix}")
            if part.exists() and not part.is_dir():
                what = "" if part == root else f" ({part} is a file)"
                raise ValueError(f"{name}: not a folder{what}; {fix}")
        if not make:   # the plan agrees with the run and leaves nothing behind (attack59 W4)
            there = next((p for p in (path, *path.parents) if p.exists()), None)
            if there is not None and not os.access(there, os.W_OK | os.X_OK):
                raise ValueError(f"{name}: {there} is not writable; {fix}")
            continue
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"{name}: cannot make {path} ({exc.strerror or exc}); {fix}") from None
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"{name}: {path} is not writable; {fix}")
    return root


def writes_committed() -> bool:
    """True inside a notebook that ``feedlab.run`` executes (it sets :data:`RUNNER_ENV`)."""
    return os.environ.get(RUNNER_ENV) == "1"


def _inside(path: Path, root: Path) -> bool:
    try:
        _resolved(path).relative_to(_resolved(root))
        return True
    except ValueError:
        return False


def landing_problem(path: str | os.PathLike, label: str, allowed: Path | None = None) -> str | None:
    """One line where a folder the runner would write (a record's final folder, on any route: the profile's
    default, ``$FEEDLAB_SCRATCH``, ``--out-root``, ``-p out_dir``), with every link on the way followed, lands
    inside ``figures/`` (other than ``allowed``: the runner's own record folder on the route that writes it),
    inside a source folder (:data:`SOURCE_DIRS`) or on the checkout itself; None where it lands elsewhere.
    A link one level below a scratch root (``sx/smoke -> figures/…``) is seen (attack54 X13, X17)."""
    real, given = _resolved(path), Path(os.path.abspath(path))
    try:   # as given (its links not followed), relative to the checkout where inside it
        shown = str(given.relative_to(REPO_ROOT)) or "."
    except ValueError:
        shown = str(path)
    via = "" if real == given else f" (through a link: it is {rel(real)})"
    if _inside(real, FIGURES_DIR) and not (allowed is not None and real == _resolved(allowed)):
        return (f"{label}: {shown}{via} lies inside figures/, which holds the committed records (only "
                "feedlab.run writes there, its own folder for a run): nothing written; give a folder outside figures/")
    source = [d for d in SOURCE_DIRS if _inside(real, REPO_ROOT / d)]
    if source or real == _resolved(REPO_ROOT):
        where = f"lies inside {source[0]}/, a folder of the checkout's sources" if source else "is the checkout itself"
        return (f"{label}: {shown}{via} {where} (a run's record would land among tracked files): nothing "
                "written; give a folder outside the checkout's sources (runs/ by default)")
    return None


def outside_figures(path: str | os.PathLike, flag: str) -> str | None:
    """One line where a file the user names for a side output (``--trace``, ``--out``, ``--report``) lies
    inside ``figures/`` (a link into it included): that folder holds the committed records, which only the
    runner writes, whole; None where ``path`` lies elsewhere. Checked before anything runs."""
    if _inside(Path(path), FIGURES_DIR):
        return (f"{flag} {path}: lies inside figures/, which holds the committed records (only feedlab.run "
                "writes there): nothing written; give a path outside figures/")
    return None


def figure_dir(notebook_name: str, out_dir: str | os.PathLike = "", profile: str = "quick",
               create: bool = True, committed: bool | None = None, machine: str = "") -> Path:
    """Where a notebook writes its results and figures; created if missing (unless ``create``
    is False).

    For ``feedlab.run`` (``committed``, by default read from :data:`RUNNER_ENV`):
    ``figures/<notebook_name>/<machine>/`` (``cpu-2c``, ``h100-16c``: the caller passes
    ``feedlab.machines.machine_key()``; paths, on the ground floor, knows no machine), so a run on another machine lands beside ours instead of
    over it. ``out_dir`` overrides it (tests point it at a temporary directory). The
    ``smoke`` profile, and every run outside the runner, writes under
    ``runs/<profile>/<notebook_name>/`` instead: an ``out_dir`` inside ``figures/`` given
    outside the runner (the injected cell of a committed executed notebook run again) is
    moved there too, so only the runner replaces committed results.
    """
    if committed is None:
        committed = writes_committed()
    if str(out_dir):
        path = Path(out_dir)
    elif profile == "smoke" or not committed:
        path = scratch_dir(notebook_name, profile)
    else:
        if not machine:
            raise ValueError(f"figure_dir({notebook_name!r}): the committed folder needs the machine key "
                             "(machine=feedlab.machines.machine_key())")
        path = FIGURES_DIR / notebook_name / machine
    if not committed and _inside(path, FIGURES_DIR):
        path = scratch_dir(notebook_name, profile)
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def rel(path: str | os.PathLike) -> str:
    """``path`` as shown in a notebook or a log: relative to the repository root when inside it
    (no machine's checkout in an output), otherwise as given."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(REPO_ROOT)) or "."
    except (ValueError, OSError):
        return str(p)


def scrub_data_paths(text: str) -> str:
    """``text`` (what a command printed) with each absolute path that leads to a ``data/<set>`` folder
    (``/root/repo/data/sr64/lmdb``) from its ``data/`` on, as the repository names the set, not the
    machine that ran it (the README quotes the doctor so). One pass over each word, linear in its
    length (a regular expression with a lazy ``\\S*?`` before ``/data/`` went quadratic on a long
    word of slashes)."""
    return re.sub(r"\S+", lambda m: _scrub_word(m.group()), text)


def _scrub_word(word: str) -> str:
    out, i, n = [], 0, len(word)
    start = word.find("/")
    while start != -1:
        if start and (word[start - 1].isalnum() or word[start - 1] in "_."):  # inside a name: not a path's start
            start = word.find("/", start + 1)
            continue
        k = word.find("/data/", start + 1)
        while k != -1 and (k + 6 >= n or word[k + 6] == "/"):
            k = word.find("/data/", k + 1)
        if k == -1:
            break  # no set named after this start, nor after any later one in this word
        end = k + 6
        while end < n and word[end] != "/":
            end += 1
        out.append(word[i:start] + word[k + 1:end])
        i = end
        start = word.find("/", end)
    out.append(word[i:])
    return "".join(out)


SOCKET_MAX = 107   # bytes in an AF_UNIX socket's path (Linux's sun_path, less its NUL)


def socket_parent(tail: str) -> str:
    """Where a folder holding sockets goes: ``$TMPDIR`` (the standard library's temporary folder), or ``/tmp``
    where a socket ``tail`` below ``$TMPDIR`` would pass :data:`SOCKET_MAX` bytes (a long ``$TMPDIR``, as under
    make test-slow's ``pytest-of-…`` folders: "File name too long", Ray's "AF_UNIX path length cannot exceed
    107 bytes")."""
    import tempfile

    parent = tempfile.gettempdir()
    if len(os.fsencode(parent)) + len(os.fsencode(tail)) > SOCKET_MAX and os.access("/tmp", os.W_OK | os.X_OK):
        return "/tmp"
    return parent


# Ray's deepest socket below its root: <root>/ray/session_<date>_<time>_<µs>_<pid>/sockets/plasma_store
RAY_SOCKET_TAIL = "/ray/session_2026-11-28_04-37-55_625242_4194304/sockets/plasma_store"


def ray_temp_dir() -> str | None:
    """Ray's root temporary folder where Ray's own choice (``$RAY_TMPDIR``, else ``$TMPDIR``) would put its
    sockets past :data:`SOCKET_MAX`: ``/tmp/ray``, Ray's choice with no ``$TMPDIR``. None: leave it to Ray."""
    if os.environ.get("RAY_TMPDIR"):
        return None
    parent = socket_parent(RAY_SOCKET_TAIL)
    import tempfile

    return None if parent == tempfile.gettempdir() else os.path.join(parent, "ray")
