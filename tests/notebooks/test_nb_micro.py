"""Notebooks 03 (pinned memory), 04 (print), 06 (decoders), 07 (collate) as nbval ran them
(smoke, see nbrun.py): what each recorded. Their library: tests/unit/test_micro_costs.py."""

from __future__ import annotations

import pytest
import torch

from feedlab.experiments import print_overhead as PO
from feedlab.experiments import totensor_vs_fast_collate as TC
from feedlab.report.claims import claims_for

from nbrun import recorded, smoke

pytestmark = pytest.mark.notebook
CUDA = torch.cuda.is_available()


def test_nb_03_pinned_memory():
    payload, df, out = recorded("03_pinned_memory_by_input_size")
    P = smoke("03_pinned_memory_by_input_size")
    assert payload["input_sizes"] == P["input_sizes"] and payload["batch_sizes"] == P["batch_sizes"]
    assert payload["cuda"] == CUDA and payload["host_memcpy_gbps"] > 0
    coll = df[(df.variant == "collate") & (df.metric == "ms_per_batch")]
    assert sorted(coll.input_size.unique()) == sorted(P["input_sizes"]) and (coll.value > 0).all()
    assert (coll.groupby("input_size").size() >= 2).all()  # repeats per setting
    if not CUDA:
        assert payload["not_measured"] and not payload["pin_supported"]
        assert payload["not_measured"] == sorted(payload["not_measured"])  # one order, run after run
        assert not df.variant.isin(["pinned", "pageable", "pin"]).any()
    assert (out / "copy_bandwidth.png").is_file()


def test_nb_04_print_overhead():
    payload, df, out = recorded("04_print_overhead")
    P = smoke("04_print_overhead")
    assert payload["unbuffered"] == P["unbuffered"] and payload["child_sinks"] == P["child_sinks"]
    ms = df[df.metric == "ms_per_batch"]
    assert set(ms.variant) == set(PO.MODES) and (ms.value > 0).all()
    here = ms[ms["where"] == "in_process"]
    assert set(here.sink) == {"jupyter"}
    child = ms[ms["where"] == "child"]
    assert set(child.sink) == set(P["child_sinks"])
    # PYTHONUNBUFFERED as the child saw it: "1" or "" (read back as NaN)
    assert set(child.pythonunbuffered.fillna(0).astype(int)) == {int(bool(u)) for u in P["unbuffered"]}
    assert (here.groupby("variant").size() == P["repeats"]).all()
    assert (child.groupby("variant").size() == P["repeats"] * len(P["child_sinks"]) * len(P["unbuffered"])).all()
    assert all(f["none_ms"] > 0 for f in payload["per_sink"].values())


def test_nb_06_decode_backends():
    payload, df, out = recorded("06_decode_backends")
    P = smoke("06_decode_backends")
    assert payload["sizes"] == P["sizes"] and payload["limit"] == P["limit"]
    dec = df[(df.op == "decode") & (df.metric == "img_per_s")]
    assert (dec.value > 0).all()
    want = {"jpeg_native", "png_sr"} | {f"{c}_{s}" for c in ("jpeg", "png") for s in P["sizes"]}
    assert want <= set(dec.image_set)
    import pandas as pd

    av = pd.read_csv(out / "availability.csv")
    from feedlab.decode import BACKENDS

    assert set(BACKENDS) | {"tjbench (C)"} <= set(av.backend)  # nothing dropped silently
    for b in av[~av.available].backend:
        assert b in payload["unavailable_reasons"]
    assert payload["best_same_image_img_per_s"] > 0
    if payload["tjbench_img_per_s"] is not None:
        assert payload["best_over_tjbench"] > 0
    # whole-machine throughput: the best one-core decoder on every core, each pass the smoke count of images
    allc = df[(df.op == "decode_all_cores") & (df.metric == "img_per_s")]
    assert len(allc) and (allc.value > 0).all() and (allc.images == 64).all()
    thr = payload["nvjpeg_vs_all_cores"]
    assert thr["ratio"] is None and "not tested fairly here" in thr["text"]   # no GPU, or too few images


def test_nb_07_totensor_vs_fast_collate():
    payload, df, out = recorded("07_totensor_vs_fast_collate")
    P = smoke("07_totensor_vs_fast_collate")
    size = 96 if 96 in P["image_sizes"] else P["image_sizes"][-1]
    bs = 128 if 128 in P["batch_sizes"] else P["batch_sizes"][-1]
    assert payload["reference"] == f"{bs}x{size}x{size}x3"
    ms = df[df.metric == "ms_per_batch"]
    assert set(ms.variant) == set(TC.VARIANTS) | set(TC.PIECES)
    assert (ms.value > 0).all() and set(ms.batch_size) == set(P["batch_sizes"])
    assert all(v > 0 for v in payload["speedup"].values())
    pieces, shares = payload["stock_piece_ms"], payload["stock_piece_share"]
    assert shares["transpose"] == pytest.approx(pieces["transpose"] / sum(pieces.values()))
    # the pieces timed alone account for the whole stock path within a factor 3
    assert 1 / 3 < sum(pieces.values()) / payload["stock_ms"] < 3
    assert set(payload["verdicts"]) == {c.id for c in claims_for("07_totensor_vs_fast_collate")}
