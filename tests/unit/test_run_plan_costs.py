"""--dry-run predicts each notebook's seconds from the committed records: the same profile on the same
machine, else a machine with the same cores; it says where it has no record, and gives the total."""

from __future__ import annotations

import json

import pytest

from feedlab import run_plan


def _record(figs, nb, key, profile, seconds, when="2026-11-26T06:20:00+00:00"):
    d = figs / nb / key
    d.mkdir(parents=True)
    (d / "fingerprint.json").write_text("{}")
    meta = {"papermill": {"parameters": {"profile": profile}, "duration": seconds, "end_time": when}}
    (d / f"{nb}.executed.ipynb").write_text(json.dumps({"cells": [], "metadata": meta}))


def test_recorded_seconds_prefer_the_machine_then_its_core_count_and_match_the_profile(tmp_path):
    _record(tmp_path, "01_a", "h100-16c", "gpu", 170.2)
    _record(tmp_path, "01_a", "cpu-2c", "quick", 532.0)
    _record(tmp_path, "02_b", "h100-16c", "quick", 61.0)
    _record(tmp_path, "02_b", "cpu-16c", "gpu", 99.0)
    got = run_plan.recorded_seconds("01_a", "cpu-16c", "gpu", tmp_path)
    assert got == {"seconds": 170.2, "machine": "h100-16c", "when": "2026-11-26", "left_out_s": 0.0, "left_out": 0,
                   "changed": [], "commit": None, "modified": False}     # its fingerprint names no commit: nothing is claimed about its settings
    assert run_plan.recorded_seconds("02_b", "cpu-16c", "gpu", tmp_path)["machine"] == "cpu-16c"
    assert run_plan.recorded_seconds("01_a", "cpu-2c", "gpu", tmp_path) is None      # only a quick run on 2 cores
    assert run_plan.recorded_seconds("02_b", "h100-16c", "quick", tmp_path)["seconds"] == 61.0
    assert run_plan.recorded_seconds("03_c", "h100-16c", "gpu", tmp_path) is None


def test_the_plan_prints_each_recorded_cost_and_the_total(tmp_path, monkeypatch, capsys):
    _record(tmp_path, "01_a", "h100-16c", "gpu", 170.2)
    monkeypatch.setattr(run_plan, "planned_machine_key", lambda cores=None: "cpu-16c")
    run_plan.print_plan([("01_a", {"batch_size": 8}), ("02_b", {"batch_size": 8})], "gpu", 16, tmp_path)
    out = capsys.readouterr().out
    assert "170 (the gpu run on h100-16c, 2026-11-26)" in out and "no record of a gpu run on 16 cores" in out
    assert "\ntotal: 170 s of notebooks from records (1 of 2); no record for 1: 02_b\n" in out
    assert "call 1 (quarter-hour 1, at most 540 s): about 370 s" in out         # 80 set-up + 170 + 120
    assert "planned without a record or a budget (1): 02_b" in out


def test_gpu_calls_pack_in_order_of_value_with_budgets_and_records(tmp_path, monkeypatch):
    """Each notebook is planned at its record (a record wins over a budget: the settings a claim reads pass
    a budget), at its budget + start-up without one, else at FIRST_RUN_S (said); the first five of value
    are packed largest first to share a quarter-hour; each call runs its notebooks in order of value."""
    _record(tmp_path, "15_cure", "h100-16c", "gpu", 80.0)
    _record(tmp_path, "01_w", "h100-16c", "gpu", 300.0)       # over its budget: the record counts
    _record(tmp_path, "09_b", "h100-16c", "gpu", 200.0)
    monkeypatch.setattr(run_plan, "profile_values", lambda name, profile: {})
    rows = [("09_b", {}), ("01_w", {"budget_s": 100}), ("15_cure", {}), ("03_new", {"budget_s": 40}), ("99_new", {})]
    calls = run_plan.gpu_calls(rows, "h100-16c", "gpu", tmp_path)
    by = {nb["name"]: nb for c in calls for nb in c["notebooks"]}
    assert by["01_w"]["seconds"] == 300 and by["01_w"]["how"].startswith("recorded on h100-16c")
    assert by["03_new"]["seconds"] == 40 + run_plan.START_S and "no record yet" in by["03_new"]["how"]
    assert by["15_cure"]["limit"] == 80 * run_plan.MARGIN + run_plan.START_S
    assert by["99_new"]["seconds"] == run_plan.FIRST_RUN_S and not by["99_new"]["known"]
    # largest first: 01 (300) and 09 (200) miss call 1's 460 s together: 09 opens call 2 (265 s); 15 (80) and
    # 03 (60) fit call 1 after 01; 99 (120), not of the first five, fits neither: call 3, the next quarter-hour
    assert [[nb["name"] for nb in c["notebooks"]] for c in calls] == [["15_cure", "01_w", "03_new"], ["09_b"], ["99_new"]]
    assert [c["quarter"] for c in calls] == [1, 1, 2] and calls[0]["seconds"] == 80 + 300 + 80 + 60
    assert all(c["seconds"] <= c["deadline_s"] for c in calls)


