"""No DataLoader worker outlives an epoch that stops early: break, an error in a
worker, a KeyboardInterrupt (raised, and as a real SIGINT); plus the helpers."""

from __future__ import annotations

import gc
import os
import time

import pytest
from torch.utils.data import DataLoader

from feedlab.experiments import worker_hygiene as H

WAIT_S = 30.0  # bounded: torch's own shutdown waits at most 5 s per worker before terminating it


def _ds():
    return H.CountingDataset(64, 0.001)


@pytest.mark.parametrize("scenario,interrupt", [("break", "raise"), ("worker_error", "raise"),
                                                ("keyboard_interrupt", "raise"),
                                                ("keyboard_interrupt", "signal")])
def test_no_worker_left_behind(scenario, interrupt):
    before = H.child_pids()
    o = H.run_scenario(scenario, _ds(), num_workers=2, batch_size=4, interrupt=interrupt, timeout_s=WAIT_S)
    assert o.workers_started == 2
    assert o.alive_after_stop == 2  # the workers were really there when the loop stopped
    assert o.leftover == [], o.as_dict()
    assert H.live_pids(H.child_pids() - before) == []
    if scenario == "break":
        assert o.raised == "" and o.batches_seen == 2
    elif scenario == "worker_error":
        assert o.raised == "WorkerFailure"
    else:
        assert o.raised == "KeyboardInterrupt" and o.batches_seen == 2


def test_held_traceback_keeps_workers_until_released():
    o = H.run_scenario("held_traceback", _ds(), num_workers=2, batch_size=4, timeout_s=WAIT_S)
    assert o.alive_after_del == 2  # frames of the kept traceback still hold the iterator
    assert o.leftover == []


def test_keyboard_interrupt_handwritten_loop_children_gone_after_del():
    """The plain pattern, without the helper: interrupt, delete, collect, wait."""
    loader = DataLoader(_ds(), batch_size=4, num_workers=2)
    it = iter(loader)
    pids = H.iterator_worker_pids(it)
    assert len(H.live_pids(pids)) == 2
    with pytest.raises(KeyboardInterrupt):
        for i, _ in enumerate(it):
            if i == 1:
                raise KeyboardInterrupt
    del it
    gc.collect()
    left, waited = H.wait_gone(pids, timeout_s=WAIT_S)
    assert left == [] and waited < WAIT_S


def test_live_pids_and_wait_gone():
    assert H.live_pids([os.getpid()]) == [os.getpid()]
    left, waited = H.wait_gone([os.getpid()], timeout_s=0.05, poll_s=0.01)
    assert left == [os.getpid()] and waited >= 0.05
    assert H.wait_gone([], timeout_s=1.0)[0] == []


def test_failing_dataset_raises_only_at_its_index():
    ds = H.FailingDataset(_ds(), fail_at=3)
    assert float(ds[2][0]) == 2.0
    with pytest.raises(H.WorkerFailure):
        ds[3]


def test_unknown_scenario():
    with pytest.raises(ValueError):
        H.run_scenario("nope", _ds())


def test_persistent_workers_first_batch_latency_shape():
    lat = H.epoch_first_batch_latency(_ds(), num_workers=1, batch_size=4, epochs=3, persistent_workers=True,
                                      max_batches=2)
    assert len(lat) == 3 and all(v > 0 for v in lat)
    t0 = time.perf_counter()
    res = H.persistent_workers_table(_ds, num_workers=1, batch_size=4, epochs=2, repeats=1, max_batches=2)
    df = res.frame()
    assert set(df["persistent_workers"]) == {True, False}
    assert len(df) == 4 and (df["value"] > 0).all()
    assert time.perf_counter() - t0 < 60


def test_cleanup_tables_run_a_timed_out_loop_once(monkeypatch):
    """A loop or scenario whose run waited out the join timeout (a worker terminated) is not repeated: its
    seconds are torch's constant; the others run every repeat."""
    calls = []

    def fake_cleanup(loop, num_workers=2):
        calls.append(loop)
        return {"loop": loop, "raised": "WorkerFailure", "workers_alive_at_error": 2, "leftover": 0,
                "cleanup_s": 10.0 if loop == "plain" else 0.1, "terminated": 2 if loop == "plain" else 0}

    monkeypatch.setattr(H, "error_cleanup", fake_cleanup)
    df = H.error_cleanup_table(num_workers=2, repeats=3).frame()
    assert calls.count("plain") == 1 and calls.count("feedlab") == 3 and calls.count("fix") == 3
    assert set(df[df.loop == "plain"].repeat) == {0}

    def fake_scenario(sc, dataset, **kw):
        calls.append(sc)
        return H.HygieneOutcome(scenario=sc, num_workers=2, workers_started=2, raised="", alive_after_stop=2,
                                alive_after_del=0, leftover=[], cleanup_s=0.1, batches_seen=2, exitcodes=[0, 0],
                                terminate_calls=2 if sc == "worker_error" else 0)

    calls.clear()
    monkeypatch.setattr(H, "run_scenario", fake_scenario)
    H.hygiene_table(_ds, num_workers=2, repeats=2)
    assert calls.count("worker_error") == 1 and calls.count("break") == 2
