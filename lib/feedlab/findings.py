"""The findings cell of an executed notebook: what this run found, first.

An executed notebook keeps its question, method, code and figures in order; a person opening it
should not have to scroll to the end to learn the answer. :func:`add_findings` puts one markdown
cell at the top (tagged ``findings``; replaced, never duplicated, when run again) made from the
run itself: the lines its ``## Reading`` cells printed (computed from this run's numbers), the
verdict on each write-up claim (``results.json`` → ``verdicts``), whether the machine was busy
(``fingerprint.json``), and links to the figures below (the PNGs beside the notebook). Nothing
in it is typed in advance. ``feedlab.run`` calls it after each notebook; ``python -m
feedlab.findings figures/*/*/*.executed.ipynb`` adds it to notebooks executed before.
:func:`notebook_display` makes the tables a notebook shows rounded and captioned.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from feedlab import startup
from feedlab.files import JSONFileError, load_json
from feedlab.fingerprint import other_fraction
from feedlab.machines import machine_key
from feedlab.results import atomic_write

TAG = "findings"
MAX_READINGS = 12
# lines a Reading cell may print that are not readings: warnings, the busy-machine and figure sentences
_NOT_READINGS = ("warning:", "the machine was busy", "busy again", "note:", "the figure ")
_CLAIM_CELL = re.compile(r"\b(report_claims|record_results|claims\.report)\b")


def _text(cell_or_output, key: str = "source") -> str:
    v = cell_or_output.get(key, "")
    return "".join(v) if isinstance(v, list) else str(v)


def notebook_cells(nb, where: str = "the executed notebook", each: bool = False) -> list[dict]:
    """An executed notebook's ``cells``, a list of objects (none when it has no ``cells``); any other shape
    (``"cells": 5``, attack56 B59) raises a ValueError naming ``where`` (the file) and the field. ``each``: every
    cell's type, source and outputs checked too, as nbformat takes them (``report.readme_inputs``, before
    anything is written; the readers here skip an output of the wrong shape)."""
    if not isinstance(nb, dict):
        raise ValueError(f"{where}: holds {type(nb).__name__}, not a notebook object; re-run that notebook")
    cells = nb.get("cells", [])
    if not isinstance(cells, list):
        raise ValueError(f"{where}: cells is {type(cells).__name__}, not a list of cells; re-run that notebook")
    bad = next((c for c in cells if not isinstance(c, dict)), None)
    if bad is not None:
        raise ValueError(f"{where}: cells holds {type(bad).__name__}, not only cell objects; re-run that notebook")
    if each and (nb.get("nbformat", 4) != 4 or type(nb.get("nbformat_minor", 0)) is not int):   # attack58 W2
        raise ValueError(f"{where}: nbformat is {nb.get('nbformat')!r} (minor {nb.get('nbformat_minor')!r}), not "
                         "version 4 as the runner writes; re-run that notebook")
    for k, cell in enumerate(cells if each else []):   # what nbformat takes as given (attack57 K4: source 5)
        why = _cell_problem(cell)
        if why:
            raise ValueError(f"{where}: cell {k}'s {why}; re-run that notebook")
    return cells


def _is_text(v) -> bool:
    """A notebook's multiline text: a string, or a list of strings."""
    return isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v))


def _cell_problem(cell: dict) -> str | None:
    """Why a cell is not one as nbformat writes it (its type, source, outputs and their text), or None."""
    kind = cell.get("cell_type")
    if kind not in ("code", "markdown", "raw"):
        return f"cell_type is {kind!r}, not code, markdown or raw"
    if not isinstance(cell.get("metadata", {}), dict):
        return f"metadata holds {type(cell.get('metadata')).__name__}, not an object"
    if not _is_text(cell.get("source", "")):
        return f"source holds {type(cell.get('source')).__name__}, not text"
    outs = cell.get("outputs", [])
    if not isinstance(outs, list) or not all(isinstance(o, dict) for o in outs):
        return "outputs is not a list of output objects"
    for o in outs:
        if "text" in o and not _is_text(o["text"]):
            return f"output text holds {type(o['text']).__name__}, not text"
        data = o.get("data", {})
        if not isinstance(data, dict) or ("text/plain" in data and not _is_text(data["text/plain"])):
            return "output data is not a mapping of text"
    return None


