"""16_tune as nbval ran it (smoke, see nbrun.py): per scenario the tuner, the exhaustive grid over its space and the
heuristics read off the grid, each target with its word; the recipe's batch size never changed."""

import pytest

from nbrun import recorded

WORDS = {"met", "missed", "within spread", "not like for like", "not tested fairly"}


@pytest.mark.notebook
def test_16_tune_smoke():
    res, df, out = recorded("16_tune")
    assert res["profile"] == "smoke" and res["scenarios"]
    for r in res["scenarios"]:
        names = {g["name"] for g in r["grid"]}
        assert "start" in names and "num_workers=0" in names or r["start_workers"] == 0
        assert set(r["heuristic_names"]) == {"start", "pytorch_default", "cores", "cores_minus_1"}
        assert set(r["heuristic_names"].values()) <= names        # every heuristic measured in the grid
        t = r["tuner"]
        assert t["passes"] <= 3 and t["wall_s"] > 0 and r["grid_s"] > 0
        assert t["name"] is None or t["name"] in names             # the pick is a setting the grid measured
        for g in r["grid"]:
            assert g["batch_size"] in (None, res["sizes"]["batch_size"]) or r["key"] == "large"
            assert g["error"] or g["median"] > 0
        assert all(v["word"] in WORDS for v in r["targets"].values())
        if r["best"] is None:   # a busy laptop: no grid setting may be chosen, and none is (never a guess)
            assert all(g["error"] or g["busy"] or g["over_limit"] for g in r["grid"]), r["grid"]
        else:
            assert r["best"] in names and r["best_rate"] > 0
            assert not next(g for g in r["grid"] if g["name"] == r["best"])["busy"]   # never a busy rate
    assert set(df.metric) >= {"samples_per_s", "tune_s", "grid_s"}
    assert (out / "tune_vs_grid.png").is_file()
