"""The format's own shard split (feedlab.scale.shards): a chunked store divided between ranks by
whole chunks. Every sample as often as ``shard_expected_counts`` promises, across ranks and
workers, with a short last chunk and uneven chunk counts; no chunk read by two ranks in an
epoch (chunk reads logged from inside the workers); new order each epoch, same for the seed."""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter, defaultdict

import numpy as np
import pytest
from torch.utils.data.distributed import DistributedSampler

from feedlab import formats
from feedlab import pipeline as P
from feedlab.scale import ranks
from feedlab.scale.shards import ChunkShardSampler, choose_split, shard_expected_counts, shard_sizes


def _sha(pair):
    return hashlib.sha1(b"".join(np.ascontiguousarray(np.asarray(a)).tobytes() for a in pair)).hexdigest()


class ChunkLog:
    """A chunked dataset that appends ``rank chunk`` to a log file for every chunk a batch read
    touches (from whichever process reads it: workers included), and tags samples with their index."""

    def __init__(self, ds, log, rank):
        self.ds, self.log, self.rank, self.chunk_len = ds, str(log), rank, ds.chunk_len

    def __len__(self):
        return len(self.ds)

    def __getitems__(self, idx):
        with open(self.log, "a") as f:
            f.write("".join(f"{self.rank} {c}\n" for c in sorted({i // self.chunk_len for i in idx})))
        return list(zip(idx, self.ds.__getitems__(list(idx))))

    def __getitem__(self, i):
        return self.__getitems__([i])[0]


def _ids(batch):
    return [f"{i}:{_sha(pair)}" for i, pair in batch]


STORES = {"zarr": (45, 8), "npy_mmap": (47, 6)}      # (samples, chunk_len): short last chunk of 5


@pytest.fixture(scope="module")
def stores(sr_reference, tmp_path_factory):
    """A zarr set of 45 in chunks of 8 and an npy_mmap set of 47 read in chunks of 6."""
    out = {}
    for fmt, (n, clen) in STORES.items():
        root = tmp_path_factory.mktemp(fmt)
        formats.write(fmt, root, sr_reference[:n], **({"chunk_len": clen} if fmt == "zarr" else {}))
        out[fmt] = root
    return out


def _open(stores, fmt):
    n, clen = STORES[fmt]
    ds = formats.open_dataset(stores[fmt], fmt, **({"chunk_len": clen} if fmt == "npy_mmap" else {}))
    assert len(ds) == n and ds.chunk_len == clen
    return ds


def _epoch(stores, fmt, world, epoch, tmp_path, seed=0, drop_last=False, even=True, workers=0, batch=4):
    """Ids each rank reads in one epoch (ranks simulated here), and the ranks that read each chunk."""
    log = tmp_path / f"chunks-{fmt}-{world}-{epoch}-{seed}-{drop_last}-{even}-{workers}.log"
    log.unlink(missing_ok=True)
    spec = P.PipelineSpec(format=fmt, batch_size=batch, num_workers=workers)
    seen = []
    for rank in range(world):
        ds = ChunkLog(_open(stores, fmt), log, rank)
        loader, sampler = ranks.make_rank_loader(ds, spec, rank, world, seed=seed, drop_last=drop_last,
                                                 even=even, collate_fn=_ids)
        assert sampler.split == "chunks"                      # chosen from the registry's capability
        sampler.set_epoch(epoch)
        seen.append([h for b in loader for h in b])
    readers = defaultdict(set)
    for line in log.read_text().split("\n") if log.exists() else []:
        if line:
            r, c = map(int, line.split())
            readers[c].add(r)
    return seen, readers


@pytest.mark.parametrize("fmt", list(STORES))
@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("even", [True, False])
def test_counts_match_the_promise_and_no_chunk_is_read_by_two_ranks(stores, sr_reference, tmp_path, fmt, world,
                                                                     drop_last, even):
    n, clen = STORES[fmt]
    universe = [f"{i}:{_sha(p)}" for i, p in enumerate(sr_reference[:n])]
    seen, readers = _epoch(stores, fmt, world, 1, tmp_path, drop_last=drop_last, even=even)
    counts = Counter(h for s in seen for h in s)
    assert set(counts) <= set(universe)
    got = Counter(counts[h] for h in universe)
    assert {k: v for k, v in got.items() if v} == shard_expected_counts(n, clen, world, drop_last, even)
    assert all(len(rs) == 1 for rs in readers.values())      # no chunk read by two ranks
    if not even:
        assert sorted(readers) == list(range(-(-n // clen)))  # and, without dropping, every chunk read
        assert sorted(h for s in seen for h in s) == sorted(universe)
    else:
        assert len({len(s) for s in seen}) == 1               # DDP: the same length on every rank
    for r, s in enumerate(seen):                              # a rank reads only its own chunks
        assert {int(h.split(":")[0]) // clen for h in s} <= {c for c, rs in readers.items() if r in rs}


@pytest.mark.parametrize("fmt,drop_last,even", [("zarr", False, False), ("npy_mmap", True, True),
                                                ("zarr", False, True)])
def test_across_ranks_and_workers(stores, sr_reference, tmp_path, fmt, drop_last, even):
    n, clen = STORES[fmt]
    seen, readers = _epoch(stores, fmt, 2, 0, tmp_path, drop_last=drop_last, even=even, workers=2)
    counts = Counter(int(h.split(":")[0]) for s in seen for h in s)
    got = Counter(counts[i] for i in range(n))
    assert {k: v for k, v in got.items() if v} == shard_expected_counts(n, clen, 2, drop_last, even)
    assert readers and all(len(rs) == 1 for rs in readers.values())


def test_order_changes_with_the_epoch_and_repeats_with_the_seed(stores, tmp_path):
    e0, _ = _epoch(stores, "zarr", 2, 0, tmp_path, seed=7)
    e1, _ = _epoch(stores, "zarr", 2, 1, tmp_path, seed=7)
    assert e0 != e1 and e0[0] != e1[0]
    assert _epoch(stores, "zarr", 2, 1, tmp_path, seed=7)[0] == e1
    assert _epoch(stores, "zarr", 2, 1, tmp_path, seed=8)[0] != e1
    s = ChunkShardSampler(45, 8, 0, 2, seed=7)
    sets = set()
    for e in range(6):                                        # the chunks a rank gets change between epochs
        s.set_epoch(e)
        assert list(s) == list(s)                             # iterating does not advance the epoch
        sets.add(frozenset(s.chunks()))
    assert len(sets) > 1


def test_batches_stay_in_one_chunk_when_the_batch_divides_the_chunk():
    for rank in range(3):
        s = ChunkShardSampler(45, 8, rank, 3, seed=1, even=False)
        order = list(s)
        for b in range(0, len(order), 4):
            assert len({i // 8 for i in order[b:b + 4]}) == 1
        assert (44 // 8 not in s.chunks()) or s.chunks()[-1] == 44 // 8   # the short chunk is read last


@pytest.mark.parametrize("n,clen,world", [(45, 8, 2), (45, 8, 4), (47, 6, 3), (100, 7, 5), (9, 4, 3), (64, 8, 8)])
def test_closed_form_sizes_hold_for_every_order(n, clen, world):
    for e in range(10):
        plan = ChunkShardSampler(n, clen, 0, world, seed=e).plan()
        assert sorted(c for p in plan for c in p) == list(range(-(-n // clen)))   # disjoint, complete
        sizes = sorted(sum(min(clen, n - c * clen) for c in p) for p in plan)
        assert sizes == shard_sizes(n, clen, world)


def test_split_is_chosen_from_the_capability_and_can_be_forced(stores, sr_root, monkeypatch):
    ds = _open(stores, "zarr")
    assert choose_split(ds, "zarr", 2)[0] == "chunks"
    loader, s = ranks.make_rank_loader(ds, P.PipelineSpec(format="zarr"), 0, 2, split="samples")
    assert s.split == "samples" and isinstance(s, DistributedSampler)
    assert choose_split(ds, "zarr", 7) == ("samples", "6 chunk(s) of 8 < 7 ranks")    # a rank would get none
    with pytest.raises(ValueError, match="6 chunk.* for 7 ranks"):
        choose_split(ds, "zarr", 7, split="chunks")
    png = formats.open_dataset(sr_root, "png")
    with pytest.raises(ValueError, match="format png is not chunked"):
        choose_split(png, "png", 2, split="chunks")
    monkeypatch.setitem(formats.FORMATS, "zarr", dataclasses.replace(formats.FORMATS["zarr"], chunked=False))
    assert choose_split(ds, "zarr", 2)[0] == "samples"                                 # the capability decides
    with pytest.raises(ValueError, match="split 'x'"):
        choose_split(ds, "zarr", 2, split="x")


def test_even_split_needs_a_chunk_per_rank():
    with pytest.raises(ValueError, match="a rank would get no chunk"):
        ChunkShardSampler(10, 8, 0, 3)
    s = ChunkShardSampler(10, 8, 2, 3, even=False)            # exactly once: an empty rank is allowed
    assert list(s) == [] and len(s) == 0
