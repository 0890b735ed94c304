"""The peers that need an environment of their own: one venv each, built by ``make peers``.

A contender whose pins conflict with feedlab's own (MosaicML streaming: numpy < 2.2,
huggingface-hub < 1.0), or that builds from source against system libraries (FFCV:
OpenCV and libjpeg-turbo through pkg-config), or that loads system FFmpeg libraries
(SPDL's decoders) gets its own venv under the repository root. Each venv holds torch,
torchvision and numpy at the figures' versions where the peer allows it
(``constraints.txt``), Pillow and psutil, and the peer; feedlab itself is not installed
there: the measurement (:mod:`feedlab.peers.remote`) runs with ``PYTHONPATH`` pointing at
this checkout, so every peer is timed and checked by the same code.

>>> python -m feedlab.peers.venvs build [names]    # make peers: apt line, then each venv (cached)
>>> python -m feedlab.peers.venvs status           # which venvs are built, and why not

A build is cached: a stamp file in the venv records the hash of what was asked for; a
second build with the same spec does nothing. A failed build leaves ``<venv>.failed``
beside the venv, one line naming the failing step, which the notebook shows as the
peer's reason. Every step has a timeout, so ``.ci/run`` stays bounded.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

from feedlab import installer
from feedlab.files import load_json
from feedlab.paths import REPO_ROOT

STAMP = ".feedlab-peer-venv.json"
# what the measurement code needs in a peer's venv besides the peer (feedlab.formats imports its stores)
BASE = ("torch", "torchvision", "pillow", "psutil", "h5py", "lmdb", "lz4", "zarr", "google-crc32c")
CORE_PINS = ("torch", "torchvision", "numpy")


@dataclass(frozen=True)
class VenvSpec:
    name: str                       # the contender's registry name
    dir: str                        # relative to the repository root
    packages: tuple[str, ...]       # pip requirements, beside BASE
    pinned: tuple[str, ...] = CORE_PINS   # constraints.txt lines kept (the others are the peer's to choose)
    apt: tuple[str, ...] = ()       # system packages its build or its run needs (Debian names)
    pkg_config: tuple[str, ...] = ()  # modules pkg-config must find before pip runs
    env: tuple[tuple[str, str], ...] = ()  # extra environment of the pip step
    timeout_s: int = 900            # the pip step's limit
    why: str = ""                   # why it cannot share feedlab's venv

    def path(self, root: Path | None = None) -> Path:
        return Path(root or REPO_ROOT) / self.dir

    def python(self, root: Path | None = None) -> Path:
        return self.path(root) / "bin" / "python"

    def digest(self, constraints: str) -> str:
        blob = json.dumps({**asdict(self), "base": BASE, "constraints": constraints}, sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]


VENVS: dict[str, VenvSpec] = {v.name: v for v in [
    VenvSpec("mosaic_streaming", ".venv-mosaic", ("mosaicml-streaming>=0.11", "numpy<2.2"), pinned=("torch", "torchvision"),
             why="pins numpy<2.2 and transformers<5 (huggingface-hub<1.0), which datasets>=5 refuses"),
    VenvSpec("ffcv", ".venv-ffcv", ("numpy<2.3", "ffcv>=1.0.2"), pinned=("torch", "torchvision"),
             apt=("pkg-config", "libopencv-dev", "libturbojpeg0-dev", "g++"),
             pkg_config=("opencv4", "libturbojpeg"), timeout_s=1200,
             why="no wheel: builds from source against OpenCV and libjpeg-turbo (pkg-config); numba pins numpy"),
    VenvSpec("spdl", ".venv-spdl", ("spdl>=0.8",),
             apt=("libavformat59", "libavfilter8", "libavdevice59", "libswscale6", "libswresample4"),
             why="its decoders load the system FFmpeg libraries; kept apart from feedlab's pins"),
]}


def spec_for(name: str) -> VenvSpec | None:
    return VENVS.get(name)


def failed_path(spec: VenvSpec, root: Path | None = None) -> Path:
    return spec.path(root).with_name(spec.path(root).name + ".failed")


def python_for(name: str, root: Path | None = None) -> Path | None:
    """The interpreter of a peer's own venv when it is built (stamp present), else None."""
    spec = VENVS.get(name)
    if spec is None:
        return None
    py = spec.python(root)
    return py if py.is_file() and (spec.path(root) / STAMP).is_file() else None


def why_missing(name: str, root: Path | None = None) -> str:
    """One line: why a peer's venv is not there (its failed build's step, or not built)."""
    spec = VENVS[name]
    f = failed_path(spec, root)
    if f.is_file():
        return f"its venv {spec.dir} failed to build: {f.read_text().strip()}"
    return f"its venv {spec.dir} is not built ({spec.why}): run `make peers`"


def _constraints(spec: VenvSpec, root: Path) -> str:
    path = root / "constraints.txt"
    if not path.is_file():
        return ""
    lines = path.read_text().splitlines()
    return "\n".join(ln for ln in lines if ln.split("==")[0].strip().lower() in spec.pinned) + "\n"


def _tail(text: str, n: int = 1) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip() and not ln.startswith("WARNING: Location")]
    return " | ".join(lines[-n:]) if lines else ""


def apt_line(specs) -> str:
    pkgs = sorted({p for s in specs for p in s.apt})
    return "apt-get install -y --no-install-recommends " + " ".join(pkgs) if pkgs else ""


