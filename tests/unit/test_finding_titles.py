"""The finding titles of notebooks 06, 07, 08, 11, 13 and 14 say what the drawn medians show."""

from __future__ import annotations

import pandas as pd

from feedlab.experiments import _finding_titles as T


def _s(rows):
    return pd.DataFrame(rows)


def test_fastest_vs_names_the_winner_and_the_baseline():
    s = _s([{"variant": "pil", "median": 100.0}, {"variant": "simplejpeg", "median": 250.0},
            {"variant": "cv2", "median": 80.0}])
    assert T.fastest_vs(s, "variant", "pil", "JPEG") == "simplejpeg: ×2.5 pil, JPEG"
    assert T.fastest_vs(s, "variant", None) == "simplejpeg: ×3.1 cv2"           # no baseline: the slowest
    assert T.fastest_vs(s[s.variant == "pil"], "variant") == "pil: the only one measured"
    assert T.fastest_vs(s.iloc[0:0], "variant", what="x") == "x: nothing measured"


def test_decode_and_pillow_titles():
    S = _s([{"op": "decode", "image_set": "jpeg_64", "variant": "pil", "median": 100.0},
            {"op": "decode", "image_set": "jpeg_64", "variant": "simplejpeg", "median": 300.0},
            {"op": "decode", "image_set": "png_64", "variant": "pil", "median": 50.0}])
    assert T.decode_title(S, ["jpeg_64"], "JPEG").startswith("simplejpeg: ×3 pil")
    part = _s([{"variant": "pillow", "median": 10.0}, {"variant": "pillow-simd", "median": 25.0}])
    assert T.simd_title(part, "worker_decode_resize") == "decode + resize: Pillow-SIMD\n×2.5 Pillow"
    assert "Pillow only" in T.simd_title(part[part.variant == "pillow"], "worker_resize")
    pil = part.replace({"variant": {"pillow": "pil"}})  # 06's rows name Pillow "pil"
    assert T.simd_title(pil, "worker_decode") == "decode: Pillow-SIMD\n×2.5 Pillow"
    same = _s([{"variant": "tjbench (C)", "median": 1000.0}, {"variant": "simplejpeg", "median": 800.0}])
    assert "0.80 of C" in T.c_ceiling_title(same, 512)
    assert "unavailable" in T.c_ceiling_title(same[same.variant != "tjbench (C)"], 512)
    assert "×4" in T.out_of_band_title(_s([{"median": 50.0}]), _s([{"median": 200.0}]), 64)


def test_collate_split_and_hdf5_titles():
    assert T.collate_title(0.5, 2.0, 128, 96, 1).startswith("FastCollate: ×4 faster")
    assert "Collate time" in T.collate_title(float("nan"), 2.0, 128, 96, 1)
    assert T.split_title({"ToTensor": 0.7, "stack": 0.3}, 64).startswith("ToTensor: 70%")
    tab = _s([{"start_method": "fork", "opened_in_parent": True, "all_right": False},
              {"start_method": "fork", "opened_in_parent": True, "all_right": True},
              {"start_method": "fork", "opened_in_parent": False, "all_right": True}])
    assert T.wrong_samples_title(tab) == ("fork + a handle opened in the parent: 1 of 2 setting(s) wrong; "
                                          "opened per worker: 1 of 1 right")


def test_hygiene_peers_and_ranks_titles():
    pw = _s([{"persistent_workers": p, "epoch": e, "median": m} for p, e, m in
             ((True, 0, 1.0), (True, 1, 0.01), (False, 0, 1.0), (False, 1, 0.5))])
    pf = _s([{"prefetch_factor": f, "median": m} for f, m in ((1, 90.0), (2, 100.0), (8, 120.0))])
    t = T.hygiene_title(pw, pf)
    assert "×50 sooner" in t and "prefetch_factor 8: ×1.2 the default 2" in t
    rat = {"sr": {"ratio": 0.5, "best_peer": {"label": "FFCV", "num_workers": 2.0}}}
    assert T.peers_title(rat, "sr", "SR") == "SR:\nfeedlab best ×0.5 the best peer, FFCV (2 workers)"
    assert "no ratio" in T.peers_title(rat, "cls", "JPEG")
    agg = _s([{"ranks": 1, "workers_per_rank": 2, "median": 100.0}, {"ranks": 2, "workers_per_rank": 1, "median": 150.0}])
    assert T.ranks_title(agg) == "2 rank(s) × 1 worker: ×1.5 1 rank at its best"
    assert "did not pay" in T.ranks_title(agg.assign(median=[150.0, 100.0]))
    assert T.remote_title([{"pipeline": "heavy", "ratio": 1.3}]) == "heavy: remote ×1.3 the DataLoader"
