"""Notebook 14, part 3: when does decoding on other nodes pay? Measured on a Ray test cluster.

The trainer's own cores are made the bound: this process (and its DataLoader workers) is
pinned to ``trainer`` cores (``ray_cluster.pinned``); the decode nodes of the test cluster
(``ray_cluster.TestCluster``) run on the other cores. For each pipeline (a format, and a
decode made ``work`` times heavier, ``"png*3"``) three arrangements feed the same loop
(``timing.run_epoch``, same model):

- ``DataLoader (trainer cores)``: k workers, forked from the pinned trainer, so on its cores;
- ``Ray remote (N nodes)``: Ray Data ``map_batches`` on the decode nodes, ``iter_torch_batches`` here;
- ``Ray local (trainer cores)``: the same Ray Data tasks on the head node, the trainer's cores.

Besides samples/s per epoch, measured from the same run: the decode cost per sample on one
trainer core (:func:`decode_cost`), the step alone (batches already in memory), and the
trainer process's CPU per sample in each arrangement (``time.process_time``: every thread of
this process, Ray's receiving and deserialising included). :func:`crossover` turns those into
the predicted speedup; :func:`judged` judges the measured one by the one judge (like for like, its precision).
"""

from __future__ import annotations

import math
from time import perf_counter, process_time

import numpy as np

from feedlab import like_for_like as lfl
from feedlab import pipeline as pl
from feedlab.plots import readable_log_axis
from feedlab.results import Results, median_iqr
from feedlab.scale import ray_cluster as RC
from feedlab.scale import remote_decode as RD
from feedlab.timing import run_epoch

EXP = "remote_pays"
DL, REMOTE, LOCAL = "DataLoader (trainer cores)", "Ray remote (decode nodes)", "Ray local (trainer cores)"
ARRANGEMENTS = (DL, REMOTE, LOCAL)
TOLERANCE = 0.10  # the PREDICTED speedup's tie band (a model has no spread); a measured ratio goes to the one judge


def parse_pipeline(text: str) -> tuple[str, int]:
    """``"png*3"`` → ``("png", 3)``: the format, and how many times each sample is decoded."""
    fmt, _, work = str(text).partition("*")
    try:
        k = int(work or 1)
    except ValueError:
        k = 0
    if not fmt or k < 1:
        raise ValueError(f"pays_pipelines entry {text!r}: write a format, optionally *k for k-fold decode "
                         f"work (png, png*3, npy)")
    return fmt.strip(), k


# ---------------------------------------------------------------- the arithmetic (pure)
def crossover(decode_s: float, step_s: float, dl_consume_s: float, ray_consume_s: float,
              trainer_cores: int, remote_cpus: int) -> dict:
    """Predicted rates from per-sample costs (seconds of one core per sample).

    Local (DataLoader on the trainer's cores): every sample costs the trainer's cores its
    decode, the hand-over to the main process and the step: ``T / (d + c_dl + s)``.
    Remote: the trainer pays only the Ray hand-over and the step, ``T / (c_ray + s)``, and
    can go no faster than the decode nodes supply, ``R / d``. Remote decode pays when what
    the trainer's cores stop paying per sample exceeds what receiving a Ray batch costs them
    (``d + c_dl > c_ray``) AND the nodes' capacity ``R / d`` exceeds the rate the trainer
    reaches on its own (else the trainer waits for them); beyond the step rate ``T / s``
    more capacity buys nothing (the trainer side ``T / (c_ray + s)`` is already below it)."""
    T, R = max(1, int(trainer_cores)), max(1, int(remote_cpus))
    d, s = max(decode_s, 0.0), max(step_s, 0.0)
    c_dl, c_ray = max(dl_consume_s, 0.0), max(ray_consume_s, 0.0)
    local = T / (d + c_dl + s) if d + c_dl + s > 0 else math.inf
    trainer_side = T / (c_ray + s) if c_ray + s > 0 else math.inf
    capacity = R / d if d > 0 else math.inf
    remote = min(trainer_side, capacity)
    return {"local_rate": local, "remote_rate": remote, "trainer_side_rate": trainer_side,
            "remote_capacity": capacity, "step_rate": T / s if s > 0 else math.inf,
            "decode_per_trainer_core_s": d / T, "local_trainer_s": d + c_dl, "ray_consume_s": c_ray,
            "saves_trainer": d + c_dl > c_ray, "capacity_exceeds": capacity > local,
            "predicted_speedup": remote / local if local > 0 and math.isfinite(local) else float("nan")}


