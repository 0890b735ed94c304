"""Benchmark, not a test: the doctor's ``--script`` on other people's training scripts, run
unmodified (issue 34, item 5).

    python tests/benchmarks/doctor_on_scripts.py --out DIR [--examples PATH_OR_URL] [--images 640]

The scripts come from a copy of github.com/pytorch/examples (``--examples``: a git checkout,
a bare git folder or a URL to clone; default the mirror at ``MIRROR`` where it exists), copied
byte for byte at its commit into a temporary folder: ``imagenet/main.py`` (torchvision
ImageFolder, ``-a mobilenet_v3_small`` and ``-a resnet18``) and ``dcgan/main.py``
(``--dataset folder``), all on CPU, on a generated ImageFolder of JPEGs made from the
embedded photos (``data_prep.build_cls``). For each case, every step a subprocess under
``--timeout``:

1. *by hand*: the script run unmodified with its DataLoader timed from outside: its first
   batches fetched as built (the fetch, timed), then replayed from memory (no loading, no
   workers running) while the time from a batch's delivery to the next request is taken (the
   step, isolated);
2. the doctor: ``python -m feedlab.doctor --script S --json -- ARGS`` (its verdict, the step
   as the script ran it, the rate);
3. the doctor's diagnosis: ``--script S --diagnose --json`` (its verdict and advice);
4. the advised change applied: a ``num_workers`` advice is the script's own flag
   (``-j`` / ``--workers``): the script is run again under the doctor and its rate compared.

Recorded per case: the step price's ratio to the hand timing (target 0.8-1.2), the verdicts
against the truth (the data-wait share the hand timings give: fetch / (fetch + step) at
num_workers=0; data-bound at 20% or more, the doctor's own threshold), and the advised change's
predicted and measured gain. A case during which other processes used more than the workbook's
busy threshold of the cores reads "too busy to judge (...)" instead of a met/missed. Writes
``doctor_on_scripts.json`` and ``doctor_on_scripts.md`` to ``--out`` (atomic writes), nothing else;
its temporary folder (scripts, images, the scripts' own TMPDIR) is removed.

The defaults (batch 16, 6 batches per run) are sized for a quiet 2-core machine (about 3 minutes,
6 at most). The truth is measured, not assumed: where the cases do not span both truths
(``Both truths among the cases: no``), larger JPEGs (``--min-size/--max-size``) make the fetch
dearer. A trial on a saturated 2-core box (other processes on 90% of the cores) with ``--batch 8
--batches 4`` took 13 minutes and read "too busy to judge" throughout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MIRROR = Path("/work/.mirror/pytorch+examples/repo")
UPSTREAM = "github.com/pytorch/examples"
STEP_RATIO = (0.8, 1.2)         # the doctor's step price ÷ the hand timing: the target
DATA_BOUND_SHARE = 0.2          # the doctor's DATA_BOUND_FRACTION: a data-wait share at or above it is data-bound
CACHE_BATCHES = 4               # batches fetched as built (then replayed) by the hand timing
NAME = "doctor_on_scripts"


@dataclass(frozen=True)
class Case:
    """One script and its arguments; ``{data}``, ``{train}``, ``{outf}``, ``{batch}``, ``{workers}``
    are filled in at run time. ``workers_flag`` is the script's own flag for ``num_workers``."""

    name: str
    script: str
    args: tuple[str, ...]
    workers_flag: str
    intended: str                # the truth the case was chosen for (measured, not assumed)


CASES = (
    Case("imagenet mobilenet_v3_small", "imagenet/main.py",
         ("-a", "mobilenet_v3_small", "-j", "{workers}", "-b", "{batch}", "--no-accel", "-p", "1000", "{data}"),
         "-j", "data-bound"),
    Case("imagenet resnet18", "imagenet/main.py",
         ("-a", "resnet18", "-j", "{workers}", "-b", "{batch}", "--no-accel", "-p", "1000", "{data}"),
         "-j", "compute-bound"),
    Case("dcgan 64px ngf=ndf=8", "dcgan/main.py",
         ("--dataset", "folder", "--dataroot", "{train}", "--workers", "{workers}", "--batchSize", "{batch}",
          "--imageSize", "64", "--ngf", "8", "--ndf", "8", "--outf", "{outf}", "--manualSeed", "0"),
         "--workers", "data-bound"),
)


