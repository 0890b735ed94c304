"""feedlab.tune / feedlab.tuner: what it may change, its limits, the line to paste, one-line errors, and a
busy machine that never gets a pick."""

import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

import feedlab
from feedlab import like_for_like as lfl
from feedlab.doctor.guard import UserCodeError
from feedlab.tuner import TOO_BUSY, ThreadedLoader, search
from feedlab.tuner import candidates as CD
from feedlab.tuner.probe import Probe

SMALL = dict(passes=1, window_s=0.05, max_window_s=0.3, budget_s=5.0, deadline_s=10.0, min_batches=10)


class _Quiet:
    def summary(self):
        return {"available": True, "busy": False, "other_fraction": 0.0, "other_cpu_cores": 0.0, "usable_cores": 2}


class _Busy:
    def summary(self):
        return {"available": True, "busy": True, "other_fraction": 0.7, "other_cpu_cores": 1.4, "usable_cores": 2}


def _make(n=2048, **kw):
    ds = TensorDataset(torch.arange(n, dtype=torch.float32).reshape(-1, 1))
    return lambda: DataLoader(ds, batch_size=8, shuffle=True, **kw)


def _probe(fetch=(1e-3, 1e-3), step=(0.0, 0.0), cores=2, **kw):
    return Probe(32, 10_000, 312, fetch, (1e-5, 1e-5), step, 0.0, cores=cores, free_cores=cores, **kw)


def test_feedlab_tune_is_the_tuner_reached_lazily():
    assert feedlab.tune is search.tune
    with pytest.raises(AttributeError):
        feedlab.no_such_thing  # noqa: B018


def test_a_fetch_that_waits_is_tried_above_the_cores_and_with_threads():
    io = _probe(fetch=(2e-3, 1e-4))
    ladder = CD.worker_ladder(io)
    assert max(ladder) > io.cores and 0 in ladder
    assert CD.worker_ladder(_probe(fetch=(1e-3, 1e-3))) == [0, 1, 2]     # compute: never above the cores
    loader = _make()()
    settings, left = CD.grid(io, loader)
    picks, rows = search.shortlist(io, settings, CD.start_settings(loader))
    assert any(r["threads"] for r in picks) or any(r["settings"].get("num_workers", 0) > io.cores for r in picks)
    assert all(r["predicted"] for r in rows)
    assert not any(CD.same(r["settings"], CD.start_settings(loader)) for r in picks)


def test_more_workers_are_predicted_to_wait_better_than_fewer():
    io = _probe(fetch=(2e-3, 1e-4))
    assert io.predict({"num_workers": 8}) > 2 * io.predict({"num_workers": 2})
    cpu = _probe(fetch=(1e-3, 1e-3), step=(1e-3, 1e-3))
    assert cpu.predict({"num_workers": 2}) <= cpu.ceiling() + 1e-9      # capped by the step alone


def test_workers_over_the_memory_limit_are_left_out_and_named():
    p = _probe(worker_uss=300 * 2**20, uss_growth=50_000)
    settings, left = CD.grid(p, _make()(), epochs=3, ram_bytes=1.0 * 2**30)
    assert left and all("MiB allowed" in x["why"] for x in left)
    assert all(s.get("num_workers", 0) * 300 < 1024 for s in settings if "num_workers" in s)
    assert all(s.get("persistent_workers") for s in settings if s.get("num_workers"))   # several epochs


def test_build_keeps_the_recipe_and_the_order_and_pastes_what_changed():
    loader = _make()()
    new = CD.build(loader, {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 4})
    assert new.batch_sampler is loader.batch_sampler and new.batch_sampler.batch_size == 8
    assert new.collate_fn is loader.collate_fn
    assert (new.num_workers, new.persistent_workers, new.prefetch_factor) == (2, True, 4)
    line = CD.paste_line(loader, {"num_workers": 2, "persistent_workers": True})
    assert "batch_size=8" in line and "num_workers=2" in line and "persistent_workers=True" in line
    th = CD.build(loader, {"kind": "threads", "threads": 3})
    assert isinstance(th, ThreadedLoader) and th.batch_sampler is loader.batch_sampler
    assert "ThreadedLoader" in CD.paste_line(loader, {"kind": "threads", "threads": 3})


def test_threaded_loader_yields_every_sample_once_in_order():
    loader = DataLoader(TensorDataset(torch.arange(100)), batch_size=7)
    got = torch.cat([b[0] for b in ThreadedLoader(loader, threads=4)])
    assert got.tolist() == list(range(100))


