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
