"""06_decode_backends, part two: decode *throughput* of a whole machine, GPU against CPU, in steady state.

One core's decode rate says which library is fastest; whether a GPU decoder is an answer depends on
what it does against *every core* decoding at once. Both sides here decode the same images, cycled to
at least ``min_images`` (default 2,048), after a warm-up pass:

* ``measure_gpu``: nvJPEG through ``torchvision.io.decode_jpeg(list, device=...)`` in batches of
  ``batch`` (default 256), synchronised at the end of each timed pass (``op="decode_batch"``, with
  ``images`` and ``batch`` columns);
* ``measure_cpu_all_cores``: one CPU decoder in ``processes`` worker processes (default: the usable
  cores), each decoding its share of the same list, a warm pool timed pass by pass
  (``op="decode_all_cores"``).

:func:`reading` sets the two side by side, or says why the comparison was not made fairly here.
"""

from __future__ import annotations

import multiprocessing as mp

from feedlab import decode, machines
from feedlab.decode import decoder
from feedlab.results import Results
from feedlab.timing import time_callable

EXPERIMENT = "decode_backends"
MIN_IMAGES = 2048
GPU_BATCH = 256


def cycled(datas: list, n: int) -> list:
    """``datas`` repeated (in order) until it holds at least ``n`` items."""
    if not datas:
        raise ValueError("no images to decode")
    reps = -(-int(n) // len(datas))
    return (list(datas) * reps)[:max(int(n), len(datas))]


def _rows(res: Results, backend: str, op: str, st, secs: list[float], n: int, **extra) -> None:
    res.add_samples(EXPERIMENT, backend, "img_per_s", [n / s for s in secs], "img/s", op=op, image_set=st.name,
                    kind=st.kind, size=st.size or 0, images=int(n), **extra)


def measure_gpu(st, batch: int = GPU_BATCH, min_images: int = MIN_IMAGES, repeats: int = 5, warmup: int = 1,
                device: str = "cuda", available: tuple[bool, str] | None = None) -> tuple[Results, str]:
    """Images/s of the GPU decoding ``st``'s JPEGs in batches of ``batch``, at least ``min_images``
    per timed pass. Returns (results, reason); the reason says why nothing was measured.
    ``available`` overrides the CUDA probe (tests run the same path on the CPU decoder)."""
    import torch


    if st.kind != "jpeg":
        return Results(), f"{st.name}: nvJPEG decodes JPEG only"
    ok, reason = available if available is not None else (decode.available_backends()["cuda"].available,
                                                           decode.available_backends()["cuda"].reason)
    if not ok:
        return Results(), reason
    datas = cycled(st.datas, min_images)
    chunks = [datas[i:i + batch] for i in range(0, len(datas), batch)]

    def run():
        for c in chunks:
            decode.decode_cuda_batch(c, device=device)

    secs = time_callable(run, warmup=warmup, repeats=repeats, device=torch.device(device))
    res = Results()
    _rows(res, "cuda", "decode_batch", st, secs, len(datas), batch=int(batch), processes=0)
    return res, ""


_DECODE = None


def _init(backend: str) -> None:
    global _DECODE
    import torch


    torch.set_num_threads(1)
    _DECODE = decoder(backend)


def _decode_share(datas: list) -> int:
    for d in datas:
        _DECODE(d)
    return len(datas)


def measure_cpu_all_cores(st, backend: str, processes: int | None = None, min_images: int = MIN_IMAGES,
                          repeats: int = 5, warmup: int = 1) -> Results:
    """Images/s of ``processes`` processes (default: the usable cores) each decoding its share of
    the same cycled list with ``backend``, one thread each; the pool is started and warmed first,
    so process start-up is not timed."""
    procs = int(processes or machines.usable_cores())
    datas = cycled(st.datas, min_images)
    shares = [datas[i::procs] for i in range(procs)]
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    with ctx.Pool(procs, initializer=_init, initargs=(backend,)) as pool:
        secs = time_callable(lambda: sum(pool.map(_decode_share, shares, chunksize=1)),
                             warmup=warmup, repeats=repeats)
    res = Results()
    _rows(res, backend, "decode_all_cores", st, secs, len(datas), processes=procs)
    return res


def best_cpu_backend(df, image_set: str) -> str | None:
    """The fastest one-core decoder of ``image_set`` in 06's tidy rows (``op == "decode"``)."""
    side = _side(df[df.variant != "cuda"], "decode", image_set)
    return None if side is None else side["variant"]


def _side(df, op: str, image_set: str, variant: str | None = None) -> dict | None:
    """The fastest variant of ``op`` on ``image_set`` in the tidy rows: its median and its columns."""
    p = df[(df.metric == "img_per_s") & (df.op == op) & (df.image_set == image_set)]
    if variant is not None:
        p = p[p.variant == variant]
    if p.empty:
        return None
    meds = p.groupby("variant")["value"].median().sort_values(ascending=False)
    best = str(meds.index[0])
    row = p[p.variant == best].iloc[0]
    num = lambda k: int(row[k]) if k in row and row[k] == row[k] else 0  # noqa: E731
    return {"variant": best, "median": float(meds.iloc[0]), "images": num("images"), "batch": num("batch"),
            "processes": num("processes")}


def reading(df, image_set: str, cuda_reason: str = "", min_images: int = MIN_IMAGES) -> dict:
    """nvJPEG's steady throughput against the best CPU decoder on every core, for one image set, from
    06's tidy rows: ``{"gpu", "cpu", "cpu_backend", "processes", "ratio", "text"}``; ``ratio`` is None
    and ``text`` says "not tested fairly here (...)" when either side is missing or too short."""
    g, c = _side(df, "decode_batch", image_set, "cuda"), _side(df, "decode_all_cores", image_set)
    out = {"gpu": None, "cpu": None, "cpu_backend": None, "processes": None, "ratio": None}
    if c is not None:
        out.update(cpu=c["median"], cpu_backend=c["variant"], processes=c["processes"])
    if g is None:
        out["text"] = f"nvJPEG vs every core: not tested fairly here ({cuda_reason or 'no GPU decode measured'})"
        return out
    out["gpu"] = g["median"]
    if g["images"] < min_images:
        out["text"] = (f"nvJPEG vs every core: not tested fairly here (the GPU decoded {g['images']} images a "
                       f"pass, fewer than {min_images} for a steady rate)")
        return out
    if c is None:
        out["text"] = "nvJPEG vs every core: not tested fairly here (no all-core CPU decode measured)"
        return out
    out["ratio"] = out["gpu"] / out["cpu"]
    out["text"] = (f"{image_set}: nvJPEG {out['gpu']:,.0f} img/s (batches of {g['batch']}, {g['images']} images a "
                   f"pass) = ×{out['ratio']:.2f} {out['cpu_backend']} on {out['processes']} processes "
                   f"({out['cpu']:,.0f} img/s)")
    return out
