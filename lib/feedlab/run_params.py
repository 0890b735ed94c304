"""One truth for a run's parameters: the runner's options and its ``-p KEY VALUE`` pairs resolved once.

``python -m feedlab.run --profile quick -p profile smoke`` used to print "ok" and rewrite the quick
record with smoke readings: the folder checks read ``--profile``, the notebook read ``-p profile``.
Here both become one :class:`RunParams`, which the folder checks, the GPU refusal, the dry-run plan and
the record all read:

* ``-p profile``, ``-p out_dir``, ``-p data_root`` that contradict a runner option (``--profile``,
  ``--out-root``, ``--data-only``) are refused in one line; ``-p profile X`` alone is ``--profile X``.
* Each value is typed against the parameters cell of every notebook that takes it, as papermill infers
  its type (the annotation: :func:`feedlab.nbparams.parameter_types`). A ``str`` parameter (a path, a
  name) is the text verbatim: a newline or `` #2`` stays (YAML folded the one and dropped the other);
  ``int``, ``float`` and ``bool`` are read as such; a list or mapping is YAML (``"[8, 32]"``), its items
  checked against the declared item type. ``None``, ``null`` or nothing mean the profile's value. A value
  of the wrong type is one line naming the parameter and what to write (``-p print_every 2001-01-01``).
  papermill's own ``-p`` guesses a type from the text (``True``, ``None``, a number, else a string) and ``-r``
  passes it raw; here the notebook's declaration decides, so ``-p out_dir 1`` is the folder ``1``.
* A worker count may be written against the cores (``"cores // 2"``), as in the profiles.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from feedlab import paths
from feedlab.files import JSONFileError, load_json
from feedlab.machines import WORKER_KEYS
from feedlab.nbparams import (
    notebook_json,
    notebook_parameters,
    parameter_choices,
    parameter_types,
    parameters_cell_problem,
)
from feedlab.profiles import choose_profile

#: parameters the runner owns: ``-p`` may name them only where it agrees with the runner's option
RUNNER_OPTIONS = {"profile": "--profile", "out_dir": "--out-root", "data_root": "--data-only"}
#: parameters that name a folder: taken relative to where the command was typed (notebooks run in notebooks/)
PATH_KEYS = ("data_root", "out_dir", "cls_root")
#: the kind of set each folder parameter takes (every notebook's data_root an SR set, cls_root a JPEG ImageFolder),
#: as a built set's manifest.json says its own ("kind"), and how a set of that kind is built
SET_KINDS = {"data_root": ("sr", "an SR set", "sr"), "cls_root": ("cls", "a classification set (JPEG ImageFolder)",
                                                                   "classify")}
#: what a value that means "the profile's value" is written as (a ``str`` parameter takes these verbatim)
NONE_WORDS = ("", "None", "null", "~")   # not "none": a mode, a model and a transform are named so


@dataclass(frozen=True)
class RunParams:
    """A run's parameters, resolved once: ``profile``, ``out_root`` (``--out-root``, absolute, or None),
    ``params`` (every ``-p`` key, typed; a path absolute) and ``for_notebook`` (what each notebook gets:
    the keys it declares, typed by its own parameters cell)."""

    profile: str
    out_root: Path | None = None
    params: dict = field(default_factory=dict)
    for_notebook: dict = field(default_factory=dict)


def _kind(type_name: str) -> tuple[str, str]:
    """``("list", "int")`` for ``list[int]``; ``("int", "")``; ``("yaml", "")`` for no annotation."""
    t = type_name.replace(" ", "")
    m = re.fullmatch(r"(?:typing\.)?(list|List|tuple|Tuple|set|dict|Dict)(?:\[(.*)\])?", t)
    if m:
        return ("dict" if m[1].lower() == "dict" else "list"), (m[2] or "")
    base = t.split("|")[0] if "|" in t else t   # int | None: an int
    base = re.sub(r"^(?:typing\.)?Optional\[(.*)\]$", r"\1", base)
    return (base, "") if base in ("str", "int", "float", "bool") else ("yaml", "")


def _example(kind: str, item: str) -> str:
    return {"int": "a whole number such as 100", "float": "a number such as 0.5", "bool": "true or false",
            "str": "text", "dict": "a mapping such as \"{a: 1}\""}.get(
        kind, f"a list such as \"[{', '.join(['8', '32'] if item in ('int', '') else ['a', 'b'] if item == 'str' else ['true', 'false'])}]\"")


def _scalar(text: str, kind: str):
    """``text`` as ``kind`` (int, float, bool), None for a none-word; raises ``ValueError``."""
    t = text.strip()
    if t in NONE_WORDS:
        return None
    if kind == "int" and re.fullmatch(r"[+-]?\d+", t):
        return int(t)
    if kind == "float":
        v = float(t)   # ValueError where it is not a number
        if math.isfinite(v):
            return v
    if kind == "bool" and t.lower() in ("true", "false", "yes", "no", "1", "0"):
        return t.lower() in ("true", "yes", "1")
    raise ValueError(t)


def _item_ok(value, item: str, worker_key: bool) -> bool:
    if worker_key and isinstance(value, str):
        return True   # "cores // 2": resolved and checked against the cores (profiles.check_workers)
    want = {"int": int, "float": (int, float), "bool": bool, "str": str}.get(item.split("[")[0])
    if want is None:
        return True
    return isinstance(value, want) and (item == "bool" or not isinstance(value, bool))


def parse_value(key: str, text: str, type_name: str, notebook: str = "") -> Any:
    """The value ``-p key text`` gives a parameter declared as ``type_name`` (papermill's inferred type).
    Raises ``ValueError``, one line naming the parameter, where the text is not of that type."""
    kind, item = _kind(type_name)
    where = f"{notebook}'s " if notebook else ""
    wrong = (f"-p {key} {text!r}: {where}{key} is {type_name}, so this is not a valid value; "
             f"give {_example(kind, item)}" + (", or None for the profile's value" if kind != "str" else ""))
    if kind == "str":
        return text
    worker_key = key in WORKER_KEYS
    if kind in ("int", "float", "bool"):
        try:
            return _scalar(text, kind)
        except ValueError:
            if worker_key and kind == "int" and "cores" in text:
                return text.strip()   # an expression of the cores, resolved by the notebook (and checked here)
            raise ValueError(wrong) from None
    try:
        value = yaml.safe_load(text) if text.strip() not in NONE_WORDS else None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"-p {key} {text!r}: not valid YAML ({first}); give {_example(kind, item)}") from None
    if value is None or kind == "yaml":
        return value
    if kind == "dict":
        if not isinstance(value, dict):
            raise ValueError(wrong)
        return value
    if isinstance(value, dict):
        raise ValueError(wrong)
    items = value if isinstance(value, list) else [value]   # one value where a list is declared: a list of one
    if not all(_item_ok(v, item, worker_key) for v in items):
        bad = next(v for v in items if not _item_ok(v, item, worker_key))
        raise ValueError(f"{wrong} ({bad!r} is not {item}{'; quote it' if item == 'str' else ''})")
    return value


def builtin_data_reason(nb: Path) -> str:
    """Why a notebook measures built-in data instead of ``data_root`` (its metadata says)."""
    meta = notebook_json(nb).get("metadata", {})
    return (meta.get("feedlab") or {}).get("builtin_data") or "it has no data_root parameter"


def plan_parameters(notebooks: list[Path], params: dict, log=print) -> dict[Path, dict]:
    """The ``-p`` values each notebook declares; says once which keys some notebooks do not
    take (for ``data_root``: that they measure built-in data, and why). A key that no
    selected notebook takes is an error."""
    declared = {nb: notebook_parameters(nb) for nb in notebooks}
    for key in params:
        if notebooks and not any(key in names for names in declared.values()):
            raise SystemExit(f"-p {key}: no selected notebook has a parameter {key!r} "
                             f"(papermill --help-notebook NOTEBOOK lists them)")
        skipped = [nb for nb in notebooks if key not in declared[nb]]
        if not skipped:
            continue
        if key == "data_root":
            for nb in skipped:
                log(f"{nb.stem}: measures built-in data, not data_root: {builtin_data_reason(nb)}")
        else:
            log(f"-p {key}: not a parameter of {', '.join(nb.stem for nb in skipped)} (not passed there)")
    return {nb: {k: v for k, v in params.items() if k in declared[nb]} for nb in notebooks}


def _given_once(pairs: list[tuple[str, str]]) -> dict[str, str]:
    texts: dict[str, str] = {}
    for key, text in pairs:
        if key in texts and texts[key] != text:
            raise ValueError(f"-p {key} is given twice ({texts[key]!r}, {text!r}): give it once")
        texts[key] = text
    return texts


def _check_choices(key: str, text: str, value, choices: list[str] | None, notebook: str) -> None:
    """A list item outside the notebook's ``# list from:`` choices: one line naming it, before a cell runs."""
    bad = [v for v in (value if isinstance(value, list) else []) if choices and str(v) not in choices]
    if bad:
        raise ValueError(f"-p {key} {text!r}: {', '.join(map(str, bad))} not among {notebook}'s {key} "
                         f"(list from: {', '.join(choices)})")


def set_kind(root: str | Path) -> str | None:
    """What ``root/manifest.json`` says the set is (``"sr"``, ``"cls"``), or None: no manifest, or an object
    without a kind data_prep writes (a folder of the user's own: the notebook says what it misses). A manifest.json
    that is there but cannot be one (not a regular file, not JSON, not a JSON object): ``ValueError``, one line
    naming it, before anything runs (attack53 R05: a FIFO passed the plan and failed in cell [4])."""
    path = Path(root) / "manifest.json"
    if not path.exists() and not path.is_symlink():
        return None
    fix = "replace it with the manifest data_prep writes, or remove it"
    try:
        manifest = load_json(path, limit=1 << 22)
    except OSError as exc:
        raise ValueError(str(exc) if exc.strerror is None else f"{path}: {exc.strerror}; {fix}") from None
    except JSONFileError as exc:   # bad UTF-8, or nested too deeply (attack54 B24)
        raise ValueError(f"{path} is not JSON ({exc.reason}); {fix}") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"{path} holds a JSON {type(manifest).__name__}, not an object; {fix}")
    kind = manifest.get("kind")
    return kind if isinstance(kind, str) else None


