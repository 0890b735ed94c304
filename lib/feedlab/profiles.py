"""Profiles (smoke / quick / full) and the resolution of notebook parameters.

A notebook's parameters cell holds ``profile = ""`` and its own names set to
``None`` ("take the profile's value"). The cell below it calls :func:`resolve`,
which fills every ``None`` from ``notebooks/profiles.yaml``: the ``defaults``
section, then the notebook's own section, for the chosen profile. An empty
``profile`` means ``$FEEDLAB_PROFILE`` (nbval and the tests set it) or ``quick``.

``papermill -p batch_sizes "[8, 32]"`` hands the notebook a string: a string given
where the profile holds a list or a mapping (or one written as ``[...]``/``{...}``)
is parsed as YAML here (:func:`parse_given`), and one that does not parse stops
the notebook with a one-line :class:`ParameterError` naming the parameter.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

from feedlab.errors import MAX_SECONDS
from feedlab.findings import notebook_display
from feedlab.machines import WORKER_KEYS, expand_workers, machine_key, usable_cores, worker_cap
from feedlab.monitor import start_run
from feedlab.paths import PROFILES_FILE, default_cls_root, default_sr_root, figure_dir, rel, writes_committed

PROFILES = ("smoke", "quick", "full", "gpu")
# a profile that starts from another's values: ``gpu`` is ``quick`` sized for a borrowed GPU machine
# (16 cores, 10 minutes a command): a section's ``gpu`` block overrides its ``quick`` one
BASE_PROFILE = {"gpu": "quick"}


def choose_profile(profile: str | None = "") -> str:
    profile = (profile or os.environ.get("FEEDLAB_PROFILE") or "quick").strip()
    if profile not in PROFILES:
        raise ValueError(f"profile={profile!r}: must be one of {', '.join(PROFILES)}")
    return profile


def load_profiles(path: str | os.PathLike = PROFILES_FILE) -> dict:
    with open(path) as fh:
        return yaml.safe_load(fh) or {}


def profile_values(notebook: str, profile: str, path: str | os.PathLike = PROFILES_FILE) -> dict:
    """Values for ``notebook`` under ``profile``: defaults first, then the notebook's section; a
    profile with a base (:data:`BASE_PROFILE`) takes the base's block, then its own, in each."""
    return values_in(load_profiles(path), notebook, profile)


def values_in(table: dict, notebook: str, profile: str) -> dict:
    """:func:`profile_values` from a profiles table already read (another commit's, for one)."""
    chain = [p for p in (BASE_PROFILE.get(profile), profile) if p]
    values: dict[str, Any] = {}
    for section in ("defaults", notebook):
        block = table.get(section) or {}
        values.update(block.get("all") or {})
        for p in chain:
            values.update(block.get(p) or {})
    return values


class ParameterError(ValueError):
    """A notebook parameter that cannot be used as given (one line, names the parameter)."""


def _parse_one(notebook: str, name: str, value: Any, expected: Any) -> Any:
    if not isinstance(value, str):
        if isinstance(expected, (list, tuple)) and isinstance(value, (int, float)):
            return [value]  # papermill -p worker_counts 2 gives an int: a list of one
        return value
    text = value.strip()
    wants_collection = isinstance(expected, (list, tuple, dict))
    looks_like_one = text[:1] in ("[", "{")
    if not (wants_collection or looks_like_one):
        return value
    try:
        parsed = yaml.safe_load(text) if text else None
    except yaml.YAMLError as exc:
        line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ParameterError(f"{notebook}: parameter {name}={value!r} is not valid YAML ({line}); "
                             f"write it like {_example(expected)}") from None
    if wants_collection and parsed is not None and \
            isinstance(expected, dict) != isinstance(parsed, dict):
        raise ParameterError(f"{notebook}: parameter {name}={value!r} should be "
                             f"{'a mapping' if isinstance(expected, dict) else 'a list'}, "
                             f"like {_example(expected)}")
    if isinstance(expected, (list, tuple)) and parsed is not None and not isinstance(parsed, list):
        parsed = [parsed]  # -p batch_sizes 8 means [8]
    return parsed


def _example(expected: Any) -> str:
    if isinstance(expected, (list, tuple, dict)):
        return yaml.safe_dump(expected if not isinstance(expected, tuple) else list(expected),
                              default_flow_style=True, width=10**6).strip()
    return "[1, 2] or {key: value}"


