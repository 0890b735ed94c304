"""doctor.probes_loop: the collate and the loop's uint8 → float conversion timed where the loop runs them
(#46: notebook 10's ``collate=fast_cl`` step was predicted at about twice its measured rate, its collate
and conversion timed alone on the same hot items at half what the loop pays)."""

from __future__ import annotations

import time
import weakref
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_doctor import SPEC

from feedlab import pipeline as pl
from feedlab.doctor import CostTable, Doctor, Effort, Machine, Stage, StageSplit, probes_loop
from feedlab.doctor import predict as PR


class Clock:
    """A fake clock that moves only where a test says a stage spends time."""

    def __init__(self):
        self.t = 0.0

    def spend(self, s: float) -> None:
        self.t += s

    def module(self):
        return SimpleNamespace(perf_counter=lambda: self.t, process_time=lambda: self.t)


class Batch(list):
    """A collated batch a weak reference can follow."""


def test_each_batch_stage_is_charged_its_own_clock_per_sample_and_the_item_making_is_not(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(probes_loop, "time", clock.module())

    def transform(s):
        clock.spend(1.0)   # the fetch's own work: outside the collate's and the conversion's clocks
        return s

    def collate(items):
        clock.spend(0.4 * len(items))
        return Batch([torch.zeros(len(items), 2, dtype=torch.uint8), torch.zeros(len(items), 1, dtype=torch.uint8)])

    def convert(t, device, non_blocking):
        clock.spend(0.3)   # per field: two fields a batch
        return t

    monkeypatch.setattr(probes_loop, "to_device_float", convert)
    got = probes_loop.loop_batches([1, 2, 3], transform, collate, 4, batches=2, warmup=1, repeats=3)
    assert got["collate"] == ([pytest.approx(0.4)] * 3, [pytest.approx(0.4)] * 3)
    assert got["h2d"] == ([pytest.approx(0.15)] * 3, [pytest.approx(0.15)] * 3)   # 2 × 0.3 over 4 samples


def test_items_are_made_fresh_for_every_batch_and_the_previous_batch_is_held_as_the_loop_holds_it():
    made: list[int] = []
    previous: list = []
    alive_at_collate: list[bool] = []

    def transform(s):
        made.append(s)
        return np.array([s], np.uint8)   # a new array each time, as the loop's fetch makes one

    def collate(items):
        alive_at_collate.append(bool(previous) and previous[-1]() is not None)
        b = Batch([torch.from_numpy(np.stack(items))])
        previous.append(weakref.ref(b))
        return b

    probes_loop.loop_batches([5, 6, 7], transform, collate, 2, batches=3, warmup=1, repeats=1, min_round_s=0)
    assert made == [5, 6, 7, 5, 6, 7] * 2   # 2 rounds × 3 batches × 2 items, cycling over the samples
    # from the second batch on, the batch before is still referenced (run_epoch's `batch`, x and y)
    assert alive_at_collate == [False] + [True] * 5


def test_a_fast_collates_round_is_sized_to_a_window_not_eight_batches():
    """8 batches of a fast collate were a 5 ms round (one descheduling a whole round; notebook 10's collate step
    erred −23% and +41% in two quiet runs): the warm-up round sizes the timed rounds to ``min_round_s`` of timed
    work; a slow collate keeps its 8 batches."""
    calls = {"n": 0}

    def fast(items):
        calls["n"] += 1
        return torch.zeros(len(items))

    probes_loop.loop_batches([1, 2], None, fast, 2, batches=8, warmup=1, repeats=2, min_round_s=0.05)
    assert calls["n"] > 8 + 2 * 8    # the timed rounds hold more than 8 batches each
    calls["n"] = 0

    def slow(items):
        calls["n"] += 1
        time.sleep(0.01)
        return torch.zeros(len(items))

    probes_loop.loop_batches([1, 2], None, slow, 2, batches=8, warmup=1, repeats=2, min_round_s=0.05)
    assert calls["n"] == 3 * 8       # 8 batches of 10 ms already make the window


def test_loop_batches_with_no_samples_says_so():
    with pytest.raises(ValueError, match="no samples"):
        probes_loop.loop_batches([], None, list, 4)


def test_the_doctor_prices_the_collate_the_loop_pays_not_the_one_of_hot_items_collated_again(monkeypatch):
    """A collate that costs 5 µs a sample on items it has not seen (the loop: each batch's items just made)
    and 1 µs on items collated before (the old probe: the same items again and again): the table holds 5 µs
    and the 0-worker prediction is 1 / (read + decode + transform + 5 µs) exactly."""
    clock = Clock()
    monkeypatch.setattr(probes_loop, "time", clock.module())
    monkeypatch.setattr(probes_loop, "to_device_float", lambda t, device, nb: t)   # no conversion cost
    seen: set[int] = set()
    serial = iter(range(10**6))

    class Pair(tuple):   # a sample the transform made, numbered (an id may be reused once freed)
        def __new__(cls, lr, hr):
            p = super().__new__(cls, (lr, hr))
            p.n = next(serial)
            return p

    def ctx_collate(items):
        fresh = sum(1 for x in items if x.n not in seen)
        seen.update(x.n for x in items)
        clock.spend(5e-6 * fresh + 1e-6 * (len(items) - fresh))
        return [torch.from_numpy(np.stack([x[0] for x in items])), torch.from_numpy(np.stack([x[1] for x in items]))]

    monkeypatch.setitem(pl.COLLATES, "ctx", (lambda: ctx_collate, "a collate whose cost depends on its items"))

    class Store:
        decode_name = "fake"

        def __len__(self):
            return 16

        def read_raw(self, i):
            return i

        def decode_raw(self, raw):
            return np.zeros((2, 2, 3), np.uint8), np.zeros((4, 4, 3), np.uint8)

    def copy_pair(s):   # the transform copies, as PairFlip does: fresh items every batch
        return Pair(np.array(s[0]), np.array(s[1]))

    spec = SPEC.replace(collate="ctx", batch_size=4, device="cpu")
    doc = Doctor(None, spec, max_workers=0, effort=Effort(repeats=2, warmup=1, samples=8, cold=False),
                 splits=lambda f, d: StageSplit(Store(), copy_pair))
    doc.table = CostTable(Machine(2, 2.0, False, {0: 1}, {1: 1.0, 2: 2.0}))
    for stage, v in (("read", 10e-6), ("decode", 20e-6), ("transform", 3e-6)):
        doc.table[(stage, "fake", "fake")] = Stage(stage, stage, [v], [v])
    doc._samples = [copy_pair(doc.split("fake", "fake").decode(i)) for i in range(8)]
    doc.measure_collate("ctx", 4, workers=False)
    doc.measure_h2d("ctx", 4)
    doc.table[("model", 4, 1)] = Stage("model", "none", [0.0], [0.0])
    assert doc.table.get(("collate", "ctx", 4)).t == pytest.approx(5e-6)
    assert doc.table.get(("h2d", "ctx", 4, False, 1)).t == pytest.approx(0.0)
    p = PR.predict(doc.table, spec)
    assert p["predicted_samples_per_s"] == pytest.approx(1 / (10e-6 + 20e-6 + 3e-6 + 5e-6))