def predicted_word(ratio: float, tol: float = TOLERANCE) -> tuple[str, str]:
    """``(word, line)`` for the cost model's PREDICTED remote ÷ local speedup (a model's number: no spread to
    judge, so a stated ±``tol``): pays, does not pay, or tie. A measured ratio is judged by :func:`judged`."""
    if not (ratio > 0 and math.isfinite(ratio)):
        return "none", "no verdict (an arrangement did not run)"
    if ratio > 1 + tol:
        return "pays", f"pays: x{ratio:.2f} faster (tolerance ±{100 * tol:.0f}%)"
    if ratio < 1 - tol:
        return "does not pay", f"does not pay: x{ratio:.2f} (tolerance ±{100 * tol:.0f}%)"
    return "tie", f"tie: x{ratio:.2f}, within ±{100 * tol:.0f}%"


def side(label: str, rates, windows=(), batches=(), batch_size: int | None = None, workers: int | None = None) -> lfl.Side:
    """One arrangement as a side of the one judge: its timed epochs (each a whole epoch: ``epoch_batches`` 0) are
    its repeats; its precision is their 95% half-width (Student's t over the epochs); a rate short of
    ±:data:`~feedlab.like_for_like.MAX_HALF_WIDTH` or from fewer than :data:`~feedlab.like_for_like.MIN_REPEATS`
    epochs is "imprecise" (then judged only as the one rule lets it). Its window is its shortest epoch's
    (``windows``, ``batches``; not recorded: an older record). Order, pixels and cache are this code path's on
    every arrangement: a fresh global permutation per epoch, the same dataset and decode (:class:`RD.Heavier` on
    ``pl.open_dataset`` of the same spec), warm (warm-up epochs first)."""
    vals = [float(v) for v in rates if math.isfinite(float(v))]
    hw = lfl.repeat_half_width(vals)
    kind = "steady" if hw is not None and hw <= lfl.MAX_HALF_WIDTH and len(vals) >= lfl.MIN_REPEATS else "imprecise"
    win = [float(w) for w in windows if math.isfinite(float(w))]
    nb = [int(b) for b in batches if math.isfinite(float(b))]
    return lfl.Side(label, order="global", pixel_error=0.0, batch_size=batch_size, workers=workers, cache="warm",
                timed_batches=min(nb) if nb else None, window_s=min(win) if win else None, epoch_batches=0,
                half_width=hw, rate_kind=kind, repeats=len(vals) or None)


def judged(remote: lfl.Side, local: lfl.Side, ratio: float) -> lfl.Verdict:
    """Remote ÷ DataLoader samples/s by the one judge (:func:`feedlab.like_for_like.verdict`): the worker count
    differs by design (it is what moves), nothing else may; the ratio's interval from the two sides' half-widths."""
    hws = [h for h in (remote.half_width, local.half_width) if h is not None and math.isfinite(h)]
    lo = hi = None
    if len(hws) == 2 and ratio > 0 and math.isfinite(ratio):
        h = math.hypot(*hws)
        lo, hi = ratio * (1 - h), ratio * (1 + h)
    return lfl.verdict(remote, local, ratio if ratio > 0 and math.isfinite(ratio) else None, lo=lo, hi=hi,
                   changes=("workers",))


