"""Storage formats: bit-exact round trips, worker safety, chunk sampling, registry."""

from __future__ import annotations

import lmdb
import numpy as np
import pytest
import torch
from conftest import SR_COUNT, SR_PATCH, SR_SCALE
from torch.utils.data import DataLoader, Dataset

from feedlab import formats as F
from feedlab.formats import lmdb_store
from feedlab.formats.chunks import ChunkBatchSampler, ChunkSampler, group_by_chunk

HR = (SR_PATCH, SR_PATCH, 3)
LR = (SR_PATCH // SR_SCALE, SR_PATCH // SR_SCALE, 3)


def _random_samples(n=20, seed=1):
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, 256, LR, dtype=np.uint8), rng.integers(0, 256, HR, dtype=np.uint8)) for _ in range(n)]


@pytest.mark.parametrize("fmt", F.SR_FORMATS)
def test_round_trip_bit_exact(sr_root, sr_reference, fmt):
    ds = F.open_dataset(sr_root, fmt)
    assert len(ds) == SR_COUNT
    for i, (want_lr, want_hr) in enumerate(sr_reference):
        lr, hr = ds[i]
        assert isinstance(lr, np.ndarray) and lr.dtype == np.uint8 and hr.dtype == np.uint8
        assert lr.shape == LR and hr.shape == HR
        np.testing.assert_array_equal(lr, want_lr, err_msg=f"{fmt} lr {i}")
        np.testing.assert_array_equal(hr, want_hr, err_msg=f"{fmt} hr {i}")
    assert F.bytes_on_disk(sr_root, fmt) > 0


@pytest.mark.parametrize("fmt", F.SR_FORMATS)
def test_batched_paths_and_tensors(sr_root, sr_reference, fmt):
    ds = F.open_dataset(sr_root, fmt, as_tensor=True)
    lr, hr = ds[-1]
    assert isinstance(hr, torch.Tensor) and hr.dtype == torch.uint8 and tuple(hr.shape) == HR
    assert torch.equal(hr, torch.from_numpy(sr_reference[-1][1]))
    idx = [3, 40, 0, 17, 16, 47, 3]
    items = ds.__getitems__(idx)
    assert len(items) == len(idx)
    for (lr, hr), i in zip(items, idx):
        assert torch.equal(torch.as_tensor(lr), torch.from_numpy(sr_reference[i][0]))
        assert torch.equal(torch.as_tensor(hr), torch.from_numpy(sr_reference[i][1]))
    # read_batch fills preallocated buffers in place
    out = (np.zeros((10, *LR), np.uint8), np.zeros((10, *HR), np.uint8))
    lr_b, hr_b = ds.read_batch(idx, out=out)
    assert np.shares_memory(lr_b, out[0]) and np.shares_memory(hr_b, out[1])
    for k, i in enumerate(idx):
        np.testing.assert_array_equal(lr_b[k], sr_reference[i][0])
        np.testing.assert_array_equal(hr_b[k], sr_reference[i][1])
    with pytest.raises(IndexError):
        ds[SR_COUNT]


def test_lmdb_grows_map_from_far_too_small(tmp_path):
    samples = _random_samples(40)
    path = lmdb_store.write(tmp_path, samples, compress=True, map_size=4096, txn_samples=7)
    env = lmdb.open(str(path), readonly=True, lock=False)
    try:
        assert env.info()["map_size"] > 4096
        with env.begin() as txn:
            value = txn.get(lmdb_store.key(5))
        assert value[:4] == lmdb_store.MAGIC  # explicit header, not a pickle
    finally:
        env.close()
    ds = F.open_dataset(tmp_path, "lmdb")
    assert len(ds) == 40
    for i, (lr, hr) in enumerate(samples):
        got_lr, got_hr = ds[i]
        np.testing.assert_array_equal(got_lr, lr)
        np.testing.assert_array_equal(got_hr, hr)


def test_lmdb_header_layout():
    lr, hr = _random_samples(1)[0]
    raw = lmdb_store.encode_value(lr, hr, compress=False)
    comp, lr_shape, hr_shape, n = lmdb_store.decode_header(raw)
    assert (comp, lr_shape, hr_shape, n) == (0, LR, HR, lr.nbytes + hr.nbytes)
    assert len(raw) == lmdb_store.HEADER_SIZE + n
    assert lmdb_store.key(258) == b"\x00" * 6 + b"\x01\x02"