def reading_lines(nb: dict, where: str = "the executed notebook") -> list[str]:
    """What the code cells under the notebook's ``## Reading`` heading printed (the readings
    computed from this run), without warnings and without the claims' own lines."""
    lines: list[str] = []
    under = False
    for cell in notebook_cells(nb, where):
        src = _text(cell)
        if cell.get("cell_type") == "markdown":
            if src.lstrip().startswith("## "):
                under = src.lstrip().startswith("## Reading")
            continue
        if not under or _CLAIM_CELL.search(src):
            continue
        outputs = cell.get("outputs")
        for out in outputs if isinstance(outputs, list) else []:
            if isinstance(out, dict) and out.get("output_type") == "stream" and out.get("name") == "stdout":
                for line in _text(out, "text").splitlines():
                    line = line.rstrip()
                    if line.strip() and not line.lstrip().lower().startswith(_NOT_READINGS):
                        lines.append(line.strip())
    return lines


def figure_names(nb: dict, folder: Path, where: str | None = None) -> list[str]:
    """The figures this run saved beside the notebook (``<name>.png``), in the order the
    notebook draws them (by the first mention of the name in its code), the rest by name.
    ``where``: the notebook's file, named if its cells are of the wrong shape (:func:`notebook_cells`)."""
    cells = notebook_cells(nb, where or str(Path(folder) / f"{Path(folder).parent.name}.executed.ipynb"))
    pngs = sorted(p.stem for p in folder.glob("*.png") if not p.name.startswith((".", "machines_")))
    code = "\n".join(_text(c) for c in cells if c.get("cell_type") == "code")

    def first_mention(name: str) -> tuple[int, str]:
        at = code.find(f'"{name}"')
        return (at if at >= 0 else len(code) + 1, name)
    return sorted(pngs, key=first_mention)


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def findings_markdown(nb: dict, payload: dict, fingerprint: dict | None, folder: Path,
                      lines: list[str] | None = None) -> str:
    """The findings cell's markdown for an executed notebook (see the module docstring). ``lines``: the
    readings as today's rules state them (``python -m feedlab.report.readme --findings`` passes them for a
    committed record), else what the Reading cells printed."""
    title = _text(nb["cells"][0]).lstrip().splitlines()[0].lstrip("# ").strip() if nb.get("cells") else ""
    profile = payload.get("profile", "?")

    machine = machine_key(fingerprint) if fingerprint else folder.name
    head = [f"## Findings of this run{': ' + title if title else ''}",
            "",
            f"Profile **{profile}** on **{machine}**; every number below was measured in this run "
            "(the Reading section computes them; the figures follow the code that drew them)."]
    if profile == "smoke":
        head.append("**Smoke run**: tiny sizes, only a check that the notebook runs; its readings and "
                    "verdicts are not findings.")
    load = (fingerprint or {}).get("other_load") or {}
    if not load:
        head.append("This run recorded no load of other programs: whether the machine was busy is not known.")
    elif load.get("busy"):
        share = other_fraction(load.get("busiest_window") or load.get("whole_run") or {})
        share = f" (up to {share:.0%} of the cores)" if share is not None else ""
        head.append(f"The machine was busy with other work during this run{share}: readings may be slowed "
                    "and ratios distorted; re-run on an idle machine before relying on them.")
    parts = ["\n".join(head)]
    lines = reading_lines(nb) if lines is None else lines
    if lines:
        shown = [f"- {_md_escape(x)}" for x in lines[:MAX_READINGS]]
        if len(lines) > MAX_READINGS:
            shown.append(f"- … {len(lines) - MAX_READINGS} more lines in the Reading section below.")
        parts.append("**Readings**\n\n" + "\n".join(shown))
    figs = figure_names(nb, folder)
    if figs:   # the key figure beside the readings: the run's first, drawn by this run (issue 48)
        parts.append(f"**Key figure** ({figs[0]}, drawn by this run; every figure follows the code below)\n\n"
                     f"![{figs[0]}]({figs[0]}.png)")
    recorded = payload.get("verdicts")
    verdicts = {k: v for k, v in (recorded if isinstance(recorded, dict) else {}).items()
                if isinstance(v, dict) and "status" in v}
    if verdicts:   # the write-up claims' verdicts (13 keeps its ratios' under the same key: not claims)
        rows = ["| claim | verdict | ours |", "|---|---|---|"]
        for cid, v in sorted(verdicts.items()):
            rows.append(f"| {_md_escape(cid)} | {_md_escape(str(v.get('status', '?')))} | "
                        f"{_md_escape(str(v.get('ours', '')))} |")
        parts.append("**The write-ups' claims, judged on this run** (docs/CLAIMS.md has every machine's)\n\n"
                     + "\n".join(rows))
    if figs:
        parts.append("**Figures** (below, and as files): " + ", ".join(f"[{n}]({n}.png)" for n in figs))
    if not (lines or verdicts or figs):
        parts.append("This run recorded no readings, verdicts or figures.")
    return "\n\n".join(parts) + "\n"


