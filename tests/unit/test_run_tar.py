"""python -m feedlab.run --tar FILE: this machine's results in one file after each notebook, ok or failed."""

from __future__ import annotations

import tarfile

from feedlab import run as R


def _results(root, nb, key):
    d = root / nb / key
    d.mkdir(parents=True)
    (d / "results.json").write_text("{}")
    (d / "fig.png").write_bytes(b"png")


def test_tar_holds_only_this_machines_folders_named_from_the_repository(tmp_path):
    figs = tmp_path / "figures"
    _results(figs, "01_a", "cpu-2c")
    _results(figs, "01_a", "h100-16c")
    _results(figs, "02_b", "h100-16c")
    (figs / "01_a" / "machines_x.png").write_bytes(b"ours")  # a comparison figure: not a run's result
    dest = tmp_path / "out" / "figs.tar.gz"
    assert R.tar_results(dest, figs, "h100-16c") == 2
    with tarfile.open(dest) as tf:
        names = sorted(tf.getnames())
    assert names == ["figures/01_a/h100-16c", "figures/01_a/h100-16c/fig.png", "figures/01_a/h100-16c/results.json",
                     "figures/02_b/h100-16c", "figures/02_b/h100-16c/fig.png", "figures/02_b/h100-16c/results.json"]
    assert sorted(p.name for p in dest.parent.iterdir()) == ["figs.tar.gz"]  # no temporary left


def test_a_failed_notebook_still_leaves_the_tar(tmp_path, monkeypatch):
    figs = tmp_path / "figures"
    _results(figs, "01_worker_scaling", "box-1c")
    monkeypatch.setenv("FEEDLAB_MACHINE", "box-1c")
    monkeypatch.setattr(R, "plan_parameters", lambda nbs, params: {nb: {} for nb in nbs})

    def boom(*a, **k):
        raise RuntimeError("cell 3 raised")

    monkeypatch.setattr(R, "run_notebook", boom)
    # figs/01_worker_scaling holds machine folders, which --out-root's DIR/<notebook>/ record would
    # replace: the runner refuses it (test_round3_outputs); here nothing runs, only the tar is looked at
    monkeypatch.setattr(R, "check_destination", lambda *a, **k: None)
    dest = tmp_path / "figs.tar"
    rc = R.main(["--only", "01", "--no-data", "--out-root", str(figs), "--tar", str(dest)])
    assert rc == 1
    with tarfile.open(dest) as tf:
        assert "figures/01_worker_scaling/box-1c/results.json" in tf.getnames()
