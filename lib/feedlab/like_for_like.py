"""Like for like: what both sides of a comparison must share before a ratio between them is judged.

A comparison names its two sides as :class:`Side` records — sample order, output pixels (mean absolute
error against the reference decode), batch size, workers that ran, cache state, and the timed window —
and :func:`differences` lists every invariant on which they differ, or that one side did not record.
A ratio whose sides differ is shown with :func:`judged` as "not like for like (what differs)", never as a
verdict or a target met. Standard library only: the peer table (notebook 13), the cure (15), the
storage-format ratios (05) and the claims ledger all call it.

Not applicable, not checked. An invariant that has no meaning for what a side timed (no pixels in a raw
host-to-device copy or in items that only sleep; no sampler order in a collate of in-memory arrays; no cache
for a sleep) is recorded as the string :data:`NOT_APPLICABLE` (``"not applicable"``; never ``"n/a"``, which
``pandas.read_csv`` reads back as NaN, i.e. as not recorded). Both sides not applicable: they match; one side
not applicable and the other a value: "not like for like" (they did not do the same work). A pixel check that
was not run is recorded as :data:`NOT_CHECKED` and reads as not recorded ("not known"), never equal.
:func:`invariants` is what an experiment writes on each row: the one place the convention is spelled."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# a timed window long enough to give a rate: at least a second of wall time (so a timer's resolution, a
# scheduler tick or one slow batch cannot move the rate by much), and either the steady rule's 50 timed
# batches or a rate timed until it was known to a stated precision (pipeline.rates.SteadyStop: the 95%
# interval's relative half-width, at most MAX_HALF_WIDTH, over the batches it took)
MIN_TIMED_BATCHES = 50
MIN_WINDOW_S = 1.0
MAX_HALF_WIDTH = 0.05
# a micro-benchmark times a short callable in repeats of the same setting (tens of ms each): its side may be judged
# on the pooled window — the sum of its repeats' windows at least MIN_WINDOW_S, over at least MIN_POOLED_REPEATS
# repeats whose own 95% interval of the mean (Student's t over the per-repeat values) is within ±MAX_HALF_WIDTH
MIN_POOLED_REPEATS = 5
# THE precision rule (:func:`precision_problem`): a rate not timed to its precision (imprecise) stands for its setting
# only as the median of at least MIN_REPEATS repeats (the claims' REPEATS precondition reads the same constant)
MIN_REPEATS = 3
# Student's t, two-sided 95% (the 0.975 quantile), by degrees of freedom 1–30; above 30 a Cornish–Fisher expansion
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
# two decodes give "the same pixels" when their mean |difference| from the reference decode (0–255 scale)
# differ by at most this much (a reduced-scale DCT decode sits ~10 off; libjpeg-turbo builds 0–0.2)
PIXEL_TOLERANCE = 1.0

ORDERS = {"global": "global permutation per epoch", "chunk": "chunk-local shuffle (each batch from one chunk)",
          "quasi": "quasi-random (shuffled pages)", "sequential": "in storage order"}
NOT_LIKE = "not like for like"
NOT_APPLICABLE = "not applicable"   # the invariant has no meaning for what this side timed (typed, compared)
NOT_CHECKED = "not checked"         # it applies, but this run did not measure it: read as not recorded
INVARIANT_COLUMNS = ("order", "pixel_error", "cache", "window_s", "epoch_batches")


def order_of(shuffle: str | None, loader: str | None = None) -> str | None:
    """The order class (a key of :data:`ORDERS`) of a free-text shuffle description, with the loader kind
    first: feedlab's ``chunk`` kind draws each batch from one contiguous chunk whatever its sampler says."""
    if loader == "chunk":
        return "chunk"
    text = (shuffle or "").lower()
    if not text:
        return None
    for key, words in (("quasi", ("quasi",)), ("chunk", ("chunk",)),
                       ("sequential", ("sequential", "in order", "no shuffle", "storage order")),
                       ("global", ("global", "permutation", "randomsampler", "random", "shuffle"))):
        if any(w in text for w in words):
            return key
    return None


def workers_of(pipeline: str | None, recorded) -> int | None:
    """The worker count that ran: a pipeline's own ``w<N>`` (feedlab's best names its spec) over the
    harness's count, which a loader that takes no workers ignores."""
    m = re.search(r"\bw(\d+)\b", pipeline or "")
    if m:
        return int(m.group(1))
    return None if _missing(recorded) else int(recorded)


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x)) or (isinstance(x, str) and x == NOT_CHECKED)


