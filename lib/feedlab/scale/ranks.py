"""One loader per rank: ``DistributedSampler`` over any registered format, and R ranks
launched with the standard launcher (``torch.distributed.run``) to time them.

Building (no process group needed: ``rank`` / ``world_size`` are arguments, so tests
simulate ranks in one process):

* :func:`rank_sampler` — the rank's sampler. ``even=True`` is torch's
  ``DistributedSampler``: every rank gets the same number of samples (what DDP needs,
  or the ranks' collectives fall out of step); with ``drop_last=False`` it pads by
  repeating the first ``world_size * ceil(n / world_size) - n`` samples of the epoch's
  order, with ``drop_last=True`` it leaves the last ``n % world_size`` out.
  ``even=False`` (:class:`ExactSampler`) splits the same order without padding or
  dropping: every sample exactly once, ranks differ by at most one sample.
* :func:`make_rank_loader` — ``pipeline.make_loader`` with the rank's sampler (the one
  loader builder); :func:`expected_counts` — how often each sample is seen in an epoch.
  Where the format's registry entry says ``chunked`` (never by its name), the split is
  the format's own: whole chunks per rank (``feedlab.scale.shards.ChunkShardSampler``,
  same ``even`` / ``drop_last`` meaning, accounting in ``shard_expected_counts``);
  ``split="samples"`` forces the per-sample sampler.

Launching: :func:`launch` runs ``python -m torch.distributed.run --standalone
--nproc-per-node R -m feedlab.scale.ranks ...`` (gloo on CPU, nccl on CUDA). Each rank pins
itself to its share of the cores (:func:`core_shares`; its workers inherit it), builds
its own loader, and times ``epochs`` epochs after ``warmup`` (``timing.run_epoch``); with
``sync`` an all-reduce after every batch stands for DDP's gradient all-reduce, so the
slowest rank sets everyone's step. Rank 0 gathers the ranks' rows into one JSON file.
The launcher runs in its own process group, stopped with its ranks at ``timeout_s``, when a
rank makes no progress for ``stall_s`` (a stopped rank, a sample that never arrives: each rank
beats a file as its batches arrive), on SIGTERM / SIGHUP, and when the caller dies.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from time import perf_counter

import numpy as np
from torch.utils.data.distributed import DistributedSampler

from feedlab import pipeline as pl
from feedlab import procgroup
from feedlab.scale.shards import ChunkShardSampler, choose_split, chunk_len_of
from feedlab.timing import run_epoch


class ExactSampler(DistributedSampler):
    """``DistributedSampler``'s order (same seed, same ``set_epoch``), split without
    padding or dropping: rank ``r`` gets positions ``r, r + W, ...`` of the epoch's order."""

    def __iter__(self):
        import torch

        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(self.dataset), generator=g).tolist()
        else:
            order = list(range(len(self.dataset)))
        return iter(order[self.rank::self.num_replicas])

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.num_replicas + (1 if self.rank < n % self.num_replicas else 0)


def rank_sampler(dataset, rank: int, world_size: int, seed: int = 0, shuffle: bool = True,
                 drop_last: bool = False, even: bool = True) -> DistributedSampler:
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} of world_size {world_size}: need 0 <= rank < world_size")
    cls = DistributedSampler if even else ExactSampler
    return cls(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last)


def make_rank_loader(dataset, spec: pl.PipelineSpec, rank: int, world_size: int, seed: int = 0,
                     drop_last: bool = False, even: bool = True, split: str = "auto", **overrides):
    """``(loader, sampler)`` for one rank; call ``sampler.set_epoch(e)`` before each epoch.
    ``drop_last`` is the sampler's (see the module doc); the loader keeps partial batches.
    ``split``: ``auto`` (whole chunks for a chunked format with a chunk per rank, see
    ``rank_shards.choose_split``), ``chunks`` or ``samples``; ``sampler.split`` says which."""
    how, why = choose_split(dataset, spec.format, world_size, split, even)
    if how == "chunks":
        sampler = ChunkShardSampler(len(dataset), chunk_len_of(dataset), rank, world_size, seed,
                                    drop_last=drop_last, even=even)
    else:
        sampler = rank_sampler(dataset, rank, world_size, seed, drop_last=drop_last, even=even)
    sampler.split, sampler.split_reason = how, why
    return pl.make_loader(dataset, spec, seed=seed, shuffle=False, sampler=sampler, **overrides), sampler


