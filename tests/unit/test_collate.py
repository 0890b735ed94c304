"""FastCollate matches the stock ToTensor + default_collate path, bit for bit after to_float."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from feedlab.collate import FastCollate, memcpy_ceiling, to_float, to_float_on_device, totensor_collate

FORMATS = ("nchw", "channels_last")


def _sr_batch(n=5, h=12, w=10, scale=2, seed=0):
    rng = np.random.default_rng(seed)
    return [
        (rng.integers(0, 256, (h, w, 3), dtype=np.uint8), rng.integers(0, 256, (h * scale, w * scale, 3), dtype=np.uint8))
        for _ in range(n)
    ]


def _cls_batch(n=6, seed=1):
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, 256, (8, 9, 3), dtype=np.uint8), int(i % 3)) for i in range(n)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_sr_pairs_equal_stock(fmt):
    batch = _sr_batch()
    stock = totensor_collate(batch)
    fast = FastCollate(fmt)(batch)
    assert len(fast) == 2
    for s, f in zip(stock, fast):
        assert f.dtype == torch.uint8 and s.dtype == torch.float32
        assert f.shape == s.shape  # NCHW-shaped either way
        assert torch.equal(to_float(f), s)


@pytest.mark.parametrize("fmt", FORMATS)
def test_img_label_pairs(fmt):
    batch = _cls_batch()
    stock_x, stock_y = totensor_collate(batch)
    x, y = FastCollate(fmt)(batch)
    assert torch.equal(to_float(x), stock_x)
    assert torch.equal(y, stock_y)
    assert y.dtype == torch.int64 and y.tolist() == [0, 1, 2, 0, 1, 2]


def test_strides_per_memory_format():
    batch = _sr_batch(n=4, h=6, w=7)
    lr, _ = FastCollate("nchw")(batch)
    assert lr.shape == (4, 3, 6, 7) and lr.is_contiguous()
    lr, _ = FastCollate("channels_last")(batch)
    assert lr.shape == (4, 3, 6, 7)
    assert lr.is_contiguous(memory_format=torch.channels_last) and not lr.is_contiguous()
    # to_float keeps channels_last
    assert to_float(lr).is_contiguous(memory_format=torch.channels_last)


def test_bare_arrays_and_grayscale():
    rng = np.random.default_rng(2)
    imgs = [rng.integers(0, 256, (5, 4), dtype=np.uint8) for _ in range(3)]
    out = FastCollate("nchw")(imgs)
    assert out.shape == (3, 1, 5, 4)
    assert torch.equal(to_float(out), totensor_collate(imgs))


def test_no_alias_without_reuse():
    fc = FastCollate("nchw")  # reuse_buffer=False is the default
    a = fc(_sr_batch(seed=3))
    a_copy = [t.clone() for t in a]
    b = fc(_sr_batch(seed=4))
    assert a[0].data_ptr() != b[0].data_ptr()
    assert all(torch.equal(x, y) for x, y in zip(a, a_copy))


@pytest.mark.parametrize("fmt", FORMATS)
def test_reuse_buffer_reuses_memory(fmt):
    fc = FastCollate(fmt, reuse_buffer=True)
    a = fc(_sr_batch(seed=5))
    ptr = a[0].data_ptr()
    b = fc(_sr_batch(seed=6))
    assert b[0].data_ptr() == ptr  # documented: the previous batch is overwritten
    # a short last batch fits in the same buffer
    c = fc(_sr_batch(n=2, seed=7))
    assert c[0].shape[0] == 2 and c[0].data_ptr() == ptr
    assert torch.equal(to_float(c[0]), totensor_collate(_sr_batch(n=2, seed=7))[0])


def test_pickled_collate_starts_without_buffers():
    fc = FastCollate("nchw", reuse_buffer=True)
    fc(_sr_batch())
    clone = pickle.loads(pickle.dumps(fc))
    assert clone._buffers == {} and clone.reuse_buffer


def test_mismatched_shapes_named():
    batch = _sr_batch(n=2)
    batch.append((np.zeros((3, 3, 3), np.uint8), batch[0][1]))
    for fmt in FORMATS:
        with pytest.raises(ValueError, match="one shape"):
            FastCollate(fmt)(batch)


def test_bad_memory_format():
    with pytest.raises(ValueError, match="nchw, channels_last"):
        FastCollate("nhwc")


def test_dataloader_with_workers():
    from torch.utils.data import DataLoader

    data = _cls_batch(n=8)
    loader = DataLoader(data, batch_size=4, num_workers=1, collate_fn=FastCollate("nchw", reuse_buffer=True))
    # in the worker, reuse is switched off (with a warning there) and batches
    # are allocated in shared memory, so the two batches do not alias
    batches = list(loader)
    assert len(batches) == 2
    stock = [totensor_collate(data[:4]), totensor_collate(data[4:])]
    for (x, y), (sx, sy) in zip(batches, stock):
        assert torch.equal(to_float(x), sx) and torch.equal(y, sy)
    assert batches[0][0].data_ptr() != batches[1][0].data_ptr()


def test_to_float_normalize_matches_torchvision():
    from torchvision import transforms

    batch = _cls_batch()
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    x, _ = FastCollate("channels_last")(batch)
    got = to_float_on_device(x, "cpu", mean=mean, std=std)
    want = transforms.Normalize(mean, std)(totensor_collate(batch)[0])
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_to_float_on_list_moves_labels():
    x, y = to_float(FastCollate()(_cls_batch()), "cpu")
    assert x.dtype == torch.float32 and y.dtype == torch.int64


def test_memcpy_ceiling():
    items = [b[1] for b in _sr_batch(n=4)]
    out = np.empty((4,) + items[0].shape, np.uint8)
    assert memcpy_ceiling(items, out) is out
    assert np.array_equal(out, np.stack(items))
    t = torch.empty((4,) + items[0].shape, dtype=torch.uint8)
    memcpy_ceiling([x.tobytes() for x in items], t)
    assert np.array_equal(t.numpy(), np.stack(items))
    with pytest.raises(ValueError):
        memcpy_ceiling(items, out[:2])
