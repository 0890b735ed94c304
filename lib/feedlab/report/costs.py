"""What the notebooks cost, from the runner's own records: papermill's ``duration`` in each committed executed
notebook (``figures/<notebook>/<machine>/<notebook>.executed.ipynb`` → ``metadata.papermill``), summed per machine
and profile. The README's cost lines are generated from these (``python -m feedlab.report.readme``), never typed;
what the runner does not record (the install, the peers' venvs, the data, the disk a clone takes) is said to be
not recorded, with no number."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

from feedlab.errors import MAX_SECONDS, cli_errors
from feedlab.files import load_json
from feedlab.machines import machine_dirs, machine_key
from feedlab.paths import FIGURES_DIR, REPO_ROOT
from feedlab.results import atomic_write
from feedlab.run_plan import papermill_meta

COSTS_START, COSTS_END = "<!-- costs:start -->", "<!-- costs:end -->"


def notebook_seconds(figures_dir: Path = FIGURES_DIR,
                     skipped: list[str] | None = None) -> dict[tuple[str, str], dict[str, dict]]:
    """``{(machine, profile): {notebook: {"seconds", "end"}}}`` from every committed executed record. A record
    whose ``metadata.papermill`` fields are not of their shape (a duration "abc": attack56 B65) is left out, its
    one line (file and field, :func:`feedlab.run_plan.papermill_meta`) added to ``skipped``."""
    out: dict[tuple[str, str], dict[str, dict]] = {}
    for nb_dir in sorted(p for p in Path(figures_dir).iterdir() if p.is_dir()):
        for key, folder in machine_dirs(nb_dir.name, figures_dir).items():
            path = folder / f"{nb_dir.name}.executed.ipynb"
            if not path.exists():
                continue
            try:
                params, duration, end = papermill_meta(path)
            except (OSError, ValueError) as exc:
                if skipped is not None:
                    skipped.append(str(exc).splitlines()[0] if str(exc) else f"{path}: cannot be read")
                continue
            profile = params.get("profile")
            if profile and duration:
                out.setdefault((key, str(profile)), {})[nb_dir.name] = {"seconds": duration, "end": end[:10]}
    return out


def costs_markdown(figures_dir: Path = FIGURES_DIR) -> str:
    """One line per machine and profile: the notebooks' seconds as the runner recorded them."""
    rows = notebook_seconds(figures_dir)
    if not rows:
        return "No committed executed notebooks yet: run `make figures`.\n"
    lines = ["What the notebooks took in their committed runs, from the runner's own records (papermill's "
             "duration in each executed notebook, `feedlab.report.costs`); the install, `make peers`, the data and "
             "the disk a clone takes are not in the runner's records, so no number is given for them here:", ""]
    for (key, profile), nbs in sorted(rows.items(), key=lambda kv: (not kv[0][0].startswith("cpu"), kv[0])):
        total = sum(v["seconds"] for v in nbs.values())
        ends = sorted(v["end"] for v in nbs.values() if v["end"])
        when = f", runs of {ends[0]} – {ends[-1]}" if ends and ends[0] != ends[-1] else (f", runs of {ends[0]}"
                                                                                     if ends else "")
        slowest = max(nbs, key=lambda n: nbs[n]["seconds"])
        lines.append(f"- **{key}**, {profile} profile: {len(nbs)} notebooks, {total:,.0f} s of notebooks "
                     f"({total / 60:.1f} minutes){when}; the longest {slowest[:2]} ({nbs[slowest]['seconds']:,.0f} s)")
    return "\n".join(lines) + "\n"


RECORDS_START, RECORDS_END = "<!-- records:start -->", "<!-- records:end -->"
GPU_RUN_MD = REPO_ROOT / "docs" / "GPU_RUN.md"


def records_by_run(machine: str, figures_dir: Path = FIGURES_DIR) -> dict[tuple[str, str], list[str]]:
    """``{(day, commit): [notebook numbers]}`` of ``machine``'s committed records, from their fingerprints."""
    out: dict[tuple[str, str], list[str]] = {}
    for nb_dir in sorted(p for p in Path(figures_dir).iterdir() if p.is_dir()):
        folder = machine_dirs(nb_dir.name, figures_dir).get(machine)
        if folder is None:
            continue
        try:
            fp = load_json(folder / "fingerprint.json")
        except (OSError, ValueError):
            continue
        if not isinstance(fp, dict):   # not a fingerprint: no run to list it under
            continue
        git = fp.get("git") if isinstance(fp.get("git"), dict) else {}
        commit = git.get("commit") if isinstance(git.get("commit"), str) else "?"
        commit = commit[:7] + ("+dirty" if git.get("dirty") is True else "")
        out.setdefault((str(fp.get("time_utc") or "?")[:10], commit), []).append(nb_dir.name[:2])
    return out