def verdict_words(v: lfl.Verdict) -> tuple[str, str]:
    """``(word, line)`` of a judged ratio: pays / does not pay / tie where the judge judged it, else its word
    ("not tested fairly", "not like for like") and the ratio as measured, not judged."""
    r = v.ratio
    if r is None or not math.isfinite(r):
        return "none", "no verdict (an arrangement did not run)"
    span = f"{v.lo:.2f}–{v.hi:.2f}" if v.lo is not None and v.hi is not None else ""
    if v.word == lfl.MET:
        return "pays", f"pays: x{r:.2f} faster (interval {span})"
    if v.word == lfl.MISSED:
        return "does not pay", f"does not pay: x{r:.2f} (interval {span})"
    if v.word == lfl.WITHIN:
        return "tie", f"tie: x{r:.2f}, not told apart ({v.why})"
    return v.word, f"x{r:.2f} measured, not judged: {v}"


# ---------------------------------------------------------------- measuring
def decode_cost(ds, ids, repeats: int = 3) -> float:
    """Seconds per sample to read + decode + transform on one core (this process, pinned)."""
    times = []
    for _ in range(max(1, repeats)):
        t = perf_counter()
        for i in ids:
            ds[int(i)]
        times.append((perf_counter() - t) / max(1, len(ids)))
    return float(np.median(times))


def _in_memory_batches(ds, ids, batch_size: int):
    import torch

    out = []
    for k in range(0, len(ids), batch_size):
        pairs = [ds[int(i)] for i in ids[k:k + batch_size]]
        out.append(tuple(RD._nchw(np.stack([np.asarray(p[j]) for p in pairs])) for j in (0, 1)))
    return [(torch.as_tensor(a), torch.as_tensor(b)) for a, b in out]


def _timed(make_iter, model, device, opt, threads):
    c0 = process_time()
    et = run_epoch(make_iter(), model, device, opt, main_threads=threads)
    return et, process_time() - c0


def measure_pipeline(cl: RC.TestCluster, root, spec: pl.PipelineSpec, work: int, epochs: int, warmup: int,
                     seed: int = 0, max_samples: int = 0, log=print) -> tuple[Results, dict]:
    """The three arrangements, the decode cost and the step alone for one pipeline."""
    # decode capacity: the Ray CPUs of the nodes, but no more than the distinct cores they run on
    T, R = len(cl.trainer_cores), min(cl.remote_cpus, len({c for s in cl.node_cores for c in s}))
    base = pl.open_dataset(root, spec, seed=seed)
    getattr(base, "dataset", base).verify = False
    n = len(base) if not max_samples else min(len(base), int(max_samples))
    ds = RD.Heavier(base if n == len(base) else _Subset(base, n), work)
    model, _loss, opt = pl.make_training(spec.model, spec.device)
    name = spec.format + (f"*{work}" if work > 1 else "")
    common = dict(pipeline=name, format=spec.format, work=int(work), transform=spec.transform,
                  batch_size=spec.batch_size, model=spec.model, device=spec.device, samples_in_set=n,
                  trainer_cores=T, remote_cpus=R, nodes=len(cl.node_cores))
    res, info = Results(), {"pipeline": name, "checks": {}}
    probe = np.arange(min(n, 4 * spec.batch_size))
    with RC.pinned(cl.trainer_cores[:1]):
        decode_s = decode_cost(ds, probe)
        batches = _in_memory_batches(ds, probe, spec.batch_size)
    res.add(EXP, "costs", "decode_s_per_sample", decode_s, "s", **common)
    step = []
    for e in range(warmup + epochs):
        with RC.pinned(cl.trainer_cores):
            et, cpu = _timed(lambda: batches, model, spec.device, opt, T)
        if e >= warmup:
            step.append(cpu / et.samples)
    res.add_samples(EXP, "costs", "step_cpu_s_per_sample", step, "s", **common)
    k = T
    s = spec.replace(collate="fast", num_workers=k, persistent_workers=True)
    cpu_per = {}
    with RC.pinned(cl.trainer_cores):  # the workers fork here and keep these cores
        loader = pl.make_loader(ds, s, seed=seed)
        for e in range(warmup + epochs):
            et, cpu = _timed(lambda ld=loader: ld, model, spec.device, opt, T)  # the step as the others run it
            if e >= warmup:
                _rows(res, DL, et, cpu, e - warmup, common)
                cpu_per.setdefault(DL, []).append(cpu / et.samples)
        del loader  # its persistent workers stop before Ray runs
    for label, where in ((REMOTE, "remote"), (LOCAL, "local")):
        for e in range(warmup + epochs):
            rec = RC.Recorder()
            order = np.random.default_rng(seed + e).permutation(n)
            with RC.pinned(cl.trainer_cores), RC.quiet_ray_data():
                et, cpu = _timed(lambda: RC.epoch(root, spec, order, seed, work, where, rec), model, spec.device,
                                 opt, T)
            chk = rec.check(n, cl.head_id, where)
            info["checks"].setdefault(label, []).append(chk)
            if e >= warmup:
                _rows(res, label, et, cpu, e - warmup, common)
                res.add(EXP, label, "bytes_per_sample", rec.nbytes / max(1, et.samples), "B", repeat=e - warmup,
                        **common)
                cpu_per.setdefault(label, []).append(cpu / et.samples)
        log(f"{name}: {label} done")
    st = float(np.median(step))
    pred = crossover(decode_s, st, float(np.median(cpu_per[DL])) - st, float(np.median(cpu_per[REMOTE])) - st, T, R)
    info.update(decode_s=decode_s, step_s=st, prediction=pred)
    return res, info