def expected_counts(n: int, world_size: int, drop_last: bool, even: bool = True) -> tuple[int, int, int]:
    """``(seen_once, seen_twice, never)``: how many of ``n`` samples one epoch over all
    ranks reads once, twice (padding) and not at all (dropped)."""
    if not even:
        return n, 0, 0
    if drop_last:
        per = n // world_size
        return per * world_size, 0, n - per * world_size
    pad = world_size * math.ceil(n / world_size) - n
    return n - pad, pad, 0


def reshuffle_s(sampler, epoch: int) -> float:
    """Seconds for ``set_epoch`` plus drawing the epoch's order (the reshuffle each epoch pays)."""
    t = perf_counter()
    sampler.set_epoch(epoch)
    _ = list(iter(sampler))
    return perf_counter() - t


def core_shares(ranks: int, cores: list[int] | None = None) -> list[list[int]]:
    """Disjoint slices of the usable cores, one per rank (round-robin when ranks > cores)."""
    cores = sorted(cores if cores is not None else os.sched_getaffinity(0))
    if ranks <= len(cores):
        return [[int(c) for c in a] for a in np.array_split(np.array(cores), ranks)]
    return [[cores[r % len(cores)]] for r in range(ranks)]


# ---------------------------------------------------------------- one rank (inside the launcher)


def _rank_main(cfg: dict) -> None:
    import torch
    import torch.distributed as dist


    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    beat = Path(cfg["out"]).parent / f"beat-{rank}"   # the launcher's sign of life: started, then batches
    beat.write_text(str(os.getpid()))
    local = int(os.environ.get("LOCAL_RANK", rank))
    cuda = cfg["device"].startswith("cuda") and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    share = core_shares(world, cfg.get("cores"))[local]
    os.sched_setaffinity(0, share)                       # its workers inherit the share
    torch.set_num_threads(max(1, len(share) - cfg["spec"]["num_workers"]) if not cuda else len(share))
    device = f"cuda:{local}" if cuda else "cpu"
    spec = pl.PipelineSpec(**{**cfg["spec"], "device": device})
    ds = pl.open_dataset(cfg["data"], spec)
    getattr(ds, "dataset", ds).verify = False
    loader, sampler = make_rank_loader(ds, spec, rank, world, seed=cfg["seed"], even=True,
                                       split=cfg.get("split", "auto"))
    model, _loss, opt = pl.make_training(spec.model, device)
    flag = torch.zeros(1, device=device)
    last = [perf_counter()]

    def step(_i, _batch):
        if cfg["sync"]:
            dist.all_reduce(flag)
        if perf_counter() - last[0] > 1.0:
            last[0] = perf_counter()
            beat.write_text(str(os.getpid()))

    rows = []
    for e in range(cfg["warmup"] + cfg["epochs"]):
        shuffle_s = reshuffle_s(sampler, e)
        dist.barrier()
        et = run_epoch(loader, model, device, opt, max_batches=cfg.get("max_batches"), on_batch=step,
                       main_threads=None)
        dist.barrier()
        if e >= cfg["warmup"]:
            rows.append({"rank": rank, "epoch": e, "cores": share, "split": sampler.split,
                         "samples": et.samples, "wall_s": et.wall_s,
                         "samples_per_s": et.samples_per_s, "data_wait_fraction": et.data_wait_fraction,
                         "first_batch_s": et.first_batch_s, "reshuffle_s": shuffle_s,
                         "indices": list(iter(sampler)) if cfg.get("record_indices") else None})
    gathered = [None] * world
    dist.all_gather_object(gathered, rows)
    if rank == 0:
        tmp = Path(cfg["out"]).with_suffix(".part")
        tmp.write_text(json.dumps([r for g in gathered for r in g]))
        tmp.replace(cfg["out"])
    dist.destroy_process_group()


