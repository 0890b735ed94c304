"""The notebooks under nbval, then the recorded-value tests (see nbrun.py).

Each notebook runs once: nbval's cells (collected from ``notebooks/*.ipynb`` given on the
command line) are moved ahead of the tests here, which read what each notebook recorded.
Their kernels inherit the environment set here: the smoke profile, and a scratch folder of
this session (``runs/nbval/``, emptied at the start), never ``figures/``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parents[1]
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))


def pytest_configure(config):
    os.environ["FEEDLAB_PROFILE"] = "smoke"
    if not os.environ.get("FEEDLAB_SCRATCH"):
        scratch = _REPO / "runs" / "nbval"
        shutil.rmtree(scratch, ignore_errors=True)  # nothing from an earlier session is read back
        os.environ["FEEDLAB_SCRATCH"] = str(scratch)


def _is_nbval(item) -> bool:
    return type(item).__name__ == "IPyNbCell"


def pytest_collection_modifyitems(session, config, items):
    import nbrun

    cells = [i for i in items if _is_nbval(i)]
    nbrun.NBVAL_NOTEBOOKS.update(Path(str(i.parent.path)).stem for i in cells)
    items[:] = cells + [i for i in items if not _is_nbval(i)]
