"""What the runner would run, without running it (``python -m feedlab.run --dry-run [--cores N]``):
each notebook's parameters once its profile is resolved for a machine with N usable cores, the
folder its record would land in on that machine, and its seconds as recorded by the last run of the
same profile on a machine with those cores (:func:`recorded_seconds`; "no record" where none ran),
with the plan's total (:func:`plan`, :func:`print_plan`).

For the ``gpu`` profile it also packs the notebooks into **calls**, one command each on a rented
16-core GPU machine (docs/GPU_RUN.md), two a quarter-hour (:func:`call_seconds`: :data:`CALL_S` with a fresh
machine's set-up :data:`SETUP_S`, then :data:`SECOND_CALL_S` with the warm machine's :data:`SETUP_WARM_S`):
the cure, 01, 03, 09 and 10 (:data:`FIRST_LOAN`) largest first so that they share the first quarter-hour, then
the rest in order of value (:data:`VALUE_ORDER`; :data:`HOST_ONLY`'s host questions left to a CPU machine),
every notebook with its predicted seconds and the limit it runs under (:func:`gpu_calls`;
``python -m feedlab.run_plan --call N`` prints call N as ``.ci/gpu-call`` reads it). A prediction is
the last record of that profile on such a machine with what its limit left out (:func:`limit_shortfall`), else
the notebook's own ``budget_s`` plus its start-up (:mod:`feedlab.budget`); a notebook with neither
is planned at :data:`FIRST_RUN_S` and says so."""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from feedlab import fingerprint, machines, paths, startup
from feedlab.files import load_json
from feedlab.machines import machine_dirs, machine_key
from feedlab.nbparams import notebook_parameters
from feedlab.paths import NOTEBOOKS_DIR, figure_dir
from feedlab.profiles import BASE_PROFILE, profile_values, resolve, values_in


def list_notebooks() -> list[Path]:
    """The workbook's notebooks (``notebooks/NN_*.ipynb``), in order."""
    return sorted(p for p in NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")
                  if ".executed" not in p.name and not p.name.startswith("."))


def plan(notebooks: list[Path], profile: str, params: dict,
         params_for: dict[Path, dict] | None = None, out_root: Path | None = None) -> list[tuple[str, dict | str]]:
    """What each notebook would run with: ``(name, resolved parameters)`` or ``(name, error)``. ``params_for``:
    each notebook's own typed values (:class:`feedlab.run_params.RunParams`), else ``params``. The profile is
    ``profile`` only: a ``profile`` key in the values is one the runner refused or agreed with already.
    ``out_root`` (``--out-root``): each ``out_dir`` is ``out_root/<notebook>``, where the run writes
    (``run_record.destination``; attack56 W5: the dry run showed ``runs/…``)."""
    out, key = [], None
    for nb in notebooks:
        names = notebook_parameters(nb)
        given = {k: v for k, v in names.items() if k != "profile"}
        mine = (params_for or {}).get(nb, params)
        given.update({k: v for k, v in mine.items() if k in names and k != "profile"})
        values_of = profile_values(nb.stem, profile)   # "" means "the profile's value" only where it has one
        given = {k: (None if v == "" and k in values_of and k not in ("data_root", "out_dir", "cls_root") else v)
                 for k, v in given.items()}
        try:
            P = resolve(nb.stem, profile, _create_out_dir=False, **given)
        except (KeyError, ValueError) as exc:
            out.append((nb.stem, f"cannot resolve: {exc}"))
            continue
        values = {k: v for k, v in vars(P).items() if k in names or k in ("cores",)}
        if "out_dir" in values and out_root:   # --out-root DIR writes DIR/<notebook>/, as the run does
            values["out_dir"] = Path(out_root) / nb.stem
        elif "out_dir" in values and not given.get("out_dir"):  # where the runner writes, not a scratch run
            key = key or planned_machine_key()
            values["out_dir"] = figure_dir(nb.stem, "", profile, create=False, committed=True, machine=key)
        elif "out_dir" in values:   # a -p out_dir as the runner uses it (attack59 W2: a figures/ path showed runs/…)
            values["out_dir"] = figure_dir(nb.stem, given["out_dir"], profile, create=False, committed=True)
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


def _shape(value) -> str:
    return "null" if value is None else type(value).__name__


