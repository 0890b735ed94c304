"""The format's own shard split: a chunked store divided between ranks by whole chunks.

A store cut in chunks (the registry's ``chunked`` capability: ``dataset.chunk_len``)
reads fastest a chunk at a time, and a chunk read by two ranks is read (and, for a
compressed store, decoded) twice. :class:`ChunkShardSampler` gives every rank a
disjoint set of whole chunks each epoch:

* the epoch's chunk order is a permutation drawn from ``(seed, epoch)`` (the same on
  every rank, so the ranks agree without talking; a new one each epoch);
* the chunks are dealt in that order, each to the rank holding the fewest samples so
  far (ties: the lowest rank), so the ranks' sample counts are balanced to within one
  chunk whatever the order (:func:`shard_sizes` gives them in closed form);
* a rank reads its chunks in dealt order, each chunk's samples shuffled within it
  (from ``(seed, epoch, chunk)``), and the short last chunk of the store (when
  ``n % chunk_len``) last, so with ``batch_size`` dividing ``chunk_len`` every batch
  lies in one chunk; otherwise a batch may span two of the rank's own chunks, never
  another rank's.

Uneven chunk counts (``even``, as in ``feedlab.scale.ranks``):

* ``even=False``: every sample exactly once, no padding, no dropping; ranks differ by
  up to one chunk (fine for evaluation or a loop without collectives, not for DDP).
* ``even=True, drop_last=True``: every rank reads the smallest rank's count; the others
  leave the tail of their own order out (never read this epoch).
* ``even=True, drop_last=False``: every rank reads the largest rank's count, padding by
  repeating its own first samples (cyclically): the padding comes from the rank's own
  chunks, so no chunk is ever read by two ranks.

``even=True`` needs at least as many chunks as ranks (a rank with no chunk has nothing
to pad from); :func:`choose_split` falls back to the per-sample ``DistributedSampler``
then, and says why. :func:`shard_expected_counts` states how often each sample is seen.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterator

import numpy as np
from torch.utils.data import Sampler

from feedlab.formats import get_format

SPLITS = ("auto", "chunks", "samples")


def shard_sizes(n: int, chunk_len: int, world_size: int) -> list[int]:
    """Samples per rank (sorted) under the fewest-samples-first deal; the same for every order."""
    full, short = divmod(int(n), int(chunk_len))
    q, rem = divmod(full, world_size)
    sizes = [(q + 1) * chunk_len] * rem + [q * chunk_len] * (world_size - rem)
    if short:
        sizes[rem] += short             # rem < world_size: the short chunk joins a rank with q chunks
    return sorted(sizes)


def shard_expected_counts(n: int, chunk_len: int, world_size: int, drop_last: bool,
                          even: bool = True) -> dict[int, int]:
    """``{times seen: samples}`` over one epoch of all ranks (e.g. ``{1: 40, 2: 8}``)."""
    if not even:
        return {1: int(n)}
    sizes = shard_sizes(n, chunk_len, world_size)
    if min(sizes) == 0:
        raise ValueError(f"{n} samples in chunks of {chunk_len} for {world_size} ranks: a rank gets no chunk")
    out: Counter = Counter()
    if drop_last:
        keep = min(sizes)
        out[1] += keep * world_size
        out[0] += n - keep * world_size
    else:
        top = max(sizes)
        for m in sizes:
            times, extra = divmod(top, m)
            out[times + 1] += extra
            out[times] += m - extra
    return {k: v for k, v in sorted(out.items()) if v}


class ChunkShardSampler(Sampler[int]):
    """Rank ``rank``'s samples of one epoch, by whole chunks (see the module doc).
    Call ``set_epoch(e)`` before each epoch, as with ``DistributedSampler``."""

    def __init__(self, n: int, chunk_len: int, rank: int, world_size: int, seed: int = 0, shuffle: bool = True,
                 drop_last: bool = False, even: bool = True):
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} of world_size {world_size}: need 0 <= rank < world_size")
        if n < 0 or chunk_len < 1:
            raise ValueError(f"need n >= 0 and chunk_len >= 1, got n={n}, chunk_len={chunk_len}")
        self.n, self.chunk_len, self.rank, self.num_replicas = int(n), int(chunk_len), int(rank), int(world_size)
        self.seed, self.shuffle, self.drop_last, self.even = int(seed), bool(shuffle), bool(drop_last), bool(even)
        self.epoch = 0
        if self.even and self.n_chunks < self.num_replicas:
            raise ValueError(f"{self.n} samples in {self.n_chunks} chunk(s) of {self.chunk_len} for "
                             f"{self.num_replicas} ranks: a rank would get no chunk; use split='samples' "
                             "(per-sample DistributedSampler) or a smaller chunk_len")

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    @property
    def n_chunks(self) -> int:
        return -(-self.n // self.chunk_len)

    def _size(self, c: int) -> int:
        return min(self.chunk_len, self.n - c * self.chunk_len)

    def plan(self, epoch: int | None = None) -> list[list[int]]:
        """Every rank's chunks, in reading order, for ``epoch`` (default: the current one)."""
        e = self.epoch if epoch is None else int(epoch)
        nc = self.n_chunks
        order = np.random.default_rng([self.seed, e]).permutation(nc) if self.shuffle else np.arange(nc)
        loads = np.zeros(self.num_replicas, np.int64)
        dealt: list[list[int]] = [[] for _ in range(self.num_replicas)]
        for c in order.tolist():
            r = int(np.argmin(loads))
            dealt[r].append(c)
            loads[r] += self._size(c)
        short = nc - 1 if self.n % self.chunk_len else -1
        return [[c for c in cs if c != short] + [c for c in cs if c == short] for cs in dealt]

    def chunks(self) -> list[int]:
        """This rank's chunks this epoch, in reading order."""
        return self.plan()[self.rank]

    def _order(self) -> list[int]:
        out: list[int] = []
        for c in self.chunks():
            lo, k = c * self.chunk_len, self._size(c)
            perm = np.random.default_rng([self.seed, self.epoch, c]).permutation(k) if self.shuffle else np.arange(k)
            out.extend((perm + lo).tolist())
        return out

    def _target(self) -> int | None:
        if not self.even:
            return None
        sizes = shard_sizes(self.n, self.chunk_len, self.num_replicas)
        return min(sizes) if self.drop_last else max(sizes)

    def __iter__(self) -> Iterator[int]:
        order, target = self._order(), self._target()
        if target is not None:
            if len(order) >= target:
                order = order[:target]
            else:                                            # pad from the rank's own samples, cyclically
                order = (order * -(-target // len(order)))[:target]
        return iter(order)

    def __len__(self) -> int:
        target = self._target()
        return target if target is not None else sum(self._size(c) for c in self.chunks())


def chunk_len_of(dataset) -> int | None:
    """``chunk_len`` of the store under any wrappers (``Transformed``, ``Subset`` are not chunk-aware:
    a ``Subset`` returns None, its indices are not the store's)."""
    d = dataset
    for _ in range(8):
        if getattr(d, "chunk_len", None) is not None:
            return int(d.chunk_len)
        if type(d).__name__ == "Subset":
            return None
        d = getattr(d, "dataset", None)
        if d is None:
            return None
    return None


def choose_split(dataset, fmt: str, world_size: int, split: str = "auto", even: bool = True) -> tuple[str, str]:
    """``(split, why)``: ``"chunks"`` where the format's registry entry says ``chunked`` and the
    set has at least one chunk per rank, else ``"samples"``. ``split`` forces one:
    ``"chunks"`` on a store without chunks (or, with ``even``, with fewer chunks than ranks)
    is an error naming the format; with ``even=False`` a forced chunk split may leave a
    rank empty."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: one of {', '.join(SPLITS)}")
    if split == "samples":
        return "samples", "asked for"
    chunked = get_format(fmt).chunked
    clen = chunk_len_of(dataset) if chunked else None
    if clen is None:
        why = (f"format {fmt} is not chunked" if not chunked
               else f"the {fmt} dataset given exposes no chunk_len (a Subset or a wrapper hides it)")
        if split == "chunks":
            raise ValueError(f"split='chunks': {why}; use split='samples'")
        return "samples", why
    nc = -(-len(dataset) // clen)
    if nc < world_size and (even or split == "auto"):
        if split == "chunks":
            raise ValueError(f"split='chunks': {len(dataset)} samples in {nc} chunk(s) of {clen} for "
                             f"{world_size} ranks; use split='samples' or a smaller chunk_len")
        return "samples", f"{nc} chunk(s) of {clen} < {world_size} ranks"
    return "chunks", f"{fmt} is chunked ({nc} chunks of {clen})"
