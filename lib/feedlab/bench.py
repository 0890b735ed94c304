"""A quick loader benchmark without a notebook.

    python -m feedlab.bench --data data/sr64 --format lmdb --batch-size 128 --workers 2 \
        --collate fast [--pin-memory] [--epochs 3] [--model none|srcnn|resnet] [--json]

One untimed warm-up epoch (page cache, worker start-up paths, allocator), then
``--epochs`` timed epochs; reports the median and interquartile range of
samples/s over the timed epochs, the data-wait time and the parameters.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def make_collate(name: str):
    from feedlab import collate

    if name == "default":
        return collate.totensor_collate
    if name == "fast":
        return collate.FastCollate()
    if name == "fast_cl":
        return collate.FastCollate(memory_format="channels_last")
    raise SystemExit(f"--collate {name!r}: choose default, fast or fast_cl")


def make_loader(dataset, batch_size: int, workers: int, collate_name: str, pin_memory: bool,
                shuffle: bool = True, seed: int = 0, prefetch_factor: int | None = None,
                persistent_workers: bool = False):
    import torch
    from torch.utils.data import DataLoader

    g = torch.Generator()
    g.manual_seed(seed)
    kw = {}
    if workers > 0:
        kw["prefetch_factor"] = prefetch_factor or 2
        kw["persistent_workers"] = persistent_workers
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, num_workers=workers,
                      collate_fn=make_collate(collate_name), generator=g,
                      pin_memory=pin_memory and torch.cuda.is_available(), **kw)


def bench(data: Path, fmt: str, batch_size: int, workers: int, collate_name: str = "default",
          pin_memory: bool = False, epochs: int = 3, warmup: int = 1, model_name: str = "none",
          device: str = "auto", max_batches: int | None = None, trace: Path | None = None,
          verify: bool = True) -> dict:
    import torch

    from feedlab.formats import open_dataset
    from feedlab.monitor import CpuMonitor
    from feedlab.timing import run_epoch, timer_overhead_per_batch

    if not Path(data).exists():
        raise SystemExit(f"--data {data}: no such data set; build it with "
                         f"`python -m data_prep sr --out {data}` then `python -m data_prep pack {data} --to all`")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dataset = open_dataset(data, fmt)
    except FileNotFoundError as exc:
        raise SystemExit(f"python -m feedlab.bench: error: {exc}; pack it with "
                         f"`python -m data_prep pack {data} --to {fmt}`") from None
    dataset.verify = bool(verify)
    loader = make_loader(dataset, batch_size, workers, collate_name, pin_memory)
    model = optimizer = None
    if model_name != "none":
        from feedlab.models import make_model

        model = make_model(model_name).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    for _ in range(warmup):
        run_epoch(loader, model, device, optimizer, max_batches=max_batches)
    runs = []
    cpu_sat = []
    tracer = None
    if trace is not None:
        try:
            from feedlab.trace import TraceRecorder  # noqa: F401
            tracer = trace
        except ImportError:
            print("--trace: feedlab.trace is not available in this build", file=sys.stderr)
    for _ in range(epochs):
        with CpuMonitor() as cpu:
            runs.append(run_epoch(loader, model, device, optimizer, max_batches=max_batches))
        cpu_sat.append(cpu.summary()["cpu_saturation"])
    rates = np.array([r.samples_per_s for r in runs])
    q25, med, q75 = np.percentile(rates, [25, 50, 75])
    out = {
        "data": str(data), "format": fmt, "batch_size": batch_size, "num_workers": workers,
        "collate": collate_name, "pin_memory": bool(pin_memory and torch.cuda.is_available()),
        "pin_memory_requested": bool(pin_memory), "model": model_name, "device": device,
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
    if tracer is not None:
        from feedlab import trace as trace_mod

        if hasattr(trace_mod, "trace_run"):
            trace_mod.trace_run(dataset, out, Path(tracer), batch_size=batch_size, workers=workers,
                                collate=make_collate(collate_name), max_batches=max_batches or 20)
            out["trace"] = str(tracer)
    return out


def main(argv: list[str] | None = None) -> int:
    from feedlab.errors import cli_errors

    with cli_errors("python -m feedlab.bench"):
        return _main(argv)


def _main(argv: list[str] | None = None) -> int:
    from feedlab.formats import SR_FORMATS

    ap = argparse.ArgumentParser(prog="python -m feedlab.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=None, help="a data set built by data_prep "
                    "(default: the embedded data/sr64)")
    ap.add_argument("--format", default="png", choices=sorted(SR_FORMATS), help="storage format")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--workers", type=int, default=2, help="DataLoader num_workers")
    ap.add_argument("--collate", default="default", choices=["default", "fast", "fast_cl"],
                    help="default = ToTensor + default_collate; fast = feedlab's uint8 collate")
    ap.add_argument("--pin-memory", action="store_true")
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs (after one warm-up)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed warm-up epochs")
    ap.add_argument("--max-batches", type=int, default=None, help="cap batches per epoch")
    ap.add_argument("--model", default="none", choices=["none", "srcnn", "resnet"])
    ap.add_argument("--device", default="auto", help="cpu, cuda or auto")
    ap.add_argument("--trace", type=Path, default=None, help="write a Chrome trace JSON of a 20-batch run")
    ap.add_argument("--no-verify", action="store_true", help="skip the per-sample checksum check on read "
                    "(on by default; see the checksum cost in notes)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    from feedlab.peers.cli import add_arguments as add_peer_arguments

    add_peer_arguments(ap)
    args = ap.parse_args(argv)
    if args.batch_size < 1 or args.workers < 0 or args.epochs < 1:
        ap.error("--batch-size and --epochs must be >= 1, --workers >= 0")
    if (args.max_batches is not None and args.max_batches < 1) or args.warmup < 0:
        ap.error("--max-batches must be >= 1 (or left out), --warmup >= 0")
    if args.peer:
        from feedlab.peers.cli import main_peer

        return main_peer(args)
    if args.data is None:
        from feedlab.paths import default_sr_root

        args.data = default_sr_root("quick")
    out = bench(args.data, args.format, args.batch_size, args.workers, args.collate,
                args.pin_memory, args.epochs, args.warmup, args.model, args.device,
                args.max_batches, args.trace, verify=not args.no_verify)
    if args.json:
        from feedlab.errors import strict_json

        print(strict_json(out))
    else:
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
