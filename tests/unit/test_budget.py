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


# ---------------------------------------------------------------- the run's limit (the runner's deadline)
def test_the_runs_limit_refuses_even_a_setting_a_claim_reads():
    clock = Clock()
    b = Budget(100, name="09", clock=clock, deadline_s=60, finish_s=20)   # 40 s before the limit's finish
    assert b.allows("b8", group="b8", essential=True)
    with b.setting("b8", group="b8"):
        clock.t += 30
    # the budget (70 s left) would pass it, and an essential setting passes the budget; the limit does not
    assert not b.allows("b8 again", group="b8", essential=True)
    assert "before the run's limit" in b.left_out[-1][1]
    assert "the run's limit" in b.note() and "longer limit" in b.note()


def test_an_essential_setting_passes_the_budget_but_not_a_spent_limit():
    clock = Clock()
    b = Budget(10, clock=clock, deadline_s=1000)
    clock.t += 50                                   # the budget is spent, the limit far away
    assert b.allows("claim-read", essential=True)
    assert not b.allows("extra")
    clock.t += 1000
    assert not b.allows("claim-read", essential=True)
    assert b.left_out[-1] == ("claim-read", "no time left before the run's limit")


def test_a_timing_cap_is_shortened_to_fit_before_the_limit():
    clock = Clock()
    assert Budget(100, clock=clock).cap_s(15, passes=3) == 15          # no limit: the cap as given
    b = Budget(100, clock=clock, deadline_s=50, finish_s=20)           # 30 s left
    assert b.cap_s(15, passes=3) == pytest.approx(5.0)                 # 3 passes and as much again: 30 / 6
    clock.t += 40
    assert b.cap_s(15, passes=3) == 1.0                                 # never under the floor


def test_the_runners_deadline_is_read_from_the_environment(monkeypatch):
    import time

    from feedlab.budget import DEADLINE_ENV, seconds_to_deadline

    monkeypatch.delenv(DEADLINE_ENV, raising=False)
    assert seconds_to_deadline() == float("inf") and not Budget(None).limited
    monkeypatch.setenv(DEADLINE_ENV, "soon")                            # not a number: as without a runner
    assert seconds_to_deadline() == float("inf")
    monkeypatch.setenv(DEADLINE_ENV, f"{time.time() + 100:.3f}")
    assert 95 < seconds_to_deadline() <= 100.01
    b = Budget(None)                                                     # no budget, but a runner's limit
    assert b.limited and 70 < b.hard_left() <= 80.01                     # less the notebook's finish (20 s)
    assert b.record()["limit_s"] == pytest.approx(100, abs=5)


def test_costs_are_kept_after_every_setting(tmp_path):
    clock = Clock()
    b = Budget(100, clock=clock).keep_in(tmp_path)
    with b.setting("png, 2 workers"):
        clock.t += 7
    # a notebook stopped now still leaves what each setting took
    assert json.loads((tmp_path / COSTS_FILE).read_text())["costs_s"] == {"png, 2 workers": 7.0}
