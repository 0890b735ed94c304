"""``feedlab.run_params``: a run's profile, folders and ``-p`` values resolved once, and the runner reads only those.
A ``-p`` that contradicts a runner option is refused in one line before anything runs; each value is typed by
the notebook's parameters cell (a path verbatim, an int an int), a wrong one names the parameter."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from feedlab import paths
from feedlab import run as R

NB04 = next(p for p in R.list_notebooks() if p.stem.startswith("04_"))


def _snapshot(d: Path) -> dict:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file()}


@pytest.fixture()
def runner(tmp_path, monkeypatch):
    """The runner with a fake papermill (it records what the kernel was given), a committed record of 04 in a
    figures/ of tmp_path, and the scratch folder there too."""
    import papermill

    from feedlab import run_record

    figs = tmp_path / "figures"
    rec = figs / "04_print_overhead" / "cpu-2c"
    rec.mkdir(parents=True)
    for name in ("04_print_overhead.executed.ipynb", "results.json", "fingerprint.json", "fig.png"):
        (rec / name).write_text(f"quick {name}")
    monkeypatch.setattr(paths, "SCRATCH_DIR", tmp_path / "runs")
    monkeypatch.setattr(paths, "FIGURES_DIR", figs)
    monkeypatch.setattr(run_record, "FIGURES_DIR", figs)
    monkeypatch.setattr(run_record, "cuda_here", lambda: False)
    monkeypatch.setenv("FEEDLAB_MACHINE", "cpu-2c")
    monkeypatch.setenv("FEEDLAB_PROFILE", "quick")
    ran: list[dict] = []

    def execute(nb, executed, parameters, **kw):
        ran.append(dict(parameters))
        out = Path(parameters["out_dir"])
        for name in ("results.json", "fingerprint.json", "fig.png"):
            (out / name).write_text(f"{parameters['profile']} {name}")
        Path(executed).write_text('{"cells": []}')

    monkeypatch.setattr(papermill, "execute_notebook", execute)
    monkeypatch.setattr(R.findings, "add_findings", lambda executed: None)
    return figs, rec, ran


def _main(capsys, *args):
    try:
        rc = R.main(["--no-data", "--only", "04", *args])
    except SystemExit as exc:
        rc = exc.code
    return rc, capsys.readouterr()


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith("python -m feedlab.run: error: "), err
    return lines[0]


def test_a_p_profile_that_contradicts_the_runners_is_refused_and_the_record_is_untouched(runner, capsys):
    figs, rec, ran = runner
    before = _snapshot(figs)
    rc, out = _main(capsys, "--profile", "quick", "-p", "profile", "smoke")
    line = _one_line(out.err)
    assert rc == 2 and "-p profile smoke contradicts --profile quick" in line
    assert ran == [] and _snapshot(figs) == before


def test_p_profile_alone_is_the_runs_profile_for_the_folder_the_gpu_refusal_and_the_kernel(runner, capsys):
    figs, rec, ran = runner
    before = _snapshot(figs)
    rc, out = _main(capsys, "-p", "profile", "gpu")   # on a machine without a GPU: refused, as --profile gpu is
    assert rc == 2 and "--profile gpu on cpu-2c, a machine without a GPU" in _one_line(out.err)
    assert ran == [] and _snapshot(figs) == before
    rc, out = _main(capsys, "-p", "profile", "smoke")   # a smoke run: the scratch folder, never figures/
    assert rc == 0, out.err
    assert [r["profile"] for r in ran] == ["smoke"] and "runs" in Path(ran[0]["out_dir"]).parts
    assert _snapshot(figs) == before
    rc, out = _main(capsys, "--profile", "smoke", "-p", "profile", "smoke")   # the same profile twice: fine
    assert rc == 0 and ran[-1]["profile"] == "smoke"


def test_dry_run_with_p_profile_plans_that_profile(capsys):
    assert R.main(["--dry-run", "--only", "04", "-p", "profile", "smoke"]) == 0
    out = capsys.readouterr().out
    assert "plan: profile smoke" in out and "repeats" in out


def test_a_path_is_verbatim_and_a_wrong_type_names_the_parameter(runner, capsys, tmp_path, monkeypatch):
    figs, rec, ran = runner
    monkeypatch.chdir(tmp_path)
    rc, out = _main(capsys, "-p", "out_dir", "yes")   # YAML made this True, and a traceback
    assert rc == 0, out.err
    assert ran[-1]["out_dir"] != str(tmp_path / "yes")   # the kernel writes a temporary beside it ...
    assert (tmp_path / "yes" / "results.json").is_file()   # ... put in place at the folder given
    rc, out = _main(capsys, "-p", "print_every", "2001-01-01")   # YAML made this a date, failed "in a cell"
    line = _one_line(out.err)
    assert rc == 2 and "print_every" in line and "whole number" in line
    rc, out = _main(capsys, "-p", "repeats", "0")   # the right type, a value the notebook refuses: before it runs
    assert rc == 2 and "04_print_overhead: repeats=0" in _one_line(out.err)
    assert len(ran) == 1


def test_parse_value_follows_the_declared_type():
    from feedlab.run_params import parse_value

    assert parse_value("out_dir", "a\nb #2", "str") == "a\nb #2"   # YAML folded the newline, dropped " #2"
    assert parse_value("model", "none", "str") == "none"
    assert parse_value("modes", "none", "list[str]") == "none"   # a mode's name, not the profile's value
    assert parse_value("out_dir", "1", "str") == "1" and parse_value("cold", "1", "bool") is True
    assert parse_value("repeats", "3", "int") == 3 and parse_value("repeats", "None", "int") is None
    assert parse_value("rate_precision", "0.05", "float") == 0.05
    assert parse_value("cold", "true", "bool") is True and parse_value("cold", "False", "bool") is False
    assert parse_value("batch_sizes", "[8, 32]", "list[int]") == [8, 32]
    assert parse_value("batch_sizes", "8", "list[int]") == 8   # one value: the notebook makes it a list of one
    assert parse_value("worker_counts", "[0, cores // 2]", "list[int]") == [0, "cores // 2"]
    assert parse_value("max_workers", "cores * 2", "int") == "cores * 2"
    for key, text, typ, words in [("print_every", "2001-01-01", "int", "whole number"),
                                  ("rate_precision", "inf", "float", "a number"),
                                  ("cold", "maybe", "bool", "true or false"),
                                  ("batch_sizes", "[8, x]", "list[int]", "'x' is not int"),
                                  ("modes", "[print, on]", "list[str]", "quote it"),
                                  ("batch_sizes", "{a: 1}", "list[int]", "a list"),
                                  ("batch_sizes", "[8, 32", "list[int]", "not valid YAML")]:
        with pytest.raises(ValueError, match=key) as err:
            parse_value(key, text, typ, "04_print_overhead")
        assert words in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_runner_options_and_their_p_twins_are_one_truth(tmp_path):
    from feedlab.run_params import resolve_run

    with pytest.raises(ValueError, match="both say where the record goes"):
        resolve_run([NB04], [("out_dir", str(tmp_path / "a"))], out_root=tmp_path / "b")
    with pytest.raises(ValueError, match="--data-only builds the embedded data sets"):
        resolve_run([NB04], [("data_root", "x")], data_only=True)
    with pytest.raises(ValueError, match="given twice"):
        resolve_run([NB04], [("repeats", "2"), ("repeats", "3")])
    rp = resolve_run([NB04], [("profile", "smoke"), ("repeats", "2"), ("out_dir", "")], out_root=tmp_path / "r")
    assert rp.profile == "smoke" and rp.params == {"repeats": 2} and rp.for_notebook == {NB04: {"repeats": 2}}
    assert rp.out_root == tmp_path / "r"


def test_a_list_item_outside_the_notebooks_choices_is_refused_before_a_cell(tmp_path):
    """Issue 47 W2: ``-p modes "[print, bogus]"`` passed the dry run and failed in cell [3]: now one line naming
    the item and the notebook's ``# list from:`` choices."""
    from feedlab.nbparams import parameter_choices
    from feedlab.run_params import resolve_run

    nb = paths.REPO_ROOT / "notebooks" / "04_print_overhead.ipynb"
    assert parameter_choices(nb)["unbuffered"] == ["0", "1"]
    for key, text, bad in (("modes", "[print, bogus]", "bogus"), ("unbuffered", "[0, 2]", "2")):
        with pytest.raises(ValueError, match=rf"-p {key} .*{bad} not among 04_print_overhead's {key} \(list from") as e:
            resolve_run([nb], [(key, text)], "smoke")
        assert "\n" not in str(e.value)
    assert resolve_run([nb], [("modes", "[none, print]")], "smoke").params["modes"] == ["none", "print"]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv, says", [
    (["--only", "04", "--limit-s", "5", "6", "7"], "--limit-s"),
    (["--only", "04", "05", "-p", "out_dir", "somewhere"], "names one folder for 2 notebooks"),
])
def test_the_dry_run_refuses_the_limits_and_the_folder_the_run_refuses(capsys, argv, says):
    """Attack 49 R09/R11: the dry run accepted three limits for one notebook, and one -p out_dir for two, which
    the real run refuses: both are checked before the dry run's plan now."""
    with pytest.raises(SystemExit) as stop:
        R.main(["--dry-run", *argv])
    assert stop.value.code == 2 and says in capsys.readouterr().err


