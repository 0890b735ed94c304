"""List and mapping parameters survive papermill's -p (strings) and -y (YAML), in every notebook.

papermill's ``-p`` hands a notebook ``"[8, 32]"`` as a string; ``feedlab.profiles.resolve``
parses it. Each notebook is parameterized by papermill itself (``prepare_only``), then its
parameters cell, papermill's injected cell and the cell that calls ``resolve`` are run here.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import nbformat
import pytest
import yaml

from feedlab.profiles import ParameterError, profile_values, resolve
from feedlab.run import list_notebooks

NOTEBOOKS = list_notebooks()


def _list_params(path) -> dict[str, object]:
    """Collection-typed parameters of a notebook -> a smoke-profile value for each."""
    import papermill as pm

    name = path.stem
    values = profile_values(name, "smoke")
    out = {}
    for pname, p in pm.inspect_notebook(str(path)).items():
        if p["inferred_type_name"].startswith(("list", "dict")):
            value = values.get(pname)
            if value is None:
                value = profile_values(name, "quick").get(pname) or ["png"]
            if isinstance(value, (list, dict)):  # a list parameter may also take a word ("all")
                out[pname] = value
    return out


def _resolved(executed_path) -> object:
    """Run the parameters cell, the injected cell and the resolve cell; return ``P``."""
    nb = nbformat.read(executed_path, as_version=4)
    tags = [c.metadata.get("tags", []) for c in nb.cells]
    start = next(i for i, t in enumerate(tags) if "parameters" in t)
    ns: dict = {"display": lambda *a, **k: None}
    for cell in nb.cells[start:]:
        if cell.cell_type != "code":
            continue
        exec(compile(cell.source, str(executed_path), "exec"), ns)  # noqa: S102 - our own notebook
        if "P" in ns and "resolve(" in cell.source:
            return ns["P"]
    raise AssertionError(f"{executed_path}: no cell calls resolve()")


def _flow(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_list_parameters_from_p_strings_and_y_yaml(path, tmp_path):
    import papermill as pm
    from papermill.cli import _resolve_type

    params = _list_params(path)
    if not params:
        pytest.skip(f"{path.stem} has no list parameters")
    names = sorted(params)
    as_p = {k: _resolve_type(_flow(params[k])) for k in names[::2]}   # what `-p k "[..]"` gives
    as_y = yaml.safe_load(yaml.safe_dump({k: params[k] for k in names[1::2]}))  # what `-y` gives
    assert all(isinstance(v, str) for v in as_p.values())
    out = tmp_path / "prepared.ipynb"
    pm.execute_notebook(str(path), str(out), parameters={"profile": "smoke", "out_dir": str(tmp_path / "o"),
                                                         **as_p, **as_y},
                        prepare_only=True, progress_bar=False)
    P = _resolved(out)
    want = resolve(path.stem, "smoke", _create_out_dir=False, **params)  # worker counts expand for this machine
    for k in names:
        assert getattr(P, k) == getattr(want, k), f"{path.stem}: {k} came back as {getattr(P, k)!r}"
        assert isinstance(getattr(P, k), (list, dict)), f"{path.stem}: {k} is {getattr(P, k)!r}"


def test_unparsable_list_names_the_parameter():
    with pytest.raises(ParameterError, match=r"parameter input_sizes='\[24, 48'") as err:
        resolve("03_pinned_memory_by_input_size", "smoke", input_sizes="[24, 48")
    assert "\n" not in str(err.value)
    with pytest.raises(ParameterError, match="should be a list"):
        resolve("03_pinned_memory_by_input_size", "smoke", input_sizes="{a: 1}")


def test_scalars_where_lists_expected_become_lists_and_strings_stay_strings():
    P = resolve("03_pinned_memory_by_input_size", "smoke", batch_sizes=8, transfer_sizes="4KB",
                input_sizes="[24, 48]")
    assert P.batch_sizes == [8] and P.transfer_sizes == ["4KB"] and P.input_sizes == [24, 48]
    assert resolve("01_worker_scaling", "smoke", model="srcnn").model == "srcnn"
    assert resolve("10_doctor", "quick", alt_formats="[lmdb, npy]").alt_formats == ["lmdb", "npy"]


def test_papermill_cli_p_list(tmp_path):
    """The command from the issue, through papermill's own command line (prepare only)."""
    nb = next(p for p in NOTEBOOKS if p.stem.startswith("03_"))
    out = tmp_path / "out.ipynb"
    subprocess.run([sys.executable, "-m", "papermill", str(nb), str(out), "--prepare-only",
                    "-p", "profile", "smoke", "-p", "input_sizes", "[24, 48]",
                    "-y", "batch_sizes: [8, 16]"], check=True, capture_output=True)
    P = _resolved(out)
    assert P.input_sizes == [24, 48] and P.batch_sizes == [8, 16]


