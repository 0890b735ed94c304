"""The findings cell an executed notebook leads with, made from the run's own outputs."""

from __future__ import annotations

import json

import pytest

from feedlab import findings


def _nb(reading_out: str, claims_out: str = "[reproduced] c1: ...") -> dict:
    def code(src, text=None):
        outs = [] if text is None else [{"output_type": "stream", "name": "stdout", "text": text}]
        return {"cell_type": "code", "metadata": {}, "source": src, "outputs": outs, "execution_count": 1}
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": "# 99 · Is X faster?\n\n**Question.** ..."},
        code("profile = ''", None),
        code('save_figure(fig, P.out_dir, "zeta")\nsave_figure(fig, P.out_dir, "alpha")', "warning: busy\n"),
        {"cell_type": "markdown", "metadata": {}, "source": "## Reading\n\nComputed from this run."},
        code("print(...)", reading_out),
        code("verdicts = report_claims('99', payload, P.out_dir)", claims_out),
        code("record_results(payload, P.out_dir)", "{}"),
    ]}


def _write(tmp_path, nb, payload, fp=None, figs=("zeta", "alpha", "machines_x")):
    path = tmp_path / "99_x.executed.ipynb"
    path.write_text(json.dumps(nb))
    (tmp_path / "results.json").write_text(json.dumps(payload))
    if fp is not None:
        (tmp_path / "fingerprint.json").write_text(json.dumps(fp))
    for f in figs:
        (tmp_path / f"{f}.png").write_bytes(b"png")
    return path


def test_readings_are_what_the_reading_cells_printed_without_warnings_or_claim_lines():
    nb = _nb("LMDB 5.3× PNG at batch 128.\nwarning: the machine was busy\n\nSecond line.\n")
    assert findings.reading_lines(nb) == ["LMDB 5.3× PNG at batch 128.", "Second line."]


def test_findings_cell_leads_and_is_replaced_not_duplicated(tmp_path, monkeypatch):
    monkeypatch.setenv("FEEDLAB_MACHINE", "cpu-2c")
    payload = {"profile": "quick", "verdicts": {"c1": {"status": "partly", "ours": "1.3× | 2.0×"}}}
    path = _write(tmp_path, _nb("Fastest: lmdb.\n"), payload, fp={"other_load": {"busy": False}})
    assert findings.add_findings(path)
    assert findings.add_findings(path)  # run again: still one findings cell
    nb = json.loads(path.read_text())
    tagged = [c for c in nb["cells"] if findings.TAG in c["metadata"].get("tags", [])]
    assert len(tagged) == 1 and nb["cells"][0] is not None and findings.TAG in nb["cells"][0]["metadata"]["tags"]
    md = "".join(nb["cells"][0]["source"])
    assert md.startswith("## Findings of this run: 99 · Is X faster?")
    assert "- Fastest: lmdb." in md and "**cpu-2c**" in md and "**quick**" in md
    assert "| c1 | partly | 1.3× \\| 2.0× |" in md              # a table cell cannot break the table
    assert "[zeta](zeta.png), [alpha](alpha.png)" in md          # in drawing order; comparisons left out
    assert "machines_x" not in md and "Smoke run" not in md and "busy" not in md
    assert len(nb["cells"]) == 8


def test_smoke_and_busy_runs_say_so(tmp_path):
    fp = {"other_load": {"busy": True, "busiest_window": {"other_fraction": 0.45}}}
    path = _write(tmp_path, _nb("x\n"), {"profile": "smoke"}, fp=fp, figs=())
    findings.add_findings(path)
    md = "".join(json.loads(path.read_text())["cells"][0]["source"])
    assert "**Smoke run**" in md and "not findings" in md
    assert "busy with other work during this run (up to 45% of the cores)" in md
    assert "Figures" not in md


def test_long_readings_are_cut_with_a_pointer(tmp_path):
    nb = _nb("".join(f"line {i}\n" for i in range(30)))
    md = findings.findings_markdown(nb, {"profile": "quick"}, None, tmp_path)
    assert "- line 11" in md and "- line 12" not in md and "18 more lines in the Reading section" in md


