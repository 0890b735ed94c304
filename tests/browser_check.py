"""Open every executed notebook in JupyterLab in headless Chromium, as a person would, and check
what shows: each figure renders (as many images as the notebook holds, none smaller than
MIN_SIDE pixels), no error output (read from the notebook and from the page), and (reported) how
many warning boxes (stderr) a reader sees.

    python tests/browser_check.py [--html] [PATH ...]     (make browser-check)

PATHs are executed notebooks (default: figures/*/*/*.executed.ipynb). JupyterLab is started on
127.0.0.1 with a random token and stopped at the end; Chromium loads each notebook's Lab URL with
``--dump-dom`` after letting Lab's scripts run (``--virtual-time-budget``), and the rendered DOM is
read. ``--html`` checks ``jupyter nbconvert --to html`` output instead of Lab (no server).
Without Chromium (``chromium``, ``chromium-browser``, ``google-chrome``; or ``$CHROMIUM``) it says
so in one line and exits 0: CI installs the system package ``chromium``.
Exit status: 0 all notebooks pass (or skipped), 1 a notebook failed (one line each), 2 bad usage.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIN_SIDE = 100            # a rendered figure narrower or lower than this is not a figure
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
ERROR_MIME = "application/vnd.jupyter.error"
STDERR_MIME = "application/vnd.jupyter.stderr"


def find_chromium() -> str | None:
    env = os.environ.get("CHROMIUM", "").strip()
    if env:
        return env if shutil.which(env) or Path(env).is_file() else None
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def unshown_figures(nb_path: Path) -> str | None:
    """A record that holds fewer images than the figure files (PNG) its run wrote beside it: the
    reader of the notebook would miss figures that exist only as files. Checked without a browser."""
    files = len(list(nb_path.parent.glob("*.png")))
    shown = len(expected(nb_path)["images"])
    return f"shows {shown} of the {files} figure files beside it" if shown < files else None


def key_figure_unshown(nb_path: Path) -> str | None:
    """A record whose first cell (the findings) does not show its key figure inline: a markdown image of a PNG
    its run wrote beside it (issue 48: the answer and its picture first). Checked without a browser."""
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    cells = nb.get("cells") or []
    if not list(nb_path.parent.glob("*.png")):
        return None   # a run that drew no figure has none to show
    first = cells[0] if cells else {}
    src = "".join(first.get("source", "")) if isinstance(first.get("source"), list) else str(first.get("source", ""))
    shown = [m for m in re.findall(r"!\[[^\]]*\]\(([^)\s]+\.png)\)", src) if (nb_path.parent / m).is_file()]
    if first.get("cell_type") != "markdown" or not shown:
        return "its first cell does not show its key figure (refresh: python -m feedlab.report.readme --findings)"
    return None


def expected(nb_path: Path) -> dict:
    """What the notebook holds: image outputs (with their pixel sizes) and error outputs."""
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    images, errors, stderr = [], 0, 0
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            kind = out.get("output_type")
            if kind == "error":
                errors += 1
            elif kind == "stream" and out.get("name") == "stderr":
                stderr += 1
            elif "image/png" in (out.get("data") or {}):
                data = out["data"]["image/png"]
                images.append(png_size(base64.b64decode("".join(data) if isinstance(data, list) else data)))
    return {"images": images, "errors": errors, "stderr": stderr}


def png_size(raw: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's header (no decoder needed)."""
    if raw[:8] != b"\x89PNG\r\n\x1a\n" or len(raw) < 24:
        return (0, 0)
    return int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")


