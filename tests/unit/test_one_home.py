"""Each helper once (issue 35): one "follow the doctor's advice step by step" loop for notebooks 10 and 15
(`experiments._advice_steps.follow`), and one table from a setting's name to its code line and its reason
(`doctor.settings.SETTINGS`, read by `answer.code_line` and `predict.why`). Hand-written cost tables and a
fake doctor: nothing is measured."""

import ast
import inspect
import math
from types import SimpleNamespace

import pytest
from test_doctor import SPEC, table

from feedlab.doctor import Machine, Stage
from feedlab.doctor import predict as PR
from feedlab.doctor.answer import code_line
from feedlab.doctor.settings import SETTINGS
from feedlab.experiments import _advice_steps as A
from feedlab.experiments import cure as C
from feedlab.experiments import doctor_steps as DS


def full(cuda=False, model=20e-6):
    """A table that prices a change of every setting: a second format, decoders (one on the device),
    collates, a second batch size, pinned copies, the ring and two one-process loader kinds."""
    t = table(decode=100e-6, model=model)
    t.machine = Machine(2, 2.0, cuda, {0: 2, 1: 1, 2: 1, 3: 1, 4: 1})
    for fmt, dec, r, d in (("fast", "fastdec", 8e-6, 12e-6), ("fake", "cuda", 10e-6, 0.0),
                           ("fake", "pil", 10e-6, 50e-6)):
        for k, v in (("read", r), ("decode", d), ("transform", 0.0)):
            t[(k, fmt, dec)] = Stage(k, k, [v], [v])
    for c in ("fast", "fast_cl"):
        t[("collate", c, 8)] = Stage("collate", "c", [1e-6], [1e-6])
        t[("collate_worker", c, 8)] = Stage("collate", "cw", [1e-6], [1e-6])
        t[("handover_worker", c, 8)] = Stage("handover", "h", [2e-6], [2e-6])
        t[("receive", c, 8)] = Stage("receive", "r", [3e-6], [3e-6])
    for c in ("totensor", "fast", "fast_cl"):
        for T in (1, 2):
            for pin in (False, True):
                t[("h2d", c, 8, pin, T)] = Stage("h2d", "h2d", [1e-6 if pin else 4e-6], [1e-6])
                t[("h2d", c, 16, pin, T)] = Stage("h2d", "h2d", [1e-6], [1e-6])
    for T in (1, 2):
        t[("model", 16, T)] = Stage("model", "m", [5e-6], [5e-6])
    t[("collate", "totensor", 16)] = Stage("collate", "c", [5e-6], [5e-6])
    t[("collate_worker", "totensor", 16)] = Stage("collate", "cw", [5e-6], [5e-6])
    t[("handover_worker", "totensor", 16)] = Stage("handover", "h", [2e-6], [2e-6])
    t[("receive", "totensor", 16)] = Stage("receive", "r", [3e-6], [3e-6])
    t[("ring_receive", 8)] = Stage("receive", "ring", [0.2e-6], [0.2e-6])
    t[("kind", "fake", "batched", 8)] = Stage("kind", "k", [30e-6], [30e-6])
    t[("kind", "fake", "chunk", 8)] = Stage("kind", "k", [40e-6], [40e-6])
    return t


STARTS = (SPEC, SPEC.replace(num_workers=1), SPEC.replace(num_workers=2, collate="fast"),
          SPEC.replace(num_workers=1, collate="fast", loader="ring"), SPEC.replace(collate="fast", loader="batched"),
          SPEC.replace(pin_memory=True, num_workers=1))


# ---------------------------------------------------------------- one table: setting -> code line, reason


def _settings_candidates_names() -> set[str]:
    """The setting names `predict.candidates` can put in a change, read from its source."""
    tree = ast.parse(inspect.getsource(PR.candidates))
    return {node.args[0].elts[0].value for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "append"
            and node.args and isinstance(node.args[0], ast.Tuple) and isinstance(node.args[0].elts[0], ast.Constant)}