def _collect(loader):
    los, his = [], []
    for lr, hr in loader:
        los.append(lr)
        his.append(hr)
    return torch.cat(los), torch.cat(his)


@pytest.mark.parametrize("fmt", ["hdf5", "lmdb"])
def test_workers_return_the_right_samples(sr_root, sr_reference, fmt):
    ds = F.open_dataset(sr_root, fmt)
    order = torch.randperm(SR_COUNT, generator=torch.Generator().manual_seed(3)).tolist()
    ds[0]  # the parent reads first: each worker must still open its own handle
    F.open_dataset(sr_root, fmt)[1]  # a second dataset on the same files in one process
    loader = DataLoader(ds, batch_size=5, sampler=order, num_workers=2, multiprocessing_context="fork")
    lr, hr = _collect(loader)
    assert lr.shape == (SR_COUNT, *LR) and hr.dtype == torch.uint8
    for k, i in enumerate(order):
        assert torch.equal(lr[k], torch.from_numpy(sr_reference[i][0])), (fmt, i)
        assert torch.equal(hr[k], torch.from_numpy(sr_reference[i][1])), (fmt, i)


def test_zarr_chunk_batches_under_workers(sr_root, sr_reference):
    ds = F.open_dataset(sr_root, "zarr")
    assert ds.chunk_len == 16
    sampler = F.ZarrChunkSampler.for_dataset(ds, batch_size=8, seed=5)
    batches = list(sampler)
    sampler.set_epoch(0)
    loader = DataLoader(ds, batch_sampler=sampler, num_workers=2, multiprocessing_context="fork")
    lr, hr = _collect(loader)
    flat = [i for b in batches for i in b]
    for k, i in enumerate(flat):
        assert torch.equal(hr[k], torch.from_numpy(sr_reference[i][1]))


def test_hdf5_open_in_parent_opens_eagerly(sr_root):
    ds = F.open_dataset(sr_root, "hdf5", open_in_parent=True)
    assert ds._parent_file is not None
    ds.close()


@pytest.mark.parametrize("n,chunk,batch,drop_last", [(48, 16, None, False), (50, 16, 5, False),
                                                      (50, 16, 5, True), (7, 16, 3, False)])
