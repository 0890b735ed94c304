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

import math
import re
import statistics
from dataclasses import dataclass
from typing import Callable

from feedlab.like_for_like import NOT_LIKE, Side, differences, judged
from feedlab.machines import pcie_theoretical_gbps
from feedlab.monitor import BUSY_SPEED, process_speed  # BUSY_SPEED (10): the doctor's probe under it: too busy
from feedlab.peers.report import sides_of_record
from feedlab.report.claims.core import NoData, Run
from feedlab.report.claims.fair import steady_state

TARGET_GPU_IDLE = 0.05    # the GPU idle ≤ 5% of the steady window (CUDA events), with the doctor's pipeline
TARGET_DATA_WAIT = 0.05   # the host's wait for the next batch ≤ 5% of the loop: shown beside it (host time),
                          # and the target itself where there is no GPU to keep busy
PCIE_FRACTION = 0.75        # 03: pinned host→device bandwidth ÷ the link's payload ceiling
SINGLE_OVER_CEILING = 0.9   # 05: best single-process loader ÷ the memcpy-into-batch-slot ceiling
LMDB_OVER_CEILING = 0.7     # 05: best batched LMDB reader ÷ that ceiling
BEST_OVER_BASELINE = 20.0   # 05: best loader ÷ the PNG + PIL + ToTensor + default_collate baseline
FAST_OVER_STOCK = 4.0       # 07: uint8 fast collate ÷ ToTensor + default_collate
TIMER_SHARE = 0.01          # 09: the phase timer's cost ÷ the smallest batch time
DOCTOR_ERROR = 0.20         # 10: |predicted ÷ measured − 1| of every setting measured
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
    return [f"Pinned ÷ PCIe {basis} theoretical ({ceiling:.1f} GB/s) = {r:.2f}: {verdict(r, t.op, t.bound)} "
            f"the {t.bound_text} target."]


def _ratio_line(label: str, key: str, what_key: str | None = None, fmt: str = "{:.2f}", of_key: str | None = None,
                settings: Callable[[Run], list[dict]] | None = None):
    """``label`` may hold ``{who}`` (the payload's ``what_key``: the loader that made the number) and
    ``{of}`` (the payload's ``of_key``: the rate it is divided by, samples/s). ``settings``: the
    rows the ratio's rates come from; where the run's table shows one of them not steady, the
    ratio is shown, not judged (:func:`unsteady`)."""
    def render(t: Target, run: Run) -> list[str]:
        r = _f(run.get(key))
        who = f" ({run.payload.get(what_key)})" if what_key and run.payload.get(what_key) else ""
        of = f" ({_f(run.payload[of_key]):,.0f} samples/s)" if of_key and run.payload.get(of_key) else ""
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
    sp = run.get("speedup")
    parts = [f"{name} {_f(sp[key]):.1f}× ({verdict(_f(sp[key]), t.op, t.bound)})"
             for name, key in (("NCHW", "fast_nchw"), ("channels_last", "fast_channels_last")) if key in sp]
    return [f"Fast collate ÷ stock, target {t.bound_text}: " + ", ".join(parts) + "."] if parts else []


def doctor_errors(payload: dict) -> tuple[list[float], list[float]]:
    """``(the doctor's own worker counts, every setting the run measured)``: |predicted ÷ measured − 1|
    of notebook 10's ``end_to_end`` rows, and of those plus its steps."""
    own = [abs(_f(e["predicted_samples_per_s"]) / _f(e["samples_per_s"]) - 1)
           for e in payload.get("end_to_end") or [] if e.get("samples_per_s")
           and not too_busy(row_speed(e, payload.get("cores")))]
    steps = [abs(_f(s["predicted"]) / _f(s["measured"]) - 1) for s in payload.get("steps") or []
             if s.get("predicted") and s.get("measured") and not too_busy(s.get("speed"))]
    return own, own + steps