# ---------------------------------------------------------------- the launcher side


def launch(ranks: int, data, spec: pl.PipelineSpec, epochs: int = 2, warmup: int = 1, seed: int = 0,
           max_batches: int | None = None, sync: bool = True, record_indices: bool = False,
           cores: list[int] | None = None, timeout_s: float | None = 600, split: str = "auto",
           stall_s: float | None = None) -> dict:
    """Launch ``ranks`` ranks on this host; returns :func:`summarize_ranks` of their rows.
    ``split`` as in :func:`make_rank_loader` (``out["split"]`` says which the ranks used).
    ``timeout_s`` bounds the whole launch, ``stall_s`` a rank without a batch (None: no bound);
    past either the launcher and every rank are stopped and ``TimeoutError`` says which rank."""
    if ranks < 1:
        raise ValueError(f"ranks {ranks}: need >= 1")
    if not Path(data).exists():
        raise FileNotFoundError(f"{data}: no such data set; build it with `python -m data_prep sr --out {data}`")
    device = pl.resolve_device(spec.device)
    with tempfile.TemporaryDirectory(prefix="feedlab-ranks-") as tmp:
        out = Path(tmp) / "ranks.json"
        cfg = {"data": str(data), "spec": {**spec.as_dict(), "device": device}, "epochs": epochs,
               "warmup": warmup, "seed": seed, "max_batches": max_batches, "sync": sync, "device": device,
               "record_indices": record_indices, "cores": cores, "out": str(out), "split": split}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
               "-m", "feedlab.scale.ranks", json.dumps(cfg)]
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
               "TMPDIR": tmp}  # what torchrun leaves (torchelastic_*, when stopped) goes with the launch
        t = perf_counter()
        code, text = _run_launcher(cmd, env, Path(tmp), timeout_s, ranks, stall_s)
        launch_s = perf_counter() - t
        if code != 0 or not out.is_file():
            raise ChildProcessError(f"{ranks} ranks via torch.distributed.run failed: {failed_rank(text, code)}")
        rows = json.loads(out.read_text())
    res = summarize_ranks(rows)
    res.update({"ranks": ranks, "backend": "nccl" if device.startswith("cuda") else "gloo",
                "launch_s": launch_s, "sync": sync, "split": rows[0].get("split", "samples") if rows else split, **{k: v for k, v in spec.as_dict().items()}, "device": device})
    return res


def _alive_ranks(tmp: Path) -> list[int]:
    """The rank processes of this launch still running (each wrote ``rank-<pid>.pid`` in ``tmp``)."""
    out = []
    for f in tmp.glob("rank-*.pid"):
        try:
            pid = int(f.read_text().strip())
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"feedlab.scale.ranks" in fh.read():
                    out.append(pid)
        except (OSError, ValueError):
            continue
    return out


def _stop(group: procgroup.Group, tmp: Path, grace_s: float = 10.0) -> None:
    """Stop the launcher and every rank (:func:`feedlab.procgroup.stop`: SIGTERM to the launcher's group, which
    it passes on to its ranks, and to each rank wherever it is; SIGKILL to whatever is left after ``grace_s``)."""
    group.stop(grace_s, also=lambda: _alive_ranks(tmp))


def _stalled(tmp: Path, ranks: int, since: float, stall_s: float) -> str | None:
    """One line when no rank made progress (its beat) for ``stall_s`` seconds, naming the rank
    that holds them up (stopped, in uninterruptible IO, else the one silent longest); else None."""
    now, ages = time.time(), {}
    for r in range(ranks):
        try:
            ages[r] = now - max(since, (tmp / f"beat-{r}").stat().st_mtime)
        except OSError:
            ages[r] = now - since
    if min(ages.values()) <= stall_s:
        return None
    late = max(ages, key=ages.get)
    how = f"had no batch for {ages[late]:.0f} s"
    for r in range(ranks):  # a rank stopped (SIGSTOP, a debugger) or in uninterruptible IO is the one
        try:
            pid = int((tmp / f"beat-{r}").read_text())
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, ValueError, IndexError):
            continue
        if state in ("T", "t", "D"):
            late, how = r, ("is stopped (SIGSTOP?)" if state in ("T", "t") else "is stuck in uninterruptible IO")
            break
    return f"ranks: no progress in {stall_s:g} s: rank {late} {how}"