def test_a_busy_machine_is_too_busy_to_tune_never_a_pick():
    make = _make()
    res = feedlab.tune(make, load_window=_Busy, **SMALL)
    assert res.busy and res.busy.startswith(TOO_BUSY) and res.settings == {}
    assert res.verdict.word == lfl.NOT_FAIR and res.render().startswith("Too busy to tune")
    assert res.loader.batch_sampler.batch_size == 8 and res.loader.num_workers == 0


def test_tune_measures_the_start_beside_its_picks_and_chooses_only_a_measured_rate():
    res = feedlab.tune(_make(), load_window=_Quiet, **SMALL)
    assert res.trials[0].name == "start" and len(res.trials) >= 2
    assert res.verdict is not None and res.verdict.word in lfl.WORDS
    if res.settings:                     # a pick is one of the trials, met against the start
        assert res.pick is not None and res.pick.ok and res.verdict.word == lfl.MET
    else:
        assert res.gain == 1.0 or res.gain is None
    assert res.loader.batch_sampler.batch_size == 8 and res.passes <= 3
    s = res.summary()
    assert s["trials"] and "line" in s and s["kept"]


def test_a_raising_factory_is_one_line():
    def make():
        raise FileNotFoundError("/data/train.csv")

    with pytest.raises(UserCodeError) as e:
        feedlab.tune(make, **SMALL)
    assert "make_loader" in str(e.value) and "\n" not in str(e.value)


def test_a_hanging_step_ends_at_the_deadline_in_one_line():
    def step(b):
        time.sleep(30)

    t0 = time.perf_counter()
    with pytest.raises(UserCodeError) as e:
        feedlab.tune(_make(), step=step, load_window=_Quiet, **{**SMALL, "deadline_s": 0.5})
    assert time.perf_counter() - t0 < 10 and "did not return within" in str(e.value)


class _Unpicklable(Dataset):
    def __init__(self):
        self.fn = lambda i: torch.tensor([float(i)])

    def __len__(self):
        return 512

    def __getitem__(self, i):
        return self.fn(i)


def test_a_dataset_that_cannot_be_pickled_falls_back_to_threads_and_says_so():
    import multiprocessing as mp

    make = lambda: DataLoader(_Unpicklable(), batch_size=8, num_workers=1,  # noqa: E731
                              multiprocessing_context=mp.get_context("spawn"))
    res = feedlab.tune(make, load_window=_Quiet, **SMALL)
    text = " ".join(res.notes)
    assert "pickled" in text and "threads" in text
    # no worker process is tried: threads, or the main process alone (nothing to pickle)
    assert all(t.name == "start" or t.settings.get("kind") == "threads" or t.settings.get("num_workers") == 0
               for t in res.trials)
    assert res.trials[0].error and "pickled" in res.trials[0].error     # the start itself cannot run: said
    assert res.settings.get("num_workers", 0) == 0


def test_cli_names_a_bad_loader_reference_in_one_line(capsys):
    from feedlab.tuner.__main__ import main

    with pytest.raises(SystemExit) as e:
        main(["--loader", "no_such_module_here:make"])
    assert "cannot import it" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(SystemExit) as e:   # attack52 B11: the module imports, the name is wrong: no PYTHONPATH hint
        main(["--loader", "feedlab.tuner.search:no_such_make"])
    assert "feedlab.tuner.search imports, but has no no_such_make" in str(e.value), e.value
    with pytest.raises(SystemExit) as e:   # attack52 B12: a file path
        main(["--loader", "lib/feedlab/tuner/search.py:tune"])
    assert "give the module, not its file: lib.feedlab.tuner.search:tune" in str(e.value), e.value
    with pytest.raises(SystemExit) as e:
        main(["--budget", "3"])
    assert e.value.code == 2 and "give one of --loader" in capsys.readouterr().err


