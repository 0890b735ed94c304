"""Notebook 10's prediction error by the one judge (report.doctor_judge): a setting's error is judged only where its
window gives a rate and the spread of its repeats cannot carry the error across the ±20% bound; the docs' block,
the findings target and the calibration rows give the same reading of one record (audit54 N1, N2, N4)."""

from __future__ import annotations

import json

from feedlab.like_for_like import Side
from feedlab.paths import FIGURES_DIR
from feedlab.report import doctor_judge as D
from feedlab.report import targets
from feedlab.report.claims.core import Run

H100 = FIGURES_DIR / "10_doctor" / "h100-16c"


def test_an_error_inside_the_spread_of_its_repeats_is_not_judged():
    wide = Side("0: start", timed_batches=200, window_s=2.0, repeats=3, rate_kind="steady", repeat_half_width=0.487)
    why = D.spread_words(wide, 1719.0, 1362.0)
    assert why and why.startswith("0: start's repeats spread ±48.7%") and "either side of ±20%" in why
    # a tight spread, or one that leaves the error on one side of the bound: judged as before
    assert D.spread_words(Side("a", repeat_half_width=0.03), 1719.0, 1362.0) is None
    assert D.spread_words(Side("a", repeat_half_width=0.10), 3000.0, 1362.0) is None


def test_the_largest_error_misses_only_where_a_setting_outside_the_bound_is_read():
    entries = [(0.26, "0: start", "0: start's repeats spread ±48.7% …"), (0.95, "4: ring", "4: ring measured once"),
               (0.05, "1 workers", None)]
    word, why = D.error_verdict(entries)
    assert word == "not judged against" and why.startswith("4: ring")
    assert D.error_verdict(entries + [(0.30, "2 workers", None)]) == ("misses", "")
    assert D.row_word(entries[0]).startswith("not judged: 0: start's repeats") and D.row_word(entries[2]) == "ok"
    assert D.row_word((0.34, "3 workers", None)) == "MISSED by 14 points"


def test_committed_h100_record_reads_the_same_in_the_docs_and_the_findings_target():
    payload = json.loads((H100 / "results.json").read_text())
    word, why = D.error_verdict(D.error_entries(payload, H100)[1])
    assert word == "not judged against", why   # its one read setting over 20% (0: start) spreads ±48.7%
    line = targets._doctor(targets.for_notebook("10_doctor")[0], Run(out_dir=H100))[0]
    assert f": {word} the ±20% target ({why})." in line and "misses" not in line


def test_the_recorded_calibration_rows_and_step_lines_are_read_again_by_the_one_judge():
    """audit54 N2/N3 on the copy path: the stale h100 executed notebook's "MISSED by" rows and its step 4 line."""
    run = Run(out_dir=H100)
    row = D.reading_line("workers (start spec) w3: predicted 5,426, measured 4,047 samples/s, error +34% "
                         "(MISSED by 14 points)", run)
    assert row.endswith("error +34% (not judged: 3 workers' timed window was not recorded)"), row
    step = D.reading_line("step 4: loader=ring: predicted ×1.08, measured ×0.71 (10,338 samples/s, IQR 10,338–10,338); "
                          "measured SLOWER: undone; bounded by model", run)
    assert "(10,338 samples/s, one measurement, no spread); undone (measured slower, not judged: 4: loader=ring " \
           "measured once" in step and step.endswith("; bounded by model"), step
    assert D.reading_line("anything else", run) == "anything else"


