"""12's readings, titles, figures and payload from synthetic frames shaped as feedlab.experiments.beyond records them."""

import json
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from feedlab.experiments import _beyond_readings as R  # noqa: E402

GROWTH = {"list": {"main": 1.0, "worker0": 40.0, "worker1": 38.0}, "numpy": {"main": 1.0, "worker0": 0.5}}


def _ldf():
    rows = []
    for pw in (False, True):
        for epoch in range(3):
            for rep in range(3):
                s = 0.5 if epoch == 0 or not pw else 0.05
                rows.append({"metric": "first_batch_s", "variant": "persistent" if pw else "restarted",
                             "persistent_workers": pw, "epoch": epoch, "repeat": rep, "value": s})
    return pd.DataFrame(rows)


def _sdf():
    rows = []
    for pf in (1, 2):
        for rep in range(2):
            for b in range(8):
                rows.append({"metric": "data_wait_s", "prefetch_factor": pf, "batch": b, "repeat": rep,
                             "value": 0.1 if b % 4 == 0 else 0.001})
            rows.append({"metric": "samples_per_s", "prefetch_factor": pf, "batch": -1, "repeat": rep, "value": 500.0})
    return pd.DataFrame(rows)


def _bdf():
    return pd.DataFrame([{"format": f, "num_workers": w, "fetch": fe, "repeat": r, "value": v}
                         for f in ("lmdb", "npy_mmap") for w in (0, 2) for r in range(2)
                         for fe, v in (("__getitems__", 3000.0 if f == "lmdb" else 6000.0), ("__getitem__", 1000.0))])


def _rdf():
    return pd.DataFrame([{"variant": v, "cache": c, "repeat": r, "value": x}
                         for c in ("warm", "cold") for r in range(2)
                         for v, x in ((R.SHARDS, 4000.0 if c == "warm" else 2000.0), (R.FILES, 1000.0))])


def test_readings_state_each_finding():
    lines = R.readings(GROWTH, _ldf(), _sdf(), _bdf(), _rdf(), 10_000)
    assert "40.0 MiB with a list of str and 0.5 MiB" in lines[0] and "shows the copy-on-access growth" in lines[0]
    assert lines[1] == "2. First batch of epochs after the first: 500 ms without persistent workers, 50 ms with them (×10.0)."
    assert "prefetch_factor=1: 500 samples/s; 25% of batches wait" in lines[2]
    assert any("3. lmdb, 0 workers: __getitems__ 3,000 vs __getitem__ 1,000 samples/s (×3.00)" == x for x in lines)
    assert any(x.startswith("4. cold cache:") and "(×2.00)" in x for x in lines)


def test_no_clear_growth_is_said_as_such():
    flat = {"list": {"main": 0.0, "worker0": 1.0}, "numpy": {"main": 0.0, "worker0": 0.9}}
    assert "did not show a clear copy-on-access growth" in R.readings(flat, _ldf(), _sdf(), _bdf(), _rdf(), 10)[0]


def test_titles_state_the_findings():
    assert R.memory_title(GROWTH) == ("Worker memory over one epoch: +40.0 MiB with a list of str, +0.5 MiB with a "
                                      "numpy S-array")
    assert R.first_batch_title(_ldf(), 2) == "Later epochs' first batch: 500 ms restarting 2 workers, 50 ms persistent"
    assert "25% of batches wait" in R.stall_title(_sdf(), 4, 2) and "prefetch_factor 1, 2" in R.stall_title(_sdf(), 4, 2)
    assert "×3.00–×6.00 the per-sample fetch" in R.fetch_title(_bdf(), 64)
    assert R.shard_title(_rdf(), 2) in ("Tar shards ÷ random per-sample files: ×4.00 warm, ×2.00 cold",
                                        "Tar shards ÷ random per-sample files: ×2.00 cold, ×4.00 warm")


def test_figures_draw_one_bar_per_setting():
    fig, (a, b) = plt.subplots(1, 2)
    R.plot_fetch(a, _bdf())
    R.plot_shards(b, _rdf())
    assert len(a.patches) == 8 and len(a.get_xticklabels()) == 4      # 2 formats × 2 worker counts × 2 fetches
    assert len(b.patches) == 4 and len(a.get_legend().get_texts()) == 2
    plt.close(fig)


def test_payload_keeps_the_claims_keys_and_is_json():
    P = SimpleNamespace(profile="quick", num_workers=2, batch_size=64, n_items=10)
    p = R.payload(P, GROWTH, _ldf(), _sdf(), _bdf(), _rdf(), True, {"dropped": False})
    assert p["batched_fetch"]["lmdb/__getitems__/w0"] == 3000.0
    assert p["sharded_reads"][f"{R.SHARDS}/warm"] == 4000.0 and p["stall_samples_per_s"] == {1: 500.0, 2: 500.0}
    assert "restarted/epoch0" in p["first_batch_s"]
    json.dumps(p)
