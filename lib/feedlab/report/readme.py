"""Regenerate the README's front page blocks and docs/RESULTS.md's results from the committed records.

    python -m feedlab.report.readme

README.md keeps what a newcomer decides on (the answer's figure, what each make target costs, the tuner's reading,
the gallery: :mod:`feedlab.report.readme_front`, :mod:`feedlab.report.costs`); docs/RESULTS.md the results below.
Each block sits between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``; every file with such markers is
regenerated the same way (links made relative to the file's folder).

It first redraws the comparison figures (:mod:`feedlab.report.compare`: every committed
machine in one figure per notebook question, shown above the table). For every
``figures/<notebook>/<machine>/`` it lists the notebook's computed reading
(``results.json`` → ``reading``: written by the notebook from that run's numbers)
with the fingerprint of the machine that made them, and the PNG figures in a table
with one column per machine, so that a GPU box's run sits beside a laptop's. The
section sits between ``<!-- figures:start -->`` and ``<!-- figures:end -->``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from feedlab import findings
from feedlab.errors import cli_errors
from feedlab.files import load_json
from feedlab.fingerprint import fingerprint_line
from feedlab.machines import machine_dirs
from feedlab.paths import FIGURES_DIR, REPO_ROOT
from feedlab.report import claims, compare, gpu_readings, targets
from feedlab.report.claims import ledger as claims_ledger
from feedlab.report.claims import sides
from feedlab.report.claims.core import NoData, Run
from feedlab.report.claims.ledger import END as CLAIMS_END
from feedlab.report.claims.ledger import START as CLAIMS_START
from feedlab.report.costs import (
    COSTS_END,
    COSTS_START,
    TARGET_END,
    TARGET_START,
    costs_markdown,
    targets_markdown,
    update_records_md,
)
from feedlab.report.readme_doctor import (  # noqa: F401  (the doctor block, re-exported)
    DOCTOR_END,
    DOCTOR_START,
    _with_calibration,
    calibration_lines,
    doctor_block,
    doctor_output,
    update_doctor_md,
    worst_error_line,
)
from feedlab.report.readme_front import FRONT
from feedlab.report.readme_inputs import input_problems  # noqa: F401  (re-exported)
from feedlab.report.summary import summary_markdown
from feedlab.results import atomic_write

START, END = "<!-- figures:start -->", "<!-- figures:end -->"
MAX_LINES = 14
MAX_LINE_CHARS = 2000  # one reading line in the README (the longest committed one has about 600)


def _title(name: str) -> str:
    num, _, rest = name.partition("_")
    return f"{num} · {rest.replace('_', ' ')}"


def reading_from_executed(nb_path) -> list[str]:
    """The printed lines of the code cells under a notebook's "## Reading" heading
    (computed by the notebook from that run's numbers), up to the record-results cell."""
    import nbformat

    try:
        nb = nbformat.read(nb_path, as_version=4)
    except Exception as exc:   # nbformat's own (NotJSONError, a schema's ValidationError, an UnboundLocalError
        # on a file without its nbformat key: review15 #4): the file named in one line, never a traceback
        raise ValueError(f"{nb_path}: not a notebook nbformat reads ({exc}); re-run that notebook") from None
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


def _reading(folder: Path, notebook: str) -> list[str]:
    res_path = folder / "results.json"
    reading: list[str] = []
    if res_path.exists():
        r = load_json(res_path).get("reading") or []
        reading = [r] if isinstance(r, str) else list(r)
    executed = folder / f"{notebook}.executed.ipynb"
    if not reading and executed.exists():
        reading = reading_from_executed(executed)
    reading = generated_targets(notebook, folder, reading)
    if len(reading) > MAX_LINES:  # long per-setting listings: the head and the conclusion
        head, tail = MAX_LINES - 6, 5
        cut = len(reading) - head - tail
        rel = executed.relative_to(REPO_ROOT).as_posix()
        reading = reading[:head] + [f"… {cut} more lines in the executed notebook (`{rel}`) …"] + reading[-tail:]
    return reading


_VERDICT_LINE = re.compile(r"^\[([^\]:]*)[^\]]*\] (\d{3}-[\w-]+): ")
# a claim's verdict a notebook printed as prose (before its claims were one ledger line each): per notebook, each
# (pattern whose group 1 is the recorded word, claim id) — the word read again by today's claim (audit 53 F5: 07's
# h100 "-> not reproduced as stated" beside CLAIMS' "not tested fairly" for the same claim on the same record)
_WORD = r"(not reproduced|reproduced|partly)(?: as stated)?\b"
FREE_VERDICTS = {"04_print_overhead": ((re.compile(r"^Write-up 004: .*: " + _WORD), "004-print-75x"),),
                 "07_totensor_vs_fast_collate": (
                     (re.compile(r"^Write-up 001 says the transpose takes most .* -> " + _WORD), "001-transpose-80"),)}
# 10's effect sentence an older notebook printed after its Overall line, whatever the one judge said of the sides
# (audit 53 F4): today's notebook prints "The advice's gain is not credited in this run: …" where it is not judged
_ADVICE_EFFECT = re.compile(r"^The advice (raised|did NOT measurably raise) throughput in this run\.$")


def today_words(v) -> str:
    """A claim verdict as today's rule gives it, with its reason where it was not tested fairly."""
    return f"{v.status} ({v.note})" if v.status == claims.NOT_FAIR and v.note else v.status


def generated_targets(notebook: str, folder: Path, reading: list[str]) -> list[str]:
    """The reading with its target lines generated from the run's results and the targets as
    they stand (:mod:`feedlab.report.targets`), never the bound a notebook typed when it ran; and each
    claim verdict the notebook printed judged by the claims as they stand (as docs/CLAIMS.md is), never
    silently: where today's rule reads it otherwise, the line says what the notebook recorded and what today's
    rule reads, labelled (audit 45 V9/V10: one verdict per claim per record, the recorded one kept in view)."""
    run = Run(out_dir=folder)
    out = []
    free = FREE_VERDICTS.get(notebook, ())
    for line in targets.rewrite_reading(notebook, reading, run):
        if notebook == targets.ADVICE.notebook and _ADVICE_EFFECT.match(line):
            out.append(advice_effect(line, run))
            continue
        m = _VERDICT_LINE.match(line)
        claim = claims.BY_ID.get(m.group(2)) if m else None
        if claim:
            v = claims.judge(claim, run)
            recorded = m.group(1).strip()
            now = claims.format_verdict(claim, v)
            out.append(now if recorded == v.status else f"(recorded by the notebook: {recorded}; today's rule:) {now}")
            continue
        for pattern, cid in free:
            fm = pattern.match(line)
            if fm:
                v = claims.judge(claims.BY_ID[cid], run)
                if fm.group(1) != v.status:
                    line += (f" [recorded by the notebook: {fm.group(1)}; today's rule (claim `{cid}`): "
                             f"{today_words(v)}]")
                break
        out.append(line)
    return out


def advice_effect(line: str, run: Run) -> str:
    """10's recorded effect sentence ("The advice raised throughput in this run.") as today's notebook words it:
    where the one judge does not judge the advice's sides, "not credited" with its reason, the recorded words
    kept in view, labelled; else as recorded."""
    try:
        v = sides.advice_verdict(run)
    except NoData:
        return line
    if v.judged:
        return line
    return (f"The advice's gain is not credited in this run: {v}. [recorded by the notebook: "
            f"{line.rstrip('.')}]")


def _notebook_block(nb_dir: Path, machines: dict[str, Path], fps: dict[str, dict]) -> list[str]:
    name = nb_dir.name
    parts = [f"### {_title(name)}\n",
             f"Notebook: [`notebooks/{name}.ipynb`](notebooks/{name}.ipynb) · results: "
             + " · ".join(f"[`{key}`]({folder.relative_to(REPO_ROOT).as_posix()}/)"
                          for key, folder in machines.items()) + "\n"]
    for png in compare.figures_for(name, nb_dir.parent):  # every machine in one figure, above the table
        parts.append(f"![{name}: machines compared]({png.relative_to(REPO_ROOT).as_posix()})\n")
    for key, folder in machines.items():
        reading = _reading(folder, name)
        fp_line = fingerprint_line(fps[key]) if fps.get(key) else "no fingerprint"
        parts.append(f"**{key}** ({fp_line})\n")
        parts.extend(f"- {_one_line(line)}" for line in reading)
        if reading:
            parts.append("")
    # the figures, one row per figure, one column per machine
    figures = sorted({png.name for folder in machines.values() for png in folder.glob("*.png")})
    if figures:
        keys = list(machines)
        parts.append("| figure | " + " | ".join(keys) + " |")
        parts.append("|---|" + "---|" * len(keys))
        for fig in figures:
            cells = []
            for key in keys:
                png = machines[key] / fig
                cells.append(f"![{key}: {Path(fig).stem.replace('_', ' ')}]({png.relative_to(REPO_ROOT).as_posix()})"
                             if png.exists() else "not measured on this machine")
            parts.append(f"| {Path(fig).stem.replace('_', ' ')} | " + " | ".join(cells) + " |")
        parts.append("")
    return parts


def _one_line(line: str) -> str:
    """A reading line as one README line: no line breaks, no HTML comment (a marker of a
    generated block would cut the README there), at most :data:`MAX_LINE_CHARS` characters."""
    line = re.sub(r"[\r\n]+", " ", str(line)).replace("<!--", "&lt;!--")
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS - 1] + "…"