class DamagedRecord(ValueError):
    """A run's ``results.json`` or ``fingerprint.json``, or the executed notebook itself, is not valid JSON: one
    line naming the file and what to do (never a JSONDecodeError traceback)."""


def _read_json(path: Path, what: str) -> dict:
    """``path``'s JSON object; :class:`DamagedRecord` (one line) where it is not valid JSON (nested too deeply
    included: attack54 B22) or not an object (a results.json of ``[]``: attack53 B01-B04), or is no regular file
    (a FIFO, a folder: attack54 B18/B19)."""
    if not path.is_file() and (kind := _not_a_file(path)):
        raise DamagedRecord(f"{path}: {what} is a {kind}, not a regular file; replace it with the file the run "
                            "wrote (python -m feedlab.run) or restore it from git")
    try:
        value = load_json(path, what)
    except JSONFileError as exc:
        raise DamagedRecord(f"{path}: {what} is not valid JSON ({exc.reason}); run the notebook again "
                            "(python -m feedlab.run) or restore the file from git") from None
    if not isinstance(value, dict):
        raise DamagedRecord(f"{path}: {what} is JSON but not an object ({type(value).__name__}); run the notebook "
                            "again (python -m feedlab.run) or restore the file from git")
    return value


def _check_results(path: Path, payload: dict) -> None:
    """The fields of ``results.json`` the findings cell prints are of the shape a run writes: else
    :class:`DamagedRecord` naming the field (a ``profile`` of ``["smoke"]`` was printed as it is, a ``verdicts`` of
    non-claims vanished without a word: attack54 W1). A verdicts entry is a claim's ``{status, ours}`` or one of
    notebook 13's ratio verdicts (``{word, ratio, ...}``), which are not claims and are not shown."""
    fix = "run the notebook again (python -m feedlab.run) or restore the file from git"
    profile = payload.get("profile", "?")
    if not isinstance(profile, str):
        raise DamagedRecord(f'{path}: "profile" holds {type(profile).__name__}, not a profile name; {fix}')
    verdicts = payload.get("verdicts")
    if verdicts is None:
        return
    if not isinstance(verdicts, dict):
        raise DamagedRecord(f'{path}: "verdicts" holds {type(verdicts).__name__}, not an object of claims; {fix}')
    for key, v in verdicts.items():
        if not (isinstance(v, dict) and (isinstance(v.get("status"), str) or "word" in v and "status" not in v)):
            shape = type(v).__name__ if not isinstance(v, dict) else \
                f"a status of {type(v['status']).__name__}" if "status" in v else "an object without a status"
            raise DamagedRecord(f'{path}: "verdicts" entry {key!r} holds {shape}, not a claim\'s '
                                f"{{status, ours}}; {fix}")


