"""``python -m data_prep sr|classify|pack|verify``: see ``--help`` of each."""

from __future__ import annotations

import argparse
import json
import sys
import time

from feedlab import procgroup
from feedlab.errors import seconds_or_zero
from feedlab.paths import outside_figures

from .errors import DataPrepError


def _default_data(name: str) -> str:
    try:
        from feedlab import paths
        return str(paths.DATA_DIR / name)
    except ImportError:
        return f"data/{name}"


def build_parser() -> argparse.ArgumentParser:
    from feedlab.formats import PACKABLE

    p = argparse.ArgumentParser(prog="python -m data_prep", description="Build and pack feedlab's data sets.")
    sub = p.add_subparsers(dest="cmd", required=True)

    sr = sub.add_parser("sr", help="DIV2K-style SR patch pairs (hr/ + lr/ PNGs)")
    sr.add_argument("--out", default=None, help="output folder (default: <data>/sr<patch>)")
    sr.add_argument("--patch", type=int, default=64, help="HR patch side in pixels (default 64)")
    sr.add_argument("--scale", type=int, default=2, help="downscale factor for LR (default 2)")
    sr.add_argument("--count", type=int, default=4096, help="number of pairs (default 4096)")
    sr.add_argument("--source", default=None, help="folder of photos (default: photos bundled with "
                    "scikit-image, scikit-learn, matplotlib)")
    sr.add_argument("--seed", type=int, default=0)
    sr.add_argument("--flip", action="store_true", help="mirror half of the patches at random")
    sr.add_argument("--skip-bad", action="store_true", help="skip unreadable images (counted) instead of failing")
    sr.add_argument("--force", action="store_true", help="--out may be a folder that is not an SR set: the "
                    "set is added beside its files (none of them is removed)")
    sr.add_argument("--pack", default=None, metavar="FORMATS",
                    help=f"then pack these formats (comma list or 'all': {', '.join(PACKABLE)})")

    cl = sub.add_parser("classify", help="ImageFolder of JPEGs of varying sizes")
    cl.add_argument("--out", default=None, help="output folder (default: <data>/cls)")
    cl.add_argument("--source", default=None, help="folder of class sub-folders, or of images (class = image)")
    cl.add_argument("--classes", type=int, default=None, help="number of classes (default 4 bundled, all from --source)")
    cl.add_argument("--per-class", type=int, default=128)
    cl.add_argument("--min-size", type=int, default=160)
    cl.add_argument("--max-size", type=int, default=512)
    cl.add_argument("--quality", type=int, default=90)
    cl.add_argument("--seed", type=int, default=0)
    cl.add_argument("--skip-bad", action="store_true")
    cl.add_argument("--force", action="store_true", help="--out may be a folder that is not a classification "
                    "set: the set is added beside its files (none of them is removed)")

    pk = sub.add_parser("pack", help="write storage formats beside the PNGs of an SR set")
    pk.add_argument("root")
    pk.add_argument("--to", default="all", help=f"comma list or 'all' ({', '.join(PACKABLE)})")
    pk.add_argument("--chunk-len", type=int, default=None, help="zarr: samples per chunk (default 128)")
    pk.add_argument("--engine", choices=["local", "ray"], default="local",
                    help="decode the PNGs here (local) or in parallel on a local Ray (needs the ray extra)")

    vf = sub.add_parser("verify", help="check every packed sample bit-exact against the PNGs")
    vf.add_argument("root")
    vf.add_argument("--formats", default=None, help="comma list (default: every packed format)")
    vf.add_argument("--timeout", type=seconds_or_zero, default=None, metavar="S",
                    help="give up when one sample takes S seconds (default 120; 0: wait for ever)")
    return p


def main(argv: list[str] | None = None) -> int:
    from feedlab.errors import deadlines_fired, leave_stuck

    fired = deadlines_fired()
    rc = _main(argv)
    if rc:
        leave_stuck(rc, since=fired)  # a read that never returned (zarr's IO thread) must not hold the exit
    return rc


def _main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from feedlab import paths
    from feedlab.errors import FormatError, one_line

    from . import build_cls, build_sr, pack, verify

    flag, where = ("--out", args.out) if args.cmd in ("sr", "classify") else ("ROOT", getattr(args, "root", None))
    try:   # a ~ that cannot be expanded: one line, never a folder named ~user in the current one (attack57 W1)
        for why in paths.env_problems() if where is None else []:   # the default folder is under FEEDLAB_DATA
            if why.startswith("FEEDLAB_DATA"):
                raise ValueError(why)
        if where is not None:
            where = paths.user_path(where, flag)
            setattr(args, "out" if flag == "--out" else "root", where)
    except ValueError as exc:
        print(f"data_prep {args.cmd}: error: {exc}", file=sys.stderr)
        return 2
    if args.cmd != "verify" and where is not None and outside_figures(where, flag):   # never into a record
        print(f"data_prep {args.cmd}: error: {outside_figures(where, flag)}", file=sys.stderr)
        return 2
    if args.cmd == "pack" and args.chunk_len is not None and args.chunk_len < 1:
        print(f"data_prep pack: error: --chunk-len must be >= 1, got {args.chunk_len}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:   # SIGTERM and SIGHUP unwind like SIGINT: every temporary removed; the scope closes INSIDE this try, so a
        with procgroup.signals_raise():   # signal it holds and raises on its way out is stopped here too (one line)
            _run(args, build_cls, build_sr, pack, verify)
    except DataPrepError as exc:
        print(f"data_prep {args.cmd}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (OSError, FormatError, json.JSONDecodeError, ValueError) as exc:
        print(f"data_prep {args.cmd}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        return procgroup.stopped(f"data_prep {args.cmd}", exc, "no partial output left")
    print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


def _run(args, build_cls, build_sr, pack, verify) -> None:
    """The command itself (inside :func:`_main`'s signal scope)."""
    if args.cmd == "sr":
        out = args.out or _default_data(f"sr{args.patch}")
        build_sr(out, args.patch, args.scale, args.count, source=args.source, seed=args.seed,
                 flip=args.flip, skip_bad=args.skip_bad, force=args.force)
        if args.pack:
            pack(out, args.pack)
    elif args.cmd == "classify":
        out = args.out or _default_data("cls")
        classes = args.classes if args.classes is not None else (4 if args.source is None else None)
        build_cls(out, classes, args.per_class, min_size=args.min_size, max_size=args.max_size,
                  seed=args.seed, source=args.source, quality=args.quality, skip_bad=args.skip_bad,
                  force=args.force)
    elif args.cmd == "pack":
        pack(args.root, args.to, chunk_len=args.chunk_len, engine=args.engine)
    elif args.cmd == "verify":
        kw = {} if args.timeout is None else {"stall_s": args.timeout}
        verify(args.root, args.formats, **kw)


if __name__ == "__main__":
    sys.exit(main())
