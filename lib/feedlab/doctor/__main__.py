"""``python -m feedlab.doctor`` (and ``feedlab-doctor``): the bottleneck doctor's command line.

    python -m feedlab.doctor --data data/sr64 [--format png] [--collate totensor] [--batch-size 64]
        [--model none] [--device auto] [--max-workers 2] [--num-workers N] [--repeats 3] [--json] [--trace out.json]
    python -m feedlab.doctor --data ~/photos            # any folder of images, any nesting, no labels
    python -m feedlab.doctor --loader pkg.mod:make_loader [--step pkg.mod:train_step]

Each stage is timed alone (read warm and cold, decode, transform, collate in the main
process and inside a worker, the worker → main hand-over on both sides, the loop's
copy to the device, the model step at the threads the loop gives it), the end-to-end
rate is predicted for 0…``--max-workers`` workers from those costs alone and then
measured, and the report gives the prediction's error, the bounding stage and the
single changes predicted to pay (those measured slower in the same run are not
advised). ``--loader`` diagnoses your own DataLoader instead: a function returning
it (and optionally a training step ``step(batch)``), stages measured by wrapping it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from feedlab import pipeline as P

from .report import json_default, render


def _parser() -> argparse.ArgumentParser:
    from feedlab.formats import FORMATS

    ap = argparse.ArgumentParser(prog="python -m feedlab.doctor", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=None, help="a data set built by data_prep, an ImageFolder, or "
                    "any folder of images (default: the embedded SR set)")
    ap.add_argument("--format", default="auto", choices=["auto", *FORMATS],
                    help="storage format (auto: guessed from --data)")
    P.add_arguments(ap, P.PipelineSpec(transform="default"), skip=("format", "num_workers", "prefetch_factor",
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
    return ap


def _load_callable(ref: str, flag: str):
    import importlib

    mod, _, name = ref.partition(":")
    if not mod or not name:
        raise SystemExit(f"{flag} {ref!r}: write it as package.module:function")
    try:
        fn = getattr(importlib.import_module(mod), name)
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"{flag} {ref!r}: cannot import it ({exc}); is its folder on PYTHONPATH?") from None
    if not callable(fn):
        raise SystemExit(f"{flag} {ref!r}: not callable")
    return fn


def _user_loader(args) -> int:
    from .user import diagnose_loader, render_user

    loader = _load_callable(args.loader, "--loader")()
    step = _load_callable(args.step, "--step") if args.step else None
    rep = diagnose_loader(loader, step=step, batches=args.batches, repeats=args.repeats,
                          device=P.resolve_device(args.device))
    from feedlab.errors import strict_json

    print(strict_json(rep, default=json_default) if args.json else render_user(rep))
    return 0


def main(argv: list[str] | None = None) -> int:
    from feedlab.errors import cli_errors

    with cli_errors("python -m feedlab.doctor"):
        return _main(argv)


def _main(argv: list[str] | None = None) -> int:
    from feedlab import formats

    from .diagnosis import diagnose
    from .measure import Budget, Doctor

    ap = _parser()
    args = ap.parse_args(argv)
    if args.batch_size < 1 or args.repeats < 1 or (args.max_workers is not None and args.max_workers < 0):
        ap.error("--batch-size and --repeats must be >= 1, --max-workers >= 0")
    if args.ranks is not None and args.ranks < 1:
        ap.error("--ranks must be >= 1")
    if args.samples < 1 or args.batches < 1 or (args.num_workers is not None and args.num_workers < 0):
        ap.error("--samples and --batches must be >= 1, --num-workers >= 0")
    if args.loader:
        return _user_loader(args)
    if args.data is None:
        from feedlab.paths import default_sr_root

        args.data = default_sr_root("quick")
    if not Path(args.data).is_dir():
        ap.error(f"--data {args.data}: no such folder (give a folder of images, or build a set with "
                 "`python -m data_prep sr --out DIR` and `python -m data_prep pack DIR --to all`)")
    fmt = formats.guess_format(args.data) if args.format == "auto" else args.format
    spec = P.spec_from_args(args, P.PipelineSpec(format=fmt)).replace(format=fmt)
    why = [p for p in spec.replace(num_workers=0).problems() if "pin_memory" not in p]
    if why:
        ap.error("; ".join(why))
    log = (lambda m: None) if args.json else (lambda m: print(f"  … {m}", file=sys.stderr, flush=True))
    budget = Budget(args.repeats, 1, args.samples, args.batches, cold=not args.no_cold)
    try:
        doc = Doctor(args.data, spec, args.max_workers, budget, log=log)
        spec = spec.replace(num_workers=doc.max_workers if args.num_workers is None else args.num_workers)
        doc.measure()
    except (FileNotFoundError, ValueError) as exc:
        raise SystemExit(f"doctor: {args.data} as {fmt}: {exc}") from None
    report = diagnose(doc, spec)
    if args.ranks is not None:
        from .ranks import advise_ranks

        report["ranks_advice"] = advise_ranks(doc.table, spec, args.ranks)
    if args.trace is not None:
        from feedlab.trace import trace_run

        trace_run(doc.split(spec.format, spec.decode_backend), report, args.trace, batch_size=spec.batch_size,
                  workers=spec.num_workers, collate=P.make_collate(spec.collate), max_batches=20,
                  model=doc.model, device=doc.device, optimizer=doc.optimizer, pin_memory=spec.pin_memory and doc.cuda)
    if args.json:
        from feedlab.errors import strict_json

        print(strict_json(report, default=json_default))  # no bare Infinity/NaN: null
    else:
        print(render(report))
        if "ranks_advice" in report:
            from .ranks import render_ranks

            print("\n".join(render_ranks(report["ranks_advice"])))
        if args.trace is not None:
            print(f"trace: {report['trace']} (open in https://ui.perfetto.dev or chrome://tracing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
