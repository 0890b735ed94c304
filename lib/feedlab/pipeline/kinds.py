"""Loader kinds: the pipeline's third registry (after formats and collates).

``PipelineSpec(loader=...)`` names one of :data:`LOADER_KINDS`; ``pipeline.make_loader``
builds it through :func:`build`, and ``PipelineSpec.problems()`` asks
:func:`kind_problems` whether the format can feed it. Each kind states what it
requires of a format's capabilities (``feedlab.formats.FormatSpec``: ``batched``,
``chunked``, ...), whether it runs worker processes, and whether it collates
(``collates=False``: it fills uint8 NHWC batch slots itself, so the spec's
collate must be a uint8 one, ``fast`` or ``fast_cl``; :func:`build` hands its batches out as
NCHW-shaped views with channels-last strides, as ``fast_cl`` does, without a copy).

==============  ==============  =======  ==================================================
kind            requires        workers  what
==============  ==============  =======  ==================================================
``dataloader``  --              any      ``torch.utils.data.DataLoader`` (the default)
``plain``       --              0        ``loaders.plain_loop``: index batches, collate, no DataLoader
``batched``     ``batched``     0        ``loaders.BatchReadLoader``: ``read_batch(idx, out=)``
``chunk``       ``chunked``     0        ``loaders.ChunkLoader``: chunk-aligned batch reads
``ring``        --              >= 1     ``ring.RingLoader``: workers fill a shared-memory ring
``threads``     --              >= 1     ``loaders.ThreadLoader``: threads fill reused slots (SPDL-style)
==============  ==============  =======  ==================================================

A builder is ``build(dataset, spec, *, collate_fn, seed, shuffle, drop_last, pin, **overrides)``
(``collate_fn`` resolved by the pipeline, ``pin``: pinning is meaningful here). Add a kind with
:func:`register_loader_kind`; a duplicate name is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

UINT8_COLLATES = ("fast", "fast_cl")


@dataclass(frozen=True)
class LoaderKind:
    name: str
    build: Callable
    doc: str
    requires: tuple[str, ...] = ()   # FormatSpec capabilities the format must have
    workers: str = "any"             # "any", "none" (num_workers must be 0) or "some" (>= 1)
    collates: bool = True            # False: fills uint8 slots itself (collate must be a uint8 one)


LOADER_KINDS: dict[str, LoaderKind] = {}


def register_loader_kind(kind: LoaderKind, replace: bool = False) -> LoaderKind:
    if kind.name in LOADER_KINDS and not replace:
        raise ValueError(f"loader kind {kind.name!r} is already registered")
    LOADER_KINDS[kind.name] = kind
    return kind


def get_loader_kind(name: str) -> LoaderKind:
    try:
        return LOADER_KINDS[name]
    except KeyError:
        raise ValueError(f"loader {name!r}: one of {', '.join(LOADER_KINDS)}") from None


def kind_problems(name: str, capabilities: dict | None, num_workers: int, collate: str) -> list[str]:
    """Why loader kind ``name`` cannot mean what it says for a format with ``capabilities``
    (``FormatSpec.capabilities()``; None: unknown format, checked elsewhere)."""
    if name not in LOADER_KINDS:
        return [f"unknown loader {name!r} (one of {', '.join(LOADER_KINDS)})"]
    k = LOADER_KINDS[name]
    out = []
    if capabilities is not None:
        missing = [c for c in k.requires if not capabilities.get(c)]
        if missing:
            out.append(f"loader {name!r} needs a format that is {' and '.join(missing)}")
    if k.workers == "none" and num_workers:
        out.append(f"loader {name!r} runs in one process: num_workers must be 0")
    if k.workers == "some" and num_workers < 1:
        out.append(f"loader {name!r} needs num_workers >= 1")
    if not k.collates and collate not in UINT8_COLLATES:
        out.append(f"loader {name!r} fills uint8 NHWC batch slots: use collate fast or fast_cl, not {collate!r}")
    return out


def build(dataset, spec, **kw):
    """The loader of kind ``spec.loader`` over ``dataset`` (see the module doc). A kind that fills
    uint8 NHWC slots itself is wrapped in :class:`NCHWView`, so every kind yields NCHW-shaped batches."""
    kind = get_loader_kind(getattr(spec, "loader", "dataloader"))
    loader = kind.build(dataset, spec, **kw)
    return loader if kind.collates else NCHWView(loader)


# ---------------------------------------------------------------- the kinds


def _dataloader(dataset, spec, *, collate_fn, seed=0, shuffle=True, drop_last=False, pin=False, **overrides):
    """A DataLoader whose workers are checked against /dev/shm before they start, and whose running out of
    it is one line (:mod:`feedlab.pipeline.shm`)."""
    import torch

    from .shm import CheckedDataLoader, SharedMemoryError, shm_problem_of

    kw: dict = {}
    if spec.num_workers > 0:
        kw["prefetch_factor"] = spec.prefetch_factor or 2
        kw["persistent_workers"] = bool(spec.persistent_workers)
    if shuffle and "sampler" not in overrides and "batch_sampler" not in overrides:
        kw["shuffle"] = True
        kw["generator"] = torch.Generator().manual_seed(seed)
    batch_size = overrides.pop("batch_size", spec.batch_size)  # None: the dataset yields whole batches
    kw.update(overrides)
    problem = shm_problem_of(dataset, batch_size, spec.num_workers, kw.get("prefetch_factor") or 2)
    if problem:
        raise SharedMemoryError(problem)
    return CheckedDataLoader(dataset, batch_size=batch_size, num_workers=spec.num_workers, pin_memory=pin,
                             collate_fn=collate_fn, drop_last=drop_last, **kw)


class NCHWView:
    """A slot-filling loader's uint8 NHWC batches as NCHW-shaped views with channels-last strides
    (what ``FastCollate(memory_format="channels_last")`` returns; no copy): what a model takes.
    ``len()``, ``close()`` and the wrapped ``loader`` pass through."""

    def __init__(self, loader):
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        for lr, hr in self.loader:
            yield lr.permute(0, 3, 1, 2), hr.permute(0, 3, 1, 2)

    def close(self) -> None:
        close = getattr(self.loader, "close", None)
        if close is not None:
            close()

    def __getattr__(self, name):
        return getattr(self.__dict__["loader"], name)


def _no_overrides(name: str, overrides: dict) -> None:
    if overrides:
        raise ValueError(f"loader {name!r} takes no DataLoader options ({', '.join(overrides)})")


def _plain(dataset, spec, *, collate_fn, seed=0, shuffle=True, drop_last=False, pin=False, **overrides):
    from feedlab.pipeline.loaders import plain_loop

    _no_overrides("plain", overrides)
    return plain_loop(dataset, spec.batch_size, collate_fn, shuffle, seed, drop_last)


def _batched(dataset, spec, *, collate_fn, seed=0, shuffle=True, drop_last=False, pin=False, **overrides):
    from feedlab.pipeline.loaders import BatchReadLoader

    _no_overrides("batched", overrides)
    return BatchReadLoader(dataset, spec.batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last)


def _chunk(dataset, spec, *, collate_fn, seed=0, shuffle=True, drop_last=False, pin=False, **overrides):
    from feedlab.pipeline.loaders import ChunkLoader

    _no_overrides("chunk", overrides)
    return ChunkLoader(dataset, spec.batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last)


def _threads(dataset, spec, *, collate_fn, seed=0, shuffle=True, drop_last=False, pin=False, **overrides):
    from feedlab.pipeline.loaders import ThreadLoader

    slots = overrides.pop("slots", None)
    _no_overrides("threads", overrides)
    return ThreadLoader(dataset, spec.batch_size, num_threads=spec.num_workers, slots=slots, shuffle=shuffle,
                        seed=seed, drop_last=drop_last)


def _ring(dataset, spec, *, collate_fn, seed=0, shuffle=True, drop_last=False, pin=False, **overrides):
    from feedlab.pipeline.ring import RingLoader

    allowed = {"slots", "start_method", "timeout_s"}
    _no_overrides("ring", {k: v for k, v in overrides.items() if k not in allowed})
    return RingLoader(dataset, spec.batch_size, num_workers=spec.num_workers, shuffle=shuffle, seed=seed,
                      drop_last=drop_last, pin=pin, **overrides)


for _k in (
    LoaderKind("dataloader", _dataloader, "torch DataLoader (workers pickle each batch to the main process)"),
    LoaderKind("plain", _plain, "one process: index batches, the spec's collate, no DataLoader", workers="none"),
    LoaderKind("batched", _batched, "one process: read_batch(indices, out=) into reused uint8 NHWC arrays",
               requires=("batched",), workers="none", collates=False),
    LoaderKind("chunk", _chunk, "one process: chunk-aligned read_batch into reused uint8 NHWC arrays",
               requires=("chunked",), workers="none", collates=False),
    LoaderKind("ring", _ring, "worker processes fill slots of a shared-memory ring; the main process "
               "receives a slot index (uint8 NHWC, valid until the next batch)", workers="some", collates=False),
    LoaderKind("threads", _threads, "num_workers threads of this process fill reused uint8 NHWC slots "
               "(reads and decodes that release the GIL run in parallel; no inter-process copy)",
               workers="some", collates=False),
):
    register_loader_kind(_k)


__all__ = ["LoaderKind", "LOADER_KINDS", "register_loader_kind", "get_loader_kind", "kind_problems", "build",
           "UINT8_COLLATES", "NCHWView"]
