"""feedlab.peers: the registry, availability reasons, the output checks, the readings, --peer."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from feedlab import peers
from feedlab.peers.base import Peer, Source, Spec, rrc_box
from feedlab.peers.check import EpochCounter, to_nhwc_uint8, verify, verify_cls, verify_sr

EXPECTED = {"torch_stock", "feedlab_best", "webdataset", "litdata", "mosaic_streaming", "torchdata_nodes",
            "hf_datasets", "ffcv", "dali"}


def test_registry_names_every_contender_with_a_module():
    import importlib

    assert set(peers.names()) == EXPECTED
    for name in peers.names():
        p = peers.get(name)
        mod = importlib.import_module(f"feedlab.peers.{p.module}")  # no third-party import at module level
        assert callable(mod.convert) and callable(mod.loader), name
        assert p.shuffle and p.parallelism and p.install, name


def test_unknown_contender_names_the_choices():
    with pytest.raises(KeyError, match="feedlab_best"):
        peers.get("nope")


def test_unavailable_reason_names_the_import_error_and_the_install_line():
    p = Peer("ghost", "Ghost", "torch_stock", ("feedlab_no_such_module_xyz",), "pip install ghost-loader")
    ok, why = p.check()
    assert not ok
    assert "feedlab_no_such_module_xyz" in why and "ModuleNotFoundError" in why and "pip install ghost-loader" in why
    q = Peer("picky", "Picky", "torch_stock", ("torch",), "pip install picky", extra_check=lambda: "needs a GPU")
    assert q.check() == (False, "needs a GPU")
    avail = peers.availability()
    assert set(avail) == EXPECTED
    assert avail["feedlab_best"] == (True, "")
    for ok, why in avail.values():
        assert ok or why  # never unavailable without a reason


@pytest.fixture()
def sr_source(sr_root):
    return Source("sr", sr_root, 20)


def _batches(lr, hr, bs=8):
    return [(torch.from_numpy(lr[i:i + bs]), torch.from_numpy(hr[i:i + bs])) for i in range(0, len(lr), bs)]


def test_sr_check_accepts_the_source_in_any_order_and_layout(sr_source):
    order = np.random.default_rng(1).permutation(sr_source.n)
    lr, hr = sr_source.lr[order], sr_source.hr[order]
    nchw = [(a.permute(0, 3, 1, 2), b.permute(0, 3, 1, 2)) for a, b in _batches(lr, hr)]
    assert verify_sr(nchw, sr_source)["ok"]
    as_float = [(a.float() / 255, b.float() / 255) for a, b in _batches(lr, hr)]  # ToTensor's output
    assert verify_sr(as_float, sr_source)["ok"]


def test_sr_check_catches_dropped_repeated_and_corrupted_samples(sr_source):
    lr, hr = sr_source.lr.copy(), sr_source.hr.copy()
    short = verify_sr(_batches(lr[:-1], hr[:-1]), sr_source)
    assert not short["ok"] and short["missing"] == 1
    padded = verify_sr(_batches(np.concatenate([lr, lr[:1]]), np.concatenate([hr, hr[:1]])), sr_source)
    assert not padded["ok"] and padded["repeated"] == 1
    swapped = hr.copy()
    swapped[[0, 1]] = swapped[[1, 0]]  # lr/hr no longer pairs: same count, wrong content
    bad = verify_sr(_batches(lr, swapped), sr_source)
    assert not bad["ok"] and bad["missing"] == 2 and bad["unexpected"] == 2
    lr[3, 0, 0, 0] ^= 1
    assert not verify_sr(_batches(lr, hr), sr_source)["ok"]


def test_cls_check_catches_wrong_images_and_labels(cls_root):
    from feedlab.peers.check import reference_image

    src = Source("cls", cls_root)
    size = 24
    imgs = np.stack([reference_image(src, i, size) for i in range(src.n)])
    ids = torch.arange(src.n)
    good = [(torch.from_numpy(imgs), torch.from_numpy(src.labels), ids)]
    assert verify_cls(good, src, size)["ok"]
    shuffled = imgs[::-1].copy()  # right ids and labels, other images
    bad = verify_cls([(torch.from_numpy(shuffled), torch.from_numpy(src.labels), ids)], src, size)
    assert not bad["ok"] and bad["not_nearest"] > 0
    labels = src.labels.copy()
    labels[0] = 1 - labels[0]
    assert verify_cls([(torch.from_numpy(imgs), torch.from_numpy(labels), ids)], src, size)["wrong_label"] == 1
    fewer = verify_cls([(torch.from_numpy(imgs[:-1]), torch.from_numpy(src.labels[:-1]), ids[:-1])], src, size)
    assert not fewer["ok"] and fewer["missing"] == 1


def test_epoch_counter_fails_a_short_or_repeating_epoch():
    c = EpochCounter("cls")
    c.add((torch.zeros(4, 3, 8, 8), torch.zeros(4), torch.tensor([0, 1, 2, 2])))
    r = c.result(4)
    assert r["samples"] == 4 and r["distinct_ids"] == 3 and not r["ok"]


def test_to_nhwc_rejects_values_that_do_not_fit():
    with pytest.raises(ValueError, match="outside 0..255"):
        to_nhwc_uint8(torch.full((1, 2, 2, 3), 300, dtype=torch.int64))


@pytest.mark.parametrize("name", ["torch_stock", "feedlab_best"])
@pytest.mark.parametrize("workers", [0, 1])
def test_builtin_contenders_pass_their_checks(name, workers, sr_root, cls_root, tmp_path):
    p = peers.get(name)
    for src in (Source("sr", sr_root, 20), Source("cls", cls_root)):
        work = tmp_path / src.key() / name
        p.convert(src, work)
        out = verify(p, src, work, Spec(src.kind, batch_size=6, workers=workers, size=24))
        assert out["ok"], (src.kind, out)


def test_rrc_box_stays_inside_and_covers_the_scale_range():
    rng = np.random.default_rng(0)
    areas = []
    for _ in range(500):
        top, left, h, w = rrc_box(120, 200, rng)
        assert 0 <= top and top + h <= 120 and 0 <= left and left + w <= 200
        areas.append(h * w / (120 * 200))
    assert min(areas) < 0.2 and max(areas) > 0.6  # at most 120 x 160 fits the aspect range


def _tab(fb, peer, fb_cpu=1.0, peer_cpu=0.5):
    rows = []
    for name, label, m, cpu in (("feedlab_best", "feedlab best", fb, fb_cpu), ("dali", "DALI", peer, peer_cpu)):
        rows.append({"kind": "sr", "contender": name, "label": label, "available": True, "reason": "",
                     "check_ok": True, "run_ok": True, "num_workers": 0, "samples_per_s": m, "q25": 0.95 * m,
                     "q75": 1.05 * m, "cpu_ms_per_sample": cpu, "first_batch_s": 0.1, "peak_rss_mib": 100.0,
                     "check": "x"})
    rows.append({"kind": "sr", "contender": "ffcv", "label": "FFCV", "available": False, "reason": "no wheel",
                 "check_ok": None, "num_workers": None})
    return pd.DataFrame(rows)


def test_ratio_and_readings_are_computed_from_the_table():
    from feedlab.peers.report import ratios, readings

    tab = _tab(2000.0, 1000.0)
    r = ratios(tab)["sr"]
    assert r["ratio"] == pytest.approx(2.0) and r["verdict"].startswith("met")
    lose = _tab(500.0, 1000.0)
    rat = ratios(lose)
    assert rat["sr"]["ratio"] == pytest.approx(0.5) and rat["sr"]["verdict"] == "not met"
    text = " ".join(readings(rat, lose))
    assert "less CPU per sample" in text and "FFCV" in text and "no wheel" in text
    close = ratios(_tab(1000.0, 1020.0))["sr"]
    assert close["verdict"].startswith("within")


def test_bench_peer_flag(sr_root, capsys, tmp_path, monkeypatch):
    from feedlab import bench

    monkeypatch.setattr("feedlab.paths.DATA_DIR", tmp_path)
    rc = bench.main(["--peer", "feedlab_best", "--data", str(sr_root), "--samples", "16", "--batch-size", "8",
                     "--workers", "0", "--epochs", "2", "--warmup", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "samples/s" in out and "output check: ok" in out
    rc = bench.main(["--peer", "feedlab_best", "--data", str(tmp_path / "missing")])
    err = capsys.readouterr().err
    assert rc == 2 and "data_prep" in err and len(err.strip().splitlines()) == 1