def test_chunk_sampler_every_index_once(n, chunk, batch, drop_last):
    s = ChunkBatchSampler(n, chunk, batch_size=batch, shuffle=True, seed=11, drop_last=drop_last)
    epochs = []
    for _ in range(3):
        batches = list(s)
        assert len(batches) == len(s)
        flat = [i for b in batches for i in b]
        for b in batches:  # a batch never spans chunks
            assert len({i // chunk for i in b}) == 1
            if batch:
                assert len(b) <= batch
        if not drop_last:
            assert sorted(flat) == list(range(n))
        else:
            assert len(flat) == len(set(flat))
        epochs.append(flat)
    if n > 8:
        assert epochs[0] != epochs[1] != epochs[2]
    s.set_epoch(0)
    assert [i for b in s for i in b] == epochs[0]  # reproducible for (seed, epoch)


def test_chunk_sampler_single_index_and_unshuffled():
    s = ChunkSampler(37, 10, shuffle=True, seed=0)
    a, b = list(s), list(s)
    assert sorted(a) == sorted(b) == list(range(37)) and a != b and len(s) == 37
    assert [i // 10 for i in a[:10]] == [a[0] // 10] * 10 or a[0] // 10 == 3  # first chunk read whole
    assert list(ChunkSampler(12, 5, shuffle=False)) == list(range(12))


def test_chunk_sampler_on_npy_mmap(sr_root, sr_reference):
    ds = F.open_dataset(sr_root, "npy_mmap", chunk_len=12)
    loader = DataLoader(ds, batch_sampler=ds.chunk_batch_sampler(batch_size=6, seed=2), num_workers=0)
    seen = []
    for k, (lr, hr) in enumerate(loader):
        assert hr.shape[0] <= 6
    order = [i for b in ds.chunk_batch_sampler(batch_size=6, seed=2) for i in b]
    assert sorted(order) == list(range(SR_COUNT))
    zr = F.open_dataset(sr_root, "zarr", cache_chunk=True)
    for i in ChunkSampler.for_dataset(zr, seed=1):
        seen.append(i)
        np.testing.assert_array_equal(zr[i][1], sr_reference[i][1])
    assert sorted(seen) == list(range(SR_COUNT))


def test_group_by_chunk():
    groups = list(group_by_chunk([33, 2, 31, 5, 17], 16))
    spans = sorted((lo, hi, sorted(pos.tolist())) for lo, hi, pos, _rows in groups)
    assert spans == [(2, 6, [1, 3]), (17, 32, [2, 4]), (33, 34, [0])]


def test_group_by_chunk_single_chunk_fast_path():
    (lo, hi, pos, rows), = group_by_chunk([21, 17, 30, 16], 16)
    assert (lo, hi) == (16, 31)
    assert pos.tolist() == [0, 1, 2, 3] and rows.tolist() == [5, 1, 14, 0]


@pytest.mark.parametrize("fmt,opts", [("npy_mmap", {}), ("npy_mmap", {"chunk_len": 16}), ("zarr", {}),
                                      ("zarr", {"cache_chunk": True})])
@pytest.mark.parametrize("idx", [
    [9, 3, 15, 0, 12],                     # one chunk, shuffled (the chunk loader's batches)
    [33, 2, 31, 5, 17, 47, 16, 2],         # chunks interleaved in the batch, a repeat
    [40, 41, 42, 43, 1, 0],                # a run of slots per chunk, out of order across chunks
    [-1, 0, -48, 20],                      # negative indices wrap
])
def test_read_batch_into_out_matches_per_sample_reads(sr_root, fmt, opts, idx):
    ds = F.open_dataset(sr_root, fmt, **opts)
    out = (np.full((len(idx) + 3, *LR), 7, np.uint8), np.full((len(idx) + 3, *HR), 7, np.uint8))
    lr_b, hr_b = ds.read_batch(idx, out=out)
    assert lr_b.shape == (len(idx), *LR) and hr_b.shape == (len(idx), *HR)
    assert np.shares_memory(lr_b, out[0]) and np.shares_memory(hr_b, out[1])
    for k, i in enumerate(idx):
        want_lr, want_hr = ds[i]
        np.testing.assert_array_equal(lr_b[k], want_lr, err_msg=f"{fmt} lr slot {k} index {i}")
        np.testing.assert_array_equal(hr_b[k], want_hr, err_msg=f"{fmt} hr slot {k} index {i}")
    assert (out[0][len(idx):] == 7).all() and (out[1][len(idx):] == 7).all()  # slots past the batch untouched
    lr_n, hr_n = ds.read_batch(idx)  # without out: fresh arrays, same bytes
    np.testing.assert_array_equal(lr_n, lr_b)
    np.testing.assert_array_equal(hr_n, hr_b)
    # a non-contiguous destination still gets the right bytes
    lr_s, hr_s = np.zeros((2 * len(idx), *LR), np.uint8)[::2], np.zeros((2 * len(idx), *HR), np.uint8)[::2]
    ds.read_batch(idx, out=(lr_s, hr_s))
    np.testing.assert_array_equal(lr_s, lr_b)
    np.testing.assert_array_equal(hr_s, hr_b)


@pytest.mark.parametrize("fmt", ["npy_mmap", "zarr", "lmdb", "lmdb_raw"])
def test_read_batch_rejects_out_of_range(sr_root, fmt):
    ds = F.open_dataset(sr_root, fmt)
    for bad in ([0, SR_COUNT], [-SR_COUNT - 1, 3]):
        with pytest.raises(IndexError):
            ds.read_batch(bad)


def test_lmdb_read_batch_fast_path_checks_every_header(tmp_path):
    samples = _random_samples(12, seed=5)
    path = lmdb_store.write(tmp_path, samples, compress=False)
    env = lmdb.open(str(path), map_size=1 << 24)
    with env.begin(write=True) as txn:  # one value lz4-compressed: the batch must still read it
        txn.put(lmdb_store.key(4), lmdb_store.encode_value(*samples[4], compress=True))
    env.close()
    ds = lmdb_store.LmdbRawDataset(tmp_path)
    idx = [7, 4, 0, 11, 4, -1]
    out = (np.zeros((8, *LR), np.uint8), np.zeros((8, *HR), np.uint8))
    lr_b, hr_b = ds.read_batch(idx, out=out)
    for k, i in enumerate(idx):
        np.testing.assert_array_equal(lr_b[k], samples[i][0])
        np.testing.assert_array_equal(hr_b[k], samples[i][1])
    ds.close()
    env = lmdb.open(str(path), map_size=1 << 24)
    with env.begin(write=True) as txn:  # a bad magic is refused, not copied
        v = bytearray(txn.get(lmdb_store.key(2)))
        v[:4] = b"XXXX"
        txn.put(lmdb_store.key(2), bytes(v))
    env.close()
    ds = lmdb_store.LmdbRawDataset(tmp_path)
    with pytest.raises(lmdb_store.FormatError):
        ds.read_batch([1, 2, 3], out=out)
    ds.close()


def test_unknown_format_lists_supported(sr_root):
    with pytest.raises(F.UnknownFormatError) as err:
        F.open_dataset(sr_root, "tfrecord")
    for name in ("png", "lmdb", "hdf5", "zarr", "npy_mmap", "pt"):
        assert name in str(err.value)


def test_png_decode_callable(sr_root, sr_reference):
    calls = []

    def dec(data: bytes):
        calls.append(len(data))
        from feedlab.formats.png import _pil_decode
        return _pil_decode(data)

    ds = F.open_dataset(sr_root, "png", decode=dec)
    np.testing.assert_array_equal(ds[4][1], sr_reference[4][1])
    assert calls


def test_writer_failure_leaves_nothing(tmp_path):
    samples = _random_samples(10)

    class Broken(list):
        def __iter__(self):
            for i, s in enumerate(list.__iter__(self)):
                if i == 6:
                    raise RuntimeError("disk on fire")
                yield s

    for fmt in ("npy", "lmdb", "zarr", "hdf5", "pt"):
        with pytest.raises(RuntimeError):
            F.write(fmt, tmp_path, Broken(samples))
    assert list(tmp_path.iterdir()) == []


def test_writer_rejects_mixed_shapes(tmp_path):
    samples = _random_samples(3)
    samples[2] = (samples[2][0][:8], samples[2][1])
    with pytest.raises(ValueError, match="sample 2"):
        F.write("npy_mmap", tmp_path, samples)


def test_imagefolder(cls_root):
    ds = F.open_dataset(cls_root, "jpeg")
    assert len(ds) == 10 and len(ds.classes) == 2
    assert sorted(set(ds.targets)) == [0, 1]
    sizes = set()
    for i in range(len(ds)):
        img, label = ds[i]
        assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3
        assert 32 <= img.shape[0] <= 64 and 32 <= img.shape[1] <= 64
        sizes.add(img.shape[:2])
    assert len(sizes) > 1
    t, _ = F.open_dataset(cls_root, "imagefolder", as_tensor=True)[0]
    assert isinstance(t, torch.Tensor)
    assert F.bytes_on_disk(cls_root, "jpeg") > 0


@pytest.mark.parametrize("fmt", F.SR_FORMATS)
def test_datasets_pickle_without_open_handles(sr_root, sr_reference, fmt):
    """``spawn`` workers receive a pickled dataset: it must carry no open handle."""
    import pickle

    ds = F.open_dataset(sr_root, fmt)
    ds[1]  # opens a handle in this process
    clone = pickle.loads(pickle.dumps(ds))
    np.testing.assert_array_equal(clone[9][1], sr_reference[9][1])


def _backend(*names: str) -> str:
    """The first of ``names`` this environment has (a non-default one shows that the choice travels)."""
    from feedlab.decode_support import available_backends

    have = available_backends()
    return next((n for n in names if have[n].available), "pil")


class _InWorker(Dataset):
    """Item k: (decode backend name, first sample) of the k-th dataset, as a worker sees it."""

    def __init__(self, datasets):
        self.datasets = datasets

    def __len__(self):
        return len(self.datasets)

    def __getitem__(self, k):
        ds = self.datasets[k]
        first = ds[0]
        return ds.decode_name, np.asarray(first[0] if isinstance(first, tuple) else first)


def test_encoded_image_datasets_reach_a_spawn_worker_with_their_decode_backend(sr_root, cls_root):
    """png, imagefolder (jpeg) and images hold a decoder that does not pickle: each travels to a
    spawned worker without it and rebuilds the same backend there, decoding the same pixels."""
    import pickle

    datasets = [F.open_dataset(sr_root, "png", decode=_backend("pyspng", "torchvision")),
                F.open_dataset(cls_root, "jpeg", decode=_backend("simplejpeg", "torchvision")),
                F.open_dataset(sr_root / "hr", "images", decode=_backend("pyspng", "torchvision"))]
    here = [_InWorker(datasets)[k] for k in range(3)]
    for ds in datasets:
        clone = pickle.loads(pickle.dumps(ds))
        assert clone.decode_name == ds.decode_name and clone._decode is not None
    loader = DataLoader(_InWorker(datasets), batch_size=None, num_workers=1, multiprocessing_context="spawn")
    there = list(loader)
    assert [n for n, _ in there] == [n for n, _ in here]
    for (_n, a), (_m, b) in zip(here, there):
        np.testing.assert_array_equal(a, np.asarray(b))


def test_lmdb_env_is_opened_once_when_threads_race(tmp_path):
    """loader="threads" reads one LMDB set from several threads: the per-process env is opened
    once (py-lmdb refuses a second open: "already open in this process"), never per thread."""
    import threading

    from feedlab.formats import lmdb_store as L

    root = tmp_path / "set"
    L.write(root, [(np.zeros((4, 4, 3), np.uint8), np.zeros((8, 8, 3), np.uint8)) for _ in range(4)])
    path = str(root / "lmdb")
    L.close_envs()
    got, errors = [], []
    start = threading.Barrier(8)

    def grab():
        start.wait()
        try:
            got.append(L._env_for(path))
        except Exception as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    L.close_envs()
    assert not errors and len({id(e) for e in got}) == 1


def _bad_images(folder):
    """One good PNG and each kind of bad file a user's folder holds, in a class folder ``cat/``."""
    import io
    import struct
    import zlib

    from PIL import Image

    cat = folder / "cat"
    cat.mkdir(parents=True)
    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), 7, np.uint8)).save(buf, format="PNG")
    good = buf.getvalue()
    (cat / "a_good.png").write_bytes(good)
    (cat / "b_empty.png").write_bytes(b"")
    (cat / "c_truncated.png").write_bytes(good[:len(good) // 2])
    (cat / "d_notes.jpg").write_bytes(b"shopping list: milk, eggs\n" * 20)
    ihdr = struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)           # a 20000x20000 header, no pixels
    chunk = b"IHDR" + ihdr
    (cat / "e_bomb.png").write_bytes(good[:8] + struct.pack(">I", 13) + chunk
                                     + struct.pack(">I", zlib.crc32(chunk)) + good[33:])
    return {"b_empty.png": "empty", "c_truncated.png": "truncated", "d_notes.jpg": "not an image",
            "e_bomb.png": "decompression bomb"}


@pytest.mark.parametrize("fmt", ["images", "imagefolder"])
def test_a_file_that_does_not_decode_is_named_with_what_to_do(tmp_path, fmt):
    """'cannot decode a file under DIR' named no file: each bad file is named relative to the folder
    given, with what is wrong and what to do, on the DataLoader path (ds[i]) and the doctor's split
    read → decode path (decode_raw(read_raw(i)), which hands the decoder bytes, not a name)."""
    bad = _bad_images(tmp_path)
    ds = F.open_dataset(tmp_path, fmt)
    names = [p.name for p in ds.store_files(range(len(ds)))]
    assert names[0] == "a_good.png" and ds[0] is not None
    for i, name in enumerate(names[1:], start=1):
        for how, call in (("ds[i]", lambda: ds[i]), ("split", lambda: ds.decode_raw(ds.read_raw(i)))):
            with pytest.raises(ValueError) as err:
                call()
            line = str(err.value)
            assert "\n" not in line and f"cat/{name} under {tmp_path}" in line, (how, line)
            assert bad[name] in line and ("remove" in line or "move it" in line or "shrink" in line), (how, line)
    assert sorted(p.name for p in (tmp_path / "cat").iterdir()) == sorted(names)   # nothing written beside


def test_a_good_file_the_chosen_decoder_does_not_read_is_not_blamed(tmp_path):
    """simplejpeg asked to decode a PNG: the file is fine and the one line says the decoder is the cause and
    what to choose, never 'remove it' (the note named a good file)."""
    pytest.importorskip("simplejpeg")
    from PIL import Image

    from feedlab.formats._decoding import cannot_decode

    good = tmp_path / "cat" / "08.png"
    good.parent.mkdir()
    Image.fromarray(np.full((8, 8, 3), 7, np.uint8)).save(good)
    line = str(cannot_decode("images", tmp_path, good, ValueError("not a JPEG file")))
    assert "cat/08.png" in line and "valid PNG image" in line and "decode='pil'" in line
    assert "remove" not in line and "\n" not in line


def test_a_file_name_with_a_newline_stays_on_the_one_line(tmp_path):
    """Issue 47 W12: a truncated ``bad\\nname.png`` split the one-line error in two: the name is quoted."""
    from feedlab.formats._decoding import cannot_decode

    bad = tmp_path / "bad\nname.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n")   # truncated
    line = str(cannot_decode("images", tmp_path, bad, OSError("image file is truncated")))
    assert "\n" not in line and "'bad\\nname.png'" in line, line
    assert list(tmp_path.iterdir()) == [bad]


