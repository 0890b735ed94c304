"""The doctor's advice followed step by step: the one loop notebooks 10 (``doctor_steps``) and 15 (``cure``) share.

From the spec kept so far, each step asks :func:`feedlab.doctor.predict.advise` for the single changes
predicted to gain (the rates measured so far given, so a change measured slower is not advised again),
tries the best one whose setting was neither tried before nor held (each setting at most once), and
keeps it only where the notebook's own measurement says so. What a step measures, how it credits the
gain and what it records are the notebook's (``try_change``); this loop only chooses and keeps.
"""

from __future__ import annotations

from typing import Callable

from feedlab.doctor.predict import advise
from feedlab.pipeline import PipelineSpec

# try_change(k, advice, new, spec, current) -> the step's record; its "kept" says whether ``new`` stays
TryChange = Callable[[int, dict, PipelineSpec, PipelineSpec, dict], dict]


def follow(doc, spec: PipelineSpec, current: dict, try_change: TryChange, max_steps: int = 4,
           held: tuple[str, ...] = ()) -> tuple[PipelineSpec, dict]:
    """Up to ``max_steps`` changes from ``spec`` (whose record is ``current``), on ``doc``'s
    measured :class:`~feedlab.doctor.Doctor` (its ``table``, ``e2e``, ``max_workers``, ``device``).

    Step ``k`` (from 1) calls ``try_change(k, advice, new, spec, current)`` with the advised change,
    the spec it gives (on ``doc.device``), the spec kept so far and its record; the record returned
    gets ``advice`` and, where its ``kept`` is true, becomes ``current``. Settings in ``held`` are
    never changed (notebook 15 holds the recipe's ``batch_size``). Stops early when nothing is left
    to advise. Returns the spec and the record kept last."""
    tried = set(held)
    for k in range(1, max_steps + 1):
        measured = {s: r["steady"] for s, r in doc.e2e.items()}
        advice = [a for a in advise(doc.table, spec, doc.max_workers, measured=measured)
                  if a["setting"] not in tried]
        if not advice:
            break
        top = advice[0]
        tried.add(top["setting"])
        new = PipelineSpec(**{**top["config"], "device": doc.device})
        step = try_change(k, top, new, spec, current)
        step["advice"] = top
        if step["kept"]:
            spec, current = new, step
    return spec, current
