"""Figure titles that state the finding, labels a person reads, and titles no legend covers."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from feedlab import plots  # noqa: E402
from feedlab.experiments import doctor_steps as DS  # noqa: E402
from feedlab.figcheck import check_figure  # noqa: E402
from feedlab.report import compare  # noqa: E402


def test_words_a_person_reads():
    assert plots.finding_title("LMDB + fast collate", 5.31, "PNG baseline", "batch 128") == \
        "LMDB + fast collate: ×5.3 the PNG baseline at batch 128"
    assert [plots.times(r) for r in (0.623, 1.0, 5.31, 9.97, 12.4, 250.2)] == \
        ["×0.62", "×1", "×5.3", "×10", "×12", "×250"]
    assert plots.workers_label(2.0) == "2 workers" and plots.workers_label("1") == "1 worker"
    assert plots.axis_label("samples_per_s") == "samples/s"
    assert plots.axis_label("gb_per_s", "median, IQR") == "GB/s (median, IQR)"
    assert plots.axis_label("some_new_column") == "some new column"   # never a raw column name
    assert plots.value_words("bytes", 4_000_000) == "4 MB" and plots.value_words("batch_size", 8) == "batch 8"
    assert plots.training_step("auto", "cpu") == "a light SRCNN training step (cpu)"
    assert plots.training_step("auto", "cuda:0") == "an SRCNN training step (cuda:0)"
    assert plots.training_step("srcnn") == "an SRCNN training step" and "a auto" not in plots.training_step("auto")


def _legend_over_title():
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar([0, 1, 2], [1, 3, 9], label="measured (median, IQR bars)")
    ax.plot([0, 1, 2], [1.2, 2.5, 8], "D", label="predicted from stage costs")
    ax.set_title("A title as wide as the axes, which a legend placed on top would cover")
    plots.legend_outside(ax, "top")
    return fig, ax


def test_a_legend_above_the_axes_is_caught_on_the_title_and_save_figure_lifts_the_title(tmp_path, monkeypatch):
    monkeypatch.setenv("FEEDLAB_STRICT_FIGURES", "1")
    fig, ax = _legend_over_title()
    assert any("overlaps the legend" in p for p in check_figure(fig))
    plots.save_figure(fig, tmp_path, "f", fingerprint={"cpu_model": "x"})  # strict: raises on a defect
    r = fig.canvas.get_renderer()
    assert ax.title.get_window_extent(r).y0 >= ax.get_legend().get_window_extent(r).y1 - 2
    plt.close(fig)


def test_a_long_finding_title_wraps_inside_the_canvas(tmp_path, monkeypatch):
    monkeypatch.setenv("FEEDLAB_STRICT_FIGURES", "1")
    steps = [{"measured": m, "measured_q25": m, "measured_q75": m, "predicted": m, "kept": True, "label": lab}
             for m, lab in ((100.0, "0: start"), (330.0, "1: format=npy_mmap"))]
    fig, ax = plt.subplots(figsize=(5, 3.5))  # narrower than the notebook's
    DS.plot_steps(ax, steps)
    ax.set_title(DS.steps_title(steps, "cuda:0", 128, "srcnn_small"))
    plots.save_figure(fig, tmp_path, "steps", fingerprint={"cpu_model": "x"})  # strict: raises if it leaves
    assert not check_figure(fig)
    plt.close(fig)


def test_a_figure_title_on_a_panel_title_is_caught_and_cleared(tmp_path, monkeypatch):
    monkeypatch.setenv("FEEDLAB_STRICT_FIGURES", "1")
    fig, axes = plt.subplots(2, 1, figsize=(6, 6))
    for a in axes:
        a.plot([0, 1], [0, 1])
        a.set_title("a panel title under the figure title")
    fig.tight_layout()
    fig.suptitle("a figure title", y=fig.subplotpars.top + 0.035)  # onto the first panel's title
    assert any("the figure title" in p and "overlaps" in p for p in check_figure(fig))
    assert plots.clear_suptitle(fig)
    assert not [p for p in check_figure(fig) if "overlaps" in p]
    plt.close(fig)


STEPS_A = {"variant": ["0: start", "1: format=npy_mmap"], "median": [100.0, 400.0]}
STEPS_B = {"variant": ["0: start", "1: num_workers=10"], "median": [100.0, 900.0]}


def _machine(steps):
    s = {"x": steps["variant"], "median": steps["median"], "q25": steps["median"], "q75": steps["median"],
         "n": [3, 3]}
    view = next(v for v in compare.VIEWS if v.notebook == "10_doctor")
    return {"fingerprint": "fp", "series": compare._normalise(view, {"all": s})}


def test_machine_comparison_states_its_finding_and_joins_only_the_same_change():
    view = next(v for v in compare.VIEWS if v.notebook == "10_doctor")
    assert view.x == "variant"  # "1: format=npy_mmap" and "1: num_workers=10" are different places
    data = {"cpu-2c": _machine(STEPS_A), "h100-16c": _machine(STEPS_B)}
    t = compare.title(view, data)
    assert t == ("The doctor's steps, measured — largest ratio to 0: start: cpu-2c ×4 (1: format=npy_mmap); "
                 "h100-16c ×9 (1: num_workers=10)")
    workers = next(v for v in compare.VIEWS if v.notebook == "01_worker_scaling")
    s = {"x": [1, 2], "median": [10.0, 30.0], "q25": [10.0, 30.0], "q75": [10.0, 30.0], "n": [3, 3]}
    one = {"m": {"fingerprint": "fp", "series": compare._normalise(workers, {"loader alone": s})}}
    assert compare.finding(workers, one) == "largest ratio to 1 worker: m ×3 (2 workers)"
    plain = next(v for v in compare.VIEWS if v.notebook == "06_decode_backends")
    d = {"m": {"fingerprint": "fp", "series": {"pil": {"x": ["jpeg_96"], "median": [12200.0]}}}}
    assert compare.finding(plain, d) == "m up to 12,200 images/s (jpeg_96)"


def test_comparison_axes_are_labelled_in_words(tmp_path, monkeypatch):
    monkeypatch.setenv("FEEDLAB_STRICT_FIGURES", "1")
    view = next(v for v in compare.VIEWS if v.notebook == "10_doctor")
    data = {"cpu-2c": _machine(STEPS_A), "h100-16c": _machine(STEPS_B)}
    seen = {}
    real = plots.save_figure

    def spy(fig, *a, **k):
        seen["labels"] = [ax.get_ylabel() for ax in fig.axes]
        seen["title"] = fig._suptitle.get_text()
        return real(fig, *a, **k)
    monkeypatch.setattr(plots, "save_figure", spy)
    compare.draw(view, data, tmp_path)
    assert seen["labels"] == ["samples/s (median, IQR)", "× vs 0: start on the same machine"]
    assert "samples_per_s" not in " ".join(seen["labels"]) and "×9" in seen["title"]


def test_doctor_titles_state_what_the_advice_gained():
    steps = [{"measured": 100.0, "kept": True}, {"measured": 400.0, "kept": True},
             {"measured": 300.0, "kept": False}, {"measured": 1100.0, "kept": True}]
    assert DS.steps_title(steps, "cpu", 64, "none") == \
        "The doctor's advice: ×11 the starting pipeline after 2 kept steps (cpu, batch 64, no model)"
    assert DS.steps_title(steps[:1], "cpu", 64, "auto").startswith("The doctor's advice: no step kept")
    pts = [{"predicted": 100, "measured": 110}, {"predicted": 100, "measured": 200}, {"predicted": 119, "measured": 100}]
    assert DS.calibration_title(pts, "cpu", 1.8) == \
        "Doctor's predictions: 2 of 3 within ±20% of measured\n(cpu, 1.80 CPU-s/s available)"


@pytest.mark.parametrize("n", [2.0, 3])
def test_worker_counts_are_whole_numbers(n):
    assert "." not in plots.workers_label(n)