def test_a_record_cut_short_by_its_limit_plans_what_it_left_out(tmp_path):
    """09 on the H100 (bc1be8b): 86 s recorded, its batch-128 settings left out for the call's limit. The plan
    adds their estimates, at most the notebook's budget (its grids add no more than that beyond a claim's)."""
    _record(tmp_path, "09_b", "h100-16c", "gpu", 86.0)
    left = [{"setting": f"b128 w{w}", "why": "about 11 s with 9 s left before the run's limit"} for w in range(7)]
    left += [{"setting": "b32 w2", "why": "no time left before the run's limit"},
             {"setting": "b64 w2", "why": "about 30 s with 3 s left"}]                 # the budget's own: not added
    (tmp_path / "09_b" / "h100-16c" / "setting_costs.json").write_text(
        json.dumps({"costs_s": {"b8 w2": 16.0}, "left_out": left}))
    assert run_plan.limit_shortfall(tmp_path / "09_b" / "h100-16c") == (7 * 11 + 16.0, 8)
    secs, how, known = run_plan.predicted_seconds("09_b", {}, "h100-16c", "gpu", tmp_path)
    assert secs == 86 + 93 and "+ 93 s for the 8 setting(s) its limit left out" in how and known
    assert run_plan.predicted_seconds("09_b", {"budget_s": 45}, "h100-16c", "gpu", tmp_path)[0] == 86 + 45


def test_a_base_profile_record_plans_only_a_notebook_the_profile_leaves_as_it_was(tmp_path, monkeypatch):
    _record(tmp_path, "02_same", "h100-16c", "quick", 57.0)
    _record(tmp_path, "10_diff", "h100-16c", "quick", 67.0)
    monkeypatch.setattr(run_plan, "profile_values",
                        lambda name, profile: {"model": "srcnn" if (name, profile) == ("10_diff", "gpu") else "none"})
    same = run_plan.predicted_seconds("02_same", {}, "h100-16c", "gpu", tmp_path)
    diff = run_plan.predicted_seconds("10_diff", {}, "h100-16c", "gpu", tmp_path)
    assert same[0] == 57.0 and "quick profile" in same[1]
    assert diff == (run_plan.FIRST_RUN_S, "no record and no budget: a first run's limit", False)


def test_call_items_are_what_gpu_call_reads(monkeypatch, capsys):
    monkeypatch.setattr(run_plan, "list_notebooks", lambda: [])
    monkeypatch.setattr(run_plan, "planned_machine_key", lambda cores=None: "h100-16c")
    monkeypatch.setattr(run_plan, "plan", lambda nbs, profile, params: [("15_cure", {}), ("03_pin", {})])
    monkeypatch.setattr(run_plan, "predicted_seconds", lambda *a, **k: (50.0, "recorded on h100-16c, x", True))
    assert run_plan.call_items(1) == "15:85 03:85"
    assert run_plan.main(["--call", "2"]) == 2
    assert "the plan has calls 1 to 1" in capsys.readouterr().err


def test_a_quarter_hour_holds_two_calls_and_no_limit_passes_its_call(tmp_path, monkeypatch):
    """Two calls a rented quarter-hour: its first at most CALL_S (a fresh machine's set-up), its second what the
    quarter-hour has left after the start, that call, the transfers and the give-back (the warm machine's
    set-up); a notebook's limit never passes its call's seconds less set-up; a notebook no call holds is refused."""
    monkeypatch.setattr(run_plan, "profile_values", lambda name, profile: {})
    assert run_plan.CALL_S <= 540 and [run_plan.call_seconds(n) for n in (1, 2, 3)] == [540, 285, 540]
    assert run_plan.SECOND_CALL_S == 900 - 40 - 540 - 25 - 10
    assert [run_plan.setup_seconds(n) for n in (1, 2)] == [run_plan.SETUP_S, run_plan.SETUP_WARM_S]
    rows = [(f"{n:02d}_x", {"budget_s": 200}) for n in (15, 1, 3, 9)]   # 220 s each
    calls = run_plan.gpu_calls(rows, "h100-16c", "gpu", tmp_path)
    assert [len(c["notebooks"]) for c in calls] == [2, 1, 1]            # 80 + 440; 20 + 220; 80 + 220
    assert [c["deadline_s"] for c in calls] == [540, 285, 540] and [c["quarter"] for c in calls] == [1, 1, 2]
    assert all(nb["limit"] <= c["deadline_s"] - run_plan.setup_seconds(i)
               for i, c in enumerate(calls, 1) for nb in c["notebooks"])
    assert run_plan.main(["--call", "2", "--seconds"]) == 0
    with pytest.raises(ValueError, match="count from 1"):
        run_plan.call_seconds(0)
    big = run_plan.gpu_calls([("01_big", {"budget_s": 600})], "h100-16c", "gpu", tmp_path)   # never a broken plan
    assert big[0]["notebooks"][0]["seconds"] == run_plan.CALL_S - run_plan.SETUP_S
    assert "more than a call holds" in big[0]["notebooks"][0]["how"]