class _Subset:
    def __init__(self, ds, n):
        self.ds, self.n = ds, int(n)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self.ds[i]


def _rows(res: Results, variant: str, et, cpu: float, k: int, common: dict) -> None:
    res.add(EXP, variant, "samples_per_s", et.samples_per_s, "samples/s", repeat=k, **common)
    res.add(EXP, variant, "data_wait_fraction", et.data_wait_fraction, "fraction", repeat=k, **common)
    res.add(EXP, variant, "wait_s_per_batch", et.data_wait_s / max(1, et.batches), "s", repeat=k, **common)
    res.add(EXP, variant, "trainer_cpu_s_per_sample", cpu / max(1, et.samples), "s", repeat=k, **common)
    res.add(EXP, variant, "first_batch_s", et.first_batch_s, "s", repeat=k, **common)
    res.add(EXP, variant, "window_s", float(et.wall_s), "s", repeat=k, **common)         # the judge's window
    res.add(EXP, variant, "timed_batches", et.batches, "batches", repeat=k, **common)


def run(root, spec: pl.PipelineSpec, pipelines, cores, trainer_cores: int, nodes: int, node_cpus: int,
        epochs: int, warmup: int, seed: int = 0, max_samples: int = 0, log=print) -> tuple[Results, dict]:
    """Start the test cluster, measure every pipeline, always shut it down. Without Ray (or
    with too few cores) no rows and the reason, in one line."""
    ok, why = RD.available()
    info = {"available": ok, "reason": why, "pipelines": {}}
    res = Results()
    if not ok:
        log(why)
        return res, info
    try:
        trainer, others = RC.split_cores(cores, trainer_cores)
        slices = RC.node_slices(others, nodes)
        todo = [parse_pipeline(p) for p in pipelines]
    except ValueError as exc:
        info.update(available=False, reason=f"not run: {exc}")
        log(info["reason"])
        return res, info
    spec = spec.replace(device=pl.resolve_device(spec.device))
    info.update(trainer_cores=trainer, node_cores=slices, nodes_share_cores=len(others) < nodes)
    cl = RC.TestCluster(trainer, slices, node_cpus)
    try:
        cl.start()  # shuts down what it started when it fails
    except Exception as exc:  # noqa: BLE001 - a cluster that does not come up (a loaded host) is one line
        first = (str(exc).strip().splitlines() or [""])[0]
        info.update(available=False, reason=f"not run: the Ray test cluster did not start: {type(exc).__name__}: "
                                            f"{first}")
        log(info["reason"])
        return res, info
    try:
        info.update(start_s=cl.start_s, nodes=cl.nodes, head_id=cl.head_id, node_cpus=cl.node_cpus)
        log(f"test cluster: head on cores {trainer}, {nodes} decode node(s) on {slices}, started in {cl.start_s:.1f} s")
        for fmt, work in todo:
            r, i = measure_pipeline(cl, root, spec.replace(format=fmt), work, epochs, warmup, seed, max_samples, log)
            res.extend(r)
            info["pipelines"][i["pipeline"]] = i
    finally:
        cl.shutdown()
    return res, info