def _defuse(body: str) -> str:
    """``body`` with no marker of a generated block in it (a printed one would be read as the
    block's end next time, and the README would grow by a copy of the block each time)."""
    for marker in (START, END, DOCTOR_START, DOCTOR_END, CLAIMS_START, CLAIMS_END, COSTS_START, COSTS_END):
        body = body.replace(marker, marker.replace("<!--", "&lt;!--"))
    return body


_LISTED = re.compile(r"\]\((?:\.\./)?figures/(\d\d_[^/)\s]+)/([^/)\s]+)/\)")


def vanished_records(text: str, figures_dir: Path | None = None) -> list[str]:
    """The machine folders the README's figures section lists (``results: [`key`](figures/<nb>/<key>/)``)
    that hold no record now: deleted or moved, their section would vanish without a word."""
    if START not in text or END not in text:
        return []
    figures_dir = FIGURES_DIR if figures_dir is None else figures_dir
    listed = sorted(set(_LISTED.findall(text.split(START, 1)[1].split(END, 1)[0])))
    return [f"figures/{nb}/{key}" for nb, key in listed if key not in machine_dirs(nb, figures_dir)]


def _run_start(fp: dict) -> str:
    """A run's start as fingerprint_line prints times ('2026-11-22T14:22Z'); '' if unknown."""
    t = fp.get("started_utc") or ""
    return f"{t[:16]}Z" if t else ""