def test_the_runner_types_parameters_as_papermill_infers_them():
    """The runner types each ``-p`` value by ``nbparams.parameter_types`` (read without importing papermill):
    the same types ``papermill.inspect_notebook`` infers, for every notebook."""
    import papermill as pm

    from feedlab.nbparams import parameter_types

    for path in NOTEBOOKS:
        inferred = {k: p["inferred_type_name"] for k, p in pm.inspect_notebook(str(path)).items()}
        assert parameter_types(path) == inferred, path.stem


@pytest.mark.parametrize("key", ["print_every", "batches"])
def test_a_count_of_zero_is_refused_when_the_profile_resolves_not_in_a_cell(key):
    """attack52 R11: `feedlab.run --only 04 -p print_every 0` ran the notebook and failed "in cell [3]" 16 s later;
    `--dry-run` showed it as fine. Counting parameters are checked when the profile resolves (the plan, the run)."""
    from feedlab.profiles import check_values

    with pytest.raises(ValueError, match=f"04_print_overhead: {key}=0: each value must be an integer >= 1"):
        check_values("04_print_overhead", {key: 0})
    check_values("04_print_overhead", {key: 1})


@pytest.mark.parametrize("key, value, zero_ok", [
    ("deadline_s", -5.0, False), ("deadline_s", 0.0, False), ("item_s", 1e300, True), ("step_s", -1.0, True),
    ("window_s", float("nan"), False), ("tjbench_seconds", float("inf"), False), ("budget_s", "5", True),
])
def test_a_seconds_parameter_out_of_range_is_refused_when_the_profile_resolves(key, value, zero_ok):
    """attack59 F2/W1: `-p deadline_s -5` silently turned notebook 16's every deadline off, `-p item_s 1e300` and
    `-p step_s -1` failed in a cell naming no parameter. A seconds parameter is a finite number > 0 (>= 0 where 0
    means something) and at most errors.MAX_SECONDS, checked when the profile resolves (the plan, the run)."""
    from feedlab.profiles import check_values

    want = ">= 0" if zero_ok else "> 0"
    with pytest.raises(ValueError, match=rf"^16_tune: {key}=.* is seconds: give a finite number {want} and at most 1e"):
        check_values("16_tune", {key: value})


def test_a_seconds_parameter_in_range_passes_and_zero_only_where_it_means_something():
    from feedlab.profiles import check_values

    check_values("16_tune", {"deadline_s": 1e9, "window_s": 0.1, "budget_s": 0, "min_window_s": 0.0,
                             "step_s": 0, "tune_budget_s": None, "batch_size": 8})
    with pytest.raises(ValueError, match="window_s=0"):
        check_values("16_tune", {"window_s": 0})


def test_every_profile_value_of_a_seconds_parameter_is_in_range():
    """The profiles themselves pass the check every notebook's resolve makes."""
    from feedlab.profiles import check_seconds, load_profiles

    table = load_profiles()
    for nb, block in table.items():
        for profile, values in (block or {}).items() if isinstance(block, dict) else []:
            if isinstance(values, dict):
                check_seconds(f"{nb}/{profile}", values)


def test_a_notebook_source_that_is_not_json_is_one_line_naming_the_file(tmp_path):
    """attack57 J20: a source notebook broken by a bad merge gave "not valid JSON: Unterminated string…" naming no
    file (a bare json.loads); its readers go through files.load_json, and a value that is no object is named."""
    from feedlab.nbparams import notebook_parameters, parameter_choices, parameter_types

    nb = tmp_path / "01_x.ipynb"
    for text, words in (('{"cells": [{"source": "x', "notebook is not valid JSON"), ("[1]", "holds list")):
        nb.write_text(text)
        for read in (notebook_parameters, parameter_choices, parameter_types):
            with pytest.raises(ValueError) as exc:
                read(nb)
            assert str(exc.value).startswith(f"{nb}: ") and words in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("cells, what", [([], "no code cell tagged parameters"),
                                         (["p", "p"], "2 code cells tagged parameters")])
def test_a_notebook_without_exactly_one_parameters_cell_is_refused_before_it_runs(tmp_path, cells, what):
    """attack58 W4: a source notebook with no `parameters` cell passed the dry run; the run failed with papermill's
    "Passed unknown parameter" lines. The runner's parameter resolution (the dry run's too) refuses it."""
    from feedlab.nbparams import parameters_cell_problem
    from feedlab.run_params import resolve_run

    nb = tmp_path / "04_x.ipynb"
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "source": "x = 1", "outputs": [],
                                         "metadata": {"tags": ["parameters"]}} for _ in cells],
                              "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert what in parameters_cell_problem(nb)
    with pytest.raises(ValueError, match=rf"^{nb}: {what} \(a notebook has exactly one"):
        resolve_run([nb], [], "smoke")
    assert all(parameters_cell_problem(p) == "" for p in NOTEBOOKS)


@pytest.mark.parametrize("values, says", [({"latency_ms": -5.0}, "latency_ms=-5.0 is milliseconds: give a finite number >= 0"),
                                          ({"slow_factor": 1e300}, "slow_factor=1e+300 is a factor: give a finite number > 0"),
                                          ({"cow_limit_mb": 0}, "cow_limit_mb=0 is MiB: give a finite number > 0"),
                                          ({"item_s": 1e6, "slow_factor": 1e4}, "is a sleep of 1e+10 s")])
