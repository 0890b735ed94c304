"""Every path feedlab uses, anchored at the repository root.

Nothing else in the project types a path: notebooks, the runner and the
tests all start from here, so the workbook works from any working directory.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
FIGURES_DIR = REPO_ROOT / "figures"
PROFILES_FILE = NOTEBOOKS_DIR / "profiles.yaml"
# smoke runs (tests, nbval) write here, never over the committed figures
SCRATCH_DIR = Path(os.environ.get("FEEDLAB_SCRATCH", REPO_ROOT / "runs")).resolve()
# an optional second environment with Pillow-SIMD (`make pillow-simd`): Pillow-SIMD
# replaces Pillow in place, so it cannot share an environment with it
PILLOW_SIMD_PYTHON = REPO_ROOT / ".venv-simd" / "bin" / "python"
DATA_DIR = Path(os.environ.get("FEEDLAB_DATA", REPO_ROOT / "data")).resolve()


def default_sr_root(profile: str = "quick", patch: int = 64) -> Path:
    """The embedded super-resolution set a profile uses (built by data_prep)."""
    suffix = "-smoke" if profile == "smoke" else ""
    return DATA_DIR / f"sr{patch}{suffix}"


def default_cls_root(profile: str = "quick") -> Path:
    """The embedded ImageFolder (JPEG classification) set a profile uses."""
    return DATA_DIR / ("cls-smoke" if profile == "smoke" else "cls")


def figure_dir(notebook_name: str, out_dir: str | os.PathLike = "", profile: str = "quick",
               create: bool = True) -> Path:
    """Where a notebook writes its results and figures; created if missing (unless ``create``
    is False).

    By default ``figures/<notebook_name>/<machine_key>/`` (``cpu-2c``, ``h100-16c``: see
    :mod:`feedlab.machines`), so a run on another machine lands beside ours instead of
    over it. ``out_dir`` overrides it (tests point it at a temporary directory). The
    ``smoke`` profile writes under ``runs/smoke/`` so that a test run never replaces the
    committed figures.
    """
    if str(out_dir):
        path = Path(out_dir)
    elif profile == "smoke":
        path = SCRATCH_DIR / "smoke" / notebook_name
    else:
        from feedlab.machines import machine_key

        path = FIGURES_DIR / notebook_name / machine_key()
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path
