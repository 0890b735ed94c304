"""``feedlab.doctor --ranks R``: workers per rank priced from the stage costs on each rank's share."""

import pytest
from test_doctor import SPEC, table

from feedlab.doctor import predict as PR
from feedlab.doctor.ranks import advise_ranks, rank_machine, render_ranks


def test_one_rank_is_the_machine_itself():
    t = table(cores=2, eff=2.0)
    adv = advise_ranks(t, SPEC, 1)
    assert adv["cores_per_rank"] == 2 and [r["workers_per_rank"] for r in adv["rows"]] == [0, 1, 2]
    for r in adv["rows"]:
        p = PR.predict(t, SPEC.replace(num_workers=r["workers_per_rank"]))
        assert r["rank_samples_per_s"] == pytest.approx(p["predicted_samples_per_s"])


def test_ranks_split_the_cores_and_the_cpu():
    t = table(cores=8, eff=8.0)
    m = rank_machine(t.machine, 4)
    assert m.cores == 2 and m.cap(2) == pytest.approx(2.0) and m.cap(3) == pytest.approx(2.0)
    adv = advise_ranks(t, SPEC, 4)
    assert [r["workers_per_rank"] for r in adv["rows"]] == [0, 1, 2]
    cpu = 10e-6 + 100e-6 + 5e-6 + 2e-6 + 3e-6 + 1e-6                  # CPU-s per sample with workers
    for r in adv["rows"]:
        assert r["aggregate_samples_per_s"] == pytest.approx(4 * r["rank_samples_per_s"])
        assert r["aggregate_samples_per_s"] <= 8 / cpu * 1.0001          # never more than 8 cores of CPU
    assert adv["best"]["workers_per_rank"] >= 1                         # decode-bound: workers help
    text = "\n".join(render_ranks(adv))
    assert "4 ranks × 2 cores each" in text and "predicted, not measured" in text


def test_bad_rank_count_is_named():
    with pytest.raises(ValueError, match="--ranks 0"):
        advise_ranks(table(), SPEC, 0)


def _adv(ranks, preds):
    rows = [{"workers_per_rank": w, "rank_samples_per_s": p / ranks, "aggregate_samples_per_s": p,
             "bound_stage": "decode", "binding_term": "x"} for w, p in enumerate(preds)]
    return {"ranks": ranks, "cores_per_rank": 4, "rows": rows,
            "best": max(rows, key=lambda r: r["rank_samples_per_s"]), "note": "predicted"}


def _m(v, **recorded):
    return {"median": v, "q25": v * 0.9, "q75": v * 1.1, **recorded}


# what a grid row records where the one judge can read it (a steady window of 100 batches over 2 s, 3 repeats)
FAIR = dict(batch_size=64, order="global", cache="warm", pixel_error=0.0, window_s=2.0, timed_batches=100,
            rate_kind="steady", repeats=3)


def test_calibrate_names_slower_settings_and_judges_the_advice():
    from feedlab.doctor.ranks import calibrate

    advices = [_adv(1, [100, 180, 200]), _adv(2, [150, 300, 320])]        # advice: 2 ranks × 2 workers
    measured = {(1, 0): _m(95), (1, 2): _m(150), (2, 0): _m(140), (2, 2): _m(310), (2, 1): _m(200), (4, 0): _m(9)}
    out = calibrate(advices, measured, tol=0.25)
    assert out["advised"] == (2, 2) and out["best"] == (2, 2) and out["holds"] is True
    status = {(r["ranks"], r["workers_per_rank"]): r["status"] for r in out["rows"]}
    assert status == {(1, 0): "as predicted", (1, 2): "as predicted", (2, 0): "as predicted",
                      (2, 1): "slower than predicted", (2, 2): "as predicted"}     # (4, 0): not priced, left out
    text = "\n".join(out["lines"])
    assert "tolerance 25%" in text and "holds." in text
    assert "2 rank(s) × 1 workers: slower than predicted — measured 200 vs predicted 300" in text
    assert "4 of 5 measured settings within 25%" in text


def test_calibrate_advice_that_loses_to_the_measured_best_does_not_hold():
    from feedlab.doctor.ranks import calibrate

    out = calibrate([_adv(1, [100, 400])], {(1, 0): _m(200, **FAIR), (1, 1): _m(120, **FAIR)}, tol=0.2)
    assert out["advised"] == (1, 1) and out["best"] == (1, 0) and out["holds"] is False
    assert "does not hold." in out["lines"][0]
    assert any("faster than predicted" in x for x in out["lines"]) and any("slower than predicted" in x for x in out["lines"])