# ------------------------------------------------------------------ pure helpers (unit-tested)


def fill(args, **values) -> list[str]:
    """``args`` with each ``{name}`` placeholder replaced by its value."""
    return [a.format(**values) for a in args]


def set_flag(args, flag: str, value) -> list[str]:
    """``args`` with the value after ``flag`` replaced (``flag value`` appended where absent)."""
    out = list(args)
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
    share the loop would have at num_workers=0 (fetch and step in turn), and its verdict."""
    fetch = hand.get("fetch_s", [])[1:]
    step = hand.get("step_s", [])[1:]
    size = median(hand.get("sizes") or []) or None
    f, s = median(fetch), median(step)
    out = {"fetch_s_per_batch": f, "step_s_per_batch": s, "batch": size,
           "step_s_per_sample": s / size if s is not None and size else None,
           "fetch_s_per_sample": f / size if f is not None and size else None,
           "step_batches": len(step), "fetch_batches": len(fetch)}
    share = truth_share(f, s, hand.get("workers", 0))
    out["wait_share"] = share
    out["truth"] = None if share is None else ("data-bound" if share >= DATA_BOUND_SHARE else "compute-bound")
    return out


def truth_share(fetch_s: float | None, step_s: float | None, workers: int) -> float | None:
    """The share of the loop spent waiting for data when fetch and step take turns (num_workers=0);
    None with workers (their overlap is what the doctor predicts: not a truth from two timings)."""
    if workers or fetch_s is None or step_s is None or fetch_s + step_s <= 0:
        return None
    return fetch_s / (fetch_s + step_s)


def advised(rep: dict, changes: list[dict]) -> dict | None:
    """The doctor's first advised change (``changes``: its answer's ``top_changes``, each
    ``{what: "setting = value", gain_value}``) with the predicted gain from ``rep['advice']``;
    None where nothing is advised."""
    if not changes:
        return None
    setting, _, value = changes[0]["what"].partition(" = ")
    pred = next((a.get("expected_gain") for a in rep.get("advice") or []
                 if a.get("setting") == setting and str(a.get("value")) == value), None)
    return {"setting": setting.strip(), "value": value.strip(), "predicted_gain": pred,
            "gain_shown": changes[0].get("gain_value")}


def model_price(rep: dict) -> float | None:
    """The step per sample the diagnosis priced (its model stage), or None."""
    row = next((r for r in rep.get("stages") or [] if r.get("stage") == "model"), None)
    return row.get("s_per_sample") if row else None


def judge_ratio(r: float | None, busy: str | None, lo_hi=STEP_RATIO) -> str:
    """met / missed by how much / not measured, or the busy sentence instead of a figure."""
    if busy:
        return f"too busy to judge ({busy})"
    if r is None:
        return "not measured"
    lo, hi = lo_hi
    if lo <= r <= hi:
        return "met"
    return f"missed ({r:.2f}, outside {lo:g}-{hi:g})"


def judge_verdict(doctor: str | None, truth: str | None, busy: str | None) -> str:
    if busy:
        return f"too busy to judge ({busy})"
    if doctor is None or truth is None:
        return "not measured"
    return "right" if doctor == truth else "wrong"


def busy_words(load: dict | None) -> str | None:
    """The sentence for a case run while other processes used more than the busy threshold, else None."""
    if not load or not load.get("available") or not load.get("busy"):
        return None
    return (f"other processes used {load['other_cpu_cores']:.2f} of {load['usable_cores']} cores, "
            f"{100 * load['other_fraction']:.0f}% over the {100 * load['threshold_fraction']:.0f}% accepted")


def case_row(case: Case, batch: int, workers: int, hand: dict, summary: dict, rep: dict, change: dict | None,
             after: dict | None, load: dict | None) -> dict:
    """One case's readings and judgements, from the parsed outputs (no timing here)."""
    h = hand_summary(hand)
    busy = busy_words(load)
    doc_step = summary.get("step_s_per_sample")
    r = ratio(doc_step, h["step_s_per_sample"])
    row = {"case": case.name, "script": case.script, "batch": batch, "workers": workers, "intended": case.intended,
           "hand": h, "doctor_step_s_per_sample": doc_step, "diagnosis_step_s_per_sample": model_price(rep),
           "step_ratio": r, "step_ratio_judged": judge_ratio(r, busy),
           "doctor_verdict": summary.get("verdict"), "doctor_wait_share": summary.get("data_wait_fraction"),
           "diagnosis_verdict": rep.get("verdict"), "truth": h["truth"], "truth_wait_share": h["wait_share"],
           "verdict_judged": judge_verdict(summary.get("verdict"), h["truth"], busy),
           "diagnosis_verdict_judged": judge_verdict(rep.get("verdict"), h["truth"], busy),
           "samples_per_s": summary.get("samples_per_s"), "advice": change, "load": load, "busy": busy}
    if change is not None and after is not None:
        measured = ratio(after.get("samples_per_s"), summary.get("samples_per_s"))
        change.update(applied_as=after.get("applied_as"), samples_per_s_after=after.get("samples_per_s"),
                      measured_gain=measured, prediction_ratio=ratio(change.get("predicted_gain"), measured))
    return row


