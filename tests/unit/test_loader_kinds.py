"""The loader-kind registry: what each kind needs of a format, and make_loader dispatching through it."""

import argparse

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from feedlab import pipeline as P
from feedlab.pipeline import kinds as K
from feedlab.pipeline.loaders import BatchReadLoader, ChunkLoader, PlainLoop
from feedlab.pipeline.ring import RingLoader


class Store:
    lr_shape, hr_shape, chunk_len = (2, 2, 3), (4, 4, 3), 4

    def __len__(self):
        return 16

    def __getitem__(self, i):
        return np.full(self.lr_shape, i, np.uint8), np.full(self.hr_shape, i, np.uint8)

    def read_batch(self, indices, out=None):
        lr, hr = out
        for k, i in enumerate(indices):
            lr[k], hr[k] = self[i]
        return lr[:len(indices)], hr[:len(indices)]


def test_the_kinds_and_a_duplicate_is_refused():
    assert {"dataloader", "plain", "batched", "chunk", "ring", "threads"} <= set(K.LOADER_KINDS)
    assert K.LOADER_KINDS["chunk"].requires == ("chunked",) and K.LOADER_KINDS["batched"].requires == ("batched",)
    with pytest.raises(ValueError, match="already registered"):
        K.register_loader_kind(K.LOADER_KINDS["plain"])


@pytest.mark.parametrize("spec, needle", [
    (P.PipelineSpec(format="png", loader="chunk", collate="fast"), "needs a format that is chunked"),
    (P.PipelineSpec(format="npy", loader="batched", collate="fast"), "needs a format that is batched"),
    (P.PipelineSpec(format="lmdb", loader="ring", collate="fast"), "needs num_workers >= 1"),
    (P.PipelineSpec(format="lmdb", loader="plain", num_workers=2), "num_workers must be 0"),
    (P.PipelineSpec(format="lmdb", loader="ring", num_workers=2), "use collate fast or fast_cl"),
    (P.PipelineSpec(format="lmdb", loader="warp"), "unknown loader 'warp'"),
])
def test_problems_read_the_format_capabilities(spec, needle):
    assert any(needle in p for p in spec.problems("cpu")), spec.problems("cpu")


@pytest.mark.parametrize("spec", [
    P.PipelineSpec(format="npy_mmap", loader="chunk", collate="fast"),
    P.PipelineSpec(format="zarr", loader="chunk", collate="fast_cl"),
    P.PipelineSpec(format="lmdb", loader="batched", collate="fast"),
    P.PipelineSpec(format="lmdb", loader="ring", collate="fast", num_workers=2),
    P.PipelineSpec(format="png", loader="ring", collate="fast", num_workers=1),
    P.PipelineSpec(format="png", loader="plain"),
    P.PipelineSpec(format="png"),
])
def test_specs_that_mean_what_they_say(spec):
    assert spec.problems("cpu") == []


@pytest.mark.parametrize("pf", [0, -1])
def test_a_prefetch_factor_under_one_is_refused_not_run_silently_at_two(pf):
    spec = P.PipelineSpec(format="npy", num_workers=2, prefetch_factor=pf)
    assert [p for p in spec.problems("cpu") if p.startswith(f"prefetch_factor {pf}: give 1 or more")], \
        spec.problems("cpu")
    assert P.PipelineSpec(format="npy", num_workers=2, prefetch_factor=1).problems("cpu") == []


def test_make_loader_dispatches_through_the_registry():
    base = P.PipelineSpec(batch_size=4, collate="fast")
    built = {k: P.make_loader(Store(), base.replace(loader=k, num_workers=1 if k == "ring" else 0))
             for k in ("dataloader", "plain", "batched", "chunk", "ring")}
    assert isinstance(built["dataloader"], DataLoader) and isinstance(built["plain"], PlainLoop)
    assert type(built["batched"].loader) is BatchReadLoader and isinstance(built["chunk"].loader, ChunkLoader)
    assert isinstance(built["ring"].loader, RingLoader) and built["ring"]._w is None  # no worker until iterated
    lr, hr = next(iter(built["chunk"]))  # NCHW-shaped, channels-last strides, as fast_cl: a model takes it
    assert lr.shape == (4, 3, 2, 2) and lr.is_contiguous(memory_format=torch.channels_last)
    assert len({int(x) for x in lr[:, 0, 0, 0]}) == 4 and len(built["chunk"]) == 4
    built["ring"].close()
    with pytest.raises(ValueError, match="takes no DataLoader options"):
        P.make_loader(Store(), base.replace(loader="batched"), sampler=[0, 1])


