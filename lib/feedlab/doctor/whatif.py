"""``--what-if``: will switching loaders help? The words and the judgement, and the child that measures.

:mod:`feedlab.peers.whatif` measures (in a child process, :func:`run_whatif`: the peers import the doctor,
so the doctor reaches them through a process, never an import), on a sample of your own data, your pipeline and each installed
peer of notebook 13 (:mod:`feedlab.peers`) that can express it, through the peers' own runners, in
interleaved rounds (A B C, B C A, …; :data:`ROUNDS`), each pass with the other programs' load over it
(:func:`pass_busy`: ``monitor.LoadWindow``'s busy threshold, or less than ``monitor.BUSY_SPEED`` of a core
left to each of the side's processes). A busy pass is measured again once; a side still busy is "too busy
to judge" (:func:`feedlab.peers.whatif.summarise`). This module decides what each peer can express (:func:`express`), turns each
measured peer into a row with its gain on your loop against your pipeline (each side's median over its
passes, the interval from the paired per-pass ratios: :func:`gain_interval`), its share of the doctor's
headspace, and the one judge's verdict (:func:`feedlab.like_for_like.verdict`: like-for-like sides, neither
busy, the interval clear of ×:data:`SWITCH_TARGET`), and writes the answer (:func:`answer`): "switch to X"
only where that verdict is "met"; else "no switch" and why; then the doctor's own best change (measured
where its table measured one) and the headspace, never below a gain measured in the same run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from feedlab import like_for_like as lfl
from feedlab import procgroup
from feedlab.errors import seconds
from feedlab.like_for_like import Side, differences, order_of
from feedlab.monitor import BUSY_SPEED, speed_left

from .answer import headspace, top_changes
from .report import fmt_rate
from .report_fields import Report

# the peers the what-if measures, in this order, where installed (notebook 13's registry names)
WHATIF_PEERS = ("ffcv", "dali", "spdl", "litdata", "webdataset", "mosaic_streaming")
DEFAULT_SAMPLES = 2048
# what the child needs of the doctor's report: the step and end-to-end rate (headspace), the advice (its measured trials),
# the end-to-end table (the answer never reads below it)
REPORT_KEYS = ("stages", "measured_samples_per_s", "advice", "step_changes", "calibration", "end_to_end",
               "num_workers", "verdict", "headroom", "kind", "tried", "loop")
GRACE_S = 15.0      # after SIGTERM at the limit, how long the child has to stop its peers before SIGKILL
# the shortest timed window a rate is judged on (like_for_like.MIN_TIMED_BATCHES): a sample holds at least
# this many batches, so one epoch of it is a window
MIN_BATCHES = 50
ROUNDS = 3          # interleaved rounds: every side measured once a round (A B C, B C A, …); at least 2
SWITCH_TARGET = 1.05  # a switch is worth naming only at >= x1.05 on your loop, its interval clear of it
TOO_BUSY = "too busy to judge"


def add_arguments(ap) -> None:
    """The doctor's ``--what-if`` flags."""
    ap.add_argument("--what-if", action="store_true", help="also measure, on a sample of --data, the peer loaders "
                    "that can express your pipeline (" + ", ".join(WHATIF_PEERS) + ", where installed) beside "
                    "the doctor's own advice")
    ap.add_argument("--what-if-samples", type=int, default=None, help="items in the --what-if sample (default "
                    "2048, raised to 50 batches)")
    ap.add_argument("--what-if-peers", default=",".join(WHATIF_PEERS), help="comma-separated peers to measure")
    ap.add_argument("--what-if-limit", type=seconds, default=900.0, help="seconds one pass of a --what-if side may "
                    "take (its sides are measured in interleaved rounds)")


def problem(args) -> str | None:
    """One line for a ``--what-if`` flag the doctor cannot honour, or None."""
    if not args.what_if:
        extra = args.what_if_samples is not None
        return "--what-if-samples goes with --what-if" if extra else None
    if args.loader or args.script:
        return ("--what-if samples the files of --data DIR: with --loader/--script the doctor cannot see which files "
                "your loader reads; run --what-if --data DIR with your --batch-size")
    if args.what_if_samples is not None and args.what_if_samples < 1:
        return "--what-if-samples must be >= 1"
    if args.what_if_limit <= 0:
        return "--what-if-limit must be > 0 seconds"
    bad = [p for p in args.what_if_peers.split(",") if p not in WHATIF_PEERS]
    return f"--what-if-peers {','.join(bad)}: unknown; one of {', '.join(WHATIF_PEERS)}" if bad else None


