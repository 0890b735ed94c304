"""Image decoders side by side (notebook 06_decode_backends).

Images per second on one core, for every backend :mod:`feedlab.decode` knows,
on image sets held in memory (the clock never sees a file):

* ``jpeg_native``: the classification set's JPEGs as built (varying sizes);
* ``jpeg_<s>`` / ``png_<s>``: the same photos resized once to ``s``×``s`` and
  re-encoded (JPEG quality 90, 4:2:0; PNG at Pillow's default level) — this is
  also what "preprocess out of band" produces;
* ``png_sr``: the SR set's high-resolution PNG patches.

Operations: ``decode`` (bytes -> HWC uint8), ``decode_resize`` (decode and
resize to the model's size; JPEG decoders that can decode at a reduced scale
do), ``loader`` (torchvision's ``default_loader`` from files, PIL vs accimage
through ``torchvision.set_image_backend``), ``decode_batch`` on a GPU
(nvJPEG, batched; images/s of the device, not per core).

Ceilings and comparisons:

* :func:`tjbench` runs libjpeg-turbo's own C benchmark on one 256² JPEG;
  :func:`same_image_rates` times every Python JPEG decoder on that same image.
* :func:`pillow_side_by_side` runs one Pillow micro-benchmark
  (``_pil_bench_worker.py``) in this interpreter and in another one (a
  Pillow-SIMD environment), because Pillow-SIMD cannot sit beside Pillow.

A backend that is not installed is never dropped: it gets a row in the
``availability`` table with the reason and the install hint.
``python -m feedlab.experiments.decode_backends --pillow-simd-python PATH``
runs the Pillow comparison from the command line.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from feedlab import decode
from feedlab.experiments.row_invariants import decode_pixel_error
from feedlab.like_for_like import NOT_APPLICABLE, NOT_CHECKED, invariants
from feedlab.paths import PILLOW_SIMD_PYTHON, default_cls_root, default_sr_root
from feedlab.plots import PALETTE, legend_outside
from feedlab.results import Results, summarize
from feedlab.timing import autorange_number, time_callable

EXPERIMENT = "decode_backends"
CPU_BACKENDS = ("pil", "pillow-simd", "torchvision", "accimage", "simplejpeg", "turbojpeg", "pyspng")
TJBENCH_HINT = "apt-get install -y libjpeg-turbo-progs (Debian/Ubuntu) puts tjbench on PATH"
WORKER = Path(__file__).with_name("_pil_bench_worker.py")
PILLOW_SIMD_HINT = ("build Pillow-SIMD in a second venv: apt-get install libjpeg62-turbo-dev zlib1g-dev; "
                    "python -m venv simd && simd/bin/pip install numpy && CC='cc -mavx2' simd/bin/pip install "
                    "pillow-simd (or `make pillow-simd`, which builds .venv-simd, found automatically); "
                    "or pass pillow_simd_python='simd/bin/python'")


@dataclass
class ImageSet:
    name: str
    kind: str                      # 'jpeg' | 'png'
    datas: list[bytes]
    size: int | None = None        # square side when fixed, None for varying sizes
    pixels: float = 0.0            # mean pixels per image
    files: list[str] = field(default_factory=list)  # on-disk copies (loader / worker / tjbench)


def _encode(arr: np.ndarray, kind: str, quality: int = 90) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    if kind == "jpeg":
        Image.fromarray(arr).save(buf, "JPEG", quality=quality, subsampling="4:2:0")
    else:
        Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


def prepare_sets(cls_root, sr_root=None, sizes=(96, 256), limit: int = 64, work_dir=None,
                 quality: int = 90) -> dict[str, ImageSet]:
    """Read ``limit`` images of the classification set (and the SR set's HR PNGs), make the
    fixed-size sets, and write every set's files under ``work_dir`` (a temp dir if None)."""
    from PIL import Image

    cls_root = Path(cls_root)
    paths = sorted(cls_root.glob("*/*.jpg"))
    if not paths:
        raise FileNotFoundError(f"no JPEGs under {cls_root}/<class>/*.jpg (build it with data_prep.ensure_cls)")
    # spread the pick over the classes
    step = max(1, len(paths) // limit)
    paths = paths[::step][:limit]
    native = [p.read_bytes() for p in paths]
    sets: dict[str, ImageSet] = {}
    dims = [Image.open(io.BytesIO(d)).size for d in native]
    sets["jpeg_native"] = ImageSet("jpeg_native", "jpeg", native, None, float(np.mean([w * h for w, h in dims])))
    decoded = [np.asarray(Image.open(io.BytesIO(d)).convert("RGB")) for d in native]
    for s in sizes:
        small = [np.asarray(Image.fromarray(a).resize((s, s), Image.BILINEAR)) for a in decoded]
        sets[f"jpeg_{s}"] = ImageSet(f"jpeg_{s}", "jpeg", [_encode(a, "jpeg", quality) for a in small], s, s * s)
        sets[f"png_{s}"] = ImageSet(f"png_{s}", "png", [_encode(a, "png") for a in small], s, s * s)
    if sr_root is not None and (Path(sr_root) / "hr").is_dir():
        pngs = sorted((Path(sr_root) / "hr").glob("*.png"))[:limit]
        if pngs:
            datas = [p.read_bytes() for p in pngs]
            w, h = Image.open(io.BytesIO(datas[0])).size
            sets["png_sr"] = ImageSet("png_sr", "png", datas, w if w == h else None, float(w * h))
    work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="feedlab_decode_"))
    for st in sets.values():
        d = work / st.name
        d.mkdir(parents=True, exist_ok=True)
        ext = "jpg" if st.kind == "jpeg" else "png"
        st.files = []
        for i, data in enumerate(st.datas):
            f = d / f"{i:05d}.{ext}"
            f.write_bytes(data)
            st.files.append(str(f))
    return sets


