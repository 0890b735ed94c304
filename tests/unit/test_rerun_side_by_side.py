"""feedlab.report.rerun: an earlier commit's record beside today's, judged by the same claims."""

import json

import pytest

from feedlab.report import rerun
from feedlab.report.claims import claims_for


def test_side_by_side_marks_a_changed_verdict(tmp_path, monkeypatch):
    nb = "01_worker_scaling"
    now = tmp_path / "figs" / nb / "cpu-2c"
    now.mkdir(parents=True)
    (now / "results.json").write_text(json.dumps({"profile": "quick"}))
    (now / "fingerprint.json").write_text(json.dumps({"git": {"commit": "b" * 40}, "time_utc": "2026-11-26T10:00",
                                                      "other_load": {"whole_run": {"other_fraction": 0.004}}}))
    old_files = {f"figures/{nb}/cpu-2c/results.json": json.dumps({"profile": "quick"}).encode(),
                 f"figures/{nb}/cpu-2c/fingerprint.json": json.dumps({"git": {"commit": "a" * 40}}).encode(),
                 f"figures/{nb}/cpu-2c/{nb}.executed.ipynb":
                     json.dumps({"metadata": {"papermill": {"duration": 532.0}}}).encode()}
    monkeypatch.setattr(rerun, "_git_show", lambda rev, path: old_files.get(path))
    # the same (empty) results judge alike: every claim "same"
    text = rerun.compare("abc123", ["01"], "cpu-2c", tmp_path / "figs")
    assert "before: aaaaaaaa" in text and "532 s" in text and "other load 0.4%" in text
    assert "no load record" in text   # the old fingerprint has none
    n = len(claims_for(nb))
    assert f"{n} of {n} verdicts the same." in text
    # a claim whose verdict differs is marked changed
    calls = {"n": 0}
    real = rerun.verdicts

    def flip(notebook, run):
        vs = real(notebook, run)
        calls["n"] += 1
        if calls["n"] == 2:   # the "after" side
            vs[0] = type(vs[0])(vs[0].claim, "reproduced", "x1.5", vs[0].theirs)
        return vs

    monkeypatch.setattr(rerun, "verdicts", flip)
    text = rerun.compare("abc123", ["01"], "cpu-2c", tmp_path / "figs")
    assert "**changed**" in text and f"{n - 1} of {n} verdicts the same." in text