def papermill_meta(path: str | Path) -> tuple[dict, float | None, str]:
    """``(parameters, duration, end_time)`` of an executed notebook's ``metadata.papermill``, each of its type:
    ``duration`` a finite number of seconds ≥ 0 or None (not recorded), ``end_time`` text ("" where none).
    ``OSError``/``ValueError`` where the file cannot be read (:func:`feedlab.files.load_json`), and
    ``ValueError``, one line naming the file and the field, where a field is not of its shape (attack56 B51/B52:
    ``parameters`` a list, ``duration`` "abc" ended the dry run in a traceback or a line naming neither)."""
    nb = load_json(path, "executed notebook")
    where, node = paths.rel(path), nb
    for field in ("metadata", "papermill"):
        node = node.get(field) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            raise ValueError(f"{where}: {field} is not an object (the record is skipped)")
    params, duration, end = node.get("parameters") or {}, node.get("duration"), node.get("end_time") or ""
    if not isinstance(params, dict):
        raise ValueError(f"{where}: metadata.papermill.parameters holds {_shape(params)}, not an object "
                         "(the record is skipped)")
    if duration is not None and (type(duration) not in (int, float) or not math.isfinite(duration) or duration < 0):
        raise ValueError(f"{where}: metadata.papermill.duration holds {_shape(duration)} {str(duration)[:20]!r}, "
                         "not seconds (the record is skipped)")
    return params, (None if duration is None else float(duration)), str(end)


def recorded_seconds(notebook: str, key: str, profile: str, figures_dir: Path | None = None,
                     skipped: list[str] | None = None) -> dict | None:
    """The last committed run of ``notebook`` under ``profile`` on machine ``key``, or else on another
    machine with the same number of cores (``h100-16c`` for a CPU box planning ``--cores 16``):
    ``{"seconds", "machine", "when"}`` from the executed record's papermill duration; None: no record.
    A record that cannot be read or whose fields are not of their shape is skipped, its line added to
    ``skipped`` (:func:`papermill_meta`)."""
    cores = re.search(r"-(\d+)c$", key)
    dirs = machine_dirs(notebook, figures_dir)
    order = [k for k in dirs if k == key] + [k for k in dirs if k != key and cores and k.endswith(f"-{cores[1]}c")]
    for k in order:
        for rec in sorted(dirs[k].glob("*.executed.ipynb")):
            try:
                params, duration, end = papermill_meta(rec)
            except (OSError, ValueError) as exc:
                if skipped is not None:
                    skipped.append(str(exc).splitlines()[0] if str(exc) else f"{paths.rel(rec)}: cannot be read")
                continue
            if params.get("profile") == profile and duration:
                short, n = limit_shortfall(dirs[k], skipped)
                commit, modified = record_commit(dirs[k])
                return {"seconds": duration, "machine": k, "when": end[:10],
                        "left_out_s": short, "left_out": n, "commit": commit, "modified": modified,
                        "changed": [] if modified else settings_changed(notebook, profile, commit)}
    return None


def record_commit(folder: Path) -> tuple[str | None, bool]:
    """``(commit, modified)``: the commit a record's fingerprint names (``git.commit``, a hex name only, else
    None) and whether its tree was modified (``git.dirty``): then the profile it ran under is not known."""
    try:
        git = load_json(Path(folder) / "fingerprint.json").get("git") or {}
    except (OSError, ValueError, AttributeError):
        return None, False
    if not isinstance(git, dict):
        return None, False
    commit = git.get("commit")
    commit = commit if isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{7,40}", commit) else None
    return commit, bool(git.get("dirty"))


def changed_note(rec: dict, most: int = 4) -> str:
    """What a record's profile values were against today's, for a reader (empty where they match): the first
    ``most`` changes and how many more, or that a modified tree ran it (its values not known)."""
    if rec.get("modified"):
        return f"made from a modified tree of {(rec.get('commit') or '')[:7] or 'an unnamed commit'}: the values it ran under are not known"
    changed = rec.get("changed") or []
    if not changed:
        return ""
    more = f" and {len(changed) - most} more" if len(changed) > most else ""
    return f"the profile changed since: {', '.join(changed[:most])}{more}"