def _run_launcher(cmd: list[str], env: dict, tmp: Path, timeout_s: float | None, ranks: int = 1,
                  stall_s: float | None = None) -> tuple[int, str]:
    """Run the launcher in a group of its own (:func:`feedlab.procgroup.start`: a Ctrl-C reaches only us, and we
    stop the launcher and its ranks together: no rank outlives it, nor us: SIGTERM / SIGHUP stop them first, and
    the launcher gets SIGTERM when we die). Returns ``(exit code, output)``."""
    log = tmp / "launcher.log"
    with open(log, "w+b") as fh:
        start, t0 = time.time(), time.monotonic()
        group = procgroup.start(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, die_with_parent=signal.SIGTERM)
        proc = group.proc
        try:
            with procgroup.signals_raise():
                while True:
                    try:
                        code = proc.wait(timeout=0.5)
                        break
                    except subprocess.TimeoutExpired:
                        pass
                    late = _stalled(tmp, ranks, start, stall_s) if stall_s else None
                    if late is None and timeout_s is not None and time.monotonic() - t0 > timeout_s:
                        late = f"ranks: no result in {timeout_s:g} s"
                    if late:
                        with procgroup.signals_held():
                            _stop(group, tmp)
                        raise TimeoutError(f"{late}: the launcher and its ranks were stopped (a rank stuck on a "
                                           "sample? try `python -m data_prep verify DATA`)")
        except procgroup.Signalled as sig:
            with procgroup.signals_held():
                _stop(group, tmp)
            print(f"ranks: {signal.Signals(sig.signum).name}: the launcher and its ranks were stopped", file=sys.stderr)
            raise SystemExit(sig.code) from None
        except BaseException:  # KeyboardInterrupt, an error of ours: stop them all
            with procgroup.signals_held():
                _stop(group, tmp)
            raise
        if _alive_ranks(tmp) or group.members():
            _stop(group, tmp)
        group.stop(0.0)   # untracked (nothing left)
        fh.seek(0)
        text = fh.read().decode("utf-8", "replace")
    return code, text