def test_a_missing_record_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "figs" / "02_lmdb_vs_png" / "cpu-2c").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="no results.json"):
        rerun.compare("abc", ["02"], "cpu-2c", tmp_path / "figs")
    monkeypatch.setattr(rerun, "_git_show", lambda rev, path: None)
    (tmp_path / "figs" / "02_lmdb_vs_png" / "cpu-2c" / "results.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="commit abc has no figures/02_lmdb_vs_png/cpu-2c"):
        rerun.compare("abc", ["02"], "cpu-2c", tmp_path / "figs")


def test_before_is_a_commit_never_an_option_of_git(tmp_path, monkeypatch, capsys):
    """``--before=--output=x`` reached git as an option: git wrote its output to x (4 files). Now a rev is
    looked up as a name only (``--end-of-options``), and one that names no commit is one line."""
    import uuid

    from feedlab.paths import REPO_ROOT

    monkeypatch.chdir(tmp_path)
    probe = f"feedlab-rerun-probe-{uuid.uuid4().hex[:8]}"
    written = [REPO_ROOT / probe, tmp_path / probe]
    try:
        with pytest.raises(SystemExit) as ex:
            rerun.main([f"--before=--output={probe}", "01"])
        assert ex.value.code == 2
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(err) == 1 and "not a commit of this repository" in err[0], err
        assert rerun._git_show(f"--output={probe}", "figures/x/results.json") is None
        assert not any(p.exists() for p in written)
    finally:
        for p in written:
            p.unlink(missing_ok=True)
    head = rerun.resolve_commit("HEAD")
    assert len(head) == 40 and rerun.resolve_commit(head[:12]) == head


def test_out_inside_figures_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    # attack49 G01: `--out figures/<nb>/<machine>/results.json` replaced a committed record with markdown, rc 0
    from feedlab import paths
    figs = tmp_path / "figures"
    record = figs / "04_print_overhead" / "cpu-2c"
    record.mkdir(parents=True)
    (record / "results.json").write_text('{"record": 1}')
    (tmp_path / "link").symlink_to(record)     # a link into figures/ is inside it too
    monkeypatch.setattr(paths, "FIGURES_DIR", figs)
    monkeypatch.setattr(rerun, "resolve_commit", lambda rev: "a" * 40)
    monkeypatch.setattr(rerun, "compare", lambda *a, **k: "the markdown")
    for out in (record / "results.json", tmp_path / "link" / "results.json", record / "new.md"):
        with pytest.raises(SystemExit) as e:
            rerun.main(["--before", "HEAD", "--out", str(out), "04"])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "--out" in err and "lies inside figures/" in err and "nothing written" in err
    assert (record / "results.json").read_text() == '{"record": 1}'
    assert sorted(p.name for p in record.iterdir()) == ["results.json"]
    # outside figures/ it is written
    rerun.main(["--before", "HEAD", "--out", str(tmp_path / "r.md"), "04"])
    assert (tmp_path / "r.md").read_text() == "the markdown\n"


def test_out_over_an_existing_notebook_or_source_is_refused_and_it_stays(tmp_path, monkeypatch, capsys):
    # attack52 G04: `--out notebooks/04_print_overhead.ipynb` replaced the notebook's source with markdown, rc 0
    monkeypatch.setattr(rerun, "resolve_commit", lambda rev: "a" * 40)
    monkeypatch.setattr(rerun, "compare", lambda *a, **k: "the markdown")
    for name in ("04_print_overhead.ipynb", "run.py", "Makefile"):
        src = tmp_path / name
        src.write_text("the source")
        with pytest.raises(SystemExit) as e:
            rerun.main(["--before", "HEAD", "--out", str(src), "04"])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and f"--out {src}: an existing" in err[-1] and "nothing written" in err[-1], err
        assert src.read_text() == "the source"
    (tmp_path / "RERUNS.md").write_text("old")   # an existing markdown file is what --out is for
    rerun.main(["--before", "HEAD", "--out", str(tmp_path / "RERUNS.md"), "04"])
    assert (tmp_path / "RERUNS.md").read_text() == "the markdown\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["04_print_overhead.ipynb", "Makefile", "RERUNS.md", "run.py"]


def test_out_that_is_a_folder_or_device_is_named_for_what_it_is(tmp_path, monkeypatch, capsys):
    # attack54 G15: `--out work` (a folder) read "an existing extensionless file"; a folder named *.md too
    monkeypatch.setattr(rerun, "resolve_commit", lambda rev: "a" * 40)
    monkeypatch.setattr(rerun, "compare", lambda *a, **k: "the markdown")
    (tmp_path / "work").mkdir()
    (tmp_path / "notes.md").mkdir()
    for out, word in ((tmp_path / "work", "a folder"), (tmp_path / "notes.md", "a folder"),
                      ("/dev/null", "a character device")):
        with pytest.raises(SystemExit) as e:
            rerun.main(["--before", "HEAD", "--out", str(out), "04"])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and err[-1].endswith(f"--out {out}: is {word}, not a file: nothing written; give a "
                                                      ".md file (docs/RERUNS.md) or a new name"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.md", "work"] and not any((tmp_path / "work").iterdir())


def test_an_executed_notebook_deep_or_a_fifo_gives_no_duration_never_a_traceback(tmp_path, monkeypatch):
    """attack56 B50/B63: an executed notebook holding '[' * 100000, current or committed, ended report.rerun in a
    RecursionError traceback (rerun._duration). Its duration is now unknown ("? s"); a FIFO never blocks."""
    import os

    from feedlab.errors import deadline

    nb = "01_worker_scaling"
    now = tmp_path / "figs" / nb / "cpu-2c"
    now.mkdir(parents=True)
    (now / "results.json").write_text(json.dumps({"profile": "quick"}))
    deep = b"[" * 100000 + b"]" * 100000
    (now / f"{nb}.executed.ipynb").write_bytes(deep)
    old_files = {f"figures/{nb}/cpu-2c/results.json": json.dumps({"profile": "quick"}).encode(),
                 f"figures/{nb}/cpu-2c/{nb}.executed.ipynb": deep}
    monkeypatch.setattr(rerun, "_git_show", lambda rev, path: old_files.get(path))
    with deadline(2, "report.rerun over a deep and a FIFO notebook"):
        assert "verdicts the same." in rerun.compare("abc123", ["01"], "cpu-2c", tmp_path / "figs")
        (now / f"{nb}.executed.ipynb").unlink()
        os.mkfifo(now / f"{nb}.executed.ipynb")
        assert "verdicts the same." in rerun.compare("abc123", ["01"], "cpu-2c", tmp_path / "figs")
    for text in ('{"metadata": {"papermill": {"duration": "abc"}}}', '{"metadata": [1]}', "[1]", "5",
                 '{"metadata": {"papermill": {"duration": NaN}}}'):
        assert rerun._duration(text) is None, text
    assert rerun._duration('{"metadata": {"papermill": {"duration": 12}}}') == 12.0


@pytest.mark.parametrize("machine", ["cpu-2c/../cpu-2c", "../../README.md", "--output=work/x"])
def test_machine_is_one_folder_name_never_a_path(tmp_path, monkeypatch, capsys, machine):
    """attack58 W5 / attack59 G4: `--machine cpu-2c/../cpu-2c` was used verbatim in a path and blamed a record."""
    monkeypatch.setattr(rerun, "resolve_commit", lambda rev: "a" * 40)
    monkeypatch.setattr(rerun, "compare", lambda *a, **k: pytest.fail("compared with a bad --machine"))
    with pytest.raises(SystemExit) as e:
        rerun.main(["--before", "HEAD", f"--machine={machine}", "04"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and f"--machine {machine!r}: a machine key is one folder name" in err[-1], err
