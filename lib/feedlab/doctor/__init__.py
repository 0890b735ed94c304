"""The bottleneck doctor: which stage of an input pipeline bounds training, and what to change.

* :mod:`.costs` — the stage-cost table (plain data) and the machine;
* :mod:`.split` — a data set's read → decode → transform, through the stores' public stage split;
* :mod:`.probes` — the small measurements (worker probe, effective cores, start-up);
* :mod:`.measure` — :class:`Doctor`, which measures the table and the DataLoader end to end;
* :mod:`.predict` — rate, bound and advice as a pure function of the table (imports no measurement);
* :mod:`.diagnosis` — a report: the table, prediction vs measurement (the doctor's own error), advice;
* :mod:`.report` — the report as text; :mod:`.answer` — the answer first (verdict, changes, code lines);
* :mod:`.user` — the doctor on your own DataLoader (:mod:`.guard`: deadlines and one-line failures;
  :mod:`.stepside`: step-side changes tried on your step); :mod:`.script` — ``--script train.py``;
  :mod:`.share` — ``--report FILE.md/.html``;
* ``python -m feedlab.doctor`` — the command line (:mod:`.__main__`).
"""

from __future__ import annotations

from . import predict  # the module: predict.predict(table, spec), predict.advise(...)
from .answer import render_user
from .costs import BOUND_STAGES, MAIN_STAGES, VERDICTS, WORKER_STAGES, CostTable, Machine, Stage
from .diagnosis import diagnose, shm_report
from .measure import Doctor, Effort
from .predict import MIN_GAIN, advise, refuted
from .report import render
from .split import StageSplit, open_split
from .user import diagnose_loader


def main(argv=None) -> int:
    """The command line (``feedlab-doctor``)."""
    from .__main__ import main as _main

    return _main(argv)


__all__ = ["BOUND_STAGES", "MAIN_STAGES", "WORKER_STAGES", "VERDICTS", "MIN_GAIN", "CostTable", "Machine", "Stage",
           "Doctor", "Effort", "StageSplit", "open_split", "diagnose", "shm_report", "advise", "refuted",
           "predict", "render", "diagnose_loader", "render_user", "main"]
