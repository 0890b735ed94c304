"""Chrome trace export: valid JSON, proper nesting, every batch on both sides."""

import json
import time

import pytest
import torch

from feedlab.timing import PhaseTimer, run_epoch
from feedlab.trace import Tracer, batches_in, check_trace


class SlowItems(torch.utils.data.Dataset):
    def __len__(self):
        return 200

    def __getitem__(self, i):
        time.sleep(0.0002)
        return torch.full((3, 8, 8), i % 256, dtype=torch.uint8), torch.zeros(3, 8, 8, dtype=torch.uint8)


@pytest.mark.parametrize("workers", [0, 2])
def test_trace_of_20_batches_is_valid(tmp_path, workers):
    model = torch.nn.Conv2d(3, 3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with Tracer() as tr:
        loader = tr.loader(SlowItems(), batch_size=10, num_workers=workers)
        timer = PhaseTimer("cpu")
        run_epoch(loader, model, "cpu", optimizer=opt, timer=timer)
        tr.add_timer(timer, epoch=0)
        path = tr.write(tmp_path / "trace.json")
    obj = json.loads(path.read_text())
    assert check_trace(obj) == []
    events = obj["traceEvents"]
    for e in events:
        assert {"name", "ph", "ts", "pid", "tid"} <= set(e)
        if e["ph"] == "X":
            assert e["dur"] >= 0
    meta = {e["name"] for e in events if e["ph"] == "M"}
    assert {"process_name", "thread_name"} <= meta
    everything = set(range(20))
    for name in ("step", "data_wait", "h2d", "forward", "backward", "fetch", "collate", "batch"):
        assert batches_in(obj, name) == everything, name
    worker_pids = {e["pid"] for e in events if e["ph"] == "X" and e["name"] == "fetch"}
    main_pid = {e["pid"] for e in events if e["ph"] == "X" and e["name"] == "step"}
    assert len(main_pid) == 1
    if workers:
        assert len(worker_pids) == workers and not (worker_pids & main_pid)
    else:
        assert worker_pids == main_pid


def test_check_trace_catches_bad_nesting_and_fields():
    bad = {"traceEvents": [
        {"name": "a", "ph": "X", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
        {"name": "b", "ph": "X", "ts": 5, "dur": 10, "pid": 1, "tid": 1},   # straddles a's end
        {"name": "c", "ph": "X", "ts": 0, "dur": -1, "pid": 1, "tid": 2},
        {"name": "d", "ph": "X", "dur": 1, "pid": 1, "tid": 2},             # no ts
    ]}
    problems = check_trace(bad)
    assert len(problems) == 3
    good = {"traceEvents": [
        {"name": "a", "ph": "X", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
        {"name": "b", "ph": "X", "ts": 2, "dur": 3, "pid": 1, "tid": 1},
        {"name": "c", "ph": "X", "ts": 10, "dur": 1, "pid": 1, "tid": 1},
    ]}
    assert check_trace(good) == []


def test_two_epochs_are_tagged_apart():
    with Tracer() as tr:
        loader = tr.loader(SlowItems(), batch_size=50, num_workers=0)
        for epoch in range(2):
            timer = PhaseTimer("cpu")
            run_epoch(loader, None, "cpu", timer=timer)
            tr.add_timer(timer, epoch=epoch)
        obj = tr.to_json()
    assert batches_in(obj, "batch", epoch=1) == set(range(4))
    assert batches_in(obj, "step", epoch=1) == set(range(4))
    assert check_trace(obj) == []


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_built_by_the_pipeline_is_traced_as_built(sr_root, tmp_path, workers):
    """Tracing wraps the loader make_loader built (same dataset, order, collate and workers)."""
    from feedlab import pipeline as P
    from feedlab.trace import trace_run

    spec = P.PipelineSpec(format="npy_mmap", collate="fast", batch_size=8, num_workers=workers, device="cpu")
    ds = P.open_dataset(sr_root, spec)
    built = P.make_loader(ds, spec, seed=3)
    with Tracer() as tr:
        traced = tr.wrap(built)
        assert traced.num_workers == workers and traced.dataset.dataset is ds
        assert traced.collate_fn.fn is built.collate_fn
        got = [lr.clone() for lr, _hr in traced]
    want = [lr.clone() for lr, _hr in P.make_loader(ds, spec, seed=3)]
    assert all(torch.equal(a, b) for a, b in zip(got, want)) and len(got) == len(want)
    out = {}
    trace_run(None, out, tmp_path / "t.json", 8, workers, max_batches=3, loader=P.make_loader(ds, spec))
    obj = json.loads((tmp_path / "t.json").read_text())
    # workers may have fetched ahead of the 3 batches consumed
    assert check_trace(obj) == [] and {0, 1, 2} <= batches_in(obj, "fetch") and out["trace_batches"] == 3
    slots = P.make_loader(ds, spec.replace(loader="batched", num_workers=0))
    with Tracer() as tr:
        assert tr.wrap(slots) is slots   # a slot-filling kind: traced by the main loop's waits