def _check_fingerprint(path: Path, fp: dict) -> None:
    """The fields of ``fingerprint.json`` the findings cell reads are of the shape a run writes: ``gpus`` a list of
    objects with a text ``name``, ``cpu_usable``/``cpu_logical`` a whole number >= 1 (not a bool), ``other_load`` an
    object (each may be absent or null); else :class:`DamagedRecord` naming the file and the field (attack55 W1,
    B39: a Python error without the field, or ``cpu-{'a': 1}c`` printed as the machine)."""
    fix = "run the notebook again (python -m feedlab.run) or restore the file from git"
    gpus = fp.get("gpus")
    if gpus is not None and not isinstance(gpus, list):
        raise DamagedRecord(f'{path}: "gpus" holds {type(gpus).__name__}, not a list of GPUs; {fix}')
    for i, g in enumerate(gpus or []):
        if not isinstance(g, dict):
            raise DamagedRecord(f'{path}: "gpus" entry {i} holds {type(g).__name__}, not an object; {fix}')
        if not isinstance(g.get("name"), str):
            raise DamagedRecord(f'{path}: "gpus" entry {i}\'s "name" holds {type(g.get("name")).__name__}, '
                                f"not a GPU's name; {fix}")
    for key in ("cpu_usable", "cpu_logical"):
        v = fp.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            shape = f"{v!r}" if isinstance(v, int) and not isinstance(v, bool) else type(v).__name__
            raise DamagedRecord(f'{path}: "{key}" holds {shape}, not a count of cores (a whole number >= 1); {fix}')
    load = fp.get("other_load")
    if load is not None and not isinstance(load, dict):
        raise DamagedRecord(f'{path}: "other_load" holds {type(load).__name__}, not an object; {fix}')


