"""feedlab.budget: a notebook keeps the budget its profile states and names what it left out."""

import json

import pytest

from feedlab.budget import COSTS_FILE, Budget


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_no_budget_allows_everything_and_notes_nothing():
    b = Budget(None)
    assert all(b.allows(f"s{i}", cost_s=1e9) for i in range(3))
    assert b.note() == "" and not b.limited


def test_a_setting_that_would_run_past_the_budget_is_left_out_and_named():
    clock = Clock()
    b = Budget(100, name="02", clock=clock)
    assert b.allows("png, 0 workers", group="png")
    with b.setting("png, 0 workers", group="png"):
        clock.t += 60
    # the next png setting is expected to cost what the last one did (60 s) > 40 s left
    assert not b.allows("png, 2 workers", group="png")
    # another group with no cost yet is expected at the dearest so far: also left out
    assert not b.allows("lmdb, 2 workers", group="lmdb")
    # a given cost that fits is allowed
    assert b.allows("lmdb, 0 workers", cost_s=10, group="lmdb")
    note = b.note()
    assert "png, 2 workers" in note and "lmdb, 2 workers" in note and "100 s" in note
    assert "lmdb, 0 workers" not in note


def test_nothing_left_leaves_everything_out():
    clock = Clock()
    b = Budget(5, clock=clock)
    clock.t = 6
    assert not b.allows("x", cost_s=0.1)
    assert b.left_out == [("x", "no time left")]


def test_costs_are_saved_whole(tmp_path):
    clock = Clock()
    b = Budget(50, clock=clock)
    with b.setting("a"):
        clock.t += 2.5
    b.allows("b", cost_s=100)
    path = b.save(tmp_path)
    assert path.name == COSTS_FILE
    rec = json.loads(path.read_text())
    assert rec["costs_s"] == {"a": 2.5} and rec["left_out"][0]["setting"] == "b"
    assert [p.name for p in tmp_path.iterdir()] == [COSTS_FILE]


@pytest.mark.parametrize("bad", [-1, "60", float("nan"), True])
def test_a_bad_budget_is_refused_in_one_line(bad):
    with pytest.raises(ValueError, match="budget_s"):
        Budget(bad)
