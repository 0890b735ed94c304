"""A notebook's committed run beside an earlier one: the same claims judged on both, side by side.

    python -m feedlab.report.rerun --before REV [--machine cpu-2c] [--out docs/RERUNS.md] 01 02 05

``REV`` is a commit whose ``figures/`` holds the earlier (say, the slow) record of each notebook;
the later one is the record in ``figures/`` now. Both are judged by today's claims
(:func:`feedlab.report.claims.verdicts`), so a row differs only where the runs differ. Each
notebook's block names both records (commit, date, the machine's other load while it ran,
seconds) and each claim's status and reading before and after, marked ``same`` or ``changed``.
A changed verdict is a finding to explain, never something to re-run until it agrees.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from feedlab.errors import cli_errors
from feedlab.files import kind_of, read_regular
from feedlab.paths import FIGURES_DIR, REPO_ROOT, outside_figures, rel
from feedlab.report.claims import Run, verdicts
from feedlab.results import atomic_write

FILES = ("results.json", "results.csv", "fingerprint.json")


def _git_show(rev: str, path: str) -> bytes | None:
    # --end-of-options: a rev such as "--output=x" is a name to look up, never an option of git's
    r = subprocess.run(["git", "-C", str(REPO_ROOT), "show", "--end-of-options", f"{rev}:{path}"],
                       capture_output=True, timeout=60)
    return r.stdout if r.returncode == 0 else None


def resolve_commit(rev: str) -> str:
    """The commit ``rev`` names in this repository (its full hex name), else ``ValueError``, one line:
    ``--before`` is looked up as a name only (``git rev-parse --verify --end-of-options REV^{commit}``)."""
    r = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--verify", "--quiet", "--end-of-options",
                        f"{rev}^{{commit}}"], capture_output=True, text=True, timeout=60)
    sha = r.stdout.strip()
    if r.returncode or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", sha):
        raise ValueError(f"--before {rev!r}: not a commit of this repository; give a commit, tag or branch "
                         "(HEAD~3, a hash from git log)")
    return sha


def _duration(executed: bytes | str | None) -> float | None:
    """The papermill duration an executed notebook's bytes (``git show``'s or the file's) hold; None where they
    are none, not JSON, nested too deeply (a RecursionError), or not the shape of a notebook."""
    if executed is None:
        return None
    try:
        value = json.loads(executed)["metadata"]["papermill"]["duration"]   # bytes, not a file read: see record_at
        seconds = float(value) if type(value) in (int, float) else None
    except (TypeError, ValueError, KeyError, IndexError, RecursionError):
        return None
    return seconds if seconds is not None and math.isfinite(seconds) else None


def _duration_of(path: Path) -> float | None:
    """:func:`_duration` of the executed notebook at ``path``, read as a regular file (a FIFO never blocks)."""
    try:
        return _duration(read_regular(path))
    except OSError:
        return None


def record_at(rev: str, notebook: str, machine: str, into: Path) -> dict | None:
    """Copy ``figures/<notebook>/<machine>/``'s results as commit ``rev`` holds them into ``into``;
    None where that commit has no results there."""
    base = f"figures/{notebook}/{machine}"
    into.mkdir(parents=True, exist_ok=True)
    found = False
    for name in FILES:
        data = _git_show(rev, f"{base}/{name}")
        if data is not None:
            (into / name).write_bytes(data)
            found = found or name == "results.json"
    if not found:
        return None
    return {"seconds": _duration(_git_show(rev, f"{base}/{notebook}.executed.ipynb"))}


def describe(run: Run, seconds: float | None) -> str:
    fp = run.fingerprint or {}
    commit = ((fp.get("git") or {}).get("commit") or "?")[:8]
    when = str(fp.get("time_utc", "?"))[:16]
    load = fp.get("other_load") or {}
    frac = (load.get("whole_run") or {}).get("other_fraction")
    other = f"other load {frac:.1%}" if isinstance(frac, (int, float)) else "no load record"
    took = f"{seconds:.0f} s" if seconds else "? s"
    return f"{commit}, {when}, {other}, {took}"


def side_by_side(notebook: str, before: Run, after: Run) -> list[dict]:
    """One row per claim of ``notebook``: status and reading before and after."""
    old = {v.claim: v for v in verdicts(notebook, before)}
    rows = []
    for v in verdicts(notebook, after):
        b = old.get(v.claim)
        rows.append({"claim": v.claim, "before": _reading(b) if b else ("—", "—"),
                     "after": _reading(v), "same": bool(b) and b.status == v.status})
    return rows


def _reading(v) -> tuple[str, str]:
    """A verdict's status and what it read (its reason where it read no number)."""
    ours = v.ours if v.ours and v.ours != "—" else (v.note or "—")
    return v.status, ours if len(ours) <= 240 else ours[:239] + "…"


