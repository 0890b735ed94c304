"""``--what-if``: will switching loaders help? The words and the judgement, and the child that measures.

:mod:`feedlab.peers.whatif` measures (in a child process, :func:`run_whatif`: the peers import the doctor,
so the doctor reaches them through a process, never an import), on a sample of your own data, your pipeline and each installed
peer of notebook 13 (:mod:`feedlab.peers`) that can express it, through the peers' own runners; this
module decides what each peer can express (:func:`express`), turns each measured peer into a row with
its gain against your pipeline, its share of the doctor's headspace and its like-for-like judgement
(:mod:`feedlab.like_for_like`: order, pixels against the reference decode, batch size, workers, cache,
window), and writes the answer: "switching to X would give ×a (conversion b s); the doctor's changes give
×c without migrating; the most possible is ×N". A ratio whose sides differ is never the answer.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from feedlab.like_for_like import Side, differences, order_of

from .answer import headspace, top_changes
from .report import fmt_rate

# the peers the what-if measures, in this order, where installed (notebook 13's registry names)
WHATIF_PEERS = ("ffcv", "dali", "spdl", "litdata", "webdataset", "mosaic_streaming")
DEFAULT_SAMPLES = 2048
# what the child needs of the doctor's report: the step and end-to-end rate (headspace), the advice
REPORT_KEYS = ("stages", "measured_samples_per_s", "advice", "step_changes", "calibration")
GRACE_S = 15.0      # after SIGTERM at the limit, how long the child has to stop its peers before SIGKILL
# the shortest timed window a rate is judged on (like_for_like.MIN_TIMED_BATCHES): a sample holds at least
# this many batches, so one epoch of it is a window
MIN_BATCHES = 50


def add_arguments(ap) -> None:
    """The doctor's ``--what-if`` flags."""
    ap.add_argument("--what-if", action="store_true", help="also measure, on a sample of --data, the peer loaders "
                    "that can express your pipeline (" + ", ".join(WHATIF_PEERS) + ", where installed) beside "
                    "the doctor's own advice")
    ap.add_argument("--what-if-samples", type=int, default=None, help="items in the --what-if sample (default "
                    "2048, raised to 50 batches)")
    ap.add_argument("--what-if-peers", default=",".join(WHATIF_PEERS), help="comma-separated peers to measure")
    ap.add_argument("--what-if-limit", type=float, default=900.0, help="seconds one --what-if side may take")


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


def side_of(label: str, shuffle: str | None, pixel_error: float | None, batch_size: int | None,
            workers: int | None, batches: int | None, window_s: float | None) -> Side:
    return Side(label, order_of(shuffle), pixel_error, batch_size, workers, "warm", batches, window_s)


def peer_row(info: dict, base: dict, step_rate: float | None, most: float | None) -> dict:
    """One peer's row from :func:`feedlab.peers.measure.run_peer`'s info (``rate``, ``window_s``,
    ``batches`` added by the runner) against your pipeline's ``base`` (``rate``, ``side``)."""
    row = {"peer": info["name"], "label": info.get("label", info["name"]), "available": bool(info.get("available")),
           "reason": info.get("reason", ""), "convert_s": info.get("convert_s"),
           "bytes_on_disk": info.get("bytes_on_disk"), "shuffle": info.get("shuffle", ""),
           "pixel_error": info.get("pixel_error"), "interpreter": info.get("interpreter", "")}
    rate = info.get("rate")
    if not row["available"] or rate is None or not base.get("rate"):
        row["measured"] = False
        if row["available"] and not row["reason"]:
            row["reason"] = info.get("error") or "not timed"
        return row
    side = side_of(row["label"], row["shuffle"], row["pixel_error"], info.get("batch_size"), info.get("workers"),
                   info.get("batches"), info.get("window_s"))
    diff = differences(base["side"], side)
    gain = loop_gain(rate, base["rate"], step_rate, overlapped=True)
    row.update(measured=True, samples_per_s=rate, loader_ratio=rate / base["rate"], gain=gain,
               share_of_most=share_of_most(gain, most), like_for_like=not diff, differs=diff,
               order=side.order)
    return row


def doctor_gain(rep: dict) -> tuple[float, str]:
    """The doctor's own best change without migrating (measured where measured) and its words."""
    changes = top_changes(rep)
    if not changes:
        return 1.0, "no change advised"
    best = max(changes, key=lambda c: c["gain_value"])
    return float(best["gain_value"]), best["what"]


def answer(rows: list[dict], rep: dict) -> str:
    """The one sentence: the best like-for-like peer's gain and conversion, the doctor's changes, the most."""
    h = headspace(rep)
    most = f"×{h['most']:.2f}" if h else "not measured (no training step timed: give --model)"
    c, what = doctor_gain(rep)
    mine = f"the doctor's changes give ×{c:.2f} without migrating ({what})"
    like = [r for r in rows if r.get("measured") and r.get("like_for_like")]
    if like:
        best = max(like, key=lambda r: (round(r["gain"], 2), r["loader_ratio"]))   # a tie on the loop: the faster loader
        head = (f"switching to {best['label']} would give ×{best['gain']:.2f} "
                f"(conversion {best['convert_s'] or 0:.1f} s; its loader alone ×{best['loader_ratio']:.2f})")
    else:
        measured = [r for r in rows if r.get("measured")]
        head = ("no peer could be compared like for like" + (
            f" ({measured[0]['label']}: {'; '.join(measured[0]['differs'])})" if measured else
            " (none measured)"))
    return f"{head}; {mine}; the most possible is {most}"