def sample_size(asked: int | None, batch_size: int) -> tuple[int, str]:
    """Items in the sample, and a note when it differs from what was asked: by default
    ``DEFAULT_SAMPLES``, raised so one epoch is ``MIN_BATCHES`` batches (a window a rate is judged on)."""
    if asked is not None:
        return int(asked), ""
    n = max(DEFAULT_SAMPLES, MIN_BATCHES * int(batch_size))
    note = "" if n == DEFAULT_SAMPLES else (
        f"{n:,} items ({DEFAULT_SAMPLES:,} raised so one epoch is {MIN_BATCHES} batches of {batch_size}, "
        "the shortest window a rate is judged on)")
    return n, note


def express(kind: str, transform: str, crop: int) -> tuple[dict | None, str]:
    """What the peers' runners run for your pipeline: ``({size, augment}, how)`` for their
    :class:`~feedlab.peers.base.Spec`, or ``(None, why not)``. ``kind`` is the format's (``sr``, ``cls``,
    ``img``); ``transform`` the doctor's word (``default`` resolved by kind)."""
    if transform == "default":
        transform = "flip" if kind == "sr" else "center_crop"
    if kind == "sr":
        if transform == "none":
            return {"size": 64, "augment": False}, "(lr, hr) pairs as stored, no transform"
        return None, (f"cannot express transform={transform}: its runner reads (lr, hr) pairs as stored, with no "
                      "per-pair flip; compare the read path with --transform none")
    if transform == "center_crop":
        return {"size": int(crop), "augment": False}, (
            f"decode, then resize to {crop}x{crop} on every side, yours too (the peers' runners have no center "
            "crop; the same decode and one resize of the whole image)")
    return None, (f"cannot express transform={transform} on images of any size: its runner resizes each image "
                  "to a square; use --transform center_crop")


def loop_gain(rate: float, base: float, step_rate: float | None, overlapped: bool) -> float:
    """Your training loop's gain from a loader of ``rate`` samples/s in place of one of ``base``, with
    your step alone at ``step_rate`` samples/s: overlapped (workers or threads) the loop runs at the slower
    of loader and step, else at their serial sum; without a step, the loader's own ratio."""
    if not step_rate or not math.isfinite(step_rate):
        return rate / base

    def loop(r: float) -> float:
        return min(r, step_rate) if overlapped else 1.0 / (1.0 / r + 1.0 / step_rate)
    return loop(rate) / loop(base)


def share_of_most(gain: float, most: float | None) -> float | None:
    """A gain as a share of the most any loader change can give (the headspace): 0 none, 1 all of it."""
    if most is None or not math.isfinite(most) or most <= 1.0:
        return None
    return (gain - 1.0) / (most - 1.0)


def pass_busy(load: dict | None, processes: int) -> str | None:
    """Why one pass was measured on a busy machine, or None: other programs used more than the workbook's
    busy threshold of the cores (``LoadWindow.summary()['busy']``), or left each of the side's ``processes``
    (its workers and main process) less than ``monitor.BUSY_SPEED`` of a core. None where the window could not
    read the load (said in the pass's record)."""
    if not load or not load.get("available"):
        return None
    left = speed_left(load, max(1, int(processes)))
    if not load.get("busy") and (left is None or left >= BUSY_SPEED):
        return None
    return (f"other processes used {load.get('other_cpu_cores', 0):.2f} of {load.get('usable_cores', '?')} usable "
            f"cores ({load.get('other_fraction', 0):.0%}; {left if left is not None else float('nan'):.2f} of a core "
            f"left to each of {max(1, int(processes))} processes)")


def side_of(label: str, shuffle: str | None, pixel_error: float | None, batch_size: int | None,
            workers: int | None, batches: int | None, window_s: float | None, busy: str | None = None,
            repeats: int | None = None) -> Side:
    return Side(label, order_of(shuffle), pixel_error, batch_size, workers, "warm", batches, window_s,
                busy=busy, rate_kind="steady", repeats=repeats)


def gain_interval(rates: list[float], base_rates: list[float], step_rate: float | None) -> tuple[float, float]:
    """The interval of the loop gain: the range of the paired per-round gains (this side's pass k against
    your pipeline's pass k, the two measured side by side in one round) and of the ratio of the medians."""
    g = loop_gain(float(np.median(rates)), float(np.median(base_rates)), step_rate, overlapped=True)
    paired = [loop_gain(r, b, step_rate, overlapped=True) for r, b in zip(rates, base_rates) if r > 0 and b > 0]
    return min([g, *paired]), max([g, *paired])