def fmt(x, spec: str = ".2f", scale: float = 1.0, none: str = "—") -> str:
    return none if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x * scale, spec)


def advice_words(a: dict | None) -> str:
    if a is None:
        return "none"
    what = f"{a['setting']} = {a['value']}"
    if a.get("measured_gain") is None:
        return f"{what} (×{fmt(a.get('predicted_gain'))} predicted; {a.get('not_applied', 'not applied')})"
    return f"{what}: ×{fmt(a.get('predicted_gain'))} predicted, ×{fmt(a['measured_gain'])} measured"


def cell(judged: str) -> str:
    """A judgement as a table cell: a busy machine's sentence is said once, below the table."""
    return "too busy to judge" if judged.startswith("too busy to judge") else judged


def markdown(result: dict) -> str:
    """The summary: where the scripts came from, then one row per case."""
    lines = [f"# The doctor on other people's scripts ({UPSTREAM})", "",
             f"{result['images']} JPEGs in {result['classes']} classes ({result['min_size']}-{result['max_size']} "
             f"px), CPU, {result['machine']}.", "", "| script | repository | commit | sha256 |", "|---|---|---|---|"]
    for path, o in sorted(result["origins"].items()):
        lines.append(f"| {path} | {o['repository']} | {o['commit']} | {o['sha256'][:16]} |")
    lines += ["", "| case | batch | doctor step ms/sample | hand step ms/sample | ratio | step price | truth (wait share)"
              " | doctor verdict (wait share) | verdict | diagnosis verdict | advised change | seconds |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["cases"]:
        if r.get("error"):
            lines.append(f"| {r['case']} | | | | | | | | | | error: {r['error']} | {fmt(r.get('seconds'), '.0f')} |")
            continue
        lines.append(
            f"| {r['case']} | {r['batch']} | {fmt(r['doctor_step_s_per_sample'], '.1f', 1e3)} | "
            f"{fmt(r['hand']['step_s_per_sample'], '.1f', 1e3)} | {fmt(r['step_ratio'])} | {cell(r['step_ratio_judged'])} | "
            f"{r['truth'] or '—'} ({fmt(r['truth_wait_share'], '.0%')}) | {r['doctor_verdict'] or '—'} "
            f"({fmt(r['doctor_wait_share'], '.0%')}) | {cell(r['verdict_judged'])} | {r['diagnosis_verdict'] or '—'} "
            f"({cell(r['diagnosis_verdict_judged'])}) | {advice_words(r['advice'])} | {fmt(r.get('seconds'), '.0f')} |")
    truths = {r["truth"] for r in result["cases"] if r.get("truth")}
    lines += ["", "The truth is the data-wait share from the hand timings at num_workers=0: fetch ÷ (fetch + step), "
              f"data-bound at {DATA_BOUND_SHARE:.0%} or more. Both truths among the cases: "
              f"{'yes' if truths >= {'data-bound', 'compute-bound'} else 'no (' + (', '.join(sorted(truths)) or 'none') + ')'}."]
    for r in result["cases"]:
        if r.get("busy"):
            lines.append(f"- {r['case']}: the machine was busy ({r['busy']}).")
    lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------ the run (not unit-tested: it runs scripts)


def fetch_scripts(source: str, dest: Path, paths, timeout: float) -> dict:
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
        out[p] = {"repository": UPSTREAM, "source": source, "path": p, "commit": commit,
                  "sha256": hashlib.sha256(data).hexdigest()}
    if src != source:
        shutil.rmtree(src, ignore_errors=True)
    return out


def build_images(root: Path, images: int, classes: int, min_size: int, max_size: int) -> None:
    """``root/train/CLASS/*.jpg`` from the embedded photos, and ``root/val`` (the imagenet script
    opens it at start) as a link to it."""
    from data_prep import build_cls

    per = max(1, images // classes)
    build_cls(root / "train", classes, per, min_size=min_size, max_size=max_size, log=lambda m: None)
    (root / "val").symlink_to("train")


def _env(tmp: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "lib"), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["TMPDIR"] = str(tmp)          # whatever a script leaves in its temporaries goes with the run's folder
    return env


def _run(cmd, tmp: Path, timeout: float, what: str) -> str:
    """``cmd`` in ``tmp`` in a process group of its own, its output in files under ``tmp``; at
    ``timeout`` (or an interrupt) the whole group is killed. Its stdout; one line where it failed."""
    out_p, err_p = tmp / ".stdout", tmp / ".stderr"
    with open(out_p, "wb") as out, open(err_p, "wb") as err:
        proc = subprocess.Popen([str(c) for c in cmd], stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                env=_env(tmp), cwd=str(tmp), start_new_session=True)
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


def _doctor(script: Path, args, tmp: Path, timeout: float, batches: int, extra=()) -> dict:
    cmd = [sys.executable, "-m", "feedlab.doctor", "--script", script, "--batches", batches, "--json",
           "--deadline", timeout, *extra, "--", *args]
    return last_json(_run(cmd, tmp, timeout, f"doctor --script {script.name} {' '.join(map(str, extra))}".strip()))


def run_case(case: Case, scripts: Path, data: Path, tmp: Path, a) -> dict:
    from feedlab.doctor.answer import top_changes
    from feedlab.monitor import LoadWindow

    script = scripts / case.script
    outf = tmp / "outf"
    outf.mkdir(exist_ok=True)
    values = {"data": data, "train": data / "train", "outf": outf, "batch": a.batch, "workers": a.workers}
    args = fill(case.args, **values)
    window = LoadWindow()
    hand_out = tmp / "hand.json"
    _run([sys.executable, __file__, "--hand", hand_out, "--batches", a.batches, "--script", script, "--", *args],
         tmp, a.timeout, f"hand timing of {case.script}")
    hand = json.loads(hand_out.read_text())
    hand_out.unlink()
    summary = _doctor(script, args, tmp, a.timeout, a.batches)
    rep = _doctor(script, args, tmp, a.timeout, a.batches,
                  ("--diagnose", "--repeats", a.repeats, "--max-workers", a.max_workers))
    change = advised(rep, top_changes(rep))
    after = None
    if change is not None and change["setting"] == "num_workers":
        changed = set_flag(args, case.workers_flag, change["value"])
        # more batches than the baseline: the batches the new workers prefetch while they start are not the rate
        after = _doctor(script, changed, tmp, a.timeout, a.batches + 2 * int(change["value"]))
        after["applied_as"] = f"{case.workers_flag} {change['value']}"
    elif change is not None:
        change["not_applied"] = f"the script has no flag for {change['setting']}"
    return case_row(case, a.batch, a.workers, hand, summary, rep, change, after, window.summary())


def hand_timing(script: Path, args, batches: int, out: Path) -> None:
    """In this process: ``script`` as ``__main__`` with its first DataLoader's batches fetched as built
    (``CACHE_BATCHES``, each timed), the loader's workers shut down, then ``batches`` batches replayed
    from memory with the time from each delivery to the next request taken. Only the first loader
    the script iterates is timed; the script is stopped after the replay."""
    import runpy

    import torch
    from torch.utils.data import DataLoader

    from feedlab.results import atomic_write

    class Done(BaseException):
        pass

    rec = {"fetch_s": [], "step_s": [], "sizes": [], "workers": None, "threads": torch.get_num_threads()}

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

    def __iter__(self):
        if rec["workers"] is not None:
            raise Done()
        rec["workers"] = int(self.num_workers)
        it, cached = original(self), []
        for _ in range(CACHE_BATCHES):
            t0 = time.perf_counter()
            cached.append(next(it))
            rec["fetch_s"].append(time.perf_counter() - t0)
        getattr(it, "_shutdown_workers", lambda: None)()
        del it
        return replay(cached)

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
    ap.add_argument("--out", type=Path, help="folder for doctor_on_scripts.json and .md")
    ap.add_argument("--examples", default=None, help="a pytorch/examples git checkout, bare git folder or URL "
                    f"(default: {MIRROR} where it exists)")
    ap.add_argument("--images", type=int, default=640)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--min-size", type=int, default=320)
    ap.add_argument("--max-size", type=int, default=640)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--workers", type=int, default=0, help="the scripts' num_workers before the doctor's advice")
    ap.add_argument("--batches", type=int, default=6, help="batches per script run (the doctor's --batches)")
    ap.add_argument("--repeats", type=int, default=2, help="the diagnosis's --repeats")
    ap.add_argument("--max-workers", type=int, default=2)
    ap.add_argument("--cases", default=None, help="comma-separated case names to run (default: all)")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds for each script run")
    ap.add_argument("--hand", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--script", type=Path, default=None, help=argparse.SUPPRESS)
    return ap


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    ap = _parser()
    a = ap.parse_args(own)
    if a.hand is not None:
        hand_timing(a.script, rest, a.batches, a.hand)
        return 0
    if a.out is None:
        ap.error("--out DIR is required")
    source = a.examples or (str(MIRROR) if MIRROR.exists() else None)
    if source is None:
        print(f"{NAME}: no copy of {UPSTREAM} at {MIRROR}: give --examples PATH_OR_URL", file=sys.stderr)
        return 2
    cases = [c for c in CASES if a.cases is None or c.name in a.cases.split(",")]
    if not cases:
        ap.error(f"--cases {a.cases!r}: none of {', '.join(c.name for c in CASES)}")
    from data_prep.errors import DataPrepError
    from feedlab.errors import strict_json
    from feedlab.fingerprint import fingerprint_line, machine_fingerprint
    from feedlab.results import atomic_write

    t_all = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=f"{NAME}-"))
    try:
        scripts, data = tmp / "scripts", tmp / "images"
        try:
            origins = fetch_scripts(source, scripts, sorted({c.script for c in cases}), a.timeout)
        except (subprocess.SubprocessError, OSError) as exc:
            said = getattr(exc, "stderr", None) or b""
            said = (said.decode(errors="replace") if isinstance(said, bytes) else said).strip().splitlines()
            print(f"{NAME}: --examples {source}: cannot read the scripts from it ({said[-1] if said else exc}); "
                  f"give a git checkout, bare git folder or URL of {UPSTREAM}", file=sys.stderr)
            return 2
        try:
            build_images(data, a.images, a.classes, a.min_size, a.max_size)
        except DataPrepError as exc:
            print(f"{NAME}: the image folder: {exc}", file=sys.stderr)
            return 2
        rows = []
        for c in cases:
            print(f"{NAME}: {c.name} …", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            work = tmp / "work"
            work.mkdir()
            try:
                row = run_case(c, scripts, data, work, a)
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
              "max_size": a.max_size, "settings": {k: str(v) for k, v in vars(a).items()},
              "fingerprint": fp, "machine": fingerprint_line(fp),
              "seconds": time.perf_counter() - t_all}
    text = markdown(result)
    atomic_write(a.out / f"{NAME}.json", strict_json(result, indent=1, default=str) + "\n")
    atomic_write(a.out / f"{NAME}.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
