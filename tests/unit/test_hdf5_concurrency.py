"""08_hdf5_concurrency: the mismatch counter, the per-worker readers (the notebook: tests/notebooks)."""

from __future__ import annotations

import numpy as np
import pytest
from torch.utils.data import Dataset

from feedlab.experiments import hdf5_concurrency as H


class Lying(Dataset):
    """Returns the reference, except: wrong pixels for ``wrong``, another sample's
    data for ``swapped``, and raises for ``raise_at``."""

    def __init__(self, reference, wrong=(), swapped=(), raise_at=None):
        self.lr, self.hr = reference
        self.wrong = set(wrong)
        self.swapped = set(swapped)
        self.raise_at = raise_at

    def __len__(self):
        return len(self.lr)

    def __getitem__(self, i):
        if i == self.raise_at:
            raise ValueError(f"deliberate failure at {i}")
        lr, hr = self.lr[i].copy(), self.hr[i].copy()
        if i in self.wrong:
            hr[0, 0, 0] ^= 0xFF  # one byte differs
        if i in self.swapped:
            j = (i + 1) % len(self)
            lr, hr = self.lr[j].copy(), self.hr[j].copy()
        return lr, hr


@pytest.fixture(scope="module")
def reference():
    rng = np.random.default_rng(1)
    lr = rng.integers(0, 256, (40, 4, 4, 3), dtype=np.uint8)
    hr = rng.integers(0, 256, (40, 8, 8, 3), dtype=np.uint8)
    return lr, hr


@pytest.mark.parametrize("workers", [0, 2])
def test_counts_every_lie(reference, workers):
    ds = Lying(reference, wrong={3, 17}, swapped={5, 30, 31})
    checks = H.check_loader(ds, reference, num_workers=workers, epochs=2, batch_size=7)
    assert len(checks) == 2
    for c in checks:
        assert c.wrong == 5 and c.right == 35 and c.missing == 0 and not c.error
        assert sorted(c.wrong_indices) == [3, 5, 17, 30, 31]
        assert not c.all_right


def test_honest_dataset_is_all_right(reference):
    c, = H.check_loader(Lying(reference), reference, num_workers=2, epochs=1, batch_size=8)
    assert c.all_right and c.right == 40 and c.delivered == 40


def test_error_ends_epoch_and_counts_missing(reference):
    checks = H.check_loader(Lying(reference, raise_at=11), reference, num_workers=0, epochs=2, batch_size=4)
    for c in checks:
        assert c.error.startswith("ValueError") and "deliberate" in c.error
        assert c.missing > 0 and c.right + c.missing == 40
        assert not c.all_right


@pytest.mark.parametrize("reader", ["hdf5_per_worker", "lmdb_per_worker"])
def test_per_worker_readers_return_every_sample(sr_root, reader):
    ref = H.reference_arrays(sr_root)
    ds = H.open_reader(sr_root, reader)
    H.touch_in_parent(ds)  # the parent has used it before the fork
    checks = H.check_loader(ds, ref, num_workers=2, start_method="fork", epochs=2, batch_size=8)
    assert all(c.all_right for c in checks), [(c.wrong, c.missing, c.error) for c in checks]


def test_readers_under_test_skip_the_checksum_check(sr_root):
    """A wrong sample must come back for check_loader to count, not raise in the reader."""
    for reader in ("hdf5_parent", "hdf5_per_worker", "lmdb_parent", "lmdb_per_worker", "lmdb_reopen_naive"):
        assert H.open_reader(sr_root, reader).verify is False, reader
    assert H.open_reader(sr_root, "lmdb_per_worker", verify=True).verify is True


def test_per_worker_reader_under_spawn(sr_root):
    ref = H.reference_arrays(sr_root)
    c, = H.check_loader(H.open_reader(sr_root, "lmdb_per_worker"), ref, num_workers=2,
                        start_method="spawn", epochs=1, batch_size=16)
    assert c.all_right, c.error


def test_pickle_check_names_the_spawn_error(sr_root):
    out = H.pickle_check(sr_root, ["hdf5_parent", "hdf5_per_worker", "lmdb_parent", "lmdb_per_worker"])
    assert out["hdf5_per_worker"] == "ok" and out["lmdb_per_worker"] == "ok"
    assert out["hdf5_parent"].startswith("TypeError")
    assert out["lmdb_parent"].startswith("TypeError")


def test_naive_lmdb_reopen_fails_after_parent_use(sr_root):
    """Documents why lmdb_store closes the inherited env: without it a worker cannot reopen."""
    ref = H.reference_arrays(sr_root)
    ds = H.open_reader(sr_root, "lmdb_reopen_naive")
    H.touch_in_parent(ds)
    c, = H.check_loader(ds, ref, num_workers=2, start_method="fork", epochs=1, batch_size=8)
    if c.all_right:
        pytest.skip("this py-lmdb allows a second open of one env per process")
    # py-lmdb refuses a second open of one env in a process; feedlab names the store and sample
    assert "already open" in c.error or ("cannot open" in c.error and "lmdb" in c.error), c.error


class _Unpicklable(Dataset):
    """A handle spawn cannot send to a worker (what a parent-opened HDF5/LMDB handle is)."""

    def __init__(self, reference):
        import threading

        self.lr, self.hr = reference
        self.lock = threading.Lock()

    def __len__(self):
        return len(self.lr)

    def __getitem__(self, i):
        return self.lr[i], self.hr[i]


def test_spawn_pickle_failure_is_recorded_once_without_torchs_warning(reference):
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        c, = H.check_loader(_Unpicklable(reference), reference, num_workers=1, start_method="spawn", epochs=1)
    assert c.error and "pickle" in c.error.lower() and c.missing == len(reference[0])
    assert not [w for w in seen if "Got pickle error" in str(w.message)]


def test_error_lines_name_files_relative_to_the_repository():
    from feedlab.paths import REPO_ROOT

    long = "x" * 280
    e = H._error_name(ValueError(f"{long} lmdb: sample 3 ({REPO_ROOT}/data/sr64/lmdb)"))
    assert str(REPO_ROOT) not in e and "/work/" not in e
