"""Torch's worker-count warnings (one per DataLoader the doctor builds) are collected into one line (#46);
every other warning passes through as before."""

from __future__ import annotations

import warnings

import pytest
from torch.utils.data import DataLoader

from feedlab.doctor.__main__ import worker_warnings_collected


def test_worker_count_warnings_become_one_line():
    said: list[str] = []
    with pytest.warns(UserWarning) as outside:
        with worker_warnings_collected(say=said.append) as seen:
            for _ in range(4):
                DataLoader(list(range(10)), num_workers=64)   # more than any test machine's cores: torch warns
            warnings.warn("another warning", UserWarning)
    passed = [str(w.message) for w in outside]
    assert len(seen) == 4 and passed == ["another warning"]
    assert len(said) == 1 and said[0].startswith("note: torch warned 4 time(s) about the worker count: This "
                                                 "DataLoader will create 64 worker processes in total.")
    assert warnings.showwarning.__name__ != "collect"                        # put back afterwards
