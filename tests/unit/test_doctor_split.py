"""feedlab.doctor.split: a sample that fails a stage is named in one line, once."""

from __future__ import annotations

import numpy as np
from PIL import Image

from feedlab.doctor.split import open_split


def test_a_bad_file_with_a_newline_in_its_name_is_named_once_not_wrapped_twice(tmp_path):
    """attack52 B06: the decode error already named 'bad\\nname.png' (quoted: the name holds a newline), the
    split did not see the raw name in it and wrapped it again ("the decode of … failed: ValueError: images:
    cannot decode … ; convert or remove it"): two advices, the name twice."""
    Image.fromarray(np.full((8, 8, 3), 7, np.uint8)).save(tmp_path / "a.png")
    (tmp_path / "bad\nname.png").write_bytes((tmp_path / "a.png").read_bytes()[:40])   # truncated
    split = open_split(tmp_path, "images", "pil", transform="none")
    chain = [("read", split.read), ("decode", split.decode)]
    idx = list(range(len(split)))
    try:
        for i in idx:
            split.decode(split.read(i))
        raise AssertionError("the truncated file decoded")
    except ValueError as exc:
        err = split.named_failure(idx, chain, exc)
    line = str(err)
    assert "\n" not in line and line.count("bad\\nname.png") == 1, line
    assert "the decode of" not in line and "convert or remove it" not in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "bad\nname.png"]
