"""The shared core: results, profiles, timing, plots, the runner's argument handling."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from feedlab import plots, profiles, results, timing
from feedlab.fingerprint import fingerprint_line, machine_fingerprint


def test_results_rows_are_tidy_and_written_with_fingerprint(tmp_path):
    r = results.Results()
    r.add_samples("exp", "png", "samples_per_s", [10.0, 12.0, 11.0], "samples/s",
                  batch_size=8, num_workers=2)
    r.add("exp", "lmdb", "samples_per_s", 20.0, "samples/s", batch_size=8, num_workers=2)
    path = r.write(tmp_path, "grid")
    df = pd.read_csv(path)
    assert list(df.columns) == ["experiment", "variant", "batch_size", "num_workers",
                                "repeat", "metric", "value", "unit"]
    assert len(df) == 4 and df["repeat"].tolist() == [0, 1, 2, 0]
    fp = json.loads((tmp_path / "fingerprint.json").read_text())
    for key in ("cpu_model", "cpu_usable", "memory_bytes", "python", "torch", "git", "time_utc"):
        assert key in fp


def test_results_refuse_missing_values():
    with pytest.raises(ValueError, match="exp/v/m"):
        results.Results().add("exp", "v", "m", float("nan"), "s")


def test_summarize_median_and_quartiles():
    df = pd.DataFrame({"g": ["a"] * 5 + ["b"], "value": [1, 2, 3, 4, 100, 7]})
    s = results.summarize(df, ["g"]).set_index("g")
    assert s.loc["a", "median"] == 3 and s.loc["a", "q25"] == 2 and s.loc["a", "q75"] == 4
    assert s.loc["a", "n"] == 5 and s.loc["b", "n"] == 1 and s.loc["a", "max"] == 100


def test_fmt_spread_and_median_iqr():
    assert results.median_iqr([1, 2, 3]) == (2.0, 1.5, 2.5)
    assert results.fmt_spread([1, 2, 3], "ms") == "2 (1.5–2.5) ms"
    with pytest.raises(ValueError):
        results.median_iqr([])


def test_record_results_writes_json(tmp_path):
    results.record_results({"rate": np.float64(3.5), "sizes": np.array([8, 32])}, tmp_path)
    assert json.loads((tmp_path / "results.json").read_text()) == {"rate": 3.5, "sizes": [8, 32]}


def test_profiles_fill_none_and_keep_overrides(tmp_path, monkeypatch):
    monkeypatch.delenv("FEEDLAB_PROFILE", raising=False)
    p = profiles.resolve("no_such_notebook", profile="smoke", repeats=None, out_dir=str(tmp_path))
    assert p.profile == "smoke" and p.repeats == 2 and p.out_dir == tmp_path
    assert p.data_root.name == "sr64-smoke" and not p.user_data
    q = profiles.resolve("no_such_notebook", profile="", repeats=7, data_root=str(tmp_path),
                         out_dir=str(tmp_path / "out"))
    assert q.profile == "quick" and q.repeats == 7 and q.data_root == tmp_path and q.user_data


def test_profile_from_environment_and_errors(monkeypatch):
    monkeypatch.setenv("FEEDLAB_PROFILE", "full")
    assert profiles.choose_profile("") == "full"
    with pytest.raises(ValueError, match="smoke, quick, full"):
        profiles.choose_profile("fast")
    with pytest.raises(KeyError, match="sleep_s"):
        profiles.resolve("no_such_notebook", profile="smoke", sleep_s=None)


class _Indexed(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full((3, 4, 4), i % 256, dtype=torch.uint8), torch.tensor(i)


def test_run_epoch_sees_every_sample_once_and_times_each_phase():
    seen = []
    model = torch.nn.Conv2d(3, 3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(_Indexed(100), batch_size=16, shuffle=True)
    t = timing.run_epoch(loader, model, "cpu", opt, loss_fn=lambda o, y: o.mean(),
                         on_batch=lambda i, b: seen.extend(b[1].tolist()))
    assert sorted(seen) == list(range(100))
    assert t.samples == 100 and t.batches == 7 and t.phases_s.shape == (7, 4)
    assert (t.phases_s >= 0).all() and t.phases_s[:, 2].sum() > 0 and t.phases_s[:, 3].sum() > 0
    assert t.wall_s >= t.phases_s.sum() * 0.99 - 1e-3
    assert 0 <= t.data_wait_fraction <= 1


def test_run_epoch_respects_max_batches_without_model():
    t = timing.run_epoch(DataLoader(_Indexed(100), batch_size=10), max_batches=3)
    assert t.batches == 3 and t.samples == 30
    assert (t.phases_s[:, 2:] == 0).all()  # no model: forward/backward not marked


def test_timer_overhead_is_small():
    # stated bound: the PhaseTimer adds under 20 µs per batch on CPU (measured ~2 µs);
    # the notebooks print the measured figure next to their smallest timed step
    assert timing.timer_overhead_per_batch(batches=2000) < 20e-6


def test_time_callable_counts_calls_and_runs_setup():
    calls = {"fn": 0, "setup": 0}
    out = timing.time_callable(lambda: calls.__setitem__("fn", calls["fn"] + 1), warmup=2,
                               repeats=3, number=4,
                               setup=lambda: calls.__setitem__("setup", calls["setup"] + 1))
    assert len(out) == 3 and calls == {"fn": 20, "setup": 5}
    with pytest.raises(ValueError):
        timing.time_callable(lambda: None, repeats=0)


def test_save_figure_is_deterministic(tmp_path):
    fp = machine_fingerprint() | {"time_utc": "2026-01-01T00:00:00+00:00"}

    def draw():
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots()
        plots.errorbar_series(ax, [1, 2, 3], [1, 2, 3], [0.5, 1.5, 2.5], [1.5, 2.5, 3.5], label="x")
        paths = plots.save_figure(fig, tmp_path, "f", fingerprint=fp)
        plt.close(fig)
        return [p.read_bytes() for p in paths]

    assert draw() == draw()
    assert (tmp_path / "f.png").exists() and (tmp_path / "f.svg").exists()
    assert "cores" in fingerprint_line(fp)


def test_runner_selects_and_parses(tmp_path):
    from feedlab import run

    nbs = [tmp_path / "01_worker_scaling.ipynb", tmp_path / "02_lmdb_vs_png.ipynb"]
    assert run.select(nbs, ["02"]) == [nbs[1]]
    assert run.select(nbs, ["01_worker"]) == [nbs[0]]
    with pytest.raises(SystemExit, match="01_worker_scaling, 02_lmdb_vs_png"):
        run.select(nbs, ["99"])
    with pytest.raises(SystemExit):
        run.main(["--profile", "smoke", "--no-data", "-p", "batch_sizes", "[8, 32", "--list"])


def test_runner_passes_absolute_paths(tmp_path, monkeypatch):
    """Notebooks execute in notebooks/: a relative path from the command line must not
    land there."""
    from feedlab import run

    seen = {}
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    monkeypatch.setattr(run, "run_notebook", lambda nb, profile, params, out_root, **kw: seen.update(
        params=params, out_root=out_root) or tmp_path / "x" / "y" / "z.ipynb")
    assert run.main(["--profile", "smoke", "--no-data", "--only", "01", "--out-root", "rel",
                     "-p", "data_root", "mine"]) == 0
    assert seen["out_root"] == tmp_path / "rel"
    assert seen["params"]["data_root"] == str(tmp_path / "mine")


def test_record_results_displays_strict_json_and_keeps_nan_in_the_file(tmp_path, monkeypatch):
    """A NaN in the payload must not reach the kernel's display channel (which rejects it with a
    UserWarning in place of the numbers); results.json keeps it."""
    import json
    import math

    import IPython.display as D

    shown = []
    monkeypatch.setattr(D, "display", lambda obj, **kw: shown.append(obj.data))
    results.record_results({"a": float("nan"), "b": [1.0, float("inf")], "c": {"d": 2.0}}, tmp_path)
    assert shown == [{"a": None, "b": [1.0, None], "c": {"d": 2.0}}]
    json.dumps(shown[0], allow_nan=False)
    assert math.isnan(json.loads((tmp_path / "results.json").read_text())["a"])
