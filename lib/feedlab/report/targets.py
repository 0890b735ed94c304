"""The workbook's own targets, in one place, and the met/missed of a run against them.

A :class:`Target` is a bound on one number a notebook's run recorded (``results.json``,
read through :class:`feedlab.report.claims.core.Run`). :meth:`Target.lines` writes the sentence
the README shows for that run — the measured number, the bound as it stands here, and
"meets" / "misses" computed from the two — and nothing when the run lacks the number.
``feedlab.report.readme`` puts these lines in place of the notebook's own target lines (a
run made before a target moved printed the old bound), so no target or verdict in the
README is typed beside a measured number.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Callable

from feedlab.doctor.ranks import recorded_advice_line
from feedlab.like_for_like import MET, MISSED, NOT_LIKE, WITHIN, Side, Verdict, differences, reread
from feedlab.like_for_like import verdict as like_verdict
from feedlab.machines import pcie_theoretical_gbps
from feedlab.monitor import BUSY_SPEED  # noqa: F401  (re-exported: the doctor's probe under it: too busy)
from feedlab.peers.report import sides_of_record
from feedlab.report.claims import sides as sides_
from feedlab.report.claims.core import NoData, Run
from feedlab.report.claims.fair import steady_state
from feedlab.report.cure_judge import (  # noqa: F401  (re-exported: the cure's rules, judged in cure_judge)
    TARGET_DATA_WAIT,
    TARGET_GPU_IDLE,
    all_core_baseline,
    cure_differences,
    cure_step_line,
    cure_target_line,
    final_step,
    host_wait_note,
    step_side,
    target_verdict,
)
from feedlab.report.doctor_judge import (  # noqa: F401  (re-exported: 10's errors, judged in doctor_judge)
    DOCTOR_ERROR,
    doctor_errors,
    error_entries,
    error_verdict,
    reading_line,
    row_speed,
    too_busy,
)
from feedlab.report.stage_judge import collate_verdict, ladder_line, pcie_why, pinning_line
from feedlab.report.tune_judge import recorded_line

PCIE_FRACTION = 0.75        # 03: pinned host→device bandwidth ÷ the link's payload ceiling
SINGLE_OVER_CEILING = 0.9   # 05: best single-process loader ÷ the memcpy-into-batch-slot ceiling
LMDB_OVER_CEILING = 0.7     # 05: best batched LMDB reader ÷ that ceiling
BEST_OVER_BASELINE = 20.0   # 05: best loader ÷ the PNG + PIL + ToTensor + default_collate baseline
FAST_OVER_STOCK = 4.0       # 07: uint8 fast collate ÷ ToTensor + default_collate
TIMER_SHARE = 0.01          # 09: the phase timer's cost ÷ the smallest batch time
PEER_RATIO = 1.0            # 13: feedlab's recommended pipeline ÷ the best peer loader


def verdict(value: float, op: str, bound: float) -> str:
    ok = value >= bound if op == ">=" else value <= bound
    return "meets" if ok else "misses"


@dataclass(frozen=True)
class Target:
    id: str
    notebook: str
    op: str                                  # ">=" or "<="
    bound: float
    what: str                                # the bound in words, for the ledger of targets
    render: Callable[["Target", Run], list[str]]  # the generated lines ([] when the run lacks the number)
    replaces: str                            # regex of the notebook's own reading line(s) this stands for
    unit: str = ""                           # "×", "%": how the bound is written

    @property
    def bound_text(self) -> str:
        sign = "≥" if self.op == ">=" else "≤"
        b = f"{100 * self.bound:g}" if self.unit == "%" else f"{self.bound:g}"
        return f"{sign} {b}{self.unit}"

    def met(self, value: float) -> bool:
        return verdict(value, self.op, self.bound) == "meets"

    def lines(self, run: Run) -> list[str]:
        try:
            return self.render(self, run)
        except (NoData, KeyError, TypeError, ValueError, ZeroDivisionError):
            return []


def _f(x) -> float:
    v = float(x)
    if v != v:
        raise ValueError("not measured")
    return v


# ---------------------------------------------------------------- the lines
def pcie_ceiling(link: dict) -> tuple[float, str]:
    """The payload ceiling of the link the run read (gen and width from nvidia-smi / NVML)."""
    gen = (link or {}).get("gen_max") or (link or {}).get("gen_current")
    width = (link or {}).get("width_max") or (link or {}).get("width_current")
    if not gen or not width:
        raise NoData("the run could not read the PCIe link generation and width (nvidia-smi); "
                     "no ceiling is assumed")
    try:
        return pcie_theoretical_gbps(int(gen), int(width)), f"Gen{gen} x{width}"
    except ValueError as e:
        raise NoData(f"PCIe link read as Gen{gen} x{width}: {e}") from None


def _pcie(t: Target, run: Run) -> list[str]:
    pinned = _f(run.get("h2d_pinned_gbps"))
    ceiling, basis = pcie_ceiling(run.payload.get("pcie") or {})
    r = pinned / ceiling
    why = pcie_why(run)   # the pinned side by the one judge's window rule (audit57 N17)
    word = verdict(r, t.op, t.bound) if why is None else f"measured, not judged ({why}) against"
    return [f"Pinned ÷ PCIe {basis} theoretical ({ceiling:.1f} GB/s) = {r:.2f}: {word} the {t.bound_text} target."]


def _ratio_line(label: str, key: str, what_key: str | None = None, fmt: str = "{:.2f}", of_key: str | None = None,
                settings: Callable[[Run], list[dict]] | None = None,
                sides: Callable[[Run, float], Verdict] | None = None):
    """``label`` may hold ``{who}`` (the payload's ``what_key``: the loader that made the number) and
    ``{of}`` (the payload's ``of_key``: the rate it is divided by, samples/s). ``settings``: the
    rows the ratio's rates come from; where the run's table shows one of them not steady, the
    ratio is shown, not judged (:func:`unsteady`). ``sides``: where the ratio compares two loaders, the one
    judge on their recorded invariants (:mod:`feedlab.report.claims.sides`); a ratio it does not judge is shown,
    never met or missed."""
    def render(t: Target, run: Run) -> list[str]:
        r = _f(run.get(key))
        who = f" ({run.payload.get(what_key)})" if what_key and run.payload.get(what_key) else ""
        of = f" ({_f(run.payload[of_key]):,.0f} samples/s)" if of_key and run.payload.get(of_key) else ""
        if sides is not None:
            v = sides(run, t.bound)
            if not v.judged:
                return [f"{label.format(who=who, of=of)} = {fmt.format(r)}: {v} against the {t.bound_text} "
                        "target; measured, not judged."]
            word = {"met": "meets", "missed": "misses"}.get(v.word)
            if word is None:
                return [f"{label.format(who=who, of=of)} = {fmt.format(r)}: {v} of the {t.bound_text} target."]
            return [f"{label.format(who=who, of=of)} = {fmt.format(r)}: {word} the {t.bound_text} target"
                    + (f" ({v.why})" if v.why else "") + "."]
        why = unsteady(run, settings(run)) if settings else []
        if why:
            return [f"{label.format(who=who, of=of)} = {fmt.format(r)}: not tested fairly here against the "
                    f"{t.bound_text} target (start-up-bound: {', '.join(why)} per epoch, where a steady rate needs "
                    f"the warm-up + {MIN_TIMED} timed batches); measured, not judged."]
        return [f"{label.format(who=who, of=of)} = {fmt.format(r)}: {verdict(r, t.op, t.bound)} the "
                f"{t.bound_text} target."]
    return render


MIN_TIMED = 50  # feedlab.pipeline.MIN_TIMED_BATCHES (checked by a test; this floor imports no pipeline)


def unsteady(run: Run, settings: list[dict]) -> list[str]:
    """What the run's table shows of each setting that was not timed steady (``claims.fair``: its
    ``rate_kind``, else batches per epoch against the warm-up + the timed batches a steady rate
    needs); empty when every one was steady or the table does not say (a payload alone)."""
    out = []
    for setting in settings:
        ok, how = steady_state(run, setting)
        if ok is False:
            out.append(how)
    return out


def _storage_read(*payload_keys: str, lmdb_batched: bool = False):
    """05's settings behind a ratio: the read-mode rows of the payload's named variants (``best_x_variant``;
    a run before 2026-11-24 named the variant in ``best_x`` itself), and with ``lmdb_batched`` the
    batched LMDB readers."""
    def variant_of(run: Run, k: str) -> str | None:
        v = run.payload.get(k) or run.payload.get(k.removesuffix("_variant"))
        return v if isinstance(v, str) and "/" in v and " " not in v else None

    def settings(run: Run) -> list[dict]:
        out = [{"variant": v, "mode": "read"} for v in (variant_of(run, k) for k in payload_keys) if v]
        if lmdb_batched:
            out += [{"format": f, "loader": "batched", "mode": "read"} for f in ("lmdb", "lmdb_raw")]
        return out
    return settings


def _fast(t: Target, run: Run) -> list[str]:
    """07's fast collates over the stock one, each by the one judge on its rows (:func:`stage_judge.collate_verdict`):
    "meets"/"misses" only where it judged both sides, else measured, not judged, with why (audit 45 V7)."""
    sp = run.get("speedup")
    parts = [f"{name} {_f(sp[key]):.1f}× ({_judged_word(lambda: collate_verdict(run, key, _f(sp[key]), t.bound))})"
             for name, key in (("NCHW", "fast_nchw"), ("channels_last", "fast_channels_last")) if key in sp]
    return [f"Fast collate ÷ stock, target {t.bound_text}: " + ", ".join(parts) + "."] if parts else []


def _judged_word(judge: Callable[[], Verdict]) -> str:
    try:
        v = judge()
    except NoData as e:
        return f"measured, not judged: {e}"
    return {MET: "meets", MISSED: "misses", WITHIN: f"not told apart from the target: {v}"}.get(v.word) or \
        f"measured, not judged: {v}"


def _doctor(t: Target, run: Run) -> list[str]:
    """10's findings target by the one judge's reading of each setting (``doctor_judge``): the docs' words."""
    _, every = doctor_errors(run.payload)
    if not every:
        return []
    word, why = error_verdict(error_entries(run.payload, run=run)[1], t.bound)
    return [f"Prediction error over {len(every)} measured settings: median {100 * statistics.median(every):.0f}%, "
            f"largest {100 * max(every):.0f}%: {word} the ±{100 * t.bound:.0f}% target{f' ({why})' if why else ''}."]


_TIMER = re.compile(r"(?<![\d.])([\d.]+)% of the smallest batch time timed here \(([^;]+); target [^)]*\)")
_PEER = re.compile(r"ratio ([\d.]+) (\(from the (?:IQRs|spreads) [^)]*\)); target (?:[^.]|\.\d)*\.?")
_PEER_COLD = re.compile(r"Cold page cache: ratio ([\d.]+) (\(from the (?:IQRs|spreads) [^)]*\)): (?:[^.]|\.\d)*\.")


def timer_line(line: str, t: Target, run: Run | None = None) -> str:
    """09's timer line with its target clause computed from the share it printed."""
    def sub(m):
        share = float(m.group(1)) / 100
        return (f"{m.group(1)}% of the smallest batch time timed here ({m.group(2)}; "
                f"{verdict(share, t.op, t.bound)} the {t.bound_text} target)")
    return _TIMER.sub(sub, line)


_RECORDED = {"met": MET, "not met": MISSED, "within this run's spread of 1.0": WITHIN}


def peer_verdict(payload: dict, kind: str, cold: bool = False, printed: tuple | None = None) -> Verdict | None:
    """13's ratio on ``kind`` (feedlab's best ÷ the best peer; ``cold``: with the page cache dropped), never judged
    again where the notebook recorded its verdict (no generator recomputes one):

    1. the one judge's verdict the record keeps (``results.json`` → ``verdicts`` → ``kind``, and its ``cold``),
       read against the one rule for its recorded sides (:func:`feedlab.like_for_like.reread`);
    2. an older record's printed word (``ratios`` → ``kind`` → ``verdict`` / ``cold_verdict``), kept where its two
       recorded sides are like for like (:func:`feedlab.peers.report.sides_of_record`), else what differs;
    3. no recorded word: the one judge on the recorded sides and interval (``printed``: ``(ratio, low, high)``
       as a line printed them).
    None where the run recorded no such ratio."""
    r = (payload.get("ratios") or {}).get(kind) or {}
    pre = "cold_" if cold else ""
    ratio = r.get(f"{pre}ratio")
    if not isinstance(ratio, (int, float)):
        return None
    if cold:
        recorded = r.get("cold_sides") or []
        sides = tuple(Side(**{k: v for k, v in d.items() if k in Side.__dataclass_fields__}) for d in recorded)
        sides = sides if len(sides) == 2 else None
    else:
        sides = sides_of_record(payload, kind)
    kept = ((payload.get("verdicts") or {}).get(kind) or {})
    kept = kept.get("cold") if cold else kept
    if isinstance(kept, dict) and kept.get("word"):
        v = Verdict(kept["word"], kept.get("why") or "", kept.get("ratio"), kept.get("lo"), kept.get("hi"),
                    kept.get("target"))
        return reread(v, *sides) if sides else v
    lo, hi = (printed[1], printed[2]) if printed else (r.get(f"{pre}ratio_low"), r.get(f"{pre}ratio_high"))
    ratio = printed[0] if printed else ratio
    if not sides:
        return Verdict(NOT_LIKE, "its sides were not recorded", ratio, target=PEER_RATIO)
    word = str(r.get(f"{pre}verdict") or "")
    word = _RECORDED.get(word, MET if word.startswith("met") else None)
    if word is not None:
        diff = differences(*sides)
        if diff:
            return Verdict(NOT_LIKE, "; ".join(diff), ratio, lo, hi, PEER_RATIO)
        why = f"{min(lo, hi):.3g}–{max(lo, hi):.3g} holds 1" if word == WITHIN and None not in (lo, hi) else ""
        return Verdict(word, why, ratio, lo, hi, PEER_RATIO)
    return like_verdict(*sides, float(ratio), target=PEER_RATIO, lo=lo, hi=hi)


def peer_words(v: Verdict) -> str:
    """A peer verdict as the README and docs/CLAIMS.md write it."""
    bound = f"≥ {PEER_RATIO:g}"
    if v.word == MET:
        return f"meets the {bound} target"
    if v.word == MISSED:
        return f"misses the {bound} target"
    if v.word == WITHIN:
        return f"within this run's spread of the {bound} target ({v.why})"
    return str(v)


def peer_line(line: str, t: Target, run: Run | None = None) -> str:
    """13's per-data-set line (``sr: ...``) with its target clause from the one judge on the run's recorded
    sides and interval (:func:`peer_verdict`), as the notebook judged it."""
    kind = line.split(":", 1)[0]

    def sub(m):
        bounds = re.findall(r"[\d.]+", m.group(2))
        printed = (float(m.group(1)), *(float(b) for b in bounds[:2])) if len(bounds) >= 2 else None
        v = peer_verdict(run.payload, kind, printed=printed) if run is not None else None
        clause = peer_words(v) if v is not None else f"{NOT_LIKE} (its sides were not recorded)"
        return f"ratio {m.group(1)} {m.group(2)}; {clause}."

    def cold(m):
        bounds = re.findall(r"[\d.]+", m.group(2))
        printed = (float(m.group(1)), *(float(b) for b in bounds[:2])) if len(bounds) >= 2 else None
        v = peer_verdict(run.payload, kind, cold=True, printed=printed) if run is not None else None
        clause = peer_words(v) if v is not None else f"{NOT_LIKE} (its sides were not recorded)"
        return f"Cold page cache: ratio {m.group(1)} {m.group(2)}: {clause}."
    return _PEER_COLD.sub(cold, _PEER.sub(sub, line))


TARGETS: tuple[Target, ...] = (
    Target("h2d-over-pcie", "03_pinned_memory_by_input_size", ">=", PCIE_FRACTION,
           "pinned host→device bandwidth ÷ the PCIe link's payload ceiling", _pcie, r"^Pinned ÷ PCIe"),
    Target("single-over-ceiling", "05_storage_formats", ">=", SINGLE_OVER_CEILING,
           "best single-process loader ÷ the memcpy-into-batch-slot ceiling",
           _ratio_line("Target 1, best single-process loader{who} ÷ ceiling{of}", "ratio_best_single_to_ceiling",
                       "best_single_process", of_key="ceiling_samples_per_s",
                       settings=_storage_read("best_single_process_variant"), sides=sides_.single_over_ceiling),
           r"^Target 1, "),
    Target("lmdb-over-ceiling", "05_storage_formats", ">=", LMDB_OVER_CEILING,
           "best batched LMDB reader ÷ the memcpy-into-batch-slot ceiling",
           _ratio_line("Target 1b, best batched LMDB reader ÷ ceiling{of}", "ratio_best_lmdb_batched_to_ceiling",
                       of_key="ceiling_samples_per_s", settings=_storage_read(lmdb_batched=True),
                       sides=sides_.lmdb_over_ceiling),
           r"^Target 1b, "),
    Target("best-over-baseline", "05_storage_formats", ">=", BEST_OVER_BASELINE,
           "best loader ÷ the PNG + PIL + ToTensor + default_collate baseline",
           _ratio_line("Target 2, best loader{who} ÷ baseline (PNG+PIL+ToTensor+default_collate, a DataLoader with 2 "
                       "workers: a whole-pipeline comparison){of}",
                       "ratio_best_to_baseline", "best_read", "{:.1f}×", "baseline_samples_per_s",
                       settings=_storage_read("best_read_variant"), sides=sides_.storage_best_over_baseline),
           r"^Target 2, ", "×"),
    Target("fast-over-stock", "07_totensor_vs_fast_collate", ">=", FAST_OVER_STOCK,
           "uint8 fast collate ÷ ToTensor + default_collate", _fast, r"^Target fast ", "×"),
    Target("doctor-error", "10_doctor", "<=", DOCTOR_ERROR,
           "largest |predicted ÷ measured − 1| over the settings measured", _doctor, r"^Prediction error over "),
    Target("cure-gpu-idle", "15_the_cure", "<=", TARGET_GPU_IDLE,
           "the GPU's idle share of the steady window on the doctor's pipeline, its steps like for like "
           "(the host's data wait where no GPU is measured)", lambda t, run: _cure(t, run), r"^target with the doctor's pipeline", "%"),
)
# targets whose line the notebook prints with more than the one number: its clause is recomputed in place
TIMER = Target("timer-share", "09_batch_size_breakdown", "<=", TIMER_SHARE,
               "the phase timer's cost ÷ the smallest batch time", lambda t, run: [], _TIMER.pattern, "%")
PEER = Target("feedlab-over-peer", "13_peer_loaders", ">=", PEER_RATIO,
              "feedlab's recommended pipeline ÷ the best peer loader", lambda t, run: [], _PEER.pattern)
CURE = next(t for t in TARGETS if t.id == "cure-gpu-idle")


HANDOVER_RATIO = 5.0   # 05: LMDB + fast collate ÷ PNG + ToTensor, both with workers (experiments.handover)
_HANDOVER = re.compile(r"^(Target, LMDB \+ fast collate .* = [\d.]+×): .*? (— a whole-pipeline comparison.*)$")


def handover_clause(recorded: str | None) -> str:
    """05's hand-over target clause from the one judge's recorded word (a run before it: not judged)."""
    words = recorded or "not tested fairly (no verdict of the one judge recorded)"
    bound = f"≥ {HANDOVER_RATIO:g}× target"
    if words.startswith("met"):
        return f"meets the {bound}" + words[len("met"):]
    if words.startswith("missed"):
        return f"misses the {bound}" + words[len("missed"):]
    return f"{words} against the {bound}; measured, not judged"


def handover_line(line: str, t: Target | None = None, run: Run | None = None) -> str:
    """05's printed hand-over target line, judged again by the one judge on the record's ``handover_rows``."""
    m = _HANDOVER.match(line)
    if not m or run is None or not run.payload.get("handover_rows"):
        return line
    h = run.payload.get("handover") or {}
    v = sides_.handover_verdict(run.payload["handover_rows"], h.get("lmdb_best", ""), HANDOVER_RATIO,
                                sides_.run_busy(run))
    return f"{m.group(1)}: {handover_clause(str(v))} {m.group(2)}"


_OVERALL = re.compile(r"^Overall \(kept steps\): measured ×([\d.]+) over the start, against ×([\d.]+) predicted "
                      r"\((\d+)% of the promised gain delivered\)\.?(.*)$")


def advice_line(line: str, t: Target, run: Run | None = None) -> str:
    """10's "Overall (kept steps)" line with the one judge's word on the advice's gain (start to last kept step,
    :func:`feedlab.report.claims.sides.advice_verdict`): a batch size or recipe change is measured, never credited."""
    m = _OVERALL.match(line)
    if not m or run is None:
        return line
    try:
        v = sides_.advice_verdict(run)
    except NoData:
        return line
    head = f"Overall (kept steps): measured ×{m.group(1)} over the start, against ×{m.group(2)} predicted"
    if not v.judged:
        return f"{head}: {v}; measured, not credited."
    return f"{head} ({m.group(3)}% of the promised gain delivered; {v})."


ADVICE = Target("advice-gain", "10_doctor", ">=", 1.0, "the doctor's advice, start to last kept step, told apart "
                "from ×1 like for like", lambda t, run: [], _OVERALL.pattern, "×")
HANDOVER = Target("lmdb-fast-over-png", "05_storage_formats", ">=", HANDOVER_RATIO,
                  "LMDB + fast collate ÷ PNG + ToTensor, both with workers (the hand-over)", lambda t, run: [],
                  _HANDOVER.pattern, "×")
TUNE = Target("tune-targets", "16_tune", ">=", 1.0, "the tuner's targets, each scenario read by the one rule",
              lambda t, run: [], sides_.TUNE_TARGET.pattern)
CLAUSES = {HANDOVER.notebook: (HANDOVER, handover_line),
           ADVICE.notebook: (ADVICE, lambda line, t, run: reading_line(advice_line(line, t, run), run)), TIMER.notebook: (TIMER, timer_line), PEER.notebook: (PEER, peer_line), CURE.notebook: (CURE, cure_step_line),
           TUNE.notebook: (TUNE, lambda line, t, run: sides_.tune_target_line(recorded_line(line, run), run)),
           "03_pinned_memory_by_input_size": (None, lambda line, t, run: pinning_line(line, run)),
           "01_worker_scaling": (None, lambda line, t, run: ladder_line(line, run)),
           "14_ranks_and_remote_decode": (None, lambda line, t, run: _advice_14(line, run))}


def _advice_14(line: str, run: Run) -> str:
    try:
        return recorded_advice_line(line, run.frame)
    except NoData:
        return line


def for_notebook(notebook: str) -> tuple[Target, ...]:
    return tuple(t for t in TARGETS if t.notebook == notebook)


def rewrite_reading(notebook: str, reading: list[str], run: Run) -> list[str]:
    """A notebook's reading lines with every target line generated here: the notebook's own
    (matched by each target's ``replaces``) taken out, the generated ones put where the first
    stood (or appended), and 09's timer clause recomputed."""
    out = list(reading)
    if notebook in CLAUSES:
        t, fn = CLAUSES[notebook]
        out = [fn(x, t, run) for x in out]
    for t in for_notebook(notebook):
        pat = re.compile(t.replaces)
        where = next((i for i, x in enumerate(out) if pat.search(x)), None)
        out = [x for x in out if not pat.search(x)]
        new = t.lines(run)
        if where is None:
            out.extend(new)
        else:
            out[where:where] = new
    return out


def _cure(t: Target, run: Run) -> list[str]:
    try:
        steps = run.get("steps")
    except NoData:
        return []
    line = cure_target_line(steps, bool(run.payload.get("cuda")), run.payload.get("precision"),
                            sides_.run_busy(run))
    return [line] if line else []
