"""A quick loader benchmark without a notebook.

    python -m feedlab.bench --data data/sr64 --format lmdb --batch-size 128 --num-workers 2 \
        --collate fast [--pin-memory] [--epochs 3] [--model none|srcnn|srcnn_small|resnet] [--json]

The flags are the pipeline vocabulary of :mod:`feedlab.pipeline` (one per field of
``PipelineSpec``). One untimed warm-up epoch (page cache, worker start-up paths,
allocator), then ``--epochs`` timed epochs; reports the median and interquartile
range of samples/s over the timed epochs, the data-wait time and the parameters.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from feedlab import files
from feedlab import pipeline as pl
from feedlab.doctor.script_watch import DeadlineWire, fork_watched, stuck_line, watch_deadline
from feedlab.errors import cli_errors, deadline, seconds_or_zero, strict_json
from feedlab.formats import sr_formats
from feedlab.monitor import CpuMonitor
from feedlab.paths import default_sr_root, outside_figures
from feedlab.peers.cli import add_arguments as add_peer_arguments
from feedlab.peers.cli import main_peer
from feedlab.scale import ranks as scale_ranks
from feedlab.timing import run_epoch, timer_overhead_per_batch
from feedlab.trace import trace_run

#: seconds without a batch before bench gives up (``--timeout``; 0: wait for ever)
STALL_S = 300.0


def bench(data: Path, spec: pl.PipelineSpec, epochs: int = 3, warmup: int = 1, max_batches: int | None = None,
          trace: Path | None = None, verify: bool = True, stall_s: float | None = STALL_S,
          wire_fd: int | None = None) -> dict:
    """Time ``spec`` over ``data``; a stall of ``stall_s`` seconds without a batch (a sample
    that never arrives) raises ``DeadlineError`` naming the data set and the batch. ``wire_fd``: the
    command line's watching process (:func:`feedlab.doctor.script_watch.watch_deadline`) is told the
    deadline's due time, so a read blocked inside C code, which SIGALRM cannot interrupt, is ended too."""
    seen = [0]

    def what() -> str:
        return f"bench {spec.format} under {data}: batch {seen[0]} did not arrive"

    with deadline(stall_s, what, "a sample that hangs? python -m data_prep verify DATA; --timeout 0 waits") as d:
        def tick(_i, _batch):
            seen[0] += 1
            d.reset()

        wire = DeadlineWire(wire_fd, d, what) if wire_fd is not None else None
        if wire is not None:
            wire.start()
        out = _bench(data, spec, epochs, warmup, max_batches, trace, verify, tick, d)
        if wire is not None:
            wire.done()
        return out


def _stuck(limit: float, what: str, kids: list[int]) -> int:
    """The watching process's one line for a run that did not answer its deadline (``--timeout``)."""
    print(stuck_line("python -m feedlab.bench", what, limit, kids, option="--timeout"), file=sys.stderr, flush=True)
    return 2


def _manifest_kind(data) -> str | None:
    """The ``kind`` a data set's manifest.json records (``sr``, ``cls``), None where it cannot be read."""
    try:   # load_json: a manifest nested too deeply is a ValueError too, not a RecursionError (attack54 D17)
        return files.load_json(Path(data) / "manifest.json", limit=1 << 22).get("kind")
    except (OSError, ValueError, AttributeError):
        return None