def _check_set(key: str, text: str, root: str, takers: list[str]) -> None:
    """``-p data_root``/``cls_root`` names a folder, and a built set there is of the kind the notebooks take:
    else one line (a classification set given as 05's data_root ran, and failed in a cell or measured nothing)."""
    want, words, build = SET_KINDS[key]
    if not Path(root).is_dir():
        raise ValueError(f"-p {key} {text!r}: no such folder ({root!r}); build a set there with "
                         f"`python -m data_prep {build} DIR`, or leave -p {key} out for the embedded set")
    try:
        kind = set_kind(root)
    except ValueError as exc:
        raise ValueError(f"-p {key} {text!r}: {exc}") from None
    if kind is not None and kind != want:
        other = next((w for k, w, _b in SET_KINDS.values() if k == kind), f"a {kind!r} set")
        raise ValueError(f"-p {key} {text!r}: {root} is {other} (its manifest.json says kind {kind!r}); "
                         f"{', '.join(takers) or 'the notebook'} take{'s' if len(takers) == 1 else ''} {words} as "
                         f"{key}: build one with `python -m data_prep {build} DIR`, or leave -p {key} out for the "
                         "embedded set")


def _given_path(value: str | os.PathLike, name: str = "-p out_dir") -> str:
    """A folder the record is written to, absolute but as given: its links are not followed, so the checks name
    the link the user gave (``paths.landing_problem``: ``work/od2 (through a link: it is .)``) and a link as the
    record's folder is refused (``run_record.record_problem``: the runner does not write through links), as on the
    scratch route (attack55 W4: X33, X36; attack54 X16)."""
    return os.path.abspath(paths.user_path(value, name))


