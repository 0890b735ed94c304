"""06's throughput comparison: the GPU path's control flow on the CPU decoder, the all-core pool,
and a reading that says "not tested fairly here" whenever one side is missing or too short."""

import io

import numpy as np
import pandas as pd
from PIL import Image

from feedlab.experiments import decode_throughput as T
from feedlab.results import Results


class Set:
    name, kind, size = "jpeg_32", "jpeg", 32

    def __init__(self, n=5):
        rng = np.random.default_rng(0)
        self.datas = []
        for _ in range(n):
            b = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(b, "JPEG")
            self.datas.append(b.getvalue())


def test_cycled_reaches_the_count_in_order():
    assert T.cycled([1, 2, 3], 7) == [1, 2, 3, 1, 2, 3, 1]
    assert T.cycled([1, 2, 3], 2) == [1, 2, 3]


def test_gpu_path_runs_its_batches_and_records_the_pass_size():
    res, reason = T.measure_gpu(Set(), batch=4, min_images=10, repeats=2, warmup=0, device="cpu",
                                available=(True, ""))
    df = res.frame()
    assert reason == "" and len(df) == 2 and set(df.op) == {"decode_batch"}
    assert (df.images == 10).all() and (df.batch == 4).all() and (df.value > 0).all()


def test_gpu_unavailable_or_not_jpeg_measures_nothing_and_says_why():
    res, reason = T.measure_gpu(Set(), available=(False, "no CUDA here"))
    assert reason == "no CUDA here" and len(res.rows) == 0
    png = Set()
    png.kind = "png"
    assert "JPEG only" in T.measure_gpu(png, available=(True, ""))[1]


def test_all_core_pool_decodes_every_image_of_the_pass():
    df = T.measure_cpu_all_cores(Set(), "pil", processes=2, min_images=12, repeats=2, warmup=1).frame()
    assert (df.processes == 2).all() and (df.images == 12).all() and (df.value > 0).all()


def _df(gpu_images=2048, cpu=True):
    r = Results()
    r.add_samples("decode_backends", "pil", "img_per_s", [900, 1000], "img/s", op="decode", image_set="s")
    r.add_samples("decode_backends", "cuda", "img_per_s", [20000, 20000], "img/s", op="decode_batch", image_set="s",
                  images=gpu_images, batch=256, processes=0)
    if cpu:
        r.add_samples("decode_backends", "simplejpeg", "img_per_s", [4000, 4000], "img/s", op="decode_all_cores",
                      image_set="s", images=2048, batch=0, processes=16)
    return r.frame()


def test_reading_compares_steady_gpu_with_every_core():
    out = T.reading(_df(), "s")
    assert out["ratio"] == 5.0 and "16 processes" in out["text"] and "×5.00" in out["text"]
    assert T.best_cpu_backend(_df(), "s") == "pil"


def test_reading_refuses_an_unfair_comparison():
    assert "fewer than 2048" in T.reading(_df(gpu_images=64), "s")["text"]
    assert "no all-core CPU decode" in T.reading(_df(cpu=False), "s")["text"]
    empty = pd.DataFrame(columns=["metric", "op", "image_set", "variant", "value"])
    assert "not tested fairly here (no CUDA)" in T.reading(empty, "s", cuda_reason="no CUDA")["text"]
