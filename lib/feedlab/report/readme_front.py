"""The README's front page blocks, generated from the committed records (``python -m feedlab.report.readme``):
the answer's figure (the cure's key figure), the tuner's committed reading (notebook 16) and the gallery (each
notebook's key figure, small, linking to its executed record). What the blocks show is what a record holds;
a notebook with no committed record says so, with no number."""

from __future__ import annotations

import re
from pathlib import Path

from feedlab import findings
from feedlab.files import load_json
from feedlab.machines import machine_dirs
from feedlab.paths import FIGURES_DIR, REPO_ROOT
from feedlab.report.claims.core import Run
from feedlab.report.claims.sides import tune_target_line

ANSWER_START, ANSWER_END = "<!-- answer:start -->", "<!-- answer:end -->"
TUNE_START, TUNE_END = "<!-- tune:start -->", "<!-- tune:end -->"
GALLERY_START, GALLERY_END = "<!-- gallery:start -->", "<!-- gallery:end -->"
CURE = "15_the_cure"
TUNE_PREFIX = "16_"
TUNE_MACHINE = "cpu-2c"
GALLERY_COLUMNS = 4
GALLERY_WIDTH = 200   # pixels: a thumbnail, the record holds the full figure
MAX_TUNE_LINES = 8


def _rel(path: Path) -> str:
    return Path(path).relative_to(REPO_ROOT).as_posix()


def _notebooks(figures_dir: Path) -> list[str]:
    return sorted(p.name for p in Path(figures_dir).iterdir() if p.is_dir() and re.match(r"\d\d_", p.name))


def _ordered(machines: dict[str, Path]) -> list[str]:
    """The machines, the CPU ones first (the machine a newcomer most likely has), then by name."""
    return sorted(machines, key=lambda k: (not k.startswith("cpu"), k))


def key_figure(notebook: str, folder: Path) -> Path | None:
    """The record's key figure: the run's first figure (as its findings cell shows it), None without one."""
    executed = folder / f"{notebook}.executed.ipynb"
    try:
        names = findings.figure_names(load_json(executed), folder, str(executed))
    except (OSError, ValueError):   # unreadable, or cells of the wrong shape (report.readme refuses it first)
        return None
    return folder / f"{names[0]}.png" if names else None


def _record_with_figure(notebook: str, figures_dir: Path) -> tuple[str, Path, Path] | None:
    machines = machine_dirs(notebook, figures_dir)
    for key in _ordered(machines):
        fig = key_figure(notebook, machines[key])
        if fig is not None and fig.is_file():
            return key, machines[key], fig
    return None


def answer_block(figures_dir: Path = FIGURES_DIR) -> str:
    """The cure's key figure (the doctor's advice applied step by step, each step measured) from a committed record."""
    found = _record_with_figure(CURE, figures_dir)
    if found is None:
        return "No committed record of the cure yet: `python -m feedlab.run --only 15` makes one.\n"
    key, folder, fig = found
    executed = folder / f"{CURE}.executed.ipynb"
    return (f"[<img src=\"{_rel(fig)}\" width=\"640\" alt=\"the cure on {key}\">]({_rel(executed)})\n\n"
            f"*The cure on {key} (notebook 15's committed record; each step measured on the same loop, "
            f"[its findings]({_rel(executed)})).*\n")


def tune_block(figures_dir: Path = FIGURES_DIR) -> str:
    """Notebook 16's committed reading on cpu-2c (the tuner against the exhaustive grid), or that none is committed."""
    names = [n for n in _notebooks(figures_dir) if n.startswith(TUNE_PREFIX)]
    folder = Path(figures_dir) / names[0] / TUNE_MACHINE if names else None
    if folder is None or not (folder / "results.json").is_file():
        return ("Notebook 16 (the tuner against the exhaustive grid, per scenario): no committed record yet.\n")
    payload = load_json(folder / "results.json")
    reading = payload.get("reading") or []
    reading = [reading] if isinstance(reading, str) else list(reading)
    executed = folder / f"{names[0]}.executed.ipynb"
    if not reading and executed.is_file():
        reading = findings.reading_lines(load_json(executed), str(executed))
    run = Run(payload, folder)   # 16's target lines: each scenario's recorded word read by the one rule
    reading = [tune_target_line(str(x), run) for x in reading]
    link = f"[the executed record]({_rel(executed)})" if executed.is_file() else f"`{_rel(folder)}/`"
    lines = [f"Notebook 16 on {TUNE_MACHINE} (the tuner against the exhaustive grid; {link}):", ""]
    lines += ["- " + re.sub(r"[\r\n]+", " ", str(x)).replace("<!--", "&lt;!--") for x in reading[:MAX_TUNE_LINES]]
    if len(reading) > MAX_TUNE_LINES:
        lines.append(f"- … {len(reading) - MAX_TUNE_LINES} more lines in {link}")
    return "\n".join(lines) + "\n"


def gallery_block(figures_dir: Path = FIGURES_DIR) -> str:
    """Each notebook's key figure, small, linking to its executed record (the CPU machine's where it has one)."""
    cells = []
    for nb in _notebooks(figures_dir):
        found = _record_with_figure(nb, figures_dir)
        title = f"{nb[:2]} · {nb[3:].replace('_', ' ')}"
        if found is None:
            cells.append(f"<b>{title}</b><br>no committed record yet")
            continue
        key, folder, fig = found
        executed = _rel(folder / f"{nb}.executed.ipynb")
        others = [k for k in _ordered(machine_dirs(nb, figures_dir)) if k != key]
        more = "".join(f" · <a href=\"{_rel(Path(figures_dir) / nb / k)}/\">{k}</a>" for k in others)
        cells.append(f"<a href=\"{executed}\"><img src=\"{_rel(fig)}\" width=\"{GALLERY_WIDTH}\" alt=\"{title}\"></a>"
                     f"<br><b>{title}</b><br><a href=\"{executed}\">{key}</a>{more}")
    if not cells:
        return "No committed records yet: `make figures` makes them.\n"
    rows = ["<table>"]
    for i in range(0, len(cells), GALLERY_COLUMNS):
        rows.append("<tr>" + "".join(f"<td valign=\"top\">{c}</td>" for c in cells[i:i + GALLERY_COLUMNS]) + "</tr>")
    rows.append("</table>")
    return "\n".join(rows) + "\n"


FRONT = [(ANSWER_START, ANSWER_END, answer_block), (TUNE_START, TUNE_END, tune_block),
         (GALLERY_START, GALLERY_END, gallery_block)]   # the front page's generated blocks: (start, end, maker)
