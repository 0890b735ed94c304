"""Regenerate the README's figures section from the last run's outputs.

    python -m feedlab.readme

For every ``figures/<notebook>/`` it lists the PNG figures and the notebook's
computed reading (``results.json`` → ``reading``: written by the notebook from
that run's numbers), with the fingerprint of the machine that made them. The
section sits between ``<!-- figures:start -->`` and ``<!-- figures:end -->``.
"""

from __future__ import annotations

import json
import re
import sys

from feedlab.fingerprint import fingerprint_line
from feedlab.paths import FIGURES_DIR, REPO_ROOT

START, END = "<!-- figures:start -->", "<!-- figures:end -->"
MAX_LINES = 14


def _title(name: str) -> str:
    num, _, rest = name.partition("_")
    return f"{num} · {rest.replace('_', ' ')}"


def reading_from_executed(nb_path) -> list[str]:
    """The printed lines of the code cells under a notebook's "## Reading" heading
    (computed by the notebook from that run's numbers), up to the record-results cell."""
    import nbformat

    nb = nbformat.read(nb_path, as_version=4)
    lines: list[str] = []
    inside = False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            if cell.source.lstrip().startswith("## Reading"):
                inside = True
            elif inside and cell.source.lstrip().startswith("## "):
                break
            continue
        if not inside or "record_results(" in cell.source:
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stdout":
                lines.extend(x.strip() for x in out.get("text", "").splitlines() if x.strip())
    return lines


def section() -> str:
    parts = []
    fps = set()
    for nb_dir in sorted(p for p in FIGURES_DIR.iterdir() if p.is_dir() and re.match(r"\d\d_", p.name)):
        pngs = sorted(nb_dir.glob("*.png"))
        res_path = nb_dir / "results.json"
        if not pngs and not res_path.exists():
            continue
        reading = []
        if res_path.exists():
            payload = json.loads(res_path.read_text())
            r = payload.get("reading") or []
            reading = [r] if isinstance(r, str) else list(r)
        executed = nb_dir / f"{nb_dir.name}.executed.ipynb"
        if not reading and executed.exists():
            reading = reading_from_executed(executed)
        fp_path = nb_dir / "fingerprint.json"
        if fp_path.exists():
            fps.add(fingerprint_line(json.loads(fp_path.read_text())))
        parts.append(f"### {_title(nb_dir.name)}\n")
        parts.append(f"Notebook: [`notebooks/{nb_dir.name}.ipynb`](notebooks/{nb_dir.name}.ipynb) · "
                     f"results: [`figures/{nb_dir.name}/`](figures/{nb_dir.name}/)\n")
        if len(reading) > MAX_LINES:  # long per-setting listings: the head and the conclusion
            head, tail = MAX_LINES - 6, 5
            cut = len(reading) - head - tail
            reading = reading[:head] + [f"… {cut} more lines in the executed notebook "
                                        f"(`figures/{nb_dir.name}/{nb_dir.name}.executed.ipynb`) …"] + reading[-tail:]
        for line in reading:
            parts.append(f"- {line}")
        if reading:
            parts.append("")
        for png in pngs:
            rel = png.relative_to(REPO_ROOT).as_posix()
            parts.append(f"![{png.stem.replace('_', ' ')}]({rel})\n")
    head = ["Each reading below was computed by its notebook from the numbers of the run that drew "
            "the figures (median and interquartile range over repeats).", ""]
    if fps:
        # one line per machine and commit; the run's time span instead of each notebook's minute
        machines: dict[str, list[str]] = {}
        for line in fps:
            body, _, when = line.rpartition(" · ")
            machines.setdefault(body, []).append(when)
        for body, whens in sorted(machines.items()):
            span = min(whens) if len(set(whens)) == 1 else f"{min(whens)} – {max(whens)}"
            head.append(f"Made on: {body} · {span}")
        head.append("")
    return "\n".join(head + parts)


def update_readme(path=REPO_ROOT / "README.md") -> bool:
    text = path.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{path}: markers {START} / {END} missing")
    new = text.split(START)[0] + START + "\n" + section() + "\n" + END + text.split(END, 1)[1]
    changed = new != text
    path.write_text(new)
    return changed


def main(argv: list[str] | None = None) -> int:
    import argparse

    from feedlab.errors import cli_errors

    ap = argparse.ArgumentParser(prog="python -m feedlab.readme", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.parse_args(argv)  # --help prints and exits before anything is read or written
    with cli_errors("python -m feedlab.readme"):
        print("README updated" if update_readme() else "README unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
