"""One verdict a run: from the data-wait share of the user's own loop, as measured.

The loop's batches (``waits[k]``: the time ``next()`` on the loader took; ``steps[k]``: from the batch's
arrival to the next ``next()``) are cut into windows of consecutive batches, each window at least as long as
the loader's worker count (with ``W`` workers a loop may wait once every ``W`` batches and not between: a
window sees the whole cycle), and the share is the **median over the windows**: one slow burst moves one
window, not the verdict. The step is priced by its median per sample over the same batches, with the
spread (quartiles) stated.

The stage-by-stage diagnosis (``--diagnose``) explains which stage bounds; it never gives a second verdict.
Where its prediction reads the other way, :func:`disagreement` says so and why (a burst in the loop's
window, a busy machine, the step priced alone), and the measured verdict stands.

The same rule for every kind of run: ``--script`` (the script's own loop), ``--loader`` (your loader as built,
end to end) and ``--data`` (feedlab's pipeline as specified, end to end); :class:`Loop` is the typed reading
each of them gives, :class:`Verdict` the run's one verdict every reader takes (:func:`verdict_of_report`),
never re-derived. "No input-pipeline change will help" has one rule too (:func:`no_change_helps`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from .report_fields import Report, put

DATA_BOUND_FRACTION = 0.2   # the step waits for data this share of the loop or more: the input pipeline bounds
#: under this share of the loop outside the step (the headspace measured: the step alone against the loop end to
#: end) no input-pipeline change will help; the one rule of that sentence (:func:`no_change_helps`)
NO_CHANGE_SHARE = 0.05
#: batches a --script run the deadline ended needs before its loop gives a verdict (fewer: the numbers only)
VERDICT_MIN_BATCHES = 16
BURST = 2.0                 # a window whose loop time is this many times the median window's: a burst


def window_size(n: int, workers: int) -> int:
    """Batches per window: at least ``workers`` (one worker cycle) and 1, at most ``n // 3`` so that a
    median over at least three windows exists (fewer batches: one window of all of them)."""
    if n < 3:
        return max(1, n)
    return max(1, min(max(1, int(workers)), n // 3))


@dataclass(frozen=True)
class Loop:
    """The loop's measured data-wait share (:func:`wait_share`), typed: ``share`` (median over windows: the
    verdict's), ``mean_share`` (the whole window's sums: what a burst moves), ``windows``, ``window_batches``,
    ``bursts``, ``verdict`` and ``source`` (which loop: your script, your loader, feedlab's pipeline)."""

    share: float
    mean_share: float
    windows: int
    window_batches: int
    bursts: int
    verdict: str | None
    source: str = "your loop"
    busy: str | None = None   # why the loop's windows were busy (another program took the CPU); None: not

    def as_dict(self) -> dict:
        d = asdict(self)
        if d["busy"] is None:   # a quiet loop's JSON stays as it was
            del d["busy"]
        return d

    @classmethod
    def of(cls, d: "dict | Loop", source: str | None = None) -> "Loop":
        """A reading from its JSON dict (a report read back, ``--script``'s wire), ``source`` set where given."""
        if isinstance(d, Loop):
            return d if source is None else cls(**dict(d.as_dict(), source=source))
        share = float(d["share"])
        return cls(share=share, mean_share=float(d.get("mean_share", share)), windows=int(d.get("windows", 1)),
                   window_batches=int(d.get("window_batches", 1)), bursts=int(d.get("bursts", 0)),
                   verdict=d.get("verdict", verdict_of(share)),
                   source=str(source or d.get("source") or "your loop"), busy=d.get("busy"))


@dataclass(frozen=True)
class Verdict:
    """The run's one verdict, as every reader takes it (:func:`verdict_of_report`): ``verdict`` (the loop's
    measured one where the loop was measured, else the stages' prediction, ``measured`` False), ``predicted``
    (what the stages read), ``loop`` (the :class:`Loop` behind it) and ``note`` (:func:`disagreement`)."""

    verdict: str | None
    measured: bool
    predicted: str | None = None
    loop: Loop | None = None
    note: str | None = None


def verdict_of_report(rep: Report | dict) -> Verdict:
    """The one verdict a report holds (set by :func:`one_verdict`, or the stages' where no loop was measured):
    what the printer, the answer, ``--report``'s figure and the what-if read, never re-derived."""
    rep = Report.of(rep)
    loop = rep.loop
    lp = Loop.of(loop) if loop and loop.get("verdict") is not None and loop.get("share") is not None else None
    return Verdict(verdict=rep.verdict, measured=lp is not None,
                   predicted=rep.predicted_verdict if rep.has("predicted_verdict") else (None if lp else rep.verdict),
                   loop=lp, note=rep.verdict_note)


# the field's words for how input-bound a job is, by the share of the loop spent outside the step
# (TensorFlow's profiler and the loaders' guides: under 5% not, 5-20% moderately, 20% or more highly)
FIELD = ((0.05, "not input-bound"), (0.20, "moderately input-bound"), (math.inf, "highly input-bound"))


def field_words(share: float) -> str:
    return next(words for bound, words in FIELD if share < bound)


@dataclass(frozen=True)
class Headspace:
    """The most any loader change can give, measured: the step alone (loading removed) over the loop end to
    end (``most``), the share of the loop outside the step (``input_share``) and its field words; built by
    :func:`headspace_of`, read by the answer and the what-if (``answer.headspace``)."""

    step_samples_per_s: float
    most: float
    input_share: float

    @property
    def words(self) -> str:
        return field_words(self.input_share)

    @property
    def no_change(self) -> bool:
        """Whether "no input-pipeline change will help" may be said (:func:`no_change_helps`)."""
        return no_change_helps(self.input_share)


def headspace_of(step_s_per_sample: float | None, measured_samples_per_s: float | None) -> Headspace | None:
    """The :class:`Headspace` of a step priced alone at ``step_s_per_sample`` and a loop measured end to end
    at ``measured_samples_per_s``; None where either is missing or not a positive finite number."""
    ok = [x is not None and math.isfinite(x) and x > 0 for x in (step_s_per_sample, measured_samples_per_s)]
    if not all(ok):
        return None
    step_rate = 1.0 / step_s_per_sample
    return Headspace(step_samples_per_s=step_rate, most=max(1.0, step_rate / measured_samples_per_s),
                     input_share=max(0.0, 1.0 - measured_samples_per_s / step_rate))


def no_change_helps(input_share: float | None) -> bool:
    """The one rule of "no input-pipeline change will help": the share of the loop outside the step, measured
    (the step alone against the loop end to end), under :data:`NO_CHANGE_SHARE`; never from a prediction
    (None: not measured, so never said)."""
    return input_share is not None and math.isfinite(input_share) and input_share < NO_CHANGE_SHARE


def wait_share(waits, steps, workers: int = 0) -> dict | None:
    """The loop's data-wait share, median over windows (this module's docstring): ``share`` (the verdict's),
    ``mean_share`` (the whole window's sums: what a burst moves), ``windows``, ``window_batches``,
    ``bursts`` (windows whose loop time is ≥ ×2 the median window's) and ``verdict``. None without a batch
    whose wait and step were both seen."""
    w = np.asarray(list(waits), float)
    s = np.asarray(list(steps), float)
    n = min(len(w), len(s))
    w, s = w[:n], s[:n]
    if n < 1 or (w.sum() + s.sum()) <= 0:
        return None
    k = window_size(n, workers)
    m = n // k
    ws = w[:m * k].reshape(m, k).sum(axis=1)
    ss = s[:m * k].reshape(m, k).sum(axis=1)
    tot = ws + ss
    ok = tot > 0
    shares = ws[ok] / tot[ok]
    share = float(np.median(shares)) if len(shares) else float(w.sum() / (w.sum() + s.sum()))
    med = float(np.median(tot)) if len(tot) else 0.0
    bursts = int(np.sum(tot >= BURST * med)) if med > 0 else 0
    return {"share": share, "mean_share": float(w.sum() / (w.sum() + s.sum())), "windows": int(m),
            "window_batches": int(k), "bursts": bursts, "verdict": verdict_of(share)}


TOO_BUSY = "too busy to judge"   # the verdict where the loop was measured while another program took the CPU


def verdict_of(share: float | None) -> str | None:
    if share is None or not math.isfinite(share):
        return None
    return "data-bound" if share >= DATA_BOUND_FRACTION else "compute-bound"


def step_price(steps, sizes, cpus=None) -> dict | None:
    """The step per sample over the loop's batches: ``s_per_sample`` (median of each batch's step over its
    own samples), its quartiles, ``spread`` ((q75 - q25) / median) and the median CPU per sample where
    ``cpus`` is given. None without a batch of known size."""
    s = np.asarray(list(steps), float)
    m = np.asarray(list(sizes), float)
    n = min(len(s), len(m))
    s, m = s[:n], m[:n]
    ok = m > 0
    if not ok.any():
        return None
    per = s[ok] / m[ok]
    q25, med, q75 = (float(x) for x in np.percentile(per, [25, 50, 75]))
    out = {"s_per_sample": med, "s_per_sample_q25": q25, "s_per_sample_q75": q75,
           "spread": (q75 - q25) / med if med > 0 else None, "mean_s_per_sample": float(s[ok].sum() / m[ok].sum()),
           "batches": int(ok.sum())}
    c = None if cpus is None else np.asarray(list(cpus), float)[:n]
    if c is not None and len(c) == n:
        out["cpu_s_per_sample"] = float(np.median(c[ok] / m[ok]))
    return out


def spread_words(price: dict) -> str:
    """"step 1.8 ms a sample (median; quartiles 1.7–2.1, spread 22%)"."""
    sp = price.get("spread")
    return (f"step {price['s_per_sample'] * 1e3:,.2f} ms a sample (median of {price['batches']} batches; quartiles "
            f"{price['s_per_sample_q25'] * 1e3:,.2f}–{price['s_per_sample_q75'] * 1e3:,.2f}"
            + (f", spread {100 * sp:.0f}%" if sp is not None else "") + ")")


def disagreement(loop: dict, predicted: str | None, bound_stage: str | None, *, busy: bool = False,
                 priced: str | None = None) -> str | None:
    """The sentence where the stage-by-stage prediction reads the other way from the loop's measured verdict:
    which one stands (the measured) and why they differ; None where they agree."""
    measured = loop.get("verdict")
    if measured is None or predicted is None or measured == predicted or loop.get("busy"):
        return None
    why = []
    if loop.get("bursts"):
        why.append(f"{loop['bursts']} of {loop['windows']} window(s) of your loop were bursts (≥ ×{BURST:g} the "
                   f"median window's time): the whole window's mean share is {100 * loop['mean_share']:.0f}%, "
                   f"its median {100 * loop['share']:.0f}%")
    if busy:
        why.append("another program used the CPU while the stages were timed (a busy window)")
    if priced:
        why.append(f"the stages price the step {priced}, your loop ran it beside its loader")
    if not why:
        why.append("the stage costs, each timed alone, add up differently from the loop that overlaps them")
    return (f"the stage-by-stage prediction reads {predicted} (bounded by {bound_stage or '—'}), your loop "
            f"measured {measured} ({100 * loop['share']:.0f}% waiting for data): the measured verdict stands; "
            f"why they differ: {'; '.join(why)}")


def one_verdict(rep: Report | dict, loop: "dict | Loop", *, busy: bool = False,
                priced: str | None = None, loop_busy: str | None = None) -> Report | dict:
    """The report's one verdict set from the loop's measured share (``loop``: :func:`wait_share` with a
    ``source``, or a :class:`Loop`): ``verdict`` is the measured one, ``predicted_verdict`` what the stages
    read, ``loop`` the share (its JSON dict), ``verdict_note`` the :func:`disagreement` sentence (None where
    they agree). ``loop_busy``: why the loop itself was measured busy; then the verdict is :data:`TOO_BUSY`
    (a busy window moves the share: never a verdict), the share kept in ``loop`` with the reason. Returns
    ``rep``; :func:`verdict_of_report` reads it back typed."""
    r = Report.of(rep)
    predicted = r.predicted_verdict if r.has("predicted_verdict") else r.verdict
    loop = Loop.of(loop).as_dict()
    if loop_busy:
        loop["busy"] = loop_busy
    put(rep, "predicted_verdict", predicted)
    put(rep, "loop", loop)
    if loop_busy:
        put(rep, "verdict", TOO_BUSY)
    elif loop.get("verdict") is not None:
        put(rep, "verdict", loop["verdict"])
    put(rep, "verdict_note", disagreement(loop, predicted, r.bound_stage, busy=busy, priced=priced))
    return rep
