"""Machine keys, worker counts sized to the cores, the dry-run plan, and the README
merging several machines' results."""

from __future__ import annotations

import json

import pytest

from feedlab import machines


def test_machine_key_from_fingerprints(monkeypatch):
    monkeypatch.delenv("FEEDLAB_MACHINE", raising=False)
    assert machines.machine_key({"cpu_usable": 2, "gpus": []}) == "cpu-2c"
    h100 = {"cpu_usable": 16, "gpus": [{"name": "NVIDIA H100 80GB HBM3"}]}
    assert machines.machine_key(h100) == "h100-16c"
    two = {"cpu_usable": 64, "gpus": [{"name": "NVIDIA A100-SXM4-40GB"}] * 2}
    assert machines.machine_key(two) == "2xa100-64c"
    assert machines.gpu_short_name("NVIDIA GeForce RTX 4090") == "rtx4090"
    monkeypatch.setenv("FEEDLAB_MACHINE", "my-box")
    assert machines.machine_key(h100) == "my-box"
    monkeypatch.setenv("FEEDLAB_MACHINE", "../escape")
    with pytest.raises(ValueError, match="FEEDLAB_MACHINE"):
        machines.machine_key(h100)


@pytest.mark.parametrize("cores, expected", [(2, [0, 2]), (4, [0, 2, 4]), (16, [0, 2, 8, 16])])
def test_worker_lists_follow_the_cores(cores, expected):
    assert machines.expand_workers([0, 2, "max(2, cores // 2)", "cores"], cores) == expected


def test_worker_expressions_are_checked():
    assert machines.expand_workers("cores + 2", 16) == 18
    assert machines.expand_workers("min(cores, 4)", 2) == 2
    assert machines.expand_workers(None, 4) is None
    for bad in ("__import__('os')", "cores.bit_length()", "cores - 9", "1.5", "cores /", -1):
        with pytest.raises(ValueError, match="worker"):
            machines.expand_workers(bad, 4, "worker_counts")


def test_worker_ladder():
    assert machines.worker_ladder(4) == [0, 1, 2, 3, 4]
    assert machines.worker_ladder(18) == [0, 1, 2, 3, 4, 6, 8, 12, 16, 18]
    assert machines.worker_ladder(0) == [0]
    # the counts a claim is stated at join the ladder, inside 0..top only
    assert machines.worker_ladder(18, also=(7, 15)) == [0, 1, 2, 3, 4, 6, 7, 8, 12, 15, 16, 18]
    assert machines.worker_ladder(4, also=(7, 1)) == [0, 1, 2, 3, 4]


def test_usable_cores_can_be_pretended(monkeypatch):
    monkeypatch.setenv("FEEDLAB_CORES", "16")
    assert machines.usable_cores() == 16
    monkeypatch.setenv("FEEDLAB_CORES", "zero")
    with pytest.raises(ValueError, match="FEEDLAB_CORES"):
        machines.usable_cores()


def test_figure_dir_is_keyed_by_machine(monkeypatch, tmp_path):
    from feedlab import paths

    monkeypatch.setattr(paths, "FIGURES_DIR", tmp_path)
    monkeypatch.setenv("FEEDLAB_MACHINE", "h100-16c")
    monkeypatch.setenv(paths.RUNNER_ENV, "1")  # as inside a notebook feedlab.run executes
    key = machines.machine_key()
    d = paths.figure_dir("01_worker_scaling", "", "quick", create=False, machine=key)
    assert d == tmp_path / "01_worker_scaling" / "h100-16c" and not d.exists()
    assert paths.figure_dir("01_worker_scaling", "", "quick", machine=key).is_dir()


def test_dry_run_plans_for_sixteen_cores(capsys, monkeypatch):
    from feedlab.run import main

    monkeypatch.delenv("FEEDLAB_CORES", raising=False)
    monkeypatch.setenv("FEEDLAB_MACHINE", "test-box")
    assert main(["--dry-run", "--profile", "quick", "--cores", "16", "--only", "01", "02", "09", "10"]) == 0
    out = capsys.readouterr().out
    blocks = {b.split("\n", 1)[0]: b for b in out.split("\n\n")[1:]}
    assert "16 usable cores" in out and "nothing is run" in out
    assert "[0, 2, 8, 16]" in blocks["01_worker_scaling"]
    assert "[0, 2, 16]" in blocks["02_lmdb_vs_png"]
    assert "[2, 16]" in blocks["09_batch_size_breakdown"]
    assert "max_workers              16" in blocks["10_doctor"]
    from feedlab.paths import REPO_ROOT  # the folders named from the repository, for the planned machine

    assert "out_dir                  figures/01_worker_scaling/test-box" in blocks["01_worker_scaling"]
    assert "data_root                data/sr64" in blocks["01_worker_scaling"] and str(REPO_ROOT) not in out
    assert main(["--dry-run", "--profile", "quick", "--cores", "2", "--only", "01"]) == 0
    assert "[0, 2]\n" in capsys.readouterr().out


