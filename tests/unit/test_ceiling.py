"""The copy ceiling: the best of several methods, chosen from timings (fakes here, never asserted)."""

import numpy as np
import pytest

from feedlab import collate as C


def test_pick_ceiling_takes_each_methods_best_run_then_the_fastest():
    timings = {"numpy_copy": [0.30, 0.20, 0.25], "gather": [0.22, 0.21], "readinto": [0.5, 0.18, 0.9],
               "mmap_slice": []}
    c = C.pick_ceiling(timings, nbytes=10**9, samples=1000)
    assert c["method"] == "readinto" and c["best_s"] == 0.18
    assert c["per_method"] == {"numpy_copy": 0.20, "gather": 0.21, "readinto": 0.18}
    assert c["gb_s"] == pytest.approx(1 / 0.18) and c["samples_per_s"] == pytest.approx(1000 / 0.18)
    with pytest.raises(ValueError, match="no method"):
        C.pick_ceiling({"gather": []}, 1)


class FakeClock:
    """Each pass 'takes' the time the script says for its method, in call order."""

    def __init__(self, per_pass):
        self.per_pass, self.t, self.calls = list(per_pass), 0.0, 0

    def __call__(self):
        self.calls += 1
        if self.calls % 2 == 0:  # the end of a pass
            self.t += self.per_pass.pop(0)
        return self.t


def _sides(tmp_path, n=10):
    rng = np.random.default_rng(0)
    out = []
    for name, shape in (("lr", (n, 2, 2, 3)), ("hr", (n, 4, 4, 3))):
        a = rng.integers(0, 256, shape, np.uint8)
        p = tmp_path / f"{name}.npy"
        np.save(p, a)
        out.append((a, str(p), int(np.load(p, mmap_mode="r").offset)))
    return out


def test_copy_ceiling_times_every_method_interleaved_and_picks_by_best_run(tmp_path):
    sides = _sides(tmp_path)
    # rounds of (numpy_copy, gather, readinto, mmap_slice); mmap_slice has the single best run
    clock = FakeClock([3, 2, 4, 5] + [3, 2, 4, 1] + [3, 2, 4, 5])
    c = C.copy_ceiling(sides, batch_size=4, repeats=3, warmup=1, clock=clock)
    assert list(c["runs"]) == list(C.CEILING_METHODS)
    assert c["runs"]["mmap_slice"] == [5, 1, 5] and c["method"] == "mmap_slice"
    assert c["bytes"] == sum(a.nbytes for a, _p, _o in sides)


def test_without_files_only_the_ram_methods_run(tmp_path):
    sides = [(a, None, 0) for a, _p, _o in _sides(tmp_path)]
    c = C.copy_ceiling(sides, batch_size=3, repeats=1, warmup=0)
    assert set(c["runs"]) == {"numpy_copy", "gather"}


def test_every_method_copies_the_same_bytes(tmp_path):
    sides = _sides(tmp_path, n=9)
    passes, close, bufs = C._ceiling_passes(sides, 4, np.arange(9))
    try:
        assert set(passes) == set(C.CEILING_METHODS)
        for m, fn in passes.items():
            for b in bufs:
                b.fill(0)
            fn()  # the last, partial batch is sample 8 alone: in slot 0, the rest of the batch 5..7
            for (a, _p, _o), b in zip(sides, bufs):
                np.testing.assert_array_equal(b[0], a[8], err_msg=m)
                np.testing.assert_array_equal(b[1:4], a[5:8], err_msg=m)
    finally:
        close()
