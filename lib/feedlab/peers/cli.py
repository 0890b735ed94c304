"""``python -m feedlab.bench --peer NAME``: one contender of notebook 13 on one data set."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from feedlab.paths import DATA_DIR, default_cls_root, default_sr_root

from . import names
from .base import Source


def add_arguments(ap) -> None:
    ap.add_argument("--peer", default=None, choices=names(),
                    help="time one contender of notebook 13 instead (with --kind, --data, --batch-size, "
                         "--workers, --epochs, --warmup)")
    ap.add_argument("--kind", default="sr", choices=["sr", "cls"], help="--peer: SR patches or the JPEG set")
    ap.add_argument("--samples", type=int, default=None, help="--peer: first N samples (default all)")
    ap.add_argument("--cold", action="store_true", help="--peer: also time windows whose every epoch follows an eviction of its files")


def main_peer(args) -> int:
    from .measure import run_peer
    from .report import rows_frame, table

    root = args.data or (default_sr_root("quick") if args.kind == "sr" else default_cls_root("quick"))
    build = (f"python -m data_prep sr --out {root} --pack npy_mmap" if args.kind == "sr"
             else f"python -m data_prep classify --out {root}")
    if not Path(root).exists():
        print(f"--data {root}: no such data set; build it with `{build}`", file=sys.stderr)
        return 2
    try:
        source = Source(args.kind, root, args.samples)
    except (FileNotFoundError, ValueError) as exc:
        print(f"--data {root}: {exc}", file=sys.stderr)
        return 2
    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    res, info = run_peer(args.peer, source, DATA_DIR / "peers", args.batch_size, [args.workers], warmup=args.warmup,
                         repeats=args.epochs, cold=args.cold, device=device,
                         stall_s=getattr(args, "timeout", None) or None)  # --timeout: a peer without progress
    tab = table([info], rows_frame(res))
    row = tab.iloc[-1].to_dict()
    if args.json:
        print(json.dumps({"info": info, "row": row}, default=str))
    elif not info["available"]:
        print(f"{info['label']}: unavailable — {info['reason']}")
    elif not row.get("check_ok"):
        print(f"{info['label']}: output check failed — {check_words(info.get('check'))}")
    elif not row.get("run_ok"):
        print(f"{info['label']}: run failed — {row.get('error')}")
    else:
        print(f"{info['label']} · {args.kind} · {source.n} samples · batch {args.batch_size} · "
              f"{args.workers} workers ({info['parallelism']}) · shuffle: {info['shuffle']}")
        print(f"  {row['samples_per_s']:,.0f} samples/s ({row.get('spread') or 'spread'} {row['q25']:,.0f}–"
              f"{row['q75']:,.0f}; {args.epochs} timed windows of >= 50 batches and >= 1 s, each whole epochs"
              f" after {args.warmup} warm-up) · first batch {row['first_batch_s'] * 1e3:.0f} ms · peak RSS "
              f"{row['peak_rss_mib']:.0f} MiB · CPU {100 * row['cpu_saturation']:.0f}% busy")
        print(f"  ran in {info.get('interpreter', '')}" + (f" ({', '.join(f'{k} {v}' for k, v in info['versions'].items())})"
                                                          if info.get("versions") else ""))
        print(f"  converted in {info['convert_s']:.2f} s to {info['bytes_on_disk'] / 2**20:.1f} MiB "
              f"({info.get('convert_note', '')}); output check: ok ({info['check']['method']})")
    ok = info["available"] and row.get("check_ok") and row.get("run_ok")
    if not ok and info["available"] and shm_short(info.get("check")):
        return 2   # out of /dev/shm: the machine's set-up, said with its fix (as bench's own loaders say it)
    return 0 if ok else (3 if not info["available"] else 1)


def check_words(check) -> str:
    """A failed output check in words: its error once (a re-raised error's doubled "RuntimeError: " said once)
    and the fix where the check named one; never the record's dict (attack54 W3)."""
    if not isinstance(check, dict):
        return str(check)
    err = str(check.get("error") or check.get("reason") or "no reason recorded")
    while True:
        head, sep, rest = err.partition(": ")
        if sep and rest.startswith(head + ": "):
            err = rest
        else:
            break
    return err + (f"; {check['fix']}" if check.get("fix") else "")


def shm_short(check) -> bool:
    """Whether a failed check ran out of shared memory (/dev/shm)."""
    err = str(check.get("error", "")) if isinstance(check, dict) else ""
    return "shared memory" in err.lower() or "SharedMemoryError" in err or "No space left on device" in err
