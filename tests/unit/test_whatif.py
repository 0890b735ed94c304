"""The doctor's --what-if: what each peer can express, its gain against your pipeline and the headspace,
like-for-like refusal, the answer's words, bad input in one line, and one small run with a real peer."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from feedlab import pipeline as P
from feedlab.doctor import whatif as W
from feedlab.doctor.__main__ import main
from feedlab.like_for_like import Side
from feedlab.paths import default_sr_root

# a step alone at 1,000 samples/s, end to end at 400: the most any loader change can give is x2.5
REP = {"stages": [{"stage": "model", "s_per_sample": 1e-3}], "measured_samples_per_s": 400.0,
       "advice": [{"setting": "num_workers", "value": 2, "expected_gain": 1.5, "measured_gain": 1.6}]}
# your pipeline measured in three interleaved passes at 390, 400 and 410 samples/s
BASE = {"rate": 400.0, "rates": [390.0, 400.0, 410.0],
        "side": Side("your pipeline", "global", 0.0, 64, 2, "warm", 50, 8.0, rate_kind="steady", repeats=3)}


def info(name="dali", rate=800.0, shuffle="global permutation per epoch", pixel=0.0, spread=0.02, **kw):
    return {"name": name, "label": name.upper(), "available": True, "reason": "", "convert_s": 3.0,
            "bytes_on_disk": 2**20, "shuffle": shuffle, "pixel_error": pixel, "rate": rate, "batch_size": 64,
            "workers": 2, "batches": 50, "window_s": 4.0,
            "rates": [rate * (1 - spread), rate, rate * (1 + spread)], **kw}


def test_a_peer_that_cannot_express_the_transform_says_so_in_one_line():
    spec, how = W.express("sr", "flip", 96)
    assert spec is None and "cannot express transform=flip" in how and "\n" not in how
    spec, how = W.express("sr", "default", 96)     # default is the flip for pairs
    assert spec is None
    spec, how = W.express("img", "none", 96)
    assert spec is None and "--transform center_crop" in how
    assert W.express("sr", "none", 96)[0] == {"size": 64, "augment": False}
    assert W.express("cls", "default", 80)[0] == {"size": 80, "augment": False}


def test_gain_on_the_loop_is_bounded_by_the_step_and_shown_against_the_headspace():
    row = W.peer_row(info(rate=4000.0), BASE, step_rate=1000.0, most=2.5)
    assert row["loader_ratio"] == pytest.approx(10.0)
    assert row["gain"] == pytest.approx(2.5)              # the step bounds the loop: 1000/400
    assert row["share_of_most"] == pytest.approx(1.0)
    row = W.peer_row(info(rate=700.0), BASE, step_rate=1000.0, most=2.5)
    assert row["gain"] == pytest.approx(1.75) and row["share_of_most"] == pytest.approx(0.5)
    assert row["gain_lo"] < 1.75 < row["gain_hi"] and row["verdict"] == "met"
    assert W.loop_gain(800.0, 400.0, None, True) == pytest.approx(2.0)     # no step: the loader's own ratio
    assert W.loop_gain(1000.0, 500.0, 1000.0, False) == pytest.approx(1.5)  # serial: 500/s against 333/s
    assert W.share_of_most(1.2, None) is None and W.share_of_most(1.2, 1.0) is None


def test_a_peer_in_another_order_is_not_like_for_like_and_never_the_answer():
    chunked = W.peer_row(info("litdata", rate=2000.0, shuffle="chunk order shuffled, samples shuffled within chunks"),
                         BASE, 1000.0, 2.5)
    assert not chunked["like_for_like"] and any(d.startswith("order") for d in chunked["differs"])
    assert chunked["verdict"] == "not like for like"
    text = W.answer([chunked], REP)
    assert text.startswith("no peer could be compared like for like (LITDATA: order")
    slower_but_like = W.peer_row(info("dali", rate=600.0), BASE, 1000.0, 2.5)
    text = W.answer([chunked, slower_but_like], REP)
    assert text.startswith("switching to DALI would give ×1.50 (×1.49–1.51 over 3 interleaved passes a side; conversion "
                           "3.0 s; its loader alone ×1.50)")
    # a step that bounds every loader: the loop gains tie at ×1.00, under the target: no switch
    tie = [W.peer_row(info(n, rate=r), BASE, 300.0, 1.0) for n, r in (("webdataset", 450.0), ("dali", 900.0))]
    assert W.answer(tie, REP).startswith("no switch: the best like-for-like peer, DALI, measured ×1.00 on your loop "
                                         "(×1.00–1.00), under ×1.05")


def test_a_gain_inside_the_spread_is_no_switch():
    """×1.08 on the median, but one round measured your pipeline faster than the peer: within spread."""
    row = W.peer_row(info("mosaic_streaming", rate=432.0, spread=0.0, rates=[380.0, 432.0, 470.0]), BASE, None, None)
    assert row["gain"] == pytest.approx(1.08) and row["gain_lo"] < W.SWITCH_TARGET < row["gain_hi"]
    assert row["verdict"] == "within spread"
    assert W.answer([row], {}).startswith("no switch: the best like-for-like peer, MOSAIC_STREAMING, measured ×1.08 "
                                          "on your loop (×0.97–1.15), inside the spread of ×1.05")


def test_the_answer_reads_switch_then_the_doctors_changes_then_the_headspace():
    rows = [W.peer_row(info("dali", rate=800.0), BASE, 1000.0, 2.5),
            W.peer_row({"name": "ffcv", "label": "FFCV", "available": False, "reason": "venv not built"}, BASE,
                       1000.0, 2.5)]
    text = W.answer(rows, REP)
    assert text == ("switching to DALI would give ×2.00 (×1.99–2.01 over 3 interleaved passes a side; conversion 3.0 s; its "
                    "loader alone ×2.00); the doctor's changes give ×1.60 without migrating (num_workers = 2); the most "
                    "possible is ×2.50 (the headspace: your step alone over end to end)")
    w = {"samples": 3200, "how": "x", "batch_size": 64, "workers": 2, "device": "cpu", "peers": rows, "rounds": 3,
         "baseline": {"rate": 400.0, "order": "global", "pixel_error": 0.0}, "answer": text}
    lines = W.render(w)
    assert any(ln.strip().startswith("DALI") and ln.rstrip().endswith("met") for ln in lines)
    assert "in 3 interleaved rounds" in lines[1]
    assert "  FFCV: venv not built" in lines and lines[-1] == f"  ANSWER: {text}"
    fast = W.peer_row(info("ffcv", rate=9000.0, window_s=0.2), BASE, 1000.0, 2.5)
    assert fast["differs"] == ["window: FFCV timed 200.0 ms < 1 s"]
    hint = W.render({**w, "peers": [fast]})[-2]
    assert hint.startswith("  only the window kept FFCV from a verdict: a larger --what-if-samples (now 3,200)")
    no_step = W.answer(rows, {"advice": []})
    assert "×1.00 without migrating (no change measured)" in no_step and "the most possible is not measured" in no_step
    predicted = W.answer(rows, {"advice": [{"setting": "num_workers", "value": 3, "expected_gain": 1.5}]})
    assert "×1.00 without migrating (no change measured; to try: num_workers = 3, ×1.50 predicted)" in predicted


def test_with_a_model_the_answer_names_the_headspace_and_never_reads_below_the_measured_table():
    """The doctor's own table measured num_workers=0 ×1.22 over your 2 workers (the step runs slower beside
    the workers than alone): the answer says so, and the headspace is not called the most without a word."""
    rep = {**REP, "measured_samples_per_s": 900.0, "num_workers": 2, "advice": [],
           "end_to_end": [{"num_workers": 0, "samples_per_s": 610.0}, {"num_workers": 1, "samples_per_s": 560.0,
                                                                          "too_busy": True},
                          {"num_workers": 2, "samples_per_s": 500.0}]}
    text = W.answer([], rep)
    assert "the doctor's changes give ×1.22 without migrating (num_workers = 0, measured in the doctor's table)" in text
    assert "the most possible is ×1.11 (the headspace: your step alone over end to end), below the ×1.22 measured " \
           "here (num_workers = 0, measured in the doctor's table)" in text
    assert W.table_best({**rep, "num_workers": 0}) is None     # nothing faster than yours: nothing claimed


# ---- the interleaved measurement, with a fake load monitor: a busy side never gives a switch ----

QUIET = {"available": True, "busy": False, "other_cpu_cores": 0.02, "usable_cores": 2, "steal_cores": 0.0,
         "other_fraction": 0.01, "threshold_fraction": 0.25}
BUSY = {**QUIET, "busy": True, "other_cpu_cores": 1.4, "other_fraction": 0.7}


class FakeLoad:
    """A load window whose reading is decided by the test: ``busy(side, pass number)``."""

    def __init__(self, state, busy):
        self.state, self.busy = state, busy

    def summary(self):
        self.state["n"] += 1
        return BUSY if self.busy(self.state["side"], self.state["n"]) else QUIET


def _fake_what_if(monkeypatch, rates: dict, busy, rounds=3):
    """The child's what_if on a fake sample: each side's pass returns its next rate from ``rates``; the load
    window reads busy where ``busy(side, n)`` says (n counts every pass of the run)."""
    from types import SimpleNamespace

    from feedlab.peers import whatif as PW

    state = {"side": None, "n": 0}
    left = {k: list(v) for k, v in rates.items()}

    def base(root, spec, source, size, device, check=True):
        state["side"] = "your pipeline"
        return {"available": True, "rate": left["your pipeline"].pop(0), "batches": 50, "window_s": 4.0,
                "pixel_error": 0.0, "bytes_on_disk": 1}

    def peer(name, source, work, spec, size, device, limit_s, stall_s, repeats=1, check=True):
        state["side"] = name
        return {"name": name, "label": name, "available": True, "reason": "", "rate": left[name].pop(0),
                "batches": 50, "window_s": 4.0, "batch_size": spec.batch_size, "workers": spec.num_workers,
                "shuffle": "global permutation per epoch", "pixel_error": 0.0, "convert_s": 0.5}

    monkeypatch.setattr(PW, "build_sample", lambda *a, **k: (SimpleNamespace(kind="cls", n=3200), []))
    monkeypatch.setattr(PW, "time_baseline", base)
    monkeypatch.setattr(PW, "time_peer", peer)
    spec = P.PipelineSpec(format="imagefolder", transform="center_crop", batch_size=64, num_workers=2)
    peers = tuple(k for k in rates if k != "your pipeline")
    return PW.what_if({}, Path("."), spec, peers=peers, repeats=rounds, load_window=lambda: FakeLoad(state, busy))


def test_a_busy_window_on_your_pipeline_never_gives_a_switch(monkeypatch, tmp_path):
    """The case of the issue: your pipeline read 254 samples/s in a busy window where 552–765 was measured,
    and Mosaic 610 looked like ×2.40. Busy twice in a row: too busy to judge, no switch."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    w = _fake_what_if(monkeypatch, {"your pipeline": [254.0, 250.0], "mosaic_streaming": [610.0, 600.0, 620.0]},
                      busy=lambda side, n: side == "your pipeline")
    assert w["baseline"]["busy"].startswith("measured on a busy machine twice (other processes used 1.40 of 2")
    assert [p["replaced"] for p in w["baseline"]["passes"][:1]] == [True]
    assert w["answer"].startswith("no switch: too busy to judge (your pipeline measured on a busy machine twice")
    row = w["peers"][0]     # nothing is judged against a reference too busy: no pass follows
    assert not row["measured"] and row["passes"] == []
    assert row["reason"] == "not measured: your pipeline was too busy to judge"
    assert "too busy to judge" in W.render(w)[4]
    # busy only later: the peer measured, your pipeline busy twice in round 2: the peer's verdict is not fair
    w = _fake_what_if(monkeypatch, {"your pipeline": [600.0, 254.0, 250.0], "mosaic_streaming": [610.0, 600.0]},
                      busy=lambda side, n: side == "your pipeline" and n > 2)
    row = w["peers"][0]
    assert row["measured"] and row["verdict"] == "not tested fairly" and row["judged"].startswith("too busy to judge")
    assert w["answer"].startswith("no switch: too busy to judge (your pipeline measured on a busy machine twice")