def parse_given(notebook: str, given: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """Parse parameters passed as strings where ``values`` (the profile) holds a list or
    mapping, or that are written as a YAML list/mapping. Other values pass unchanged."""
    return {k: _parse_one(notebook, k, v, values.get(k)) for k, v in given.items()}


class Params(SimpleNamespace):
    """The resolved parameters; shown with paths relative to the repository root, so an
    executed notebook names no machine's checkout."""

    def __repr__(self) -> str:
        items = "".join(f"\n    {k}={rel(v)!r}," if isinstance(v, Path) else f"\n    {k}={v!r},"
                        for k, v in vars(self).items())
        return f"Params({items}\n)"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))


def resolve(notebook: str, profile: str = "", _create_out_dir: bool = True, **given: Any) -> SimpleNamespace:
    """Fill every parameter left at ``None`` from the profile.

    Worker counts (:data:`feedlab.machines.WORKER_KEYS`) may be written against the
    core count in the profile or given that way (``"cores // 2"``): they are resolved
    for the cores of this machine (:func:`feedlab.machines.usable_cores`), recorded as
    ``cores``.

    Returns a namespace with all parameters, plus ``profile``, ``data_root``
    (a Path; the embedded set of this profile when left empty), ``out_dir``
    (``figures/<notebook>`` unless given) and ``notebook``.
    """
    profile = choose_profile(profile)
    values = profile_values(notebook, profile)
    given = parse_given(notebook, given, values)
    unknown_none = [k for k, v in given.items() if v is None and k not in values
                    and k not in ("data_root", "out_dir", "cls_root")]
    if unknown_none:
        raise KeyError(f"{notebook}: no profile value for {', '.join(unknown_none)} "
                       f"in {PROFILES_FILE.name} (profile {profile!r}); pass it explicitly")
    out = dict(values)
    out.update({k: v for k, v in given.items() if v is not None})
    cores = usable_cores()
    for key in WORKER_KEYS:
        if key in out:
            out[key] = expand_workers(out[key], cores, key)
    out["cores"] = cores
    patch = int(out.get("patch", 64))
    data_root = given.get("data_root") or ""
    out["data_root"] = Path(data_root).expanduser() if data_root else default_sr_root(profile, patch)
    cls_root = given.get("cls_root") or ""
    out["cls_root"] = Path(cls_root).expanduser() if cls_root else default_cls_root(profile)
    given_out = given.get("out_dir") or ""
    needs_key = not given_out and profile != "smoke" and writes_committed()  # the runner's figures/<nb>/<machine>
    out["out_dir"] = figure_dir(notebook, given_out, profile, create=_create_out_dir,
                                machine=machine_key() if needs_key else "")
    out["profile"] = profile
    out["notebook"] = notebook
    out["user_data"] = bool(data_root)
    check_values(notebook, out)
    if _create_out_dir:  # a notebook starting (not the runner's --dry-run plan)

        notebook_display()  # tables rounded and captioned
        note = expect_more_workers_than_cores(out, cores)
        if note:
            print(note)
    _start_load_watch()
    return Params(**out)


# torch's UserWarning when a DataLoader starts more workers than it suggests for this machine
_WORKER_WARNING = r"This DataLoader will create \d+ worker processes in total"


def expect_more_workers_than_cores(values: dict, cores: int) -> str:
    """Where the resolved worker counts exceed ``cores`` on purpose, silence torch's warning about
    it (it would repeat for every loader of the experiment) and return the one sentence that says
    so; "" (and no filter) otherwise."""
    import warnings

    counts = set()
    for key in WORKER_KEYS:
        v = values.get(key)
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(x, int) and not isinstance(x, bool):
                counts.add(x)
    over = sorted(c for c in counts if c > cores)
    if not over:
        return ""
    warnings.filterwarnings("ignore", message=_WORKER_WARNING, category=UserWarning)
    return (f"Note: this run measures {', '.join(map(str, over))} DataLoader worker(s) on {cores} usable "
            f"core(s) on purpose; torch's warning about more workers than its suggested maximum is "
            f"silenced for this notebook.")


# parameters that count something: sizes and counts >= 1, worker counts >= 0
_AT_LEAST = {"batch_sizes": 1, "batch_size": 1, "input_sizes": 1, "repeats": 1, "epochs": 1,
             "prefetch_factors": 1, "max_batches": 1, "dataset_count": 1, "worker_counts": 0, "num_workers": 0,
             "batches": 1, "print_every": 1}   # 04's: -p print_every 0 failed "in cell [3]" after 16 s