def test_every_setting_predict_can_change_has_a_code_line_and_a_reason():
    names = _settings_candidates_names()
    assert names == {"num_workers", "collate", "decode", "format", "batch_size", "pin_memory", "loader"}
    assert names <= set(SETTINGS), f"no row in doctor.settings.SETTINGS for {sorted(names - set(SETTINGS))}"
    seen = set()
    for cuda in (False, True):
        t = full(cuda)
        for spec in STARTS:
            base = PR.predict(t, spec)
            for setting, value, new in PR.candidates(t, spec, 3):
                if PR.costs(t, new) is None:
                    continue
                seen.add(setting)
                assert PR.why(t, setting, spec, new, base), f"no reason for {setting}={value}"
                assert code_line(setting, value, {"data": "data/sr64"}) != f"{setting}={value}", setting
    assert seen == names   # the table above prices a change of every setting


def test_a_setting_outside_the_table_reads_as_before():
    assert code_line("threads", 4, {}) == "threads=4"
    assert PR.why(full(), "threads", SPEC, SPEC, PR.predict(full(), SPEC)) == ""


@pytest.mark.parametrize("setting, value, rep, line", [
    ("num_workers", 4, {"cuda": True}, "DataLoader(..., num_workers=4, pin_memory=True)"),
    ("num_workers", 4, {}, "DataLoader(..., num_workers=4)"),
    ("pin_memory", True, {}, "DataLoader(..., pin_memory=True)"),
    ("batch_size", 64, {}, "DataLoader(..., batch_size=64)"),
    ("format", "lmdb", {}, "python -m data_prep pack DIR --to lmdb   # then read it with --format lmdb"),
    ("decode", "simplejpeg", {"data": "data/sr64"},
     "decode=simplejpeg   (python -m feedlab.doctor --data data/sr64 --decode simplejpeg)"),
    ("loader", "ring", {"data": None}, "loader='ring'   (feedlab.pipeline.make_loader(dataset, PipelineSpec(..., "
                                       "loader='ring')); python -m feedlab.bench --data DIR --loader-kind ring)"),
    ("collate", "fast", {}, "collate=fast   (feedlab.pipeline.make_collate('fast') as the DataLoader's collate_fn)"),
])
def test_code_lines_read_as_before(setting, value, rep, line):
    assert code_line(setting, value, rep) == line


@pytest.mark.parametrize("cuda, start, setting, value, reason", [
    (False, SPEC, "num_workers", 2, "decode bounds it; 2 workers on 2.0 effective cores build batches in parallel"),
    (False, SPEC.replace(num_workers=1), "num_workers", 0, "no worker processes: every stage runs in the main "
     "process, without the hand-over, its receive and the workers' start-up"),
    (False, SPEC, "collate", "fast", "collate 5 µs → 1 µs per sample"),
    (False, SPEC, "decode", "cuda", "decode 100 µs per sample in the workers → 0 µs per image on the GPU, in the "
     "main process beside the copy"),
    (False, SPEC, "decode", "pil", "decode 100 µs → 50 µs per sample"),
    (False, SPEC, "format", "fast", "read+decode 110 µs → 20 µs per sample"),
    (False, SPEC, "batch_size", 16, "model 20 µs → 5 µs per sample"),
    (True, SPEC, "pin_memory", True, "h2d 4 µs → 1 µs per sample"),
    (False, SPEC.replace(num_workers=2, collate="fast"), "loader", "ring",
     "the main process's hand-over 3 µs → 0 µs per sample (a shared-memory ring slot per batch)"),
    (False, SPEC.replace(num_workers=1, collate="fast", loader="ring"), "loader", "dataloader",
     "the main process's hand-over 0 µs → 3 µs per sample (a pickled batch per batch)"),
    (False, SPEC.replace(num_workers=2, collate="fast"), "loader", "batched", "read to batch 111 µs → 30 µs per "
     "sample: loader batched reads whole batches in this process (no workers, no collate, no hand-over)"),
])
def test_reasons_read_as_before(cuda, start, setting, value, reason):
    t = full(cuda)
    new = next(n for s, v, n in PR.candidates(t, start, 3) if (s, v) == (setting, value))
    assert PR.why(t, setting, start, new, PR.predict(t, start)) == reason


# ---------------------------------------------------------------- one loop: the advice, step by step


