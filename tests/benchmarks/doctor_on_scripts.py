"""Benchmark, not a test: the doctor's ``--script`` on other people's training scripts, run
unmodified (issue 34 item 5, issue 46 part 6).

    python tests/benchmarks/doctor_on_scripts.py --out docs/doctor_on_scripts.runN.json [--deadline 480]
    python tests/benchmarks/doctor_on_scripts.py --doc docs/DOCTOR_ON_SCRIPTS.md docs/doctor_on_scripts.run*.json

The scripts come from local snapshots of their public repositories (``SOURCES``: a git checkout or bare git
folder each, default the mirrors the ``fetch`` tool brings to ``/work/.mirror``; ``--repo NAME=PATH_OR_URL``
points one elsewhere), copied byte for byte at their commit into a temporary folder and never changed:

- ``imagenet/main.py`` of github.com/pytorch/examples (torchvision ImageFolder with RandomResizedCrop(224) +
  flip on 320–640 px JPEGs: the augmentation is most of the fetch), ``-a mobilenet_v3_small`` and ``-a resnet18``;
- ``dcgan/main.py`` (a GAN: two small nets a step, ``--dataset folder``);
- ``super_resolution/main.py`` (its BSDS300 folder laid out in the run's folder from the same JPEGs, so it
  downloads nothing: the Y channel, a centre crop and a resize a pair);
- ``projects/chargpt/chargpt.py`` of github.com/karpathy/minGPT (a step-based loop: ``while True`` until
  ``max_iters``, the iterator re-made on StopIteration; character windows of a text made from this
  repository's docs).

All on CPU, offline, on data built here (``data_prep.build_cls``). For each case, every step a subprocess under
``--timeout`` (its process group killed there):

1. *by hand*, the truth: the script run unmodified, its first DataLoader's loop timed as it runs (each batch's
   wait in ``next`` and the time from its delivery to the next request, nothing else in the process): the loop's
   data-wait share by the doctor's own statistic (the median over windows), data-bound at 20% or more (the
   doctor's own threshold), with a bootstrap interval over the batches. Then, from the same iterator, batches
   fetched as built (the fetch, timed) and replayed from memory (the step alone, no data wait): the step price's
   truth, and the split share fetch ÷ (fetch + step) shown beside the loop's (a record without a hand-timed
   loop is judged on the split share, as it was);
2. the doctor, ``--script S --json`` (its verdict, the step as the script ran it, the rate), and
   ``--script S --diagnose --json`` (the diagnosis: one verdict a run, and the changes it advises);
3. each advised change (the doctor's ``code`` line; up to ``--changes``) applied without editing the script: a
   ``DataLoader(..., k=v)`` line as keyword arguments every DataLoader the script builds receives, a
   ``torch.set_num_threads(N)`` line called before the script starts; a line of another shape is recorded
   "not applied" with the line. The start and every applied change are then run under the doctor in
   ``--rounds`` interleaved rounds (A B C, B C A, …), each pass with the other programs' load (a busy pass run
   again once; busy twice: too busy to judge), and each change judged against the start by
   ``feedlab.like_for_like.verdict`` (the median over passes, the paired per-round interval, target ×1.05).

Each run writes one JSON record (``--out``, an atomic write) with the origins (repository, path, commit,
sha256), the machine, the load, every reading and judgement; nothing else. ``--doc`` writes
docs/DOCTOR_ON_SCRIPTS.md from the committed records (tests/unit/test_doctor_on_scripts.py checks that the
doc is what the records give). ``--deadline`` bounds the whole run: a case or pass not started by then is
recorded as left out, and no script run goes on more than ``GRACE_S`` past it (its group is killed). The defaults
(batch 16, 6 batches a run, 2 rounds) are sized for a quiet 2-core machine; the default ``--deadline`` (900 s)
leaves room for all five cases there: the committed quiet records (docs/doctor_on_scripts.run*.json) hold
their seconds. A record from a busy machine says so and judges nothing.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MIRRORS = Path("/work/.mirror")
# name -> (repository, the files a case needs, copied byte for byte at the snapshot's commit)
SOURCES = {
    "pytorch/examples": ("github.com/pytorch/examples",
                         ("imagenet/main.py", "dcgan/main.py", "super_resolution/main.py", "super_resolution/data.py",
                          "super_resolution/dataset.py", "super_resolution/model.py")),
    "karpathy/minGPT": ("github.com/karpathy/minGPT",
                        ("projects/chargpt/chargpt.py", "mingpt/__init__.py", "mingpt/model.py", "mingpt/trainer.py",
                         "mingpt/utils.py", "mingpt/bpe.py")),
}
UPSTREAM = SOURCES["pytorch/examples"][0]
MIRROR = MIRRORS / "pytorch+examples" / "repo"
STEP_RATIO = (0.8, 1.2)         # the doctor's step price ÷ the hand timing: the target
DATA_BOUND_SHARE = 0.2          # the doctor's DATA_BOUND_FRACTION: a data-wait share at or above it is data-bound
CACHE_BATCHES = 9               # batches fetched as built after the loop (then replayed) by the hand timing; the first left out
HAND_STEPS = 16                 # batches of the loop timed by hand, then replayed (at least; the first left out)
TRUTH_LEVEL = 0.9               # the hand truth's interval: the share's 90% interval (a bootstrap of the medians)
TRUTH_RESAMPLES = 2000
CHANGE_TARGET = 1.05            # an advised change is worth its line at ×1.05 measured (issue 46)
NAME = "doctor_on_scripts"
GRACE_S = 60.0                  # a run started before the deadline may end this long after it
MIN_RUN_S = 30.0                # the shortest limit a script run is given


@dataclass(frozen=True)
class Case:
    """One script and its arguments; ``{data}``, ``{train}``, ``{outf}``, ``{batch}``, ``{workers}``
    are filled in at run time. ``workers_flag`` is the script's own flag for ``num_workers`` (ending in
    ``=`` where the script takes ``--flag=value``). ``setup``: the data the script finds in its folder
    (``imagefolder``: the ``{data}`` argument; ``bsds300``: ``dataset/BSDS300/images``; ``text``: ``input.txt``)."""

    name: str
    script: str
    args: tuple[str, ...]
    workers_flag: str
    intended: str                # the truth the case was chosen for (measured, not assumed)
    source: str = "pytorch/examples"
    shape: str = ""
    setup: str = "imagefolder"
    batch: int | None = None     # the case's own batch size (else --batch)


CASES = (
    Case("imagenet mobilenet_v3_small", "imagenet/main.py",
         ("-a", "mobilenet_v3_small", "-j", "{workers}", "-b", "{batch}", "--no-accel", "-p", "1000", "{data}"),
         "-j", "data-bound", shape="classification, RandomResizedCrop + flip on 320–640 px JPEGs"),
    Case("imagenet resnet18", "imagenet/main.py",
         ("-a", "resnet18", "-j", "{workers}", "-b", "{batch}", "--no-accel", "-p", "1000", "{data}"),
         "-j", "compute-bound", shape="the same loader, a step 6× dearer"),
    Case("dcgan 64px ngf=ndf=8", "dcgan/main.py",
         ("--dataset", "folder", "--dataroot", "{train}", "--workers", "{workers}", "--batchSize", "{batch}",
          "--imageSize", "64", "--ngf", "8", "--ndf", "8", "--outf", "{outf}", "--manualSeed", "0"),
         "--workers", "data-bound", shape="a GAN: two nets a step"),
    Case("super_resolution x3", "super_resolution/main.py",
         ("--upscale_factor", "3", "--batchSize", "{batch}", "--threads", "{workers}", "--nEpochs", "1"),
         "--threads", "data-bound", shape="super-resolution: (low, high) pairs of the Y channel", setup="bsds300",
         batch=4),   # its README's batch: a 255-px pair costs ~0.2 s of step on 2 cores
    Case("minGPT chargpt gpt-nano", "projects/chargpt/chargpt.py",
         ("--trainer.num_workers={workers}", "--trainer.batch_size={batch}", "--model.model_type=gpt-nano",
          "--system.work_dir=out", "--trainer.max_iters=100000"),   # a bare word: its parser takes a path for code
         "--trainer.num_workers=", "compute-bound", source="karpathy/minGPT",
         shape="step-based loop (while True … max_iters), text windows", setup="text"),
)


# ------------------------------------------------------------------ pure helpers (unit-tested)


def fill(args, **values) -> list[str]:
    """``args`` with each ``{name}`` placeholder replaced by its value."""
    return [a.format(**values) for a in args]


def set_flag(args, flag: str, value) -> list[str]:
    """``args`` with the value after ``flag`` replaced (``flag value`` appended where absent); a flag ending
    in ``=`` is one token, ``flag=value``."""
    out = list(args)
    if flag.endswith("="):
        at = [i for i, a in enumerate(out) if a.startswith(flag)]
        if at:
            out[at[0]] = f"{flag}{value}"
            return out
        return [*out, f"{flag}{value}"]
    if flag in out[:-1]:
        out[out.index(flag) + 1] = str(value)
        return out
    return [*out, flag, str(value)]


def last_json(stdout: str) -> dict:
    """The last line of ``stdout`` that is a JSON object (the script's own prints come before the
    doctor's one-line ``--json`` answer)."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                return obj
    raise ValueError("no JSON object in the output (did the doctor fail? its stderr says why)")


def ratio(a, b) -> float | None:
    """a ÷ b, or None where either is missing, not finite or b is not positive."""
    if a is None or b is None or not math.isfinite(a) or not math.isfinite(b) or b <= 0:
        return None
    return float(a) / float(b)


def median(xs) -> float | None:
    xs = sorted(float(x) for x in xs if x is not None and math.isfinite(x))
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else 0.5 * (xs[mid - 1] + xs[mid])


def hand_summary(hand: dict) -> dict:
    """Per-batch and per-sample medians of a hand timing (``fetch_s``, ``step_s``, ``sizes``,
    ``workers``), the first batch of each left out (start-up, first-call allocation); the data-wait
    share the loop would have at num_workers=0 (fetch and step in turn), its interval
    (:func:`truth_interval`) and its verdict, or "on the line" where the interval holds the 20% line."""
    fetch = hand.get("fetch_s", [])[1:]
    step = hand.get("step_s", [])[1:]
    size = median(hand.get("sizes") or []) or None
    f, s = median(fetch), median(step)
    out = {"fetch_s_per_batch": f, "step_s_per_batch": s, "batch": size,
           "step_s_per_sample": s / size if s is not None and size else None,
           "fetch_s_per_sample": f / size if f is not None and size else None,
           "step_batches": len(step), "fetch_batches": len(fetch)}
    share = truth_share(f, s, hand.get("workers", 0))
    lo_hi = truth_interval(fetch, step, hand.get("workers", 0)) if share is not None else None
    out["split_wait_share"] = share   # fetch ÷ (fetch + step), each timed apart
    loop = loop_share(hand.get("loop_wait_s", [])[1:], hand.get("loop_step_s", [])[1:], hand.get("workers") or 0)
    if loop is not None:   # the loop itself, timed by hand as it ran: the truth where it was timed
        share, lo_hi = loop
        out["truth_source"] = "loop"
        out["loop_batches"] = len(hand.get("loop_wait_s", [])[1:])
    else:
        out["truth_source"] = "split"
    out["wait_share"] = share
    out["truth"] = truth_of(share)
    iv = median_interval(step) if size else None
    if iv is not None:   # the hand step's own spread: the step price is judged on it (judge_ratio)
        out["step_s_per_sample_interval"] = [iv[0] / size, iv[1] / size]
    if lo_hi is not None:
        out["wait_share_interval"] = list(lo_hi)
        out["on_the_line"] = lo_hi[0] < DATA_BOUND_SHARE <= lo_hi[1]
    return out


def loop_share(waits: list, steps: list, workers: int, level: float = TRUTH_LEVEL,
               resamples: int = TRUTH_RESAMPLES) -> tuple[float, tuple[float, float] | None] | None:
    """The hand-timed loop's data-wait share by the doctor's own statistic (``feedlab.doctor.verdict.wait_share``:
    the median over windows; the same reading on both sides, so only the measurement differs) and its central
    ``level`` interval over ``resamples`` bootstrap draws of the batches (seeded); None under 3 batches."""
    import numpy as np

    from feedlab.doctor.verdict import wait_share

    n = min(len(waits), len(steps))
    if n < 3:
        return None
    w, s = np.asarray(waits[:n], float), np.asarray(steps[:n], float)
    got = wait_share(w, s, workers)
    if got is None:
        return None
    rng = np.random.default_rng(0)
    shares = []
    for _ in range(resamples // 4):   # each draw re-windows its batches: a quarter of the draws is plenty here
        k = rng.integers(0, n, n)
        r = wait_share(w[k], s[k], workers)
        if r is not None:
            shares.append(r["share"])
    tail = 50.0 * (1.0 - level)
    iv = tuple(float(x) for x in np.percentile(shares, [tail, 100.0 - tail])) if shares else None
    return float(got["share"]), iv


def truth_interval(fetch: list, step: list, workers: int, level: float = TRUTH_LEVEL,
                   resamples: int = TRUTH_RESAMPLES) -> tuple[float, float] | None:
    """The hand truth's share, (lo, hi): the central ``level`` of the share's medians over ``resamples``
    bootstrap draws of the fetch and step timings (seeded: the same timings give the same interval); None
    under 3 timings a side or with workers (no truth)."""
    import numpy as np

    f = np.asarray([x for x in fetch if x is not None and math.isfinite(x)], float)
    s = np.asarray([x for x in step if x is not None and math.isfinite(x)], float)
    if workers or len(f) < 3 or len(s) < 3:
        return None
    rng = np.random.default_rng(0)
    fm = np.median(f[rng.integers(0, len(f), (resamples, len(f)))], axis=1)
    sm = np.median(s[rng.integers(0, len(s), (resamples, len(s)))], axis=1)
    shares = fm / np.maximum(fm + sm, 1e-12)
    tail = 50.0 * (1.0 - level)
    lo, hi = np.percentile(shares, [tail, 100.0 - tail])
    return float(lo), float(hi)


def median_interval(xs: list, level: float = TRUTH_LEVEL, resamples: int = TRUTH_RESAMPLES) -> tuple[float, float] | None:
    """The central ``level`` of a median over ``resamples`` bootstrap draws of ``xs`` (seeded), or None under 3."""
    import numpy as np

    x = np.asarray([v for v in xs if v is not None and math.isfinite(v)], float)
    if len(x) < 3:
        return None
    m = np.median(x[np.random.default_rng(0).integers(0, len(x), (resamples, len(x)))], axis=1)
    tail = 50.0 * (1.0 - level)
    lo, hi = np.percentile(m, [tail, 100.0 - tail])
    return float(lo), float(hi)


def truth_of(share: float | None) -> str | None:
    """The verdict a data-wait share gives, by the doctor's one rule (``feedlab.doctor.verdict.verdict_of``:
    data-bound at ``DATA_BOUND_FRACTION`` or more); this file's own copy where the library is not importable."""
    try:
        from feedlab.doctor.verdict import verdict_of
    except ImportError:
        return None if share is None else ("data-bound" if share >= DATA_BOUND_SHARE else "compute-bound")
    return verdict_of(share)


def truth_share(fetch_s: float | None, step_s: float | None, workers: int) -> float | None:
    """The share of the loop spent waiting for data when fetch and step take turns (num_workers=0);
    None with workers (their overlap is what the doctor predicts: not a truth from two timings)."""
    if workers or fetch_s is None or step_s is None or fetch_s + step_s <= 0:
        return None
    return fetch_s / (fetch_s + step_s)


def advised_changes(rep: dict, top=None, n: int = 3) -> list[dict]:
    """The changes the doctor's diagnosis prints as advice, from its ``--json`` report: a list it names
    (``changes`` or ``advised``, at the top or under ``answer``) where it has one, else the answer's own
    reading of the report (``top``: ``feedlab.doctor.answer.top_changes``). Each ``{what, code, gain_shown,
    measured_by_doctor, predicted_gain, doctor_measured_gain}``; at most ``n``; the predicted and the doctor's
    own measured gain from ``rep['advice']``."""
    rows = None
    for holder in (rep, rep.get("answer") if isinstance(rep.get("answer"), dict) else {}):
        for key in ("changes", "advised"):
            if isinstance(holder.get(key), list):
                rows = holder[key]
                break
        if rows is not None:
            break
    if rows is None:
        rows = top(rep) if top is not None else []
    out = []
    for c in rows[:n]:
        what = str(c.get("what") or c.get("setting") or "")
        setting, _, value = what.partition(" = ")
        row = next((a for a in rep.get("advice") or []
                    if a.get("setting") == setting.strip() and str(a.get("value")) == value.strip()), {})
        out.append({"what": what, "code": c.get("code") or c.get("code_line"), "gain_shown": c.get("gain_value"),
                    "gain_words": c.get("gain"), "measured_by_doctor": c.get("measured"),
                    "predicted_gain": row.get("expected_gain"), "doctor_measured_gain": row.get("measured_gain")})
    return out


_LOADER_LINE = re.compile(r"^\s*(?:torch\.utils\.data\.)?DataLoader\(\s*\.\.\.\s*,(.*)\)\s*(?:#.*)?$")
_THREADS_LINE = re.compile(r"^\s*torch\.set_num_threads\(\s*(\d+)\s*\)\s*(?:#.*)?$")


def parse_code(code: str | None) -> dict | None:
    """How a printed code line is applied without editing the script: ``{"loader": {k: v}}`` for
    ``DataLoader(..., k=v, ...)``, ``{"threads": N}`` for ``torch.set_num_threads(N)``; None for any other
    line (it needs code the script does not have)."""
    if not code:
        return None
    m = _THREADS_LINE.match(code)
    if m:
        return {"threads": int(m.group(1))}
    m = _LOADER_LINE.match(code)
    if not m:
        return None
    try:
        call = ast.parse(f"f({m.group(1)})", mode="eval").body
        kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    except (SyntaxError, ValueError):
        return None
    return {"loader": kw} if kw and not call.args and None not in kw else None


def paired_interval(start: list[float], other: list[float]) -> tuple[float | None, float | None, float | None]:
    """``other`` over ``start``: the ratio of the medians and the range of the per-round ratios (round k of
    one beside round k of the other) with it."""
    ms, mo = median(start), median(other)
    if not ms or not mo:
        return None, None, None
    r = mo / ms
    paired = [b / a for a, b in zip(start, other) if a and b]
    return r, min([r, *paired]), max([r, *paired])


def judge_change(start: dict, other: dict, target: float = CHANGE_TARGET) -> dict:
    """The one judge on a change against the start (each ``{rates, busy}`` from the interleaved passes):
    ``like_for_like.verdict`` on the same script, data and machine, the line under test the one difference."""
    from feedlab.like_for_like import Side, verdict

    r, lo, hi = paired_interval(start["rates"], other["rates"])
    sides = [Side(label, busy=t.get("busy"), repeats=len(t["rates"]))
             for label, t in (("the change", other), ("the start", start))]
    v = verdict(*sides, r, target=target, lo=lo, hi=hi, check_sides=False)   # same script and data: one line differs
    return {"ratio": r, "lo": lo, "hi": hi, "verdict": v.word, "why": v.why,
            "judged": ("too busy to judge (" + v.why + ")") if "busy" in v.why else str(v)}


def model_price(rep: dict) -> float | None:
    """The step per sample the diagnosis priced (its model stage), or None."""
    row = next((r for r in rep.get("stages") or [] if r.get("stage") == "model"), None)
    return row.get("s_per_sample") if row else None


PREDICTION_TARGET = 0.20   # a printed prediction holds within ±20% of what the run measured (issue 46)


def prediction_check(rep: dict, busy: str | None = None) -> dict:
    """The diagnosis's printed prediction table against what the same run measured (its ``end_to_end`` rows with
    an ``error``, the quiet ones): ``rows``, ``within`` (±20%), ``worst`` (signed), ``marked`` (the report says
    "prediction off by X%: use the measured column", ``feedlab.doctor.answer.off_line``) and ``judged``: "held"
    (every row's error within ±20% on the spread of its repeats), "marked off" (a row's whole interval outside,
    and the report says so), "off, not marked" (outside and printed as if it held: the issue's failure), "not
    judged (why)" where a row's repeats' spread (``steady_runs``) is not recorded or carries its error across ±20%
    (:func:`feedlab.report.doctor_judge.spread_words`, as notebook 10's rows; audit56 N11), "none printed" or the
    busy sentence. ``spread_read``: True, this rule was applied (an older record's word is read again by
    :func:`table_judged`)."""
    table = table_rows(rep)
    errs = [r["predicted"] / r["measured"] - 1 for r in table if not r.get("anchor")]
    worst = max(errs, key=abs) if errs else None
    try:
        from feedlab.doctor.answer import off_line
        marked = bool(off_line(rep))
    except ImportError:
        marked = False
    return {"rows": len(errs), "within": sum(abs(e) <= PREDICTION_TARGET for e in errs), "worst": worst,
            "marked": marked, "spread_read": True, "table": table, "judged": judge_table(table, marked, busy)}


def table_rows(rep: dict) -> list[dict]:
    """The printed prediction rows as the record keeps them (audit57 N16: the judgement re-derived from the record):
    each quiet row with an error: workers, predicted, measured, each repeat's steady rate, its window, and whether it
    is the anchor (the start's row every other prediction is scaled to)."""
    return [{"num_workers": r.get("num_workers"), "predicted": float(r["predicted_samples_per_s"]),
             "measured": float(r["samples_per_s"]), "steady_runs": r.get("steady_runs"),
             "window_s": r.get("window_s"), "timed_batches": r.get("timed_batches"), "anchor": bool(r.get("anchor"))}
            for r in rep.get("end_to_end") or [] if isinstance(r.get("error"), (int, float))
            and math.isfinite(r["error"]) and not r.get("too_busy") and r.get("samples_per_s")
            and r.get("predicted_samples_per_s")]


def judge_table(table: list[dict], marked: bool, busy: str | None = None) -> str:
    """"held" / "marked off" / "off, not marked" / "not judged (why)" / "none printed" / the busy sentence, from the
    rows :func:`table_rows` keeps: each row's error on the spread of its repeats, and the anchor's where there is
    one (:func:`row_spread_words`)."""
    if busy:
        return f"too busy to judge ({busy})"
    rows = [r for r in table if not r.get("anchor")]
    if not rows:
        return "none printed"
    anchor = next((r for r in table if r.get("anchor")), None)
    anchor_h = None if anchor is None else repeat_spread(anchor)
    whys = [row_spread_words(r, anchor_h) for r in rows]
    if anchor is not None and anchor_h is None:
        whys = [f"the anchor ({anchor.get('num_workers')} workers): no spread recorded"] * len(rows)
    errs = [r["predicted"] / r["measured"] - 1 for r in rows]
    if any(why is None and abs(e) > PREDICTION_TARGET for e, why in zip(errs, whys)):
        return "marked off" if marked else "off, not marked"
    if any(whys):
        return f"not judged ({next(w for w in whys if w)})"
    return "held"


def repeat_spread(row: dict) -> float | None:
    """A row's repeats' 95% half-width (``steady_runs``), small ones included; None with fewer than two."""
    from feedlab.like_for_like import repeat_half_width

    return repeat_half_width(row.get("steady_runs") or [])


def row_spread_words(row: dict, anchor_h: float | None = None) -> str | None:
    """Why one prediction row's error cannot be read against ±20% (None: it can), as notebook 10's rows are read
    (``report.doctor_judge``): its window (not recorded, or too short for a rate), its repeats' steady rates
    (``steady_runs``) not recorded, or their spread (any size: a small one is never dropped; audit57 N16) and the
    anchor's carry the error across the bound."""
    from feedlab.like_for_like import Side
    from feedlab.report.doctor_judge import spread_words

    label = f"{row.get('num_workers')} workers"
    if row.get("window_s") is None or row.get("timed_batches") is None:
        return f"{label}' timed window was not recorded"
    h = repeat_spread(row)
    side = Side(label, timed_batches=int(row["timed_batches"]), window_s=float(row["window_s"]),
                repeats=len(row.get("steady_runs") or []), rate_kind="steady", repeat_half_width=h)
    why = side.window_short()
    if why is not None:
        return why
    if h is None:
        return f"{label}: no spread recorded"
    return spread_words(side, row["predicted"], row["measured"], PREDICTION_TARGET, anchor_h=anchor_h, small_too=True)


def table_judged(p: dict) -> str:
    """A prediction table's judgement read again from its record: a record from before the spread was read
    (no ``spread_read``) gives no verdict on point errors: "not judged (the record holds no spread)"; one that
    does not keep its rows (``table``, since audit57 N16) gives none either; else re-derived from the rows."""
    word = p.get("judged", "not recorded")
    if word.startswith("too busy") or word in ("none printed", "not recorded"):
        return word
    if not p.get("spread_read"):
        return "not judged (the record holds no spread)"
    if p.get("table") is None:
        return "not judged (the record does not keep the rows' repeats)"
    return judge_table(p["table"], bool(p.get("marked")))


def judge_ratio(r: float | None, busy: str | None, lo_hi=STEP_RATIO, interval: tuple | None = None) -> str:
    """met / missed / not judged, judged on the ratio's interval (``interval``: from the hand timing's bootstrap,
    :func:`step_ratio_interval`; audit54 N7: 8 hand-timed batches gave 1.17 "met" in one run and 0.78 "missed" in
    the next): met only with the whole interval inside the band, missed only with it outside, else not judged;
    no interval: "not judged (the record holds no spread)"; not measured; or the busy sentence instead of a figure."""
    if busy:
        return f"too busy to judge ({busy})"
    if r is None:
        return "not measured"
    lo, hi = lo_hi
    if interval is None or None in interval:
        return f"not judged ({r:.2f}; the record holds no spread)"
    a, b = min(interval), max(interval)
    span = f"its {TRUTH_LEVEL:.0%} interval {a:.2f}-{b:.2f}"
    if lo <= a and b <= hi:
        return "met"
    if b < lo or a > hi:
        return f"missed ({r:.2f}, {span} outside {lo:g}-{hi:g})"
    return f"not judged ({r:.2f}, {span} holds an edge of {lo:g}-{hi:g})"


def step_ratio_interval(doctor_step: float | None, hand: dict, second: float | None = None) -> tuple[float, float] | None:
    """The doctor's step price ÷ the hand timing's, as an interval: the doctor's price over the ends of the hand
    step's :data:`TRUTH_LEVEL` bootstrap interval (``hand["step_s_per_sample_interval"]``); None where not recorded.
    ``second``: the doctor's other price of the same step (its diagnosis's model stage) where the record holds one:
    the doctor's side then spans both prices (audit57 N16b: one reading is not taken as exact)."""
    iv = hand.get("step_s_per_sample_interval")
    if doctor_step is None or not iv or None in iv or min(iv) <= 0:
        return None
    prices = [doctor_step] + ([second] if second and second > 0 else [])
    return min(prices) / max(iv), max(prices) / min(iv)


def step_price(row: dict) -> str:
    """A case's step-price judgement read again from its record (never the word it stored)."""
    r = row.get("step_ratio")
    return judge_ratio(r, row.get("busy"), interval=step_ratio_interval(row.get("doctor_step_s_per_sample"),
                                                                        row.get("hand") or {},
                                                                        row.get("diagnosis_step_s_per_sample")))


def judge_verdict(doctor: str | None, truth: str | None, busy: str | None, on_line: tuple | None = None) -> str:
    """right / wrong against the hand truth; "not judged" where the truth's own interval (``on_line``: (lo, hi))
    holds the 20% line (either verdict is then inside what the hand timing can tell); the busy sentence."""
    if busy:
        return f"too busy to judge ({busy})"
    if doctor == "too busy to judge":   # the doctor's own load window saw the loop measured busy
        return "too busy to judge (the doctor's own load window)"
    if doctor is None or truth is None:
        return "not measured"
    if on_line is not None:
        return (f"not judged (the truth's {TRUTH_LEVEL:.0%} interval, {on_line[0]:.1%}–{on_line[1]:.1%}, holds the "
                f"{DATA_BOUND_SHARE:.0%} line)")
    return "right" if doctor == truth else "wrong"


def busy_words(load: dict | None) -> str | None:
    """The sentence for a case run while other processes used more than the busy threshold, else None."""
    if not load or not load.get("available") or not load.get("busy"):
        return None
    return (f"other processes used {load['other_cpu_cores']:.2f} of {load['usable_cores']} cores, "
            f"{100 * load['other_fraction']:.0f}% over the {100 * load['threshold_fraction']:.0f}% accepted")


def case_row(case: Case, batch: int, workers: int, hand: dict, summary: dict, rep: dict, changes: list[dict],
             trial: dict | None, load: dict | None) -> dict:
    """One case's readings and judgements, from the parsed outputs (no timing here). ``trial``: the
    interleaved passes, ``{"sides": {"start": {rates, passes, busy}, what: {...}}, "rounds"}``."""
    h = hand_summary(hand)
    busy = busy_words(load)
    on_line = tuple(h["wait_share_interval"]) if h.get("on_the_line") else None
    doc_step = summary.get("step_s_per_sample")
    r = ratio(doc_step, h["step_s_per_sample"])
    verdicts = {v for v in (summary.get("verdict"), rep.get("verdict")) if v}
    row = {"case": case.name, "script": case.script, "source": case.source, "shape": case.shape, "batch": batch,
           "workers": workers, "intended": case.intended, "hand": h, "doctor_step_s_per_sample": doc_step,
           "diagnosis_step_s_per_sample": model_price(rep), "step_ratio": r,
           "step_ratio_judged": judge_ratio(r, busy, interval=step_ratio_interval(doc_step, h, model_price(rep))),
           "doctor_verdict": summary.get("verdict"), "doctor_wait_share": summary.get("data_wait_fraction"),
           "diagnosis_verdict": rep.get("verdict"), "one_verdict": len(verdicts) <= 1, "truth": h["truth"],
           "truth_wait_share": h["wait_share"],
           "verdict_judged": judge_verdict(summary.get("verdict"), h["truth"], busy, on_line),
           "diagnosis_verdict_judged": judge_verdict(rep.get("verdict"), h["truth"], busy, on_line),
           "samples_per_s": summary.get("samples_per_s"), "changes": [], "load": load, "busy": busy,
           "doctor_tried": rep.get("tried"), "predictions": prediction_check(rep, busy)}
    sides = (trial or {}).get("sides") or {}
    start = sides.get("start")
    for c in changes:
        c = dict(c)
        got = sides.get(c["what"])
        if start and got and start["rates"] and got["rates"]:
            c.update(judge_change(start, got), start_rates=start["rates"], rates=got["rates"],
                     start_busy=start.get("busy"), busy=got.get("busy"))
            c["prediction_ratio"] = ratio(c.get("predicted_gain"), c["ratio"])
            c["prediction_judged"] = prediction_words(c["prediction_ratio"], c.get("busy") or c.get("start_busy"))
        elif c.get("apply") is not None and not c.get("not_applied"):
            busy = [f"{n} {t['busy']}" for n, t in (("the start", start), ("the change", got)) if t and t.get("busy")]
            errs = [t["error"] for t in (start, got) if t and t.get("error")]
            c["judged"] = (f"too busy to judge ({'; '.join(busy)})" if busy else
                           f"not measured ({'; '.join(errs) or 'no pass'})")
        row["changes"].append(c)
    if trial:
        row["rounds"] = trial.get("rounds")
    return row


def prediction_words(r: float | None, busy: str | None = None) -> str:
    """A change's predicted gain against its measured one: within ±20%, off by how much, or not judged."""
    if busy:
        return "too busy to judge"
    if r is None:
        return "no prediction"
    return "within ±20%" if abs(r - 1.0) <= PREDICTION_TARGET else f"off by {100 * (r - 1.0):+.0f}%"


def fmt(x, spec: str = ".2f", scale: float = 1.0, none: str = "—") -> str:
    return none if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x * scale, spec)


def cell(judged: str) -> str:
    """A judgement as a table cell: a busy machine's sentence is said once, below the table."""
    return "too busy to judge" if judged.startswith("too busy to judge") else judged


def changes_of(row: dict) -> list[dict]:
    """A case's advised changes, from a record of either shape (``changes``; the first records' one
    ``advice``, measured in one pass a side)."""
    if "changes" in row:
        return row["changes"]
    a = row.get("advice")
    if not a:
        return []
    c = {"what": f"{a['setting']} = {a['value']}", "predicted_gain": a.get("predicted_gain"),
         "applied_as": a.get("applied_as")}
    if a.get("measured_gain") is not None:
        c.update(ratio=a["measured_gain"], judged="not tested fairly (one pass a side)", verdict="not tested fairly")
    else:
        c["not_applied"] = a.get("not_applied", "not applied")
    return [c]


def one_verdict(r: dict) -> bool:
    """The run printed one verdict: the script's and the diagnosis's agree, or only one was printed."""
    if "one_verdict" in r:
        return bool(r["one_verdict"])
    return not (r.get("diagnosis_verdict") and r.get("doctor_verdict") and r["diagnosis_verdict"] != r["doctor_verdict"])


def advised(c: dict) -> bool:
    """Printed as advice (measured by the doctor before it was printed), not only as a change to try; a doctor
    that does not say is taken at its word."""
    return c.get("measured_by_doctor") is not False


def change_words(c: dict) -> str:
    pred = f"×{fmt(c.get('predicted_gain'))} predicted" if c.get("predicted_gain") is not None else "no prediction"
    if c.get("ratio") is None:
        if c.get("judged"):
            return f"{c['what']} ({pred}; applied: {cell(c['judged'])})"
        return f"{c['what']} ({pred}; not applied: {c.get('not_applied', 'not measured')})"
    spread = f" (×{fmt(c.get('lo'))}–{fmt(c.get('hi'))})" if c.get("lo") is not None else ""
    held = f"; the prediction {c['prediction_judged']}" if c.get("prediction_judged") else ""
    return f"{c['what']}: {pred}, ×{fmt(c['ratio'])}{spread} measured: {cell(c.get('judged', ''))}{held}"


def interval_words(hand: dict) -> str:
    """The hand truth's interval as a cell's tail (", 90%: 12–23%"), empty where the record has none; where the
    truth is the hand-timed loop, the split timing's share beside it ("; split 22%")."""
    lo_hi = hand.get("wait_share_interval")
    tail = f", {TRUTH_LEVEL:.0%}: {lo_hi[0]:.1%}–{lo_hi[1]:.1%}" if lo_hi else ""   # S17: 19.7% vs 20.5%
    if hand.get("truth_source") == "loop":
        tail = f" loop{tail}; split {fmt(hand.get('split_wait_share'), '.0%')}"
    return tail


def run_section(result: dict) -> list[str]:
    """One run's tables: where the scripts came from, the verdicts against the hand truth, the advice."""
    lines = [f"{result['images']} JPEGs in {result['classes']} classes ({result['min_size']}-{result['max_size']} "
             f"px), CPU, {result['machine']}." + (f" {fmt(result.get('seconds'), '.0f')} s in all." if
                                                   result.get("seconds") else ""), "",
             "| script | repository | commit | sha256 |", "|---|---|---|---|"]
    for path, o in sorted(result["origins"].items()):
        lines.append(f"| {o.get('path', path)} | {o['repository']} | {o['commit']} | {o['sha256'][:16]} |")
    lines += ["", "| case | batch | doctor step ms/sample | hand step ms/sample | ratio | step price | truth (wait share)"
              " | doctor verdict (wait share) | verdict | diagnosis verdict | one verdict | seconds |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["cases"]:
        if r.get("error"):
            lines.append(f"| {r['case']} | | | | | | | | | | error: {r['error']} | {fmt(r.get('seconds'), '.0f')} |")
            continue
        one = one_verdict(r)
        lines.append(
            f"| {r['case']} | {r['batch']} | {fmt(r['doctor_step_s_per_sample'], '.1f', 1e3)} | "
            f"{fmt(r['hand']['step_s_per_sample'], '.1f', 1e3)} | {fmt(r['step_ratio'])} | {cell(step_price(r))} | "
            f"{r['truth'] or '—'} ({fmt(r['truth_wait_share'], '.0%')}{interval_words(r['hand'])}) | "
            f"{r['doctor_verdict'] or '—'} "
            f"({fmt(r['doctor_wait_share'], '.0%')}) | {cell(r['verdict_judged'])} | {r['diagnosis_verdict'] or '—'} "
            f"({cell(r['diagnosis_verdict_judged'])}) | {'yes' if one else 'no'} | {fmt(r.get('seconds'), '.0f')} |")
    lines += ["", "| case | advised change (the doctor's line; to try: printed as a prediction, not advice) | applied as | "
              "predicted, measured, judged |", "|---|---|---|---|"]
    for r in result["cases"]:
        for c in changes_of(r):
            lines.append(f"| {r['case']} | `{c.get('code') or c['what']}`{'' if advised(c) else ' (to try)'} | "
                         f"{c.get('applied_as') or '—'} | {change_words(c)} |")
        if not r.get("error") and not changes_of(r):
            lines.append(f"| {r['case']} | none advised | — | — |")
    lines += ["", "| case | the diagnosis's prediction table: rows within ±20% | worst error | judged |",
              "|---|---|---|---|"]
    for r in result["cases"]:
        if r.get("error"):
            continue
        p = r.get("predictions")
        if p is None:
            lines.append(f"| {r['case']} | not recorded | — | — |")
            continue
        lines.append(f"| {r['case']} | {p['within']} of {p['rows']} | {fmt(p['worst'], '+.0%')} | {cell(table_judged(p))} |")
    truths = {r["truth"] for r in result["cases"] if r.get("truth")}
    lines += ["", f"Both truths among the cases: "
              f"{'yes' if truths >= {'data-bound', 'compute-bound'} else 'no (' + (', '.join(sorted(truths)) or 'none') + ')'}."]
    for r in result["cases"]:
        if r.get("busy"):
            lines.append(f"- {r['case']}: the machine was busy ({r['busy']}).")
    return lines


def tally(results: list[dict]) -> dict:
    """The issue's checks over the records: verdicts right against the hand truth, one verdict a run,
    advised changes (not those only to try) measured at ×1.05 or more (judged met), and the prediction tables
    that held or were marked off (``predictions_ok``: of the cases whose table was judged), each as
    ``[count, of]``; ``predictions_not_judged``: the tables read "not judged" (:func:`table_judged`)."""
    rows = [r for res in results for r in res["cases"] if not r.get("error")]
    judged = [r for r in rows if r["verdict_judged"] in ("right", "wrong")]
    changes = [c for r in rows for c in changes_of(r) if c.get("ratio") is not None and advised(c)]
    tables = [table_judged(r["predictions"]) for r in rows if r.get("predictions")]
    tables = [j for j in tables if j in ("held", "marked off", "off, not marked")]
    return {"verdict_right": [sum(r["verdict_judged"] == "right" for r in judged), len(judged)],
            "on_the_line": sum(str(r["verdict_judged"]).startswith("not judged") for r in rows),
            "one_verdict": [sum(one_verdict(r) for r in rows), len(rows)],
            "advice_met": [sum(c.get("verdict") == "met" for c in changes), len(changes)],
            "predictions_ok": [sum(j != "off, not marked" for j in tables), len(tables)],
            "predictions_not_judged": sum(table_judged(r["predictions"]).startswith("not judged")
                                          for r in rows if r.get("predictions"))}


def side_by_side(results: list[tuple[str, dict]]) -> list[str]:
    """The runs side by side, one row a case (in the first run's order): per run the verdict against the hand
    truth, one verdict or two, the advised changes judged met, and the prediction table's judgement."""
    names: list[str] = []
    for _, res in results:
        names += [r["case"] for r in res["cases"] if r["case"] not in names]
    head = "| case | " + " | ".join(f"run {k}: verdict · one verdict · advice met · predictions"
                                     for k in range(1, len(results) + 1)) + " |"
    lines = [head, "|---|" + "---|" * len(results)]
    for name in names:
        cells = []
        for _, res in results:
            r = next((x for x in res["cases"] if x["case"] == name), None)
            if r is None or r.get("error"):
                cells.append("not run" if r is None else f"error ({fmt(r.get('seconds'), '.0f')} s)")
                continue
            ch = [c for c in changes_of(r) if c.get("ratio") is not None and advised(c)]
            met = f"{sum(c.get('verdict') == 'met' for c in ch)} of {len(ch)}" if ch else "none measured"
            pred = cell(table_judged(r["predictions"]) if r.get("predictions") else "not recorded")
            cells.append(f"{r['doctor_verdict'] or '—'} ({cell(r['verdict_judged'])}) · "
                         f"{'one' if one_verdict(r) else 'TWO'} · {met} · {pred}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    secs = ", ".join(f"run {k} {fmt(res.get('seconds'), '.0f')} s" for k, (_, res) in enumerate(results, 1))
    return [*lines, "", f"Wall time: {secs}."]


def markdown(result: dict) -> str:
    """One run's summary (what ``--out`` writes beside the record when asked for the doc of one run)."""
    return "\n".join([f"# The doctor on other people's scripts ({UPSTREAM} and others)", "", *run_section(result), ""])


def truth_words(records: list[dict]) -> str:
    """What the records' truth is, as they hold it: the loop timed by hand where every case has one, the split
    timing where none has, and which is which where they are mixed (review15: a header must not name a truth
    its records do not hold)."""
    sources = [(r.get("hand") or {}).get("truth_source", "split") for rec in records for r in rec.get("cases", [])
               if not r.get("error")]
    loop = ("the truth: its data-wait share timed as it ran, nothing of the doctor in the process; the split "
            "timing, each batch fetched and then its step replayed apart, shown beside it as \"split\"")
    split = ("the truth: the batches fetched as built, then their steps replayed from memory, the data-wait share "
             "fetch ÷ (fetch + step): these records were made before the loop itself was timed by hand")
    if sources and all(x == "loop" for x in sources):
        return loop
    if not any(x == "loop" for x in sources):
        return split
    return "the truth: the loop timed by hand where a case's cell says \"loop\", else the split timing"


def document(results: list[tuple[str, dict]]) -> str:
    """docs/DOCTOR_ON_SCRIPTS.md from the committed records (``(file name, record)``, in order): every number
    in it is read from them."""
    t = tally([r for _, r in results])
    out = ["# The doctor on other people's training scripts (issue #34 item 5, issue #46 part 6)", "",
           "<!-- generated by: python tests/benchmarks/doctor_on_scripts.py --doc docs/DOCTOR_ON_SCRIPTS.md "
           + " ".join(f"docs/{n}" for n, _ in results) + " ; do not edit by hand -->", "",
           "A benchmark, not a test: `python tests/benchmarks/doctor_on_scripts.py --out docs/doctor_on_scripts.runN.json` "
           "runs `python -m feedlab.doctor --script` on unmodified public training scripts against a hand timing of "
           f"the same loop ({truth_words([r for _, r in results])}), "
           "checks the verdicts, then applies each change the "
           "doctor advises and measures it against the start in interleaved rounds (tests/benchmarks/doctor_on_scripts.py "
           "says how). Below, the committed records, unedited.", "",
           f"Over the records: verdicts right against the hand truth {t['verdict_right'][0]} of {t['verdict_right'][1]}"
           + (f" (and {t['on_the_line']} not judged: the truth's own interval holds the line)" if t["on_the_line"] else "")
           + "; "
           f"one verdict a run {t['one_verdict'][0]} of {t['one_verdict'][1]}; advised changes measured at "
           f"×{CHANGE_TARGET:.2f} or more (judged met) {t['advice_met'][0]} of {t['advice_met'][1]}; prediction "
           f"tables within ±{PREDICTION_TARGET:.0%} or marked off {t['predictions_ok'][0]} of {t['predictions_ok'][1]} "
           + (f"(judged where recorded; {t['predictions_not_judged']} not judged: a row's window too short for a "
              "rate, or its repeats' spread not recorded or holding ±20%: each table's row below says which)."
              if t["predictions_not_judged"] else "(judged where recorded).")
           + "", "", *side_by_side(results), ""]
    for k, (name, res) in enumerate(results, 1):
        out += [f"## Run {k} (`docs/{name}`)", "", *run_section(res), ""]
    out += ["The truth is the data-wait share from the hand timings at num_workers=0: fetch ÷ (fetch + step), "
            f"data-bound at {DATA_BOUND_SHARE:.0%} or more; where its {TRUTH_LEVEL:.0%} interval (a bootstrap of the "
            f"two medians; a record without one is judged on the share alone) holds the {DATA_BOUND_SHARE:.0%} line, the hand "
            "timing cannot tell the two verdicts apart and the doctor's is not judged. A change is judged by feedlab.like_for_like.verdict "
            f"against the start: met at ×{CHANGE_TARGET:.2f} with its interval clear of it, \"within spread\" where the "
            "interval holds it; the first records measured it in one pass a side (not tested fairly). The step price "
            f"(the doctor's step time ÷ the hand timing's) is judged against {STEP_RATIO[0]:g}-{STEP_RATIO[1]:g} on its "
            f"{TRUTH_LEVEL:.0%} interval (a bootstrap of the hand step's median): met only with the interval inside, "
            "missed only with it outside, else not judged; a record without that interval is not judged.", ""]
    return "\n".join(out)


# ------------------------------------------------------------------ the run (not unit-tested: it runs scripts)


def fetch_scripts(source: str, dest: Path, paths, timeout: float, repository: str = UPSTREAM) -> dict:
    """Copy ``paths`` byte for byte at HEAD of ``source`` (a git checkout, a bare git folder or a
    URL cloned here) into ``dest``; their origin (repository, path, commit, sha256)."""
    src = source
    if "://" in source or source.startswith("git@"):
        src = str(dest / ".clone")
        subprocess.run(["git", "clone", "--quiet", "--depth", "1", source, src], check=True, timeout=timeout,
                       capture_output=True)
    commit = subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], check=True, capture_output=True, text=True,
                            timeout=timeout).stdout.strip()
    out = {}
    for p in paths:
        data = subprocess.run(["git", "-C", src, "show", f"{commit}:{p}"], check=True, capture_output=True,
                              timeout=timeout).stdout
        (dest / p).parent.mkdir(parents=True, exist_ok=True)
        (dest / p).write_bytes(data)
        out[p] = {"repository": repository, "source": source, "path": p, "commit": commit,
                  "sha256": hashlib.sha256(data).hexdigest()}
    if src != source:
        shutil.rmtree(src, ignore_errors=True)
    return out


def build_images(root: Path, images: int, classes: int, min_size: int, max_size: int) -> None:
    """``root/train/CLASS/*.jpg`` from the embedded photos, ``root/val`` (the imagenet script opens it at
    start) as a link to it, and ``root/flat`` with a link to every image (super_resolution's folder)."""
    from data_prep import build_cls

    per = max(1, images // classes)
    build_cls(root / "train", classes, per, min_size=min_size, max_size=max_size, log=lambda m: None)
    (root / "val").symlink_to("train")
    (root / "flat").mkdir()
    for k, f in enumerate(sorted((root / "train").glob("*/*.jpg"))):
        (root / "flat" / f"{k:05d}.jpg").symlink_to(f.resolve())


def build_text(path: Path) -> None:
    """minGPT's ``input.txt``: this repository's own documents, one after another (text made here)."""
    parts = [p.read_text(errors="replace") for p in sorted((REPO / "docs").glob("*.md"))]
    path.write_text("\n".join(parts))


def lay_out(case: Case, data: Path, work: Path) -> None:
    """The data the case's script finds in its folder, ``work``, with no download."""
    if case.setup == "bsds300":
        images = work / "dataset" / "BSDS300" / "images"
        images.mkdir(parents=True)
        for part in ("train", "test"):
            (images / part).symlink_to(data / "flat")
    elif case.setup == "text":
        shutil.copyfile(data / "input.txt", work / "input.txt")


def _env(tmp: Path, extra=()) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, extra), str(REPO / "lib"), str(REPO),
                                         env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["TMPDIR"] = str(tmp)          # whatever a script leaves in its temporaries goes with the run's folder
    return env


def _run(cmd, tmp: Path, timeout: float, what: str, extra=()) -> str:
    """``cmd`` in ``tmp`` in a process group of its own, its output in files under ``tmp``; at
    ``timeout`` (or an interrupt) the whole group is killed. Its stdout; one line where it failed."""
    out_p, err_p = tmp / ".stdout", tmp / ".stderr"
    with open(out_p, "wb") as out, open(err_p, "wb") as err:
        proc = subprocess.Popen([str(c) for c in cmd], stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                env=_env(tmp, extra), cwd=str(tmp), start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            try:                      # the group dies with its leader: workers the script left behind too
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
    stdout, stderr = out_p.read_text(errors="replace"), err_p.read_text(errors="replace")
    out_p.unlink()
    err_p.unlink()
    if code is None:
        raise RuntimeError(f"{what}: no answer within {timeout:g} s (--timeout); stopped it")
    if code != 0:
        tail = (stderr.strip().splitlines() or ["(no stderr)"])[-1]
        raise RuntimeError(f"{what}: exit status {code}: {tail}")
    return stdout


def _doctor(script: Path, args, tmp: Path, timeout: float, batches: int, extra=(), apply: dict | None = None,
            path=()) -> dict:
    """The doctor on ``script``; with ``apply``, on this file in its ``--apply`` mode, which applies the change
    and runs the script unmodified (:func:`apply_and_run`)."""
    target, rest = script, list(args)
    if apply is not None:
        target, rest = Path(__file__).resolve(), ["--apply", json.dumps(apply), "--script", str(script), "--", *args]
    cmd = [sys.executable, "-m", "feedlab.doctor", "--script", target, "--batches", batches, "--json",
           "--deadline", timeout, *extra, "--", *rest]
    what = f"doctor --script {script.name} {' '.join(map(str, extra))}".strip() + (" (a change applied)" if apply else "")
    return last_json(_run(cmd, tmp, timeout, what, path))


def trial(sides: dict[str, dict], run_pass, rounds: int, until: float, log=None) -> dict:
    """Every side (``{name: {"apply", "workers"}}``, the start first) run once a round for ``rounds`` rounds,
    the order rotated each round, each pass inside a load window; a busy pass run again once, busy twice: the
    side is too busy to judge and runs no more (the start so: no side runs more). ``run_pass(side)`` gives the
    doctor's summary. No pass starts
    after ``until`` (a monotonic time). Per side: ``{rates, passes, busy, error}``."""
    from feedlab.doctor.whatif import pass_busy
    from feedlab.monitor import LoadWindow

    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    names = list(sides)
    out = {n: {"rates": [], "passes": [], "busy": None, "error": None} for n in names}
    ref = out[names[0]]
    for k in range(rounds):
        for j in range(len(names)):
            name = names[(j + k) % len(names)]
            o = out[name]
            if o["error"] or o["busy"] or ref["error"] or ref["busy"]:
                continue    # nothing is judged against a start too busy or failed: no more passes
            for attempt in (1, 2):
                if time.monotonic() > until:
                    o["error"] = o["error"] or f"round {k + 1} not started: the run's --deadline"
                    break
                log(f"{NAME}:   {name}, round {k + 1} of {rounds}" + (" (again: busy)" if attempt == 2 else ""))
                window = LoadWindow()
                try:
                    got = run_pass(sides[name])
                except (RuntimeError, ValueError, OSError) as exc:
                    o["error"] = str(exc)
                    break
                load = window.summary()
                busy = pass_busy(load, int(sides[name].get("workers") or 0) + 1)
                p = {"round": k + 1, "rate": got.get("samples_per_s"), "verdict": got.get("verdict"),
                     "load": load, "busy": busy, "again": attempt == 2}
                o["passes"].append(p)
                if not busy:
                    if p["rate"]:
                        o["rates"].append(float(p["rate"]))
                    break
                if attempt == 1:
                    p["replaced"] = True
                else:
                    o["busy"] = f"measured on a busy machine twice ({busy})"
    return {"sides": out, "rounds": rounds}


def limit(a, until: float) -> float:
    """One script run's limit: ``--timeout``, cut so no run ends more than ``GRACE_S`` past the run's deadline."""
    return max(MIN_RUN_S, min(float(a.timeout), until - time.monotonic() + GRACE_S))


def run_case(case: Case, scripts: Path, data: Path, tmp: Path, a, until: float) -> dict:
    from feedlab.monitor import LoadWindow

    try:
        from feedlab.doctor.answer import top_changes
    except ImportError:                     # the answer's reader moved: the report's own lists are read
        top_changes = None
    root = scripts / case.source
    script = root / case.script
    outf = tmp / "outf"
    outf.mkdir(exist_ok=True)
    lay_out(case, data, tmp)
    batch = case.batch or a.batch
    values = {"data": data, "train": data / "train", "outf": outf, "batch": batch, "workers": a.workers}
    args = fill(case.args, **values)
    window = LoadWindow()
    hand_out = tmp / "hand.json"
    _run([sys.executable, __file__, "--hand", hand_out, "--batches", max(a.batches, HAND_STEPS), "--script", script,
          "--", *args],
         tmp, limit(a, until), f"hand timing of {case.script}", [root])
    hand = json.loads(hand_out.read_text())
    hand_out.unlink()
    # the verdict's run reads as many batches as the hand-timed loop: the same window on both sides
    summary = _doctor(script, args, tmp, limit(a, until), max(a.batches, HAND_STEPS), path=[root])
    rep = _doctor(script, args, tmp, limit(a, until), a.batches,
                  ("--diagnose", "--repeats", a.repeats, "--max-workers", a.max_workers), path=[root])
    changes = advised_changes(rep, top_changes, a.changes)
    sides = {"start": {"apply": {}, "workers": a.workers}}
    for c in changes:
        c["apply"] = parse_code(c.get("code"))
        if c["apply"] is None:
            c["not_applied"] = "a line the script has no place for: it needs code the script does not have"
            continue
        c["applied_as"] = ", ".join(f"{k}={v!r}" for k, v in (c["apply"].get("loader") or {}).items()) or (
            f"torch.set_num_threads({c['apply']['threads']})")
        sides[c["what"]] = {"apply": c["apply"], "workers": (c["apply"].get("loader") or {}).get("num_workers",
                                                                                                 a.workers)}
    got = None
    if len(sides) > 1:
        # the batches new workers prefetch while they start are not the rate: every side runs the same longer loop
        batches = a.batches + 2 * max(int(s["workers"] or 0) for s in sides.values())
        got = trial(sides, lambda s: _doctor(script, args, tmp, limit(a, until), batches, apply=s["apply"],
                                             path=[root]),
                    a.rounds, until)
    return case_row(case, batch, a.workers, hand, summary, rep, changes, got, window.summary())


def apply_and_run(apply: dict, script: Path, args) -> None:
    """In this process (under the doctor): the advised line applied — ``torch.set_num_threads(N)`` called,
    or every DataLoader the script builds given the line's keyword arguments — then the script, unmodified,
    as ``__main__``."""
    import runpy

    import torch
    from torch.utils.data import DataLoader

    if apply.get("threads"):
        torch.set_num_threads(int(apply["threads"]))
    kw = apply.get("loader") or {}
    if kw:
        original = DataLoader.__init__

        def __init__(self, *a, **k):
            original(self, *a, **{**k, **kw})

        DataLoader.__init__ = __init__
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.parent))
    runpy.run_path(str(script), run_name="__main__")