def check_values(notebook: str, values: dict) -> None:
    """Raise ``ValueError`` naming a counting parameter that is empty, not an integer or too small
    (``input_sizes=[0]`` would otherwise run and report empty figures as "ok")."""
    for key, low in _AT_LEAST.items():
        v = values.get(key)
        if v is None:
            continue
        items = v if isinstance(v, (list, tuple)) else [v]
        if isinstance(v, (list, tuple)) and not items:
            raise ValueError(f"{notebook}: {key} is empty; give at least one value >= {low}")
        for x in items:   # and below 2**31: 04's batch_size 99999999999999999999 overflowed in a cell (attack61 P4)
            if isinstance(x, bool) or not isinstance(x, int) or x < low or x >= 2 ** 31:
                raise ValueError(f"{notebook}: {key}={v!r}: each value must be an integer >= {low} and < 2**31")
    for key, v in values.items():   # any integer a C long long cannot hold overflows in a cell (attack61 Y2: samples)
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 2 ** 63:
                raise ValueError(f"{notebook}: {key}={v!r}: an integer this large overflows where it is used; give one "
                                 "below 2**63 (with -p, or in notebooks/profiles.yaml where the profile sets it)")
    check_seconds(notebook, values)
    check_workers(values, f"{notebook}: ", values.get("cores"))


# seconds parameters where 0 means something (no budget, no shortest window, no sleep); every other one
# is a wait, a window or a budget that 0 or less would silently switch off (attack59 F2: -p deadline_s -5)
_SECONDS_ZERO_OK = frozenset({"budget_s", "min_window_s", "sleep_s", "item_s", "step_s"})


def _unit(key: str) -> tuple[str, float, bool] | None:
    """A measured parameter's unit by its name: (words, the largest value, whether 0 means something)."""
    if key.endswith(("_s", "_seconds")):
        return "seconds", MAX_SECONDS, key in _SECONDS_ZERO_OK
    if key.endswith("_ms"):   # 16's latency_ms: 0 is no wait (attack60 E1: -5 failed in a cell)
        return "milliseconds", MAX_SECONDS * 1e3, True
    if key.endswith(("_mb", "_mib")):   # 16's large_mib, cow_limit_mb (attack61 W2c: large_mib 1e300)
        return "MiB", 1e6, False
    if key.endswith("_factor"):   # 12's slow_factor times item_s is a sleep (attack60 E2: 1e300 overflowed)
        return "a factor", 1e6, False
    return None


def check_seconds(notebook: str, values: dict) -> None:
    """Raise ``ValueError`` naming a measured parameter that is not a finite number in range: seconds (``*_s``,
    ``*_seconds``) > 0 (>= 0 where 0 has a meaning) and at most :data:`feedlab.errors.MAX_SECONDS`, past which the
    OS's timers overflow (``-p item_s 1e300`` failed in a cell, ``-p deadline_s -5`` turned every deadline off);
    milliseconds (``*_ms``) >= 0, MiB (``*_mb``) > 0, a factor (``*_factor``) > 0, each with its cap; and a sleep
    made of two (``item_s`` × ``slow_factor``) within the seconds' cap."""
    for key, v in values.items():
        unit = _unit(key)
        if v is None or unit is None or (isinstance(v, (list, tuple)) and key.endswith("_factor")):
            continue
        words, top, zero = unit
        number = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if not number or v < 0 or (v == 0 and not zero) or v > top:
            raise ValueError(f"{notebook}: {key}={v!r} is {words}: give a finite number "
                             f"{'>= 0' if zero else '> 0'} and at most {top:g} (with -p, or in "
                             "notebooks/profiles.yaml where the profile sets it)")   # attack60 Y1: the file's
    item, factor = values.get("item_s"), values.get("slow_factor")
    if isinstance(item, (int, float)) and isinstance(factor, (int, float)) and item * factor > MAX_SECONDS:
        raise ValueError(f"{notebook}: item_s={item!r} × slow_factor={factor!r} is a sleep of {item * factor:g} s: "
                         f"give values whose product is at most {MAX_SECONDS:g} s")


def check_workers(values: dict, where: str = "", cores: int | None = None) -> None:
    """``ValueError`` naming a worker-count parameter (:data:`~feedlab.machines.WORKER_KEYS`) with a
    count over :func:`~feedlab.machines.worker_cap`: the cap bench and the doctor keep holds for a
    notebook's parameters too (``feedlab.run -p worker_counts "[3000]"`` is refused before anything runs)."""
    cores = usable_cores() if cores is None else int(cores)
    cap = worker_cap(cores)
    for key in WORKER_KEYS:
        if values.get(key) is None:
            continue
        counts = expand_workers(values[key], cores, key)
        for x in counts if isinstance(counts, list) else [counts]:
            if x > cap:
                raise ValueError(f"{where}{key}={values[key]!r}: {x} workers is over the cap of {cap} (4 per "
                                 "usable core, at least 16; FEEDLAB_MAX_WORKERS sets another)")


def _start_load_watch() -> None:
    """A notebook's measurements start here: the busy-machine windows start afresh."""
    try:
        start_run()
    except Exception:
        pass