def settings_changed(notebook: str, profile: str, commit: str | None) -> list[str]:
    """The ``profile``'s values for ``notebook`` that differ between ``commit``'s ``notebooks/profiles.yaml`` and
    this checkout's, as ``name old → new``: a record made under other values costs what those values cost
    (01 on the H100: recorded at 15 s rate caps, planned at 5 s). Empty where they match, or where the commit
    cannot be read here (a copy without history: nothing is claimed)."""
    if not commit:
        return []
    try:
        text = subprocess.run(["git", "-C", str(paths.REPO_ROOT), "show", "--end-of-options",
                               f"{commit}:notebooks/profiles.yaml"],
                              capture_output=True, text=True, timeout=20)
        if text.returncode:
            return []
        then = values_in(yaml.safe_load(text.stdout) or {}, notebook, profile)
    except (OSError, subprocess.SubprocessError, yaml.YAMLError, AttributeError):
        return []
    now = profile_values(notebook, profile)
    return [f"{k} {then.get(k)!r} → {now.get(k)!r}".replace("'", "") for k in sorted(set(then) | set(now))
            if then.get(k) != now.get(k)]


def limit_shortfall(folder: Path, skipped: list[str] | None = None) -> tuple[float, int]:
    """``(seconds, count)`` of the settings a record left out for its run's limit (``setting_costs.json``,
    :mod:`feedlab.budget`): each at its estimate ("about N s"), else at the dearest setting the run paid
    for. A record cut short by its limit understates what the notebook costs by that much (09 on the H100,
    2026-11-26: 86 s recorded, seven batch-128 settings of about 11 s each left out). A budget's own
    leavings are not counted: the profile chose them. A field not of its shape (``costs_s`` not an object of
    seconds, ``left_out`` not a list of objects: attack56 B55/B56) is left out, its line added to ``skipped``."""
    path = Path(folder) / "setting_costs.json"
    try:
        rec = load_json(path)
    except (OSError, ValueError):
        return 0.0, 0
    bad = []
    rec = rec if isinstance(rec, dict) else {}
    costs, left = rec.get("costs_s") or {}, rec.get("left_out") or []
    if not isinstance(costs, dict):
        bad, costs = [f"costs_s holds {_shape(costs)}, not an object"], {}
    secs = [v for v in costs.values() if type(v) in (int, float) and math.isfinite(v)]
    if len(secs) < len(costs):
        bad.append("costs_s holds values that are not seconds")
    if not isinstance(left, list):
        bad, left = [*bad, f"left_out holds {_shape(left)}, not a list"], []
    if any(not isinstance(row, dict) for row in left):
        bad.append("left_out holds items that are not objects")
    if bad and skipped is not None:
        skipped.append(f"{paths.rel(path)}: {'; '.join(bad)} (left out of the plan)")
    dearest = max((float(v) for v in secs), default=0.0)
    total, n = 0.0, 0
    for row in left:
        why = str(row.get("why", "")) if isinstance(row, dict) else ""
        if "run's limit" not in why:
            continue
        est = re.search(r"about (\d+(?:\.\d+)?) s", why)
        total += float(est[1]) if est else dearest
        n += 1
    return total, n


def _where(rows) -> str:
    """The header's folder: the one the rows' ``out_dir`` share with their notebook's name as ``<notebook>``
    (attack58 W7: a smoke plan said figures/ while its rows said runs/smoke/)."""
    def shape(name: str, out_dir) -> str:   # the notebook's own name as the last folder or the one above
        p = Path(str(out_dir))
        if p.name == name:
            return str(p.parent / "<notebook>")
        return str(p.parent.parent / "<notebook>" / p.name) if p.parent.name == name else str(p)

    shapes = {shape(name, v["out_dir"]) for name, v in rows if isinstance(v, dict) and "out_dir" in v}
    if len(shapes) == 1:
        return f"under {shapes.pop().rstrip('/')}/"
    return "where each notebook's out_dir says" if shapes else "where each notebook's out_dir says (none resolved)"


