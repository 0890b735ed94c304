"""What the runner would run, without running it (``python -m feedlab.run --dry-run [--cores N]``):
each notebook's parameters once its profile is resolved for a machine with N usable cores, the
folder its record would land in on that machine, and its seconds as recorded by the last run of the
same profile on a machine with those cores (:func:`recorded_seconds`; "no record" where none ran),
with the plan's total (:func:`plan`, :func:`print_plan`).

For the ``gpu`` profile it also packs the notebooks into **calls**, one command each on a rented
16-core GPU machine (docs/GPU_RUN.md): in order of value (:data:`VALUE_ORDER`: the cure, 01, 03, 09
and 10 first; :data:`HOST_ONLY`'s host questions left to a CPU machine), each call at most :data:`CALL_S`
seconds with its set-up (:data:`SETUP_S`), every
notebook with its predicted seconds and the limit it runs under (:func:`gpu_calls`;
``python -m feedlab.run_plan --call N`` prints call N as ``.ci/gpu-call`` reads it). A prediction is
the last record of that profile on such a machine, or the notebook's own ``budget_s`` plus its
start-up where that is less (a budget the run keeps, :mod:`feedlab.budget`); a notebook with neither
is planned at :data:`FIRST_RUN_S` and says so."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path

from feedlab import fingerprint, machines, paths
from feedlab.machines import machine_dirs, machine_key
from feedlab.nbparams import notebook_parameters
from feedlab.paths import NOTEBOOKS_DIR, figure_dir
from feedlab.profiles import BASE_PROFILE, profile_values, resolve


def list_notebooks() -> list[Path]:
    """The workbook's notebooks (``notebooks/NN_*.ipynb``), in order."""
    return sorted(p for p in NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")
                  if ".executed" not in p.name and not p.name.startswith("."))


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
    if profile == "gpu":
        print_calls(gpu_calls(rows, key, profile, figures_dir), host_only(rows))




# the gpu profile's calls: one command each on a rented 16-core GPU machine (docs/GPU_RUN.md)
CALL_S = 540          # of a command's 600 s: each call's own deadline, its set-up included
QUARTER_S = 900       # a quarter-hour of a rented machine: its start, its calls, the idle between them
MACHINE_START_S = 35  # the machine's start and the repository's upload (about 30 s on 2026-11-26)
TRANSFER_S = 25       # each call's results home, and the next call's upload
# what a quarter-hour has left after its start and one call: a second call's first part
# (``CALL_S=300 bash .ci/gpu-call 2``: what does not fit is not started, and named)
SECOND_CALL_S = QUARTER_S - MACHINE_START_S - CALL_S - TRANSFER_S
SETUP_S = 45          # wheels, set-up and the gpu data: 41 s on 2026-11-26 (19 s with the data already there)
START_S = 20          # a notebook's kernel, CUDA start-up and load probe before anything is timed (docs/GPU_RUN.md)
FIRST_RUN_S = 120     # a notebook with no record and no budget: planned at this, to get its first record
MARGIN = 1.3          # a limit is the prediction × MARGIN (+ START_S where the prediction is a record)
VALUE_ORDER = ("15", "01", "03", "09", "10", "06", "02", "05", "12", "13", "14")
# notebooks whose every measurement is on the host (no CUDA branch: printing, collate on the CPU, HDF5 handles
# across fork and spawn, worker hygiene): a GPU machine's loan is not spent on them; a 16-core CPU machine
# answers them (``python -m feedlab.run --profile gpu --only 04 07 08 11``)
HOST_ONLY = ("04", "07", "08", "11")


def predicted_seconds(name: str, values, key: str, profile: str,
                      figures_dir: Path | None = None) -> tuple[float, str, bool]:
    """``(seconds, how, known)``: the last record of ``profile`` on machine ``key`` (or one with its
    cores; else of the profile it starts from, ``quick`` for ``gpu``, where the notebook's values are
    the same under both), or the notebook's ``budget_s`` + :data:`START_S` where that is less; else
    :data:`FIRST_RUN_S` with ``known`` False."""
    rec = recorded_seconds(name, key, profile, figures_dir)
    base = BASE_PROFILE.get(profile)
    if rec is None and base and profile_values(name, profile) == profile_values(name, base):
        # a notebook the profile leaves as its base's (no block of its own): the base's record is the same run
        rec = recorded_seconds(name, key, base, figures_dir)
        if rec:
            rec = dict(rec, machine=f"{rec['machine']} with the {base} profile")
    budget = values.get("budget_s") if isinstance(values, dict) else None
    kept = float(budget) + START_S if isinstance(budget, (int, float)) and budget > 0 else None
    if rec and (kept is None or rec["seconds"] <= kept):
        return rec["seconds"], f"recorded on {rec['machine']}, {rec['when']}", True
    if kept is not None:
        was = f"; {rec['seconds']:.0f} s recorded before it" if rec else "; no record yet"
        return kept, f"budget_s {budget:g} + {START_S} s start{was}", True
    return float(FIRST_RUN_S), "no record and no budget: a first run's limit", False