def section(figures_dir: Path = FIGURES_DIR) -> str:
    """The README's figures section: per notebook, every committed machine side by side."""
    parts: list[str] = []
    all_fps: dict[str, list[dict]] = {}
    for nb_dir in sorted(p for p in figures_dir.iterdir() if p.is_dir() and re.match(r"\d\d_", p.name)):
        machines = machine_dirs(nb_dir.name, figures_dir)
        if not machines:
            continue
        fps = {}
        for key, folder in machines.items():
            fp_path = folder / "fingerprint.json"
            if fp_path.exists():
                fps[key] = load_json(fp_path)
                all_fps.setdefault(key, []).append(fps[key])
        parts.extend(_notebook_block(nb_dir, machines, fps))
    head = ["Each reading below was computed by its notebook from the numbers of the run that drew "
            "the figures (median and interquartile range over repeats). Results are kept per machine "
            "(`figures/<notebook>/<machine>/`); a run on your own machine lands beside these, and where "
            "two or more machines ran a notebook, its first figure draws them all. The GPU questions, judged per machine: "
            "[docs/GPU_READINGS.md](docs/GPU_READINGS.md).", ""]
    for key, fps in sorted(all_fps.items(), key=lambda kv: (not kv[0].startswith("cpu"), kv[0])):
        # one line per machine: what it is, the commits its results came from, the span of its
        # runs, and how many of them the busy-machine check flagged
        lines = [fingerprint_line(fp).split(" · ") for fp in fps]
        bodies = sorted({" · ".join(parts[:6]) for parts in lines})
        commits = sorted({parts[6] for parts in lines if len(parts) > 6})
        whens = sorted(parts[7] for parts in lines if len(parts) > 7)
        # a run without a recorded start counts from its end: every folder is inside the span
        starts = sorted(s for s in (_run_start(fp) or (parts[7] if len(parts) > 7 else None)
                                    for fp, parts in zip(fps, lines)) if s) or whens
        span = (whens[-1] if starts[0] == whens[-1] else f"{starts[0]} – {whens[-1]}") if whens else ""
        busy = sum(any(x.startswith("BUSY") for x in parts) for parts in lines)
        flag = f" · busy-machine check flagged {busy} of {len(lines)} notebook runs" if busy else ""
        head.append(f"- **{key}**: {'; '.join(bodies)} · commits {', '.join(commits)} · {span}{flag}")
    head.append("")
    summary = summary_markdown(figures_dir)
    if summary:
        head = [summary, ""] + head
    return "\n".join(head + parts)