def availability_rows(kinds=("jpeg", "png")) -> list[dict]:
    """One row per (backend, kind) it supports: available or not, version, reason/hint."""
    info = decode.available_backends()
    rows = []
    for b in decode.BACKENDS:
        for k in kinds:
            if decode.supports(b, k):
                i = info[b]
                rows.append({"backend": b, "kind": k, "available": bool(i.available), "version": i.version,
                             "reason": i.reason})
    return rows


def availability_table(simd_measured: bool = False, simd_reason: str = "", tj_reason: str = "",
                       cuda_reason: str = ""):
    """:func:`availability_rows` as a DataFrame, completed with what this run learnt:
    Pillow-SIMD measured in a second interpreter (or why not), and tjbench."""
    import pandas as pd

    rows = availability_rows()
    for r in rows:
        if r["backend"] == "pillow-simd":
            if simd_measured:
                r.update(available=True, reason="measured in a second interpreter (pillow_simd_python)")
            elif simd_reason:
                r["reason"] = simd_reason
        if r["backend"] == "cuda" and cuda_reason and not r["available"]:
            r["reason"] = cuda_reason
    rows.append({"backend": "tjbench (C)", "kind": "jpeg", "available": not tj_reason, "version": "",
                 "reason": tj_reason or "libjpeg-turbo's own benchmark, decompression to RGB"})
    return pd.DataFrame(rows)


def _single_thread():
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    return old


def _rate_rows(res: Results, backend: str, op: str, st: ImageSet, secs: list[float], n: int, **extra) -> None:
    px = NOT_CHECKED if backend in ("pillow-simd", "cuda") else decode_pixel_error(   # another interpreter, the GPU
        backend, st.datas, extra.get("resize_to") or None)   # issue 45: against Pillow's full decode
    for r, s in enumerate(secs):   # each window one pass over the set, in list order, its bytes read before
        res.add(EXPERIMENT, backend, "img_per_s", n / s, "img/s", r, op=op, image_set=st.name, kind=st.kind,
                size=st.size or 0, mpix_per_image=round(st.pixels / 1e6, 4), timed_batches=n, **extra,
                batch_size=extra.get("batch", 1), num_workers=0,   # one image at a time (nvJPEG: its batch), one core
                **invariants(order="sequential", pixel_error=px, cache="warm", window_s=s,
                             epoch_batches=NOT_APPLICABLE))