def gpu_calls(rows, key: str, profile: str = "gpu", figures_dir: Path | None = None) -> list[dict]:
    """The notebooks of ``rows`` (as :func:`plan` gives them) in calls of at most :data:`CALL_S`
    seconds each, set-up included, in :data:`VALUE_ORDER`; a call is closed when the next notebook
    would not fit. The :data:`HOST_ONLY` notebooks are left out (:func:`host_only`). Each call:
    ``{"notebooks": [{"name", "seconds", "how", "known", "limit"}], "seconds"}`` (set-up plus predictions)."""
    rank = {p: i for i, p in enumerate(VALUE_ORDER)}
    ordered = sorted((r for r in rows if r[0][:2] not in HOST_ONLY),
                     key=lambda r: (rank.get(r[0][:2], len(rank)), r[0]))
    calls: list[dict] = []
    for name, values in ordered:
        seconds, how, known = predicted_seconds(name, values, key, profile, figures_dir)
        limit = math.ceil(seconds * MARGIN + (START_S if "recorded" in how else 0))
        item = {"name": name, "seconds": round(seconds, 1), "how": how, "known": known, "limit": limit}
        if not calls or calls[-1]["seconds"] + seconds > calls[-1]["deadline_s"]:
            n = len(calls)
            calls.append({"notebooks": [], "seconds": float(SETUP_S), "quarter": n + 1,
                          "deadline_s": call_seconds(n + 1)})
        item["limit"] = min(limit, calls[-1]["deadline_s"] - SETUP_S)
        calls[-1]["notebooks"].append(item)
        calls[-1]["seconds"] = round(calls[-1]["seconds"] + seconds, 1)
    return calls


def call_seconds(n: int) -> int:
    """The seconds call ``n`` (1-based) may take, set-up included: :data:`CALL_S` each, one call a
    quarter-hour of a rented machine (its start and the transfers beside it); what that quarter-hour has
    left (:data:`SECOND_CALL_S`) can run the next call's first notebooks (``CALL_S=300``)."""
    if n < 1:
        raise ValueError(f"call {n}: calls count from 1")
    return CALL_S


def host_only(rows) -> list[str]:
    """The notebooks of ``rows`` the GPU plan leaves out: every measurement on the host (:data:`HOST_ONLY`)."""
    return [name for name, _ in rows if name[:2] in HOST_ONLY]


def print_calls(calls: list[dict], host: list[str] | None = None) -> None:
    print(f"\ncalls on a 16-core GPU machine, each at most {CALL_S} s with {SETUP_S} s of set-up, one a quarter-hour "
          f"(bash .ci/gpu-call N):")
    for i, call in enumerate(calls, 1):
        print(f"  call {i} (at most {call['deadline_s']} s): about {call['seconds']:.0f} s")
        for nb in call["notebooks"]:
            print(f"    {nb['name']:<32} {nb['seconds']:>5.0f} s  limit {nb['limit']:>3} s  ({nb['how']})")
    unknown = [nb["name"] for c in calls for nb in c["notebooks"] if not nb["known"]]
    if unknown:
        print(f"  planned without a record or a budget ({len(unknown)}): {', '.join(unknown)}")
    if host:
        print(f"  not on the GPU machine ({len(host)}, every measurement on the host, no CUDA branch): "
              f"{', '.join(host)}; a 16-core CPU machine runs them (--only {' '.join(h[:2] for h in host)})")


def call_items(n: int, cores: int = 16, profile: str = "gpu") -> str:
    """Call ``n`` (1-based) as ``.ci/gpu-call`` reads it: ``15:78 01:90 ...`` (notebook:limit)."""
    key = planned_machine_key(cores)
    calls = gpu_calls(plan(list_notebooks(), profile, {}), key, profile)
    if not 1 <= n <= len(calls):
        raise ValueError(f"call {n}: the plan has calls 1 to {len(calls)}")
    return " ".join(f"{nb['name'][:2]}:{nb['limit']}" for nb in calls[n - 1]["notebooks"])


def call_deadline(n: int) -> int:
    """Call ``n``'s seconds, as ``.ci/gpu-call`` reads them (``--call N --seconds``)."""
    return call_seconds(n)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m feedlab.run_plan",
                                 description="print one call of the gpu plan as notebook:limit pairs")
    ap.add_argument("--call", type=int, required=True, metavar="N")
    ap.add_argument("--cores", type=int, default=16)
    ap.add_argument("--seconds", action="store_true", help="print the call's seconds (its deadline) instead")
    args = ap.parse_args(argv)
    os.environ["FEEDLAB_CORES"] = str(args.cores)  # worker counts resolved for that machine
    try:
        print(call_deadline(args.call) if args.seconds else call_items(args.call, args.cores))
    except ValueError as exc:
        print(f"feedlab.run_plan: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
