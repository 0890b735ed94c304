"""``--report FILE.md`` / ``FILE.html``: the doctor's report with its figures, for sharing.

The text report as rendered on the console, and one figure (the stage costs per
sample; the predicted and measured rate per worker count): beside a Markdown file as
``FILE.png``, embedded in an HTML file. Each file is written to a temporary name and
moved into place, so an interrupted write leaves nothing half-written.
"""

from __future__ import annotations

import base64
import html
import io
import os
import tempfile
from pathlib import Path

SUFFIXES = (".md", ".html", ".htm")


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def figure_png(rep: dict) -> bytes | None:
    """The stage costs (µs/sample, measured stages) and the rate per worker count; None
    when nothing was measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = [r for r in rep.get("stages", []) if r.get("measurable") and r.get("s_per_sample")
              and r["stage"] != "startup" and not str(r.get("note", "")).startswith("not measured")]
    rows = [r for r in rep.get("end_to_end", []) if r.get("predicted_samples_per_s")]
    if not stages and not rows:
        return None
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    labels = [f"{r['stage']}: {r['variant'][:28]}" for r in stages]
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
    b.set_xlabel("num_workers")
    b.set_ylabel("samples/s")
    b.set_title(f"verdict: {rep.get('verdict')}, bounded by {rep.get('bound_stage')}", fontsize=9)
    b.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def write_report(path, text: str, rep: dict) -> list[Path]:
    """Write the report to ``path`` (.md or .html) with its figure; the files written."""
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise ValueError(f"--report {path}: name a .md or .html file")
    if not path.parent.is_dir():
        raise ValueError(f"--report {path}: no such folder {path.parent}")
    png = figure_png(rep)
    written = []
    title = "feedlab doctor report"
    if path.suffix.lower() == ".md":
        body = f"# {title}\n\n```text\n{text}\n```\n"
        if png:
            fig = path.with_suffix(".png")
            _atomic_write(fig, png)
            written.append(fig)
            body += f"\n![stage costs and rate per worker count]({fig.name})\n"
        _atomic_write(path, body.encode())
    else:
        img = (f'<img alt="stage costs and rate per worker count" src="data:image/png;base64,'
               f'{base64.b64encode(png).decode()}">' if png else "")
        body = (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
                f"<h1>{title}</h1><pre>{html.escape(text)}</pre>{img}</body></html>\n")
        _atomic_write(path, body.encode())
    return [path, *written]