def measure_decode(sets: dict[str, ImageSet], repeats: int = 5, warmup: int = 1, resize_to: int = 96,
                   resize_sets=("jpeg_native",), backends=CPU_BACKENDS) -> Results:
    """img/s (one core) of every available backend: ``decode`` on every set it reads,
    ``decode_resize`` to ``resize_to`` on ``resize_sets``."""
    info = decode.available_backends()
    res = Results()
    old = _single_thread()
    try:
        for st in sets.values():
            for b in backends:
                if not decode.supports(b, st.kind) or not info[b].available:
                    continue
                fn = decode.decoder(b)
                datas = st.datas
                secs = time_callable(lambda: [fn(d) for d in datas], warmup=warmup, repeats=repeats)
                _rate_rows(res, b, "decode", st, secs, len(datas))
                if st.name in resize_sets:
                    secs = time_callable(lambda: [decode.decode_resize(d, resize_to, b) for d in datas],
                                         warmup=warmup, repeats=repeats)
                    _rate_rows(res, b, "decode_resize", st, secs, len(datas), resize_to=resize_to)
    finally:
        import torch

        torch.set_num_threads(old)
    return res


def measure_loader(st: ImageSet, repeats: int = 5, warmup: int = 1) -> Results:
    """torchvision's ``default_loader`` over the set's files, once per image backend
    (PIL always; accimage when installed): the write-up's ``set_image_backend`` path."""
    from torchvision.datasets.folder import default_loader


    res = Results()
    names = ["PIL"] + (["accimage"] if decode.available_backends()["accimage"].available else [])
    for name in names:
        with decode.with_image_backend(name):
            def load_all():
                for f in st.files:
                    im = default_loader(f)
                    if name == "PIL":
                        im.load()
            secs = time_callable(load_all, warmup=warmup, repeats=repeats)
        _rate_rows(res, "pil" if name == "PIL" else "accimage", "loader", st, secs, len(st.files),
                   image_backend=name)
    return res


def measure_cuda(st: ImageSet, repeats: int = 5, warmup: int = 1, batch: int = 64, device="cuda") -> tuple[Results, str]:
    """nvJPEG through ``torchvision.io.decode_jpeg(device=...)``, batched; images/s of the GPU."""
    import torch


    res = Results()
    info = decode.available_backends()["cuda"]
    if not info.available:
        return res, info.reason
    chunks = [st.datas[i:i + batch] for i in range(0, len(st.datas), batch)]

    def run():
        for c in chunks:
            decode.decode_cuda_batch(c, device=device)

    secs = time_callable(run, warmup=warmup, repeats=repeats, device=torch.device(device))
    _rate_rows(res, "cuda", "decode_batch", st, secs, len(st.datas), batch=batch)
    return res, ""


# --------------------------------------------------------------------------
# the C ceiling
# --------------------------------------------------------------------------

_TJ_RE = re.compile(r"Decompress\s*-->\s*Frame rate:\s*([\d.]+)\s*fps\s*Throughput:\s*([\d.]+)\s*Megapixels/sec",
                    re.S)


def parse_tjbench(text: str) -> dict:
    """Frame rate (images/s) and Mpixels/s of the first decompression result in tjbench's output."""
    m = _TJ_RE.search(text)
    if not m:
        raise ValueError("no 'Decompress --> Frame rate ... Throughput ...' in tjbench output")
    return {"img_per_s": float(m.group(1)), "mpix_per_s": float(m.group(2))}


def tjbench(jpeg_path, benchtime: float = 1.0, warmup: float = 0.5, repeats: int = 3,
            fastdct: bool = False) -> tuple[list[dict], str]:
    """Run libjpeg-turbo's ``tjbench`` (decompression to RGB) ``repeats`` times.
    Returns (one dict per run, reason when tjbench is not found or fails)."""
    exe = shutil.which("tjbench")
    if not exe:
        return [], f"tjbench not found on PATH: {TJBENCH_HINT}"
    cmd = [exe, str(jpeg_path), "-rgb", "-nowrite", "-benchtime", str(benchtime), "-warmup", str(warmup)]
    if fastdct:
        cmd.append("-fastdct")
    out = []
    for _ in range(repeats):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120 + 4 * benchtime)
        if r.returncode != 0:
            return out, f"tjbench failed (rc={r.returncode}): {r.stderr.strip()[:200]}"
        try:
            out.append(parse_tjbench(r.stdout))
        except ValueError as exc:
            return out, str(exc)
    return out, ""


