"""The claims ledger: the registry, the verdict thresholds, report(), docs/CLAIMS.md and the README block."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from feedlab import claims as C
from feedlab.claims import ledger
from feedlab.paths import NOTEBOOKS_DIR

CPU = {"cuda_available": False, "gpus": [], "cpu_usable": 2, "cpu_logical": 2}
GPU = {"cuda_available": True, "gpus": [{"name": "NVIDIA H100 80GB HBM3"}], "cpu_usable": 16, "cpu_logical": 16}


def verdict(claim_id, payload=None, fp=GPU, frame=None):
    return C.judge(C.BY_ID[claim_id], C.Run(payload or {}, fingerprint=fp, frame=frame))


# ---------------------------------------------------------------- the registry
def test_registry_is_complete_and_consistent():
    assert len(C.CLAIMS) >= 40
    assert len({c.id for c in C.CLAIMS}) == len(C.CLAIMS)
    for c in C.CLAIMS:
        assert (NOTEBOOKS_DIR / f"{c.notebook}.ipynb").is_file(), c.id
        assert c.writeup in ledger.WRITEUPS and c.id.startswith(c.writeup + "-"), c.id
        assert c.text and c.theirs and c.tolerance, c.id
        for need in c.needs:
            assert need == "gpu" or (need.startswith("cores>=") and need[7:].isdigit()), (c.id, need)


def test_every_notebook_with_claims_reports_them():
    for nb in {c.notebook for c in C.CLAIMS}:
        text = (NOTEBOOKS_DIR / f"{nb}.ipynb").read_text()
        assert f'report_claims(\\"{nb}\\"' in text, nb


# ---------------------------------------------------------------- needs, from the fingerprint
def test_gpu_claim_is_not_testable_on_a_cpu_machine_and_runs_on_a_gpu():
    payload = {"h2d_pinned_gbps": 24.0, "h2d_pageable_gbps": 12.0}
    cpu = verdict("001-pinned-dma", payload, CPU)
    assert cpu.status == C.NOT_TESTABLE and "GPU" in cpu.note
    assert verdict("001-pinned-dma", payload, GPU).status == C.REPRODUCED


def test_core_count_need_names_the_cores():
    v = verdict("002-workers-cores-minus-one", {"samples_per_s_with_model": {"0": 1, "1": 2, "2": 3}}, CPU)
    assert v.status == C.NOT_TESTABLE and "4" in v.note and "2" in v.note


def test_missing_number_is_not_testable_and_says_rerun():
    v = verdict("000-lmdb-map-size", {}, CPU)
    assert v.status == C.NOT_TESTABLE and "lmdb_map_growth" in v.note and "02_lmdb_vs_png" in v.note


def test_no_fingerprint_means_unknown_machine():
    v = C.judge(C.BY_ID["001-pinned-dma"], C.Run({}, fingerprint=None))
    assert v.status == C.NOT_TESTABLE and "fingerprint" in v.note


# ---------------------------------------------------------------- thresholds: 03 (pinned memory)
def _steps(ratio16, ratio64):
    return {"step_ms": {f"{s}/{b}": {"pageable_ms": r, "pinned_ms": 1.0}
                        for s, r in ((16, ratio16), (64, ratio64)) for b in (8, 128)}}


@pytest.mark.parametrize("r16,expect", [(0.9, C.REPRODUCED), (1.0, C.PARTLY), (1.2, C.NOT_REPRODUCED)])
def test_03_paged_wins_small_thresholds(r16, expect):
    assert verdict("000-paged-wins-small-input", _steps(r16, 1.0)).status == expect


@pytest.mark.parametrize("r64,expect", [(1.1, C.REPRODUCED), (1.0, C.PARTLY), (0.8, C.NOT_REPRODUCED)])
def test_03_pinned_wins_64_thresholds(r64, expect):
    assert verdict("000-pinned-wins-64", _steps(1.0, r64)).status == expect


# ---------------------------------------------------------------- thresholds: 04 (print)
@pytest.mark.parametrize("factor,expect", [(40.0, C.REPRODUCED), (3.0, C.PARTLY), (1.1, C.NOT_REPRODUCED)])
def test_04_print_thresholds(factor, expect):
    payload = {"per_sink": {"pipe": {"print_factor": 1.01}, "file": {"print_factor": factor}}}
    v = verdict("004-print-75x", payload, CPU)
    assert v.status == expect and f"{factor:.2f}" in v.ours and "file" in v.ours


# ---------------------------------------------------------------- thresholds: 07 (collate, over the grid)
def _grid(transpose_ms, fast_ms=1.0):
    rows = []
    for (size, bs), t in transpose_ms.items():
        for variant, v in (("transpose", t), ("to_float", 1.0), ("stack", 1.0)):
            rows.append({"kind": "piece", "variant": variant, "image_size": size, "batch_size": bs,
                         "metric": "ms_per_batch", "value": v})
        for variant, v in (("totensor", t + 2.0), ("fast_nchw", fast_ms)):
            rows.append({"kind": "collate", "variant": variant, "image_size": size, "batch_size": bs,
                         "metric": "ms_per_batch", "value": v})
    return pd.DataFrame(rows)


def test_07_transpose_verdicts_are_taken_over_the_grid():
    big = _grid({(96, 16): 8.0, (96, 64): 8.0, (224, 128): 8.0})           # 80% everywhere
    mixed = _grid({(96, 16): 8.0, (96, 64): 8.0, (224, 128): 0.5})          # one point where it is not
    small = _grid({(96, 16): 0.5, (96, 64): 0.5, (224, 128): 0.5})
    assert verdict("001-transpose-80", frame=big, fp=CPU).status == C.REPRODUCED
    assert verdict("001-transpose-largest", frame=big, fp=CPU).status == C.REPRODUCED
    assert verdict("001-transpose-largest", frame=mixed, fp=CPU).status == C.PARTLY
    assert "224²×128" in verdict("001-transpose-largest", frame=mixed, fp=CPU).ours
    assert verdict("001-transpose-80", frame=small, fp=CPU).status == C.NOT_REPRODUCED
    assert verdict("001-transpose-largest", frame=small, fp=CPU).status == C.NOT_REPRODUCED


@pytest.mark.parametrize("fast,expect", [(1.0, C.REPRODUCED), (6.0, C.PARTLY), (50.0, C.NOT_REPRODUCED)])
def test_07_fast_collate_thresholds(fast, expect):
    # stock = transpose + 2 = 10 ms: fast 1 ms → 10×, 6 ms → 1.7× at most points, 50 ms → slower
    frame = _grid({(96, 16): 8.0, (96, 64): 8.0, (224, 128): 1.0 if fast == 6.0 else 8.0}, fast)
    assert verdict("001-fast-collate", frame=frame, fp=CPU).status == expect


# ---------------------------------------------------------------- thresholds: 08 (HDF5 under fork)
def _settings(wrong=0, missing=0):
    ok = {"right": 100, "wrong": 0, "missing": 0, "expected": 100, "raised": 0, "error": ""}
    bad = dict(ok, right=100 - wrong - missing, wrong=wrong, missing=missing)
    return {"settings": {"hdf5_parent/fork/w2": bad, "hdf5_parent/fork/w3": ok,
                         "hdf5_chunked_parent/fork/w2": ok, "hdf5_per_worker/fork/w2": ok},
            "versions": {"h5py": "3.x", "hdf5": "1.x"}}


def test_08_hdf5_verdicts():
    assert verdict("004-hdf5-wrong-labels", _settings(), CPU).status == C.NOT_REPRODUCED
    assert verdict("004-hdf5-wrong-labels", _settings(wrong=1), CPU).status == C.REPRODUCED
    assert verdict("004-hdf5-wrong-labels", _settings(missing=5), CPU).status == C.NOT_REPRODUCED
    assert verdict("000-hdf5-parallel", _settings(missing=5), CPU).status == C.REPRODUCED
    assert verdict("000-hdf5-parallel", _settings(), CPU).status == C.NOT_REPRODUCED


def test_02_lmdb_median_is_a_real_median():
    ratios = {"lmdb_w0_b8": 1.0, "lmdb_w0_b32": 1.2, "lmdb_w2_b8": 1.4, "lmdb_w2_b32": 3.0,
              "lmdb_raw_w0_b8": 9.0}
    v = verdict("000-lmdb-modest", {"throughput_ratio_vs_png": ratios}, CPU)
    assert "1.30×" in v.ours and v.status == C.REPRODUCED  # (1.2 + 1.4) / 2, raw LMDB excluded


# ---------------------------------------------------------------- report()
def test_report_adds_verdicts_and_prints_each(capsys, tmp_path):
    (tmp_path / "fingerprint.json").write_text(json.dumps(CPU))
    payload = {"per_sink": {"pipe": {"print_factor": 1.05}}}
    vs = C.report("04_print_overhead", payload, tmp_path)
    out = capsys.readouterr().out
    assert [v.claim for v in vs] == ["004-print-75x"]
    assert payload["verdicts"]["004-print-75x"]["status"] == C.NOT_REPRODUCED
    assert "[not reproduced] 004-print-75x" in out and "1.05×" in out and "Tolerance" in out
    assert "not findings" not in out
    C.report("04_print_overhead", {**payload, "profile": "smoke"}, tmp_path)  # a smoke run says what it is
    assert "Smoke profile: tiny sizes that check the code runs; these verdicts are not findings." in \
        capsys.readouterr().out


# ---------------------------------------------------------------- the ledger and the README
def _machine(figures, nb, key, fp, payload):
    d = figures / nb / key if key else figures / nb
    d.mkdir(parents=True)
    (d / "fingerprint.json").write_text(json.dumps(fp))
    (d / "results.json").write_text(json.dumps(payload))


def test_ledger_has_one_column_per_machine(tmp_path):
    payload = {"per_sink": {"file": {"print_factor": 40.0}}}
    _machine(tmp_path, "04_print_overhead", "cpu-2c", CPU, {"per_sink": {"file": {"print_factor": 1.1}}})
    _machine(tmp_path, "04_print_overhead", "h100-16c", GPU, payload)
    machines, table = ledger.table(tmp_path)
    assert machines == ["cpu-2c", "h100-16c"]
    assert table["004-print-75x"]["cpu-2c"].status == C.NOT_REPRODUCED
    assert table["004-print-75x"]["h100-16c"].status == C.REPRODUCED
    assert table["001-transpose-80"]["h100-16c"].status == C.NOT_TESTABLE  # 07 not run there
    md = ledger.claims_markdown(tmp_path)
    assert "| claim | theirs | notebook | tolerance | needs | cpu-2c | h100-16c |" in md
    n = ledger.counts(machines, table)
    assert sum(n["cpu-2c"].values()) == len(C.CLAIMS)


def test_ledger_reads_the_one_machine_layout(tmp_path):
    _machine(tmp_path, "04_print_overhead", "", CPU, {"per_sink": {"file": {"print_factor": 1.1}}})
    machines, table = ledger.table(tmp_path)
    assert machines == ["cpu-2c"] and table["004-print-75x"]["cpu-2c"].status == C.NOT_REPRODUCED


def test_committed_claims_md_is_current():
    """docs/CLAIMS.md is what `python -m feedlab.readme` makes from the committed results."""
    assert ledger.CLAIMS_MD.read_text() == ledger.claims_markdown() + "\n", \
        "docs/CLAIMS.md is stale: run `python -m feedlab.readme`"


def test_readme_claims_block_is_current_and_linked():
    from feedlab.paths import REPO_ROOT

    text = (REPO_ROOT / "README.md").read_text()
    assert "docs/CLAIMS.md" in text
    assert ledger.update_readme_block(text) == text, "README claims block is stale: run `python -m feedlab.readme`"


def test_update_readme_block_replaces_only_between_markers(tmp_path):
    _machine(tmp_path, "04_print_overhead", "cpu-2c", CPU, {"per_sink": {"file": {"print_factor": 1.1}}})
    text = f"head\n{ledger.START}\nold\n{ledger.END}\ntail\n"
    new = ledger.update_readme_block(text, tmp_path)
    assert new.startswith("head\n") and new.endswith("tail\n") and "old" not in new
    assert "| not reproduced | 1 |" in new and f"| not testable here | {len(C.CLAIMS) - 1} |" in new
    assert ledger.update_readme_block("no markers", tmp_path) == "no markers"


# ---------------------------------------------------------------- the new measurements behind claims
def test_lmdb_map_grows_from_a_tiny_start(sr_root):
    from feedlab.experiments.lmdb_vs_png import map_size_growth

    g = map_size_growth(sr_root, samples=16, start_bytes=8 * 1024)
    assert g["error"] == "" and g["data_bytes"] > g["start_bytes"] and g["doublings"] >= 1
    v = verdict("000-lmdb-map-size", {"lmdb_map_growth": g}, CPU)
    assert v.status == C.NOT_REPRODUCED and "no size guessed" in v.ours


def test_bytes_per_sample_checks_the_192gb_arithmetic(sr_root):
    from feedlab import formats
    from feedlab.experiments import storage_formats as S

    b = S.bytes_per_sample(sr_root, {"npy_mmap": formats.bytes_on_disk(sr_root, "npy_mmap")})
    assert b["raw_bytes_per_sample"] == 16 * 16 * 3 + 32 * 32 * 3
    assert 1.0 <= b["bytes_per_sample_npy_mmap"] / b["raw_bytes_per_sample"] < 1.05
    assert verdict("003-imagenet-192gb", b, CPU).status == C.REPRODUCED


def test_peer_ratio_rows_from_notebook_13_results(tmp_path):
    import json

    from feedlab.claims import ledger

    d = tmp_path / "13_peer_loaders" / "cpu-2c"
    d.mkdir(parents=True)
    (d / "fingerprint.json").write_text("{}")
    (d / "results.json").write_text(json.dumps({"ratios": {
        "sr": {"ratio": 1.5, "ratio_low": 1.2, "ratio_high": 1.9, "verdict": "met (>= 1.0)",
               "best_peer": {"label": "LitData"}},
        "jpeg": {"ratio": None, "why_missing": "no peer passed"}}}))
    rows = ledger.peer_ratio_rows(tmp_path)
    assert "| cpu-2c | sr | ×1.50 (1.20–1.90) | LitData | met (>= 1.0) |" in rows
    assert any("jpeg | n/a (no peer passed)" in r for r in rows)
    assert ledger.peer_ratio_rows(tmp_path / "nothing") == []


# ---------------------------------------------------------------- shared helpers of the claim tests
def test_setting_keys_parse_by_name_and_filter():
    from feedlab.claims import core

    ms = {"baseline_w2_pin0_b8": 4.0, "baseline_w2_pin1_b8": 3.0, "baseline_w2_pin1_b64": 1.0, "fixed_w2_pin1_b8": 9}
    assert core.keyed(ms, "baseline_", pin=1) == {(2, 8): 3.0, (2, 64): 1.0}
    assert set(core.keyed(ms, "baseline_", ("pin",))) == {(0,), (1,)}
    assert core.keyed({"w0_b16": "0.5"}) == {(0, 16): 0.5}
    with pytest.raises(core.NoData, match="no 'cold_…' entries"):
        core.keyed(ms, "cold_")
    assert core.by_int({"7": 2, "1": "1.5"}) == {7: 2.0, 1: 1.5}


def test_verdict_helpers():
    from feedlab.claims import core

    assert core.verdict(True, False) == core.REPRODUCED
    assert core.verdict(False, True) == core.PARTLY
    assert core.verdict(False) == core.NOT_REPRODUCED
    assert core.all_or_some(x > 1 for x in (2, 3)) == core.REPRODUCED
    assert core.all_or_some([True, False]) == core.PARTLY
    assert core.all_or_some([False]) == core.NOT_REPRODUCED
