"""The README's "what starves a GPU" summary: effects computed from committed payloads."""

from __future__ import annotations

import json

from feedlab import summary


def _write(base, notebook, machine, payload):
    d = base / notebook / machine
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps(payload))


def test_effects_ranked_per_machine_and_split_by_scope(tmp_path):
    _write(tmp_path, "01_worker_scaling", "cpu-2c",
           {"samples_per_s_with_model": {"0": 100.0, "2": 150.0, "4": 120.0}, "model": "m"})
    _write(tmp_path, "10_doctor", "cpu-2c", {"measured_gain_total": 3.0, "predicted_gain_total": 4.0})
    _write(tmp_path, "07_totensor_vs_fast_collate", "cpu-2c", {"speedup": {"fast_channels_last": 20.0}})
    _write(tmp_path, "03_pinned_memory_by_input_size", "h100-16c",
           {"h2d_pinned_gbps": 50.0, "h2d_pageable_gbps": 10.0})
    _write(tmp_path, "03_pinned_memory_by_input_size", "cpu-2c",  # no CUDA: nothing measured, no effect
           {"h2d_pinned_gbps": None, "h2d_pageable_gbps": None})
    found = summary.machine_effects(tmp_path)
    assert list(found) == ["cpu-2c", "h100-16c"]
    assert [e.notebook for e in found["cpu-2c"]] == ["07_totensor_vs_fast_collate", "10_doctor",
                                                      "01_worker_scaling"]
    assert found["cpu-2c"][2].factor == 1.5 and "num_workers=2" in found["cpu-2c"][2].text
    assert found["h100-16c"][0].factor == 5.0
    text = summary.summary_markdown(tmp_path, top=1)
    cpu = text[text.index("**cpu-2c**"):text.index("**h100-16c**")]
    assert "training: ×3.0" in cpu and "promised ×4.0" in cpu and "one stage: ×20.0" in cpu
    assert "×1.5" not in cpu  # top=1: only the largest of each scope


def test_bad_or_missing_numbers_give_no_effect(tmp_path):
    _write(tmp_path, "10_doctor", "cpu-2c", {"measured_gain_total": "nan"})
    _write(tmp_path, "01_worker_scaling", "cpu-2c", {"samples_per_s_with_model": {"2": 10.0}})
    (tmp_path / "12_beyond" / "cpu-2c").mkdir(parents=True)
    (tmp_path / "12_beyond" / "cpu-2c" / "results.json").write_text("{not json")
    assert summary.machine_effects(tmp_path) == {}
    assert summary.summary_markdown(tmp_path) == ""