def test_a_negative_deadline_is_refused_by_the_dry_run_naming_the_parameter(capsys):
    """attack59 F2: `-p deadline_s -5` passed the dry run and the run, every deadline of notebook 16 off."""
    try:
        rc = R.main(["--dry-run", "--profile", "smoke", "--no-data", "--only", "16", "-p", "deadline_s", "-5"])
    except SystemExit as stop:
        rc = stop.code
    got = capsys.readouterr()
    said = got.out + got.err   # the plan's row for 16: "cannot resolve: …"
    assert rc == 2 and "deadline_s=-5.0 is seconds: give a finite number > 0" in said, (rc, said[-800:])
    assert "Traceback" not in said


@pytest.mark.parametrize("text", ["no/such/set", "data/sr64\nsmoke"])
def test_a_data_root_that_is_no_folder_is_one_line_before_any_notebook_runs(text):
    """attack50 W4: `-p data_root $'data/sr64\nsmoke'` printed a plan with the newline and ran; now one line naming
    the parameter and what to do (the newline shown escaped)."""
    from feedlab.run_params import resolve_run

    with pytest.raises(ValueError) as err:
        resolve_run([next(p for p in R.list_notebooks() if p.stem.startswith("01_"))], [("data_root", text)])
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("-p data_root ") and "python -m data_prep sr" in msg, msg