def test_a_busy_pass_is_measured_again_and_the_quiet_reading_is_judged(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # the first pass of the run (your pipeline, round 1) is busy; its second reading is quiet
    w = _fake_what_if(monkeypatch, {"your pipeline": [254.0, 600.0, 610.0, 590.0], "dali": [900.0, 910.0, 890.0]},
                      busy=lambda side, n: n == 1)
    b = w["baseline"]
    assert b["busy"] is None and b["rates"] == [600.0, 610.0, 590.0] and b["rate"] == 600.0
    assert b["passes"][0]["replaced"] and b["passes"][1]["again"] and not b["passes"][1]["busy"]
    # rounds are interleaved, the order rotated: you, dali / dali, you / you, dali
    assert [p["round"] for p in b["passes"]] == [1, 1, 2, 3]
    assert w["answer"].startswith("switching to dali would give ×1.50")


def test_no_busy_pattern_ever_gives_a_switch_from_a_busy_side(monkeypatch, tmp_path):
    """Every pattern of busy passes over two sides and three rounds (each pass and its second reading): a
    switch is named only where neither side kept a busy pass."""
    import itertools

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for bits in itertools.islice(itertools.product((0, 1), repeat=8), 0, None, 3):
        w = _fake_what_if(monkeypatch, {"your pipeline": [300.0] * 6, "mosaic_streaming": [700.0] * 6},
                          busy=lambda side, n, bits=bits: bool(bits[(n - 1) % 8]))
        kept = [p for side in (w["baseline"], w["peers"][0]) for p in side["passes"] if not p.get("replaced")]
        if w["answer"].startswith("switching"):
            assert not any(p["busy"] for p in kept), bits
        else:
            assert any(p["busy"] for p in kept) or w["peers"][0]["verdict"] != "met", bits


def test_the_sample_is_raised_to_a_judged_window_unless_asked():
    assert W.sample_size(None, 32) == (2048, "")
    n, note = W.sample_size(None, 64)
    assert n == 3200 and "50 batches" in note
    assert W.sample_size(100, 64) == (100, "")


@pytest.mark.parametrize("argv, words", [
    (["--what-if", "--what-if-samples", "0"], "--what-if-samples must be >= 1"),
    (["--what-if", "--what-if-peers", "dali,nope"], "--what-if-peers nope: unknown"),
    (["--what-if-samples", "10"], "--what-if-samples goes with --what-if"),
    (["--what-if", "--loader", "x.y:z"], "--what-if samples the files of --data DIR"),
])
def test_bad_what_if_input_is_one_line(argv, words, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--data", str(default_sr_root("smoke")), *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert words in err[-1]


def _smoke_root() -> Path:
    root = default_sr_root("smoke")
    if not (root / "npy_mmap").is_dir():
        pytest.skip(f"{root}: the smoke set is not built")
    return root


def _children() -> set:
    """This process's children now, by (pid, start time): a test asserts that it added none (an earlier
    test's lingering child in the same session is not this test's)."""
    psutil = pytest.importorskip("psutil")
    out = set()
    for c in psutil.Process().children(recursive=True):
        try:
            out.add((c.pid, c.create_time()))
        except psutil.Error:   # ended meanwhile
            pass
    return out


def test_a_small_what_if_with_dali_on_the_smoke_set_leaves_nothing_behind(tmp_path, monkeypatch):
    """The doctor's path: a child process samples the smoke set, times your pipeline and DALI, answers."""
    pytest.importorskip("nvidia.dali")
    root = _smoke_root()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    kids = _children()
    spec = P.PipelineSpec(format="npy_mmap", transform="none", batch_size=8, num_workers=0)
    said = []
    w = W.run_whatif(REP, root, spec, samples=40, peers=("dali",), device="cpu", limit_s=150, stall_s=60,
                     repeats=1, say=said.append)
    assert "error" not in w, w
    row = w["peers"][0]
    if w["baseline"]["busy"]:     # a busy machine: your pipeline too busy to judge, DALI not measured, no switch
        assert w["answer"].startswith("no switch: too busy to judge (your pipeline measured on a busy machine twice")
        assert not row["measured"] and row["reason"] == "not measured: your pipeline was too busy to judge"
        assert not list(Path(tmp_path).glob("feedlab-whatif-*")) and not _children() - kids
        return
    assert row["measured"], row
    assert row["samples_per_s"] > 0 and row["pixel_error"] == 0.0 and w["baseline"]["pixel_error"] == 0.0
    assert row["convert_s"] >= 0 and row["bytes_on_disk"] > 0
    # DALI runs at least one thread where your loader has 0 workers: named, so the ratio is no verdict
    assert "workers: 0 vs 1" in row["differs"]
    assert w["answer"].startswith("no peer could be compared like for like (NVIDIA DALI")
    assert "the most possible is ×2.50" in w["answer"]   # then what it is: the headspace (the typed Headspace)
    assert any("what-if: dali" in m for m in said)            # the child's progress reached the doctor
    assert not list(Path(tmp_path).glob("feedlab-whatif-*"))   # the sample and its conversions are gone
    assert not _children() - kids
    if os.path.isdir("/dev/shm"):
        assert set(os.listdir("/dev/shm")) <= before


def test_a_what_if_past_its_limit_is_stopped_with_one_line_and_nothing_left(tmp_path, monkeypatch):
    root = _smoke_root()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    kids = _children()
    spec = P.PipelineSpec(format="npy_mmap", transform="none", batch_size=8, num_workers=0)
    w = W.run_whatif(REP, root, spec, samples=40, peers=("dali",), device="cpu", limit_s=0.2, stall_s=None)
    assert w["error"].startswith("--what-if ran past 1 s (0.2 s a side)")
    assert "--what-if-limit S waits longer" in w["error"]
    assert W.render(w)[-1].startswith("WHAT IF you switched loaders? not measured: --what-if ran past")
    assert not list(Path(tmp_path).glob("feedlab-whatif-*"))
    assert not _children() - kids