def peer_row(info: dict, base: dict, step_rate: float | None, most: float | None) -> dict:
    """One peer's row from :func:`feedlab.peers.measure.run_peer`'s info (``rate``, ``window_s``,
    ``batches`` added by the runner; ``rates``/``passes``/``busy`` where measured in rounds) against your
    pipeline's ``base`` (``rate``, ``side``, ``rates``): its gain, interval and the one judge's verdict."""
    row = {"peer": info["name"], "label": info.get("label", info["name"]), "available": bool(info.get("available")),
           "reason": info.get("reason", ""), "convert_s": info.get("convert_s"),
           "bytes_on_disk": info.get("bytes_on_disk"), "shuffle": info.get("shuffle", ""),
           "pixel_error": info.get("pixel_error"), "interpreter": info.get("interpreter", ""),
           "passes": info.get("passes", [])}
    rate = info.get("rate")
    if not row["available"] or rate is None or not base.get("rate"):
        row["measured"] = False
        if row["available"] and not row["reason"]:
            row["reason"] = info.get("error") or "not timed"
        return row
    rates = info.get("rates") or [rate]
    side = side_of(row["label"], row["shuffle"], row["pixel_error"], info.get("batch_size"), info.get("workers"),
                   info.get("batches"), info.get("window_s"), info.get("busy"), len(rates))
    diff = differences(base["side"], side)
    gain = loop_gain(rate, base["rate"], step_rate, overlapped=True)
    lo, hi = gain_interval(rates, base.get("rates") or [base["rate"]], step_rate)
    v = lfl.verdict(side, base["side"], gain, target=SWITCH_TARGET, lo=lo, hi=hi)
    busy = [s.busy and f"{s.label} {s.busy}" for s in (base["side"], side)]
    row.update(measured=True, samples_per_s=rate, loader_ratio=rate / base["rate"], gain=gain, gain_lo=lo,
               gain_hi=hi, share_of_most=share_of_most(gain, most), like_for_like=not diff, differs=diff,
               order=side.order, busy=info.get("busy"), repeats=len(rates), verdict=v.word, verdict_why=v.why,
               judged=(f"{TOO_BUSY} ({'; '.join(filter(None, busy))})" if any(busy) else str(v)))
    return row


def doctor_gain(rep: Report | dict) -> tuple[float, str]:
    """The doctor's own best change without migrating and its words: its best change measured on the loop, or
    the best worker count its own table measured end to end where that is higher (the ANSWER never reads lower
    than the run's measured table); a change only predicted is named as one to try, never as a gain."""
    rep = Report.of(rep)
    changes = top_changes(rep)
    done = [c for c in changes if c.get("measured", "measured" in str(c.get("gain", "")))]
    best = max(done, key=lambda c: c.get("gain_value") or 0.0) if done else None
    gain, what = (float(best.get("gain_value") or 1.0), best.get("what", "")) if best else (1.0, "no change measured")
    if not best and changes:
        what += f"; to try: {changes[0].get('what', '')}, ×{changes[0].get('gain_value') or 1.0:.2f} predicted"
    t = table_best(rep)
    if t and t[0] > gain:
        gain, what = t
    return gain, what


def table_best(rep: Report | dict) -> tuple[float, str] | None:
    """The doctor's end-to-end table: the best worker count measured (not busy) over the one you run, with
    its words, where it is faster than yours; None otherwise."""
    rep = Report.of(rep)
    rows = [r for r in rep.end_to_end if r.get("samples_per_s") and not r.get("too_busy")]
    mine = next((r for r in rows if r.get("num_workers") == rep.num_workers), None)
    if mine is None or not rows:
        return None
    best = max(rows, key=lambda r: r["samples_per_s"])
    g = best["samples_per_s"] / mine["samples_per_s"]
    if best is mine or g <= 1.0:
        return None
    return g, f"num_workers = {best['num_workers']}, measured in the doctor's table"


def _no_switch(rows: list[dict], base_busy: str | None) -> str:
    """Why no switch is named: your pipeline too busy; the best judged like-for-like peer inside the spread
    or under the target; a peer too busy; or no peer like for like."""
    if base_busy:
        return f"no switch: {TOO_BUSY} (your pipeline {base_busy})"
    like = [r for r in rows if r.get("measured") and r.get("like_for_like")]
    judged = [r for r in like if r.get("verdict") in (lfl.WITHIN, lfl.MISSED)]
    if judged:
        r = max(judged, key=lambda r: (round(r["gain"], 2), r["loader_ratio"]))
        why = ("inside the spread of" if r["verdict"] == lfl.WITHIN else "under")
        return (f"no switch: the best like-for-like peer, {r['label']}, measured ×{r['gain']:.2f} on your loop "
                f"(×{r['gain_lo']:.2f}–{r['gain_hi']:.2f}), {why} ×{SWITCH_TARGET:.2f}")
    busy = [r for r in like if r.get("busy")]
    if busy:
        return f"no switch: {TOO_BUSY} ({busy[0]['label']} {busy[0]['busy']})"
    if like:
        return f"no switch: {like[0]['label']} {like[0].get('judged', 'not judged')}"
    measured = [r for r in rows if r.get("measured")]
    return "no peer could be compared like for like" + (
        f" ({measured[0]['label']}: {'; '.join(measured[0]['differs'])})" if measured else " (none measured)")