def test_pt_a_sample_of_other_pickled_objects_is_one_line_without_torch_s_warning(sr_root, tmp_path):
    # attack49 B02: a pickled (protocol 4) object as a .pt sample: the refusal came after torch's two-line UserWarning
    import pickle
    import shutil
    import warnings

    from feedlab.errors import SampleError
    from feedlab.formats import open_dataset, pt_store

    root = tmp_path / "sr"
    shutil.copytree(sr_root, root, ignore=lambda d, names: [n for n in names if d == str(sr_root)
                                                             and n not in ("pt", "manifest.json")])
    with open(root / "pt" / "000005.pt", "wb") as fh:
        pickle.dump({"lr": {1, 2}}, fh, protocol=4)
    ds = open_dataset(root, "pt")
    with warnings.catch_warnings(record=True) as caught:   # the filters as they are, each warning recorded
        # the filter as the module's import (at a command line's start) installs it; pytest's per-test
        # catch_warnings drops one installed by an import inside an earlier test
        pt_store.quiet_protocol_warning()
        with pytest.raises(SampleError, match="holds pickled objects"):
            ds[5]
    assert not [w for w in caught if "pickle protocol" in str(w.message)]


@pytest.mark.parametrize("damage", [b"", b"\x93NUMPY\x01\x00v\x00{'descr'", b"not numpy at all"])
def test_a_damaged_checksum_table_is_named_in_one_line(sr_root, tmp_path, damage):
    """A truncated or foreign crc32c.npy: the read names that file and what to do (it read 'EOF: reading array
    header, expected 118 bytes got 90', no file named: attack51 B02)."""
    import shutil

    root = tmp_path / "set"
    shutil.copytree(sr_root, root, ignore=shutil.ignore_patterns("lmdb*", "sr.h5", "sr.zarr", "pt", "wds", "npy_mmap"))
    (root / "crc32c.npy").write_bytes(damage)
    ds = F.open_dataset(root, "npy", verify=True)
    with pytest.raises(F.FormatError) as got:
        ds[0]
    msg = str(got.value)
    assert "crc32c.npy" in msg and "delete that file" in msg and "\n" not in msg, msg