def records_markdown(machine: str = "h100-16c", figures_dir: Path = FIGURES_DIR) -> str:
    """Which run each of ``machine``'s committed records comes from (generated: a record replaced since is never
    named as current)."""
    runs = records_by_run(machine, figures_dir)
    if not runs:
        return f"No committed {machine} records.\n"
    lines = [f"The committed {machine} records, by the run that made them (their fingerprints; generated by "
             "`python -m feedlab.report.readme`):", ""]
    for (day, commit), nbs in sorted(runs.items()):
        lines.append(f"- {day}, {commit}: {', '.join(nbs)}")
    return "\n".join(lines) + "\n"


def update_records_md(path: Path = GPU_RUN_MD, machine: str = "h100-16c") -> bool:
    """docs/GPU_RUN.md's generated list of which run each committed record comes from; True if changed."""
    if not path.is_file():
        return False
    text = path.read_text(encoding="utf-8")
    if RECORDS_START not in text or RECORDS_END not in text:
        return False
    new = (text.split(RECORDS_START)[0] + RECORDS_START + "\n" + records_markdown(machine) + RECORDS_END
           + text.split(RECORDS_END, 1)[1])
    if new == text:
        return False
    atomic_write(path, new)
    return True


# ---------------------------------------------------------------- what each make target costs, where a user decides
COSTS_JSON = REPO_ROOT / "docs" / "costs.json"
TARGETS = ("figures", "test", "peers", "doctor")
TARGET_START, TARGET_END = "<!-- target-costs:start -->", "<!-- target-costs:end -->"
NOT_MEASURED = "not measured yet"


def target_records(path: Path = COSTS_JSON) -> dict[str, dict]:
    """``{target: {"seconds", "disk_bytes"?, "machine", "date"}}``: the measured runs of a make target (docs/costs.json,
    written by ``--record`` from a measured run, never typed); ``{}`` where none is committed."""
    fix = "restore it (git checkout -- docs/costs.json)"
    if not (Path(path).exists() or Path(path).is_symlink()):
        return {}
    try:   # a file there that does not load is named, never read as "not measured yet" (attack61 C9/C10)
        data = load_json(Path(path), "the costs record")
    except (OSError, ValueError) as exc:
        raise ValueError(f"{exc}; {fix}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: holds {type(data).__name__}, not an object with targets; {fix}")
    targets = data.get("targets")
    if targets is None:
        return {}
    if not isinstance(targets, dict):
        raise ValueError(f"{path}: targets is {type(targets).__name__}, not an object of targets; {fix}")
    for k, v in targets.items():   # a field of the wrong shape is named, never a TypeError (attack61 C4)
        if not isinstance(v, dict):
            raise ValueError(f"{path}: targets.{k} is {type(v).__name__}, not a record; {fix}")
        sec, disk = v.get("seconds"), v.get("disk_bytes")
        if sec is not None and (isinstance(sec, bool) or not isinstance(sec, (int, float)) or not math.isfinite(sec)):
            raise ValueError(f"{path}: targets.{k}.seconds is {sec!r}, not a number of seconds; {fix}")
        if disk is not None and (isinstance(disk, bool) or not isinstance(disk, int) or disk < 0):
            raise ValueError(f"{path}: targets.{k}.disk_bytes is {disk!r}, not a count of bytes; {fix}")
    return {k: v for k, v in targets.items() if v.get("seconds")}


def record_target(target: str, seconds: float, disk_bytes: int | None = None, machine: str = "",
                  path: Path = COSTS_JSON) -> dict:
    """Record a measured run of ``make TARGET`` (its wall seconds, the disk it left where measured) in docs/costs.json."""
    if target not in TARGETS:
        raise ValueError(f"target {target!r}: one of {', '.join(TARGETS)}")
    if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and 0 < seconds <= MAX_SECONDS):
        raise ValueError(f"seconds {seconds!r}: a measured duration above 0 and at most {MAX_SECONDS:g}")
    if disk_bytes is not None and disk_bytes < 0:
        raise ValueError(f"--disk-bytes {disk_bytes}: the bytes the target left on disk, 0 or more")
    if machine and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", machine):
        raise ValueError(f"--machine {machine!r}: a machine key is one name (cpu-2c, h100-16c): letters, digits, "
                         "'.', '_' or '-'")
    if Path(path).exists() or Path(path).is_symlink():   # the other targets' records are never dropped (attack60
        try:                                                # C3): a file that does not load is named, left as it is
            data = load_json(Path(path), "the costs record")
        except (OSError, ValueError) as exc:
            raise ValueError(f"{exc}: left as it is, nothing recorded; restore it (git checkout -- docs/costs.json)") \
                from None
        if not isinstance(data, dict) or not isinstance(data.get("targets", {}), dict):
            raise ValueError(f"{path}: not a costs record (an object with a 'targets' object): left as it is; "
                             "restore it (git checkout -- docs/costs.json)")
    else:
        data = {}
    entry = {"seconds": round(float(seconds), 1), "machine": machine or machine_key(),
             "date": datetime.now(timezone.utc).strftime("%Y-%m-%d")}
    if disk_bytes:
        entry["disk_bytes"] = int(disk_bytes)
    data.setdefault("targets", {})[target] = entry
    atomic_write(Path(path), json.dumps(data, indent=1, sort_keys=True) + "\n")
    return entry