def _replace_between(text: str, start: str, end: str, body: str) -> str:
    if start not in text or end not in text:
        return text
    return text.split(start)[0] + start + "\n" + body + "\n" + end + text.split(end, 1)[1]


RESULTS_MD = REPO_ROOT / "docs" / "RESULTS.md"
_MARKER_PAIR = re.compile(r"<!-- ([\w-]+):start -->")
_REPO_LINK = re.compile(r'(\]\(|src="|href=")(figures/|notebooks/|lib/|docs/)')


def _relink(text: str, path: Path) -> str:
    """``text`` with each generated block's repository-root links (``figures/…``, ``notebooks/…``, ``docs/…``) made
    relative to ``path``'s folder (docs/RESULTS.md: ``../figures/…``, ``CLAIMS.md``); the prose around is the author's."""
    depth = len(Path(path).resolve().parent.relative_to(REPO_ROOT.resolve()).parts) if Path(
        path).resolve().is_relative_to(REPO_ROOT.resolve()) else 0
    if not depth:
        return text
    up = "../" * depth

    def fix(m: re.Match) -> str:
        return m.group(1) + ("" if m.group(2) == "docs/" and depth == 1 else up + m.group(2))

    out, pos = [], 0
    for m in _MARKER_PAIR.finditer(text):
        end = text.find(f"<!-- {m.group(1)}:end -->", m.end())
        if end < 0 or m.start() < pos:
            continue
        out += [text[pos:m.end()], _REPO_LINK.sub(fix, text[m.end():end])]
        pos = end
    return "".join(out) + text[pos:]