def _cell(status_ours: tuple[str, str]) -> str:
    status, ours = status_ours
    return f"**{status}**: {ours}".replace("|", "/").replace("\n", " ")


def markdown(notebook: str, rows: list[dict], before: str, after: str) -> str:
    lines = [f"### {notebook}", "", f"- before: {before}", f"- after: {after}", "",
             "| claim | before | after | verdict |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| `{r['claim']}` | {_cell(r['before'])} | {_cell(r['after'])} | "
                     f"{'same' if r['same'] else '**changed**'} |")
    if not rows:
        lines.append("| (no claims read this notebook) | | | |")
    changed = sum(not r["same"] for r in rows)
    lines += ["", f"{len(rows) - changed} of {len(rows)} verdicts the same." if rows else "", ""]
    return "\n".join(lines)


def compare(rev: str, notebooks: list[str], machine: str = "cpu-2c", figures_dir: Path = FIGURES_DIR) -> str:
    """The markdown for ``notebooks`` (names or numbers), the records at ``rev`` against ``figures_dir``'s."""
    names = {p.name[:2]: p.name for p in figures_dir.iterdir() if p.is_dir() and p.name[:2].isdigit()}
    out = [f"Records at {rev[:12]} (before) against the records in figures/ now (after), on {machine}; "
           "both judged by today's claims.", ""]
    with tempfile.TemporaryDirectory(prefix="feedlab-rerun-") as tmp:
        for nb in notebooks:
            name = names.get(nb[:2], nb)
            now_dir = figures_dir / name / machine
            if not (now_dir / "results.json").is_file():
                raise FileNotFoundError(f"{rel(now_dir)}: no results.json (run the notebook first)")
            old = record_at(rev, name, machine, Path(tmp) / name)
            if old is None:
                raise FileNotFoundError(f"commit {rev} has no figures/{name}/{machine}/results.json")
            before, after = Run(out_dir=Path(tmp) / name), Run(out_dir=now_dir)
            now_s = _duration_of(now_dir / f"{name}.executed.ipynb")
            out.append(markdown(name, side_by_side(name, before, after), describe(before, old["seconds"]),
                                describe(after, now_s)))
    return "\n".join(out)


#: what ``--out`` may replace: a file that already holds text of this kind (a notebook or a source is refused)
MARKDOWN_SUFFIXES = (".md", ".markdown", ".txt")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m feedlab.report.rerun", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebooks", nargs="+", help="notebook names or numbers (01 02 ...)")
    ap.add_argument("--before", required=True, metavar="REV", help="the commit holding the earlier records")
    ap.add_argument("--machine", default="cpu-2c")
    ap.add_argument("--out", type=Path, help="write the markdown here too")
    args = ap.parse_args(argv)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", args.machine):   # one folder name (attack58 W5, attack59 G4)
        ap.error(f"--machine {args.machine!r}: a machine key is one folder name under figures/<notebook>/ "
                 "(cpu-2c, h100-16c): letters, digits, '.', '_' or '-'")
    if args.out is not None and outside_figures(args.out, "--out"):   # never over a committed record
        ap.error(outside_figures(args.out, "--out"))
    if args.out is not None and args.out.exists() and not args.out.is_file():   # a folder, a device (attack54 G15)
        ap.error(f"--out {args.out}: is {kind_of(args.out.stat().st_mode)}, not a file: nothing written; give a .md "
                 "file (docs/RERUNS.md) or a new name")
    if args.out is not None and args.out.exists() and args.out.suffix.lower() not in MARKDOWN_SUFFIXES:
        ap.error(f"--out {args.out}: an existing {args.out.suffix or 'extensionless'} file, which the markdown "
                 "would replace: nothing written; give a .md file (docs/RERUNS.md) or a new name")
    with cli_errors("feedlab.report.rerun"):
        text = compare(resolve_commit(args.before), args.notebooks, args.machine)
        print(text)
        if args.out:
            atomic_write(args.out, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