def _worker_row(runs, predicted=1160.0, **kw) -> dict:
    row = {"num_workers": 1, "predicted_samples_per_s": predicted, "samples_per_s": float(sorted(runs)[len(runs) // 2]),
           "repeats": len(runs), "timed_batches": 50, "window_s": 2.3, "capacity_now": 2.0, "pass_speed": 1.0}
    row.update(steady_runs=list(runs), **kw)
    return row


def test_a_worker_count_is_judged_with_the_spread_of_its_repeats(tmp_path):
    """audit56 N10: a worker count's rate is a side like a step's: the spread of its recorded repeats can leave
    its error unjudged; a row that records only its quartiles is never accepted."""
    run = Run({"cores": 2}, out_dir=tmp_path)
    wide = D._worker_window(_worker_row([1150.0, 1160.0, 1403.0]), run)   # ±28.8% (95%, t)
    assert wide and wide.startswith("1 workers' repeats spread ±28.8%") and "either side of ±20%" in wide, wide
    assert D._worker_window(_worker_row([1155.0, 1160.0, 1165.0]), run) is None   # tight: read
    old = _worker_row([1150.0, 1160.0, 1403.0])
    del old["steady_runs"]
    assert D._worker_window(old, run) == "1 workers: its repeats' spread was not recorded"


def test_committed_cpu_record_with_quartiles_only_reads_its_worker_counts_not_judged():
    cpu = FIGURES_DIR / "10_doctor" / "cpu-2c"
    payload = json.loads((cpu / "results.json").read_text())
    if any(e.get("steady_runs") for e in payload["end_to_end"]):
        return   # re-measured with its repeats: the rule above reads them
    own, every = D.error_entries(payload, cpu)
    assert all(why and "spread was not recorded" in why for _, _, why in own), own
    assert D.error_verdict(own)[0] == "not judged against"
    assert D.marks(every)["1 workers"].startswith("not judged") and D.marks(every)["2 workers"].startswith("not judged")


def test_an_anchored_prediction_carries_the_anchors_spread(tmp_path):
    """audit57 N13: every prediction is scaled to the anchor (the start's row, measured), so the anchor's repeats'
    spread widens each anchored error, combined in quadrature with the row's: a tight row scaled to a wide anchor is
    not judged; to a tight anchor it is read; an anchor whose spread is not recorded leaves every row unjudged."""
    run = Run({"cores": 2}, out_dir=tmp_path)
    row = _worker_row([1155.0, 1160.0, 1165.0], predicted=1250.0)        # +8%, its own repeats tight
    wide_anchor = _worker_row([1383.0, 1121.0, 1654.0, 1779.0, 1201.0], num_workers=0, anchor=True)   # ±24.7%
    payload = {"cores": 2, "end_to_end": [wide_anchor, row]}
    (err, label, why), = D.error_entries(payload, run=Run(payload, out_dir=tmp_path))[0]
    assert label == "1 workers" and why and "the anchor's ±24.7%" in why and "either side of ±20%" in why, why
    assert D.error_verdict([(err, label, why)])[0] == "not judged against"
    assert D._worker_window(row, run, D.anchor_spread(payload, run)) == why
    tight_anchor = _worker_row([1380.0, 1383.0, 1386.0], num_workers=0, anchor=True)
    payload = {"cores": 2, "end_to_end": [tight_anchor, row]}
    assert D.error_verdict(D.error_entries(payload, run=Run(payload, out_dir=tmp_path))[0]) == ("meets", "")
    blind = dict(tight_anchor)
    del blind["steady_runs"]
    payload = {"cores": 2, "end_to_end": [blind, row]}
    (_, _, why), = D.error_entries(payload, run=Run(payload, out_dir=tmp_path))[0]
    assert why == "the anchor (0 workers): its repeats' spread was not recorded"
    assert D.anchor_spread({"end_to_end": [row]}, run) == (None, None)   # not anchored: as before


def test_the_start_repeat_target_is_judged_on_the_repeats_behind_each_measurement():
    """audit57 N14: three medians 7% apart are "met" only where their repeats are tight; medians of repeats
    spread ±24.7% / ±15.6% give a spread either side of 10%: not judged; a record without them: not judged."""
    b = {"measurements": [1383.0, 1470.0, 1375.0], "spread": 0.0683}
    assert D.repeat_target_words(b) == "not judged: the repeats behind each measurement were not recorded"
    assert D.repeat_target_words(dict(b, half_widths=[0.01, 0.01, 0.01])) == "met"
    wide = D.repeat_target_words(dict(b, half_widths=[0.247, 0.156, 0.02]))
    assert wide.startswith("not judged: the repeats behind each measurement spread ±24.7%, ±15.6%, ±2.0%"), wide
    assert "either side of 10%" in wide
    assert D.repeat_target_words(dict(b, half_widths=[0.247, 0.156, None])) == "not judged: 1,375 records no spread of repeats"
    far = {"measurements": [1000.0, 1300.0], "spread": 300 / 1150, "half_widths": [0.02, 0.02]}
    assert D.repeat_target_words(far) == "NOT met, by 16 points"


def test_the_recorded_start_repeat_line_is_read_again_on_its_repeats(tmp_path):
    """audit57 N14: a committed "target within 10%: met" on three medians is read again from the record's
    baseline; a record without each measurement's repeats reads "not judged", never "met"."""
    payload = {"calibration": {"baseline": {"measurements": [1383.0, 1470.0, 1375.0], "spread": 0.0683}}}
    run = Run(payload, out_dir=tmp_path)
    line = ("- Start setting measured 3 times in this run (1,383, 1,470, 1,375 samples/s): spread 7% of the median "
            "(target within 10%: met).")
    assert D.reading_line(line, run) == line.replace(
        "met).", "not judged: the repeats behind each measurement were not recorded).")
    payload["calibration"]["baseline"]["half_widths"] = [0.01, 0.01, 0.01]
    assert D.reading_line(line, run) == line


def test_a_recorded_drift_cause_on_sides_with_no_spread_is_read_again(tmp_path):
    """audit57 S15: "the machine moved" and the gain's error stand only where both measurements of the setting
    record their repeats; a record from before (no ``against_half_widths``) reads "not judged"."""
    run = Run({"steps": [{"label": "2: collate=fast", "against_measured": [5061.0, 6612.0]}]}, out_dir=tmp_path)
    line = ("- advice steps 2: collate=fast: predicted 12,095, measured 13,554 samples/s, error -11% (not judged: x); "
            "the setting it changes measured 5,061 then 6,612 samples/s in this run (+31%: the machine moved since the "
            "stages were priced); against it, the gain's error -10%")
    got = D.reading_line(line, run)
    assert got.endswith("(+31%: not judged, the repeats behind each were not recorded)"), got
    assert "machine moved" not in got and "gain's error" not in got
