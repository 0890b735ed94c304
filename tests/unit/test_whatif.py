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
BASE = {"rate": 400.0, "side": Side("your pipeline", "global", 0.0, 64, 2, "warm", 50, 8.0)}


def info(name="dali", rate=800.0, shuffle="global permutation per epoch", pixel=0.0, **kw):
    return {"name": name, "label": name.upper(), "available": True, "reason": "", "convert_s": 3.0,
            "bytes_on_disk": 2**20, "shuffle": shuffle, "pixel_error": pixel, "rate": rate, "batch_size": 64,
            "workers": 2, "batches": 50, "window_s": 4.0, **kw}


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
    assert W.loop_gain(800.0, 400.0, None, True) == pytest.approx(2.0)     # no step: the loader's own ratio
    assert W.loop_gain(1000.0, 500.0, 1000.0, False) == pytest.approx(1.5)  # serial: 500/s against 333/s
    assert W.share_of_most(1.2, None) is None and W.share_of_most(1.2, 1.0) is None


def test_a_peer_in_another_order_is_not_like_for_like_and_never_the_answer():
    chunked = W.peer_row(info("litdata", rate=2000.0, shuffle="chunk order shuffled, samples shuffled within chunks"),
                         BASE, 1000.0, 2.5)
    assert not chunked["like_for_like"] and any(d.startswith("order") for d in chunked["differs"])
    text = W.answer([chunked], REP)
    assert text.startswith("no peer could be compared like for like (LITDATA: order")
    slower_but_like = W.peer_row(info("dali", rate=600.0), BASE, 1000.0, 2.5)
    text = W.answer([chunked, slower_but_like], REP)
    assert text.startswith("switching to DALI would give ×1.50 (conversion 3.0 s; its loader alone ×1.50)")
    # a step that bounds every loader: the loop gains tie at ×1.00, the faster loader is named
    tie = [W.peer_row(info(n, rate=r), BASE, 300.0, 1.0) for n, r in (("webdataset", 450.0), ("dali", 900.0))]
    assert W.answer(tie, REP).startswith("switching to DALI would give ×1.00 (conversion 3.0 s; its loader alone ×2.25)")


def test_the_answer_reads_switch_then_the_doctors_changes_then_the_most():
    rows = [W.peer_row(info("dali", rate=800.0), BASE, 1000.0, 2.5),
            W.peer_row({"name": "ffcv", "label": "FFCV", "available": False, "reason": "venv not built"}, BASE,
                       1000.0, 2.5)]
    text = W.answer(rows, REP)
    assert text == ("switching to DALI would give ×2.00 (conversion 3.0 s; its loader alone ×2.00); the doctor's changes "
                    "give ×1.60 without migrating (num_workers = 2); the most possible is ×2.50")
    w = {"samples": 3200, "how": "x", "batch_size": 64, "workers": 2, "device": "cpu", "peers": rows,
         "baseline": {"rate": 400.0, "order": "global", "pixel_error": 0.0}, "answer": text}
    lines = W.render(w)
    assert any(ln.strip().startswith("DALI") and "yes" in ln for ln in lines)
    assert "  FFCV: venv not built" in lines and lines[-1] == f"  ANSWER: {text}"
    fast = W.peer_row(info("ffcv", rate=9000.0, window_s=0.2), BASE, 1000.0, 2.5)
    assert fast["differs"] == ["window: FFCV timed 200.0 ms < 1 s"]
    hint = W.render({**w, "peers": [fast]})[-2]
    assert hint.startswith("  only the window kept FFCV from a verdict: a larger --what-if-samples (now 3,200)")
    no_step = W.answer(rows, {"advice": []})
    assert "×1.00 without migrating (no change advised)" in no_step and "the most possible is not measured" in no_step


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
    assert row["measured"], row
    assert row["samples_per_s"] > 0 and row["pixel_error"] == 0.0 and w["baseline"]["pixel_error"] == 0.0
    assert row["convert_s"] >= 0 and row["bytes_on_disk"] > 0
    # DALI runs at least one thread where your loader has 0 workers: named, so the ratio is no verdict
    assert "workers: 0 vs 1" in row["differs"]
    assert w["answer"].startswith("no peer could be compared like for like (NVIDIA DALI")
    assert w["answer"].endswith("the most possible is ×2.50")
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