def test_a_milliseconds_mib_or_factor_parameter_out_of_range_is_refused_when_the_profile_resolves(values, says):
    """attack60 E1/E2: `-p latency_ms -5` (16) and `-p slow_factor 1e300` (12) passed the plan and failed in a cell
    ("sleep length must be non-negative", an OverflowError in a worker) naming no parameter."""
    from feedlab.profiles import check_values

    with pytest.raises(ValueError, match=re.escape(says)):
        check_values("12_beyond", values)
    check_values("12_beyond", {"latency_ms": 0.0, "slow_factor": 4.0, "item_s": 0.002, "prefetch_factors": [1, 2]})


def test_a_half_edited_parameters_cell_or_a_string_nbformat_is_one_line_before_it_runs(tmp_path):
    """attack60 N3: a parameters cell `batches = (` gave the dry run a 28-line SyntaxError traceback; N1:
    `"nbformat": "4"` passed the dry run and failed as "Unsupported nbformat version 4"."""
    from feedlab.nbparams import notebook_parameters, parameter_types, parameters_cell_problem

    nb = tmp_path / "04_x.ipynb"
    cell = {"cell_type": "code", "source": "profile: str = ''\nbatches = (\n", "outputs": [],
            "metadata": {"tags": ["parameters"]}}
    nb.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    for read in (notebook_parameters, parameter_types):
        with pytest.raises(ValueError, match=r"its parameters cell is not valid Python \(line 2: ") as e:
            read(nb)
        assert str(e.value).startswith(f"{nb}: ") and "\n" not in str(e.value)
    nb.write_text(json.dumps({"cells": [dict(cell, source="x = 1")], "metadata": {}, "nbformat": "4",
                              "nbformat_minor": 5}))
    assert "its nbformat is '4', not the number 4" in parameters_cell_problem(nb)


@pytest.mark.parametrize("source, says", [(["x = 1\n", None], "its parameters cell's source is not text"),
                                          ("x = 1\nextra = {[1]: 2}\n", None)])
def test_a_parameters_cell_of_odd_shape_is_one_line_or_read_as_text_never_a_traceback(tmp_path, source, says):
    """attack61 N3: a source list holding a null was a TypeError traceback; N4: `extra = {[1]: 2}` (valid Python,
    not a literal) made ast.literal_eval raise TypeError."""
    from feedlab.nbparams import notebook_parameters

    nb = tmp_path / "04_x.ipynb"
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "source": source, "outputs": [],
                                         "metadata": {"tags": ["parameters"]}}], "metadata": {}, "nbformat": 4,
                              "nbformat_minor": 5}))
    if says:
        with pytest.raises(ValueError, match=re.escape(says)):
            notebook_parameters(nb)
    else:
        assert notebook_parameters(nb) == {"x": 1, "extra": "{[1]: 2}"}


def test_a_count_too_large_for_the_machine_or_a_sample_too_many_mib_is_refused_when_the_profile_resolves():
    """attack61 P4: `-p batch_size 99999999999999999999` failed in cell [4] ("Overflow when unpacking long long");
    W2c: `-p large_mib 1e300` failed in a cell ("Maximum allowed dimension exceeded")."""
    from feedlab.profiles import check_values

    with pytest.raises(ValueError, match=r"batch_size=99999999999999999999: each value must be an integer >= 1 and"):
        check_values("04_print_overhead", {"batch_size": 99999999999999999999})
    with pytest.raises(ValueError, match=r"large_mib=1e\+300 is MiB: give a finite number > 0 and at most 1e\+06"):
        check_values("16_tune", {"large_mib": 1e300})
    check_values("16_tune", {"large_mib": 2.0, "batch_size": 64})


def test_an_integer_past_a_long_long_or_a_notebook_metadata_of_the_wrong_shape_is_refused_before_it_runs(tmp_path):
    """attack61 Y2: profiles.yaml `samples: 5120000000000000000000` passed the plan; N5: a source notebook whose
    metadata is a list failed the run as "pop expected at most 1 argument", its nbformat_minor -1 passed the plan."""
    from feedlab.nbparams import parameters_cell_problem
    from feedlab.profiles import check_values

    with pytest.raises(ValueError, match=r"samples=5120000000000000000000: an integer this large overflows"):
        check_values("16_tune", {"samples": 5120000000000000000000})
    nb = tmp_path / "04_x.ipynb"
    cell = {"cell_type": "code", "source": "x = 1", "outputs": [], "metadata": {"tags": ["parameters"]}}
    for top, field in (({"metadata": []}, "metadata"), ({"metadata": {}, "nbformat_minor": -1}, "nbformat_minor")):
        nb.write_text(json.dumps({"cells": [cell], "nbformat": 4, "nbformat_minor": 5, **top}))
        assert f"its {field} is " in parameters_cell_problem(nb)
