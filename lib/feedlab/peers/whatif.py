"""The doctor's ``--what-if``, measured: a sample of your data, your pipeline and each installed peer timed alike.

Run as a child of the doctor (``python -m feedlab.peers.whatif ANSWER.json < request.json``,
:func:`feedlab.doctor.whatif.run_whatif`): the peers import the doctor (feedlab's best is the doctor's
advice), so the doctor reaches the peers through a process, never an import, and kills the child's
whole process group (the peers' workers and threads with it) at its limit.

The sample (``--what-if-samples``, default :data:`~feedlab.doctor.whatif.DEFAULT_SAMPLES` raised to a
judged window) is built in a folder this module creates under ``$TMPDIR`` and removes, whatever happens:
SR pairs read through your format and decode into an ``npy_mmap`` copy, images as an ImageFolder of
links to your files (cycled where the set is smaller). Your pipeline (format, decode, collate, batch size,
workers) is timed on it by notebook 13's harness (:func:`feedlab.peers.measure.peer_epoch`: each batch to
the device as float, whole epochs in windows of at least ``MIN_TIMED_BATCHES``), its output checked as the
peers' is (:mod:`feedlab.peers.check`); each peer goes through :func:`feedlab.peers.measure.run_peer`
(conversion, output check, timed epochs; in its own venv where it has one), un-augmented as yours is.

The sides are measured interleaved (:func:`interleave`): one pass of each side a round (a fresh loader, a
warm-up epoch, one window), the order rotated each round, at least two rounds, each pass inside a
``monitor.LoadWindow``; a busy pass is measured again once, and a side busy twice is "too busy to judge"
(:func:`summarise`), so a busy window on one side cannot make a switch answer. Every
pass runs under a limit; the words and the verdicts are :mod:`feedlab.doctor.whatif`'s.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from feedlab import formats
from feedlab import peers as registry
from feedlab import pipeline as pl
from feedlab.doctor import whatif as W
from feedlab.doctor.answer import headspace
from feedlab.doctor.report import json_default
from feedlab.doctor.report_fields import Report
from feedlab.errors import DeadlineError, deadline, strict_json
from feedlab.formats.imagefolder import scan
from feedlab.formats.images import scan_images
from feedlab.like_for_like import order_of
from feedlab.monitor import LoadWindow
from feedlab.peers.base import Source
from feedlab.peers.check import verify_cls, verify_sr
from feedlab.peers.measure import MIN_TIMED_BATCHES, peer_epoch, run_peer
from feedlab.peers.remote import in_venv
from feedlab.peers.report import pixel_error
from feedlab.peers.venvs import python_for
from feedlab.results import atomic_write

LIMIT_S = 900.0     # the most one pass of a side (your pipeline, or one peer: conversion, check and timing) may take
REPEATS = W.ROUNDS  # interleaved rounds (at least 2)


class _Sample(torch.utils.data.Dataset):
    """Your dataset on the sample's items, each as the peers return it: SR ``(lr, hr)``; images
    ``(image resized to size², label, id)`` (the transform the peers' runners express, :func:`whatif.express`)."""

    def __init__(self, ds, kind: str, n: int, size: int, labels=None):
        self.ds, self.kind, self.n, self.size, self.labels = ds, kind, n, size, labels

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        s = self.ds[i % len(self.ds)] if self.kind == "sr" else self.ds[i]
        if self.kind == "sr":
            return s[0], s[1]
        img = s[0] if isinstance(s, tuple) else s
        img = np.asarray(img)
        if img.ndim == 3 and img.shape[0] in (1, 3) and img.shape[-1] not in (1, 3):
            img = img.transpose(1, 2, 0)
        from PIL import Image

        if img.shape[:2] != (self.size, self.size):
            img = np.asarray(Image.fromarray(np.ascontiguousarray(img)).resize((self.size, self.size),
                                                                                Image.BILINEAR))
        return np.ascontiguousarray(img), int(self.labels[i]), i


def build_sample(root: Path, fmt: str, decode: str, n: int, tmp: Path) -> tuple[object, list[str]]:
    """The sample as a :class:`feedlab.peers.base.Source` under ``tmp``, and notes."""
    spec = formats.get_format(fmt)
    out, notes = tmp / "sample", []
    if spec.kind == "sr":
        ds = formats.open_dataset(root, fmt, **({"decode": decode} if spec.image_codec else {}))
        if len(ds) < n:
            notes.append(f"your set holds {len(ds):,} pairs: cycled to {n:,}")
        pairs = [ds[i % len(ds)] for i in range(n)]
        (out / "npy_mmap").mkdir(parents=True)
        for j, name in enumerate(("lr", "hr")):
            np.save(out / "npy_mmap" / f"{name}.npy", np.stack([np.asarray(p[j]) for p in pairs]))
        return Source("sr", out), notes
    if spec.kind == "cls":
        _classes, files = scan(root)
        files = [(p, f"{lab:04d}") for p, lab in files]
    else:
        files = [(p, "images") for p in scan_images(root)]
    if not files:
        raise ValueError(f"{root}: no images found to sample")
    if len(files) < n:
        notes.append(f"your set holds {len(files):,} images: cycled to {n:,} (links to the same files)")
    for k in range(n):
        p, cls = files[int(k * len(files) / n)] if len(files) >= n else files[k % len(files)]
        d = out / cls
        d.mkdir(parents=True, exist_ok=True)
        os.symlink(Path(p).resolve(), d / f"{k:06d}{Path(p).suffix.lower()}")
    return Source("cls", out), notes


def _loader(root: Path, spec: pl.PipelineSpec, source, size: int):
    fs = formats.get_format(spec.format)
    if fs.kind == "sr":
        ds = formats.open_dataset(root, spec.format, **({"decode": spec.decode_backend} if fs.image_codec else {}))
        data = _Sample(ds, "sr", source.n, size)
    else:
        ds = formats.open_dataset(source.root, "images", decode=spec.decode_backend)
        data = _Sample(ds, "cls", source.n, size, labels=source.labels)
    w = spec.num_workers
    g = torch.Generator().manual_seed(0)
    return torch.utils.data.DataLoader(data, batch_size=spec.batch_size, shuffle=True, generator=g, num_workers=w,
                                       collate_fn=pl.make_collate(spec.collate), persistent_workers=w > 0)


def time_baseline(root: Path, spec: pl.PipelineSpec, source, size: int, device: str, check: bool = True) -> dict:
    """One pass of your pipeline on the sample, timed as :func:`peers.measure.time_contender` times a peer: a
    fresh loader, its output checked (``check``: the first pass), a warm-up epoch, then one window of whole
    epochs; its rate."""
    loader = _loader(root, spec, source, size)
    out = {}
    if check:
        out["check"] = verify_sr(loader, source) if source.kind == "sr" else verify_cls(loader, source, size)
        out["pixel_error"] = pixel_error(out["check"])
    peer_epoch(loader, source.kind, device, source.n)
    per_batch = -(-source.n // spec.batch_size)
    per_window = max(1, -(-MIN_TIMED_BATCHES // per_batch))
    eps = [peer_epoch(loader, source.kind, device, source.n) for _ in range(per_window)]
    if not all(e["ok"] for e in eps):
        raise ValueError(f"your pipeline returned {eps[0]['samples']} samples of {source.n} in an epoch")
    del loader
    wall = sum(e["wall_s"] for e in eps)
    return {**out, "available": True, "rate": source.n * per_window / wall, "batches": per_window * per_batch,
            "window_s": wall, "bytes_on_disk": source.source_bytes() if source.kind == "cls" else None}


def time_peer(name: str, source, work: Path, spec: pl.PipelineSpec, size: int, device: str, limit_s: float,
              stall_s: float | None, repeats: int = 1, check: bool = True) -> dict:
    """One pass of a peer through notebook 13's runner, un-augmented (conversion, the output check where
    ``check``, a warm-up, ``repeats`` windows): its info with the median warm rate, its timed window and the
    pixel error of its output check added."""
    label = f"--what-if: peer {name}"
    with deadline(None if (python_for(name) and not in_venv()) else limit_s, label,
                  "--what-if-limit S waits longer"):
        res, info = run_peer(name, source, work, spec.batch_size, [spec.num_workers], size=size, repeats=repeats,
                             device=device, stall_s=stall_s, augment=False, check=check)
    rates = [r["value"] for r in res.rows if r["metric"] == "samples_per_s" and r.get("cache", "warm") == "warm"]
    runs = info.get("runs") or []
    if info.get("available") and runs and not runs[0].get("ok"):
        info["error"] = runs[0].get("error", "")
        info["reason"] = info["reason"] or f"run failed: {runs[0].get('error', '')}"
        info["available"] = False
    if info.get("available") and rates and runs:
        rate = float(np.median(rates))
        epw = int(runs[0].get("epochs_per_window") or 1)
        threads = ">= 1" in (info.get("parallelism") or "")
        info.update(rate=rate, window_s=epw * source.n / rate, batches=epw * -(-source.n // spec.batch_size),
                    batch_size=spec.batch_size, workers=max(1, spec.num_workers) if threads else spec.num_workers)
    if check:
        info["pixel_error"] = pixel_error(info.get("check"))
    if info.get("available") and info.get("reason") == "output check failed":
        info["available"] = False
        c = info.get("check") or {}
        info["reason"] = f"output check failed: {c.get('error') or {k: c.get(k) for k in ('missing', 'unexpected')}}"
    return info


def summarise(passes: list[dict]) -> dict:
    """A side from its passes (each ``{rate, busy, ...}``; a busy pass measured again is marked ``replaced``
    and followed by its second reading): ``rate`` the median over its passes, ``rate_lo``/``rate_hi`` their range, ``repeats``,
    and ``busy`` (why) where a pass stayed busy after its second reading: then the side is too busy to judge."""
    kept = [p for p in passes if not p.get("replaced")]
    rates = [float(p["rate"]) for p in kept if p.get("rate")]
    busy = next((p["busy"] for p in kept if p.get("busy")), None)
    if not rates:
        return {"rate": None, "rate_lo": None, "rate_hi": None, "repeats": 0, "busy": busy, "rates": []}
    return {"rate": float(np.median(rates)), "rate_lo": min(rates), "rate_hi": max(rates), "repeats": len(rates),
            "busy": f"measured on a busy machine twice ({busy})" if busy else None, "rates": rates}


def interleave(sides: list[dict], rounds: int, log=lambda m: None, load_window=LoadWindow) -> dict[str, dict]:
    """Every side measured once a round for ``rounds`` rounds, the order rotated each round (A B C, B C A,
    C A B, …), each pass inside a load window (``load_window()``: ``monitor.LoadWindow``, a fake in tests).
    A side is ``{"label", "run": f(first) -> info with "rate" (or "available": False and "reason"),
    "processes"}``; the first is the reference (your pipeline): once it is too busy or failed, no pass follows. A pass measured busy (:func:`feedlab.doctor.whatif.pass_busy`) is measured again once
    (the busy one kept, marked ``replaced``); busy again, the side is measured no more. A side that raises or
    is unavailable is measured no more, its first info kept with the reason. Per side: ``{"info": the first
    pass's info, "passes": [{round, rate, window_s, load, busy, again[, replaced]}], "busy", "error"}``."""
    out = {s["label"]: {"info": None, "passes": [], "busy": None, "error": None, "seconds": 0.0} for s in sides}
    n, ref = len(sides), out[sides[0]["label"]]
    for k in range(int(rounds)):
        for j in range(n):
            s = sides[(j + k) % n]
            o = out[s["label"]]
            if o["error"] or o["busy"] or ref["error"] or ref["busy"]:
                continue    # nothing is judged against a reference side too busy or failed: no more passes
            for attempt in (1, 2):
                log(f"what-if: {s['label']}, round {k + 1} of {rounds}" + (" (again: busy)" if attempt == 2 else ""))
                window, t0 = load_window(), time.perf_counter()
                try:
                    info = s["run"](o["info"] is None)
                except (DeadlineError, ValueError, OSError, RuntimeError) as exc:
                    o["error"] = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
                    break
                finally:
                    o["seconds"] += time.perf_counter() - t0
                load = window.summary()
                if o["info"] is None:
                    o["info"] = info
                if not info.get("available", True) or info.get("rate") is None:
                    o["error"] = info.get("reason") or info.get("error") or "not timed"
                    break
                busy = W.pass_busy(load, s["processes"])
                p = {"round": k + 1, "rate": float(info["rate"]), "window_s": info.get("window_s"), "load": load,
                     "busy": busy, "again": attempt == 2}
                o["passes"].append(p)
                if not busy:
                    break
                if attempt == 1:
                    p["replaced"] = True
                    log(f"what-if: {s['label']} busy ({busy}): measured again")
                else:
                    o["busy"] = busy
    return out


def what_if(rep: Report | dict, root: Path, spec: pl.PipelineSpec, crop: int = 96, samples: int | None = None,
            peers=W.WHATIF_PEERS, device: str = "cpu", limit_s: float = LIMIT_S, stall_s: float | None = None,
            repeats: int = REPEATS, log=lambda m: None, work: Path | None = None, load_window=LoadWindow) -> dict:
    """The what-if's dict (the report's ``what_if`` key): the sample, your pipeline and every peer measured
    in ``max(2, repeats)`` interleaved rounds (:func:`interleave`; or the one line why not), the answer.
    Temporaries go in ``work`` (the doctor's folder) or a folder made here, removed at the end either way."""
    rep = Report.of(rep)
    kind = formats.get_format(spec.format).kind
    mapping, how = W.express(kind, spec.transform, crop)
    n, note = W.sample_size(samples, spec.batch_size)
    rounds = max(2, int(repeats))
    out = {"samples": n, "batch_size": spec.batch_size, "workers": spec.num_workers, "device": device,
           "how": how, "notes": [note] if note else [], "peers": [], "baseline": {}, "rounds": rounds}
    if spec.loader != "dataloader":
        out["notes"].append(f"your loader kind {spec.loader!r} is timed here as a DataLoader with your settings")
    h = headspace(rep)
    step_rate, most = (h.step_samples_per_s, h.most) if h else (None, None)
    out.update(most=most, step_samples_per_s=step_rate)
    if mapping is None:
        out["peers"] = [{"peer": p, "label": registry.get(p).label, "available": False, "measured": False,
                         "reason": how} for p in peers]
        out["answer"] = W.answer(out["peers"], rep)
        return out
    size = mapping["size"]
    tmp = Path(tempfile.mkdtemp(prefix="feedlab-whatif-", dir=work))
    try:
        log(f"what-if: sampling {n:,} items of {root} into {tmp}")
        source, notes = build_sample(Path(root), spec.format, spec.decode_backend, n, tmp)
        out["notes"] += notes
        mine = "your pipeline"

        def base_run(first: bool) -> dict:
            with deadline(limit_s, "--what-if: your pipeline on the sample", "--what-if-limit S waits longer"):
                return time_baseline(Path(root), spec, source, size, device, check=first)

        def peer_run(name: str):
            def run(first: bool) -> dict:
                try:
                    return time_peer(name, source, tmp / "peers", spec, size, device, limit_s, stall_s, check=first)
                except DeadlineError as exc:
                    return {"name": name, "label": registry.get(name).label, "available": False, "reason": str(exc)}
            return run

        sides = [{"label": mine, "run": base_run, "processes": spec.num_workers + 1}]
        sides += [{"label": p, "run": peer_run(p), "processes": max(1, spec.num_workers) + 1} for p in peers]
        got = interleave(sides, rounds, log, load_window)
        b = got[mine]
        if b["error"]:
            raise ValueError(f"your pipeline on the sample: {b['error']}")
        base = {**b["info"], **summarise(b["passes"]), "passes": b["passes"]}
        base["order"] = order_of("global permutation per epoch (RandomSampler)")
        base["side"] = W.side_of(mine, "global permutation per epoch", base["pixel_error"], spec.batch_size,
                                 spec.num_workers, base["batches"], base["window_s"], base["busy"], base["repeats"])
        for name in peers:
            g = got[name]
            info = dict(g["info"] or {"name": name, "label": registry.get(name).label, "available": False,
                                      "reason": "not measured: your pipeline was " + ("too busy to judge" if base["busy"] else "not measured")})
            if g["error"] and info.get("available"):
                info.update(available=False, reason=g["error"])
            if info.get("available"):
                info.update({k: v for k, v in summarise(g["passes"]).items() if k not in ("rate_lo", "rate_hi")})
            info["passes"] = g["passes"]
            info["seconds"] = g["seconds"]
            out["peers"].append(W.peer_row(info, base, step_rate, most))
        out["baseline"] = {k: v for k, v in base.items() if k not in ("side", "check")}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["answer"] = W.answer(out["peers"], rep, base_busy=out["baseline"].get("busy"))
    return out


def serve(req: dict, log=lambda m: None) -> dict:
    """The child's side: the request's spec (:meth:`PipelineSpec` fields) and report parts, measured."""
    spec = pl.PipelineSpec(**req["spec"])
    return what_if(req["report"], Path(req["root"]), spec, crop=req.get("crop", 96), samples=req.get("samples"),
                   peers=tuple(req["peers"]), device=req.get("device", "cpu"), limit_s=req.get("limit_s", LIMIT_S),
                   stall_s=req.get("stall_s"), repeats=req.get("repeats", REPEATS), log=log,
                   work=Path(req["work"]) if req.get("work") else None)


def _stop(signum, frame):
    """SIGTERM from the doctor at its limit: unwind, so each peer's own process group is killed on the
    way out (``peers.remote.run_group``) and the sample removed."""
    raise KeyboardInterrupt(f"stopped by signal {signum}")


def main(argv=None) -> int:
    import signal


    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m feedlab.peers.whatif ANSWER.json < request.json", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop)
    out = serve(json.loads(sys.stdin.read()), log=lambda m: print(f"  … {m}", file=sys.stderr, flush=True))
    atomic_write(Path(argv[0]), strict_json(out, default=json_default))
    return 0


if __name__ == "__main__":
    sys.exit(main())
