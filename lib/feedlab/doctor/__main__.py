"""``python -m feedlab.doctor`` (and ``feedlab-doctor``): the bottleneck doctor's command line.

    python -m feedlab.doctor --data data/sr64 [--format png] [--collate totensor] [--batch-size 64]
        [--model none] [--device auto] [--max-workers 2] [--num-workers N] [--repeats 3] [--json] [--trace out.json]
    python -m feedlab.doctor --data ~/photos            # any folder of images, any nesting, no labels
    python -m feedlab.doctor --loader pkg.mod:make_loader [--step pkg.mod:train_step] [--report r.md]
    python -m feedlab.doctor --script train.py [--diagnose] [-- your script's arguments]

Each stage is timed alone (read warm and cold, decode, transform, collate in the main
process and inside a worker, the worker → main hand-over on both sides, the loop's
copy to the device, the model step at the threads the loop gives it), the end-to-end
rate is predicted for 0…``--max-workers`` workers from those costs alone and then
measured, and the report gives the prediction's error, the bounding stage and the
single changes predicted to pay (those measured slower in the same run are not
advised). ``--loader`` diagnoses your own DataLoader instead: a function returning
it (and optionally a training step ``step(batch)``), stages measured by wrapping it.
``--script`` runs your unmodified training script for a bounded number of batches
with the DataLoader instrumented (data wait vs step), and ``--diagnose`` then
diagnoses that loader stage by stage.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import os
import sys
import warnings
from pathlib import Path

from feedlab import formats, procgroup
from feedlab import pipeline as pl
from feedlab.errors import cli_errors, command_line, deadline, leave_threads, seconds, strict_json
from feedlab.files import mp_folder_owned, mp_sockets_fit, write_target_problem
from feedlab.formats import FORMATS
from feedlab.monitor import LoadWindow
from feedlab.paths import default_sr_root, outside_figures
from feedlab.trace import trace_run

from .diagnosis import diagnose
from .guard import DEFAULT_DEADLINE_S, load_callable, user_call
from .measure import Doctor, Effort
from .ranks import advise_ranks, render_ranks
from .report import json_default, render
from .script import PROG, render_script, run_script, too_busy
from .script_watch import DeadlineWire, fork_watched, stuck_line, watch_deadline
from .share import report_problem, write_report
from .user import diagnose_loader, render_user
from .verdict import one_verdict
from .whatif import add_arguments as add_whatif_arguments
from .whatif import problem as whatif_problem
from .whatif import render as render_whatif
from .whatif import run_whatif


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m feedlab.doctor", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=None, help="a data set built by data_prep, an ImageFolder, or "
                    "any folder of images (default: the embedded SR set)")
    ap.add_argument("--format", default="auto", choices=["auto", *FORMATS],
                    help="storage format (auto: guessed from --data)")
    pl.add_arguments(ap, pl.PipelineSpec(transform="default"), skip=("format", "num_workers", "prefetch_factor",
                                                                   "persistent_workers"))
    ap.add_argument("--num-workers", type=int, default=None, help="the num_workers under diagnosis "
                    "(default: --max-workers)")
    ap.add_argument("--max-workers", type=int, default=None, help="most DataLoader workers to try (default: cores)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--samples", type=int, default=64, help="samples per stage measurement")
    ap.add_argument("--batches", type=int, default=16, help="batches per end-to-end repeat")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold-cache read")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--ranks", type=int, default=None, help="also advise workers per rank for R ranks sharing "
                    "this machine's cores (predicted from the measured stage costs)")
    ap.add_argument("--trace", type=Path, default=None, help="write a Chrome trace JSON of a 20-batch run")
    ap.add_argument("--loader", default=None, help="pkg.mod:function returning your DataLoader (diagnose it)")
    ap.add_argument("--step", default=None, help="pkg.mod:function(batch) running your training step")
    ap.add_argument("--script", type=Path, default=None, help="your training script, run unmodified for "
                    "--batches batches with its DataLoader instrumented (its own arguments after --)")
    ap.add_argument("--diagnose", action="store_true", help="with --script: then diagnose its DataLoader "
                    "stage by stage")
    ap.add_argument("--report", type=Path, default=None, help="also write the report with its figure to "
                    "FILE.md or FILE.html")
    ap.add_argument("--deadline", type=seconds, default=DEFAULT_DEADLINE_S, help="seconds to wait for one batch "
                    "of your loader, its length, make_loader() or one step before giving up (your "
                    "DataLoader(timeout=...) when it has one); with --script also the longest your script may go "
                    "without asking for a batch, or take to end once stopped; with --data, seconds without progress")
    add_whatif_arguments(ap)   # --what-if: doctor.whatif
    ap.add_argument("--predict-only", action="store_true", help="list the changes the stage costs predict to pay "
                    "as changes to try, without measuring them on your loop (faster; nothing is then advised)")
    ap.add_argument("--no-step-trials", action="store_true", help="with --loader/--step: do not try the "
                    "step-side changes (threads, channels_last, autocast, torch.compile) on your step")
    ap.add_argument("--tune", action="store_true", help="with --loader/--step, --script or --data: pick, apply and "
                    "prove your loader's settings, measured (python -m feedlab.tuner: --budget, --epochs; docs/TUNE.md)")
    return ap


def _tune(argv: list[str]) -> int:
    """``--tune``: the tuner, a level above the doctor, reached through a process (never an import). From the
    command line this process becomes the tuner (``exec``): one process, so a signal to the terminal's group is
    one line, not the tuner's and then the doctor's (attack60 S3); our temporaries go first (exec runs no exit
    hook). A library caller gets a child process and its exit status."""
    import subprocess

    env = {**os.environ, "FEEDLAB_TUNER_PROG": "python -m feedlab.doctor --tune"}   # its lines name this command
    cmd = [sys.executable, "-m", "feedlab.tuner", *[a for a in argv if a != "--tune"]]
    if command_line():
        procgroup.stop_all(grace_s=1.0)   # nothing started yet: multiprocessing's folder removed
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os.execve(sys.executable, cmd, env)
    return subprocess.call(cmd, env=env)


def _whatif(args, report: dict, spec) -> str:
    report["what_if"] = run_whatif(report, args.data, spec, samples=args.what_if_samples,
                                   peers=tuple(args.what_if_peers.split(",")), device=report["device"],
                                   limit_s=args.what_if_limit, stall_s=args.deadline, say=_log(args))
    return "\n".join(render_whatif(report["what_if"]))


# --loader / --script: the options they honour; every other one set away from its default is refused
USER_OPTIONS = {"loader", "step", "script", "diagnose", "report", "deadline", "no_step_trials", "max_workers",
                "predict_only",
                "ranks", "pin_memory", "trace", "repeats", "batches", "device", "json"}


DIAGNOSIS_ONLY = (("--predict-only", "predict_only"), ("--trace", "trace"), ("--ranks", "ranks"), ("--pin-memory", "pin_memory"),
                  ("--max-workers", "max_workers"), ("--repeats", "repeats"), ("--no-step-trials", "no_step_trials"))


def refuse_options(ap, args, flag: str) -> None:
    """One line for the first option ``flag`` cannot honour (set away from its default)."""
    for action in ap._actions:
        d = action.dest
        if d in USER_OPTIONS or d == "help" or not action.option_strings:
            continue
        if getattr(args, d, None) != action.default:
            where = "your make_loader()" if flag == "--loader" else "your script"
            ap.error(f"{action.option_strings[-1]} applies to --data (feedlab's own pipeline); with {flag} your "
                     f"loader decides it: set it in {where}, where the DataLoader is built")


def _load_callable(ref: str, flag: str, limit_s: float | None = None):
    """``package.module:function`` for ``--loader``/``--step`` (:func:`feedlab.doctor.guard.load_callable`)."""
    return load_callable(ref, flag, "python -m feedlab.doctor", limit_s)


def _log(args):
    return (lambda m: None) if args.json else (lambda m: print(f"  … {m}", file=sys.stderr, flush=True))


def _emit(args, rep: dict, text: str, head: str = "") -> None:
    """The answer on the console (or its JSON); with ``--report``, the file with ``head`` (the script
    phase, already printed before the diagnosis ran) above the answer."""
    print(strict_json(rep, default=json_default) if args.json else text)
    if args.report is not None:
        files = write_report(args.report, f"{head}\n\n{text}" if head else text, rep,
                             say=lambda m: print(m, file=sys.stderr, flush=True))
        print(f"report: {', '.join(str(f) for f in files)}", file=sys.stderr)


def _trace_user(args, loader, rep: dict) -> None:
    trace_run(loader.dataset, rep, args.trace, batch_size=rep["batch_size"], workers=rep["num_workers"],
              collate=loader.collate_fn, max_batches=20, device=rep["device"])
    rep.setdefault("notes", []).append(f"trace: {rep['trace']} (your dataset and collate_fn, 20 batches, "
                                       "without your step; open it in https://ui.perfetto.dev)")


def _user_loader(args, loader=None, step_cost_s=None, head: str = "", script: dict | None = None) -> int:
    if loader is None:
        factory = _load_callable(args.loader, "--loader", args.deadline)
        loader = user_call(f"--loader {args.loader} (your make_loader())", factory, limit_s=args.deadline,
                           hint="make_loader() is called with no arguments and must return your DataLoader")
    step = _load_callable(args.step, "--step", args.deadline) if args.step else None
    rep = diagnose_loader(loader, step=step, batches=args.batches, repeats=args.repeats,
                          device=pl.resolve_device(args.device), max_workers=args.max_workers,
                          pin_memory=args.pin_memory or None, deadline_s=args.deadline, log=_log(args),
                          step_trials=() if args.no_step_trials else None, ranks=args.ranks,
                          step_name=f"--step {args.step}" if args.step else "your step(batch)",
                          step_cost_s=step_cost_s, measure_advice=not args.predict_only)
    if script is not None:   # --script --diagnose: the script phase travels with the report (and its JSON)
        rep["script"] = script
        W = script["loader"]["num_workers"]
        rep["step_priced"] = (f"as it ran in your script, beside its {W} loader worker(s) prefetching (alone it may "
                              "run faster)" if W else "as it ran in your script, with nothing loading beside it "
                              "(num_workers=0)")
        if script.get("verdict"):   # one verdict a run: the script's own loop, measured; the stages explain it
            loop = script.get("loop") or {"share": script["data_wait_fraction"], "verdict": script["verdict"],
                                          "mean_share": script["data_wait_fraction"], "windows": 1, "bursts": 0}
            one_verdict(rep, dict(loop, source="your script"), busy=bool((rep.get("load") or {}).get("busy")),
                        loop_busy=script.get("busy"))
    if args.trace is not None:
        _trace_user(args, loader, rep)
    _emit(args, rep, render_user(rep), head)
    return 0


def _script_ended(args, summary: dict | None, why: str) -> int:
    """The doctor ended a script it could not stop (its watchdog): what was measured, or
    the one line that says why nothing was; the exit status."""
    if summary is None:
        print(f"{PROG}: error: {why}", file=sys.stderr, flush=True)
        return 2
    _emit(args, summary, render_script(summary, offer=False))
    sys.stdout.flush()
    if args.diagnose:
        print(f"{PROG}: error: --diagnose could not follow: {why}", file=sys.stderr, flush=True)
        return 2
    return 0


def _script(args, script_args: list[str]) -> int:
    if args.loader or args.step:
        raise SystemExit("python -m feedlab.doctor: error: --script runs your script as it is; "
                         "give either --script or --loader/--step")
    window = LoadWindow()   # what other programs used while your script ran: a busy loop gives no verdict
    summary, loader = run_script(args.script, script_args, max_batches=max(args.batches, 4),
                                 deadline_s=args.deadline, log=_log(args),
                                 report=lambda summary, why: _script_ended(args, summary, why),
                                 watch=getattr(args, "watched", False))
    too_busy(summary, window.summary())
    head = render_script(summary, offer=not args.diagnose)
    if not args.diagnose:
        _emit(args, summary, head)
        return 0
    print(head if not args.json else "", file=sys.stderr if args.json else sys.stdout, flush=True)
    cost = (summary["step_s_per_sample"], summary["step_cpu_s_per_sample"]) if summary.get("step_s_per_sample") \
        else None
    return _user_loader(args, loader=loader, step_cost_s=cost, head=head, script=summary)


WORKER_WARNING = "This DataLoader will create"   # torch's worker-count warning, once per loader built


@contextlib.contextmanager
def worker_warnings_collected(say=None):
    """Torch's worker-count warnings (``This DataLoader will create N worker processes in total. Our
    suggested max number of worker in current system is M …``: one per loader the doctor builds, 26 of them
    between the lines of one table) collected and said in one line at the end."""
    seen: list[str] = []
    show = warnings.showwarning

    def collect(message, category, filename, lineno, file=None, line=None):
        if str(message).startswith(WORKER_WARNING):
            seen.append(str(message))
            return
        show(message, category, filename, lineno, file, line)

    warnings.showwarning = collect
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("always", message=WORKER_WARNING)
            warnings.showwarning = collect   # catch_warnings restores it on the way out
            yield seen
    finally:
        warnings.showwarning = show
        if seen:
            text = ". ".join(seen[0].split(". ")[:2]).strip().rstrip(".")
            (say or (lambda m: print(m, file=sys.stderr, flush=True)))(
                f"note: torch warned {len(seen)} time(s) about the worker count: {text}.")


def _stuck(args, what: str, kids: list[int]) -> int:
    print(stuck_line(PROG, f"doctor --data {args.data}: {what}", args.deadline, kids), file=sys.stderr, flush=True)
    return 2


def main(argv: list[str] | None = None) -> int:
    with cli_errors("python -m feedlab.doctor"), worker_warnings_collected():
        if argv is None:   # the command line: its workers share one multiprocessing folder, removed at its exit
            mp_folder_owned()   # (a worker killed from outside left its own pymp-* in $TMPDIR: attack57 S63)
            faulthandler.enable()   # a native crash in your dataset, run in this process, names its frame (attack58 W3)
        else:   # a caller's process: a $TMPDIR too long for the workers' sockets gets their folder in /tmp
            mp_sockets_fit()
        rc = _main(argv)
    return leave_threads(rc, "python -m feedlab.doctor")   # a thread your code left would hold the exit for ever


def _main(argv: list[str] | None = None) -> int:

    ap = _parser()
    watched = argv is None   # the command line: its run is watched from outside (doctor.script_watch)
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--tune" in (argv[:argv.index("--")] if "--" in argv else argv):
        return _tune(argv)
    script_args = argv[argv.index("--") + 1:] if "--" in argv else []
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.watched = watched
    if args.batch_size < 1 or args.repeats < 1 or (args.max_workers is not None and args.max_workers < 0):
        ap.error("--batch-size and --repeats must be >= 1, --max-workers >= 0")
    if args.ranks is not None and args.ranks < 1:
        ap.error("--ranks must be >= 1")
    if args.samples < 1 or args.batches < 1 or (args.num_workers is not None and args.num_workers < 0):
        ap.error("--samples and --batches must be >= 1, --num-workers >= 0")
    if args.deadline is not None and args.deadline <= 0:
        ap.error("--deadline must be > 0 seconds")
    if whatif_problem(args):
        ap.error(whatif_problem(args))
    for flag, path in (("--trace", args.trace), ("--report", args.report)):
        if path is not None and outside_figures(path, flag):   # never over (or into) a committed record
            ap.error(outside_figures(path, flag))
        if path is not None and write_target_problem(path, flag):   # a FIFO: before the diagnosis (attack61 W4)
            ap.error(write_target_problem(path, flag))
    if args.report is not None:
        problem = report_problem(args.report)     # before anything runs: never a whole diagnosis lost
        if problem:
            ap.error(problem)
    if args.script is not None:
        refuse_options(ap, args, "--script")
        if not args.diagnose:
            for flag, dest in DIAGNOSIS_ONLY:
                if getattr(args, dest) != ap.get_default(dest):
                    ap.error(f"{flag} needs the full diagnosis of your script's loader: add --diagnose")
        return _script(args, script_args)
    if script_args:
        ap.error("arguments after -- are your script's: give --script train.py")
    if args.diagnose:
        ap.error("--diagnose goes with --script")
    if args.step and not args.loader:
        ap.error("--step goes with --loader pkg.mod:make_loader")
    if args.loader:
        refuse_options(ap, args, "--loader")
        return _user_loader(args)
    if args.data is None:
        args.data = default_sr_root("quick")
    if not Path(args.data).is_dir():
        ap.error(f"--data {args.data}: no such folder (give a folder of images, or build a set with "
                 "`python -m data_prep sr --out DIR` and `python -m data_prep pack DIR --to all`)")
    fmt = formats.guess_format(args.data) if args.format == "auto" else args.format
    spec = pl.spec_from_args(args, pl.PipelineSpec(format=fmt)).replace(format=fmt)
    why = [p for p in spec.replace(num_workers=0).problems() if "pin_memory" not in p]
    if why:
        ap.error("; ".join(why))
    effort = Effort(args.repeats, 1, args.samples, args.batches, cold=not args.no_cold)
    where = [f"opening {args.data} as {fmt}"]
    hint = ("a sample that never answers? `python -m data_prep verify DATA` names it; --deadline S waits longer")
    if args.watched:   # a read blocked inside C code cannot answer SIGALRM: this process watches from outside
        pid, fd = fork_watched()
        if pid:
            watch_deadline(pid, fd, args.deadline, lambda what, kids: _stuck(args, what, kids), first=where[0])
    with deadline(args.deadline, lambda: f"doctor --data {args.data}: {where[0]}", hint, on_progress=True) as d:
        wire = DeadlineWire(fd, d, lambda: where[0]) if args.watched else None
        if wire is not None:
            wire.start()

        def log(m: str) -> None:   # each step said is progress; the deadline names the step it waits in
            where[0] = m
            d.reset()
            if not args.json:
                print(f"  … {m}", file=sys.stderr, flush=True)

        try:
            doc = Doctor(args.data, spec, args.max_workers, effort, log=log)
            spec = spec.replace(num_workers=doc.max_workers if args.num_workers is None else args.num_workers)
            doc.measure()
        except (FileNotFoundError, ValueError) as exc:   # bad input: one line, the usage error's status
            said = str(exc).removeprefix(f"{fmt}: ")      # the store names itself: said once ("as images: …")
            print(f"doctor: {args.data} as {fmt}: {said}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
        report = diagnose(doc, spec, measure_advice=not args.predict_only)
        if args.ranks is not None:
            report["ranks_advice"] = advise_ranks(doc.table, spec, args.ranks)
        if args.trace is not None:
            log("tracing 20 batches")
            trace_run(doc.split(spec.format, spec.decode_backend), report, args.trace, batch_size=spec.batch_size,
                      workers=spec.num_workers, collate=pl.make_collate(spec.collate), max_batches=20, model=doc.model,
                      device=doc.device, optimizer=doc.optimizer, pin_memory=spec.pin_memory and doc.cuda)
        if wire is not None:
            wire.done()
    text = render(report)
    if "ranks_advice" in report:
        text += "\n" + "\n".join(render_ranks(report["ranks_advice"]))
    if args.what_if:
        text += "\n" + _whatif(args, report, spec)
    if args.trace is not None:
        text += f"\ntrace: {report['trace']} (open in https://ui.perfetto.dev or chrome://tracing)"
    _emit(args, report, text)   # --json: no bare Infinity/NaN, null
    return 0


if __name__ == "__main__":
    sys.exit(main())
