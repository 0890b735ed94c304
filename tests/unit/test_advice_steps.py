"""experiments._advice_steps: which advice a step tries. Two values of one setting predicted within the run's
own prediction error of each other are a tie the run's noise must not settle (#46: notebook 10 took
``collate=fast`` in one quiet run and ``fast_cl`` in the next)."""

import pytest
from test_doctor import SPEC, table

from feedlab.doctor import predict as PR
from feedlab.experiments._advice_steps import own_error, settle_tie


def _a(setting, value, gain):
    return {"setting": setting, "value": value, "expected_gain": gain}


def test_a_near_tie_between_two_collates_takes_the_one_listed_first_whichever_the_noise_put_on_top():
    run1 = [_a("collate", "fast", 1.114), _a("collate", "fast_cl", 1.111)]
    run2 = [_a("collate", "fast_cl", 1.116), _a("collate", "fast", 1.101)]
    assert settle_tie(run1, 0.16)["value"] == "fast" and settle_tie(run2, 0.13)["value"] == "fast"


def test_gains_told_apart_by_more_than_the_error_keep_the_best():
    advice = [_a("collate", "fast_cl", 1.40), _a("collate", "fast", 1.10)]
    assert settle_tie(advice, 0.13)["value"] == "fast_cl"   # 1.10 × 1.13 < 1.40
    assert settle_tie(advice[:1] + [_a("collate", "fast", 1.39)], 0.0)["value"] == "fast_cl"   # no error known


def test_a_tie_is_settled_only_within_one_ordered_setting():
    advice = [_a("format", "npy_mmap", 5.16), _a("format", "lmdb_raw", 4.83), _a("collate", "fast", 5.15)]
    assert settle_tie(advice, 0.16)["value"] == "npy_mmap"   # formats keep the predicted order
    mixed = [_a("collate", "fast_cl", 1.12), _a("decode", "torchvision", 1.13), _a("collate", "fast", 1.11)]
    assert settle_tie(mixed, 0.16)["value"] == "fast"   # only another collate can settle a collate's tie


class _Doc:
    def __init__(self, e2e):
        self.e2e, self.table = e2e, table()

    def table_now(self, spec):
        return self.table


def test_own_error_is_the_largest_over_the_specs_measured_so_far():
    pred = PR.predict(table(), SPEC)["predicted_samples_per_s"]
    doc = _Doc({SPEC: {"steady": pred / 1.1}, SPEC.replace(num_workers=1): {"steady": None}})
    assert own_error(doc) == pytest.approx(0.1)
    assert own_error(_Doc({})) == 0.0
