"""15_the_cure: a starving training loop brought to a busy accelerator, one measured change at a time.

The write-ups show the disease (workers decoding PNG leave the GPU waiting); this shows the cure.
The same training step (a model chosen so that the *step*, not the loader, should bound the loop)
runs on the write-ups' baseline — PNG + PIL + ToTensor at 2 workers and at every core, the same batch
size — and then on each change the bottleneck doctor advises, applied in order and kept only if it
measured faster. The batch size is held: a larger batch changes the training recipe, not the loader.
The doctor's changes are credited from the all-core baseline (2 workers → every core is the machine's
cores, not advice). Every setting is measured end to end in steady state (the batches the workers
prefetched at start-up are not timed; at least ``min_timed`` batches are), with three readings per repeat:

* ``samples_per_s``   steady samples per second of the whole training loop;
* ``data_wait_share`` the loop's (host) time spent waiting in ``next(loader)`` ÷ its wall time;
* ``gpu_busy``        the accelerator's time inside the step (CUDA events) ÷ the loop's wall time
                      (``nan`` on a machine without CUDA: there is no accelerator to keep busy, and
                      the reading says so instead of printing a number).

:func:`readings` states how far the accelerator is from busy at each step and which stage the
doctor predicts bounds it; :func:`target_verdict` judges the cure's target (the GPU idle ≤ 5% of the
steady window with the doctor's pipeline, the host's data wait beside it) as met, missed, or not
measured here, and names what is not like for like between the steps it credits.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from feedlab import formats, pipeline
from feedlab.doctor.predict import predict
from feedlab.experiments import loader_grid
from feedlab.experiments._advice_steps import follow
from feedlab.experiments.row_invariants import order_of_loader, pixel_error_of
from feedlab.gpu_busy import BusyMeter
from feedlab.like_for_like import MAX_HALF_WIDTH, MIN_TIMED_BATCHES, MIN_WINDOW_S, NOT_CHECKED
from feedlab.pipeline import PipelineSpec, resolve_model_name, warmup_batches
from feedlab.pipeline.rates import SteadyStop, gain_resolved
from feedlab.plots import PALETTE, legend_outside
from feedlab.report.cure_judge import precision_words, spread_words, step_tail
from feedlab.report.targets import (  # noqa: F401  (re-exported: the cure's target)
    TARGET_DATA_WAIT,
    TARGET_GPU_IDLE,
    all_core_baseline,
    cure_differences,
    cure_target_line,
    final_step,
    host_wait_note,
    target_verdict,
)
from feedlab.results import Results
from feedlab.timing import run_epoch

EXPERIMENT = "cure"
HELD = "batch_size"   # the training recipe's: held across the cure's steps


def timed_plan(spec: PipelineSpec, min_timed: int = 50) -> tuple[int, int]:
    """``(skip, total)`` batches for one steady pass: the first batch and everything the
    workers can have prefetched while it was awaited are skipped, then ``min_timed`` timed."""
    skip = warmup_batches(spec)
    return skip, skip + int(min_timed)


def steady_window(et, skip: int, busy: dict | None = None) -> dict:
    """Steady readings of one timed pass (``feedlab.timing.EpochTiming``) after ``skip`` batches:
    samples/s, data-wait share, and GPU busy over the same steady steps where ``busy`` (a
    :meth:`feedlab.gpu_busy.BusyMeter.end_window` reading of that pass) has it.
    Raises ``ValueError`` when the pass has no batch after ``skip`` (never a silent fallback)."""
    if et.batches <= skip:
        raise ValueError(f"{et.batches} batches in the pass, {skip} skipped for start-up: none left to time")
    ph = np.asarray(et.phases_s, float)
    head = float(ph[:skip].sum())
    wall = float(et.wall_s) - head
    if wall <= 0:
        raise ValueError("no wall time after start-up")
    n = int(np.asarray(et.batch_sizes)[skip:].sum())
    wait = float(ph[skip:, 0].sum())
    gb = (busy or {}).get("gpu_busy_steady", math.nan)
    return {"samples_per_s": n / wall, "data_wait_share": wait / wall,
            "gpu_busy": float(gb) if gb is not None else math.nan,
            "timed_batches": int(et.batches - skip), "window_s": wall}


class Cycled:
    """``total`` batches from ``loader``, epoch after epoch (each epoch its own shuffle): a pass long
    enough for the steady window over a small set, for loader kinds that take no sampler."""

    def __init__(self, loader, total: int):
        if len(loader) < 1:
            raise ValueError("the loader yields no full batch: use a smaller batch_size or more samples")
        self.loader, self.total = loader, int(total)
        self.num_workers = getattr(loader, "num_workers", 0)

    def __len__(self) -> int:
        return self.total

    def __iter__(self):
        n = 0
        while n < self.total:
            for batch in self.loader:
                yield batch
                n += 1
                if n >= self.total:
                    return


PRECISION_FLOOR = 10   # timed batches before a precision-timed pass may stop (5 block means of 2)
PASS_BATCHES = 20      # a precision-timed pass may run to min_timed × this, for the 1 s window of a fast step
PASS_CAP_S = 20.0      # ... and stops at this many seconds whatever its precision (labelled by its half-width)


def pass_stop(skip: int, min_timed: int, precision: float | None) -> SteadyStop | None:
    """The stop of one steady pass: ``None`` (exactly ``min_timed`` timed batches) without a precision;
    with one, timed until the 95% interval of its mean batch time is within ``precision`` (at least
    :data:`PRECISION_FLOOR` batches and a second), else at ``min_timed`` batches once a second has passed —
    the like-for-like rule's window either way (``feedlab.like_for_like``: ≥ 50 batches or a rate known to
    ±5%, over ≥ 1 s: 50 batches of a 7 ms GPU step are a third of a second), or at :data:`PASS_CAP_S` once it
    has ``min_timed`` batches (an imprecise pass is never cut under the like-for-like window's batches)."""
    if not precision:
        return None
    return SteadyStop(skip, min_timed=min(PRECISION_FLOOR, int(min_timed)), half_width=float(precision),
                      min_window_s=MIN_WINDOW_S, max_window_s=PASS_CAP_S, max_timed=int(min_timed), blocks=5,
                      min_capped=int(min_timed))   # an imprecise pass of slow steps still reaches min_timed


def measure(doc, spec: PipelineSpec, repeats: int = 3, min_timed: int = 50, seed: int = 0,
            precision: float | None = None, warmup: int = 1) -> dict:
    """One setting, end to end with the doctor's training step: ``warmup`` warm-up passes (each the pass's
    skipped batches and 2 more; 0: none, each timed pass leaves its own start-up batches out), then ``repeats``
    steady passes over a sampler long enough for ``min_timed`` timed batches (the data set is
    cycled, each cycle a fresh permutation, when it holds fewer samples). With ``precision`` a pass
    ends once its rate is known to it (:func:`pass_stop`: at least ``min_timed`` batches and a second where it
    is not, at most :data:`PASS_BATCHES` × ``min_timed`` batches or :data:`PASS_CAP_S`); each pass records its timed batches, window seconds and the precision reached (``half_width``); the setting its invariants
    (:func:`invariants_of`: order, pixels, a cache warmed by reading every sample first)."""
    import torch
    from torch.utils.data import RandomSampler


    spec = spec.replace(device=doc.device)
    skip, total = timed_plan(spec, min_timed * PASS_BATCHES if precision else min_timed)  # the stop ends it first
    ds = doc.split(spec.format, spec.decode_backend)
    if spec.loader == "dataloader":
        sampler = RandomSampler(ds, num_samples=total * spec.batch_size,
                                generator=torch.Generator().manual_seed(seed))
        loader = pipeline.make_loader(ds, spec, sampler=sampler, drop_last=True)
        epoch_batches = 0   # 0: one sampler epoch holds the whole pass (like_for_like.Side.epoch_batches)
    else:  # kinds that take no sampler (ring, threads, ...) shuffle per epoch themselves
        loader = Cycled(pipeline.make_loader(ds, spec, seed=seed, drop_last=True), total)
        epoch_batches = len(loader.loader)   # the pass restarts the kind's epoch this often
    for i in range(len(ds)):   # every sample read once: the page cache is warm on every side (the doctor's
        ds.read(i)             # cold probe evicted some; a warm-up of a few batches reads a few)
    for _ in range(max(0, int(warmup))):
        run_epoch(loader, doc.model, doc.device, doc.optimizer, max_batches=min(total, skip + 2))
    rows = []
    for _ in range(repeats):
        busy = BusyMeter(doc.device)   # CUDA events around each step; NaN readings off CUDA
        stop = pass_stop(skip, min_timed, precision)
        et = run_epoch(loader, doc.model, doc.device, doc.optimizer, max_batches=total, busy=busy, stop=stop)
        row = steady_window(et, skip, busy.end_window(skip_steps=skip))
        if stop is not None:
            stop.finish()   # the whole pass as timed (a stop after one precise look is not reported as confirmed)
        row["half_width"] = float(stop.achieved) if stop is not None else math.nan
        rows.append(row)
    out = {k: [r[k] for r in rows] for k in rows[0]}
    med = {k: float(np.nanmedian(v)) if not all(math.isnan(x) for x in v) else math.nan
           for k, v in out.items() if k not in ("timed_batches", "window_s", "half_width")}
    rates = out["samples_per_s"]
    n, w, h = worst_pass(out)
    return {**med, "runs": out, "q25": float(np.percentile(rates, 25)), "q75": float(np.percentile(rates, 75)),
            "skip": skip, "timed_batches": int(n), "window_s": float(w), "half_width": None if math.isnan(h) else float(h),
            "rate_kind": "imprecise" if precision and not math.isnan(h) and h > precision else "steady",
            "epoch_batches": int(epoch_batches), **invariants_of(doc, spec)}


def invariants_of(doc, spec: PipelineSpec) -> dict:
    """What a step shares with the one it is judged against (audit54 N8: a step that changes the format changes
    exactly these): the order the loader draws in, the pixel check of its format and decode against the
    reference decode, and the cache (warm: :func:`measure` reads every sample before timing)."""
    order = "global" if spec.loader == "dataloader" else order_of_loader(spec.loader)
    pixels = pixel_error_of(doc.root, spec.format, spec.decode_backend) if doc.root is not None else NOT_CHECKED
    return {"order": order, "pixel_error": pixels, "cache": "warm"}


def worst_pass(runs: dict) -> tuple[int, float, float]:
    """``(timed batches, window seconds, half-width)`` of the pass a setting is judged by: the shortest pass that
    misses the like-for-like window (fewer than 50 batches and not known to ±5%, or under a second), else the
    shortest pass — one pass's own numbers, never the fewest batches of one beside the widest interval of another."""
    passes = list(zip(runs["timed_batches"], runs["window_s"], runs["half_width"]))

    def short(p) -> bool:
        n, w, h = p
        return (n < MIN_TIMED_BATCHES and not (h == h and h <= MAX_HALF_WIDTH)) or w < MIN_WINDOW_S

    return min([p for p in passes if short(p)] or passes, key=lambda p: p[0])


def cure(doc, baseline: PipelineSpec, worker_counts: list[int], max_steps: int = 4, repeats: int = 3,
         min_timed: int = 50, log: Callable[[str], None] | None = None,
         precision: float | None = None, warmup: int = 1) -> tuple[Results, list[dict]]:
    """The baseline at each of ``worker_counts`` (the same batch size), then the doctor's advice from
    the last of them, one change at a time (a change that measured slower, or faster by less than the two
    rates' combined precision (:func:`~feedlab.pipeline.rates.gain_resolved`), is undone and reported as such).
    The batch size is held: advice to change it is a recipe change and is not applied.
    ``doc`` is a measured :class:`feedlab.doctor.Doctor` whose model is the training step; ``precision``:
    each pass timed to it (:func:`measure`, :func:`pass_stop`); ``warmup``: the warm-up passes before each
    setting's timed ones (:func:`measure`)."""
    log = log or (lambda m: None)
    res = Results()
    steps: list[dict] = []

    def record(spec, label, kind, against=None):
        log(f"measuring {label}")
        m = measure(doc, spec, repeats=repeats, min_timed=min_timed, precision=precision, warmup=warmup)
        pred = predict(doc.table_now(spec), spec)
        params = dict(step=len(steps), change=label, kind=kind, **spec.as_dict())
        res.add_samples(EXPERIMENT, label, "samples_per_s", m["runs"]["samples_per_s"], "samples/s",
                        rate_kind=m["rate_kind"], **params)   # "steady" only at the precision asked
        res.add_samples(EXPERIMENT, label, "data_wait_share", m["runs"]["data_wait_share"], "fraction", **params)
        busy = [b for b in m["runs"]["gpu_busy"] if not math.isnan(b)]
        if busy:  # no CUDA: nothing recorded (the reading says "not measured")
            res.add_samples(EXPERIMENT, label, "gpu_busy", busy, "fraction", **params)
        step = {"step": len(steps), "label": label, "kind": kind, "config": spec.as_dict(), **m,
                "predicted": pred["predicted_samples_per_s"], "bound_stage": pred["bound_stage"],
                "kept": True, "against": against}
        steps.append(step)
        return step

    spec = None
    for w in worker_counts:
        spec = baseline.replace(num_workers=int(w))
        current = record(spec, f"baseline, {int(w)} workers", "baseline")

    def try_change(k: int, top: dict, new: PipelineSpec, spec: PipelineSpec, current: dict) -> dict:
        step = record(new, f"{top['setting']}={top['value']}", "advice", against=current["label"])
        step["gain"] = step["samples_per_s"] / current["samples_per_s"] if current["samples_per_s"] > 0 else math.nan
        # a gain inside the pair's combined precision is not shown to help: undone, as a slower one is
        step["against_half_width"] = current.get("half_width")
        step["resolved"] = gain_resolved(step["gain"], step.get("half_width"), step["against_half_width"])
        step["kept"] = bool(step["gain"] >= 1.0) and step["resolved"] is not False
        return step

    follow(doc, spec, current, try_change, max_steps=max_steps, held=(HELD,))
    return res, steps


def readings(steps: list[dict], cuda: bool, precision: float | None = None, load: str | None = None) -> list[str]:
    """One sentence per step, then the target's verdict, all from the measured steps: a baseline's rate
    against the first baseline, an advised step's against the all-core baseline it is credited from, and
    its verdict against the step it was tried on by the one judge (:func:`feedlab.report.cure_judge.step_tail`;
    an imprecise rate or other epochs is never "undone" as slower, it is not told apart / not like for like).
    ``precision``: the precision the run asked for (a rate wider than it reads imprecise); ``load``: the
    run's other load, where it was busy."""
    out = []
    base = steps[0]["samples_per_s"] if steps else math.nan
    allcore = all_core_baseline(steps)
    for s in steps:
        iqr = spread_words(s)   # the IQR over passes, or one pass's precision (never "IQR 235–235")
        busy = (f"GPU busy {100 * s['gpu_busy']:.0f}%{_busy_spread(s)}" if not math.isnan(s["gpu_busy"])
                else "GPU busy not measured (no CUDA device)")
        tail = step_tail(s, steps, precision, load)
        words = precision_words(s, precision)
        if words.startswith("imprecise"):
            tail += f"; rate {words}"
        if s["kind"] == "advice" and allcore is not None:
            credit = f"×{s['samples_per_s'] / allcore['samples_per_s']:.2f} the all-core baseline"
        else:
            credit = f"×{s['samples_per_s'] / base:.2f} the first baseline"
        out.append(f"{s['label']}: {s['samples_per_s']:,.0f} samples/s ({iqr}; {credit}), data wait "
                   f"{100 * s['data_wait_share']:.0f}% of the loop, {busy}; the doctor predicts the {s['bound_stage']} "
                   f"stage bounds it{tail}")
    bs = {(s.get("config") or {}).get("batch_size") for s in steps}
    if len(bs) == 1:
        out.append(f"batch size held at {bs.pop()} on every step (a larger batch is a recipe change, not a loader one)")
    line = cure_target_line(steps, cuda, precision, load)
    if line:
        out.append(line)
    return out


def _busy_spread(s: dict) -> str:
    runs = [b for b in (s.get("runs") or {}).get("gpu_busy", []) if not math.isnan(b)]
    return f" ({100 * min(runs):.0f}–{100 * max(runs):.0f}% over {len(runs)} repeats)" if len(runs) > 1 else ""


def title(steps: list[dict], cuda: bool) -> str:
    """The figure's title: the finding, from the measured steps — the doctor's changes over the all-core
    baseline, and what every core gave over 2 workers."""
    last, first, allcore = final_step(steps), (steps[0] if steps else None), all_core_baseline(steps)
    if not last or not first or not allcore:
        return "No setting measured"
    gain = last["samples_per_s"] / allcore["samples_per_s"] if allcore["samples_per_s"] > 0 else math.nan
    what = (f"GPU busy {100 * allcore['gpu_busy']:.0f}% → {100 * last['gpu_busy']:.0f}%" if cuda and
            not math.isnan(last["gpu_busy"]) else
            f"data wait {100 * allcore['data_wait_share']:.0f}% → {100 * last['data_wait_share']:.0f}% of the loop")
    cores = ""
    if allcore is not first and first["samples_per_s"] > 0:
        cores = f"; every core ×{allcore['samples_per_s'] / first['samples_per_s']:.1f} over {first['label']}"
    return f"The doctor's changes: ×{gain:.1f} the all-core PNG baseline, {what}{cores}"


def plot(axes, steps: list[dict], cuda: bool) -> None:
    """Left: steady samples/s per step (median, IQR bars; undone steps hatched). Right: data-wait
    share and (with CUDA) GPU busy per step, with the targets as lines."""
    ax1, ax2 = axes
    x = np.arange(len(steps))
    med = np.array([s["samples_per_s"] for s in steps])
    err = np.clip(np.vstack([med - [s["q25"] for s in steps], np.array([s["q75"] for s in steps]) - med]), 0, None)
    bars = ax1.bar(x, med, 0.6, color=PALETTE[0])
    for b, s in zip(bars, steps):
        if not s.get("kept", True):
            b.set_hatch("//")
            b.set_facecolor("#cccccc")
    ax1.errorbar(x, med, yerr=err, fmt="none", ecolor="#333333", capsize=3)
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=PALETTE[0], label="kept (median, IQR bars)")]
    if any(not s.get("kept", True) for s in steps):  # an explicit swatch: an empty bar has no hatch to show
        handles.append(Patch(facecolor="#cccccc", hatch="//", edgecolor="#333333",
                             label="not faster (slower, or inside the precision): undone"))
    legend_outside(ax1, "top", handles=handles)
    labels = [s["label"].replace(", ", ",\n").replace("=", "=\n") + ("\n(not faster: undone)" if not s.get("kept", True)
                                                                     else "") for s in steps]
    for ax in (ax1, ax2):
        ax.set_xticks(x)
        ax.set_xticklabels(labels, fontsize=7)
    ax1.set_ylabel("training samples/s (steady, median, IQR)")
    ax2.plot(x, [100 * s["data_wait_share"] for s in steps], "o-", color=PALETTE[1], label="data wait, % of loop")
    ax2.axhline(100 * TARGET_DATA_WAIT, color=PALETTE[1], linestyle=":", linewidth=1,
                label=f"host wait ≤ {100 * TARGET_DATA_WAIT:.0f}% (the target without a GPU)")
    if cuda and not all(math.isnan(s["gpu_busy"]) for s in steps):
        ax2.plot(x, [100 * s["gpu_busy"] for s in steps], "s-", color=PALETTE[2], label="GPU busy, % of loop")
        ax2.axhline(100 * (1 - TARGET_GPU_IDLE), color=PALETTE[2], linestyle=":", linewidth=1,
                    label=f"target: GPU idle ≤ {100 * TARGET_GPU_IDLE:.0f}%")
    ax2.set_ylim(0, 105)
    ax2.set_ylabel("% of the training loop's wall time")
    legend_outside(ax2, "top", ncols=2)


def workload(model: str | None, device: str, data_root=None, batch_size: int = 128, num_workers: int = 0,
             fast_format: str = "npy_mmap") -> dict:
    """The training step: ``{"model", "reading", ...}``. ``auto`` on CUDA is measured
    (:func:`feedlab.experiments.loader_grid.gpu_workload`): the first candidate whose step outlasts
    a *fast* loader's batch (``fast_format``, where packed), so the doctor's pipeline can keep the GPU
    busy while the PNG baseline starves it. Off CUDA, or any other name, as
    :func:`feedlab.pipeline.resolve_model_name` says."""
    if (model or "auto") == "auto" and str(device).startswith("cuda") and data_root is not None:
        fmt = fast_format if fast_format in formats.present(data_root, "sr") else "png"
        return loader_grid.gpu_workload(data_root, device, batch_size=batch_size, num_workers=num_workers, fmt=fmt)
    name = resolve_model_name(model or "auto", device)
    return {"model": name, "gpu_bound": None, "reading": f"training step: {name} (chosen by name, not measured)"}