def steps_table(model: float):
    """Two formats, two collates, two batch sizes, on a CPU: with a slow step (``model``) the batch
    size is the top advice."""
    t = table(decode=100e-6, model=model)
    for k, v in (("read", 8e-6), ("decode", 12e-6), ("transform", 0.0)):
        t[(k, "fast", "fastdec")] = Stage(k, k, [v], [v])
    for c, B, v in (("fast", 8, 1e-6), ("totensor", 16, 5e-6)):
        t[("collate", c, B)] = Stage("collate", "c", [v], [v])
        t[("collate_worker", c, B)] = Stage("collate", "cw", [v], [v])
        t[("handover_worker", c, B)] = Stage("handover", "h", [2e-6], [2e-6])
        t[("receive", c, B)] = Stage("receive", "r", [3e-6], [3e-6])
    for T in (1, 2):
        t[("h2d", "fast", 8, False, T)] = Stage("h2d", "h2d", [1e-6], [1e-6])
        t[("model", 16, T)] = Stage("model", "m", [5e-6], [5e-6])
        t[("h2d", "totensor", 16, False, T)] = Stage("h2d", "h2d", [1e-6], [1e-6])
    return t


def rate(s) -> float:
    """Measured samples/s of a fake spec: the fast format ×3, each worker ×1 more, the fast collate
    measured SLOWER (×0.7) though predicted faster, batch 16 ×1.1."""
    r = 1000.0 * (1 + s.num_workers) * (3 if s.format == "fast" else 1) * (0.7 if s.collate == "fast" else 1)
    return r * (1.1 if s.batch_size == 16 else 1)


class Doc:
    """What the loop and the notebooks use of a Doctor; a measurement returns :func:`rate`."""

    device, max_workers, cuda = "cpu", 2, False
    effort = SimpleNamespace(e2e_batches=50)   # the Doctor's measurement sizes (its passes' timed batches)

    def __init__(self, model=20e-6):
        self.table = steps_table(model)
        self.e2e, self.e2e_calls = {}, {}

    def table_now(self, spec):
        return self.table

    def measure_rounds(self, specs, repeats=None):
        out = {}
        for s in (s.replace(device=self.device) for s in specs):
            v = rate(s)
            out[s] = self.e2e[s] = {"steady": v, "steady_runs": [v, v], "epoch": v}
            self.e2e_calls.setdefault(s, []).append({"steady": v, "steady_runs": [v, v], "speed": 0.9})
        return out

    def measure_e2e(self, spec, repeats=None):
        return self.measure_rounds([spec], repeats)[spec.replace(device=self.device)]


def test_follow_tries_each_setting_once_undoes_what_measured_slower_and_never_changes_what_is_held():
    tried = []

    def try_change(k, advice, new, spec, current):   # the format measures slower here; the rest faster
        tried.append((k, f"{advice['setting']}={advice['value']}", spec.label(), current["label"]))
        return {"label": f"{advice['setting']}={advice['value']}", "kept": advice["setting"] != "format"}

    start = SPEC.replace(device="cpu")
    spec, last = A.follow(Doc(), start, {"label": "start"}, try_change, max_steps=9, held=("num_workers",))
    # the format undone: the next advice is priced from the start again; workers held; then nothing is left
    assert tried == [(1, "format=fast", start.label(), "start"), (2, "batch_size=16", start.label(), "start")]
    assert spec == start.replace(batch_size=16) and last["label"] == "batch_size=16"
    assert last["advice"]["why"] == "model 20 µs → 5 µs per sample"
    # each setting at most once: with everything kept the same setting is never advised twice
    seen = []
    A.follow(Doc(), start, {"label": "start"}, lambda k, a, n, s, c: seen.append(a["setting"]) or {"kept": True},
             max_steps=9)
    assert seen == ["format", "num_workers", "collate"]
    # the top advice for a slow step is the batch size, unless it is held
    top = []
    A.follow(Doc(model=300e-6), start, {}, lambda k, a, n, s, c: top.append(a["setting"]) or {"kept": True}, 1)
    A.follow(Doc(model=300e-6), start, {}, lambda k, a, n, s, c: top.append(a["setting"]) or {"kept": True}, 1,
             held=("batch_size",))
    assert top == ["batch_size", "num_workers"]