# ---------------------------------------------------------------- reading the run
def judge(df, info: dict) -> list[dict]:
    """Per pipeline: measured remote ÷ DataLoader (and ÷ Ray local), judged by the one judge (:func:`judged`:
    its epochs' spread, repeats and window), beside the prediction from the measured costs."""
    out = []
    rows = df[df.pipeline.notna()] if "pipeline" in df else df
    for name, pi in info.get("pipelines", {}).items():
        g = rows[rows.pipeline == name]

        def of(a, metric):
            return g[(g.variant == a) & (g.metric == metric)].value.tolist()

        vals = {a: of(a, "samples_per_s") for a in ARRANGEMENTS}
        med = {a: (median_iqr(v)[0] if v else float("nan")) for a, v in vals.items()}
        first = lambda col: (int(g[col].dropna().iloc[0]) if col in g and g[col].notna().any()  # noqa: E731
                             else None)
        bs = first("batch_size")
        workers = {DL: first("trainer_cores"), REMOTE: first("remote_cpus")}   # differ by design: not judged
        sides = {a: side(a, vals[a], of(a, "window_s"), of(a, "timed_batches"), bs, workers.get(a))
                 for a in (DL, REMOTE)}
        ratio = med[REMOTE] / med[DL] if med[DL] > 0 else float("nan")
        v = judged(sides[REMOTE], sides[DL], ratio)
        word, line = verdict_words(v)
        pred = pi["prediction"]
        pword, _ = predicted_word(pred["predicted_speedup"])
        checks = [c for cs in pi["checks"].values() for c in cs]
        half = (v.hi - v.lo) / (2 * ratio) if v.lo is not None and v.hi is not None and ratio > 0 else float("nan")
        out.append({"pipeline": name, "medians": med, "ratio": ratio, "tolerance": half, "verdict": word,
                    "judge": str(v), "line": line, "short": f"{word}: x{ratio:.2f}", "predicted": pword,
                    "prediction": pred,
                    "ratio_vs_ray_local": med[REMOTE] / med[LOCAL] if med[LOCAL] > 0 else float("nan"),
                    "checks_ok": bool(checks) and all(c["ok"] for c in checks)})
    return out


