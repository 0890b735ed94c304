"""Advice that never contradicts the verdict (#34): a job whose loader has headroom over the step gets no
loader change, a report on your own DataLoader holds back changes inside its own measured error, so the
same job gives the same advice on two runs; step-side trials timed on a busy machine are not advised and
their library warnings stay out of the answer; the answer says how the step was priced; --report carries
the script phase; the report figure's labels are whole."""

from __future__ import annotations

import logging
import warnings

import torch

from feedlab.doctor import answer as A
from feedlab.doctor import stepside


def _rep(advice, measured=90.0, step_s=1 / 100, verdict="compute-bound", headroom=2.0, **kw):
    rep = {"verdict": verdict, "bound_stage": "model" if verdict == "compute-bound" else "decode",
           "binding_term": "main process", "num_workers": 1, "batch_size": 8, "device": "cpu", "cores": 2,
           "effective_cores": 2.0, "measured_samples_per_s": measured, "predicted_samples_per_s": measured,
           "end_to_end": [{"num_workers": 1, "predicted_samples_per_s": measured, "bound_stage": "model",
                           "samples_per_s": measured, "error": 0.05}],
           "stages": [{"stage": "fetch", "variant": "your fetch", "s_per_sample": 1e-3},
                      {"stage": "model", "variant": "your step", "s_per_sample": step_s}],
           "advice": advice, "headroom": headroom, "data": "DIR", "cuda": False, "notes": []}
    rep.update(kw)
    return rep


def test_a_predicted_change_is_never_printed_as_advice():
    # the step alone 100/s, end to end 90/s: 10% outside the step ("moderately"); the loader predicted to have
    # 2x headroom over the step. #46: "no input-pipeline change will help" only under 5% measured; a change
    # predicted but not measured on the loop is a change to try, never advice
    lines = A.answer_lines(_rep([{"setting": "num_workers", "value": 0, "expected_gain": 2.37}]))
    assert not any("no input-pipeline change will help" in x for x in lines)
    assert not any(x.startswith("what to change (each alone") for x in lines)
    i = next(k for k, x in enumerate(lines) if x.startswith("to try (predicted"))
    assert lines[i + 1].startswith("  num_workers = 0: ×2.37 predicted")


def test_no_change_will_help_only_under_five_percent_measured():
    under = A.answer_lines(_rep([{"setting": "num_workers", "value": 0, "expected_gain": 2.37}], measured=96.0))
    assert any(x.startswith("no input-pipeline change will help: 4% of the loop") for x in under)
    assert not any("num_workers = 0" in x for x in under)       # not even to try
    over = A.answer_lines(_rep([], measured=94.0))
    assert not any("no input-pipeline change will help" in x for x in over)
    no_step = _rep([], stages=[{"stage": "fetch", "variant": "f", "s_per_sample": 1e-3}])   # nothing measured
    assert not any("no input-pipeline change will help" in x for x in A.answer_lines(no_step))


def test_the_same_compute_bound_job_gives_the_same_advice_on_two_runs():
    run1 = _rep([{"setting": "num_workers", "value": 0, "expected_gain": 1.50}], measured=91.0)
    run2 = _rep([{"setting": "num_workers", "value": 1, "expected_gain": 2.37}], measured=88.0)
    assert [c for c in A.top_changes(run1) if c["measured"]] == [c for c in A.top_changes(run2) if c["measured"]] == []


def test_a_report_on_your_loader_holds_back_changes_inside_its_own_measured_error():
    rep = _rep([{"setting": "num_workers", "value": 0, "expected_gain": 1.40},
                {"setting": "num_workers", "value": 2, "expected_gain": 3.0}],
               verdict="data-bound", headroom=0.3, measured=40.0)
    rep["end_to_end"][0]["error"] = 0.44          # no "calibration" key: a --loader/--script report
    lines = A.answer_lines(rep)
    assert not any("num_workers = 0:" in x for x in lines)
    assert any("num_workers = 2: ×3.00 predicted" in x for x in lines)
    assert any(x.startswith("not advised, predicted within this run's own prediction error (±44%: the largest over "
                            "every rate it predicted and measured") and "): num_workers = 0 (×1.40)" in x for x in lines)


def test_the_answer_says_how_the_step_was_priced():
    alone = A.answer_lines(_rep([]))
    assert "the step was priced alone, on batches already in memory (nothing loading beside it)" in alone
    beside = A.answer_lines(_rep([], step_priced="as it ran in your script, beside its 2 loader worker(s) "
                                                 "prefetching (alone it may run faster)"))
    assert any(x.startswith("the step was priced as it ran in your script, beside its 2 loader worker(s)")
               for x in beside)


def _trials(timer, busy):
    batch = (torch.zeros(4, 3, 4, 4), torch.zeros(4))
    return stepside.try_step_changes(lambda b: None, [(batch, 4)], "cpu", 1, threads=2, only=("threads",),
                                     cores=2, workers=1, timer=timer, busy=busy)


def _fake_timer(trial_s=0.69, on_trial=lambda: None):
    calls = []

    def timer(step, batches, device, repeats, ctx=None):
        calls.append(1)
        if len(calls) == 1:
            return 1.0            # the step as it is
        on_trial()
        return trial_s            # threads = 1: ×1.45
    return timer