def row_speed(row: dict, cores: int | None) -> float | None:
    """One process's share of a core beside a worker count of notebook 10's diagnosis: the CPU-s/s its
    ``num_workers + 1`` busy processes got (``capacity_now``) over what an idle machine gives them
    (``min(k, cores)``), and what other programs left them during the passes (``pass_speed``), whichever is lower."""
    return process_speed(row.get("capacity_now"), int(row.get("num_workers", 0)) + 1, cores, row.get("pass_speed"))


def too_busy(speed) -> bool:
    """The doctor's own CPU probe, beside a measurement, found another program taking the cores."""
    return speed is not None and math.isfinite(speed) and speed < BUSY_SPEED


def _doctor(t: Target, run: Run) -> list[str]:
    _, every = doctor_errors(run.payload)
    if not every:
        return []
    worst = max(every)
    return [f"Prediction error over {len(every)} measured settings: median {100 * statistics.median(every):.0f}%, "
            f"largest {100 * worst:.0f}%: {verdict(worst, t.op, t.bound)} the ±{100 * t.bound:.0f}% target."]


_TIMER = re.compile(r"(?<![\d.])([\d.]+)% of the smallest batch time timed here \(([^;]+); target [^)]*\)")
_PEER = re.compile(r"ratio ([\d.]+) (\(from the (?:IQRs|spreads) [^)]*\)); target .*$")


def timer_line(line: str, t: Target, run: Run | None = None) -> str:
    """09's timer line with its target clause computed from the share it printed."""
    def sub(m):
        share = float(m.group(1)) / 100
        return (f"{m.group(1)}% of the smallest batch time timed here ({m.group(2)}; "
                f"{verdict(share, t.op, t.bound)} the {t.bound_text} target)")
    return _TIMER.sub(sub, line)


def peer_line(line: str, t: Target, run: Run | None = None) -> str:
    """13's per-data-set line (``sr: ...``) with its target clause computed from the ratio it printed, and
    judged only where the run's two sides are like for like (:func:`feedlab.peers.report.sides_of_record`)."""
    kind = line.split(":", 1)[0]
    sides = sides_of_record(run.payload, kind) if run is not None else None

    def sub(m):
        r = float(m.group(1))
        clause = f"{verdict(r, t.op, t.bound)} the {t.bound_text} target"
        clause = judged(clause, *sides) if sides else f"{NOT_LIKE} (its sides were not recorded)"
        return f"ratio {m.group(1)} {m.group(2)}; {clause}."
    return _PEER.sub(sub, line)