def _bench(data, spec, epochs, warmup, max_batches, trace, verify, tick, d) -> dict:
    import torch


    if not Path(data).exists():
        raise SystemExit(f"--data {data}: no such data set; build it with "
                         f"`python -m data_prep sr --out {data}` then `python -m data_prep pack {data} --to all`")
    if not Path(data).is_dir():   # a sample file: packing it would loop (attack58 W8)
        raise SystemExit(f"python -m feedlab.bench: error: --data {data} is a file, not a data set folder: give the "
                         "folder data_prep built (the one holding manifest.json)")
    device = pl.resolve_device(spec.device)
    spec = spec.replace(device=device)
    try:
        dataset = pl.open_dataset(data, spec)
    except FileNotFoundError as exc:
        if _manifest_kind(data) == "cls":   # packing it would not help: pack takes SR sets
            raise SystemExit(f"python -m feedlab.bench: error: --data {data} is a classification set (an ImageFolder; "
                             "its manifest.json says kind cls), and bench reads SR sets: give --peer torch_stock "
                             f"--kind cls, or `python -m feedlab.doctor --data {data}`") from None
        if not (Path(data) / "manifest.json").exists():   # not a set data_prep built: packing cannot help (D6)
            raise SystemExit(f"python -m feedlab.bench: error: --data {data} is not a data set data_prep built (no "
                             f"manifest.json): build one from its images with `python -m data_prep sr --source "
                             f"{data} --out NEW_FOLDER --pack {spec.format}`, or run the doctor on the images as "
                             f"they are: `python -m feedlab.doctor --data {data}`") from None
        raise SystemExit(f"python -m feedlab.bench: error: {exc}; pack it with "
                         f"`python -m data_prep pack {data} --to {spec.format}`") from None
    getattr(dataset, "dataset", dataset).verify = bool(verify)   # per-sample checksums (on by default)
    loader = pl.make_loader(dataset, spec)
    model, _loss, optimizer = pl.make_training(spec.model, device)
    d.reset()
    for _ in range(warmup):
        run_epoch(loader, model, device, optimizer, max_batches=max_batches, on_batch=tick)
    runs, cpu_sat = [], []
    for _ in range(epochs):
        with CpuMonitor() as cpu:
            runs.append(run_epoch(loader, model, device, optimizer, max_batches=max_batches, on_batch=tick))
        cpu_sat.append(cpu.summary()["cpu_saturation"])
    rates = np.array([r.samples_per_s for r in runs])
    q25, med, q75 = np.percentile(rates, [25, 50, 75])
    pinned = bool(spec.pin_memory and torch.cuda.is_available() and device.startswith("cuda"))
    out = {
        "data": str(data), **spec.as_dict(), "pin_memory": pinned, "pin_memory_requested": bool(spec.pin_memory),
        "epochs": epochs, "warmup_epochs": warmup, "verify": bool(verify),
        "samples_per_s": float(med), "samples_per_s_q25": float(q25), "samples_per_s_q75": float(q75),
        "samples_per_s_runs": [float(x) for x in rates],
        "batches": int(runs[-1].batches), "samples": int(runs[-1].samples),
        "data_wait_s": float(np.median([r.data_wait_s for r in runs])),
        "data_wait_fraction": float(np.median([r.data_wait_fraction for r in runs])),
        "first_batch_s": float(np.median([r.first_batch_s for r in runs])),
        "cpu_saturation": float(np.median(cpu_sat)),
    }
    overhead = timer_overhead_per_batch(device)
    batch_s = float(np.median([r.wall_s / max(1, r.batches) for r in runs]))
    out["timer_overhead_s_per_batch"] = overhead
    out["timer_overhead_fraction"] = overhead / batch_s if batch_s > 0 else float("nan")
    if trace is not None:
        d.reset()
        trace_run(dataset, out, Path(trace), batch_size=spec.batch_size, workers=spec.num_workers,
                  max_batches=max_batches or 20, loader=pl.make_loader(dataset, spec))  # the timed kind, traced
    return out


def main(argv: list[str] | None = None) -> int:
    with cli_errors("python -m feedlab.bench"):
        if argv is None:   # the command line: its workers share one multiprocessing folder, removed at its exit
            files.mp_folder_owned()
        return _main(argv, watched=argv is None)   # the command line: watched from a second process