def hand_timing(script: Path, args, batches: int, out: Path) -> None:
    """In this process: ``script`` as ``__main__``, its first DataLoader's loop timed as it runs for ``batches``
    batches (each wait in ``next``, each time from a delivery to the next request: the truth of the loop's
    data-wait share), then from the same iterator its next batches fetched as built (``CACHE_BATCHES``, each
    timed), the loader's workers shut down, then ``batches`` batches replayed from memory with the time from
    each delivery to the next request taken (the step alone). Only the first loader the script iterates is
    timed; the script is stopped after the replay."""
    import runpy

    import torch
    from torch.utils.data import DataLoader

    from feedlab.results import atomic_write

    class Done(BaseException):
        pass

    rec = {"fetch_s": [], "step_s": [], "sizes": [], "workers": None, "threads": torch.get_num_threads(),
           "loop_wait_s": [], "loop_step_s": [], "loop_sizes": []}

    def size(b):
        while isinstance(b, (list, tuple)) and b:
            b = b[0]
        return int(b.shape[0]) if hasattr(b, "shape") and len(b.shape) else None

    def replay(cached):
        t_last = None
        for k in range(batches + 1):
            t = time.perf_counter()
            if t_last is not None:
                rec["step_s"].append(t - t_last)
            if k == batches:
                raise Done()
            b = cached[k % len(cached)]
            rec["sizes"].append(size(b))
            t_last = time.perf_counter()
            yield b

    def timed(loader, it):
        """The script's own loop first, as it runs: each batch's wait in ``next`` and the time from its delivery
        to the next request (``loop_wait_s``, ``loop_step_s``); then the split timing, from the same iterator
        while it lasts and from a fresh one after (an epoch no longer than the loop still gets its step truth)."""
        t_last = None
        for _ in range(batches):
            t0 = time.perf_counter()
            try:
                b = next(it)
            except StopIteration:
                if t_last is not None:   # the last batch's step: from its delivery to this request
                    rec["loop_step_s"].append(t0 - t_last)
                    t_last = None
                break
            if t_last is not None:   # the step of the batch before: from its delivery to this request
                rec["loop_step_s"].append(t0 - t_last)
            rec["loop_wait_s"].append(time.perf_counter() - t0)
            rec["loop_sizes"].append(size(b))
            t_last = time.perf_counter()
            yield b
        if t_last is not None:   # the last batch's step ends as the script asks again (now)
            rec["loop_step_s"].append(time.perf_counter() - t_last)
        cached, fresh = [], False
        while len(cached) < CACHE_BATCHES:
            t0 = time.perf_counter()
            try:
                b = next(it)
            except StopIteration:
                if fresh:
                    break
                getattr(it, "_shutdown_workers", lambda: None)()
                it, fresh = original(loader), True
                continue
            cached.append(b)
            rec["fetch_s"].append(time.perf_counter() - t0)
        getattr(it, "_shutdown_workers", lambda: None)()
        del it
        if not cached:
            raise Done()
        yield from replay(cached)

    def __iter__(self):
        if rec["workers"] is not None:
            raise Done()
        rec["workers"] = int(self.num_workers)
        return timed(self, original(self))

    original, DataLoader.__iter__ = DataLoader.__iter__, __iter__
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.parent))
    try:
        runpy.run_path(str(script), run_name="__main__")
    except Done:
        pass
    atomic_write(out, json.dumps(rec))


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="the run's JSON record (docs/doctor_on_scripts.runN.json)")
    ap.add_argument("--doc", type=Path, default=None, help="write this Markdown file from the records given after "
                    "it (docs/DOCTOR_ON_SCRIPTS.md docs/doctor_on_scripts.run*.json) and stop")
    ap.add_argument("records", nargs="*", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--examples", default=None, help="the pytorch/examples snapshot: a git checkout, bare git folder "
                    f"or URL (default: {MIRROR} where it exists)")
    ap.add_argument("--repo", action="append", default=[], metavar="NAME=PATH_OR_URL",
                    help=f"another snapshot of one of {', '.join(SOURCES)} (default: the mirror under {MIRRORS})")
    ap.add_argument("--images", type=int, default=640)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--min-size", type=int, default=320)
    ap.add_argument("--max-size", type=int, default=640)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--workers", type=int, default=0, help="the scripts' num_workers before the doctor's advice")
    ap.add_argument("--batches", type=int, default=6, help="batches per script run (the doctor's --batches)")
    ap.add_argument("--repeats", type=int, default=5,
                    help="the diagnosis's --repeats (2 left the one judge's interval too wide to read ±20%%)")
    ap.add_argument("--max-workers", type=int, default=2)
    ap.add_argument("--changes", type=int, default=2, help="advised changes applied and measured per case")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the start and the changes (>= 2)")
    ap.add_argument("--cases", default=None, help="comma-separated case names to run (default: all)")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds for each script run")
    ap.add_argument("--deadline", type=float, default=900.0, help="seconds for the whole run: no case or pass "
                    "starts after it")
    ap.add_argument("--hand", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--apply", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--script", type=Path, default=None, help=argparse.SUPPRESS)
    return ap