@pytest.mark.parametrize("key,given,other", [("data_root", "cls", "sr"), ("cls_root", "sr", "cls")])
def test_a_set_of_the_other_kind_is_one_line_before_any_notebook_runs(tmp_path, key, given, other):
    """attack51 R03: `--only 05 -p data_root data/cls-smoke` planned (and would run) an SR notebook over a
    classification set; every notebook that takes data_root takes an SR set, cls_root a classification one: a
    built set's manifest.json says its kind, and the wrong one is refused in one line. A folder with no manifest
    (the user's own) is the notebook's to judge."""
    from feedlab.run_params import resolve_run

    takers = [p for p in R.list_notebooks() if p.stem.startswith(("06_", "13_"))]   # both keys
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "manifest.json").write_text(f'{{"kind": "{given}", "count": 4}}')
    with pytest.raises(ValueError) as err:
        resolve_run(takers, [(key, str(tmp_path / "set"))])
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"-p {key} ") and f"kind '{given}'" in msg, msg
    assert "06_decode_backends, 13_peer_loaders take" in msg and "python -m data_prep" in msg, msg
    (tmp_path / "set" / "manifest.json").write_text(f'{{"kind": "{other}", "count": 4}}')
    assert resolve_run(takers, [(key, str(tmp_path / "set"))]).params[key] == str(tmp_path / "set")
    (tmp_path / "set" / "manifest.json").unlink()
    assert resolve_run(takers, [(key, str(tmp_path / "set"))]).params[key] == str(tmp_path / "set")


