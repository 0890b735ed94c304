"""The figure check that save_figure runs: it fails on the defects issue 14 found by eye."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from feedlab import plots  # noqa: E402
from feedlab.figcheck import FigureCheckError, check_figure  # noqa: E402

FP = {"cpu_model": "test", "cpu_usable": 2, "python": "3", "torch": "x", "git": {"commit": "0" * 40},
      "time_utc": "2026-01-01T00:00:00"}


def _lines(n=3):
    fig, ax = plt.subplots()
    x = np.arange(10)
    for k in range(n):
        ax.plot(x, x * (k + 1), label=f"series {k}")
    return fig, ax


def test_several_series_without_legend_fail_and_with_one_outside_pass():
    fig, ax = _lines()
    assert any("3 labelled series but no legend" in p for p in check_figure(fig))
    plots.legend_outside(ax)
    fig.tight_layout()
    assert check_figure(fig) == []
    plt.close(fig)


def test_legend_over_lines_or_bars_fails():
    fig, ax = plt.subplots()
    for k in range(3):
        ax.plot(np.arange(10), np.full(10, 9.0 - k), label=f"series {k}")  # flat lines across the top
    ax.set_ylim(0, 10)
    ax.legend(loc="upper left")
    assert any("legend covers data" in p for p in check_figure(fig))
    plt.close(fig)
    fig, ax = plt.subplots()
    for k in range(3):
        ax.bar(np.arange(4) + k * 0.25, [5, 5, 5, 5], 0.25, label=f"sink {k}")
    ax.legend(loc="lower left")
    assert any("legend covers data" in p for p in check_figure(fig))
    plt.close(fig)


def test_bars_in_colours_without_legend_fail():
    fig, ax = plt.subplots()
    ax.bar([0, 1, 2], [3, 4, 5], color=["#1b6ca8", "#e07a1f", "#1b6ca8"])
    assert any("colours but no legend" in p for p in check_figure(fig))
    plt.close(fig)


def test_label_struck_by_its_line_fails():
    fig, ax = _lines(1)
    ax.axhline(5, color="k")
    ax.text(2, 5, "memcpy ceiling", va="center")
    assert any("crossed by a line" in p for p in check_figure(fig))
    plt.close(fig)


def test_text_outside_the_canvas_fails():
    fig, ax = _lines(1)
    fig.text(1.05, 0.5, "off the edge")
    assert any("outside the canvas" in p for p in check_figure(fig))
    plt.close(fig)


def test_save_figure_raises_in_strict_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("FEEDLAB_STRICT_FIGURES", "1")
    fig, _ax = _lines()
    with pytest.raises(FigureCheckError, match="no legend"):
        plots.save_figure(fig, tmp_path, "bad", fingerprint=FP)
    assert not (tmp_path / "bad.png").exists()
    monkeypatch.setenv("FEEDLAB_STRICT_FIGURES", "0")
    plots.save_figure(fig, tmp_path, "bad", fingerprint=FP)  # warns, still saves
    assert (tmp_path / "bad.png").exists()
    plt.close(fig)


def test_single_y_tick_fails_and_readable_log_axis_fixes_it():
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [7.0, 14.0, 11.0], label="copy")
    ax.set_yscale("log")
    ax.minorticks_off()
    assert any("labelled tick(s) on the y axis" in p for p in check_figure(fig))
    plots.readable_log_axis(ax, "y")
    assert not any("tick" in p for p in check_figure(fig))
    plt.close(fig)


def test_underscore_labels_give_no_legend_and_fail():
    fig, ax = plt.subplots()
    ax.bar([0], [1], label="__getitems__", color="#1b6ca8")
    ax.bar([1], [2], label="__getitem__", color="#e07a1f")
    ax.legend()  # matplotlib drops labels starting with "_": an empty legend
    assert any("no legend" in p for p in check_figure(fig))
    plt.close(fig)


def test_one_named_category_on_y_is_not_a_missing_scale():
    fig, ax = plt.subplots()
    ax.barh([0], [5.0])
    ax.set_yticks([0], ["pil"])
    assert check_figure(fig) == []
    plt.close(fig)


def test_save_figure_wraps_a_long_suptitle(tmp_path, monkeypatch):
    monkeypatch.setenv("FEEDLAB_STRICT_FIGURES", "1")
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([1, 2], [1, 2])
    fig.suptitle("Per batch of (x, y) uint8 pairs, square, 3 channels: collate only (no GPU: pinning and copies not measured)")
    plots.save_figure(fig, tmp_path, "narrow", fingerprint=FP)  # would lie outside the canvas unwrapped
    plt.close(fig)


def test_outside_strict_mode_a_defect_is_said_once_in_a_sentence(monkeypatch):
    from feedlab import figcheck

    monkeypatch.delenv("FEEDLAB_STRICT_FIGURES", raising=False)
    monkeypatch.setattr(figcheck, "_SAID", set())
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], label="a")
    ax.plot([0, 1], [1, 0], label="b")  # two series, no legend
    lines = []
    assert figcheck.enforce(fig, "f", log=lines.append) and figcheck.enforce(fig, "f", log=lines.append)
    assert len(lines) == 1 and lines[0].startswith("The figure f was saved with a defect") and "no legend" in lines[0]
    plt.close(fig)
