"""A ratio is judged only where both sides did the same work: each invariant, alone, stops the verdict;
the committed notebook-13 ratios (chunk order against a full shuffle, a reduced-scale decode against a
full one, windows of milliseconds) read "not like for like" with what differs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from feedlab import like_for_like as L
from feedlab.paths import FIGURES_DIR

BASE = L.Side("a", order="global", pixel_error=0.0, batch_size=64, workers=2, cache="warm", timed_batches=64,
              window_s=1.5)


def test_identical_sides_are_like_for_like_and_keep_their_verdict():
    b = replace(BASE, label="b", pixel_error=0.2)  # within the pixel tolerance
    assert L.differences(BASE, b) == [] and L.judged("met", BASE, b) == "met"


@pytest.mark.parametrize("change,words", [
    (dict(order="chunk"), "order: global permutation per epoch vs chunk-local"),
    (dict(pixel_error=10.4), "pixels: mean error 0.0 vs 10.4"),
    (dict(batch_size=256), "batch size: 64 vs 256"),
    (dict(workers=16), "workers: 2 vs 16"),
    (dict(cache="cold"), "cache: warm vs cold"),
    (dict(timed_batches=32), "window: b timed 32 batches < 50"),
    (dict(window_s=0.0075), "window: b timed 7.5 ms < 1 s"),
    (dict(order=None), "not recorded for b: order (not known)"),
    (dict(pixel_error=None), "not recorded for b: pixels against the reference decode (not known)"),
])
def test_each_invariant_alone_stops_the_verdict(change, words):
    b = replace(BASE, label="b", **change)
    diff = L.differences(BASE, b)
    assert len(diff) == 1 and diff[0].startswith(words), diff
    assert L.judged("met", BASE, b).startswith("not like for like (" + words)


def test_order_classes_follow_the_loader_before_the_sampler_text():
    assert L.order_of("global permutation per epoch", "chunk") == "chunk"
    assert L.order_of("OrderOption.RANDOM (global permutation)") == "global"
    assert L.order_of("OrderOption.QUASI_RANDOM") == "quasi"
    assert L.order_of("sequential") == "sequential" and L.order_of("") is None
    assert L.workers_of("npy_mmap fast_cl b64 w0 chunk", 1) == 0 and L.workers_of("", 2) == 2


# notebook 13's cpu-2c record as committed before the like-for-like re-run (5c36a03d, 2026-11-25): the
# table issue #32 audited, kept as a fixture so the invariants are proven on it
OLD_13 = Path(__file__).parent / "fixtures" / "peers_13_cpu2c_20251125.json"


def _committed_13():
    path = FIGURES_DIR / "13_peer_loaders" / "cpu-2c" / "results.json"
    return json.loads(path.read_text())


def test_the_committed_peer_ratios_say_what_differs_exactly_where_the_sides_differ():
    """The rule, on whatever the committed record holds: a ratio is judged only where its recorded sides are
    like for like, and reads "not like for like (what differs)" where they differ (the best peer may run another
    order: 2026-11-27's LitData in chunk-local order)."""
    from feedlab.peers.report import sides_of_record

    payload = _committed_13()
    for kind in ("sr", "cls"):
        diff = L.differences(*sides_of_record(payload, kind))
        word = (payload.get("verdicts") or {}).get(kind, {}).get("word")
        if word is not None:
            assert (word == L.NOT_LIKE) == bool(diff), (kind, word, diff)


def test_the_old_peer_ratios_are_not_like_for_like_and_say_why():
    from feedlab.peers.report import sides_of_record

    payload = json.loads(OLD_13.read_text())
    sr = L.differences(*sides_of_record(payload, "sr"))
    assert any(d.startswith("order: chunk-local") for d in sr)          # chunk order vs FFCV's full shuffle
    assert any(d.startswith("workers: 0 vs 1") for d in sr)             # the table said 1; 0 ran
    assert any("ms < 1 s" in d for d in sr)                             # 7.5–9.7 ms windows
    cls = L.differences(*sides_of_record(payload, "cls"))
    assert any(d.startswith("pixels: mean error 10.4 vs 0.2") for d in cls)   # reduced-scale DCT vs full decode


def test_the_claims_ledger_judges_the_committed_peer_ratios_only_where_like_for_like(tmp_path):
    from feedlab.report.claims.ledger import peer_ratio_rows

    rows = [r for r in peer_ratio_rows() if r.startswith("| cpu-2c |")]
    # judged against the target (met, missed or within the run's spread), or not like for like / not tested
    # fairly, each with why
    verdicts = ("target |", "within this run's spread of the ≥ 1 target (", "not tested fairly (", "not like for like (")
    assert len(rows) == 2 and all(any(v in r for v in verdicts) for r in rows), rows
    old = tmp_path / "13_peer_loaders" / "cpu-2c"
    old.mkdir(parents=True)
    (old / "results.json").write_text(OLD_13.read_text())
    (old / "fingerprint.json").write_text("{}")
    rows = [r for r in peer_ratio_rows(tmp_path) if r.startswith("| cpu-2c |")]
    assert len(rows) == 2 and all("not like for like (" in r and "target |" not in r for r in rows)


def test_a_run_whose_sides_match_is_judged():
    from feedlab.peers.report import sides_of_record

    payload = json.loads(OLD_13.read_text())
    for row in payload["table"]:
        row["shuffle"] = "global permutation per epoch"
        row["epochs_per_window"] = 200
        if row.get("contender") == "feedlab_best":
            row["pipeline"] = "npy_mmap fast_cl b64 w1 dataloader"
    payload["ratios"]["sr"]["feedlab"]["pipeline"] = "npy_mmap fast_cl b64 w1 dataloader"
    assert L.differences(*sides_of_record(payload, "sr")) == []
    from feedlab.report import targets
    from feedlab.report.claims.core import Run

    line = "sr: feedlab best 10 vs 5: ratio 0.95 (from the IQRs 0.90–1.10); target >= 1.0: met (>= 1.0)."
    # sides like for like now: the verdict the notebook recorded ("met (>= 1.0)") is kept, never recomputed
    assert targets.peer_line(line, targets.PEER, Run(payload, fingerprint={})).endswith(
        "ratio 0.95 (from the IQRs 0.90–1.10); meets the ≥ 1 target.")
    # a record with no word of its own is judged by the one judge on the printed interval
    for r in payload["ratios"].values():
        r.pop("verdict", None)
    assert targets.peer_line(line, targets.PEER, Run(payload, fingerprint={})).endswith(
        "ratio 0.95 (from the IQRs 0.90–1.10); within this run's spread of the ≥ 1 target (0.9–1.1 holds 1).")


def test_a_rate_timed_to_its_precision_needs_no_fifty_batches_but_still_a_second():
    """One window rule for the workbook: >= 1 s of wall time, and 50 timed batches or a rate known to
    +-5% (SteadyStop's relative half-width) — a precise 12-batch window counts, an imprecise one does not."""
    from feedlab.like_for_like import Side, differences

    base = dict(order="global", pixel_error=0.0, batch_size=64, workers=2, cache="warm")
    precise = Side("a", timed_batches=12, window_s=1.4, half_width=0.03, **base)
    loose = Side("b", timed_batches=12, window_s=1.4, half_width=0.09, **base)
    long_ = Side("c", timed_batches=60, window_s=1.2, **base)
    short_precise = Side("d", timed_batches=12, window_s=0.3, half_width=0.01, **base)
    assert differences(precise, long_) == []
    diff = differences(loose, long_)
    assert len(diff) == 1 and "12 batches < 50 (±9% > ±5%)" in diff[0]
    assert any("< 1 s" in d for d in differences(short_precise, long_))


# ---- the one judge ----
from dataclasses import replace as _replace  # noqa: E402

from feedlab.like_for_like import MET, MISSED, NOT_FAIR, NOT_LIKE, WITHIN, Side, verdict  # noqa: E402

_A = Side("change", order="global", pixel_error=0.0, batch_size=128, workers=2, cache="warm",
          timed_batches=60, window_s=2.0, repeats=3, rate_kind="steady")
_B = _replace(_A, label="start")


def test_verdict_refuses_unlike_sides_and_names_what_differs():
    v = verdict(_A, _replace(_B, batch_size=256), 10.6, target=10.0)
    assert v.word == NOT_LIKE and "batch size: 128 vs 256" in v.why and not v.judged


def test_verdict_reads_a_missing_invariant_as_not_known_never_equal():
    v = verdict(_A, _replace(_B, cache=None), 2.0)
    assert v.word == NOT_LIKE and v.why == "not recorded for start: cache (not known)"
    # what both records show differs is said first; what a side did not record follows, grouped by side
    v = verdict(_replace(_A, order=None, window_s=None), _replace(_B, batch_size=256, order=None), 2.0)
    assert v.why == ("batch size: 128 vs 256; not recorded for change and start: order (not known); "
                     "not recorded for change: timed window (not known)"), v.why


def test_verdict_a_busy_or_unsteady_or_single_side_is_not_tested_fairly():
    assert verdict(_A, _replace(_B, busy="18% other load"), 2.0).word == NOT_FAIR
    assert verdict(_replace(_A, rate_kind="imprecise"), _B, 2.0).word == NOT_FAIR
    assert verdict(_replace(_A, repeats=1), _B, 2.0).word == NOT_FAIR
    assert verdict(_A, _B, None).word == NOT_FAIR


def test_verdict_within_spread_met_missed_and_a_baseline_that_already_met():
    assert verdict(_A, _B, 1.02, lo=0.95, hi=1.10).word == WITHIN
    assert verdict(_A, _B, 1.20, target=1.05, lo=1.10, hi=1.30).word == MET
    assert verdict(_A, _B, 0.85, target=1.05, lo=0.80, hi=0.90).word == MISSED
    v = verdict(_A, _B, 0.03, target=0.05, lower_is_better=True, baseline=0.002)
    assert v.word == MET and "already met" in v.why


def test_verdict_lets_the_change_under_test_differ_and_nothing_else():
    """The doctor's advice changes the worker count (that is the advice); a batch size or recipe change is
    measured, never credited (10 on the H100 kept batch_size=256)."""
    more = _replace(_A, workers=9)
    assert verdict(more, _B, 7.4, changes=("workers",)).word == MET
    assert verdict(more, _B, 7.4).word == NOT_LIKE
    v = verdict(_replace(more, batch_size=256), _B, 10.6, changes=("workers",))
    assert v.word == NOT_LIKE and v.why.startswith("batch size: 256 vs 128")
    v = verdict(_replace(more, recipe="srcnn bf16"), _replace(_B, recipe="srcnn fp32"), 2.0, changes=("workers",))
    assert v.word == NOT_LIKE and "recipe: srcnn bf16 vs srcnn fp32" in v.why
    with pytest.raises(ValueError):
        verdict(more, _B, 2.0, changes=("batch_size",))


def test_the_committed_advice_and_storage_ratios_go_through_the_judge():
    """05's Target 2 (chunk order, 0 workers, against a global-order DataLoader with 2) and 10's h100 advice
    (batch 128 → 256) are not like for like; the README says so."""
    from feedlab.report.claims import sides
    from feedlab.report.claims.core import Run

    h100 = FIGURES_DIR / "10_doctor" / "h100-16c"
    if (h100 / "results.json").is_file():
        v = sides.advice_verdict(Run(out_dir=h100))
        assert v.word == NOT_LIKE and "batch size: 256 vs 128" in v.why
    cpu = FIGURES_DIR / "05_storage_formats" / "cpu-2c"
    if (cpu / "results.json").is_file():
        run = Run(out_dir=cpu)
        v = sides.storage_best_over_baseline(run, 20.0)
        if "chunk" in str(run.payload.get("best_read_variant")):
            # the chunk loader's order is its own record; the baseline's order is recorded nowhere: not known
            assert v.word == NOT_LIKE and ("order: chunk" in v.why or "the baseline: order (not known)" in v.why)


def test_the_peer_line_keeps_its_cold_ratio_and_what_follows():
    """The README cut 13's line after its target clause: the cold ratio, each side's values and the CPU per
    sample were dropped. Both clauses are judged; the rest of the line stays."""
    from feedlab.report import targets
    from feedlab.report.claims.core import Run

    payload = json.loads(OLD_13.read_text())
    line = ("sr: feedlab best 10 vs 5: ratio 0.95 (from the IQRs 0.90–1.10); target >= 1.0: met (>= 1.0). "
            "Cold page cache: ratio 0.81 (from the spreads 0.75–0.87): not met. Each side (feedlab / peer): x.")
    out = targets.peer_line(line, targets.PEER, Run(payload, fingerprint={}))
    assert "Cold page cache: ratio 0.81 (from the spreads 0.75–0.87): " in out and out.endswith("Each side (feedlab / peer): x.")
    assert "target >= 1.0" not in out and ": not met." not in out and "Cold page cache: ratio 0.81" in out


def test_verdict_an_imprecise_rate_with_its_half_width_is_judged_on_a_wider_interval():
    """A window that reached its cap before ±5% still measured its half-width: a ×8 gain at ±21% is met, a ×1.1
    gain at ±21% is within spread; an imprecise rate with no half-width stays not tested fairly."""
    start = _replace(_B, rate_kind="imprecise", half_width=0.21)
    assert verdict(_A, start, 8.0, target=1.05).word == MET
    v = verdict(_A, start, 1.10, target=1.05)
    assert v.word == WITHIN and v.lo < 1.05 < v.hi
    assert verdict(_A, _replace(_B, rate_kind="imprecise"), 8.0).word == NOT_FAIR


# ---- not applicable / not checked (issue 45): an invariant with no meaning for a side, and one not measured
def test_not_applicable_on_both_sides_matches_and_keeps_the_verdict():
    a = replace(BASE, order=L.NOT_APPLICABLE, pixel_error=L.NOT_APPLICABLE, cache=L.NOT_APPLICABLE,
                epoch_batches=L.NOT_APPLICABLE)
    b = replace(a, label="b")
    assert L.differences(a, b) == []
    assert L.verdict(a, b, 2.0, target=1.5).word == L.MET


@pytest.mark.parametrize("field,value,words", [
    ("pixel_error", 0.0, "pixels: not applicable vs 0.0"),
    ("order", "global", "order: not applicable vs global permutation"),
    ("cache", "warm", "cache: not applicable vs warm"),
    ("epoch_batches", 0, "epochs: not applicable vs one epoch"),
])
def test_not_applicable_against_a_value_is_not_like_for_like(field, value, words):
    a = replace(BASE, **{field: L.NOT_APPLICABLE})
    b = replace(BASE, label="b", **{field: value})
    diff = L.differences(a, b)
    assert len(diff) == 1 and diff[0].startswith(words), diff
    assert L.verdict(a, b, 2.0, target=1.5).word == L.NOT_LIKE


def test_not_checked_pixels_read_as_not_known_never_equal():
    a = replace(BASE, pixel_error=L.NOT_CHECKED)
    b = replace(BASE, label="b", pixel_error=L.NOT_CHECKED)
    assert L.differences(a, b) == ["not recorded for a and b: pixels against the reference decode (not known)"]


def test_invariants_spells_the_row_columns_and_refuses_values_outside_the_convention():
    row = L.invariants(order="sequential", pixel_error=0, cache="warm", window_s=1.25, epoch_batches=0)
    assert row == dict(order="sequential", pixel_error=0.0, cache="warm", window_s=1.25, epoch_batches=0)
    assert set(row) == set(L.INVARIANT_COLUMNS)
    assert "window_s" not in L.invariants(order=L.NOT_APPLICABLE, pixel_error=L.NOT_CHECKED,
                                          cache=L.NOT_APPLICABLE, window_s=None)
    for bad in (dict(order="shuffled"), dict(pixel_error="n/a"), dict(pixel_error=-1.0), dict(cache="hot"),
                dict(window_s=float("nan")), dict(epoch_batches=-2)):
        kw = {**dict(order="global", pixel_error=0.0, cache="warm", window_s=1.0), **bad}
        with pytest.raises(ValueError, match=next(iter(bad))):
            L.invariants(**kw)


# ---- the pooled window: a micro-benchmark's repeats of tens of ms each, judged on their sum and their own spread
def _micro(label: str, reps: int, window_s: float, values: list[float]) -> L.Side:
    """A side timed in ``reps`` repeats of ``window_s`` each, whose per-repeat values are ``values``."""
    return replace(BASE, label=label, timed_batches=50, window_s=window_s, repeats=reps,
                   pooled_s=reps * window_s, repeat_half_width=L.repeat_half_width(values))


def test_repeat_half_width_is_students_t_over_the_repeats_mean():
    xs = [1.0, 1.1, 0.9, 1.05, 0.95]   # mean 1, sd 0.0791: t(0.975, 4) = 2.776
    assert L.repeat_half_width(xs) == pytest.approx(2.776 * 0.0790569 / 5 ** 0.5, rel=1e-4)
    assert L.repeat_half_width([1.0]) is None and L.repeat_half_width([0.0, 0.0]) is None
    assert L.t975(40) == pytest.approx(2.021, abs=2e-3) and L.t975(1000) == pytest.approx(1.962, abs=2e-3)


def test_pooled_window_of_precise_repeats_is_judged_and_the_verdict_says_it_was_pooled():
    a = _micro("print", 7, 0.2, [1.00, 1.01, 0.99, 1.00, 1.02, 0.98, 1.00])
    b = _micro("none", 7, 0.2, [0.50, 0.51, 0.49, 0.50, 0.50, 0.51, 0.49])
    assert a.window_short() is None and L.differences(a, b) == []
    v = L.verdict(a, b, 2.0, target=1.5)
    assert v.word == L.MET
    assert "print's window pooled over 7 repeats: 1.4 s" in v.why and "none's window pooled" in v.why, v.why
    assert "(95%, t over the repeats)" in v.why
    # one window long enough on its own: nothing pooled, nothing said
    assert L.verdict(BASE, replace(BASE, label="b"), 2.0, target=1.5).why == ""


def test_pooled_window_with_a_wide_spread_is_refused_saying_why():
    a = _micro("print", 7, 0.2, [1.0, 1.3, 0.7, 1.2, 0.8, 1.1, 0.9])
    why = a.window_short()
    assert why is not None and "200.0 ms < 1 s" in why and "the repeats' mean ±" in why and "> ±5%" in why, why
    assert L.verdict(a, _micro("none", 7, 0.2, [1.0] * 7), 2.0, target=1.5).word == L.NOT_LIKE


def test_pooled_window_of_fewer_than_five_repeats_is_refused():
    a = _micro("print", 4, 0.3, [1.0, 1.0, 1.01, 0.99])
    assert "4 repeats < 5" in a.window_short()
    assert "not known how many repeats < 5" in replace(a, repeats=None).window_short()


def test_pooled_window_under_a_second_in_all_is_refused():
    a = _micro("print", 7, 0.045, [1.0, 1.0, 1.01, 0.99, 1.0, 1.0, 1.0])    # 04's 7 × 45 ms
    why = a.window_short()
    assert "45.0 ms < 1 s" in why and "315.0 ms in all < 1 s" in why, why
    assert "repeats < 5" not in why and "the repeats' mean" not in why      # only what fails is said


def test_pooled_window_does_not_lift_a_side_that_is_otherwise_unfair():
    a = _micro("print", 7, 0.2, [1.0, 1.0, 1.01, 0.99, 1.0, 1.0, 1.0])
    v = L.verdict(replace(a, busy="18% other load"), _micro("none", 7, 0.2, [1.0] * 7), 2.0, target=1.5)
    assert v.word == L.NOT_FAIR and "busy" in v.why
    assert "repeats' spread not recorded" in replace(a, repeat_half_width=None).window_short()


# ---------------------------------------------------------------- the one precision rule (audit 45 V12/V13)
def _imprecise(label: str, hw: float, repeats: int) -> L.Side:
    return L.Side(label=label, order="global", pixel_error=0.0, batch_size=64, workers=2, cache="warm",
                  timed_batches=56, window_s=2.0, half_width=hw, rate_kind="imprecise", repeats=repeats)


def test_an_imprecise_rate_with_too_few_repeats_is_not_tested_fairly_and_its_interval_is_said():
    a, b = _imprecise("feedlab", 0.073, 1), _imprecise("peer", 0.081, 1)
    v = L.verdict(a, b, 0.65, target=1.0, lo=0.56, hi=0.76)
    assert v.word == L.NOT_FAIR and "feedlab's rate is imprecise (±7.3% > ±5% asked; 1 repeat < 3)" in v.why
    assert "excludes 1" in v.why and not v.judged
    # the same sides with MIN_REPEATS repeats stand: judged on the interval widened by their half-widths
    a3, b3 = (replace(s, repeats=L.MIN_REPEATS) for s in (a, b))
    assert L.verdict(a3, b3, 0.65, target=1.0, lo=0.56, hi=0.76).word == L.MISSED
    assert L.precision_problem("x", "steady", None, 1) == "" and L.precision_problem("x", "imprecise", 0.06, 3) == ""
    assert "repeats not recorded" in L.precision_problem("x", "imprecise", 0.06, None)


def test_a_recorded_verdict_on_imprecise_sides_is_reread_by_the_same_rule():
    kept = L.Verdict(L.MISSED, "", 0.65, 0.56, 0.76, 1.0)
    v = L.reread(kept, _imprecise("feedlab", 0.073, 1), _imprecise("peer", 0.081, 1))
    assert v.word == L.NOT_FAIR and "(recorded: missed)" in v.why and "0.56–0.76 excludes 1" in v.why
    steady = L.Side(label="s", rate_kind="steady", half_width=0.01, repeats=1)
    assert L.reread(kept, steady, steady) is kept                       # sides the rule accepts: as recorded
    assert L.reread(L.Verdict(L.NOT_LIKE, "order"), _imprecise("a", 0.1, 1), steady).word == L.NOT_LIKE


def test_the_claims_repeats_rule_is_the_judges_rule():
    import pandas as pd

    from feedlab.report.claims import fair

    assert fair.MIN_REPEATS is L.MIN_REPEATS
    one = pd.DataFrame({"rate_kind": ["imprecise"], "rate_half_width": [0.08], "repeat": [0]})
    three = pd.DataFrame({"rate_kind": ["imprecise"] * 3, "rate_half_width": [0.08] * 3, "repeat": [0, 1, 2]})
    assert fair.imprecise_problem(one, {"num_workers": 0}) == L.precision_problem("w0", "imprecise", 0.08, 1) != ""
    assert fair.imprecise_problem(three, {"num_workers": 0}) == ""


def test_a_steady_side_whose_repeats_spread_wide_widens_the_interval_it_is_judged_on():
    """audit54 N1: one window that passes does not make a setting's rate known when its repeats disagree (10 h100's
    start: 1,001 / 1,362 / 1,486 samples/s, ±48.7%): the judge reads that spread, and a gain inside it is not met."""
    a = replace(BASE, label="a", repeats=3, rate_kind="steady")
    b = replace(a, label="b", repeat_half_width=0.487)
    assert L.spread_of(b) == 0.487 and L.spread_of(replace(b, repeat_half_width=0.03)) is None
    v = L.verdict(a, b, 1.26, target=1.2)
    assert v.word == L.WITHIN and v.lo < 1.2 < v.hi, v
    assert L.verdict(a, replace(b, repeat_half_width=0.03), 1.26, target=1.2).word == L.MET