def answer(rows: list[dict], rep: Report | dict, base_busy: str | None = None) -> str:
    """The one sentence: a switch only where the one judge says "met" (like for like, neither side busy, the
    interval clear of ×SWITCH_TARGET), else "no switch" and why; the doctor's own best change; the headspace,
    named, and never below a gain this run measured."""
    rep = Report.of(rep)
    h = headspace(rep)
    c, what = doctor_gain(rep)
    mine = f"the doctor's changes give ×{c:.2f} without migrating ({what})"
    met = [r for r in rows if r.get("measured") and r.get("verdict") == lfl.MET and not base_busy]
    if met:
        best = max(met, key=lambda r: (round(r["gain"], 2), r["loader_ratio"]))   # a tie on the loop: the faster loader
        head = (f"switching to {best['label']} would give ×{best['gain']:.2f} (×{best['gain_lo']:.2f}–"
                f"{best['gain_hi']:.2f} over {best.get('repeats') or 1} interleaved passes a side; conversion "
                f"{best['convert_s'] or 0:.1f} s; its loader alone ×{best['loader_ratio']:.2f})")
    else:
        head = _no_switch(rows, base_busy)
    if h is None:
        return f"{head}; {mine}; the most possible is not measured (no training step timed: give --model)"
    seen = [(r["gain"], r["label"]) for r in met] + [(c, what)]
    top = max(seen)
    most = f"the most possible is ×{h.most:.2f} (the headspace: your step alone over end to end)"
    if top[0] > h.most * 1.05:
        most += (f", below the ×{top[0]:.2f} measured here ({top[1]}): your step runs slower beside the loader "
                 "than alone, so the headspace understates what a change gives")
    return f"{head}; {mine}; {most}"


def _bytes(b) -> str:
    return "—" if b is None else f"{b / 2**20:,.1f} MiB"


def _num(x, fmt: str, none: str = "—") -> str:
    return none if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def _spread(lo, hi) -> str:
    return "" if lo is None or hi is None else f"{fmt_rate(lo)}–{fmt_rate(hi)}"


def _loads(passes: list[dict]) -> str:
    v = [p["load"]["other_fraction"] for p in passes if (p.get("load") or {}).get("available") and not p.get("replaced")]
    return f"{max(v):.0%}" if v else "—"


def render(w: dict) -> list[str]:
    """The what-if's lines: what was measured, the table (each side's median and range over its interleaved
    passes, the busiest pass's other load, the verdict), the peers that could not, the answer."""
    if "error" in w:
        return ["", f"WHAT IF you switched loaders? not measured: {w['error']}"]
    b = w["baseline"]
    rounds = w.get("rounds", 1)
    lines = ["", f"WHAT IF you switched loaders? {w['samples']:,} items of your data ({w['how']}), batch "
             f"{w['batch_size']}, {w['workers']} workers, warm cache, {w['device']}; every side timed alike "
             f"(notebook 13's harness: each batch to the device as float), in {rounds} interleaved rounds "
             "(each side once a round, the order rotated), each pass with the other programs' load"]
    lines += [f"  note: {n}" for n in w.get("notes", [])]
    lines.append(f"  {'loader':<22} {'samples/s':>10} {'range':>13} {'other':>6} {'×loader':>8} {'×loop':>6} "
                 f"{'of most':>8} {'convert':>8} {'on disk':>11} {'order':<10} {'pixels':>6}  verdict")
    lines.append(f"  {'your pipeline':<22} {fmt_rate(b.get('rate')):>10} {_spread(b.get('rate_lo'), b.get('rate_hi')):>13} "
                 f"{_loads(b.get('passes') or []):>6} {'1.00':>8} {'1.00':>6} {'':>8} {'0.0 s':>8} "
                 f"{_bytes(b.get('bytes_on_disk')):>11} {str(b.get('order')):<10} {_num(b.get('pixel_error'), '.1f'):>6}  "
                 + (f"{TOO_BUSY} ({b['busy']})" if b.get("busy") else "(the reference side)"))
    for r in w["peers"]:
        if not r.get("measured"):
            continue
        rates = [p["rate"] for p in r.get("passes") or [] if p.get("rate")]
        spread = _spread(min(rates), max(rates)) if rates else ""
        share = _num(r.get("share_of_most"), ".0%")
        judged = r.get("judged") or ("yes" if r["like_for_like"] else f"no ({'; '.join(r['differs'])})")
        lines.append(f"  {r['label'][:22]:<22} {fmt_rate(r['samples_per_s']):>10} {spread:>13} "
                     f"{_loads(r.get('passes') or []):>6} {r['loader_ratio']:>8.2f} {r['gain']:>6.2f} {share:>8} "
                     f"{_num(r['convert_s'], '.1f'):>6} s {_bytes(r['bytes_on_disk']):>11} {str(r.get('order')):<10} "
                     f"{_num(r.get('pixel_error'), '.1f'):>6}  {judged}")
    for r in w["peers"]:
        if not r.get("measured"):
            lines.append(f"  {r['label']}: {r['reason']}")
    short = [r["label"] for r in w["peers"] if r.get("measured") and r["differs"]
             and all(d.startswith("window:") for d in r["differs"])]
    if short:
        lines.append(f"  only the window kept {', '.join(short)} from a verdict: a larger --what-if-samples (now "
                     f"{w['samples']:,}) times a longer one")
    lines.append(f"  ANSWER: {w['answer']}")
    return lines


