"""Resize once ahead, measured on a sample (#46): decode + transform at the stored size against the same images
re-encoded at the training size, with both numbers; nothing where the images already are the training size."""

from __future__ import annotations

import numpy as np
from PIL import Image

from feedlab import formats
from feedlab.doctor.ahead import ahead_words, resize_ahead
from feedlab.doctor.answer import resize_line
from feedlab.doctor.split import open_split


def _photos(root, shape):
    root.mkdir()
    rng = np.random.default_rng(0)
    for k in range(4):
        Image.fromarray(rng.integers(0, 255, (*shape, 3), dtype=np.uint8)).save(root / f"{k}.jpg", quality=90)
    return open_split(root, "images", formats.FORMATS["images"].default_decode, "default", crop=32)


def test_resize_ahead_is_measured_with_both_sizes(tmp_path):
    r = resize_ahead(_photos(tmp_path / "big", (240, 320)), [0, 1, 2, 3], warmup=1, repeats=2)
    assert r["stored_size"] == [240, 320] and r["train_size"] == [32, 32] and r["samples"] == 4
    assert r["stored_s"] > r["ahead_s"] > 0 and r["gain"] > 1.5
    words = ahead_words(r)
    assert "at the stored 240×320" in words and "at the training 32×32" in words and "measured on 4 samples" in words
    line = resize_line({"verdict": "data-bound", "bound_stage": "decode", "resize_ahead": dict(r, loop_gain_predicted=2.0)})
    assert line.startswith("to try: resize once ahead") and "×2.00 predicted from the stage costs (not measured)" in line


def test_images_already_at_the_training_size_say_nothing(tmp_path):
    assert resize_ahead(_photos(tmp_path / "small", (32, 32)), [0, 1], warmup=0, repeats=1) is None
