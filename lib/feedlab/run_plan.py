"""What the runner would run, without running it (``python -m feedlab.run --dry-run [--cores N]``):
each notebook's parameters once its profile is resolved for a machine with N usable cores, the
folder its record would land in on that machine, and its seconds as recorded by the last run of the
same profile on a machine with those cores (:func:`recorded_seconds`; "no record" where none ran),
with the plan's total (:func:`plan`, :func:`print_plan`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from feedlab import fingerprint, machines, paths
from feedlab.machines import machine_dirs, machine_key
from feedlab.nbparams import notebook_parameters
from feedlab.paths import figure_dir
from feedlab.profiles import profile_values, resolve


def plan(notebooks: list[Path], profile: str, params: dict) -> list[tuple[str, dict | str]]:
    """What each notebook would run with: ``(name, resolved parameters)`` or ``(name, error)``."""
    out, key = [], None
    for nb in notebooks:
        names = notebook_parameters(nb)
        given = {k: v for k, v in names.items() if k != "profile"}
        given.update({k: v for k, v in params.items() if k in names})
        values_of = profile_values(nb.stem, profile)   # "" means "the profile's value" only where it has one
        given = {k: (None if v == "" and k in values_of and k not in ("data_root", "out_dir", "cls_root") else v)
                 for k, v in given.items()}
        try:
            P = resolve(nb.stem, profile, _create_out_dir=False, **given)
        except (KeyError, ValueError) as exc:
            out.append((nb.stem, f"cannot resolve: {exc}"))
            continue
        values = {k: v for k, v in vars(P).items() if k in names or k in ("cores",)}
        if "out_dir" in values and not given.get("out_dir"):  # where the runner writes, not a scratch run
            key = key or planned_machine_key()
            values["out_dir"] = figure_dir(nb.stem, "", profile, create=False, committed=True, machine=key)
        for k in ("out_dir", "data_root", "cls_root"):  # named from the repository, as the records do
            if isinstance(values.get(k), (str, Path)) and Path(values[k]).is_relative_to(paths.REPO_ROOT):
                values[k] = Path(values[k]).relative_to(paths.REPO_ROOT)
        ignored = sorted(k for k in params if k not in names)
        if ignored:
            values["(not a parameter here)"] = ", ".join(ignored)
        out.append((nb.stem, values))
    return out


def planned_machine_key(cores: int | None = None) -> str:
    """This machine's key with ``cores`` usable cores (``--dry-run --cores N``: the folder a
    machine like this one with N cores would write)."""
    return machine_key(dict(fingerprint.machine_fingerprint(), cpu_usable=cores or machines.usable_cores()))


def recorded_seconds(notebook: str, key: str, profile: str, figures_dir: Path | None = None) -> dict | None:
    """The last committed run of ``notebook`` under ``profile`` on machine ``key``, or else on another
    machine with the same number of cores (``h100-16c`` for a CPU box planning ``--cores 16``):
    ``{"seconds", "machine", "when"}`` from the executed record's papermill duration; None: no record."""
    cores = re.search(r"-(\d+)c$", key)
    dirs = machine_dirs(notebook, figures_dir)
    order = [k for k in dirs if k == key] + [k for k in dirs if k != key and cores and k.endswith(f"-{cores[1]}c")]
    for k in order:
        for rec in sorted(dirs[k].glob("*.executed.ipynb")):
            try:
                pm = json.loads(rec.read_text(encoding="utf-8"))["metadata"]["papermill"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if (pm.get("parameters") or {}).get("profile") == profile and pm.get("duration"):
                return {"seconds": float(pm["duration"]), "machine": k, "when": str(pm.get("end_time", ""))[:10]}
    return None


def print_plan(rows, profile: str, cores: int, figures_dir: Path | None = None) -> None:
    key = planned_machine_key(cores)  # the machine with that many cores
    print(f"plan: profile {profile}, {cores} usable cores, results under figures/<notebook>/"
          f"{key}/ (nothing is run)")
    known, missing = 0.0, []
    for name, values in rows:
        print(f"\n{name}")
        rec = recorded_seconds(name, key, profile, figures_dir)
        if rec:
            known += rec["seconds"]
            print(f"  {'recorded seconds':<24} {rec['seconds']:.0f} (the {profile} run on {rec['machine']}, {rec['when']})")
        else:
            missing.append(name)
            print(f"  {'recorded seconds':<24} no record of a {profile} run on {cores} cores")
        if isinstance(values, str):
            print(f"  {values}")
            continue
        for k, v in values.items():
            print(f"  {k:<24} {v}")
    without = f"; no record for {len(missing)}: {', '.join(missing)}" if missing else ""
    print(f"\ntotal: {known:.0f} s of notebooks from records ({len(rows) - len(missing)} of {len(rows)}){without}")


