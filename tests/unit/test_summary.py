"""The README's "what starves a GPU" summary: effects computed from committed payloads."""

from __future__ import annotations

import json

import pytest

from feedlab.report import summary


def _write(base, notebook, machine, payload):
    d = base / notebook / machine
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps(payload))


def test_effects_ranked_per_machine_and_split_by_scope(tmp_path):
    _write(tmp_path, "01_worker_scaling", "cpu-2c",
           {"samples_per_s_with_model": {"0": 100.0, "2": 150.0, "4": 120.0}, "model": "m"})
    _write(tmp_path, "10_doctor", "cpu-2c", {"measured_gain_total": 3.0, "predicted_gain_total": 4.0, "model": "srcnn"})
    _write(tmp_path, "07_totensor_vs_fast_collate", "cpu-2c", {"speedup": {"fast_channels_last": 20.0}})
    _write(tmp_path, "03_pinned_memory_by_input_size", "h100-16c",
           {"h2d_pinned_gbps": 50.0, "h2d_pageable_gbps": 10.0})
    _write(tmp_path, "03_pinned_memory_by_input_size", "cpu-2c",  # no CUDA: nothing measured, no effect
           {"h2d_pinned_gbps": None, "h2d_pageable_gbps": None})
    found = summary.machine_effects(tmp_path)
    assert list(found) == ["cpu-2c", "h100-16c"]
    # 10's payload records no steps: its gain is not judged by the one judge, so it is listed after the judged
    assert [e.notebook for e in found["cpu-2c"]] == ["07_totensor_vs_fast_collate", "01_worker_scaling",
                                                      "10_doctor"]
    assert found["cpu-2c"][1].factor == 1.5 and "num_workers=2" in found["cpu-2c"][1].text
    assert found["cpu-2c"][2].verdict.startswith("not tested fairly")
    assert found["h100-16c"][0].factor == 5.0
    text = summary.summary_markdown(tmp_path, top=2)
    cpu = text[text.index("**cpu-2c**"):text.index("**h100-16c**")]
    assert "training: ×1.5" in cpu and "one stage: ×20.0" in cpu
    assert "training: ×3.0" in cpu and "promised ×4.0" in cpu and "measured, not credited" in cpu
    assert cpu.index("×1.5") < cpu.index("×3.0")   # the judged effect first


def test_bad_or_missing_numbers_give_no_effect(tmp_path):
    _write(tmp_path, "10_doctor", "cpu-2c", {"measured_gain_total": "nan"})
    _write(tmp_path, "01_worker_scaling", "cpu-2c", {"samples_per_s_with_model": {"2": 10.0}})
    (tmp_path / "12_beyond" / "cpu-2c").mkdir(parents=True)
    (tmp_path / "12_beyond" / "cpu-2c" / "results.json").write_text("{not json")
    assert summary.machine_effects(tmp_path) == {}
    assert summary.summary_markdown(tmp_path) == ""


def test_an_effect_from_start_up_bound_rates_is_labelled_and_ranked_after_the_steady(tmp_path):
    import pandas as pd

    def run01(machine, batches):
        _write(tmp_path, "01_worker_scaling", machine,
               {"samples_per_s_with_model": {"0": 100.0, "4": 500.0}, "model": "m"})
        pd.DataFrame([{"experiment": "throughput_vs_workers", "model": "m", "num_workers": w, "batch_size": 32,
                       "prefetch_factor": 2, "repeat": r, "metric": "batches", "value": batches}
                      for w in (0, 4) for r in range(3)]).to_csv(
            tmp_path / "01_worker_scaling" / machine / "results.csv", index=False)
        _write(tmp_path, "10_doctor", machine, {"measured_gain_total": 2.0})

    run01("cpu-2c", 24)   # 4 workers × 2 + 1 warm-up + 50 timed would need 59 batches
    run01("cpu-4c", 100)
    found = summary.machine_effects(tmp_path)
    short, steady = found["cpu-2c"], found["cpu-4c"]
    # 10 here records no steps: not judged (its verdict says so), ranked among the flagged by its factor
    assert [e.notebook for e in short] == ["01_worker_scaling", "10_doctor"] and "w4 ran 24 batches" in short[0].unsteady
    assert [e.notebook for e in steady] == ["01_worker_scaling", "10_doctor"] and steady[0].unsteady == ""
    assert steady[1].verdict
    text = summary.summary_markdown(tmp_path)
    # the caveat is the rate check's own reason (start-up-bound here; "rates not known to their precision"
    # for a rate that hit its cap), never a fixed sentence about short epochs
    assert text.count("not a steady comparison (start-up-bound: ") == 1 and "24 batches" in text


def test_a_loader_alone_run_of_the_doctor_is_one_stage_not_training_and_no_change_is_no_effect():
    """README's top list called 10's loader-alone ×11.5 'training' and listed `num_workers=0` instead of 0."""
    from feedlab.report import summary as S

    e = S._doctor({"measured_gain_total": 11.5, "predicted_gain_total": 10.1, "model": "none"})
    assert e.scope == "stage" and "the loader alone (no model step)" in e.text
    assert S._doctor({"measured_gain_total": 3.0, "model": "srcnn"}).scope == "training"
    assert S._workers({"samples_per_s_with_model": {"0": 310.0, "2": 305.0}, "model": "srcnn_small"}) is None
    assert S._workers({"samples_per_s_with_model": {"0": 310.0, "2": 600.0}}).factor == pytest.approx(600 / 310)


def test_the_storage_formats_effect_says_it_compares_whole_pipelines():
    """05's best reader (one process) against the 2-worker PNG baseline differs in more than the format."""
    from feedlab.report import summary as S

    e = S._formats({"ratio_best_to_baseline": 123.4, "best_read": "npy_mmap, one process, a batch per read"})
    assert "whole-pipeline comparison" in e.text and "workers" in e.text
