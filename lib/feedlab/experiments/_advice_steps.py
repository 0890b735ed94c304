"""The doctor's advice followed step by step: the one loop notebooks 10 (``doctor_steps``) and 15 (``cure``) share.

From the spec kept so far, each step asks :func:`feedlab.doctor.predict.advise` for the single changes
predicted to gain (the rates measured so far given, so a change measured slower is not advised again),
tries the best one whose setting was neither tried before nor held (each setting at most once), and
keeps it only where the notebook's own measurement says so. What a step measures, how it credits the
gain and what it records are the notebook's (``try_change``); this loop only chooses and keeps.
"""

from __future__ import annotations

import math
from typing import Callable

from feedlab.doctor.predict import advise, predict
from feedlab.pipeline import COLLATES, PipelineSpec

# try_change(k, advice, new, spec, current) -> the step's record; its "kept" says whether ``new`` stays
TryChange = Callable[[int, dict, PipelineSpec, PipelineSpec, dict], dict]

# a setting whose values a near tie is settled by, first listed first: the NCHW ``fast`` before the channels-last
# ``fast_cl``, which also changes the layout of the batch the step receives (a cost no loader probe prices)
TIE_ORDER = {"collate": tuple(COLLATES)}


def own_error(doc) -> float:
    """The run's largest prediction error so far: |predicted ÷ measured − 1| over every spec measured end to end
    (0 where none is)."""
    errs = []
    for spec, r in doc.e2e.items():
        p = predict(doc.table_now(spec), spec)
        if p and r.get("steady") and p["predicted_samples_per_s"] > 0 and math.isfinite(p["predicted_samples_per_s"]):
            errs.append(abs(p["predicted_samples_per_s"] / r["steady"] - 1.0))
    return max(errs, default=0.0)


def settle_tie(advice: list[dict], band: float) -> dict:
    """The advice to try: the best predicted, unless another value of the same setting (one of
    :data:`TIE_ORDER`) is predicted within ``band`` (the run's own prediction error) of it. Then the gains
    cannot be told apart and the value listed first is taken, so noise does not choose: notebook 10 took
    ``collate=fast`` at step 2 of one quiet run and ``fast_cl`` in the next, the two predicted over the start at
    ×1.114 and ×1.111, then ×1.101 and ×1.116, with the run's own error by then about 16% and 13% (cpu-2c, #46)."""
    top = advice[0]
    order = TIE_ORDER.get(top["setting"])
    if not order or band <= 0:
        return top
    ties = [a for a in advice if a["setting"] == top["setting"] and a["value"] in order
            and a["expected_gain"] * (1.0 + band) >= top["expected_gain"]]
    return min(ties, key=lambda a: order.index(a["value"])) if top["value"] in order else top


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
        top = settle_tie(advice, own_error(doc))
        tried.add(top["setting"])
        new = PipelineSpec(**{**top["config"], "device": doc.device})
        step = try_change(k, top, new, spec, current)
        step["advice"] = top
        if step["kept"]:
            spec, current = new, step
    return spec, current