def test_cli_tunes_a_loader_and_prints_json(tmp_path, monkeypatch, capsys):
    import json

    (tmp_path / "tunemod.py").write_text(
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "def make():\n    return DataLoader(TensorDataset(torch.rand(20000, 4)), batch_size=64)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    from feedlab.tuner.__main__ import main

    assert main(["--loader", "tunemod:make", "--budget", "4", "--max-workers", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "line" in out and out["passes"] <= 3 and out["settings"] is not None
    if out["busy"]:                      # a shared machine: said, and no trial run, never a pick
        assert out["busy"].startswith("too busy to tune") and out["settings"] == {}
    else:
        assert out["trials"][0]["name"] == "start"


def test_doctor_tune_hands_over_to_the_tuner_in_one_line():
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    tmp = tempfile.mkdtemp(prefix="fl-", dir="/tmp")   # short: multiprocessing's folder is made in it
    try:
        p = subprocess.run([sys.executable, "-m", "feedlab.doctor", "--tune", "--loader", "no_such_module_here:make"],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, TMPDIR=tmp))
        assert p.returncode != 0 and "cannot import it" in p.stderr
        assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
        assert os.listdir(tmp) == []   # the doctor became the tuner (exec): its temporaries went first
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("device,epochs", [("cpu", 1), ("cpu", 3), ("cuda", 1), ("cuda", 3)])
def test_every_setting_the_tuner_may_pick_is_in_the_exhaustive_grid_by_its_name(device, epochs):
    p = _probe(fetch=(2e-3, 1e-4), device=device)
    loader = _make()()
    start = CD.start_settings(loader)
    names = {CD.name_of(CD.changed(s, start)) for s in CD.exhaustive(p, loader)}
    settings, _ = CD.grid(p, loader, epochs=epochs)
    assert {CD.name_of(CD.changed(s, start)) for s in settings} <= names | {"start"}


class _Boom(Dataset):
    def __len__(self):
        return 40

    def __getitem__(self, i):
        if i == 17:
            raise KeyError("sample 17 is missing")
        return torch.tensor([i])


def test_threaded_loader_raises_the_fetch_error_in_the_loop():
    with pytest.raises(KeyError, match="sample 17"):
        for _ in ThreadedLoader(DataLoader(_Boom(), batch_size=4), threads=3):
            pass


def _fake_measure(first: dict, again: dict, calls: list):
    """trials.measure faked: ``first`` (name → (rate, kind, half-width)) for the race's one-candidate passes,
    ``again`` for the two-candidate pass measured once more."""
    from feedlab.doctor import trials as TR

    def trial(name, rate, kind, hw, settings):
        return TR.Trial(name, settings, rates=[rate], median=rate, lo=rate, hi=rate, half_width=hw, passes=1,
                        timed_batches=60, window_s=1.5, rate_kind=kind, batch_size=8, workers=0, order="global",
                        epoch_batches=256)

    def fake(cands, **kw):
        calls.append(([c.name for c in cands], kw.get("max_window_s")))
        table = first if len(cands) == 1 else again
        return [trial(c.name, *table.get(c.name, (50.0, "steady", 0.02)), c.settings) for c in cands]

    return fake


def test_an_undecided_imprecise_start_is_measured_once_more_with_a_longer_window(monkeypatch):
    calls = []
    first = {"start": (100.0, "imprecise", 0.04), "threads=2": (106.0, "steady", 0.02)}   # ×1.06 ±4.5%: within
    again = {"start": (100.0, "steady", 0.01), "threads=2": (120.0, "steady", 0.01)}
    monkeypatch.setattr(search.RC.TR, "measure", _fake_measure(first, again, calls))
    res = feedlab.tune(_make(), load_window=_Quiet, **{**SMALL, "passes": 1})
    assert calls[0][0] == ["start"] and all(len(c[0]) == 1 for c in calls[:-1])      # raced one at a time
    assert calls[-1] == (["start", "threads=2"], 2 * SMALL["max_window_s"])           # once more, twice the cap
    assert res.start.passes == 2 and res.start.rate_kind == "steady" and res.passes == 2
    assert "once more" in " ".join(res.notes)


def test_a_decided_verdict_is_not_measured_again(monkeypatch):
    calls = []
    # ×4 ±4.5%: met (an imprecise start of one pass would not be: the one precision rule wants 3 repeats of it)
    first = {"start": (100.0, "steady", 0.04), "threads=2": (400.0, "steady", 0.02)}
    monkeypatch.setattr(search.RC.TR, "measure", _fake_measure(first, {}, calls))
    res = feedlab.tune(_make(), load_window=_Quiet, **{**SMALL, "passes": 1})
    assert all(len(c[0]) == 1 for c in calls) and res.passes == 1
    assert res.verdict.word == lfl.MET and res.settings == {"kind": "threads", "threads": 2}
    assert "once more" not in " ".join(res.notes)


def _fake_tune(seen: dict):
    def tune(make, step, budget, **kw):
        loader = make()
        seen.update(loader=loader, step=step, budget=budget, **kw)
        return search.Tuned(loader, {}, CD.paste_line(loader, {}), [], None)
    return tune


def test_cli_tune_script_tunes_the_scripts_own_loader_with_its_step_as_a_wait(monkeypatch, capsys):
    import json

    from feedlab.tuner import __main__ as M

    loader = _make()()
    ran = {}

    def run_script(path, args, **kw):
        ran.update(path=str(path), args=args, **kw)
        return {"step_s_per_sample": 0.002}, loader

    seen = {}
    monkeypatch.setattr(M, "run_script", run_script)
    monkeypatch.setattr(M, "tune", _fake_tune(seen))
    assert M.main(["--script", "train.py", "--budget", "7", "--batches", "8", "--json", "--", "--epochs", "1"]) == 0
    assert ran["path"] == "train.py" and ran["args"] == ["--epochs", "1"] and ran["max_batches"] == 8
    assert seen["loader"] is loader and seen["budget"] == 7
    t0 = time.perf_counter()
    seen["step"](next(iter(loader)))                                  # the script's step stood in for: 8 × 2 ms
    assert time.perf_counter() - t0 >= 0.015
    out = json.loads(capsys.readouterr().out)
    assert any("stood in" in n for n in out["notes"])


def test_cli_tune_data_builds_feedlabs_loader_over_the_folder(monkeypatch, sr_root):
    from feedlab.tuner import __main__ as M

    seen = {}
    monkeypatch.setattr(M, "tune", _fake_tune(seen))
    assert M.main(["--data", str(sr_root), "--format", "png", "--batch-size", "4", "--budget", "3"]) == 0
    assert seen["loader"].batch_size == 4 and seen["loader"].num_workers == 0 and seen["step"] is None
    assert len(seen["loader"].dataset) > 0 and seen["budget"] == 3


def test_cli_tune_script_on_the_command_line_is_watched_from_a_second_process(monkeypatch, capsys):
    # attack49 S09: `python -m feedlab.tuner --script` ran the script unwatched in its own process: a script that
    # ignores SIGTERM made the tuner ignore it too (it outlived timeout's SIGTERM), and a pymp-* folder was left
    from feedlab.tuner import __main__ as M

    loader = _make()()
    ran = {}

    def run_script(path, args, **kw):
        ran.update(kw)
        return {"step_s_per_sample": 0.002}, loader

    monkeypatch.setattr(M, "run_script", run_script)
    monkeypatch.setattr(M, "tune", _fake_tune({}))
    monkeypatch.setattr(M.sys, "argv", ["feedlab.tuner", "--script", "train.py", "--budget", "7", "--json"])
    assert M.main() == 0                       # the command line (argv from sys.argv): watched
    assert ran["watch"] is True
    assert ran["report"](None, "no batch within 5 s (--deadline)") == 2
    assert capsys.readouterr().err.strip() == "python -m feedlab.tuner: error: no batch within 5 s (--deadline)"
    assert M.main(["--script", "train.py", "--budget", "7", "--json"]) == 0   # in-process (a test): not watched
    assert ran["watch"] is False


def test_doctor_tune_names_the_command_the_user_typed_in_its_errors(monkeypatch, capsys):
    """attack53 M05: `python -m feedlab.doctor --tune …` failed as `python -m feedlab.tuner: error: …`. The doctor
    tells the tuner it starts its own name (FEEDLAB_TUNER_PROG); the variable is read once and goes no further."""
    import os

    from feedlab.tuner import __main__ as M

    monkeypatch.setattr(M, "PROG", M.PROG)   # main sets it for its process: put back after the test
    monkeypatch.setenv(M.PROG_ENV, "python -m feedlab.doctor --tune")
    with pytest.raises(SystemExit) as e:
        M.main(["--loader", "no_such_module_here:make"])
    assert str(e.value).startswith("python -m feedlab.doctor --tune: error: --loader"), e.value
    assert M.PROG_ENV not in os.environ   # the user's script, a trial's process: not told
    with pytest.raises(SystemExit):
        M.main(["--budget", "3"])
    assert capsys.readouterr().err.startswith("usage: python -m feedlab.doctor --tune")