def install_system(specs, run=subprocess.run, timeout: int = 900) -> str:
    """The system packages the peers need; where apt is not available (or we are not root) one line
    says so and what to install. Returns that line ("" when apt ran)."""
    line = apt_line(specs)
    if not line:
        return ""
    missing = [p for s in specs for p in s.apt if not _dpkg_has(p, run)]
    if not missing:
        return ""
    if shutil.which("apt-get") is None or (hasattr(os, "geteuid") and os.geteuid() != 0):
        return f"peers: apt not available here; install the system packages yourself: {line}"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        r = run(line.split(), capture_output=True, text=True, timeout=timeout, env=env)
        if r.returncode != 0:
            run(["apt-get", "update", "-q"], capture_output=True, text=True, timeout=timeout, env=env)
            r = run(line.split(), capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return f"peers: `{line}` ran past {timeout} s"
    return "" if r.returncode == 0 else f"peers: `{line}` failed: {_tail(r.stderr or r.stdout)}"


def _dpkg_has(pkg: str, run=subprocess.run) -> bool:
    try:
        r = run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and "install ok installed" in r.stdout


def build(spec: VenvSpec, root: Path | None = None, python: str | None = None, run=None,
          log=print, uv: str | None = None) -> tuple[bool, str]:
    """Build (or keep, when its stamp matches) one peer's venv. Returns (ok, one line). The packages install
    through :func:`feedlab.installer.install`: with ``uv`` (found beside the interpreter or on PATH;
    ``uv=""``: pip only) given pip's configuration, and with pip where uv fails or cannot honour it."""
    root = Path(root or REPO_ROOT)
    venv, failed = spec.path(root), failed_path(spec, root)
    cons = _constraints(spec, root)
    digest = spec.digest(cons)
    stamp = venv / STAMP
    if stamp.is_file():
        try:   # an unreadable or wrong-shaped stamp (deep JSON, a list) is "not cached"
            rec = load_json(stamp, "peer venv stamp", limit=1 << 16)
        except (OSError, ValueError):
            rec = None
        if isinstance(rec, dict) and rec.get("digest") == digest and spec.python(root).is_file():
            return True, f"{spec.dir}: cached"
        stamp.unlink()

    def fail(step: str, detail: str) -> tuple[bool, str]:
        line = f"{step}: {detail}"
        failed.write_text(line + "\n")
        return False, f"{spec.dir}: {line}"

    for mod in spec.pkg_config:
        if shutil.which("pkg-config") is None:
            return fail("pkg-config", f"not installed ({apt_line([spec])})")
        r = (run or subprocess.run)(["pkg-config", "--exists", mod], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            return fail(f"pkg-config {mod}", f"not found ({apt_line([spec])})")
    py = python or sys.executable
    t0 = time.perf_counter()
    if not spec.python(root).is_file():
        r = (run or subprocess.run)([py, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            return fail(f"{py} -m venv", _tail(r.stderr))
    cfile = venv / "peer-constraints.txt"
    cfile.write_text(cons)
    wants = ["-c", str(cfile), *BASE, *spec.packages]
    uv = installer.find_uv(sys.executable) or "" if uv is None else uv   # make install puts uv beside .venv's Python
    # uv with pip's configuration where it can honour it, else pip; pip takes over a failed uv step (feedlab.installer)
    rc, line = installer.install(str(spec.python(root)), wants, what=" ".join(spec.packages), uv=uv,
                                 run=run or installer.run_group,   # past its limit, stopped with its build
                                 log=lambda msg: log(f"{spec.dir}: {msg}"), timeout=spec.timeout_s,
                                 env=dict(spec.env))
    if rc:
        return fail(*line.split(": ", 1))
    seconds = time.perf_counter() - t0
    stamp.write_text(json.dumps({"digest": digest, "packages": list(spec.packages), "build_s": seconds}))
    if failed.exists():
        failed.unlink()
    return True, f"{spec.dir}: built in {seconds:.0f} s"


def status(root: Path | None = None) -> dict[str, str]:
    return {n: (f"{python_for(n, root)}" if python_for(n, root) else why_missing(n, root)) for n in VENVS}


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m feedlab.peers.venvs", description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["build", "status"])
    ap.add_argument("names", nargs="*", help=f"default all: {', '.join(VENVS)}")
    ap.add_argument("--python", default=None, help="the Python that makes the venvs (default this one)")
    ap.add_argument("--no-apt", action="store_true", help="skip the system packages")
    a = ap.parse_args(argv)
    unknown = [n for n in a.names if n not in VENVS]
    if unknown:
        print(f"unknown peer venv {', '.join(unknown)}; one of: {', '.join(VENVS)}", file=sys.stderr)
        return 2
    specs = [VENVS[n] for n in (a.names or VENVS)]
    try:
        installer.choice()
    except ValueError as exc:
        print(f"peers: {exc}", file=sys.stderr)
        return 2
    if a.action == "status":
        for n, s in status().items():
            print(f"{n:18s} {s}")
        return 0
    if not a.no_apt:
        line = install_system(specs)
        if line:
            print(line)
    # side by side: each build is mostly pip waiting on its cache and the disk (2026-11-26, cpu-2c: 105 + 55 + 45 s
    # one after another); a peer that does not build is reported unavailable with its step, the rest still run
    with ThreadPoolExecutor(max_workers=max(1, len(specs))) as pool:
        futures = {pool.submit(build, spec, python=a.python): spec for spec in specs}
        for fut in as_completed(futures):
            try:
                _ok, line = fut.result()
            except (OSError, subprocess.SubprocessError) as exc:   # one build's failure hides no other's line
                line = f"{futures[fut].dir}: {type(exc).__name__}: {exc}"
            print(f"peers: {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
