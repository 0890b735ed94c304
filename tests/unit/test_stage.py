"""The stage room (feedlab.stage): one instrument read by the doctor, the tracer and timing; the typed
key of a measured cost; one rebuild rule for a user's DataLoader."""

import pickle
import queue

import pytest
import torch
from torch.utils.data import DataLoader

from feedlab import stage, timing
from feedlab.doctor.costs import CostTable, Machine, Stage
from feedlab.doctor.user import _isolation
from feedlab.doctor.wrap import drain, per_sample
from feedlab.errors import deadline
from feedlab.trace import Tracer

NOW = [0.0]            # a fake clock: a fetch of one sample takes 1 s, a collate 0.25 s per sample


def fake_clock() -> float:
    return NOW[0]


class Items(torch.utils.data.Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        NOW[0] += 1.0
        return torch.full((2,), i, dtype=torch.int64)


def collate(items):
    NOW[0] += 0.25 * len(items)
    return torch.stack(items)


def test_the_doctor_the_tracer_and_timing_read_one_instrument(monkeypatch, tmp_path):
    monkeypatch.setattr(stage, "clock", fake_clock)
    loader = DataLoader(Items(), batch_size=6, collate_fn=collate)

    q = queue.Queue()
    _isolation(loader, q, batches=4, limit=None, whose="", log=lambda _m: None)
    doctor = {k: per_sample(v)[0] for k, v in drain(q).items()}

    with Tracer(tmp_path / "spans") as tr:
        for _ in tr.wrap(loader):
            pass
        spans = tr.events()
    tracer = {name: [e["dur"] / 1e6 / e["args"]["items"] for e in spans if e["name"] == name and e.get("ph") == "X"]
              for name in ("fetch", "collate")}

    timed = {k: per_sample(v)[0] for k, v in timing.stage_times(loader).items()}

    for name, want in (("fetch", 1.0), ("collate", 0.25)):
        assert doctor[name] == pytest.approx([want] * 4)
        assert tracer[name] == pytest.approx([want] * 4)
        assert timed[name] == pytest.approx([want] * 4)


def test_a_cost_key_is_the_tuple_it_names():
    k = stage.CostKey("h2d", "fast", 64, True, 2)
    assert k == ("h2d", "fast", 64, True, 2) and hash(k) == hash(("h2d", "fast", 64, True, 2))
    assert (k.stage, k.collate, k.batch_size, k.pin, k.threads) == ("h2d", "fast", 64, True, 2)
    assert repr(k) == repr(("h2d", "fast", 64, True, 2))
    assert pickle.loads(pickle.dumps(k)) == k and type(pickle.loads(pickle.dumps(k))) is stage.CostKey
    with pytest.raises(ValueError, match="unknown stage 'decoed'"):
        stage.CostKey("decoed", "png", "pil")
    with pytest.raises(ValueError, match="takes format, decode"):
        stage.CostKey("decode", "png")


def test_a_cost_table_written_by_hand_is_typed_in_place_and_still_reads():
    st = Stage("decode", "png/pil", [1e-3], [1e-3])
    shared = {("read", "png", "pil"): st, ("decode", "png", "pil"): st}
    t = CostTable(Machine(2, 2.0), shared)
    assert t.stages is shared and list(shared) == [("read", "png", "pil"), ("decode", "png", "pil")]
    assert all(type(k) is stage.CostKey for k in t.stages)
    assert t.get(("decode", "png", "pil")) is st
    t[("model", 8, 1)] = st
    assert next(k for k in t.stages if k.stage == "model").batch_size == 8


def test_one_rebuild_keeps_the_users_settings():
    g = torch.Generator().manual_seed(3)
    user = DataLoader(Items(), batch_size=4, shuffle=True, generator=g, num_workers=2, prefetch_factor=3,
                      persistent_workers=True, timeout=30, multiprocessing_context="fork")
    again = stage.rebuild(user)
    assert again.batch_sampler is user.batch_sampler and again.generator is g
    assert (again.num_workers, again.prefetch_factor, again.persistent_workers, again.timeout) == (2, 3, True, 30)
    # read in the main process: the settings only workers take are left out (DataLoader refuses them there)
    here = stage.rebuild(user, num_workers=0)
    assert (here.num_workers, here.timeout, here.multiprocessing_context) == (0, 0, None)


def test_a_persistent_loader_read_in_parts_starts_afresh_each_time():
    loader = DataLoader(list(range(64)), batch_size=4, num_workers=1, persistent_workers=True,
                        multiprocessing_context="fork")
    with deadline(60, "persistent loader read in parts"):
        for _ in range(3):
            it = iter(loader)
            got = [next(it) for _ in range(2)]
            stage.stop(loader, it)
            assert [b.tolist() for b in got] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert loader._iterator is None


def test_the_doctor_reads_a_persistent_loader_more_than_once():
    """The doctor times your loader as built in several passes, each ended early: a loader with persistent
    workers raised "Queue ... is closed" on the second pass (its ended iterator was reused)."""
    from feedlab.doctor.user import _run

    loader = DataLoader(list(range(256)), batch_size=4, num_workers=1, persistent_workers=True,
                        multiprocessing_context="fork")
    with deadline(120, "the doctor's passes over a persistent loader"):
        rates = [_run(loader, None, "cpu", batches=6, skip=1, limit=30)["steady"] for _ in range(2)]
    assert all(r > 0 for r in rates)
