"""doctor.split / doctor.measure: a sample that fails a stage the doctor times is one line naming its file,
relative to the folder given, and the stage (issue 47: a 16-bit PNG's note named no file)."""

from __future__ import annotations

import numpy as np
from leftovers import nothing_left
from PIL import Image

from feedlab import pipeline as pl
from feedlab.doctor.measure import Doctor, Effort


def test_a_16_bit_png_the_transform_cannot_take_is_named_with_its_stage(tmp_path):
    root = tmp_path / "photos"
    (root / "deep").mkdir(parents=True)
    for k in range(3):
        Image.fromarray(np.full((40, 40, 3), k, np.uint8)).save(root / f"p{k}.png")
    Image.fromarray(np.full((40, 40), 40000, np.uint16)).save(root / "deep" / "d16.png")
    with nothing_left(tmp_path / "tmp", 120, "the doctor's stage split of a 16-bit PNG"):
        doc = Doctor(root, pl.PipelineSpec(format="images", decode="torchvision", transform="default", batch_size=2),
                     max_workers=0, effort=Effort(repeats=1, warmup=1, samples=8))
        try:
            doc.measure_items("images", "torchvision")
        except ValueError as exc:
            line = str(exc)
        else:
            line = ""
    assert "\n" not in line and "deep/d16.png under " in line and "16-bit" in line, line