@pytest.mark.parametrize("damage, says", [("fifo", "is a FIFO, not a regular file"), ("folder", "is a folder"),
                                          ("text", "is not JSON"), ("list", "holds a JSON list, not an object"),
                                          ("deep", "is not JSON (nested too deeply to read)")])
def test_a_data_roots_damaged_manifest_is_one_line_before_anything_runs_dry_run_too(tmp_path, capsys, damage,
                                                                                    says):
    """attack53 R05: a data_root whose manifest.json was a FIFO passed the plan (and the dry run), then failed in
    cell [4] of 05. A manifest.json that is there but is not a regular file, not JSON or not an object: one line
    naming it, in the dry run and the run's resolve alike (attack54 B24: one nested too deeply, a RecursionError
    traceback)."""
    import os

    from feedlab.run_params import resolve_run

    root = tmp_path / "mk2"
    root.mkdir()
    manifest = root / "manifest.json"
    if damage == "fifo":
        os.mkfifo(manifest)
    elif damage == "folder":
        manifest.mkdir()
    else:
        manifest.write_text({"text": "{not json", "deep": "[" * 100000 + "]" * 100000}.get(damage, "[1, 2]"))
    nb05 = next(p for p in R.list_notebooks() if p.stem.startswith("05_"))
    with pytest.raises(ValueError) as err:
        resolve_run([nb05], [("data_root", str(root))])
    msg = str(err.value)
    assert msg.startswith(f"-p data_root {str(root)!r}: {manifest}") and says in msg and "\n" not in msg, msg
    with pytest.raises(SystemExit) as stop:
        R.main(["--dry-run", "--only", "05", "-p", "data_root", str(root)])
    assert stop.value.code == 2 and says in capsys.readouterr().err


def test_out_dir_and_out_root_are_kept_as_given_and_a_link_is_named_or_refused(tmp_path, monkeypatch):
    """attack55 W4 (X36): `-p out_dir work/lnk2` (a link to real2) was resolved first, so the dry run said
    `out_dir work/real2` and wrote through the link the record check refuses; (X33) a link to the checkout was
    refused naming `.` and a machine path, never the link. Now the folders are kept as given (links not followed):
    a link as the record's folder is refused like the scratch route's (X16), and one that lands on the checkout
    is named with where it leads."""
    from feedlab import paths, run_record
    from feedlab.run_params import resolve_run
    from feedlab.run_record import check_destination

    monkeypatch.setattr(run_record, "machine_key", lambda: "cpu-2c")   # no fingerprint (torch's import) to wait on
    (tmp_path / "real2").mkdir()
    (tmp_path / "lnk2").symlink_to("real2")
    rp = resolve_run([NB04], [("out_dir", str(tmp_path / "lnk2"))], "smoke")
    assert rp.params["out_dir"] == str(tmp_path / "lnk2")
    with pytest.raises(ValueError) as err:
        check_destination(NB04.stem, rp.profile, rp.params, rp.out_root, planning=True)
    msg = str(err.value)
    assert "\n" not in msg and "lnk2 is a link (to real2)" in msg and "does not write through links" in msg, msg
    assert not any((tmp_path / "real2").iterdir())
    (tmp_path / "od2").symlink_to(paths.REPO_ROOT)
    for given in ([("out_dir", str(tmp_path / "od2"))], []):
        rp = resolve_run([NB04], given, "smoke", out_root=None if given else tmp_path / "od2" / "lib")
        with pytest.raises(ValueError) as err:
            check_destination(NB04.stem, rp.profile, rp.params, rp.out_root, planning=True)
        msg = str(err.value)
        assert "\n" not in msg and str(tmp_path / "od2") in msg and "(through a link: it is " in msg, msg
    assert resolve_run([NB04], [], "smoke", out_root=tmp_path / "od2").out_root == tmp_path / "od2"