def test_a_truncated_hdf5_file_is_named_in_one_line(sr_root, tmp_path):
    """attack52 B10: `doctor --data SET --format hdf5` over a cut sr.h5 said only "Unable to synchronously open file
    (truncated file: eof = 100000, …)": which file, and what to do, were not said."""
    import shutil

    from feedlab import formats as F
    from feedlab.errors import FormatError

    root = tmp_path / "sr"
    shutil.copytree(sr_root, root, ignore=shutil.ignore_patterns("lmdb*", "npy*", "pt", "*.zarr", "wds"))
    with open(root / "sr.h5", "r+b") as f:
        f.truncate(4096)
    with pytest.raises(FormatError) as err:
        F.open_dataset(root, "hdf5")
    line = str(err.value)
    assert "\n" not in line and f"{root / 'sr.h5'}: not a readable HDF5 file" in line, line
    assert f"python -m data_prep pack {root} --to hdf5" in line, line


def test_a_manifest_nested_too_deeply_is_one_format_error_naming_it(tmp_path):
    """attack54 FAIL 1: a manifest.json of '[' * 100000 raised RecursionError (no FormatError) out of read_manifest."""
    (tmp_path / "manifest.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(F.FormatError) as err:
        F.read_manifest(tmp_path)
    line = str(err.value)
    assert line.startswith(f"{tmp_path / 'manifest.json'} is not valid JSON (nested too deeply to read)") and \
        "data_prep" in line and "\n" not in line, line
