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
    assert profile_values("07_totensor_vs_fast_collate", "gpu") == profile_values("07_totensor_vs_fast_collate", "quick")
    # cut where the 2026-11-25 run was stopped (docs/GPU_RUN.md)
    assert profile_values("01_worker_scaling", "gpu")["max_workers"] == "cores"
    assert len(profile_values("09_batch_size_breakdown", "gpu")["batch_sizes"]) == 3
    assert profile_values("04_print_overhead", "gpu")["repeats"] < profile_values("04_print_overhead", "quick")["repeats"]


def _gpu_call_plan() -> dict[str, list[tuple[str, int]]]:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / ".ci" / "gpu-call").read_text()
    block = text[text.index("declare -A PLAN=("):text.index(")\nORDER=")]
    return {g: [(nb, int(lim)) for nb, lim in re.findall(r"(\d\d):(\d+)", items)]
            for g, items in re.findall(r'\[(\w+)\]="([^"]*)"', block)}


def test_the_gpu_calls_run_every_notebook_once_and_each_fits_its_command():
    """.ci/gpu-call's groups: every notebook in one call, and each call's limits within the command's
    540 s less a minute and a half for the wheels and the data (2026-11-25: about 60 s)."""
    from feedlab.run import list_notebooks

    plan = _gpu_call_plan()
    named = [nb for items in plan.values() for nb, _ in items]
    assert sorted(named) == sorted(p.stem[:2] for p in list_notebooks())
    for group, items in plan.items():
        assert sum(lim for _, lim in items) <= 540 - 90, group


def test_the_gpu_runbook_is_written_for_a_person_renting_a_machine():
    """docs/GPU_RUN.md: no path of a developer's checkout, no word of the project's own lending tool,
    and every call of the plan in its table with the limits the script uses."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "GPU_RUN.md").read_text()
    for word in ("/work/", "device time", "device-minutes", "loan", "lease", "budget_left", "files_at", "`run` tool"):
        assert word not in text.lower(), word
    for group, items in _gpu_call_plan().items():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{group}` |"))
        assert [(nb, lim) for nb, lim in re.findall(r"\b(\d\d) [^(|]*\((\d+)\)", row)] == \
            [(nb, str(lim)) for nb, lim in items], group