def _na(x) -> bool:
    return isinstance(x, str) and x == NOT_APPLICABLE


def t975(df: int) -> float:
    """Student's t 0.975 quantile for ``df`` degrees of freedom (≥ 1): a 95% two-sided interval's multiplier."""
    if df < 1:
        raise ValueError(f"df {df!r}: give at least 1 degree of freedom")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def repeat_half_width(values) -> float | None:
    """The 95% relative half-width of the mean of per-repeat values (one value per repeat: a rate or a time per
    batch): t(0.975, R−1) × sd ÷ √R ÷ |mean|. None with fewer than two finite values or a zero mean."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if len(xs) < 2:
        return None
    mean = sum(xs) / len(xs)
    if mean == 0:
        return None
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
    return t975(len(xs) - 1) * sd / math.sqrt(len(xs)) / abs(mean)


def invariants(*, order: str, pixel_error: float | str, cache: str, window_s: float | None,
               epoch_batches: int | str | None = None) -> dict:
    """The invariants one measured row records, as the experiment's code path set them (never typed as a
    result): ``order`` a key of :data:`ORDERS` or :data:`NOT_APPLICABLE`; ``pixel_error`` the measured mean
    |diff| against the reference decode (0–255), :data:`NOT_CHECKED` or :data:`NOT_APPLICABLE`; ``cache``
    ``"warm"``/``"cold"`` or not applicable; ``window_s`` the timed window's wall seconds; ``epoch_batches``
    batches per loader epoch in the timed pass (0: one epoch holds the whole pass), not applicable, or None
    (left off the row). A value outside the convention raises ValueError naming the invariant."""
    if order not in ORDERS and order != NOT_APPLICABLE:
        raise ValueError(f"order {order!r}: give one of {sorted(ORDERS)} or {NOT_APPLICABLE!r}")
    if not (pixel_error in (NOT_CHECKED, NOT_APPLICABLE) or
            (isinstance(pixel_error, (int, float)) and not isinstance(pixel_error, bool)
             and math.isfinite(pixel_error) and pixel_error >= 0)):
        raise ValueError(f"pixel_error {pixel_error!r}: give a measured mean |diff| >= 0, "
                         f"{NOT_CHECKED!r} or {NOT_APPLICABLE!r}")
    if cache not in ("warm", "cold", NOT_APPLICABLE):
        raise ValueError(f"cache {cache!r}: give 'warm', 'cold' or {NOT_APPLICABLE!r}")
    out = dict(order=order, pixel_error=pixel_error if isinstance(pixel_error, str) else float(pixel_error),
               cache=cache)
    if window_s is not None:
        if not (isinstance(window_s, (int, float)) and math.isfinite(window_s) and window_s >= 0):
            raise ValueError(f"window_s {window_s!r}: give the timed window's seconds")
        out["window_s"] = float(window_s)
    if epoch_batches is not None:
        if epoch_batches != NOT_APPLICABLE and not (isinstance(epoch_batches, int) and epoch_batches >= 0):
            raise ValueError(f"epoch_batches {epoch_batches!r}: give a batch count >= 0 or {NOT_APPLICABLE!r}")
        out["epoch_batches"] = epoch_batches
    return out


def _same(va, vb) -> bool | None:
    """Whether two recorded values match where one or both are :data:`NOT_APPLICABLE`: both not applicable
    match, one not: they differ; None where neither is (compare the values themselves)."""
    if _na(va) or _na(vb):
        return _na(va) and _na(vb)
    return None


@dataclass(frozen=True)
class Side:
    """One side of a comparison, with what it shares (or not) with the other. ``None``: not recorded."""
    label: str
    order: str | None = None          # a key of ORDERS, or NOT_APPLICABLE (no sampler order)
    pixel_error: float | str | None = None  # mean |diff| against the reference decode, 0–255; 0.0 = bit-exact;
                                            # NOT_APPLICABLE: no pixels; NOT_CHECKED: read as not recorded
    batch_size: int | None = None
    workers: int | None = None
    cache: str | None = None          # "warm", "cold" or NOT_APPLICABLE
    timed_batches: int | None = None  # per timed window (repeat)
    window_s: float | None = None     # wall time of one timed window
    epoch_batches: int | str | None = None  # batches per loader epoch in the timed pass, 0: one epoch holds the whole
                                      # pass (compared where recorded)
    half_width: float | None = None   # the rate's 95% relative half-width where it was timed to a precision
    busy: str | None = None           # why this side's measurement was busy (other load); None: quiet or not known
    rate_kind: str | None = None      # "steady", "imprecise", "startup_inclusive"; None: not recorded
    repeats: int | None = None        # timed repeats behind the side's median
    recipe: str | None = None         # what the step trains: model and precision ("srcnn fp32"), where a step
                                      # runs; compared where either side records it (a recipe change is never
                                      # a loader's credit)
    pooled_s: float | None = None     # the sum of the repeats' windows (``repeats`` of the same setting)
    repeat_half_width: float | None = None  # the repeats' own 95% relative half-width of their mean (Student's t
                                      # over the per-repeat values: :func:`repeat_half_width`)

    def _one_window_short(self) -> list[str]:
        why = []
        precise = not _missing(self.half_width) and self.half_width <= MAX_HALF_WIDTH
        if self.timed_batches < MIN_TIMED_BATCHES and not precise:
            extra = "" if _missing(self.half_width) else f" (±{self.half_width:.0%} > ±{MAX_HALF_WIDTH:.0%})"
            why.append(f"{int(self.timed_batches)} batches < {MIN_TIMED_BATCHES}{extra}")
        if self.window_s < MIN_WINDOW_S:
            why.append(f"{_secs(self.window_s)} < {MIN_WINDOW_S:g} s")
        return why

    def pooled_short(self) -> list[str]:
        """Why the pooled window (the repeats' windows summed) cannot stand for one window: fewer than
        :data:`MIN_POOLED_REPEATS` repeats, a sum under :data:`MIN_WINDOW_S`, or the repeats' 95% relative
        half-width over :data:`MAX_HALF_WIDTH` (or not recorded). Empty: the pooled window gives a rate."""
        if _missing(self.pooled_s):
            return ["no pooled window recorded"]
        why = []
        reps = None if _missing(self.repeats) else int(self.repeats)
        if reps is None or reps < MIN_POOLED_REPEATS:
            why.append(f"{'not known how many' if reps is None else reps} repeats < {MIN_POOLED_REPEATS}")
        if self.pooled_s < MIN_WINDOW_S:
            why.append(f"{_secs(self.pooled_s)} in all < {MIN_WINDOW_S:g} s")
        if _missing(self.repeat_half_width):
            why.append("the repeats' spread not recorded")
        elif self.repeat_half_width > MAX_HALF_WIDTH:
            why.append(f"the repeats' mean ±{self.repeat_half_width:.1%} > ±{MAX_HALF_WIDTH:.0%}")
        return why

    def pooled(self) -> bool:
        """True where one window is too short but the pooled window gives the rate (:meth:`pooled_short`)."""
        return (not (_missing(self.timed_batches) or _missing(self.window_s)) and bool(self._one_window_short())
                and not self.pooled_short())

    def pooled_words(self) -> str:
        """How a pooled side was judged, for the verdict's text (a reader must see it): '' where it was not."""
        if not self.pooled():
            return ""
        return (f"{self.label}'s window pooled over {int(self.repeats)} repeats: {_secs(self.pooled_s)}, "
                f"its mean ±{self.repeat_half_width:.1%} (95%, t over the repeats)")

    def window_short(self) -> str | None:
        """Why this side's window cannot give a rate, or None: one window of at least :data:`MIN_WINDOW_S` and
        :data:`MIN_TIMED_BATCHES` batches (or timed to ±:data:`MAX_HALF_WIDTH`), or else the pooled window of
        its repeats (:meth:`pooled_short`)."""
        if _missing(self.timed_batches) or _missing(self.window_s):
            return f"{self.label}'s timed window was not recorded"
        why = self._one_window_short()
        if not why:
            return None
        if _missing(self.pooled_s):
            return f"{self.label} timed {' and '.join(why)}"
        pool = self.pooled_short()
        if not pool:
            return None
        return f"{self.label} timed {' and '.join(why)} (pooled: {', '.join(pool)})"


def _epochs(n: int | str) -> str:
    return n if _na(n) else "one epoch for the whole pass" if int(n) == 0 else f"{int(n)} batches per epoch"


def _pixels(x: float | str) -> str:
    return x if _na(x) else f"{x:.1f}"


def _secs(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.1f} s"


def differences(a: Side, b: Side, changes: tuple[str, ...] = (), varied: tuple[str, ...] = ()) -> list[str]:
    """Every invariant on which ``a`` and ``b`` differ or one of them is not recorded, in words; empty
    when the comparison is like for like. What the two records show differs comes first; an invariant a side
    did not record follows, as "not known" (never taken as equal). ``changes``: the invariants the comparison
    is about (``"workers"`` where the change under test is the worker count, as the doctor's advice is); only
    order, workers and cache may be named (batch size, pixels, epochs, the recipe and the window are never a
    loader's credit). ``varied``: the batch size, only where a claim is about the batch size itself (an epoch at
    batch 8 against one at 128), never a change credited to a loader or an advice."""
    bad = set(changes) - {"order", "workers", "cache"}
    if bad:
        raise ValueError(f"changes may name order, workers or cache, not {sorted(bad)}")
    if set(varied) - {"batch_size"}:
        raise ValueError(f"varied may name batch_size only, not {sorted(set(varied) - {'batch_size'})}")
    known: list[str] = []
    unknown: dict[str, list[str]] = {}   # invariant → the labels of the sides that did not record it

    def missing(label: str, va, vb) -> bool:
        gone = [s.label for s, v in ((a, va), (b, vb)) if _missing(v)]
        if gone:
            unknown.setdefault(label, gone)
        return bool(gone)

    for name, words in (("order", lambda s: ORDERS.get(s.order, s.order)), ("batch_size", None),
                        ("workers", None), ("cache", None)):
        if name in changes or name in varied:
            continue
        va, vb = getattr(a, name), getattr(b, name)
        label = name.replace("_", " ")
        if not missing(label, va, vb) and va != vb:
            fa, fb = (words(a), words(b)) if words else (va, vb)
            known.append(f"{label}: {fa} vs {fb}")
    if not (_missing(a.epoch_batches) and _missing(b.epoch_batches)):
        if not missing("epochs", a.epoch_batches, b.epoch_batches) and (
                _same(a.epoch_batches, b.epoch_batches) is False or a.epoch_batches != b.epoch_batches):
            known.append(f"epochs: {_epochs(a.epoch_batches)} vs {_epochs(b.epoch_batches)}")
    if not (_missing(a.recipe) and _missing(b.recipe)):
        if not missing("recipe", a.recipe, b.recipe) and a.recipe != b.recipe:
            known.append(f"recipe: {a.recipe} vs {b.recipe}")
    if not missing("pixels against the reference decode", a.pixel_error, b.pixel_error):
        same = _same(a.pixel_error, b.pixel_error)
        if same is False:
            known.append(f"pixels: {_pixels(a.pixel_error)} vs {_pixels(b.pixel_error)} (one side decodes no "
                         "pixels)")
        elif same is None and abs(a.pixel_error - b.pixel_error) > PIXEL_TOLERANCE:
            known.append(f"pixels: mean error {a.pixel_error:.1f} vs {b.pixel_error:.1f} against the reference "
                         f"decode (more than {PIXEL_TOLERANCE:g} apart)")
    for side in (a, b):
        if _missing(side.timed_batches) or _missing(side.window_s):
            unknown.setdefault("timed window", []).append(side.label)
        elif side.window_short():
            known.append(f"window: {side.window_short()}")
    return known + _not_known(unknown)


def _not_known(unknown: dict[str, list[str]]) -> list[str]:
    """The invariants a side did not record, one clause per group of sides: "not recorded for a and b: order,
    cache (not known)" — never taken as equal."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, labels in unknown.items():
        groups.setdefault(tuple(dict.fromkeys(labels)), []).append(name)
    return [f"not recorded for {' and '.join(labels)}: {', '.join(names)} (not known)"
            for labels, names in groups.items()]


def judged(verdict: str, a: Side, b: Side) -> str:
    """``verdict`` where the sides are like for like, else "not like for like (what differs)"."""
    diff = differences(a, b)
    return f"{NOT_LIKE} ({'; '.join(diff)})" if diff else verdict


def is_like(a: Side, b: Side) -> bool:
    return not differences(a, b)


# ---- the one judge: every ratio, gain or target that becomes a verdict goes through :func:`verdict` ----
MET, MISSED, WITHIN, NOT_FAIR = "met", "missed", "within spread", "not tested fairly"
WORDS = (MET, MISSED, WITHIN, NOT_LIKE, NOT_FAIR)


@dataclass(frozen=True)
class Verdict:
    """A judged comparison: ``word`` is one of :data:`WORDS`; ``why`` what differs (not like for like), why the
    test was not fair, or a note (the baseline already met the target); ``ratio`` with its interval."""
    word: str
    why: str = ""
    ratio: float | None = None
    lo: float | None = None
    hi: float | None = None
    target: float | None = None

    def __str__(self) -> str:
        return f"{self.word} ({self.why})" if self.why else self.word

    @property
    def judged(self) -> bool:
        """True where the comparison gave a verdict on the claim (met, missed, or within spread)."""
        return self.word in (MET, MISSED, WITHIN)


def _known_precision(side: Side) -> bool:
    """An imprecise rate (its window reached its cap before the asked precision) whose 95% half-width was still
    measured: judged on an interval widened by it (:func:`verdict`) where :func:`precision_problem` lets it."""
    return side.rate_kind == "imprecise" and not _missing(side.half_width) and math.isfinite(side.half_width)


def precision_problem(label: str, rate_kind: str | None, half_width: float | None, repeats: int | None) -> str:
    """THE rule for a rate not known to its precision, stated once: every verdict applies it (:func:`verdict`, so
    the targets, notebooks 13 and 16 and the tuner; a recorded verdict through :func:`reread`; the claims'
    REPEATS precondition, ``report.claims.fair.repeats_reason``). An imprecise rate (its cap came before its 95%
    interval closed to the asked ±:data:`MAX_HALF_WIDTH`) stands for its setting only with a measured half-width
    and :data:`MIN_REPEATS` repeats or more (then judged on an interval widened by its half-width); with fewer, or
    with none recorded, a verdict on it is "not tested fairly". '' where the rule holds."""
    if rate_kind != "imprecise":
        return ""
    hw = "" if _missing(half_width) or not math.isfinite(half_width) else f"±{half_width:.1%} > "
    n = "repeats not recorded" if _missing(repeats) else f"{int(repeats)} repeat{'s' if int(repeats) != 1 else ''}"
    if hw and not _missing(repeats) and repeats >= MIN_REPEATS:
        return ""
    return f"{label}'s rate is imprecise ({hw}±{MAX_HALF_WIDTH:.0%} asked; {n} < {MIN_REPEATS})"


def spread_of(side: Side) -> float | None:
    """The repeats' own 95% relative half-width where it is wider than the ±:data:`MAX_HALF_WIDTH` each window is
    timed to (audit54 N1: three steady repeats of 1,001 / 1,362 / 1,486 samples/s are ±48.7%): the judge widens
    the ratio's interval by it. None where not recorded, within the precision, or the side is pooled."""
    h = side.repeat_half_width
    return None if _missing(h) or h <= MAX_HALF_WIDTH or side.pooled() else float(h)


def _fair_problems(side: Side) -> list[str]:
    """Why one side cannot be judged fairly: busy, a rate not steady (imprecise: :func:`precision_problem`),
    or one measurement with no stated precision."""
    out = []
    if side.busy:
        out.append(f"{side.label} measured on a busy machine ({side.busy})")
    if side.rate_kind == "imprecise":
        out += [w for w in [precision_problem(side.label, side.rate_kind, side.half_width, side.repeats)] if w]
    elif side.rate_kind not in (None, "steady"):
        out.append(f"{side.label}'s rate is {side.rate_kind}")
    if not _missing(side.repeats) and side.repeats < 2 and _missing(side.half_width):
        out.append(f"{side.label} measured once, with no stated precision")
    return out


def _interval_words(lo, hi, tgt: float, word: str = "") -> str:
    """What an unjudged ratio's interval shows, for the reader ("its interval 0.559–0.761 excludes 1")."""
    if _missing(lo) or _missing(hi):
        return ""
    shows = "holds" if min(lo, hi) <= tgt <= max(lo, hi) else "excludes"
    return f"its interval {min(lo, hi):.3g}–{max(lo, hi):.3g} {shows} {tgt:g}" + (f" (recorded: {word})" if word else "")


def reread(kept: Verdict, a: Side, b: Side) -> Verdict:
    """A verdict a run recorded, read against the one rule for its two recorded sides' fairness (a generator never
    judges the ratio again): a judged word on a side the rule rejects (busy, imprecise with too few repeats, …)
    reads "not tested fairly (why; its interval …, recorded: word)"; every other verdict as recorded."""
    unfair = _fair_problems(a) + _fair_problems(b)
    if not kept.judged or not unfair:
        return kept
    tgt = 1.0 if kept.target is None else float(kept.target)
    why = "; ".join(unfair + [w for w in [_interval_words(kept.lo, kept.hi, tgt, kept.word)] if w])
    return Verdict(NOT_FAIR, why, kept.ratio, kept.lo, kept.hi, kept.target)


def verdict(a: Side, b: Side, ratio: float | None, *, target: float | None = None,
            lo: float | None = None, hi: float | None = None, lower_is_better: bool = False,
            baseline: float | None = None, check_sides: bool = True, changes: tuple[str, ...] = (),
            varied: tuple[str, ...] = ()) -> Verdict:
    """The one judge. ``ratio`` is ``a`` over ``b`` (the change over its start, ours over theirs), with its
    interval ``lo``–``hi`` from the two sides' own spread where known; ``target`` the ratio to reach (``None``:
    a gain over ×1.00, i.e. the two told apart). In order:

    1. the sides differ on a recorded invariant, or one did not record it: "not like for like (what differs)";
    2. a side was busy, unsteady (an imprecise rate short of :func:`precision_problem`'s rule), or measured once
       with no precision: "not tested fairly (why; what its interval shows)"; an imprecise rate with its
       half-width and enough repeats widens the interval by it;
    3. no ratio: "not tested fairly (no ratio measured)";
    4. the interval holds the target (or ×1.00 with no target): "within spread";
    5. else "met" or "missed" against the target (``lower_is_better`` flips it). ``baseline``: the start's own
       value against the same target: where it already met it, the verdict says so.
    ``check_sides=False`` only where the caller has already compared the sides by other means (say so);
    ``changes`` / ``varied``: the invariants the comparison is about (:func:`differences`)."""
    tgt = 1.0 if target is None else float(target)
    pooled = "; ".join(w for w in (a.pooled_words(), b.pooled_words()) if w)
    if check_sides:
        diff = differences(a, b, changes, varied)
        if diff:
            return Verdict(NOT_LIKE, "; ".join(diff), ratio, lo, hi, target)
    wide = [s.half_width for s in (a, b) if _known_precision(s)] + [h for h in map(spread_of, (a, b)) if h]
    if wide and not _missing(ratio):   # an imprecise side, or repeats spread apart: the interval holds it too (N1)
        h = math.hypot(*wide) if len(wide) > 1 else wide[0]
        lo = ratio * (1 - h) if _missing(lo) else min(lo, ratio * (1 - h))
        hi = ratio * (1 + h) if _missing(hi) else max(hi, ratio * (1 + h))
    unfair = list(dict.fromkeys(_fair_problems(a) + _fair_problems(b)))
    if unfair:   # an imprecise side: what the interval shows is said, never judged
        shown = [_interval_words(lo, hi, tgt)] if any("is imprecise (" in u for u in unfair) else []
        return Verdict(NOT_FAIR, "; ".join(unfair + [w for w in shown if w]), ratio, lo, hi, target)
    if _missing(ratio):
        return Verdict(NOT_FAIR, "no ratio measured", None, lo, hi, target)
    note = ""
    if baseline is not None and not _missing(baseline):
        if (baseline <= tgt) if lower_is_better else (baseline >= tgt):
            note = f"the baseline already met the target ({baseline:.3g})"
    join = lambda *xs: "; ".join(x for x in xs if x)  # noqa: E731
    if not (_missing(lo) or _missing(hi)) and min(lo, hi) <= tgt <= max(lo, hi):
        return Verdict(WITHIN, join(note or f"{min(lo, hi):.3g}–{max(lo, hi):.3g} holds {tgt:g}", pooled),
                       ratio, lo, hi, target)
    ok = ratio <= tgt if lower_is_better else ratio >= tgt
    return Verdict(MET if ok else MISSED, join(note, pooled), ratio, lo, hi, target)