TARGETS: tuple[Target, ...] = (
    Target("h2d-over-pcie", "03_pinned_memory_by_input_size", ">=", PCIE_FRACTION,
           "pinned host→device bandwidth ÷ the PCIe link's payload ceiling", _pcie, r"^Pinned ÷ PCIe"),
    Target("single-over-ceiling", "05_storage_formats", ">=", SINGLE_OVER_CEILING,
           "best single-process loader ÷ the memcpy-into-batch-slot ceiling",
           _ratio_line("Target 1, best single-process loader{who} ÷ ceiling{of}", "ratio_best_single_to_ceiling",
                       "best_single_process", of_key="ceiling_samples_per_s",
                       settings=_storage_read("best_single_process_variant")), r"^Target 1, "),
    Target("lmdb-over-ceiling", "05_storage_formats", ">=", LMDB_OVER_CEILING,
           "best batched LMDB reader ÷ the memcpy-into-batch-slot ceiling",
           _ratio_line("Target 1b, best batched LMDB reader ÷ ceiling{of}", "ratio_best_lmdb_batched_to_ceiling",
                       of_key="ceiling_samples_per_s", settings=_storage_read(lmdb_batched=True)),
           r"^Target 1b, "),
    Target("best-over-baseline", "05_storage_formats", ">=", BEST_OVER_BASELINE,
           "best loader ÷ the PNG + PIL + ToTensor + default_collate baseline",
           _ratio_line("Target 2, best loader{who} ÷ baseline (PNG+PIL+ToTensor+default_collate, a DataLoader with 2 "
                       "workers: a whole-pipeline comparison){of}",
                       "ratio_best_to_baseline", "best_read", "{:.1f}×", "baseline_samples_per_s",
                       settings=_storage_read("best_read_variant")), r"^Target 2, ", "×"),
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


def cure_step_line(line: str, t: Target, run: Run | None = None) -> str:
    """A cure step's line as an older record printed it, completed by today's rules: an advised step
    credited from the first baseline also gets its credit from the all-core baseline (going from 2 workers
    to every core is the machine's cores, not the advice), and a step whose batch size or epochs differ from
    that baseline says it is not like for like with it."""
    if run is None:
        return line
    try:
        steps = run.get("steps")
    except NoData:
        return line
    label = line.split(":", 1)[0]
    step = next((s for s in steps if s.get("label") == label), None)
    base = all_core_baseline(steps)
    if step is None or base is None or step is base or step.get("kind") == "baseline":
        return line
    if "the first baseline" in line and "the all-core baseline" not in line and base.get("samples_per_s"):
        line += f"; ×{step['samples_per_s'] / base['samples_per_s']:.2f} the all-core baseline ({base['label']})"
    diff = [d for d in differences(step_side(base), step_side(step)) if d.startswith(("batch size", "epochs"))]
    if diff and NOT_LIKE not in line:
        line += f"; {NOT_LIKE} with the all-core baseline ({'; '.join(diff)})"
    return line


CLAUSES = {TIMER.notebook: (TIMER, timer_line), PEER.notebook: (PEER, peer_line), CURE.notebook: (CURE, cure_step_line)}


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


# ---------------------------------------------------------------- the cure (15_the_cure, issues #27, #32)


def final_step(steps: list[dict]) -> dict | None:
    """The last kept step: the doctor's pipeline as the cure leaves it."""
    kept = [s for s in steps if s.get("kept", True)]
    return kept[-1] if kept else None


def all_core_baseline(steps: list[dict]) -> dict | None:
    """The baseline at the most workers: where the doctor's changes are credited from (going from 2
    workers to every core is the machine's cores, not the doctor's insight)."""
    base = [s for s in steps if s.get("kind") == "baseline"]
    return max(base, key=lambda s: (s.get("config") or {}).get("num_workers", 0)) if base else None


def step_side(s: dict):
    """A cure step as one side of a comparison: batch size, the epochs its timed pass ran in (a loader
    kind that takes no sampler cycles epochs of ``epoch_batches``), the steady window (its shortest pass's
    batches and seconds, its widest precision, where the record has them). Order and pixels
    are the same data set's (global shuffle, same decode) on every step."""
    cfg = s.get("config") or {}
    return Side(s.get("label", "?"), order="global", pixel_error=0.0, batch_size=cfg.get("batch_size"),
                cache="warm", epoch_batches=s.get("epoch_batches"), timed_batches=s.get("timed_batches"),
                window_s=s.get("window_s"), half_width=s.get("half_width"))


def cure_differences(steps: list[dict]) -> list[str]:
    """What makes the cure's credit not like for like: the doctor's pipeline at another batch size
    than the all-core baseline (a recipe change, not a loader one), a window too short for a rate (where
    recorded), or a step measured over other epochs than the step it is compared with. Workers may differ:
    they are what the advice changes."""
    base, last = all_core_baseline(steps), final_step(steps)
    out = []
    if base and last and base is not last:
        # the window is judged where the record has it (a precision-timed cure; older records ran 50 batches)
        kinds = ("batch size", "window") if all(s.get("window_s") is not None for s in (base, last)) else ("batch size",)
        out += [d for d in differences(step_side(base), step_side(last)) if d.startswith(kinds)]
    by_label = {s["label"]: s for s in steps}
    for s in steps:
        against = by_label.get(s.get("against") or "")
        if against is not None:
            out += [f"{d} ({s['label']} against {against['label']})"
                    for d in differences(step_side(against), step_side(s)) if d.startswith("epochs")]
    return out


def target_verdict(steps: list[dict], cuda: bool, wait_target: float = TARGET_DATA_WAIT,
                   idle_target: float = TARGET_GPU_IDLE) -> dict:
    """The cure's target judged on the doctor's pipeline: the GPU's idle share of the steady window
    (``met``/``missed``, or ``not measured here`` with the reason: no CUDA device), and the host's data
    wait beside it; ``not_like_for_like`` lists what differs between the steps it is credited over."""
    last = final_step(steps)
    if last is None:
        return {"data_wait": "not measured", "gpu_idle_verdict": "not measured", "reason": "no step was measured"}
    busy = last.get("gpu_busy")
    busy = math.nan if busy is None else float(busy)   # a results.json stores NaN as null (strict JSON)
    out = {"label": last["label"], "data_wait_share": last["data_wait_share"], "gpu_busy": busy,
           "data_wait": "met" if last["data_wait_share"] <= wait_target else "missed",
           "not_like_for_like": cure_differences(steps)}
    if not cuda or math.isnan(busy):
        out["gpu_idle_verdict"] = "not measured here"
        out["reason"] = "no CUDA device: GPU busy needs CUDA events around the step"
    else:
        out["gpu_idle"] = 1.0 - busy
        out["gpu_idle_verdict"] = "met" if out["gpu_idle"] <= idle_target else "missed"
    return out


def cure_target_line(steps: list[dict], cuda: bool) -> str:
    """The cure's target line, judged only where its steps are like for like (:func:`cure_differences`):
    the GPU's idle share of the steady window (the host's data wait beside it), or the host's wait where
    no GPU is measured; "" where no step was measured."""
    v = target_verdict(steps, cuda)
    if "label" not in v:
        return ""
    idle = (f"GPU idle {100 * v['gpu_idle']:.0f}% of the steady window (target ≤ {100 * TARGET_GPU_IDLE:.0f}%): "
            f"{v['gpu_idle_verdict']}; host data wait {100 * v['data_wait_share']:.1f}% of the loop beside it"
            if v["gpu_idle_verdict"] != "not measured here" else
            f"GPU idle: not measured here ({v['reason']}); host data wait {100 * v['data_wait_share']:.1f}% "
            f"(target ≤ {100 * TARGET_DATA_WAIT:.0f}% where no GPU is measured): {v['data_wait']}")
    differs = v.get("not_like_for_like") or []
    if differs:   # the numbers as measured, no verdict: the steps it is credited over differ
        idle = re.sub(r" \(target ≤ \d+%[^)]*\): (met|missed)", "", idle)
        return (f"target with the doctor's pipeline ({v['label']}): {idle}; {NOT_LIKE} ({'; '.join(differs)}): "
                "measured, not judged")
    return f"target with the doctor's pipeline ({v['label']}): {idle}" + host_wait_note(v)


def _cure(t: Target, run: Run) -> list[str]:
    try:
        steps = run.get("steps")
    except NoData:
        return []
    line = cure_target_line(steps, bool(run.payload.get("cuda")))
    return [line] if line else []


def host_wait_note(v: dict) -> str:
    """Data wait is the training loop's (host) time blocked on the next batch; the step is
    asynchronous, so the host can wait while the GPU works through queued steps. Where the host's
    wait is over its bound while the GPU idles within its target, say so."""
    if v.get("data_wait") != "missed" or v.get("gpu_idle_verdict") != "met":
        return ""
    return (f"; the loop's wait ({100 * v['data_wait_share']:.0f}%) is host time, overlapped by queued GPU work: "
            f"the GPU itself was idle {100 * v['gpu_idle']:.0f}% of the steady window")
