"""The tuner against a small /dev/shm: one line before any worker starts (feedlab.tuner.search)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from feedlab.pipeline import shm
from feedlab.tuner import search


def test_the_tuner_out_of_shared_memory_is_one_line_before_its_probe_starts_a_worker(monkeypatch):
    """attack52 M03: `SHM=1M python -m feedlab.tuner --data data/sr64-smoke` ended in a 63-line torch traceback
    ("unable to allocate shared memory … No space left on device") from the probe's one worker, and left two
    torch_* files in /dev/shm."""
    monkeypatch.setattr(shm, "shm_free_bytes", lambda path=shm.SHM_DIR: 1 << 20)   # a 1 MiB /dev/shm
    said = []
    make = lambda: DataLoader(TensorDataset(torch.zeros(128, 3, 64, 64)), batch_size=64)   # noqa: E731 - 3 MiB batches
    with pytest.raises(shm.SharedMemoryError) as err:
        search.tune(make, None, 5, device="cpu", deadline_s=10, log=said.append)
    line = str(err.value)
    assert "\n" not in line and "1 MiB free" in line and "set_sharing_strategy('file_system')" in line, line
    assert said == []   # refused before the probe (nothing started)


def test_the_tuner_s_workers_running_out_of_shared_memory_anyway_give_one_line_and_leave_no_torch_files(
        monkeypatch, tmp_path):
    """attack52 M04: with room for the estimate (uint8 samples) but not for the float batches ToTensor makes, the
    probe's worker ran out anyway: a torch traceback and torch_* files left. The tuner's loaders are
    CheckedDataLoaders: one SharedMemoryError line, their files swept."""
    from feedlab import stage
    from feedlab.tuner import candidates, probe

    built = []
    real = stage.rebuild
    monkeypatch.setattr(stage, "rebuild", lambda *a, **k: built.append(k.get("loader_class")) or real(*a, **k))
    base = DataLoader(TensorDataset(torch.zeros(8, 3)), batch_size=4)
    assert isinstance(candidates.build(base, {"num_workers": 1}), shm.CheckedDataLoader)
    try:   # the probe's one-worker pass builds its loader the same way (what it records is not this test's)
        probe._worker_pass(base, SimpleNamespace(), 10)
    except AttributeError:
        pass
    assert built == [shm.CheckedDataLoader, shm.CheckedDataLoader], built
    one = real(base, num_workers=1, loader_class=shm.CheckedDataLoader)
    assert isinstance(one, shm.CheckedDataLoader) and [b[0].shape[0] for b in one] == [4, 4]