def test_notebooks_10_and_15_follow_the_advice_through_the_one_loop(monkeypatch):
    calls = []

    def spy(doc, spec, current, try_change, max_steps=4, held=()):
        calls.append((spec.label(), current["label"], max_steps, held))
        return spec, current

    monkeypatch.setattr(DS, "follow", spy)
    monkeypatch.setattr(C, "follow", spy)
    monkeypatch.setattr(C, "measure", _measure)
    DS.follow_advice(Doc(), SPEC, max_steps=3)
    C.cure(Doc(), SPEC, worker_counts=[0, 2], max_steps=2, repeats=2, min_timed=5)
    assert calls == [("fake/fake totensor b8 w0", "0: start", 3, ()),
                     ("fake/fake totensor b8 w2", "baseline, 2 workers", 2, ("batch_size",))]


def _measure(doc, spec, repeats=3, min_timed=50, seed=0, precision=None, warmup=1):
    v = rate(spec)
    runs = {"samples_per_s": [v] * repeats, "data_wait_share": [0.3] * repeats, "gpu_busy": [math.nan] * repeats,
            "timed_batches": [min_timed] * repeats}
    return {"samples_per_s": v, "data_wait_share": 0.3, "gpu_busy": math.nan, "runs": runs, "q25": v, "q75": v,
            "skip": 1, "timed_batches": min_timed, "rate_kind": "steady", "epoch_batches": 0}


def test_the_two_notebooks_steps_read_as_before(monkeypatch):
    """10 changes the batch size where the doctor advises it, 15 holds it; both undo a change measured
    slower and try the next advice from the spec kept before it."""
    _, steps = DS.follow_advice(Doc(model=300e-6), SPEC, max_steps=6)
    assert [(s["label"], s["kept"]) for s in steps] == [
        ("0: start", True), ("1: batch_size=16", True), ("2: format=fast", True), ("3: num_workers=2", True)]
    _, steps = DS.follow_advice(Doc(), SPEC, max_steps=6)
    assert [(s["label"], s["kept"]) for s in steps] == [
        ("0: start", True), ("1: format=fast", True), ("2: num_workers=1", True), ("3: collate=fast", False)]
    assert steps[3]["against"] == "2: num_workers=1" and steps[3]["measured_gain"] == pytest.approx(0.7)
    assert all(s["advice"]["setting"] in s["label"] for s in steps[1:])
    monkeypatch.setattr(C, "measure", _measure)
    res, steps = C.cure(Doc(model=300e-6), SPEC, worker_counts=[0, 2], max_steps=6, repeats=2, min_timed=5)
    assert [(s["label"], s["kept"]) for s in steps] == [
        ("baseline, 0 workers", True), ("baseline, 2 workers", True), ("num_workers=1", False)]
    assert steps[2]["against"] == "baseline, 2 workers" and steps[2]["gain"] == pytest.approx(2 / 3)
    _, steps = C.cure(Doc(), SPEC, worker_counts=[0, 2], max_steps=6, repeats=2, min_timed=5)
    assert [s["label"] for s in steps] == ["baseline, 0 workers", "baseline, 2 workers", "format=fast",
                                           "num_workers=1"]
    assert [s["kept"] for s in steps] == [True, True, True, False] and steps[3]["against"] == "format=fast"


def test_notebook_10s_measured_rates_are_labelled_and_its_predictions_say_so():
    """Every rate row steady or labelled (#31): a measured pass of e2e_batches timed after the warm-up is
    steady where that is the steady rule's 50 or more, start-up inclusive below; a prediction is no rate."""
    from types import SimpleNamespace

    from feedlab.experiments import doctor_steps as D
    from feedlab.pipeline import PipelineSpec
    from feedlab.results import Results

    for batches, kind in ((50, "steady"), (4, "startup_inclusive")):
        doc = SimpleNamespace(effort=SimpleNamespace(e2e_batches=batches), e2e_calls={}, device="cpu",
                              table_now=lambda spec: None)
        res = Results()
        D.predict, real = (lambda table, spec: {"predicted_samples_per_s": 10.0, "bound_stage": "decode",
                                                "verdict": "data-bound"}), D.predict
        try:
            D._record(doc, PipelineSpec(), {"steady_runs": [9.0, 10.0], "steady": 9.5}, res, 0, "start", True)
        finally:
            D.predict = real
        kinds = {(r["metric"], r["rate_kind"]) for r in res.rows}
        assert ("samples_per_s", kind) in kinds and ("predicted_samples_per_s", "predicted") in kinds
