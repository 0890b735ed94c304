"""A model of shared cores (#46): the step's own threads compete with the workers on the same cores. On 2
cores a 2-thread step beside 2 busy workers runs as on one thread at the shared speed, so the workers are no
longer credited with the cores the step is using (the super-resolution example: ×1.71 predicted, ×0.79–0.85
measured)."""

from __future__ import annotations

import pytest

from feedlab.doctor import predict as PR
from feedlab.doctor.costs import CostKey, CostTable, Machine, Stage
from feedlab.pipeline import PipelineSpec

SPEC = PipelineSpec(format="user", decode="user", collate="user", batch_size=8)


def _user_table(fetch=2e-3, step_wall=1e-3, threads=2, cores=2) -> CostTable:
    """Your loop as the doctor sees it: a one-thread fetch, a step that keeps ``threads`` threads busy (its
    CPU twice its wall), the step at your threads whatever the workers."""
    t = CostTable(Machine(cores, float(cores), False, {w: threads for w in range(5)}))
    t[("read", "user", "user")] = Stage("fetch", "f", [fetch], [fetch])
    for k in ("decode", "transform"):
        t[(k, "user", "user")] = Stage(k, k, [0.0], [0.0])
    t[("collate", "user", 8)] = Stage("collate", "c", [1e-5], [1e-5])
    t[("h2d", "user", 8, False, threads)] = Stage("h2d", "h", [1e-7], [1e-7])
    t[("model", 8, threads)] = Stage("model", "m", [step_wall], [step_wall * threads])
    return t


def test_workers_are_not_credited_with_the_cores_the_step_uses():
    t = _user_table()
    r0 = PR.predict(t, SPEC.replace(num_workers=0))["predicted_samples_per_s"]
    r2 = PR.predict(t, SPEC.replace(num_workers=2))["predicted_samples_per_s"]
    assert r2 / r0 < 1.1          # was ×1.5: the two step threads counted as free beside two workers


def test_on_many_cores_the_step_keeps_its_threads():
    t = _user_table(cores=16)
    r0 = PR.predict(t, SPEC.replace(num_workers=0))["predicted_samples_per_s"]
    r2 = PR.predict(t, SPEC.replace(num_workers=2))["predicted_samples_per_s"]
    assert r2 / r0 > 2.5          # 14 free cores: workers overlap the step, the fetch is spread over two


@pytest.mark.parametrize("threads,workers,cores,want", [(2, 0, 2, 2), (2, 1, 2, 1), (2, 2, 2, 1), (4, 2, 16, 4),
                                                       (8, 6, 8, 2), (1, 4, 2, 1)])
def test_shared_threads(threads, workers, cores, want):
    assert PR.shared_threads(threads, workers, cores) == want


def test_a_prediction_off_by_more_than_twenty_percent_marks_the_table():
    from feedlab.doctor.answer import off_line

    rows = [{"num_workers": 0, "error": 0.05}, {"num_workers": 16, "error": -0.89}, {"num_workers": 2}]
    assert off_line({"end_to_end": rows}) == ("prediction off by -89%: use the measured column (the predicted one "
                                              "does not hold here)")
    assert off_line({"end_to_end": [{"error": 0.19}, {"error": -0.5, "too_busy": True}]}) is None


def test_cost_table_nearest_is_public():
    t = _user_table(threads=2)
    assert t.nearest(CostKey("model", 8, 2)).variant == "m" and t.nearest(CostKey("model", 8, 16)).variant == "m"
    assert t.nearest(CostKey("model", 64, 2)) is None
    assert t.values_of("model", "batch_size") == {8}
    with pytest.raises(ValueError, match="threads"):
        t.nearest(CostKey("collate", "user", 8))           # only a key with threads has a nearest thread count