def run_whatif(rep: Report | dict, root, spec, samples: int | None, peers, device: str, limit_s: float,
               stall_s: float | None, repeats: int = 3, say=None) -> dict:
    """Measure in a child (``python -m feedlab.peers.whatif``, its own process group): the report's
    ``what_if`` dict, or ``{"error": one line}`` when it ran past ``limit_s`` per side or failed. Its
    temporaries live in a folder made here and removed here, whatever the child did. ``say``: each line
    the child logs, as it comes."""
    lib = str(Path(__file__).resolve().parents[2])
    rep = Report.of(rep)
    req = {"report": {k: getattr(rep, k) for k in REPORT_KEYS}, "root": str(Path(root).resolve()),
           "spec": dataclasses.asdict(spec), "samples": samples, "peers": list(peers), "device": device,
           "limit_s": limit_s, "stall_s": stall_s, "repeats": repeats}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([lib, *filter(None, [os.environ.get("PYTHONPATH")])])}
    limit = limit_s * (len(peers) + 2)     # the sample, your pipeline, each peer
    work = Path(tempfile.mkdtemp(prefix="feedlab-whatif-"))
    try:
        req["work"] = str(work)
        answer, errs = work / "answer.json", work / "stderr.txt"
        with open(errs, "wb") as err:
            group = procgroup.start([sys.executable, "-m", "feedlab.peers.whatif", str(answer)],
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err, env=env)
            code = _wait(group, json.dumps(req), limit, errs, say)
        if code is None:
            return {"error": f"--what-if ran past {limit:.0f} s ({limit_s:g} s a side): it and the peers it started "
                             "were stopped (--what-if-limit S waits longer)"}
        if not answer.is_file():
            lines = [ln for ln in errs.read_text(errors="replace").splitlines() if ln.strip()]
            return {"error": f"--what-if exited {code} without an answer: {lines[-1].strip() if lines else 'no output'}"}
        return json.loads(answer.read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _wait(group, request: str, limit: float, errs: Path, say) -> int | None:
    """Hand the child its request, relay its log lines, stop its group at ``limit`` (SIGTERM, then SIGKILL
    after ``GRACE_S``; a daemon it started too) or when this process is interrupted or signalled. Its exit
    status, None at the limit."""
    proc = group.proc
    proc.stdin.write(request.encode())
    proc.stdin.close()
    t0, seen = time.monotonic(), 0
    try:
        with procgroup.signals_raise():
            while True:
                try:
                    return proc.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    pass
                finally:
                    seen = _relay(errs, seen, say)
                if time.monotonic() - t0 > limit:
                    group.stop(GRACE_S)
                    return None
    except BaseException:
        group.stop(GRACE_S)
        raise


def _relay(errs: Path, seen: int, say) -> int:
    if say is None:
        return seen
    with open(errs, "rb") as fh:
        fh.seek(seen)
        chunk = fh.read()
    done = chunk.rfind(b"\n") + 1
    for line in chunk[:done].decode(errors="replace").splitlines():
        if line.strip():
            say(line.strip().removeprefix("… "))
    return seen + done