def test_a_tilde_user_that_cannot_be_expanded_is_one_line_and_tilde_expands_everywhere(tmp_path, monkeypatch):
    """attack56 R65/R67/R69: `~nosuchuser9/x` as -p out_dir, --out-root or -p data_root gave a RuntimeError
    traceback (or a folder named `~nosuchuser9` in the current folder); W4 R68–R71: FEEDLAB_SCRATCH/FEEDLAB_DATA
    `~/scr` was `<cwd>/~/scr`. paths.user_path is the one reading: `~` expands to $HOME, a `~user` it cannot
    expand is one line naming where it was given."""
    from feedlab.errors import deadline
    from feedlab.run_params import resolve_run

    nb05 = next(p for p in R.list_notebooks() if p.stem.startswith("05_"))
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "d").mkdir()
    with deadline(2, "resolving ~ paths"):
        for pairs, root, where in (([("out_dir", "~nosuchuser9/x")], None, "-p out_dir"),
                                   ([], Path("~nosuchuser9"), "--out-root"),
                                   ([("data_root", "~nosuchuser9/d")], None, "-p data_root")):
            with pytest.raises(ValueError) as exc:
                resolve_run([nb05], pairs, "smoke", out_root=root)
            assert str(exc.value).startswith(f"{where} '~nosuchuser9") and "no user nosuchuser9" in str(exc.value) \
                and "\n" not in str(exc.value), exc.value
        rp = resolve_run([nb05], [("out_dir", "~/x"), ("data_root", "~/d")], "smoke")
        assert rp.params["out_dir"] == str(tmp_path / "x") and rp.params["data_root"] == str((tmp_path / "d").resolve())
        assert resolve_run([nb05], [], "smoke", out_root=Path("~/r")).out_root == tmp_path / "r"
        # the environment's folders read the same way, and a ~ they cannot expand is one line where a run starts
        monkeypatch.setattr(paths, "_ENV_PROBLEMS", {})
        monkeypatch.setenv("FEEDLAB_SCRATCH", "~/scr")
        assert paths._env_dir("FEEDLAB_SCRATCH", tmp_path / "runs") == (tmp_path / "scr").resolve()
        monkeypatch.setenv("FEEDLAB_DATA", "~nosuchuser9/d")
        paths._env_dir("FEEDLAB_DATA", tmp_path / "data")
        with pytest.raises(ValueError, match=r"^FEEDLAB_DATA '~nosuchuser9/d': no user nosuchuser9 .*full path$"):
            resolve_run([nb05], [], "smoke")
        with pytest.raises(ValueError, match=r"^FEEDLAB_DATA '~nosuchuser9/d'"):
            paths.check_scratch()


def test_the_dry_runs_header_and_out_dir_row_name_the_folder_the_run_writes(capsys, monkeypatch):
    """attack59 W2: `-p out_dir figures/04_print_overhead/<key>` under quick showed `out_dir runs/quick/…` under a
    header naming figures/; attack58 W7: a smoke plan's header said figures/ while its rows said runs/smoke/."""
    import re

    monkeypatch.delenv("FEEDLAB_SCRATCH", raising=False)
    assert R.main(["--dry-run", "--profile", "smoke", "--only", "04"]) == 0
    out = capsys.readouterr().out
    assert "results under runs/smoke/<notebook>/ (nothing is run)" in out, out[:300]
    from feedlab.run_plan import planned_machine_key

    key = planned_machine_key()
    mine = f"figures/04_print_overhead/{key}"
    assert R.main(["--dry-run", "--profile", "quick", "--only", "04", "-p", "out_dir", mine]) == 0
    out = capsys.readouterr().out
    assert f"results under figures/<notebook>/{key}/" in out and re.search(rf"out_dir\s+{re.escape(mine)}\n", out), out