class _Dom(HTMLParser):
    """Counts in a rendered page: figure images (PNG data URLs) with their sizes, error and
    stderr outputs, and notebook cells (Lab's, or nbconvert's)."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[tuple[int, int]] = []
        self.errors = 0
        self.stderr = 0
        self.cells = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if "jp-Cell" in classes or "jp-Notebook-cell" in classes:
            self.cells += 1
        mime = a.get("data-mime-type", "")
        if mime == ERROR_MIME or "jp-OutputArea-executeResult-error" in classes:
            self.errors += 1
        elif mime == STDERR_MIME:
            self.stderr += 1
        src = a.get("src") or ""
        if tag == "img" and src.startswith("data:image/png;base64,"):
            self.images.append(png_size(base64.b64decode(urllib.parse.unquote(src.split(",", 1)[1]))))


def read_dom(html: str) -> _Dom:
    dom = _Dom()
    dom.feed(html)
    return dom


def judge(name: str, want: dict, dom: _Dom) -> list[str]:
    """One line per problem of one notebook's rendered page (empty: it passes)."""
    out = []
    if dom.cells == 0:
        out.append(f"{name}: no notebook cell rendered (the page did not load)")
        return out
    if len(dom.images) < len(want["images"]):
        out.append(f"{name}: {len(dom.images)} of its {len(want['images'])} figures rendered")
    small = [f"{w}×{h}" for w, h in dom.images if w < MIN_SIDE or h < MIN_SIDE]
    if small:
        out.append(f"{name}: figure(s) rendered smaller than {MIN_SIDE} px: {', '.join(small[:3])}")
    if want["errors"] or dom.errors:
        out.append(f"{name}: {max(want['errors'], dom.errors)} error output(s) show")
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """JupyterLab on loopback for the length of a ``with`` block."""

    def __init__(self, root: Path) -> None:
        self.root, self.port, self.token = root, _free_port(), secrets.token_hex(16)
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.TemporaryFile()

    def __enter__(self) -> "Lab":
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
               f"--ServerApp.token={self.token}", f"--ServerApp.root_dir={self.root}",
               "--ServerApp.open_browser=False", "--LabApp.news_url=", "--LabApp.check_for_updates_class="
               "jupyterlab.NeverCheckForUpdate"]
        if hasattr(os, "getuid") and os.getuid() == 0:
            cmd.append("--allow-root")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.root)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                tail = self.log.read().decode(errors="replace").strip().splitlines()[-1:]
                raise RuntimeError(f"JupyterLab exited ({self.proc.returncode}): {' '.join(tail)}")
            try:
                with urllib.request.urlopen(f"{self.base}/api/status?token={self.token}", timeout=2):
                    return self
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("JupyterLab did not answer on 127.0.0.1 within 90 s")

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, nb: Path) -> str:
        rel = urllib.parse.quote(str(nb.resolve().relative_to(self.root)))
        return f"{self.base}/lab/tree/{rel}?token={self.token}&reset"

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def dump_dom(chromium: str, url: str, budget_ms: int, profile: Path) -> str:
    cmd = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}",
           "--window-size=1400,2000", f"--virtual-time-budget={budget_ms}", "--run-all-compositor-stages-before-draw",
           "--dump-dom", url]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=budget_ms / 1000 + 120)
    if run.returncode != 0 and not run.stdout:
        raise RuntimeError(f"chromium exited {run.returncode}: {run.stderr.strip().splitlines()[-1:] }")
    return run.stdout


def to_html(nb: Path, out_dir: Path) -> Path:
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--output-dir", str(out_dir),
                    str(nb)], check=True, capture_output=True)
    return out_dir / (nb.stem + ".html")


def _name(nb: Path) -> str:
    return str(nb.resolve().relative_to(REPO)) if nb.resolve().is_relative_to(REPO) else str(nb)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tests/browser_check.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", type=Path, help="executed notebooks (default: all committed)")
    ap.add_argument("--html", action="store_true", help="check nbconvert's HTML instead of JupyterLab")
    ap.add_argument("--budget", type=int, default=25000, help="ms of page time Lab gets to render (default 25000)")
    args = ap.parse_args(argv)
    paths = args.paths or sorted(REPO.glob("figures/*/*/*.executed.ipynb"))
    missing = [p for p in paths if not p.is_file()]
    if missing:
        print(f"{missing[0]}: no such notebook", file=sys.stderr)
        return 2
    unshown = [f"{_name(p)}: {why}" for p in paths if (why := unshown_figures(p) or key_figure_unshown(p))]
    for line in unshown:
        print(f"FAIL {line}")
    chromium = find_chromium()
    if chromium is None:
        print("browser check skipped: no Chromium here (install the system package chromium, or set CHROMIUM=path)")
        return 1 if unshown else 0
    if not paths:
        print("browser check: no executed notebooks under figures/ (run make figures first)")
        return 0
    failures, warned = list(unshown), 0
    with tempfile.TemporaryDirectory(prefix="feedlab-browser-") as tmp:
        tmp = Path(tmp)
        lab = None if args.html else Lab(REPO).__enter__()
        try:
            for nb in paths:
                name = _name(nb)
                want = expected(nb)
                try:
                    url = to_html(nb, tmp).as_uri() if args.html else lab.url(nb)
                    dom = read_dom(dump_dom(chromium, url, args.budget, tmp / "profile"))
                except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
                    failures.append(f"{name}: could not be rendered ({str(exc)[:160]})")
                    print(f"FAIL {failures[-1]}")
                    continue
                problems = judge(name, want, dom)
                failures += problems
                boxes = max(want["stderr"], dom.stderr)
                warned += boxes
                note = f", {boxes} warning box(es)" if boxes else ""
                print(("FAIL " + "; ".join(problems)) if problems else
                      f"ok   {name}: {len(dom.images)} figure(s){note}")
        finally:
            if lab is not None:
                lab.__exit__(None, None, None)
    print(f"browser check: {len(paths) - len({f.split(':')[0] for f in failures})} of {len(paths)} notebooks "
          f"pass ({'nbconvert HTML' if args.html else 'JupyterLab'}, {Path(chromium).name}); "
          f"{warned} warning box(es) in all")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