def failed_rank(text: str, code: int) -> str:
    """One line naming the rank that failed first and how: the signal that killed it, or its
    exit status and its last error line (read from torchrun's "Root Cause" report)."""
    import re

    root = text.split("Root Cause", 1)[1] if "Root Cause" in text else text
    m = re.search(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", root, re.S)
    errors = [x.strip() for x in text.splitlines() if re.search(r"\w+(Error|Exception):", x)
              and "ChildFailedError" not in x and "torch.distributed" not in x]
    if m is None:
        lines = [x.strip() for x in text.splitlines() if x.strip()]
        return f"launcher exit {code}: " + (errors[-1] if errors else (lines[-1] if lines else "no output"))
    rank, status = int(m.group(1)), int(m.group(2))
    sig = re.search(r"Signal (\d+) \((SIG\w+)\)", root)
    if status < 0 or sig:
        num = -status if status < 0 else int(sig.group(1))
        try:
            name = signal.Signals(num).name
        except ValueError:
            name = f"signal {num}"
        return f"rank {rank} was killed by {name} (exit {status}); the other ranks were stopped"
    why = next((e for e in errors if e.startswith("[rank") or "Error" in e), "")
    why = re.sub(r"^\[rank\d+\]:\s*", "", why)   # torchrun's prefix: which rank printed it (not always `rank`)
    why = re.sub(r"^(?:\w+\.)+(\w+(?:Error|Exception):)", r"\1", why)   # feedlab.pipeline.shm.X: → X:
    return f"rank {rank} exited with status {status}" + (f": {why}" if why else "")


def summarize_ranks(rows: list[dict]) -> dict:
    """Per-rank medians over epochs; per epoch the aggregate (all samples ÷ the slowest rank's
    wall) and the slowest rank; medians and IQR of the aggregate over epochs."""
    by_rank: dict[int, list[dict]] = {}
    for r in rows:
        by_rank.setdefault(r["rank"], []).append(r)
    per_rank = [{"rank": k, "cores": v[0]["cores"],
                 "samples_per_s": float(np.median([x["samples_per_s"] for x in v])),
                 "data_wait_fraction": float(np.median([x["data_wait_fraction"] for x in v])),
                 "wall_s": float(np.median([x["wall_s"] for x in v])),
                 "reshuffle_s": float(np.median([x["reshuffle_s"] for x in v])),
                 "samples": int(v[0]["samples"])} for k, v in sorted(by_rank.items())]
    agg, slowest = [], []
    for e in sorted({r["epoch"] for r in rows}):
        ep = [r for r in rows if r["epoch"] == e]
        wall = max(r["wall_s"] for r in ep)
        agg.append(sum(r["samples"] for r in ep) / wall if wall > 0 else float("nan"))
        slowest.append(max(ep, key=lambda r: r["wall_s"])["rank"])
    q25, med, q75 = np.percentile(agg, [25, 50, 75])
    return {"per_rank": per_rank, "aggregate_samples_per_s": float(med), "aggregate_q25": float(q25),
            "aggregate_q75": float(q75), "aggregate_runs": [float(a) for a in agg], "slowest_rank_per_epoch": slowest,
            "data_wait_fraction": float(np.median([p["data_wait_fraction"] for p in per_rank])),
            "reshuffle_s": float(np.median([r["reshuffle_s"] for r in rows])), "rows": rows}


def render(out: dict) -> str:
    """The human-readable lines of :func:`launch`'s result."""
    lines = [f"{out['ranks']} ranks ({out['backend']}, {'all-reduce every step' if out['sync'] else 'no step sync'}) · "
             f"{out['format']} · batch {out['batch_size']} · {out['num_workers']} workers per rank · {out['device']}"
             f" · split by {out.get('split', 'samples')}",
             f"  aggregate {out['aggregate_samples_per_s']:.0f} samples/s (IQR {out['aggregate_q25']:.0f}–"
             f"{out['aggregate_q75']:.0f}, all samples ÷ the slowest rank's wall, "
             f"{len(out['aggregate_runs'])} epochs) · slowest rank per epoch {out['slowest_rank_per_epoch']}"]
    for p in out["per_rank"]:
        lines.append(f"  rank {p['rank']} on cores {p['cores']}: {p['samples_per_s']:.0f} samples/s, data wait "
                     f"{100 * p['data_wait_fraction']:.0f}% of wall, set_epoch + reshuffle "
                     f"{1e3 * p['reshuffle_s']:.2f} ms")
    lines.append(f"  launcher start-up and teardown included in {out['launch_s']:.1f} s total")
    return "\n".join(lines)


def _prctl():
    """libc's ``prctl`` (Linux), or None. ``prctl(1, sig)``: this process gets ``sig`` when its parent dies."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return None


def _pdeathsig(sig: int) -> None:
    (_prctl() or (lambda *a: None))(1, int(sig))


def _die_with_parent(tmp: Path) -> None:
    """A rank ends when its launcher does (``PR_SET_PDEATHSIG``), and says where it runs."""
    _pdeathsig(signal.SIGKILL)
    if os.getppid() == 1:  # the launcher is already gone
        os._exit(1)
    try:
        (tmp / f"rank-{os.getpid()}.pid").write_text(str(os.getpid()))
    except OSError:
        pass


if __name__ == "__main__":
    _cfg = json.loads(sys.argv[1])
    _die_with_parent(Path(_cfg["out"]).parent)
    _rank_main(_cfg)
    # the rows are written and the group destroyed: leave without the interpreter's teardown, where a
    # C++ thread still joinable (gloo's, a codec's pool) aborts the rank about one run in three here
    # ("terminate called without an active exception", SIGABRT after the work was done)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
