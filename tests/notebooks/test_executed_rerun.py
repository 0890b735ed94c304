"""A committed executed notebook run again through nbval (as a user might: ``pytest --nbval-lax
figures/<nb>/<machine>/<nb>.executed.ipynb``) passes and writes nothing into figures/: its
injected parameters name the committed folder, but only feedlab.run writes there
(feedlab.paths.figure_dir). Run on a copy whose injected cell asks for the smoke profile
(the committed one asks for quick: minutes) and points out_dir into figures/ explicitly."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from feedlab.paths import FIGURES_DIR, REPO_ROOT, RUNNER_ENV

pytestmark = pytest.mark.notebook

NAME = "03_pinned_memory_by_input_size"


def _tree(root):
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_nbval_over_a_committed_executed_notebook_leaves_figures_alone(tmp_path):
    committed = sorted((FIGURES_DIR / NAME).glob(f"*/{NAME}.executed.ipynb"))
    if not committed:
        pytest.skip(f"no committed executed {NAME} under figures/")
    src = committed[0]
    nb = json.loads(src.read_text())
    injected = [c for c in nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert len(injected) == 1, f"{src.relative_to(REPO_ROOT)}: no papermill-injected cell"
    injected[0]["source"] = f'profile = "smoke"\nout_dir = {str(src.parent)!r}\n'
    copy = tmp_path / src.name
    copy.write_text(json.dumps(nb))
    before = _tree(FIGURES_DIR)
    env = {k: v for k, v in os.environ.items() if k != RUNNER_ENV}
    env.update(FEEDLAB_SCRATCH=str(tmp_path / "scratch"), FEEDLAB_PROFILE="smoke",
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "lib"), str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                          "--nbval-current-env", str(copy)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert _tree(FIGURES_DIR) == before, "nbval over an executed notebook wrote into figures/"
    assert (tmp_path / "scratch" / "smoke" / NAME / "results.json").is_file()  # where it went instead
