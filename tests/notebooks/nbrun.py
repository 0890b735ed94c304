"""What a notebook recorded under the smoke profile, read back for the assertion tests.

``make test`` runs every notebook once through nbval (``pytest --nbval-lax notebooks/*.ipynb
tests/notebooks``): the kernel inherits ``FEEDLAB_PROFILE=smoke`` and ``FEEDLAB_SCRATCH`` from
this session (tests/notebooks/conftest.py), so each notebook writes ``results.json``,
``results.csv`` and its figures under ``$FEEDLAB_SCRATCH/smoke/<notebook>/``
(:func:`feedlab.paths.scratch_dir`). The tests here then read those files: no notebook runs
twice. Without nbval in the session (``pytest tests/notebooks/x.py`` alone) a notebook is
executed here once, the same way, the first time a test asks for it; with nbval running a
selection (``make nbval NB=...``) the tests of the other notebooks are skipped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from feedlab.paths import NOTEBOOKS_DIR

# notebook names nbval collected in this session (filled by conftest.pytest_collection_modifyitems)
NBVAL_NOTEBOOKS: set[str] = set()
_RAN_HERE: set[str] = set()


def out_dir(name: str) -> Path:
    """Where ``name`` writes under the smoke profile in this session (as the kernel computes it)."""
    return Path(os.environ["FEEDLAB_SCRATCH"]).resolve() / "smoke" / name


def _execute(name: str) -> None:
    """Run ``notebooks/<name>.ipynb`` with no parameters given: the profile comes from
    ``$FEEDLAB_PROFILE``, as under nbval."""
    import papermill as pm

    from feedlab.run import kernel_options

    out = out_dir(name)
    out.mkdir(parents=True, exist_ok=True)
    pm.execute_notebook(str(NOTEBOOKS_DIR / f"{name}.ipynb"), str(out / f"{name}.executed.ipynb"),
                        parameters={}, kernel_name="python3", progress_bar=False, cwd=str(NOTEBOOKS_DIR),
                        **kernel_options())


def recorded(name: str) -> tuple[dict, pd.DataFrame, Path]:
    """``(results.json, results.csv, out_dir)`` of ``name``'s smoke run in this session."""
    if name not in NBVAL_NOTEBOOKS and name not in _RAN_HERE:
        if NBVAL_NOTEBOOKS:  # nbval ran a selection (make nbval NB=...): not this one
            import pytest

            pytest.skip(f"{name}: not among the notebooks nbval ran in this session")
        _RAN_HERE.add(name)
        _execute(name)
    out = out_dir(name)
    if not (out / "results.json").is_file():
        raise AssertionError(f"notebooks/{name}.ipynb recorded no results in this session "
                             f"(no {out / 'results.json'}): see its nbval cell failure above")
    payload = json.loads((out / "results.json").read_text())
    df = pd.read_csv(out / "results.csv")
    assert (out / "fingerprint.json").is_file()
    return payload, df, out


def smoke(name: str) -> dict:
    """The smoke profile's values for ``name`` (what nbval ran it with), worker counts expanded."""
    from feedlab.profiles import resolve

    P = resolve(name, "smoke", _create_out_dir=False)
    return vars(P)
