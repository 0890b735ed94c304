"""The 0-worker over-prediction (#34): each stage timed alone over a whole list ran 13-16% less CPU per
sample than the loop that takes one sample through read, decode and transform before the next, so the
doctor now prices read, decode and transform one sample after another, as the loop runs them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from test_doctor import SPEC

from feedlab.doctor import Budget, Doctor, StageSplit, probes


class LoggingStore:
    """A store that logs every call of its stage split, in order."""

    decode_name = "fake"

    def __init__(self, log, n=32):
        self.log, self.n = log, n

    def __len__(self):
        return self.n

    def read_raw(self, i):
        self.log.append("read")
        return b"x" * 16

    def decode_raw(self, raw):
        self.log.append("decode")
        return np.full((4, 4, 3), 7, np.uint8), np.full((8, 8, 3), 9, np.uint8)


def test_stages_are_timed_one_sample_at_a_time_as_the_loop_runs_them():
    log: list[str] = []
    store = LoggingStore(log)

    def transform(sample):
        log.append("transform")
        return sample

    doc = Doctor(None, SPEC.replace(device="cpu"), max_workers=0,
                 budget=Budget(repeats=2, warmup=1, samples=8, cold=False),
                 splits=lambda f, d: StageSplit(store, transform))
    doc.measure_items("fake", "fake")
    timed = log[-3 * 8 * 3:]   # the warm-up and the two timed repeats, 8 samples each, 3 stages a sample
    # the old measurement read every sample, then decoded every sample, then transformed them
    assert timed == ["read", "decode", "transform"] * (3 * 8)
    for stage in ("read", "decode", "transform"):
        st = doc.table.get((stage, "fake", "fake"))
        assert st is not None and len(st.wall) == 2 and len(st.cpu) == 2
    assert len(doc._samples) == 8   # the transformed samples, for the collates measured next


def test_stream_stages_charges_each_stage_its_own_clock_per_item(monkeypatch):
    now = {"t": 0.0, "c": 0.0}
    fake = SimpleNamespace(perf_counter=lambda: now["t"], process_time=lambda: now["c"])
    monkeypatch.setattr(probes, "time", fake)

    def stage(wall, cpu, out):
        def fn(x):
            now["t"] += wall
            now["c"] += cpu
            return out(x)
        return fn

    chain = [("read", stage(1.0, 0.5, lambda i: i * 10)), ("decode", stage(3.0, 3.0, lambda r: r + 1))]
    got, last = probes.stream_stages(chain, [1, 2, 3, 4], warmup=1, repeats=2)
    assert last == [11, 21, 31, 41]
    assert got["read"] == ([1.0, 1.0], [0.5, 0.5])
    assert got["decode"] == ([3.0, 3.0], [3.0, 3.0])


def test_stream_stages_with_no_items_times_nothing():
    got, last = probes.stream_stages([("read", lambda i: i)], [], warmup=0, repeats=1)
    assert last == [] and got["read"] == ([0.0], [0.0])