def print_plan(rows, profile: str, cores: int, figures_dir: Path | None = None) -> None:
    key = planned_machine_key(cores)  # the machine with that many cores
    print(f"plan: profile {profile}, {cores} usable cores, results {_where(rows)} (nothing is run)")
    known, missing = 0.0, []
    for name, values in rows:
        print(f"\n{name}")
        skipped: list[str] = []
        rec = recorded_seconds(name, key, profile, figures_dir, skipped)
        for line in skipped:   # a record not of its shape: named, one line each, never a traceback
            print(f"  {'skipped':<24} {line}")
        if rec:
            known += rec["seconds"]
            print(f"  {'recorded seconds':<24} {rec['seconds']:.0f} (the {profile} run on {rec['machine']}, {rec['when']})")
            if changed_note(rec):
                print(f"  {'':<24} {changed_note(rec)}")
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
CALL_S = 540          # of a command's 600 s: a quarter-hour's first call, its set-up included
QUARTER_S = 900       # a quarter-hour of a rented machine: its start, its calls, the idle between them
MACHINE_START_S = 40  # the machine's start and the repository's upload (37 s at bc1be8b, 2026-11-26)
TRANSFER_S = 25       # each call's results home, and the next call's upload
GIVE_BACK_S = 10      # handing the machine back at the quarter-hour's end
# what a quarter-hour has left after its start and its first call: its second call, on the warm machine
SECOND_CALL_S = QUARTER_S - MACHINE_START_S - CALL_S - TRANSFER_S - GIVE_BACK_S
SETUP_S = 80          # a first call's wheels, set-up and gpu data: 77 s at bc1be8b on 2026-11-26 (plan said 45)
SETUP_WARM_S = 20     # a second call's, the wheels and data already there: 17 s at 8e73a35 on 2026-11-26
START_S = 20          # a notebook's kernel, CUDA start-up and load probe before anything is timed (docs/GPU_RUN.md)
FIRST_RUN_S = 120     # a notebook with no record and no budget: planned at this, to get its first record
MARGIN = 1.3          # a limit is the prediction × MARGIN (+ START_S where the prediction is a record)
VALUE_ORDER = ("15", "01", "03", "09", "10", "06", "02", "05", "12", "13", "14")
FIRST_LOAN = VALUE_ORDER[:5]   # the cure, 01, 03, 09 and 10: packed to share one quarter-hour where they can
# notebooks whose every measurement is on the host (no CUDA branch: printing, collate on the CPU, HDF5 handles
# across fork and spawn, worker hygiene, the simulated loops and memory of 12): a GPU machine's loan is not spent
# on them; a 16-core CPU machine answers them (``python -m feedlab.run --profile gpu --only 04 07 08 11 12``)
HOST_ONLY = ("04", "07", "08", "11", "12")   # 12: "nothing in this notebook needs a GPU" (printed by its cell 3)


def predicted_seconds(name: str, values, key: str, profile: str,
                      figures_dir: Path | None = None) -> tuple[float, str, bool]:
    """``(seconds, how, known)``: the last record of ``profile`` on machine ``key`` (or one with its
    cores; else of the profile it starts from, ``quick`` for ``gpu``, where the notebook's values are
    the same under both), with what that run left out for its limit (:func:`limit_shortfall`); without a
    record, the notebook's ``budget_s`` + :data:`START_S`; else :data:`FIRST_RUN_S` with ``known`` False.
    A record wins over a budget: the settings a claim reads pass a budget (:mod:`feedlab.budget`), so a
    budget understated every budgeted notebook on the H100 (2026-11-26: 01 planned at 90 s reached its
    second grid after 106 s; 09 planned at 65 s took 86 s and left out seven settings)."""
    rec = recorded_seconds(name, key, profile, figures_dir)
    base = BASE_PROFILE.get(profile)
    if rec is None and base and profile_values(name, profile) == profile_values(name, base):
        # a notebook the profile leaves as its base's (no block of its own): the base's record is the same run
        rec = recorded_seconds(name, key, base, figures_dir)
        if rec:
            rec = dict(rec, machine=f"{rec['machine']} with the {base} profile")
    budget = values.get("budget_s") if isinstance(values, dict) else None
    kept = float(budget) + START_S if isinstance(budget, (int, float)) and budget > 0 else None
    if rec:
        more = rec.get("left_out_s") or 0.0
        if more and kept is not None:   # a budget bounds what its grids add beyond the settings a claim reads
            more = min(more, float(budget))
        how = f"recorded on {rec['machine']}, {rec['when']}"
        if more:
            how += f", + {more:.0f} s for the {rec['left_out']} setting(s) its limit left out"
        if changed_note(rec):   # the record is what the old values cost: said, not guessed at
            how += f"; {changed_note(rec)}"
        return rec["seconds"] + more, how, True
    if kept is not None:
        return kept, f"budget_s {budget:g} + {START_S} s start; no record yet", True
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
    items = [(name, values, predicted_seconds(name, values, key, profile, figures_dir)) for name, values in ordered]
    # the first notebooks of value (FIRST_LOAN) largest first, so they share the fewest quarter-hours; then the
    # rest in order of value, each in the first call with room; each call runs its notebooks in order of value
    first = sorted((it for it in items if it[0][:2] in FIRST_LOAN), key=lambda it: -it[2][0])
    for name, values, (seconds, how, known) in first + [it for it in items if it[0][:2] not in FIRST_LOAN]:
        if seconds > CALL_S - SETUP_S:   # more than a call holds: a call of its own, stopped at its limit, said
            seconds, how = float(CALL_S - SETUP_S), f"{how}; {seconds:.0f} s is more than a call holds: cut to it"
        limit = math.ceil(seconds * MARGIN + (START_S if "recorded" in how else 0))
        item = {"name": name, "seconds": round(seconds, 1), "how": how, "known": known, "limit": limit}
        # the first call with room, in order (a quarter-hour's short second call takes the smaller ones)
        n = next((i for i, c in enumerate(calls) if c["seconds"] + seconds <= c["deadline_s"]), None)
        while n is None:
            k = len(calls) + 1
            calls.append({"notebooks": [], "seconds": float(setup_seconds(k)), "quarter": (k + 1) // 2,
                          "deadline_s": call_seconds(k)})
            n = len(calls) - 1 if seconds + setup_seconds(k) <= call_seconds(k) else None
        item["limit"] = min(limit, calls[n]["deadline_s"] - setup_seconds(n + 1))
        calls[n]["notebooks"].append(item)
        calls[n]["seconds"] = round(calls[n]["seconds"] + seconds, 1)
    for c in calls:
        c["notebooks"].sort(key=lambda nb: (rank.get(nb["name"][:2], len(rank)), nb["name"]))
    while calls and not calls[-1]["notebooks"]:
        calls.pop()
    return calls


