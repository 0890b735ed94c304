"""``python -m feedlab.tuner`` (and ``feedlab-doctor --tune``): tune a DataLoader, measured.

    python -m feedlab.tuner --loader pkg.mod:make_loader [--step pkg.mod:train_step] [--budget 60] [--epochs 5]
    python -m feedlab.tuner --script train.py [-- your script's arguments]
    python -m feedlab.tuner --data data/sr64 [--format png] [--batch-size 64] [--num-workers 0] [--model srcnn]

Prints the settings it picked (or why none), the line to paste, every trial measured, the gain over your start
with its spread and the share of the headspace recovered; ``--json`` prints the same as one object.
With ``--script`` your script runs unmodified for ``--batches`` batches (``feedlab.doctor.script``); its
DataLoader is then tuned with a wait of your step's measured time standing in for the step.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from feedlab import formats
from feedlab import pipeline as pl
from feedlab.collate import to_float
from feedlab.doctor import guard
from feedlab.doctor.guard import DEFAULT_DEADLINE_S
from feedlab.doctor.script import run_script
from feedlab.doctor.wrap import batch_len
from feedlab.errors import cli_errors, leave_threads, seconds, strict_json

from .search import tune

PROG = "python -m feedlab.tuner"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loader", default=None, help="pkg.mod:function returning your DataLoader")
    ap.add_argument("--step", default=None, help="pkg.mod:function(batch) running your training step")
    ap.add_argument("--script", type=Path, default=None, help="your training script (its arguments after --)")
    ap.add_argument("--data", type=Path, default=None, help="a data set feedlab reads (feedlab's own pipeline)")
    ap.add_argument("--format", default="auto", help="with --data: the storage format (auto: guessed)")
    ap.add_argument("--batch-size", type=int, default=64, help="with --data: the batch size (never changed)")
    ap.add_argument("--num-workers", type=int, default=0, help="with --data: the start's workers")
    ap.add_argument("--model", default="none", help="with --data: the training step's model (never changed)")
    ap.add_argument("--budget", type=seconds, default=60.0, help="seconds of measured passes (default 60)")
    ap.add_argument("--epochs", type=int, default=1, help="epochs your job runs (> 1: persistent workers tried)")
    ap.add_argument("--max-workers", type=int, default=None, help="most workers or threads to try")
    ap.add_argument("--batches", type=int, default=16, help="with --script: batches to run your script for")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--deadline", type=seconds, default=DEFAULT_DEADLINE_S, help="seconds to wait for make_loader(), "
                    "one batch or one step before giving up")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    return ap


def load_callable(ref: str, flag: str, limit_s: float | None = None):
    """``package.module:function`` for ``--loader``/``--step``, one line naming this command where it is wrong
    (:func:`feedlab.doctor.guard.load_callable`)."""
    return guard.load_callable(ref, flag, PROG, limit_s)


def _from_data(args):
    fmt = formats.guess_format(args.data) if args.format == "auto" else args.format
    spec = pl.PipelineSpec(format=fmt, batch_size=args.batch_size, num_workers=args.num_workers, model=args.model,
                           transform="default")
    why = [p for p in spec.problems() if "pin_memory" not in p]
    if why:
        raise SystemExit(f"{PROG}: error: {'; '.join(why)}")
    ds = pl.open_dataset(args.data, spec)
    step = None
    if args.model != "none":
        device = pl.resolve_device(args.device)
        model, loss_fn, opt = pl.make_training(pl.resolve_model_name(args.model, device), device)

        def step(batch):   # the one training step, as feedlab's own loop runs it (uint8 made float on the device)
            x, y = (batch[0], batch[1]) if isinstance(batch, (list, tuple)) else (batch, None)
            pl.train_step(model, opt, to_float(x, device), None if y is None else to_float(y, device), loss_fn)
    return (lambda: pl.make_loader(ds, spec)), step


def _from_script(args, script_args):
    say = (lambda m: None) if args.json else (lambda m: print(f"  … {m}", file=sys.stderr, flush=True))
    # the command line's run is watched from a second process, as the doctor's is (doctor.script_watch): a script
    # that ignores SIGTERM, or never gives its loader's batches back, is still ended, its temporaries with it
    summary, loader = run_script(args.script, script_args, max_batches=max(args.batches, 4),
                                 deadline_s=args.deadline, log=say, report=_script_ended,
                                 watch=getattr(args, "watched", False), who="the tuner")
    per = summary.get("step_s_per_sample")
    step = None
    if per:
        def step(batch, _t=float(per), _B=loader.batch_size or 1):   # the script's step, as it ran: a wait
            time.sleep(_t * (batch_len(batch) or _B))
    return (lambda: loader), step, summary


def _script_ended(summary: dict | None, why: str) -> int:
    """The script was ended before its loader could be tuned (the deadline, a signal it ignored): one line."""
    print(f"{PROG}: error: {why}", file=sys.stderr, flush=True)
    return 2


#: set by ``python -m feedlab.doctor --tune`` for the tuner it starts: the command the user typed, which the
#: tuner's lines then name (attack53 M05: they said "python -m feedlab.tuner: error:")
PROG_ENV = "FEEDLAB_TUNER_PROG"


def main(argv: list[str] | None = None) -> int:
    global PROG
    PROG = os.environ.pop(PROG_ENV, "").strip() or PROG
    with cli_errors(PROG):
        rc = _main(argv)
    return leave_threads(rc, PROG)   # a thread your code left would hold the exit for ever (attack61 F2)


def _main(argv: list[str] | None = None) -> int:
    ap = parser()
    watched = argv is None   # the command line: a --script run is watched from outside (doctor.script_watch)
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args = argv[argv.index("--") + 1:] if "--" in argv else []
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.watched = watched
    given = [f for f, v in (("--loader", args.loader), ("--script", args.script), ("--data", args.data)) if v]
    if len(given) != 1:
        ap.error("give one of --loader pkg.mod:make_loader, --script train.py or --data DIR")
    if args.step and not args.loader:
        ap.error("--step goes with --loader pkg.mod:make_loader")
    if script_args and not args.script:
        ap.error("arguments after -- are your script's: give --script train.py")
    if args.budget <= 0 or args.epochs < 1 or args.deadline <= 0 or args.batches < 1:
        ap.error("--budget and --deadline must be > 0, --epochs and --batches >= 1")
    notes = []
    if args.loader:
        make = load_callable(args.loader, "--loader", args.deadline)
        step = load_callable(args.step, "--step", args.deadline) if args.step else None
    elif args.script:
        make, step, _summary = _from_script(args, script_args)
        notes.append("your script's step is stood in for by a wait of its measured time (it uses no CPU)")
    else:
        if not args.data.is_dir():
            ap.error(f"--data {args.data}: no such folder")
        make, step = _from_data(args)
    log = (lambda m: None) if args.json else (lambda m: print(f"  … {m}", file=sys.stderr, flush=True))
    res = tune(make, step, args.budget, device=pl.resolve_device(args.device), epochs=args.epochs,
               deadline_s=args.deadline, max_workers=args.max_workers, log=log)
    res.notes += notes
    print(strict_json(res.summary()) if args.json else res.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
