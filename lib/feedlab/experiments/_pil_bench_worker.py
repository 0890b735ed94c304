"""Pillow decode/resize micro-benchmark that runs in any interpreter with Pillow.

Self-contained on purpose (standard library + PIL, numpy if present): Pillow-SIMD
replaces Pillow in place, so comparing the two means running this same file in
a second environment. Usage: ``python _pil_bench_worker.py SPEC.json OUT.json``.

SPEC: ``{"sets": {name: [paths]}, "repeats": int, "warmup": int,
"resize_to": int, "resize_sets": [names]}``. OUT: PIL's version, whether it is
the SIMD fork, and seconds per round (one round = every image of a set once)
for ``decode``, ``decode_resize`` (JPEG draft + bilinear resize) and
``resize`` (bilinear resize of already decoded images).
"""

import io
import json
import sys
import time


def main(spec_path, out_path):
    import PIL
    from PIL import Image

    try:
        import numpy as np
        as_array = np.asarray
    except ImportError:  # pragma: no cover - numpy-less environment
        def as_array(im):
            return im.tobytes()

    spec = json.load(open(spec_path))
    reps, warm, size = int(spec["repeats"]), int(spec["warmup"]), int(spec["resize_to"])

    def decode(data):
        im = Image.open(io.BytesIO(data))
        if im.mode != "RGB":
            im = im.convert("RGB")
        return as_array(im)

    def decode_resize(data):
        im = Image.open(io.BytesIO(data))
        if im.format == "JPEG" and im.width >= 2 * size and im.height >= 2 * size:
            im.draft("RGB", (size, size))
        if im.mode != "RGB":
            im = im.convert("RGB")
        return as_array(im.resize((size, size), Image.BILINEAR))

    def rounds(fn, items):
        for _ in range(warm):
            for x in items:
                fn(x)
        out = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for x in items:
                fn(x)
            out.append(time.perf_counter() - t0)
        return out

    results = []
    for name, paths in spec["sets"].items():
        datas = [open(p, "rb").read() for p in paths]
        results.append({"set": name, "op": "decode", "n": len(datas), "seconds": rounds(decode, datas)})
        if name in spec.get("resize_sets", []):
            results.append({"set": name, "op": "decode_resize", "n": len(datas),
                            "seconds": rounds(decode_resize, datas)})
            images = []
            for d in datas:
                im = Image.open(io.BytesIO(d))
                im = im.convert("RGB")
                im.load()
                images.append(im)
            results.append({"set": name, "op": "resize", "n": len(images),
                            "seconds": rounds(lambda im: im.resize((size, size), Image.BILINEAR), images)})
    simd = ".post" in PIL.__version__
    try:
        from importlib import metadata
        metadata.distribution("Pillow-SIMD")
        simd = True
    except Exception:
        pass
    json.dump({"pil_version": PIL.__version__, "is_simd": simd, "python": sys.version.split()[0],
               "results": results}, open(out_path, "w"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
