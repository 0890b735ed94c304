"""``--report FILE.md`` / ``FILE.html``: the doctor's report with its figures, for sharing.

The text report as rendered on the console, and one figure (the stage costs per
sample; the predicted and measured rate per worker count): beside a Markdown file as
``FILE.png``, embedded in an HTML file. Each file is written to a temporary name and
moved into place, so an interrupted write leaves nothing half-written.

The doctor replaces only files it wrote (each carries :data:`MARK`): :func:`report_problem`
refuses, before anything runs, a report path held by another file or in a folder that cannot
be written; a figure name held by another file (the user's own ``notes.png``) is left alone
and the figure written as ``notes-doctor.png`` (said so).
"""

from __future__ import annotations

import base64
import html
import io
import os
import tempfile
from pathlib import Path

from feedlab.results import atomic_write

from .report_fields import Report
from .verdict import verdict_of_report

SUFFIXES = (".md", ".html", ".htm")
MARK = "feedlab doctor report"      # the title of every file the doctor writes (the figure's PNG Title too)
SIGNS = {".md": (b"# " + MARK.encode() + b"\n", b""), ".html": (b"<!doctype html>", f"<title>{MARK}</title>".encode()),
         ".htm": (b"<!doctype html>", f"<title>{MARK}</title>".encode()),
         ".png": (b"\x89PNG\r\n\x1a\n", b"tEXtTitle\x00" + MARK.encode())}   # (how it starts, what it holds)


def _ours(path: Path) -> bool:
    """Whether ``path`` is a regular file the doctor wrote (a report or its figure), by its first bytes."""
    start, holds = SIGNS.get(path.suffix.lower(), (None, None))
    if start is None or path.is_symlink() or not path.is_file():
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.startswith(start) and holds in head


def _taken(path: Path) -> bool:
    """A file (or anything else) is at ``path`` that the doctor did not write."""
    return (path.exists() or path.is_symlink()) and not _ours(path)


def report_problem(path) -> str | None:
    """Why the report cannot go to ``path``, in one line, or None: checked before anything
    is measured (the suffix, the folder, a file of someone else's, the folder writable)."""
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        return f"--report {path}: name a .md or .html file in an existing folder"
    folder = path.parent
    if not folder.is_dir():
        return f"--report {path}: no such folder {folder}; name a .md or .html file in an existing folder"
    if _taken(path):
        return (f"--report {path}: that file is not a report the doctor wrote, and the doctor replaces only its "
                "own: name another file")
    try:
        fd, probe = tempfile.mkstemp(prefix=".feedlab-doctor-probe.", dir=folder)
    except OSError as exc:
        return (f"--report {path}: the folder {folder} cannot be written ({exc.strerror or type(exc).__name__}); "
                "name a file in a folder you can write")
    os.close(fd)
    os.unlink(probe)
    return None


def figure_path(path: Path) -> Path:
    """Where the figure of the Markdown report ``path`` goes: ``FILE.png``, or where that is
    another file than the doctor's, the first free (or the doctor's own) ``FILE-doctor[-k].png``."""
    names = [path.with_suffix(".png"), *(path.with_name(f"{path.stem}-doctor{f'-{k}' if k > 1 else ''}.png")
                                         for k in range(1, 100))]
    for fig in names:
        if not _taken(fig):
            return fig
    raise ValueError(f"--report {path}: {names[0].name} and {len(names) - 1} other names for its figure are taken "
                     "by files the doctor did not write: name another report file")


def _write_report_file(path: Path, data: bytes) -> None:
    """:func:`feedlab.results.atomic_write`, with a failure named as the report's (never a temporary file)."""
    try:
        atomic_write(path, data)
    except OSError as exc:
        raise OSError(f"--report: cannot write {path} in the folder {path.parent} "
                      f"({exc.strerror or type(exc).__name__})") from None


def figure_png(rep: Report | dict) -> bytes | None:
    """The report's figure (:func:`figure`) as PNG bytes; None when nothing was measured."""
    fig = figure(rep)
    if fig is None:
        return None
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None, "Title": MARK})
    return buf.getvalue()


def figure(rep: Report | dict):
    """The stage costs (µs/sample, measured stages; each label whole, wrapped at words) and the rate per
    worker count (whole worker ticks); None when nothing was measured."""
    import textwrap

    from matplotlib.figure import Figure  # no pyplot: no backend switched, safe off the main thread
    from matplotlib.ticker import MaxNLocator

    rep = Report.of(rep)
    stages = [r for r in rep.stages if r.get("measurable") and r.get("s_per_sample")
              and r["stage"] != "startup" and not str(r.get("note", "")).startswith("not measured")]
    rows = [r for r in rep.end_to_end if r.get("predicted_samples_per_s")]
    if not stages and not rows:
        return None
    fig = Figure(figsize=(10, 0.9 + 0.42 * max(4, len(stages))))
    a, b = fig.subplots(1, 2)
    labels = [textwrap.fill(f"{r['stage']}: {r['variant']}", 34) for r in stages]
    a.barh(range(len(stages)), [r["s_per_sample"] * 1e6 for r in stages], color="#4c72b0")
    a.set_yticks(range(len(stages)), labels, fontsize=7)
    a.invert_yaxis()
    a.set_xlabel("µs per sample (median)")
    a.set_title("stage costs", fontsize=9)
    ws = [r["num_workers"] for r in rows]
    b.plot(ws, [r["predicted_samples_per_s"] for r in rows], "o-", label="predicted")
    meas = [(r["num_workers"], r["samples_per_s"]) for r in rows if r.get("samples_per_s")]
    if meas:
        b.plot(*zip(*meas), "s", color="#dd8452", label="measured")
    b.set_xlabel("DataLoader workers (num_workers)")
    b.xaxis.set_major_locator(MaxNLocator(integer=True))   # worker counts are whole
    b.set_ylabel("samples/s")
    v = verdict_of_report(rep)   # the run's one verdict, as the answer printed it
    b.set_title(f"verdict: {v.verdict}, bounded by {rep.bound_stage}", fontsize=9)
    b.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig


def write_report(path, text: str, rep: Report | dict, say=lambda m: None) -> list[Path]:
    """Write the report to ``path`` (.md or .html) with its figure; the files written. A
    figure name held by a file the doctor did not write is left alone: ``say`` names the one used."""
    path = Path(path)
    problem = report_problem(path)
    if problem:
        raise ValueError(problem)
    png = figure_png(rep)
    written = []
    title = "feedlab doctor report"
    if path.suffix.lower() == ".md":
        body = f"# {title}\n\n```text\n{text}\n```\n"
        if png:
            fig = figure_path(path)
            if fig != path.with_suffix(".png"):
                say(f"report: {path.with_suffix('.png').name} is not the doctor's, left as it is: the figure is {fig}")
            _write_report_file(fig, png)
            written.append(fig)
            body += f"\n![stage costs and rate per worker count]({fig.name})\n"
        _write_report_file(path, body.encode())
    else:
        img = (f'<img alt="stage costs and rate per worker count" src="data:image/png;base64,'
               f'{base64.b64encode(png).decode()}">' if png else "")
        body = (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
                f"<h1>{title}</h1><pre>{html.escape(text)}</pre>{img}</body></html>\n")
        _write_report_file(path, body.encode())
    return [path, *written]