def resolve_run(notebooks: list[Path], pairs: list[tuple[str, str]], profile_flag: str = "",
                out_root: Path | None = None, data_only: bool = False, here: bool = True) -> RunParams:
    """The run's one set of parameters from the runner's options and its ``-p`` pairs (text, as typed).
    Raises ``ValueError``, one line, for a ``-p`` that contradicts a runner option, a key given twice
    with two values, a value not of its parameter's type (:func:`parse_value`), or (``here``: the run is on
    this machine, not a gpu plan drawn up for another) a ``data_root``/``cls_root`` that names no folder."""
    for why in paths.env_problems():   # FEEDLAB_SCRATCH/FEEDLAB_DATA with a ~ that cannot be expanded
        raise ValueError(why)
    texts = _given_once(pairs)
    if "profile" in texts:
        given = texts.pop("profile").strip()
        if profile_flag and given and given != profile_flag.strip():
            raise ValueError(f"-p profile {given} contradicts --profile {profile_flag}: a run has one profile, "
                             f"which chooses its folder and its values; give it once (--profile {given})")
        profile_flag = profile_flag or given
    profile = choose_profile(profile_flag)
    if texts.get("out_dir", "").strip() and out_root is not None:
        raise ValueError(f"-p out_dir {texts['out_dir']} and --out-root {out_root} both say where the record goes: "
                         "give one (--out-root DIR writes DIR/<notebook>/; -p out_dir DIR one notebook's folder)")
    if texts.get("data_root", "").strip() and data_only:
        raise ValueError(f"--data-only builds the embedded data sets, and -p data_root {texts['data_root']} names "
                         "your own: give one")
    for nb in notebooks:   # papermill needs the one parameters cell: no notebook runs without it
        why = parameters_cell_problem(nb)
        if why:
            raise ValueError(why)
    types = {nb: parameter_types(nb) for nb in notebooks}
    params: dict[str, Any] = {}
    for_notebook: dict[Path, dict] = {nb: {} for nb in notebooks}
    for key, text in texts.items():
        if key in PATH_KEYS and not text.strip():
            continue   # "": the runner's own folder, the embedded set
        for nb in notebooks:
            if key in types[nb]:
                value = parse_value(key, text, types[nb][key], nb.stem)
                _check_choices(key, text, value, parameter_choices(nb).get(key), nb.stem)
                if key in PATH_KEYS and isinstance(value, str):   # out_dir as given, its links kept: a link
                    value = _given_path(value) if key == "out_dir" else \
                        str(Path(paths.user_path(value, f"-p {key}")).resolve())   # ~user it cannot expand: one line
                for_notebook[nb][key] = value
                params.setdefault(key, value)
        if key not in params:   # no selected notebook takes it: the caller says so (nbparams.route_params)
            params[key] = text
        elif here and key in SET_KINDS:   # before any notebook
            _check_set(key, text, params[key], [nb.stem for nb in notebooks if key in types[nb]])
    root = Path(_given_path(out_root, "--out-root")) if out_root is not None else None
    return RunParams(profile, root, params, for_notebook)