def same_image_rates(data: bytes, repeats: int = 5, warmup: int = 1, backends=CPU_BACKENDS,
                     min_round_s: float = 0.05) -> Results:
    """img/s of every available JPEG backend decoding one image over and over (what tjbench does)."""
    info = decode.available_backends()
    res = Results()
    old = _single_thread()
    try:
        for b in backends:
            if not decode.supports(b, "jpeg") or not info[b].available:
                continue
            fn = decode.decoder(b)
            out = fn(data).copy()
            # decode into a ready buffer where the backend can (simplejpeg), as a loader would
            call = (lambda: fn(data, out)) if b == "simplejpeg" else (lambda: fn(data))
            number = autorange_number(call, min_round_s)
            secs = time_callable(call, warmup=warmup, repeats=repeats, number=number)
            res.add_samples(EXPERIMENT, b, "img_per_s", [1 / s for s in secs], "img/s", op="same_image",
                            image_set="tjbench_image", kind="jpeg", size=out.shape[0])
    finally:
        import torch

        torch.set_num_threads(old)
    return res


# --------------------------------------------------------------------------
# Pillow vs Pillow-SIMD (two interpreters)
# --------------------------------------------------------------------------

def run_pil_worker(python: str, sets: dict[str, ImageSet], repeats: int = 5, warmup: int = 1,
                   resize_to: int = 96, resize_sets=("jpeg_native",), timeout: float = 600) -> dict:
    """Run ``_pil_bench_worker.py`` under ``python``; its JSON answer."""
    with tempfile.TemporaryDirectory(prefix="feedlab_pilw_") as tmp:
        spec = {"sets": {k: v.files for k, v in sets.items()}, "repeats": repeats, "warmup": warmup,
                "resize_to": resize_to, "resize_sets": list(resize_sets)}
        sp, op = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        sp.write_text(json.dumps(spec))
        r = subprocess.run([python, str(WORKER), str(sp), str(op)], capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{python} {WORKER.name} failed: {r.stderr.strip()[-400:]}")
        return json.loads(op.read_text())


def pillow_side_by_side(sets: dict[str, ImageSet], pillow_simd_python: str = "", repeats: int = 5,
                        warmup: int = 1, resize_to: int = 96, resize_sets=("jpeg_native",)) -> tuple[Results, str]:
    """The same Pillow micro-benchmark here (``pil``) and, when given, in a Pillow-SIMD
    interpreter (``pillow-simd``). Returns (results, reason the SIMD side is missing)."""
    res = Results()
    runs = [("this", sys.executable)]
    reason = ""
    if not pillow_simd_python and PILLOW_SIMD_PYTHON.exists():
        pillow_simd_python = str(PILLOW_SIMD_PYTHON)  # built by `make pillow-simd`
    if pillow_simd_python:
        if not Path(pillow_simd_python).exists() and not shutil.which(pillow_simd_python):
            reason = f"pillow_simd_python={pillow_simd_python!r} not found. {PILLOW_SIMD_HINT}"
        else:
            runs.append(("simd", pillow_simd_python))
    else:
        reason = f"no Pillow-SIMD interpreter given (pillow_simd_python=''). {PILLOW_SIMD_HINT}"
    for tag, py in runs:
        got = run_pil_worker(py, sets, repeats, warmup, resize_to, resize_sets)
        if tag == "simd" and not got["is_simd"]:
            reason = f"{py} has PIL {got['pil_version']}, which is not Pillow-SIMD. {PILLOW_SIMD_HINT}"
            continue
        variant = "pillow-simd" if got["is_simd"] else "pil"
        for r in got["results"]:
            st = sets[r["set"]]
            _rate_rows(res, variant, f"worker_{r['op']}", st, r["seconds"], r["n"], pil_version=got["pil_version"],
                       interpreter=tag, resize_to=resize_to if r["op"] != "decode" else 0)
    return res, reason


# --------------------------------------------------------------------------
# tables and figures
# --------------------------------------------------------------------------

def summary(df):
    d = df[df["metric"] == "img_per_s"]
    return summarize(d, ["op", "image_set", "kind", "variant"])


def rate(s, op: str, image_set: str, variant: str) -> float:
    m = s[(s["op"] == op) & (s["image_set"] == image_set) & (s["variant"] == variant)]
    return float(m["median"].iloc[0]) if len(m) else float("nan")


def plot_rates(ax, s, op: str, image_sets, availability=None, kinds=None, unavailable_label: bool = True) -> None:
    """Horizontal bars: img/s per backend (median, IQR) for each image set, coloured by
    image set with a legend. Only what was measured is drawn: what could not be measured
    is listed by :func:`availability_table` (``availability`` and ``unavailable_label``
    are accepted for older callers and ignored)."""
    from matplotlib.patches import Patch


    rows = []
    for name in image_sets:
        part = s[(s["op"] == op) & (s["image_set"] == name)]
        for b in CPU_BACKENDS + ("cuda",):
            if b in set(part["variant"]):
                r = part[part["variant"] == b].iloc[0]
                rows.append((name, b, r["median"], r["q25"], r["q75"]))
    y = np.arange(len(rows))[::-1]
    sets_order = list(dict.fromkeys(r[0] for r in rows))
    colors = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(sets_order)}
    for yi, (name, b, med, lo, hi) in zip(y, rows):
        ax.barh(yi, med, color=colors[name], xerr=[[max(0, med - lo)], [max(0, hi - med)]], capsize=2)
        ax.text(max(med, hi), yi, f"  {med:,.0f}", va="center", fontsize=7)
    ax.set_yticks(y)
    ax.set_yticklabels([b for _n, b, *_ in rows], fontsize=7.5)
    ax.set_xlabel("images/s, one core (median, IQR over repeats)")
    if rows:
        ax.set_xlim(0, max(max(r[2], r[4]) for r in rows) * 1.18)  # room for the numbers
        legend_outside(ax, "right", fontsize=7.5, title="image set",
                       handles=[Patch(color=colors[n], label=n) for n in sets_order])