def test_no_results_changes_nothing_and_the_cli_says_why(tmp_path, capsys):
    path = tmp_path / "a.executed.ipynb"
    path.write_text(json.dumps(_nb("x\n")))
    before = path.read_text()
    assert findings.add_findings(path) is False and path.read_text() == before
    assert findings.main([str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no results.json" in err[0]
    assert findings.main([str(tmp_path / "missing.ipynb")]) == 2



@pytest.mark.parametrize("name", ["ds.py", "results.json", "README"])
def test_a_file_that_is_no_notebook_is_named_as_such_in_one_line(tmp_path, capsys, name):
    """attack51 N06: `python -m feedlab.findings work/s/ds.py` said "no results.json beside it; run the notebook
    first": a script is not an executed notebook, even with a record beside it; the line says so and what to give."""
    path = tmp_path / name
    (tmp_path / "results.json").write_text(json.dumps({"profile": "quick"}))
    if name != "results.json":
        path.write_text("import torch\n")
    before = path.read_text()
    assert findings.main([str(path)]) == 2 and path.read_text() == before
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{path}: not an executed notebook (") and ".executed.ipynb" in err[0]

def test_tables_are_rounded_and_captioned():
    import pandas as pd

    from feedlab.results import summarize

    df = pd.DataFrame({"format": ["png", "png", "lmdb"], "value": [1.234567, 2.345678, 9.87654321]})
    s = summarize(df, ["format"])
    assert s.attrs["caption"].startswith("Per format: the median over n repeats")
    with pd.option_context("display.precision", 3):
        html = findings.table_html(s)
    assert html.startswith("<p><b>Per format: the median") and "9.877" in html and "9.87654" not in html
    assert not findings.table_html(pd.DataFrame({"a": [1]})).startswith("<p>")  # no caption: none shown
    assert findings.notebook_display() is False  # outside a kernel: nothing registered, no error
    assert pd.get_option("display.precision") == 3
    pd.reset_option("display.precision")


def test_committed_findings_are_refreshed_by_todays_rules(tmp_path):
    """A committed record's findings cell states its readings and verdicts as the README does (the reporting
    wing re-judges them from the record): a busy run's timing claim reads not tested fairly, never the
    verdict the notebook printed when it ran."""
    from feedlab.report import readme

    folder = tmp_path / "04_print_overhead" / "cpu-2c"
    folder.mkdir(parents=True)
    nb = _nb("[reproduced] 004-print-75x: A print() made each batch 75× slower. Ours: 40×.\nplain reading.\n")
    (folder / "04_print_overhead.executed.ipynb").write_text(json.dumps(nb))
    (folder / "results.json").write_text(json.dumps({"per_sink": {"file": {"print_factor": 40.0}}}))
    busy = {"cpu_usable": 2, "gpus": [], "other_load": {"whole_run": {"available": True, "other_fraction": 0.5},
                                                        "busy": True}}
    (folder / "fingerprint.json").write_text(json.dumps(busy))
    assert readme.refresh_findings(tmp_path) == [folder / "04_print_overhead.executed.ipynb"]
    cell = "".join(json.loads((folder / "04_print_overhead.executed.ipynb").read_text())["cells"][0]["source"])
    assert "[not tested fairly here: the machine was busy" in cell and "[reproduced] 004-print-75x" not in cell
    assert "plain reading." in cell and "| 004-print-75x | not tested fairly here |" in cell
    assert readme.refresh_findings(tmp_path) == []   # the same records: nothing changes


def test_a_run_with_no_load_record_is_not_called_busy_nor_quiet():
    md = findings.findings_markdown(_nb("x\n"), {"profile": "quick"}, {"cpu_usable": 2}, __import__("pathlib").Path("."))
    assert "whether the machine was busy is not known" in md and "was busy with other work" not in md


@pytest.mark.parametrize("damaged", ["results.json", "fingerprint.json", "99_x.executed.ipynb"])
def test_a_damaged_record_or_notebook_is_one_line_naming_the_file(tmp_path, capsys, damaged):
    """attack52 B05/B04: a results.json cut short gave a 22-line JSONDecodeError traceback (fingerprint.json the
    same), and a notebook that is not JSON beside a good results.json read "no results.json beside it" (false):
    each is one line naming the file that is damaged, rc 2, and nothing is rewritten."""
    path = tmp_path / "99_x.executed.ipynb"
    path.write_text(json.dumps(_nb("x\n")))
    (tmp_path / "results.json").write_text(json.dumps({"profile": "quick"}))
    (tmp_path / "fingerprint.json").write_text(json.dumps({"cpu_logical": 2}))
    bad = tmp_path / damaged
    bad.write_text(bad.read_text()[:9])
    before = path.read_text()
    assert findings.main([str(path)]) == 2 and path.read_text() == before
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{bad}: ") and "not valid JSON" in err[0] and "Traceback" not in err[0]


def test_json_that_is_no_notebook_beside_its_results_is_said_so(tmp_path, capsys):
    path = tmp_path / "99_x.executed.ipynb"
    path.write_text(json.dumps({"cells": "no"}))
    (tmp_path / "results.json").write_text(json.dumps({"profile": "quick"}))
    assert findings.main([str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a notebook" in err[0] and "no results.json" not in err[0]


@pytest.mark.parametrize("damage", ["results_list", "fingerprint_str", "metadata_list", "verdicts_list"])
def test_json_of_the_wrong_shape_is_one_line_and_the_next_file_still_runs(tmp_path, capsys, damage):
    """attack53 B01-B04: a results.json of [], a fingerprint.json of "x", a cell whose metadata is a list, verdicts
    as a list: each an AttributeError traceback that also stopped the files after it on the command line."""
    bad_dir, good_dir = tmp_path / "bad", tmp_path / "good"
    paths = []
    for d in (bad_dir, good_dir):
        d.mkdir()
        nb = _nb("x\n")
        payload = {"profile": "quick"}
        fp = {"cpu_logical": 2}
        if d is bad_dir:
            if damage == "results_list":
                payload = []
            elif damage == "fingerprint_str":
                fp = "x"
            elif damage == "metadata_list":
                nb["cells"][0]["metadata"] = []
            else:
                payload["verdicts"] = ["c1"]
        (d / "results.json").write_text(json.dumps(payload))
        (d / "fingerprint.json").write_text(json.dumps(fp))
        path = d / "99_x.executed.ipynb"
        path.write_text(json.dumps(nb))
        paths.append(path)
    rc = findings.main([str(p) for p in paths])
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 1
    assert TAG_IN(paths[1])                                                  # the good one after it was done
    # a list of verdicts is named too (attack54 W1: it was taken silently, the claims table gone)
    assert rc == 2 and err.startswith(str(paths[0] if damage == "metadata_list" else bad_dir))


def TAG_IN(path) -> bool:
    return any(findings.TAG in (c.get("metadata", {}).get("tags") or []) for c in json.loads(path.read_text())["cells"])


def test_a_path_that_is_there_but_no_file_is_named_for_what_it_is(tmp_path, capsys):
    """attack53 B05: a FIFO named as the notebook read 'no such notebook', though it exists. A FIFO, a folder and
    a broken link are each named; a missing path stays 'no such notebook'. Nothing is opened (a FIFO never hangs)."""
    import os

    from feedlab.findings import main

    os.mkfifo(tmp_path / "fifo.executed.ipynb")
    (tmp_path / "dir.executed.ipynb").mkdir()
    (tmp_path / "gone.executed.ipynb").symlink_to(tmp_path / "nowhere")
    names = ["fifo", "dir", "gone", "missing"]
    assert main([str(tmp_path / f"{n}.executed.ipynb") for n in names]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 4, lines
    assert lines[0].endswith("fifo.executed.ipynb: is a FIFO, not a notebook file; give the *.executed.ipynb itself")
    assert lines[1].endswith("dir.executed.ipynb: is a folder, not a notebook file; give the *.executed.ipynb itself")
    assert "gone.executed.ipynb: is a link that leads nowhere, not a notebook file" in lines[2]
    assert lines[3].endswith("missing.executed.ipynb: no such notebook")


def _record(tmp_path, payload, fp=None):
    path = tmp_path / "99_x.executed.ipynb"
    path.write_text(json.dumps(_nb("x\n")))
    (tmp_path / "results.json").write_text(payload if isinstance(payload, str) else json.dumps(payload))
    if fp is not None:
        (tmp_path / "fingerprint.json").write_text(fp)
    return path


@pytest.mark.parametrize("where", ["results.json", "fingerprint.json", "99_x.executed.ipynb"])
def test_json_nested_too_deeply_is_one_line_naming_the_file(tmp_path, capsys, where):
    """attack54 B22: '[' * 100000 raised RecursionError (no ValueError) and escaped as a 25-line traceback."""
    path = _record(tmp_path, {"profile": "quick"}, json.dumps({"cpu_logical": 2}))
    deep = "[" * 100000 + "]" * 100000
    (tmp_path / where).write_text(deep)
    assert findings.main([str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{tmp_path / where}: ") and "nested too deeply" in err[0], err


@pytest.mark.parametrize("payload, word", [({"profile": ["smoke"]}, '"profile" holds list'),
                                           ({"profile": {"a": 1}}, '"profile" holds dict'),
                                           ({"profile": "quick", "verdicts": {"a": [1]}}, "'a' holds list"),
                                           ({"profile": "quick", "verdicts": {"b": None}}, "'b' holds NoneType"),
                                           ({"profile": "quick", "verdicts": {"c": {"x": 1}}},
                                            "'c' holds an object without a status"),
                                           ({"profile": "quick", "verdicts": {"d": {"status": ["ok"]}}},
                                            "'d' holds a status of list")])
def test_a_results_field_of_the_wrong_shape_is_named_not_printed(tmp_path, capsys, payload, word):
    """attack54 W1 (B17): a profile of ["smoke"] was printed as `Profile **['smoke']**`, and verdicts that are not
    claims vanished with the claims table, rc 0: now one line naming results.json and the field; nothing rewritten."""
    path = _record(tmp_path, payload)
    before = path.read_text()
    assert findings.main([str(path)]) == 2 and path.read_text() == before
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{tmp_path / 'results.json'}: ") and word in err[0], err


def test_notebook_13s_ratio_verdicts_are_kept_out_of_the_claims_table(tmp_path):
    """13 keeps its ratios' verdicts beside the claims: they are not claims, and not an error."""
    path = _record(tmp_path, {"profile": "quick", "verdicts": {"sr": {"word": "missed", "ratio": 0.8},
                                                               "c1": {"status": "reproduced", "ours": "2x"}}})
    assert findings.add_findings(path)
    md = "".join(json.loads(path.read_text())["cells"][0]["source"])
    assert "| c1 | reproduced | 2x |" in md and "| sr |" not in md


@pytest.mark.parametrize("kind, word", [("fifo", "a FIFO"), ("dir", "a folder")])
@pytest.mark.parametrize("name", ["results.json", "fingerprint.json"])
def test_a_record_that_is_no_regular_file_is_named_for_what_it_is(tmp_path, capsys, kind, word, name):
    """attack54 W2 (B18/B19): results.json a FIFO read "no results.json beside it"; fingerprint.json a folder was
    ignored and the machine named after the folder. Each is one line naming it and what it is, rc 2; nothing hangs."""
    import os

    path = _record(tmp_path, {"profile": "quick"})
    before = path.read_text()
    target = tmp_path / name
    target.unlink(missing_ok=True)
    os.mkfifo(target) if kind == "fifo" else target.mkdir()
    assert findings.main([str(path)]) == 2 and path.read_text() == before
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{target}: ") and f"is {word}, not a regular file" in err[0], err


@pytest.mark.parametrize("fp, word", [({"gpus": [1]}, '"gpus" entry 0 holds int, not an object'),
                                      ({"gpus": "x"}, '"gpus" holds str'),
                                      ({"gpus": [{"name": ["x"]}]}, '"gpus" entry 0\'s "name" holds list'),
                                      ({"other_load": [1]}, '"other_load" holds list, not an object'),
                                      ({"cpu_usable": {"a": 1}}, '"cpu_usable" holds dict'),
                                      ({"cpu_logical": True}, '"cpu_logical" holds bool'),
                                      ({"cpu_usable": 0}, '"cpu_usable" holds 0')])
def test_a_fingerprint_field_of_the_wrong_shape_names_the_file_and_the_field(tmp_path, capsys, fp, word):
    """attack55 W1 (B36, B37, B46): gpus [1], other_load [1], a GPU name that is a list gave "its results.json or
    fingerprint.json is not shaped …" with a Python error; B39: cpu_usable {"a": 1} was taken silently (rc 0, the
    machine printed as cpu-{'a': 1}c). Now one line naming fingerprint.json and the field; nothing rewritten."""
    path = _write(tmp_path, _nb("x\n"), {"profile": "quick"}, dict({"cpu_logical": 2, "gpus": []}, **fp))
    before = path.read_text()
    assert findings.main([str(path)]) == 2 and path.read_text() == before
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{tmp_path / 'fingerprint.json'}: ") and word in err[0], err
    assert "Error" not in err[0]


def test_a_fingerprint_as_a_run_writes_it_passes_the_shape_check(tmp_path):
    fp = {"cpu_logical": 16, "cpu_usable": 16, "gpus": [{"name": "NVIDIA H100 80GB HBM3"}], "other_load": None}
    path = _write(tmp_path, _nb("x\n"), {"profile": "quick"}, fp)
    assert findings.main([str(path)]) == 0 and TAG_IN(path)


@pytest.mark.parametrize("cells, word", [(5, "cells is int"), ({"a": 1}, "cells is dict"),
                                         ([{"cell_type": "code"}, 3], "cells holds int")])
def test_cells_of_the_wrong_shape_are_one_line_naming_the_file(tmp_path, cells, word):
    """attack56 B59: `"cells": 5` made figure_names a TypeError traceback (via report.readme's key figure)."""
    folder = tmp_path / "99_x" / "cpu-2c"
    folder.mkdir(parents=True)
    (folder / "alpha.png").write_bytes(b"png")
    nb = {**_nb("X is 2.0x faster\n"), "cells": cells}
    where = str(folder / "99_x.executed.ipynb")
    for call in (lambda: findings.figure_names(nb, folder), lambda: findings.reading_lines(nb, where)):
        with pytest.raises(ValueError) as exc:
            call()
        assert str(exc.value).startswith(f"{where}: {word}") and "\n" not in str(exc.value)
    assert findings.figure_names({"cells": []}, folder) == ["alpha"] and findings.reading_lines({}) == []
    odd = _nb("X is 2.0x faster\n")
    odd["cells"][4]["outputs"] = [7, {"output_type": "stream", "name": "stdout", "text": "X is 2.0x faster\n"}]
    odd["cells"][2]["outputs"] = 5
    assert findings.reading_lines(odd) == ["X is 2.0x faster"]


def test_a_cell_of_the_wrong_shape_is_named_never_blamed_on_the_records(tmp_path, capsys):
    """attack58 K12: `python -m feedlab.findings` on a notebook with a cell whose source is 5 said "its
    results.json or fingerprint.json is not shaped as a run records it"; the cell is named, in one line."""
    nb = _nb("X is 2.0x faster\n")
    nb["cells"][1]["source"] = 5
    path = _write(tmp_path, nb, {"profile": "quick"})
    assert findings.main([str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{path}: cell 1's source holds int") and "results.json" not in err and "\n" not in err
