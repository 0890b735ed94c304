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