def figures_notebooks(figures_dir: Path = FIGURES_DIR) -> tuple[str, dict] | None:
    """The quick-profile run ``make figures`` makes by default, on the machine whose record is the most whole (then
    the latest): ``(machine, {notebook: {"seconds", "end"}})``; None where no quick run is committed."""
    rows = {k: v for k, v in notebook_seconds(figures_dir).items() if k[1] == "quick"}
    if not rows:
        return None
    key = max(rows, key=lambda k: (len(rows[k]), max(v["end"] for v in rows[k].values()), k[0].startswith("cpu")))
    return key[0], rows[key]


def _measured(entry: dict | None) -> str:
    if not entry:
        return NOT_MEASURED
    disk = f", {entry['disk_bytes'] / 1e9:.1f} GB on disk" if entry.get("disk_bytes") else ", disk not measured yet"
    return f"{entry['seconds'] / 60:.1f} minutes on {entry.get('machine', '?')} ({entry.get('date', '?')}){disk}"


def target_lines(figures_dir: Path = FIGURES_DIR, path: Path = COSTS_JSON) -> dict[str, str]:
    """``{target: what it cost}``, each from a committed record or "not measured yet"."""
    recs = target_records(path)
    out = {t: _measured(recs.get(t)) for t in TARGETS}
    nbs = figures_notebooks(figures_dir)
    if nbs:
        machine, rows = nbs
        total = sum(v["seconds"] for v in rows.values())
        ends = sorted(v["end"] for v in rows.values() if v["end"])
        when = f"{ends[0]} – {ends[-1]}" if ends and ends[0] != ends[-1] else (ends[0] if ends else "?")
        whole = "" if recs.get("figures") else "; the install, peers, Ray, data and disk: not measured yet"
        out["figures"] = (("the whole target " + out["figures"] + "; " if recs.get("figures") else "")
                          + f"its {len(rows)} notebooks {total / 60:.1f} minutes on {machine} (quick profile, runs of "
                          f"{when}){whole}")
    return out


def targets_markdown(figures_dir: Path = FIGURES_DIR, path: Path = COSTS_JSON) -> str:
    """The README's cost per make target, from the runner's records and docs/costs.json."""
    lines = [f"- `make {t}`: {text}" for t, text in target_lines(figures_dir, path).items()]
    return ("What each costs, on the machine that last ran it (the notebooks' seconds are papermill's in each committed "
            "executed notebook; the other targets' are in [`docs/costs.json`](docs/costs.json), recorded from a "
            "measured run by `python -m feedlab.report.costs --record TARGET SECONDS`):\n\n" + "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m feedlab.report.costs",
                                 description="What each make target costs, from committed records.")
    ap.add_argument("--record", nargs=2, metavar=("TARGET", "SECONDS"),
                    help=f"record a measured run of make TARGET ({', '.join(TARGETS)}) in docs/costs.json")
    ap.add_argument("--disk-bytes", type=int, help="with --record: the disk the target left, measured (du -sb)")
    ap.add_argument("--machine", default="", help="with --record: the machine key (default: this machine's)")
    args = ap.parse_args(argv)
    with cli_errors("python -m feedlab.report.costs"):
        if args.record:
            try:
                seconds = float(args.record[1])
            except ValueError:
                raise ValueError(f"SECONDS {args.record[1]!r}: a number of seconds") from None
            entry = record_target(args.record[0], seconds, args.disk_bytes, args.machine)
            print(f"docs/costs.json: make {args.record[0]} {entry}")
            return 0
        skipped: list[str] = []
        notebook_seconds(skipped=skipped)
        for line in skipped:   # a record not of its shape: named, never a traceback or a bare error
            print(f"skipped: {line}", file=sys.stderr)
        print("measured cost (figures/: the notebooks' own seconds; docs/costs.json: the rest):")
        for t, text in target_lines().items():
            print(f"  make {t:<8} {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
