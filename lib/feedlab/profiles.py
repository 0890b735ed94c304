"""Profiles (smoke / quick / full) and the resolution of notebook parameters.

A notebook's parameters cell holds ``profile = ""`` and its own names set to
``None`` ("take the profile's value"). The cell below it calls :func:`resolve`,
which fills every ``None`` from ``notebooks/profiles.yaml``: the ``defaults``
section, then the notebook's own section, for the chosen profile. An empty
``profile`` means ``$FEEDLAB_PROFILE`` (nbval and the tests set it) or ``quick``.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

from feedlab.machines import WORKER_KEYS, expand_workers, usable_cores
from feedlab.paths import PROFILES_FILE, default_cls_root, default_sr_root, figure_dir

PROFILES = ("smoke", "quick", "full")


def choose_profile(profile: str | None = "") -> str:
    profile = (profile or os.environ.get("FEEDLAB_PROFILE") or "quick").strip()
    if profile not in PROFILES:
        raise ValueError(f"profile={profile!r}: must be one of {', '.join(PROFILES)}")
    return profile


def load_profiles(path: str | os.PathLike = PROFILES_FILE) -> dict:
    with open(path) as fh:
        return yaml.safe_load(fh) or {}


def profile_values(notebook: str, profile: str, path: str | os.PathLike = PROFILES_FILE) -> dict:
    """Values for ``notebook`` under ``profile``: defaults first, then the notebook's section."""
    table = load_profiles(path)
    values: dict[str, Any] = {}
    for section in ("defaults", notebook):
        block = table.get(section) or {}
        values.update(block.get("all") or {})
        values.update(block.get(profile) or {})
    return values


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
    out["out_dir"] = figure_dir(notebook, given.get("out_dir") or "", profile, create=_create_out_dir)
    out["profile"] = profile
    out["notebook"] = notebook
    out["user_data"] = bool(data_root)
    check_values(notebook, out)
    return SimpleNamespace(**out)


# parameters that count something: sizes and counts >= 1, worker counts >= 0
_AT_LEAST = {"batch_sizes": 1, "batch_size": 1, "input_sizes": 1, "repeats": 1, "epochs": 1,
             "prefetch_factors": 1, "max_batches": 1, "dataset_count": 1, "worker_counts": 0, "num_workers": 0}


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
        for x in items:
            if isinstance(x, bool) or not isinstance(x, int) or x < low:
                raise ValueError(f"{notebook}: {key}={v!r}: each value must be an integer >= {low}")