def test_the_host_only_notebooks_are_left_out_of_the_gpu_plan_and_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run_plan, "profile_values", lambda name, profile: {})
    rows = [(f"{n}_x", {"budget_s": 10}) for n in ("15", "04", "07", "08", "11", "12", "13")]
    calls = run_plan.gpu_calls(rows, "h100-16c", "gpu", tmp_path)
    assert [nb["name"] for c in calls for nb in c["notebooks"]] == ["15_x", "13_x"]
    assert run_plan.host_only(rows) == ["04_x", "07_x", "08_x", "11_x", "12_x"]
    run_plan.print_calls(calls, run_plan.host_only(rows))
    assert "not on the GPU machine (5, every measurement on the host" in capsys.readouterr().out


def test_a_record_made_under_other_profile_values_says_which(tmp_path, monkeypatch):
    """The plan reads the profile at the commit a record names: a record at 15 s caps says so beside its seconds."""
    then = "15_x:\n  quick:\n    rate_cap_s: 15\n    repeats: 1\n"
    calls = []

    def fake_git(argv, **kw):
        calls.append(argv)
        ok = argv[-1] == "abc1234:notebooks/profiles.yaml"
        return run_plan.subprocess.CompletedProcess(argv, 0 if ok else 128, then if ok else "", "")

    monkeypatch.setattr(run_plan.subprocess, "run", fake_git)
    monkeypatch.setattr(run_plan, "profile_values", lambda name, profile: {"rate_cap_s": 5, "repeats": 1})
    assert run_plan.settings_changed("15_x", "gpu", "abc1234") == ["rate_cap_s 15 → 5"]
    assert run_plan.settings_changed("15_x", "gpu", "def5678") == []      # a commit this copy cannot read
    assert run_plan.settings_changed("15_x", "gpu", None) == [] and len(calls) == 2
    d = tmp_path / "15_x" / "h100-16c"
    d.mkdir(parents=True)
    (d / "fingerprint.json").write_text(json.dumps({"git": {"commit": "abc1234", "dirty": False}}))
    assert run_plan.record_commit(d) == ("abc1234", False)
    (d / "fingerprint.json").write_text(json.dumps({"git": {"commit": "abc1234; rm -rf /"}}))
    assert run_plan.record_commit(d) == (None, False)
    (d / "fingerprint.json").write_text(json.dumps({"git": {"commit": "abc1234"}}))
    meta = {"papermill": {"parameters": {"profile": "gpu"}, "duration": 60.0, "end_time": "2026-11-26T06:20:00"}}
    (d / "15_x.executed.ipynb").write_text(json.dumps({"cells": [], "metadata": meta}))
    seconds, how, known = run_plan.predicted_seconds("15_x", {}, "h100-16c", "gpu", tmp_path)
    assert (seconds, known) == (60.0, True) and how.endswith("the profile changed since: rate_cap_s 15 → 5")

    # a record from a modified tree: what it ran under is not known, so no commit's profile is read for it
    calls.clear()
    (d / "fingerprint.json").write_text(json.dumps({"git": {"commit": "abc1234", "dirty": True}}))
    seconds, how, known = run_plan.predicted_seconds("15_x", {}, "h100-16c", "gpu", tmp_path)
    assert how.endswith("made from a modified tree of abc1234: the values it ran under are not known")
    assert calls == []


def test_a_long_list_of_changed_values_is_cut_for_the_reader():
    rec = {"changed": [f"v{i} 1 → 2" for i in range(7)]}
    assert run_plan.changed_note(rec) == "the profile changed since: v0 1 → 2, v1 1 → 2, v2 1 → 2, v3 1 → 2 and 3 more"
    assert run_plan.changed_note({"changed": []}) == ""