def _bytes(b) -> str:
    return "—" if b is None else f"{b / 2**20:,.1f} MiB"


def _num(x, fmt: str, none: str = "—") -> str:
    return none if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def render(w: dict) -> list[str]:
    """The what-if's lines: what was measured, the table, the peers that could not, the answer."""
    if "error" in w:
        return ["", f"WHAT IF you switched loaders? not measured: {w['error']}"]
    b = w["baseline"]
    lines = ["", f"WHAT IF you switched loaders? {w['samples']:,} items of your data ({w['how']}), batch "
             f"{w['batch_size']}, {w['workers']} workers, warm cache, {w['device']}; every side timed alike "
             "(notebook 13's harness: each batch to the device as float)"]
    lines += [f"  note: {n}" for n in w.get("notes", [])]
    lines.append(f"  {'loader':<22} {'samples/s':>10} {'×loader':>8} {'×loop':>6} {'of most':>8} "
                 f"{'convert':>8} {'on disk':>11} {'order':<10} {'pixels':>6}  like for like")
    lines.append(f"  {'your pipeline':<22} {fmt_rate(b.get('rate')):>10} {'1.00':>8} {'1.00':>6} {'':>8} "
                 f"{'0.0 s':>8} {_bytes(b.get('bytes_on_disk')):>11} {str(b.get('order')):<10} "
                 f"{_num(b.get('pixel_error'), '.1f'):>6}  (the reference side)")
    for r in w["peers"]:
        if not r.get("measured"):
            continue
        share = _num(r.get("share_of_most"), ".0%")
        lines.append(f"  {r['label'][:22]:<22} {fmt_rate(r['samples_per_s']):>10} {r['loader_ratio']:>8.2f} "
                     f"{r['gain']:>6.2f} {share:>8} {_num(r['convert_s'], '.1f'):>6} s "
                     f"{_bytes(r['bytes_on_disk']):>11} {str(r.get('order')):<10} "
                     f"{_num(r.get('pixel_error'), '.1f'):>6}  "
                     + ("yes" if r["like_for_like"] else f"no ({'; '.join(r['differs'])})"))
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


def run_whatif(rep: dict, root, spec, samples: int | None, peers, device: str, limit_s: float,
               stall_s: float | None, repeats: int = 3, say=None) -> dict:
    """Measure in a child (``python -m feedlab.peers.whatif``, its own process group): the report's
    ``what_if`` dict, or ``{"error": one line}`` when it ran past ``limit_s`` per side or failed. Its
    temporaries live in a folder made here and removed here, whatever the child did. ``say``: each line
    the child logs, as it comes."""
    lib = str(Path(__file__).resolve().parents[2])
    req = {"report": {k: rep.get(k) for k in REPORT_KEYS}, "root": str(Path(root).resolve()),
           "spec": dataclasses.asdict(spec), "samples": samples, "peers": list(peers), "device": device,
           "limit_s": limit_s, "stall_s": stall_s, "repeats": repeats}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([lib, *filter(None, [os.environ.get("PYTHONPATH")])])}
    limit = limit_s * (len(peers) + 2)     # the sample, your pipeline, each peer
    work = Path(tempfile.mkdtemp(prefix="feedlab-whatif-"))
    try:
        req["work"] = str(work)
        answer, errs = work / "answer.json", work / "stderr.txt"
        with open(errs, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", "feedlab.peers.whatif", str(answer)], stdin=subprocess.PIPE,
                                    stdout=subprocess.DEVNULL, stderr=err, env=env, start_new_session=True)
            code = _wait(proc, json.dumps(req), limit, errs, say)
        if code is None:
            return {"error": f"--what-if ran past {limit:.0f} s ({limit_s:g} s a side): it and the peers it started "
                             "were stopped (--what-if-limit S waits longer)"}
        if not answer.is_file():
            lines = [ln for ln in errs.read_text(errors="replace").splitlines() if ln.strip()]
            return {"error": f"--what-if exited {code} without an answer: {lines[-1].strip() if lines else 'no output'}"}
        return json.loads(answer.read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _wait(proc, request: str, limit: float, errs: Path, say) -> int | None:
    """Hand the child its request, relay its log lines, stop its group at ``limit`` (SIGTERM, then SIGKILL
    after ``GRACE_S``) or when this process is interrupted. Its exit status, None at the limit."""
    proc.stdin.write(request.encode())
    proc.stdin.close()
    t0, seen = time.monotonic(), 0
    try:
        while True:
            try:
                return proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
            finally:
                seen = _relay(errs, seen, say)
            if time.monotonic() - t0 > limit:
                _stop_group(proc)
                return None
    except BaseException:
        _stop_group(proc)
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


def _stop_group(proc) -> None:
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