def write_doc(doc: Path, records: list[Path]) -> int:
    from feedlab.results import atomic_write

    try:
        results = [(p.name, json.loads(p.read_text())) for p in records]
    except (OSError, ValueError) as exc:
        print(f"{NAME}: --doc: cannot read a record ({exc}); give the committed docs/doctor_on_scripts.run*.json",
              file=sys.stderr)
        return 2
    atomic_write(doc, document(results))
    return 0


def snapshots(a) -> dict[str, str | None]:
    """Each source's snapshot: ``--repo NAME=…`` (``--examples`` for pytorch/examples), else its mirror."""
    given = dict(r.split("=", 1) for r in a.repo if "=" in r)
    if a.examples:
        given["pytorch/examples"] = a.examples
    out = {}
    for name in SOURCES:
        mirror = MIRROR if name == "pytorch/examples" else MIRRORS / name.replace("/", "+") / "repo"
        out[name] = given.get(name) or (str(mirror) if mirror.exists() else None)
    return out


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    ap = _parser()
    a = ap.parse_args(own)
    if a.hand is not None:
        hand_timing(a.script, rest, a.batches, a.hand)
        return 0
    if a.apply is not None:
        apply_and_run(json.loads(a.apply), a.script, rest)
        return 0
    if a.doc is not None:
        return write_doc(a.doc, a.records)
    if a.out is None:
        ap.error("--out FILE.json is required")
    cases = [c for c in CASES if a.cases is None or c.name in a.cases.split(",")]
    if not cases:
        ap.error(f"--cases {a.cases!r}: none of {', '.join(c.name for c in CASES)}")
    a.rounds = max(2, a.rounds)
    snaps = snapshots(a)
    missing = sorted({c.source for c in cases if snaps[c.source] is None})
    if missing:
        flag = "--examples PATH_OR_URL" if missing == ["pytorch/examples"] else "--repo NAME=PATH_OR_URL"
        print(f"{NAME}: no copy of {', '.join(SOURCES[m][0] for m in missing)} under {MIRRORS}: give {flag}",
              file=sys.stderr)
        return 2
    from data_prep.errors import DataPrepError
    from feedlab.errors import strict_json
    from feedlab.fingerprint import fingerprint_line, machine_fingerprint
    from feedlab.monitor import LoadWindow
    from feedlab.results import atomic_write

    t_all, until = time.perf_counter(), time.monotonic() + a.deadline
    whole = LoadWindow()
    tmp = Path(tempfile.mkdtemp(prefix=f"{NAME}-"))
    origins: dict[str, dict] = {}
    try:
        scripts, data = tmp / "scripts", tmp / "images"
        for name in sorted({c.source for c in cases}):
            source = snaps[name]
            try:
                got = fetch_scripts(source, scripts / name, SOURCES[name][1], a.timeout, SOURCES[name][0])
            except (subprocess.SubprocessError, OSError) as exc:
                said = getattr(exc, "stderr", None) or b""
                said = (said.decode(errors="replace") if isinstance(said, bytes) else said).strip().splitlines()
                print(f"{NAME}: {source}: cannot read the scripts from it ({said[-1] if said else exc}); "
                      f"give a git checkout, bare git folder or URL of {SOURCES[name][0]}", file=sys.stderr)
                return 2
            origins.update({f"{name}/{p}": o for p, o in got.items() if any(c.script == p for c in cases)})
        try:
            build_images(data, a.images, a.classes, a.min_size, a.max_size)
            build_text(data / "input.txt")
        except DataPrepError as exc:
            print(f"{NAME}: the image folder: {exc}", file=sys.stderr)
            return 2
        rows = []
        for c in cases:
            if time.monotonic() > until:
                rows.append({"case": c.name, "script": c.script, "error": "left out: the run's --deadline passed",
                             "seconds": 0.0})
                continue
            print(f"{NAME}: {c.name} …", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            work = tmp / "work"
            work.mkdir()
            try:
                row = run_case(c, scripts, data, work, a, until)
            except (RuntimeError, ValueError, subprocess.SubprocessError, OSError) as exc:
                row = {"case": c.name, "script": c.script, "error": str(exc)}
            finally:
                shutil.rmtree(work, ignore_errors=True)
            row["seconds"] = time.perf_counter() - t0
            rows.append(row)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    fp = machine_fingerprint()
    result = {"origins": origins, "cases": rows, "images": a.images, "classes": a.classes, "min_size": a.min_size,
              "max_size": a.max_size, "settings": {k: str(v) for k, v in vars(a).items() if k not in ("records",)},
              "fingerprint": fp, "machine": fingerprint_line(fp), "load": whole.summary(),
              "seconds": time.perf_counter() - t_all}
    atomic_write(a.out, strict_json(result, indent=1, default=str) + "\n")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