def test_a_record_nested_too_deeply_is_read_as_no_record(tmp_path):
    """attack54 FAIL 1: a fingerprint.json or setting_costs.json of '[' * 100000 raised RecursionError out of the
    plan (its guards catch ValueError); now it is a record that says nothing, like any JSON they cannot read."""
    deep = "[" * 100000 + "]" * 100000
    (tmp_path / "fingerprint.json").write_text(deep)
    (tmp_path / "setting_costs.json").write_text(deep)
    assert run_plan.record_commit(tmp_path) == (None, False)
    assert run_plan.limit_shortfall(tmp_path) == (0.0, 0)


def test_a_record_whose_fields_are_not_their_shape_is_named_and_skipped(tmp_path, monkeypatch, capsys):
    """attack56 B51/B56 (a traceback) and W1 B52/B55 (a line naming neither file nor field): papermill.parameters
    a list, papermill.duration "abc", setting_costs.json's costs_s value "x" or left_out [5] in the dry run. Each
    record is skipped (or its field left out) with one line naming the file and the field."""
    from feedlab.errors import deadline

    monkeypatch.setattr(run_plan, "planned_machine_key", lambda cores=None: "cpu-2c")
    for nb, field, value in (("01_a", "parameters", [1]), ("02_b", "duration", "abc")):
        _record(tmp_path, nb, "cpu-2c", "quick", 10.0)
        path = tmp_path / nb / "cpu-2c" / f"{nb}.executed.ipynb"
        rec = json.loads(path.read_text())
        rec["metadata"]["papermill"][field] = value
        path.write_text(json.dumps(rec))
    _record(tmp_path, "03_c", "cpu-2c", "quick", 40.0)
    (tmp_path / "03_c" / "cpu-2c" / "setting_costs.json").write_text(
        json.dumps({"costs_s": {"a": "x", "b": 6.0}, "left_out": [5, {"why": "about 3 s before the run's limit"}]}))
    with deadline(2, "the dry run over badly shaped records"):
        run_plan.print_plan([("01_a", {}), ("02_b", {}), ("03_c", {})], "quick", 2, tmp_path)
    out = capsys.readouterr().out
    assert f"skipped                  {tmp_path}/01_a/cpu-2c/01_a.executed.ipynb: metadata.papermill.parameters " \
           "holds list, not an object (the record is skipped)" in out, out
    assert f"{tmp_path}/02_b/cpu-2c/02_b.executed.ipynb: metadata.papermill.duration holds str 'abc', not seconds" \
        in out
    assert f"{tmp_path}/03_c/cpu-2c/setting_costs.json: costs_s holds values that are not seconds; left_out holds " \
           "items that are not objects (left out of the plan)" in out
    assert "40 (the quick run on cpu-2c" in out and "no record for 2: 01_a, 02_b" in out
    assert run_plan.limit_shortfall(tmp_path / "03_c" / "cpu-2c") == (3.0, 1)
    (tmp_path / "03_c" / "cpu-2c" / "setting_costs.json").write_text(json.dumps({"costs_s": [1], "left_out": 5}))
    skipped: list[str] = []
    assert run_plan.limit_shortfall(tmp_path / "03_c" / "cpu-2c", skipped) == (0.0, 0)
    assert skipped == [f"{tmp_path}/03_c/cpu-2c/setting_costs.json: costs_s holds list, not an object; left_out "
                       "holds int, not a list (left out of the plan)"]


def test_the_dry_run_under_out_root_shows_the_folder_the_run_writes(tmp_path, capsys, monkeypatch):
    """attack56 W5 R72: `--out-root work/or --dry-run` showed `out_dir runs/smoke/04_print_overhead` while the run
    writes work/or/04_print_overhead (run_record.destination). plan() takes --out-root and shows that folder."""
    from feedlab import run as R
    from feedlab.errors import deadline

    nb04 = next(p for p in run_plan.list_notebooks() if p.stem.startswith("04_"))
    from feedlab import run_record

    monkeypatch.setattr(run_plan, "planned_machine_key", lambda cores=None: "cpu-2c")   # no machine probe
    monkeypatch.setattr(run_record, "machine_key", lambda *a, **k: "cpu-2c")   # (it imports torch: seconds)
    with deadline(10, "the dry run under --out-root"):
        (name, values), = run_plan.plan([nb04], "smoke", {}, out_root=tmp_path / "or")
        assert name == nb04.stem and values["out_dir"] == tmp_path / "or" / nb04.stem
        assert R.main(["--dry-run", "--profile", "smoke", "--only", "04", "--out-root", str(tmp_path / "or")]) == 0
    out = capsys.readouterr().out
    assert f"  out_dir                  {tmp_path / 'or' / nb04.stem}\n" in out, out
    assert not (tmp_path / "or").exists()   # a plan writes nothing