def main(argv=None) -> int:
    import argparse


    ap = argparse.ArgumentParser(description="feedlab: Pillow vs Pillow-SIMD (and the other decoders)")
    ap.add_argument("--pillow-simd-python", default="", help="interpreter of a Pillow-SIMD environment")
    ap.add_argument("--pillow-simd-venv", default="", help="a Pillow-SIMD venv (uses its bin/python)")
    ap.add_argument("--cls-root", default=str(default_cls_root("quick")))
    ap.add_argument("--sr-root", default=str(default_sr_root("quick")))
    ap.add_argument("--limit", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--resize-to", type=int, default=96)
    args = ap.parse_args(argv)
    py = args.pillow_simd_python or (str(Path(args.pillow_simd_venv) / "bin" / "python") if args.pillow_simd_venv else "")
    sets = prepare_sets(args.cls_root, args.sr_root, limit=args.limit)
    res, reason = pillow_side_by_side(sets, py, repeats=args.repeats, resize_to=args.resize_to)
    s = summary(res.frame())
    print(s.to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    if reason:
        print("Pillow-SIMD:", reason)
    return 0


if __name__ == "__main__":
    sys.exit(main())


def accimage_png(png_path) -> str:
    """What accimage does with a PNG file: 'ok', the error it raises, or '' when
    accimage is not installed (write-up 003 says it reads JPEG only)."""
    try:
        import accimage
    except ImportError:
        return ""
    try:
        accimage.Image(str(png_path))
        return "ok"
    except Exception as e:  # accimage raises IOError-like errors for what it cannot decode
        return f"refused: {type(e).__name__}: {e}"