def test_dry_run_creates_nothing(tmp_path, monkeypatch):
    from feedlab import paths
    from feedlab.run import main

    monkeypatch.setattr(paths, "FIGURES_DIR", tmp_path)
    assert main(["--dry-run", "--profile", "quick"]) == 0
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SystemExit):
        main(["--cores", "16", "--no-data", "--only", "01"])  # --cores needs --dry-run


def _fake_run(folder, machine_fp, reading):
    folder.mkdir(parents=True)
    (folder / "fingerprint.json").write_text(json.dumps(machine_fp))
    (folder / "results.json").write_text(json.dumps({"reading": reading}))
    (folder / "throughput.png").write_bytes(b"\x89PNG")


def test_readme_puts_machines_side_by_side(tmp_path, monkeypatch):
    from feedlab.report import readme

    monkeypatch.setattr(readme, "REPO_ROOT", tmp_path)
    figs = tmp_path / "figures"
    cpu = {"cpu_model": "EPYC", "cpu_usable": 2, "gpus": [], "time_utc": "2026-11-22T14:00:00"}
    gpu = {"cpu_model": "Xeon", "cpu_usable": 16, "gpus": [{"name": "NVIDIA H100 80GB HBM3"}],
           "time_utc": "2026-11-23T10:00:00"}
    _fake_run(figs / "01_worker_scaling" / "cpu-2c", cpu, ["cpu reading"])
    _fake_run(figs / "01_worker_scaling" / "h100-16c", gpu, ["gpu reading"])
    _fake_run(figs / "02_lmdb_vs_png" / "cpu-2c", cpu, ["only cpu"])
    text = readme.section(figs)
    assert "| figure | cpu-2c | h100-16c |" in text
    assert "figures/01_worker_scaling/h100-16c/throughput.png" in text
    assert text.index("cpu reading") < text.index("gpu reading")
    assert "NVIDIA H100 80GB HBM3" in text and "- **h100-16c**" in text
    block02 = text[text.index("### 02"):]
    assert "| figure | cpu-2c |" in block02 and "h100" not in block02


def test_bad_values_on_the_command_line_are_one_line(capsys, monkeypatch):
    from feedlab.errors import cli_errors

    monkeypatch.setenv("FEEDLAB_CORES", "abc")
    with pytest.raises(SystemExit) as exit_:
        with cli_errors("python -m feedlab.run"):
            machines.usable_cores()
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "FEEDLAB_CORES='abc'" in err


def test_a_cuda_spec_on_a_machine_without_cuda_is_refused(monkeypatch):
    import torch

    from feedlab.pipeline import PipelineSpec, resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="no CUDA device"):
        resolve_device("cuda")
    assert resolve_device("cuda", check=False) == "cuda"  # what a spec would mean there
    assert resolve_device("auto") == "cpu"
    assert not PipelineSpec(device="cuda").problems()  # the spec itself is fine for a GPU box


def test_dry_run_names_the_folder_of_the_planned_machine(capsys, monkeypatch):
    """--cores 16 plans for a 16-core machine: its out_dir is that machine's folder, as the header says
    (it used to name this machine's own folder)."""
    import re

    from feedlab.run import main

    monkeypatch.delenv("FEEDLAB_MACHINE", raising=False)
    monkeypatch.delenv("FEEDLAB_CORES", raising=False)
    assert main(["--dry-run", "--profile", "gpu", "--cores", "16", "--only", "01"]) == 0
    out = capsys.readouterr().out
    key = re.search(r"results under figures/<notebook>/([^/]+)/", out).group(1)
    assert key.endswith("-16c")
    assert re.search(rf"out_dir\s+figures/01_worker_scaling/{re.escape(key)}\n", out)


def test_a_fingerprint_nested_too_deeply_is_one_value_error_naming_it(tmp_path):
    """attack54 FAIL 1: machine_fingerprints over a fingerprint.json of '[' * 100000 raised RecursionError."""
    rec = tmp_path / "04_x" / "cpu-2c"
    rec.mkdir(parents=True)
    (rec / "fingerprint.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(ValueError) as err:
        machines.machine_fingerprints("04_x", tmp_path)
    assert str(err.value) == f"{rec / 'fingerprint.json'}: is not valid JSON (nested too deeply to read)"
