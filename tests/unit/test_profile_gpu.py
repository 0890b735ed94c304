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


def test_the_gpu_calls_run_every_gpu_notebook_once_the_first_five_in_one_quarter_hour(monkeypatch):
    """Issues 31 and 36: the committed gpu profile, from its records (what each run left out for its limit
    counted) and budgets, holds every notebook once but the host-only ones; the cure, 01, 03, 09 and 10 share
    the first quarter-hour's two calls; no call passes its seconds."""
    from feedlab import run_plan

    monkeypatch.setenv("FEEDLAB_CORES", "16")
    rows = run_plan.plan(run_plan.list_notebooks(), "gpu", {})
    calls = run_plan.gpu_calls(rows, "h100-16c")
    named = [nb["name"] for c in calls for nb in c["notebooks"]]
    assert sorted(named + run_plan.host_only(rows)) == sorted(p.stem for p in run_plan.list_notebooks())
    first = [nb["name"][:2] for c in calls if c["quarter"] == 1 for nb in c["notebooks"]]
    assert set(run_plan.FIRST_LOAN) <= set(first)
    for call in calls:
        assert call["seconds"] <= call["deadline_s"] <= run_plan.CALL_S
        assert all(nb["limit"] >= nb["seconds"] for nb in call["notebooks"])


def test_the_gpu_runbook_is_written_for_a_person_renting_a_machine():
    """docs/GPU_RUN.md: no path of a developer's checkout, no word of the project's own lending tool,
    and the plan as the script computes it (no typed table of limits to drift from it)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "GPU_RUN.md").read_text()
    for word in ("/work/", "device time", "device-minutes", "loan", "lease", "budget_left", "files_at", "`run` tool"):
        assert word not in text.lower(), word
    assert "bash .ci/gpu-call --list" in text and "--dry-run --cores 16 --profile gpu" in text
    gpu_call = (Path(__file__).resolve().parents[2] / ".ci" / "gpu-call").read_text()
    assert "declare -A PLAN" not in gpu_call and "feedlab.run_plan --call" in gpu_call
