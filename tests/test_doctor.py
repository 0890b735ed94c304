"""The bottleneck doctor: a deliberately slow stage is named, the JSON report has its fields."""

import io
import json
import time
from contextlib import redirect_stdout

import numpy as np
import pytest
import torch

from feedlab import doctor
from feedlab.doctor import BOUND_STAGES, VERDICTS, Config, Doctor, Pipeline


def fake_pipeline(decode_sleep: float = 0.0, n: int = 64) -> Pipeline:
    lr = np.full((8, 8, 3), 7, np.uint8)
    hr = np.full((16, 16, 3), 9, np.uint8)

    def read(i):
        return b"x" * 64

    def decode(raw):
        if decode_sleep:
            time.sleep(decode_sleep)
        return lr.copy(), hr.copy()

    return Pipeline("fake", "fake", n, read, decode, None, nbytes=len, files=None)


class SlowModel(torch.nn.Module):
    def __init__(self, sleep: float):
        super().__init__()
        self.sleep = sleep
        self.conv = torch.nn.Conv2d(3, 3, 1)

    def forward(self, x):
        time.sleep(self.sleep)
        return self.conv(x)


def run_doctor(pipe, model="none", workers=1):
    doc = Doctor(None, "fake", "fake", batch_size=8, model=model, device="cpu", max_workers=workers,
                 repeats=2, samples=16, e2e_batches=3, cold=False, pipeline_factory=lambda f, d: pipe)
    doc.measure(alternatives=False)
    return doc, doc.diagnose(Config("fake", "fake", "totensor", workers, 8))


def test_slow_decode_is_named():
    # 20 ms per decoded sample: far above read/collate (µs) on any machine
    _doc, rep = run_doctor(fake_pipeline(decode_sleep=0.02))
    assert rep["bound_stage"] == "decode"
    assert rep["verdict"] == "data-bound"
    assert rep["measured_samples_per_s"] > 0
    stages = {r["stage"] for r in rep["stages"]}
    assert {"read", "decode", "transform", "collate", "h2d", "model"} <= stages


def test_slow_model_is_compute_bound():
    # 40 ms per batch of 8 = 5 ms/sample in the model; the data stages cost µs
    _doc, rep = run_doctor(fake_pipeline(), model=SlowModel(0.04))
    assert rep["bound_stage"] == "model"
    assert rep["verdict"] == "compute-bound"


def test_prediction_scales_with_workers_when_data_bound():
    doc, _rep = run_doctor(fake_pipeline(decode_sleep=0.01), workers=2)
    cfg = Config("fake", "fake", "totensor", 0, 8)
    p0 = doc.predict(cfg)["predicted_samples_per_s"]
    p2 = doc.predict(cfg.replace(num_workers=2))["predicted_samples_per_s"]
    assert p2 > 1.5 * p0  # sleep costs wall time, not CPU: two workers overlap it
    advice = doc.advise(cfg)
    assert advice and advice[0]["setting"] == "num_workers" and advice[0]["value"] == 2
    assert advice[0]["expected_gain"] > 1.5


def test_shm_report_warns_when_batches_do_not_fit(tmp_path):
    ok = doctor.shm_report(1024, workers=2, path=str(tmp_path))
    assert ok["fits"] and not ok["warning"]
    huge = doctor.shm_report(1 << 50, workers=4, path=str(tmp_path))
    assert huge["fits"] is False and "Bus error" in huge["warning"]
    assert huge["need_bytes"] == (1 << 50) * 2 * 4


def test_cli_json_on_a_real_set(sr_root):
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = doctor.main(["--data", str(sr_root), "--format", "png", "--json", "--repeats", "1",
                          "--samples", "16", "--batches", "2", "--workers", "1", "--batch-size", "8"])
    assert rc == 0
    rep = json.loads(buf.getvalue())
    for key in ("stages", "end_to_end", "predicted_samples_per_s", "measured_samples_per_s", "verdict",
                "bound_stage", "advice", "shm", "config", "cores", "device"):
        assert key in rep, key
    assert rep["verdict"] in VERDICTS
    assert rep["bound_stage"] in BOUND_STAGES
    assert [r["num_workers"] for r in rep["end_to_end"]] == [0, 1]
    assert all(r["samples_per_s"] > 0 for r in rep["end_to_end"])
    read = [r for r in rep["stages"] if r["stage"] == "read" and r["measurable"]]
    assert read and all(r["bytes_per_s"] > 0 for r in read)
    if not torch.cuda.is_available():
        assert any(not r["measurable"] and "no CUDA" in r["note"] for r in rep["stages"] if r["stage"] == "h2d")
    for a in rep["advice"]:
        assert a["expected_gain"] >= doctor.MIN_GAIN


def test_cli_trace(sr_root, tmp_path):
    from feedlab.trace import batches_in, check_trace

    out = tmp_path / "t.json"
    with redirect_stdout(io.StringIO()):
        doctor.main(["--data", str(sr_root), "--format", "lmdb", "--json", "--repeats", "1", "--samples", "8",
                     "--batches", "2", "--workers", "1", "--batch-size", "2", "--no-cold", "--trace", str(out)])
    obj = json.loads(out.read_text())
    assert check_trace(obj) == []
    assert batches_in(obj, "step") == set(range(20))
    assert batches_in(obj, "batch") >= set(range(20))  # workers may have prefetched beyond the 20th


def test_transfer_stage_counts_only_with_workers(tmp_path):
    """The worker → main hand-over is measured, and priced into predictions with workers only."""
    import torch

    threads_before = torch.get_num_threads()
    items = [(np.zeros((8, 8, 3), np.uint8), np.zeros((16, 16, 3), np.uint8))] * 32

    def factory(fmt, decode):
        return Pipeline(fmt="x", decode_name="identity", n=len(items), read=lambda i: items[i],
                        decode=lambda r: r, nbytes=lambda r: 8 * 8 * 3 + 16 * 16 * 3)

    doc = Doctor(None, fmt="x", batch_size=8, model="none", device="cpu", max_workers=1, repeats=1,
                 samples=16, cold=False, pipeline_factory=factory).measure(alternatives=False)
    st = doc.stages[("transfer", "totensor", 8)]
    assert st.measurable and st.t >= 0
    c0 = doc.costs(Config(fmt="x", decode="pil", collate="totensor", batch_size=8, num_workers=0))
    c1 = doc.costs(Config(fmt="x", decode="pil", collate="totensor", batch_size=8, num_workers=1))
    assert c0["transfer"] == (0.0, 0.0) and c1["transfer"] == (st.t, st.c)
    assert torch.get_num_threads() == threads_before  # measuring with workers restores the main's threads