def readings(df, info: dict) -> list[str]:
    """Lines computed from the rows (or why nothing ran)."""
    if not info.get("available"):
        return [f"Remote decode on a test cluster: {info.get('reason')}"]
    roles = {v["role"]: v["worker_cores"] for v in info.get("nodes", {}).values()}
    out = [f"Test cluster: {', '.join(f'{r} on cores {c}' for r, c in sorted(roles.items()))}; started in "
           f"{info.get('start_s', float('nan')):.1f} s. The 'nodes' share one host's memory bus and page cache; "
           f"batches cross between object stores over loopback: real network transfer is NOT measured."]
    if info.get("nodes_share_cores"):
        out.append("More decode nodes than free cores: the nodes share those cores.")
    remote = len({c for s in info.get("node_cores", []) for c in s})
    if 0 < remote <= len(info.get("trainer_cores", [])):
        out.append(f"The decode nodes have {remote} core(s), the trainer {len(info['trainer_cores'])}: moving decode "
                   f"adds no cores here, so the most it can gain is the nodes' capacity over the trainer's own rate "
                   f"(per pipeline below); a large gain needs more cores on the nodes than the trainer keeps.")
    by = df.groupby(["pipeline", "variant", "metric"]).value.median()
    for j in judge(df, info):
        p, pr = j["pipeline"], j["prediction"]
        m = j["medians"]
        out.append(f"{p}: {DL} {m[DL]:,.0f}, {REMOTE} {m[REMOTE]:,.0f}, {LOCAL} {m[LOCAL]:,.0f} samples/s (medians). "
                   f"Remote decode {j['line']}; the costs predicted {j['predicted']} (x{pr['predicted_speedup']:.2f}).")
        out.append(f"  {p}: the trainer's CPU per sample for decode + hand-over from its own workers "
                   f"{1e3 * pr.get('local_trainer_s', float('nan')):.3f} ms vs for Ray's hand-over "
                   f"{1e3 * pr['ray_consume_s']:.3f} ms (its CPU over the epoch ÷ samples, less the step; Ray's "
                   f"per-epoch start included) "
                   f"({'saves' if pr['saves_trainer'] else 'does not save'} trainer time); decode nodes' capacity "
                   f"{pr['remote_capacity']:,.0f} vs trainer alone {pr['local_rate']:,.0f} samples/s "
                   f"({'exceeds' if pr['capacity_exceeds'] else 'below'}; the step alone {pr['step_rate']:,.0f}); "
                   f"{by.get((p, REMOTE, 'bytes_per_sample'), float('nan')):,.0f} B per sample moved, "
                   f"{1e3 * by.get((p, REMOTE, 'wait_s_per_batch'), float('nan')):.1f} ms per batch waiting in "
                   f"iter_torch_batches.")
        out.append(f"  {p}: measured remote {m[REMOTE]:,.0f} samples/s against the {pr['remote_rate']:,.0f} the "
                   f"per-sample costs allow; the gap is what they leave out (Ray's start of each epoch: first "
                   f"batch after {by.get((p, REMOTE, 'first_batch_s'), float('nan')):.2f} s; one task's latency "
                   f"per batch, moving it between object stores).")
        bad = [f"{a}: {c}" for a, cs in info["pipelines"][p]["checks"].items() for c in cs if not c["ok"]]
        out.append(f"  {p}: every Ray epoch had every sample once and decode where it was sent."
                   if not bad else f"  {p}: CHECK FAILED: {bad[0]}")
    return out


def plot(df, info: dict, ax_row):
    """Samples/s per arrangement (median, IQR) for each pipeline, one panel each, the verdict in the title."""
    judged = {j["pipeline"]: j for j in judge(df, info)}
    sps = df[df.metric == "samples_per_s"]
    for ax, (name, j) in zip(ax_row, judged.items()):
        g = sps[sps.pipeline == name]
        meds, lo, hi = [], [], []
        for a in ARRANGEMENTS:
            med, q25, q75 = median_iqr(g[g.variant == a].value)
            meds.append(med), lo.append(med - q25), hi.append(q75 - med)
        ax.bar(range(3), meds, yerr=[lo, hi], color="#4C72B0", capsize=4)
        ax.set_xticks(range(3), [a.replace(" (", "\n(") for a in ARRANGEMENTS], fontsize=8)
        ax.set_ylabel("samples/s (median, IQR over epochs)")
        if min(meds) > 0 and max(meds) / min(meds) > 20:  # a tall bar would flatten the others

            ax.set_yscale("log")
            readable_log_axis(ax)
        ax.set_title(f"{name}: remote {j['short']}\npredicted from the per-sample costs: "
                     f"x{j['prediction']['predicted_speedup']:.2f}", fontsize=9)
