"""What the notebooks cost, from the runner's own records: papermill's ``duration`` in each committed executed
notebook (``figures/<notebook>/<machine>/<notebook>.executed.ipynb`` → ``metadata.papermill``), summed per machine
and profile. The README's cost lines are generated from these (``python -m feedlab.report.readme``), never typed;
what the runner does not record (the install, the peers' venvs, the data, the disk a clone takes) is said to be
not recorded, with no number."""

from __future__ import annotations

import json
from pathlib import Path

from feedlab.machines import machine_dirs
from feedlab.paths import FIGURES_DIR

COSTS_START, COSTS_END = "<!-- costs:start -->", "<!-- costs:end -->"


def notebook_seconds(figures_dir: Path = FIGURES_DIR) -> dict[tuple[str, str], dict[str, dict]]:
    """``{(machine, profile): {notebook: {"seconds", "end"}}}`` from every committed executed record."""
    out: dict[tuple[str, str], dict[str, dict]] = {}
    for nb_dir in sorted(p for p in Path(figures_dir).iterdir() if p.is_dir()):
        for key, folder in machine_dirs(nb_dir.name, figures_dir).items():
            path = folder / f"{nb_dir.name}.executed.ipynb"
            try:
                pm = json.loads(path.read_text(encoding="utf-8"))["metadata"]["papermill"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            profile = (pm.get("parameters") or {}).get("profile")
            if profile and pm.get("duration"):
                out.setdefault((key, str(profile)), {})[nb_dir.name] = {
                    "seconds": float(pm["duration"]), "end": str(pm.get("end_time") or "")[:10]}
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