def call_seconds(n: int) -> int:
    """The seconds call ``n`` (1-based) may take, set-up included: two calls a quarter-hour of a rented
    machine — its first (odd ``n``) :data:`CALL_S`, its second (even ``n``) what the quarter-hour has left
    after the machine's start, the first call and the transfers (:data:`SECOND_CALL_S`)."""
    if n < 1:
        raise ValueError(f"call {n}: calls count from 1")
    return CALL_S if n % 2 else SECOND_CALL_S


def setup_seconds(n: int) -> int:
    """Call ``n``'s set-up: a fresh machine's wheels and data (:data:`SETUP_S`) for a quarter-hour's first
    call, the warm machine's (:data:`SETUP_WARM_S`) for its second."""
    return SETUP_S if n % 2 else SETUP_WARM_S


def host_only(rows) -> list[str]:
    """The notebooks of ``rows`` the GPU plan leaves out: every measurement on the host (:data:`HOST_ONLY`)."""
    return [name for name, _ in rows if name[:2] in HOST_ONLY]


def print_calls(calls: list[dict], host: list[str] | None = None) -> None:
    print(f"\ncalls on a 16-core GPU machine, two a quarter-hour: its first at most {CALL_S} s with {SETUP_S} s of "
          f"set-up, its second at most {SECOND_CALL_S} s with {SETUP_WARM_S} s on the warm machine (bash .ci/gpu-call N):")
    for i, call in enumerate(calls, 1):
        print(f"  call {i} (quarter-hour {call['quarter']}, at most {call['deadline_s']} s): about {call['seconds']:.0f} s")
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
    startup.started()   # past its start: a lazy import later is not the start-up's (feedlab.startup)
    ap = argparse.ArgumentParser(prog="python -m feedlab.run_plan",
                                 description="print one call of the gpu plan as notebook:limit pairs")
    ap.add_argument("--call", type=int, required=True, metavar="N")
    ap.add_argument("--cores", type=int, default=16)
    ap.add_argument("--seconds", action="store_true", help="print the call's seconds (its deadline) instead")
    args = ap.parse_args(argv)
    before = os.environ.get("FEEDLAB_CORES")
    os.environ["FEEDLAB_CORES"] = str(args.cores)  # worker counts resolved for that machine
    try:
        print(call_deadline(args.call) if args.seconds else call_items(args.call, args.cores))
    except ValueError as exc:
        print(f"feedlab.run_plan: {exc}", file=sys.stderr)
        return 2
    finally:   # the pretend count is this call's alone: a caller in the same process gets its own back
        if before is None:
            os.environ.pop("FEEDLAB_CORES", None)
        else:
            os.environ["FEEDLAB_CORES"] = before
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