def update_readme(path=REPO_ROOT / "README.md") -> bool:
    """Every generated block ``path`` holds (the figures section, the doctor's output, the costs, the claims, the front
    page's answer, tuner and gallery), regenerated between its markers; True if the file changed."""
    text = path.read_text()
    blocks = [(START, END, section), (DOCTOR_START, DOCTOR_END, doctor_block),
              (COSTS_START, COSTS_END, lambda: costs_markdown().rstrip()),  # the runner's own seconds
              (TARGET_START, TARGET_END, lambda: targets_markdown().rstrip()), *FRONT]
    present = [(start, end, make) for start, end, make in blocks if start in text and end in text]
    if not present and CLAIMS_START not in text:
        raise SystemExit(f"{path}: no generated block's markers ({START} / {END}, …)")
    new = text
    for start, end, make in present:
        new = _replace_between(new, start, end, _defuse(make()))
    new = _relink(claims_ledger.update_readme_block(new), path)  # the verdict counts; docs/CLAIMS.md by write_claims()
    changed = new != text
    if changed:
        _write_text_atomic(path, new)
    return changed


def _write_text_atomic(path: Path, text: str) -> None:
    atomic_write(path, text)


def refresh_findings(figures_dir: Path = FIGURES_DIR) -> list[Path]:
    """Every committed executed notebook's findings cell with its readings and claim verdicts as today's
    rules state them (the same lines the README shows: :func:`generated_targets`), from the committed records
    alone; the notebooks changed."""
    changed = []
    for nb_dir in sorted(p for p in Path(figures_dir).iterdir() if p.is_dir()):
        for _key, folder in machine_dirs(nb_dir.name, figures_dir).items():
            executed = folder / f"{nb_dir.name}.executed.ipynb"
            if not executed.is_file() or not (folder / "results.json").is_file():
                continue
            nb = load_json(executed)
            lines = generated_targets(nb_dir.name, folder, findings.reading_lines(nb, str(executed)))
            run = Run(out_dir=folder)
            verdicts = {c.id: claims.judge(c, run).as_dict() for c in claims.claims_for(nb_dir.name)} or None
            before = executed.read_bytes()
            findings.add_findings(executed, lines, verdicts)
            if executed.read_bytes() != before:
                changed.append(executed)
    return changed


def main(argv: list[str] | None = None) -> int:
    import argparse


    ap = argparse.ArgumentParser(prog="python -m feedlab.report.readme", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drop-missing", action="store_true",
                    help="regenerate although results the README lists are gone from figures/ (their "
                         "sections are dropped); without it the command stops and names them")
    ap.add_argument("--findings", action="store_true",
                    help="also refresh each committed executed notebook's findings cell (its readings and the "
                         "claims' verdicts as today's rules state them, from the committed records alone)")
    args = ap.parse_args(argv)  # --help prints and exits before anything is read or written
    with cli_errors("python -m feedlab.report.readme"):
        docs = [p for p in (REPO_ROOT / "README.md", REPO_ROOT / "docs" / "RESULTS.md") if p.is_file()]
        gone = sorted({g for p in docs for g in vanished_records(p.read_text())})
        if gone and not args.drop_missing:
            more = f" (and {len(gone) - 1} more)" if len(gone) > 1 else ""
            raise ValueError(f"{gone[0]}{more}: the README lists these results but they are gone; restore them "
                             f"(git checkout -- {gone[0]}) or pass --drop-missing to drop them from the README; "
                             "nothing was written or removed")
        bad = input_problems()
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise ValueError(f"{bad[0]}{more}; nothing was written or removed")
        compare.write_all()  # figures/<notebook>/machines_*: every committed machine in one figure
        for path in docs:
            rel = path.relative_to(REPO_ROOT).as_posix()
            print(f"{rel} updated" if update_readme(path) else f"{rel} unchanged")
        print("docs/CLAIMS.md updated" if claims_ledger.write_claims() else "docs/CLAIMS.md unchanged")
        print("docs/GPU_READINGS.md updated" if gpu_readings.write() else "docs/GPU_READINGS.md unchanged")
        print("docs/DOCTOR.md updated" if update_doctor_md() else "docs/DOCTOR.md unchanged")
        print("docs/GPU_RUN.md updated" if update_records_md() else "docs/GPU_RUN.md unchanged")
        if args.findings:
            print(f"findings cells refreshed: {len(refresh_findings())} executed notebooks changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