def test_a_step_side_trial_timed_on_a_busy_machine_is_not_advised():
    why = "machine too busy to judge (the doctor's own probe found 0.62 of a core for one process)"
    rows = _trials(_fake_timer(), lambda: why)
    assert [r["threads"] for r in rows] == [1] and rows[0]["measured"]
    assert rows[0]["kept"] is False and rows[0]["too_busy"] == why
    rep = _rep([], verdict="compute-bound", step_changes=rows)
    assert A.top_changes(rep) == []
    assert f"  tried on your step, not advised: threads = 1 (×1.45): {why}" in A.answer_lines(rep)
    quiet = _trials(_fake_timer(), lambda: None)
    assert quiet[0]["kept"] is True and "too_busy" not in quiet[0]
    assert A.top_changes(_rep([], step_changes=quiet))[0]["what"] == "step: threads = 1"


def test_library_warnings_of_a_trial_stay_out_of_the_answer(capsys):
    import torch._dynamo  # noqa: F401  (its logger writes to stderr, as torch.compile's graph breaks do)

    def graph_breaks():
        warnings.warn("Graph break from `Tensor.item()`, consider setting capture_scalar_outputs")
        logging.getLogger("torch._dynamo.convert_frame").warning("Graph break in user code at step.py:3")

    with warnings.catch_warnings(record=True) as outside:
        warnings.simplefilter("always")
        rows = _trials(_fake_timer(on_trial=graph_breaks), lambda: None)
    err = capsys.readouterr().err
    assert "Graph break" not in err and not [w for w in outside if "Graph break" in str(w.message)]
    assert len(rows[0]["warnings_held"]) == 2 and all("Graph break" in m for m in rows[0]["warnings_held"])
    assert logging.getLogger("torch._dynamo").handlers   # torch's own handlers are back afterwards


SUMMARY = {"script": "train.py", "batches": 16, "stopped": "stopped after 16 batches", "args": [],
           "loader": {"dataset": "Ds", "dataset_len": 400, "batch_size": 8, "num_workers": 2, "pin_memory": False,
                      "prefetch_factor": 2, "persistent_workers": False, "timeout": 0, "drop_last": True},
           "verdict": "compute-bound", "data_wait_s_per_batch": 0.0123, "step_s_per_batch": 0.08,
           "data_wait_fraction": 0.13, "samples_per_s": 100.0, "first_batch_wait_s": 0.4,
           "step_s_per_sample": 0.01, "step_cpu_s_per_sample": 0.01}


class _Load:
    def __init__(self, busy: bool):
        self.busy = busy

    def summary(self) -> dict:
        return {"available": True, "busy": self.busy, "other_cpu_cores": 1.4 if self.busy else 0.0,
                "usable_cores": 2, "other_fraction": 0.7 if self.busy else 0.0}


def test_the_report_file_carries_the_script_phase(tmp_path, monkeypatch):
    from feedlab.doctor import __main__ as M

    # the command's own names (imported at its top): what it calls
    monkeypatch.setattr(M, "run_script", lambda *a, **k: (dict(SUMMARY), object()))
    monkeypatch.setattr(M, "diagnose_loader", lambda loader, **k: _rep([]))
    monkeypatch.setattr(M, "LoadWindow", lambda: _Load(False))   # a quiet machine, whatever this one is doing
    out = tmp_path / "x.md"
    assert M.main(["--script", "train.py", "--diagnose", "--report", str(out)]) == 0
    text = out.read_text()
    assert "data wait 12.3 ms" in text and "waiting for data 13%" in text      # the script phase
    after = text.split("data wait 12.3 ms")[1]
    assert "VERDICT" not in after and "diagnosis of the verdict above (compute-bound)" in after   # one verdict
    assert "the step was priced as it ran in your script, beside its 2 loader worker(s) prefetching" in text


def test_the_report_figure_keeps_every_label_whole_and_on_the_canvas():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from feedlab.doctor.share import figure
    from feedlab.figcheck import check_figure

    rep = _rep([])
    rep["stages"] = [{"stage": "fetch", "variant": "your dataset's __getitem__ (read+decode+transform)",
                      "measurable": True, "s_per_sample": 3e-4},
                     {"stage": "model", "variant": "your script's step, as it ran", "measurable": True,
                      "s_per_sample": 2e-3}]
    rep["end_to_end"] = [{"num_workers": w, "predicted_samples_per_s": 500.0 + w} for w in range(3)]
    fig = figure(rep)
    FigureCanvasAgg(fig)
    a, b = fig.axes
    labels = [t.get_text().replace("\n", " ") for t in a.get_yticklabels()]
    assert labels == ["fetch: your dataset's __getitem__ (read+decode+transform)",
                      "model: your script's step, as it ran"]   # the old figure cut them at 28 characters
    assert all(float(t).is_integer() for t in b.get_xticks() if 0 <= t <= 2)
    assert check_figure(fig) == []


def test_a_script_measured_busy_reads_too_busy_to_judge(monkeypatch, capsys):
    """#46: ``--script`` on a busy machine printed the loop's verdict as if quiet. Now the script's loop measured
    while other programs took the CPU reads "VERDICT: too busy to judge" naming the load (the measured word kept
    as ``measured_verdict``), and --diagnose's one verdict follows it."""
    import json

    from feedlab.doctor import __main__ as M

    monkeypatch.setattr(M, "run_script", lambda *a, **k: (dict(SUMMARY), object()))
    monkeypatch.setattr(M, "LoadWindow", lambda: _Load(True))
    assert M.main(["--script", "train.py"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("VERDICT"))
    assert line.startswith("VERDICT: too busy to judge") and "1.40 of 2 usable cores" in line
    assert "compute-bound" not in line and out.count("VERDICT") == 1
    assert M.main(["--script", "train.py", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["verdict"] == "too busy to judge" and rep["measured_verdict"] == "compute-bound"
    monkeypatch.setattr(M, "LoadWindow", lambda: _Load(False))
    assert M.main(["--script", "train.py", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "compute-bound"
