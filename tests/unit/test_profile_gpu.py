"""The gpu profile: quick's values, then its own block, in every section."""

from feedlab.profiles import PROFILES, choose_profile, profile_values


def test_gpu_takes_quick_then_its_own_block(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("defaults:\n  all: {a: 1}\n  quick: {b: 2}\nnb:\n  all: {c: 3}\n  quick: {d: 4, e: 5}\n"
                 "  gpu: {e: 6}\n  full: {d: 9}\n")
    assert profile_values("nb", "gpu", f) == {"a": 1, "b": 2, "c": 3, "d": 4, "e": 6}
    assert profile_values("nb", "quick", f)["e"] == 5


def test_the_committed_gpu_profile_bounds_the_slow_notebooks():
    assert "gpu" in PROFILES and choose_profile("gpu") == "gpu"
    assert profile_values("08_hdf5_concurrency", "gpu")["worker_counts"] == [2, 4, 8]
    assert profile_values("11_worker_hygiene", "gpu")["num_workers"] == 8
    assert profile_values("03_pinned_memory_by_input_size", "gpu")["transfer_sizes"][-1] == "512MB"
    # a section without a gpu block is quick's
    assert profile_values("02_lmdb_vs_png", "gpu") == profile_values("02_lmdb_vs_png", "quick")