def _main(argv: list[str] | None = None, watched: bool = False) -> int:
    ap = argparse.ArgumentParser(prog="python -m feedlab.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=None, help="a data set built by data_prep "
                    "(default: the embedded data/sr64)")
    pl.add_arguments(ap, pl.PipelineSpec(batch_size=128, num_workers=2), formats=sr_formats())
    ap.add_argument("--workers", dest="num_workers", type=int, help=argparse.SUPPRESS)  # the flag's old name
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs (after one warm-up)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed warm-up epochs")
    ap.add_argument("--max-batches", type=int, default=None, help="cap batches per epoch")
    ap.add_argument("--trace", type=Path, default=None, help="write a Chrome trace JSON of a 20-batch run")
    ap.add_argument("--no-verify", action="store_true", help="skip the per-sample checksum check on read "
                    "(on by default; see the checksum cost in notes)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--timeout", type=seconds_or_zero, default=STALL_S, metavar="S",
                    help=f"give up when no batch arrives for S seconds (default {STALL_S:g}; 0: wait for ever)")
    ap.add_argument("--ranks", type=int, default=None, help="launch R ranks with torch.distributed.run, each "
                    "with its own loader and share of the cores (feedlab.scale.ranks)")

    add_peer_arguments(ap)
    args = ap.parse_args(argv)
    spec = pl.spec_from_args(args)
    why = [w for w in spec.problems() if "pin_memory" not in w]  # pinning without CUDA is reported, not refused
    if why or args.epochs < 1:
        ap.error("; ".join(why) or "--epochs must be >= 1")
    if args.ranks is not None and args.ranks < 1:
        ap.error("--ranks must be >= 1")
    if args.timeout < 0:
        ap.error("--timeout must be >= 0 (0: wait for ever)")
    if (args.max_batches is not None and args.max_batches < 1) or args.warmup < 0:
        ap.error("--max-batches must be >= 1 (or left out), --warmup >= 0")
    if args.trace is not None and outside_figures(args.trace, "--trace"):   # never over a committed record
        ap.error(outside_figures(args.trace, "--trace"))
    if args.trace is not None and files.write_target_problem(args.trace, "--trace"):   # before the measuring
        ap.error(files.write_target_problem(args.trace, "--trace"))   # (attack60 O1: 21 s thrown away)
    peer_only = [f for f, given in (("--kind", args.kind != "sr"), ("--samples", args.samples is not None),
                                    ("--cold", args.cold)) if given]
    if peer_only and not args.peer:   # attack60 W7: dropped without a word
        ap.error(f"{', '.join(peer_only)} time(s) a contender of notebook 13: give --peer NAME with it")
    if args.peer and args.samples is not None and args.samples < 1:   # W8: named, not "output check failed"
        ap.error(f"--samples {args.samples}: the first N samples, N >= 1 (or left out: all)")
    if args.peer:
        args.workers = args.num_workers  # the peers' command line says workers
        return main_peer(args)
    if args.data is None:
        args.data = default_sr_root("quick")
    if args.ranks is not None:
        out = scale_ranks.launch(args.ranks, args.data, spec, args.epochs, args.warmup, max_batches=args.max_batches,
                     timeout_s=None, stall_s=args.timeout or None)  # --timeout: a rank without a batch
        print(strict_json(out) if args.json else scale_ranks.render(out))
        return 0
    fd = None
    if watched and args.timeout:   # a read blocked inside C code (HDF5, LMDB) cannot answer SIGALRM: watched
        pid, fd = fork_watched()
        if pid:
            watch_deadline(pid, fd, args.timeout, lambda what, kids: _stuck(args.timeout, what, kids),
                           first=f"bench {spec.format} under {args.data}: opening it")
    out = bench(args.data, spec, args.epochs, args.warmup, args.max_batches, args.trace, verify=not args.no_verify,
                stall_s=args.timeout, wire_fd=fd)
    if args.json:
        print(strict_json(out))
        return 0
    print(f"{out['format']} · batch {out['batch_size']} · {out['num_workers']} workers · "
          f"{out['collate']} collate · model {out['model']} on {out['device']}")
    print(f"  {out['samples_per_s']:.0f} samples/s (IQR {out['samples_per_s_q25']:.0f}–"
          f"{out['samples_per_s_q75']:.0f}, {out['epochs']} epochs) · data wait "
          f"{100 * out['data_wait_fraction']:.0f}% of wall · CPU {100 * out['cpu_saturation']:.0f}% busy")
    print(f"  timer overhead {1e6 * out['timer_overhead_s_per_batch']:.1f} µs per batch "
          f"({100 * out['timer_overhead_fraction']:.3f}% of the median batch time)")
    if out["pin_memory_requested"] and not out["pin_memory"]:
        print("  pin_memory requested but there is no CUDA device: not applied")
    return 0


if __name__ == "__main__":
    sys.exit(main())
