"""decode="cuda": workers read bytes, the batch is decoded where the loop copies it to the device.
The control flow runs here on the CPU decoder (the same torchvision call with device="cpu")."""

import numpy as np
import pytest
import torch
from PIL import Image

from feedlab import gpu_decode as G
from feedlab.pipeline import PipelineSpec, make_loader, open_dataset
from feedlab.timing import run_epoch


@pytest.fixture()
def folder(tmp_path):
    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        (tmp_path / c).mkdir()
        for i in range(5):
            h, w = (40, 60) if i % 2 else (64, 48)   # varying sizes: cropped and resized on the device
            Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(tmp_path / c / f"{i}.jpg")
    return tmp_path


def test_problems_name_the_format_and_the_device():
    assert any("CUDA device" in p for p in PipelineSpec(format="jpeg", decode="cuda").problems("cpu"))
    assert any("does not hold JPEGs" in p for p in PipelineSpec(format="png", decode="cuda").problems("cuda"))
    assert not [p for p in PipelineSpec(format="jpeg", decode="cuda").problems("cuda") if "decode" in p]


@pytest.mark.parametrize("workers", [0, 2])
def test_workers_hand_over_bytes_and_the_loop_decodes_each_batch_once(folder, workers):
    spec = PipelineSpec(format="jpeg", decode="cuda", batch_size=4, num_workers=workers, device="cpu")
    ds = open_dataset(folder, spec, crop=32)
    assert isinstance(ds, G.EncodedView) and len(ds) == 10
    x, y = next(iter(make_loader(ds, spec, shuffle=False)))
    assert G.is_encoded(x) and len(x) == 4 and x.datas[0].dtype == torch.uint8 and y.tolist() == [0, 0, 0, 0]
    calls = []
    real = G.EncodedBatch.decode_to

    def counted(self, device, decode=None):
        calls.append(len(self))
        return real(self, device, decode)

    G.EncodedBatch.decode_to = counted
    try:
        et = run_epoch(make_loader(ds, spec, shuffle=False), device="cpu")
    finally:
        G.EncodedBatch.decode_to = real
    assert calls == [4, 4, 2] and et.samples == 10


def test_decode_to_crops_resizes_and_stacks_on_the_device(folder):
    ds = G.EncodedView(open_dataset(folder, PipelineSpec(format="jpeg")), 24)
    b, _ = G.EncodedCollate(24)([ds[i] for i in range(3)])
    seen = {}

    def fake(datas, device):   # stands in for nvJPEG: records the one batched call
        seen["n"], seen["device"] = len(datas), device
        return [torch.zeros(3, 30 + 10 * k, 50, dtype=torch.uint8) for k in range(len(datas))]

    out = b.decode_to("cpu", decode=fake)
    assert seen == {"n": 3, "device": "cpu"} and out.shape == (3, 3, 24, 24) and out.dtype == torch.uint8
