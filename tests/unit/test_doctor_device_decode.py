"""The doctor's decode="cuda": priced in the main process beside the copy, measured through the same
batched call the loop makes (its control flow run here on the CPU decoder)."""

import numpy as np
import pytest
from PIL import Image

from feedlab.doctor import CostTable, Doctor, Effort, Machine, Stage
from feedlab.doctor import predict as PR
from feedlab.doctor.device_decode import measure_device_decode
from feedlab.pipeline import PipelineSpec

SPEC = PipelineSpec(format="jpeg", decode="pil", collate="totensor", batch_size=8, num_workers=2)


def table(gpu_decode=20e-6):
    t = CostTable(Machine(4, 4.0, True, {0: 4, 1: 3, 2: 2, 3: 1, 4: 1}))
    for dec, d in (("pil", 400e-6), ("cuda", gpu_decode)):
        t[("read", "jpeg", dec)] = Stage("read", "r", [10e-6], [10e-6])
        t[("decode", "jpeg", dec)] = Stage("decode", "d", [d], [d if dec == "pil" else 2e-6])
        t[("transform", "jpeg", dec)] = Stage("transform", "t", [0.0], [0.0])
    t[("collate_worker", "totensor", 8)] = Stage("collate", "c", [30e-6], [30e-6])
    t[("collate", "totensor", 8)] = Stage("collate", "c", [30e-6], [30e-6])
    t[("handover_worker", "totensor", 8)] = Stage("handover", "h", [5e-6], [5e-6])
    t[("receive", "totensor", 8)] = Stage("receive", "r", [5e-6], [5e-6])
    for T in (1, 2, 3, 4):
        t[("h2d", "totensor", 8, False, T)] = Stage("h2d", "h2d", [3e-6], [3e-6])
        t[("model", 8, T)] = Stage("model", "m", [50e-6], [50e-6])
    return t


def test_device_decode_is_priced_in_the_main_process():
    c = PR.costs(table(), SPEC.replace(decode="cuda"))
    assert c["decode"] == (0.0, 0.0) and c["collate"] == (0.0, 0.0)
    assert c["h2d"][0] == pytest.approx(3e-6 + 20e-6)


def test_the_doctor_advises_it_where_cpu_decode_bounds_a_cuda_machine():
    advice = PR.advise(table(), SPEC, max_workers=2)
    assert advice[0]["setting"] == "decode" and advice[0]["value"] == "cuda"
    assert "on the GPU" in advice[0]["why"]
    # a GPU decode slower than the workers' CPU decode is not advised
    assert all(a["value"] != "cuda" for a in PR.advise(table(gpu_decode=2e-3), SPEC, max_workers=2))


def test_measured_through_the_loops_own_batched_call(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "a").mkdir()
    for i in range(6):
        Image.fromarray(rng.integers(0, 255, (40, 50, 3), dtype=np.uint8)).save(tmp_path / "a" / f"{i}.jpg")
    doc = Doctor(tmp_path, SPEC.replace(device="cpu"), max_workers=1,
                 effort=Effort(repeats=2, samples=4, e2e_batches=2, cold=False))
    doc.measure_items("jpeg", "pil")
    assert measure_device_decode(doc, "jpeg", batch=8, device="cpu", size=32)
    s = doc.table.get(("decode", "jpeg", "cuda"))
    assert s is not None and s.t > 0 and "batch of 8" in s.variant
    assert doc.table.get(("read", "jpeg", "cuda")) is doc.table.get(("read", "jpeg", "pil"))
    assert not measure_device_decode(doc, "png", batch=8, device="cpu")   # nvJPEG: JPEG only