def add_findings(executed: str | Path, lines: list[str] | None = None, verdicts: dict | None = None) -> bool:
    """Put the findings cell at the top of ``executed`` (replacing an earlier one), reading
    ``results.json`` and ``fingerprint.json`` beside it. Returns False (and changes nothing)
    where the run recorded no ``results.json`` or the file's JSON is not a notebook's; raises
    :class:`DamagedRecord` where it or a record beside it is not valid JSON. Rewritten atomically.
    ``lines`` and ``verdicts`` (``{claim: {"status", "ours"}}``): the readings and the claims' verdicts as
    today's rules state them, for a committed record (the reporting wing passes them; a fresh run's own are
    already today's)."""
    path = Path(executed)
    folder = path.parent
    results = folder / "results.json"
    if not results.is_file() and not _not_a_file(results):
        return False
    payload = _read_json(results, "its results.json")
    if verdicts is not None:
        payload = dict(payload, verdicts=verdicts)
    _check_results(results, payload)
    fp_path = folder / "fingerprint.json"
    fingerprint = _read_json(fp_path, "its fingerprint.json") if fp_path.exists() or fp_path.is_symlink() else None
    if fingerprint is not None:
        _check_fingerprint(fp_path, fingerprint)
    nb = _read_json(path, "the notebook")
    if not isinstance(nb.get("cells"), list) or \
            not all(isinstance(c, dict) and isinstance(c.get("metadata", {}), dict) for c in nb["cells"]):
        return False  # not a notebook this can lead with findings
    try:   # each cell as nbformat reads it (attack58 K12: a cell whose source is 5 was blamed on the records)
        notebook_cells(nb, str(path), each=True)
    except ValueError as exc:
        raise DamagedRecord(str(exc)) from None
    cells = [c for c in nb.get("cells", []) if TAG not in (c.get("metadata", {}).get("tags") or [])]
    nb["cells"] = cells
    cell = {"cell_type": "markdown", "metadata": {"tags": [TAG]},
            "source": findings_markdown(nb, payload, fingerprint, folder, lines).splitlines(keepends=True)}
    if nb.get("nbformat", 4) >= 4 and nb.get("nbformat_minor", 0) >= 5:
        cell["id"] = "feedlab-findings"
    nb["cells"] = [cell] + cells
    atomic_write(path, json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    return True


def table_html(df) -> str:
    """A DataFrame as a notebook shows it: numbers to 3 significant decimals (pandas'
    ``display.precision``), its caption (``df.attrs["caption"]``, set by ``results.summarize``)
    above it in words."""
    import html

    body = df._repr_html_()
    cap = df.attrs.get("caption") if hasattr(df, "attrs") else None
    return (f"<p><b>{html.escape(str(cap))}</b></p>" if cap else "") + (body or "")


def notebook_display() -> bool:
    """Tables in a notebook kernel read like a report: rounded (``display.precision`` 3) and
    captioned (:func:`table_html`). ``profiles.resolve`` calls it; False outside IPython."""
    import pandas as pd

    pd.set_option("display.precision", 3)
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    if ip is None or not hasattr(ip, "display_formatter"):
        return False
    ip.display_formatter.formatters["text/html"].for_type(pd.DataFrame, table_html)
    return True


def _not_a_file(p: Path) -> str | None:
    """What ``p`` is where it exists but is no regular file ("FIFO", "folder" …), or None (nothing there)."""
    import stat

    try:
        mode = p.stat().st_mode
    except OSError:
        return "link that leads nowhere" if p.is_symlink() else None
    kinds = ((stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "device"),
             (stat.S_ISBLK, "device"))
    return next((word for test, word in kinds if test(mode)), "special file")


def main(argv: list[str] | None = None) -> int:
    startup.started()   # past its start: a lazy import later is not the start-up's (feedlab.startup)
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: python -m feedlab.findings EXECUTED.ipynb ...  (adds or refreshes the findings cell)")
        return 0 if args else 2
    rc = 0
    for a in args:
        p = Path(a)
        if not p.is_file():   # a FIFO or a folder there is not "no such notebook" (attack53 B05)
            what = _not_a_file(p)
            print(f"{a}: " + (f"is a {what}, not a notebook file; give the *.executed.ipynb itself" if what
                              else "no such notebook"), file=sys.stderr)
            rc = 2
        elif p.suffix != ".ipynb":   # a script, a record: nothing here has a findings cell to add
            print(f"{a}: not an executed notebook ({p.suffix or 'no suffix'}, not .ipynb); give the "
                  "*.executed.ipynb the runner wrote beside a record (figures/<notebook>/<machine>/), or run the "
                  "notebook first (python -m feedlab.run)", file=sys.stderr)
            rc = 2
        else:
            try:
                added = add_findings(p)
            except (DamagedRecord, OSError) as exc:   # a damaged or unreadable file: named, in one line
                print(str(exc) if isinstance(exc, DamagedRecord) else f"{a}: cannot read it or a record beside it "
                      f"({exc.strerror or exc}): check the folder's permissions", file=sys.stderr)
                rc = 2
                continue
            except (AttributeError, TypeError, KeyError) as exc:   # a record of an unexpected shape: the next file
                print(f"{a}: its results.json or fingerprint.json is not shaped as a run records it "   # still runs
                      f"({type(exc).__name__}: {exc}); run the notebook again (python -m feedlab.run)",
                      file=sys.stderr)
                rc = 2
                continue
            if added:
                continue
            if (p.parent / "results.json").is_file():   # the results are there: the file is not a notebook
                print(f"{a}: valid JSON, but not a notebook (no list of cells); give the *.executed.ipynb the "
                      "runner wrote beside a record", file=sys.stderr)
                rc = 2
            else:
                print(f"{a}: no results.json beside it; run the notebook first (python -m feedlab.run)",
                      file=sys.stderr)
                rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