def test_the_cli_flag_is_loader_kind_and_leaves_a_loader_flag_free():
    ap = argparse.ArgumentParser()
    P.add_arguments(ap)
    ap.add_argument("--loader", default=None)  # the doctor's own flag: a user's loader
    args = ap.parse_args(["--loader-kind", "ring", "--loader", "mod:fn", "--num-workers", "2"])
    spec = P.spec_from_args(args)
    assert spec.loader == "ring" and spec.num_workers == 2
    assert P.PipelineSpec(loader="ring").label().endswith(" ring") and "ring" not in P.PipelineSpec().label()


def test_dataloader_kind_takes_batch_size_none_for_a_dataset_of_whole_batches():
    """13's JPEG contender reads whole batches in its workers: the registry's DataLoader with
    automatic batching off, the batches passed through as they come."""
    import torch
    from torch.utils.data import Dataset, default_convert

    from feedlab.pipeline import PipelineSpec, make_loader

    class Batches(Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, idx):
            return torch.full((4, 2), float(idx))

    ld = make_loader(Batches(), PipelineSpec(batch_size=4, device="cpu"), shuffle=False, collate_fn=default_convert,
                     sampler=[2, 0, 1], batch_size=None)
    assert [b[0, 0].item() for b in ld] == [2.0, 0.0, 1.0] and ld.batch_size is None


class _SlowRead(Store):
    """A store whose batch read blocks until released (a slow network read), at most ``hold_s``."""

    def __init__(self, hold_s: float):
        import threading

        self.release, self.hold_s, self.reads = threading.Event(), hold_s, 0

    def read_batch(self, indices, out=None):
        self.reads += 1
        if self.reads > 1:                     # the first batch comes at once; the next ones hang
            self.release.wait(self.hold_s)
        return super().read_batch(indices, out)


def _reader_threads():
    import threading

    return [t for t in threading.enumerate() if t.name.startswith("feedlab-threads-")]


def test_the_threads_kind_stops_at_once_when_the_consumer_stops_early(capfd):
    """The consumer takes one batch and stops while the readers are in a slow read: the stop is
    LET_GO_S and one line, not LET_GO_NORMAL_S (30 s) of silence."""
    import time

    from feedlab.pipeline.loaders import LET_GO_S, ThreadLoader

    store = _SlowRead(hold_s=12.0)
    loop = ThreadLoader(store, batch_size=4, num_threads=2, shuffle=False)
    it = iter(loop)
    try:
        next(it)
        t0 = time.monotonic()
        it.close()
        took = time.monotonic() - t0
    finally:
        store.release.set()                    # the test's own deadline on the abandoned reads
        end = time.monotonic() + 5
        while _reader_threads() and time.monotonic() < end:
            time.sleep(0.05)
    assert took < LET_GO_S + 2.0, f"the stop took {took:.1f} s"
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "abandoned" in err and "_SlowRead" in err, err
    assert not _reader_threads()


def test_the_threads_kind_stops_a_per_sample_fill_between_samples():
    import time

    from feedlab.pipeline.loaders import ThreadLoader

    class Slow(Store):
        def __getitem__(self, i):
            if i >= 8:                         # the first batch comes at once, the second is in hand at the stop
                time.sleep(0.25)
            return super().__getitem__(i)

    Slow.read_batch = None                     # no batch read: filled sample by sample
    loop = ThreadLoader(Slow(), batch_size=8, num_threads=2, shuffle=False)
    it = iter(loop)
    lr, hr = next(it)
    assert lr.shape[0] == 8 and int(lr[0, 0, 0, 0]) == 0
    t0 = time.monotonic()
    it.close()
    assert time.monotonic() - t0 < 1.0          # the read in hand stops at the next sample (8 x 0.25 s before)
    assert not _reader_threads()