def test_calibrate_unmeasured_advice_or_empty_grid_says_so():
    from feedlab.doctor.ranks import calibrate

    out = calibrate([_adv(2, [100, 300])], {(2, 0): _m(90)})
    assert out["holds"] is None and "not measured here" in out["lines"][0]
    out = calibrate([_adv(2, [100, 300])], {})
    assert out["advised"] is None and "nothing to compare" in out["lines"][0]


def test_ranks_report_says_prediction_and_points_to_the_measurement():
    adv = advise_ranks(table(cores=4, eff=4.0), SPEC, 2)
    text = "\n".join(render_ranks(adv))
    assert "predicted, not measured" in text and "python -m feedlab.bench --ranks 2" in text and "notebook 14" in text


def test_grid_aggregates_feed_the_calibration():
    import pandas as pd

    from feedlab.experiments.ranks_grid import measured_aggregates, page_cache_format

    rows = [dict(metric="aggregate_samples_per_s", ranks=2, workers_per_rank=1, rank="all", repeat=k, value=v)
            for k, v in enumerate([100.0, 200.0, 300.0])]
    rows.append(dict(metric="wall_s", ranks=2, workers_per_rank=1, rank=0, repeat=0, value=5.0))
    m = measured_aggregates(pd.DataFrame(rows))
    assert m == {(2, 1): {"median": 200.0, "q25": 150.0, "q75": 250.0, "repeats": 3}}
    assert measured_aggregates(pd.DataFrame()) == {}
    from feedlab.formats import FORMATS

    f = page_cache_format()
    assert FORMATS[f].chunked and FORMATS[f].mmap                       # chosen by capability
    assert page_cache_format(present=[]) is None


def test_calibrate_does_not_count_an_unpredicted_setting_and_survives_zero_rates():
    from feedlab.doctor.ranks import calibrate

    adv = {"ranks": 1, "rows": [{"workers_per_rank": 0, "aggregate_samples_per_s": 0.0},
                                {"workers_per_rank": 1, "aggregate_samples_per_s": 100.0}],
           "best": {"workers_per_rank": 1, "aggregate_samples_per_s": 100.0}}
    out = calibrate([adv], {(1, 0): {"median": 50.0}, (1, 1): {"median": 100.0}})
    assert [r["status"] for r in out["rows"]] == ["not predicted", "as predicted"]
    assert "1 of 1 measured settings" in out["lines"][-1]
    out = calibrate([adv], {(1, 0): {"median": 0.0}, (1, 1): {"median": 0.0}})
    assert out["holds"] is None and "nothing to compare" in out["lines"][0]


def test_the_advice_holds_only_where_the_one_judge_reads_both_settings():
    """audit54 N9: 14's "holds" was a point share of two medians (2,516 ÷ 2,824 ≥ 0.80) whose windows, order and cache
    the record does not hold: by the one judge that is measured, not judged; with them recorded it is judged, and
    a share whose IQRs straddle the tolerance is not told apart. A recorded line is read again the same way."""
    import pandas as pd

    from feedlab.doctor.ranks import advice_holds, recorded_advice_line

    bare = {(2, 0): _m(2516.0), (2, 1): _m(2824.0)}
    holds, words = advice_holds(bare, (2, 0), (2, 1), 0.20)
    assert holds is None and words.startswith("measured, not judged: not like for like (not recorded for 2 rank(s)")
    fair = {k: dict(v, **FAIR) for k, v in bare.items()}
    assert advice_holds({k: dict(v, q25=v["median"] * 0.99, q75=v["median"] * 1.01) for k, v in fair.items()},
                        (2, 0), (2, 1), 0.20) == (True, "holds.")
    assert advice_holds(fair, (2, 0), (2, 1), 0.20)[0] is None      # its IQRs give 0.73–1.09: holds 0.80
    rows = [dict(metric="aggregate_samples_per_s", ranks=2, workers_per_rank=w, repeat=k, value=v * (1 + k / 100))
            for w, v in ((0, 2516.0), (1, 2824.0)) for k in range(3)]
    line = ("Doctor's advice 2 rank(s) × 0 workers (predicted 3,995 samples/s) vs the measured best 2 rank(s) × 1 "
            "workers (2,824 samples/s), tolerance 20%: the advice measured 2,516 samples/s (89% of the best, ×0.63 "
            "of its prediction): holds.")
    new = recorded_advice_line(line, pd.DataFrame(rows))
    assert ": measured, not judged: not like for like (" in new and new.endswith("[recorded by the notebook: holds.]")
