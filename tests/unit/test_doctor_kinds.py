"""The doctor prices and advises loader kinds: the shared-memory ring (``loader="ring"``) where the
spec can use it as it is, from the ring's hand-over measured in the same run."""

from __future__ import annotations

import numpy as np
import pytest

from feedlab.doctor import CostTable, Machine, Stage
from feedlab.doctor import predict as PR
from feedlab.doctor.answer import code_line
from feedlab.doctor.probes import probe_ring
from feedlab.doctor.report import _stage_lines
from feedlab.pipeline import PipelineSpec

SPEC = PipelineSpec(format="fake", decode="fake", collate="fast", batch_size=8, num_workers=2)


def table(receive=40e-6, ring=2e-6, fill=5e-6, cw=30e-6, cores=4) -> CostTable:
    t = CostTable(Machine(cores, float(cores), False, {0: cores, 1: 3, 2: 2, 3: 1, 4: 1}))
    for k, v in (("read", 5e-6), ("decode", 0.0), ("transform", 1e-6)):
        t[(k, "fake", "fake")] = Stage(k, k, [v], [v])
    for c in ("fast", "totensor"):
        t[("collate", c, 8)] = Stage("collate", "c", [fill], [fill])
        t[("collate_worker", c, 8)] = Stage("collate", "cw", [cw], [cw])
        t[("handover_worker", c, 8)] = Stage("handover", "h", [3e-6], [3e-6])
        t[("receive", c, 8)] = Stage("receive", "r", [receive], [receive])
        for T in (1, 2, 3, 4):
            t[("h2d", c, 8, False, T)] = Stage("h2d", "h2d", [1e-6], [1e-6])
    for T in (1, 2, 3, 4):
        t[("model", 8, T)] = Stage("model", "m", [0.0], [0.0])
    if ring is not None:
        t[("ring_receive", 8)] = Stage("receive", "ring", [ring], [ring], bytes_per_sample=15360)
    return t


def test_the_ring_is_priced_from_its_own_hand_over_and_the_in_process_fill():
    c = PR.costs(table(), SPEC.replace(loader="ring"))
    assert c["receive"] == (2e-6, 2e-6)           # a slot index, not a pickled batch
    assert c["handover"] == (0.0, 0.0)            # no per-batch segment to build
    assert c["collate"] == (5e-6, 5e-6)           # a copy into the slot, as the in-process collate
    d = PR.costs(table(), SPEC)
    assert d["receive"] == (40e-6, 40e-6) and d["collate"] == (30e-6, 30e-6)


def test_the_ring_is_a_candidate_only_where_the_spec_can_use_it_as_it_is():
    kinds = lambda t, s: [(k, v) for k, v, _ in PR.candidates(t, s, 2) if k == "loader"]  # noqa: E731
    assert kinds(table(), SPEC) == [("loader", "ring")]
    assert kinds(table(), SPEC.replace(num_workers=0)) == []            # the ring needs workers
    assert kinds(table(), SPEC.replace(collate="totensor")) == []       # it fills uint8 slots
    assert kinds(table(ring=None), SPEC) == []                          # not measured: not priced
    assert kinds(table(), SPEC.replace(loader="ring")) == [("loader", "dataloader")]
    assert PR.costs(table(), SPEC.replace(loader="batched", num_workers=0)) is None  # a kind not priced


def test_the_doctor_advises_the_ring_when_the_hand_over_bounds_the_main_process():
    adv = PR.advise(table(receive=200e-6), SPEC, 2)
    assert adv and adv[0]["setting"] == "loader" and adv[0]["value"] == "ring"
    assert "hand-over 200 µs → 2 µs" in adv[0]["why"]
    # a DataLoader hand-over cheaper than the ring's: the ring does not pay and is not advised
    assert not [a for a in PR.advise(table(receive=2e-6, cw=5e-6, ring=50e-6), SPEC, 2) if a["setting"] == "loader"]


def test_the_advice_says_how_to_apply_a_loader_kind():
    line = code_line("loader", "ring", {"data": "DIR"})
    assert "loader='ring'" in line and "make_loader" in line and "--loader-kind ring" in line


def test_the_stage_table_shows_the_hand_over_in_gb_per_s():
    rows = [Stage("receive", "ring → main", [2e-6], [2e-6], bytes_per_sample=15360).row(),
            Stage("read", "npy", [5e-6], [5e-6], bytes_per_sample=15360).row()]
    lines = _stage_lines({"stages": rows})
    assert "7.68 GB/s" in lines[1] and "MB/s" in lines[2]


def test_probe_ring_times_the_main_side_of_each_batch():
    items = [(np.zeros((4, 4, 3), np.uint8), np.zeros((8, 8, 3), np.uint8)) for _ in range(12)]
    r = probe_ring(items, 4, batches=5, skip=1)
    assert len(r["receive_cpu"]) == 5 and all(x >= 0 for x in r["receive_cpu"])
    assert r["bytes_per_sample"] == pytest.approx(4 * 4 * 3 + 8 * 8 * 3)


def test_a_one_process_kind_is_priced_from_its_own_loop_and_advised_when_faster():
    t = table()
    t[("kind", "fake", "batched", 8)] = Stage("read", "batched", [1e-6], [1e-6])
    spec = SPEC.replace(num_workers=0)
    c = PR.costs(t, spec.replace(loader="batched"))
    assert c["read"] == (1e-6, 1e-6) and c["decode"] == c["transform"] == c["collate"] == (0.0, 0.0)
    assert PR.costs(t, SPEC.replace(loader="batched")) is None          # one process: no workers
    cands = [(v, s.num_workers) for k, v, s in PR.candidates(t, SPEC, 2) if k == "loader"]
    assert ("batched", 0) in cands                                       # the kind brings its own 0 workers
    assert not [1 for k, v, _ in PR.candidates(t, spec.replace(collate="totensor"), 2)
                if (k, v) == ("loader", "batched")]                      # it fills uint8 slots: not with totensor
    adv = PR.advise(t, spec, 2)
    assert adv[0]["setting"] == "loader" and adv[0]["value"] == "batched"
    assert "reads whole batches" in adv[0]["why"]
    t[("kind", "fake", "batched", 8)] = Stage("read", "batched", [50e-6], [50e-6])
    assert not [a for a in PR.advise(t, spec, 0) if a["setting"] == "loader"]   # slower: not advised


def test_the_doctor_measures_one_process_kinds_only_where_they_mean_the_same_pipeline():
    from feedlab.doctor import Doctor

    class Fake(Doctor):
        def __init__(self, spec):
            self.spec = spec

    assert Fake(PipelineSpec(format="npy_mmap", collate="fast", transform="none")).one_process_kinds("npy_mmap") \
        == ["batched", "chunk"]
    assert Fake(PipelineSpec(format="npy_mmap", collate="fast", transform="default")).one_process_kinds(
        "npy_mmap") == []                                                # they would drop the transform
    assert Fake(PipelineSpec(format="png", collate="fast", transform="none")).one_process_kinds("png") == ["batched"]
    assert Fake(PipelineSpec(format="npy", collate="fast", transform="none")).one_process_kinds("npy") == []
    assert Fake(PipelineSpec(format="npy_mmap", collate="totensor", transform="none")).one_process_kinds(
        "npy_mmap") == []
