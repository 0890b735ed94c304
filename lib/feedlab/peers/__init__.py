"""The contenders of notebook 13: feedlab's best pipeline against the loaders people pick instead.

>>> from feedlab import peers
>>> peers.names()                      # every contender, in table order
>>> peers.availability()               # {name: (available, reason)}; a missing one says why
>>> p = peers.get("webdataset")
>>> conv = p.convert(source, work)     # Conversion(seconds, bytes on disk)
>>> for batch in p.loader(source, work, Spec("sr", batch_size=64, workers=2)): ...

One module per contender (``torch_stock``, ``feedlab_best``, ``webdataset_peer``,
``litdata_peer``, ``mosaic_streaming``, ``torchdata_nodes``, ``hf_datasets``,
``ffcv_peer``, ``spdl_peer``, ``dali``), each used as its own documentation recommends (its
docstring says how). None is imported until used, so a missing package costs
nothing but a row marked *unavailable* with the import error and the install line.
A peer whose pins conflict with feedlab's, or that builds against system libraries
(MosaicML streaming, FFCV, SPDL), runs in a venv of its own (:mod:`feedlab.peers.venvs`,
``make peers``), measured there by the same code (:mod:`feedlab.peers.remote`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ._process import in_venv
from .base import KINDS, Conversion, Peer, Source, Spec
from .venvs import VENVS, python_for

BASELINE = "torch_stock"
FEEDLAB = "feedlab_best"


PEERS: dict[str, Peer] = {p.name: p for p in [
    Peer("torch_stock", "DataLoader, stock", "torch_stock", ("torch", "torchvision"), "pip install torch torchvision",
         parallelism="DataLoader num_workers (processes)", shuffle="global permutation per epoch (RandomSampler)",
         recipe="PNG pairs / ImageFolder + ToTensor + default_collate"),
    Peer("feedlab_best", "feedlab best", "feedlab_best", ("feedlab.pipeline.loaders",), "pip install -e .[fast]",
         parallelism="0: one process; W: DataLoader workers reading whole batches",
         shuffle="global permutation per epoch",
         recipe="the doctor's advice at this worker count among loaders that keep a global permutation "
                "(npy_mmap); JPEG: simplejpeg full-scale decode, crop, resize"),
    Peer("webdataset", "WebDataset", "webdataset_peer", ("webdataset",), "pip install webdataset",
         parallelism="WebLoader num_workers (processes, whole shards each)",
         shuffle="shard order shuffled + 1000-sample buffer", recipe="ShardWriter tar shards, .decode().batched()"),
    Peer("litdata", "LitData", "litdata_peer", ("litdata",), "pip install litdata",
         parallelism="StreamingDataLoader num_workers (processes)",
         shuffle="chunk order shuffled, samples shuffled within chunks", recipe="optimize() chunks, StreamingDataset"),
    Peer("mosaic_streaming", "MosaicML streaming", "mosaic_streaming", ("streaming",),
         "make peers (builds .venv-mosaic: mosaicml-streaming pins numpy<2.2 and huggingface-hub<1.0)",
         parallelism="DataLoader num_workers (processes)", shuffle="py1e shuffle over shards (its default)",
         recipe="MDSWriter shards, StreamingDataset"),
    Peer("torchdata_nodes", "torchdata.nodes", "torchdata_nodes", ("torchdata.nodes",), "pip install torchdata",
         parallelism="ParallelMapper num_workers (threads)", shuffle="global permutation per epoch (RandomSampler)",
         recipe="SamplerWrapper -> ParallelMapper -> Batcher -> collate -> Prefetcher"),
    Peer("hf_datasets", "HF datasets", "hf_datasets", ("datasets",), "pip install datasets",
         parallelism="DataLoader num_workers (processes)", shuffle="global permutation per epoch (RandomSampler)",
         recipe="Arrow save_to_disk, with_format('torch') / with_transform, DataLoader"),
    Peer("ffcv", "FFCV", "ffcv_peer", ("ffcv",),
         "make peers (builds .venv-ffcv: apt libopencv-dev libturbojpeg0-dev pkg-config, then pip install ffcv "
         "from source)",
         parallelism="Loader num_workers (threads, >= 1)", shuffle="OrderOption.RANDOM (global permutation)",
         recipe=".beton, JIT pipelines", min_workers=1),
    Peer("spdl", "SPDL", "spdl_peer", ("spdl.pipeline", "spdl.io"),
         "pip install spdl (its decoders load the system FFmpeg libraries: libavformat, libavfilter)",
         parallelism="PipelineBuilder pipe concurrency W on a pool of W threads (>= 1)",
         shuffle="global permutation per epoch (one pipeline per epoch)",
         recipe="source -> pipe(load, concurrency) -> aggregate -> sink; JPEG: spdl.io.load_image + FFmpeg filter",
         min_workers=1),
    Peer("dali", "NVIDIA DALI (CPU)", "dali", ("nvidia.dali",), "pip install nvidia-dali-cuda130 (or -cuda120)",
         parallelism="pipeline num_threads (>= 1)", shuffle="global permutation per epoch (shuffle_after_epoch)",
         recipe="readers.numpy / readers.file + decoders.image_random_crop, device_id=None", min_workers=1),
]}


# most telling first, per data set: feedlab's best, then the peers by their rates in the committed cpu-2c runs
# (FFCV best on SR, DALI on JPEG), the stock DataLoader early. A budgeted run measures every pair in this order,
# the first with the longest windows (peers.measure.shared_window); only a run's own limit leaves out the last
PRIORITY = {"sr": ("feedlab_best", "ffcv", "torch_stock", "torchdata_nodes", "litdata", "dali", "spdl",
                   "hf_datasets", "mosaic_streaming", "webdataset"),
            "cls": ("feedlab_best", "dali", "ffcv", "torch_stock", "litdata", "hf_datasets", "mosaic_streaming",
                    "torchdata_nodes", "webdataset", "spdl")}


def names() -> list[str]:
    return list(PEERS)


def _rank(name: str, kind: str) -> int:
    order = PRIORITY.get(kind, ())
    return order.index(name) if name in order else len(PEERS)


def by_priority(selected) -> list[str]:
    """``selected`` most telling first (its best rank on any data set in :data:`PRIORITY`)."""
    return sorted(selected, key=lambda n: min(_rank(n, k) for k in PRIORITY))


def plan(selected, kinds) -> list[tuple[str, str]]:
    """Every (contender, data set) of ``selected`` × ``kinds``, most telling first: rank by rank in
    :data:`PRIORITY`, the data sets alternating (feedlab on both, then each data set's best peer, ...)."""
    kinds = list(kinds)
    pairs = [(n, k) for n in selected for k in kinds]
    return sorted(pairs, key=lambda p: (_rank(*p), kinds.index(p[1])))


def get(name: str) -> Peer:
    try:
        return PEERS[name]
    except KeyError:
        raise KeyError(f"unknown contender {name!r}; one of: {', '.join(PEERS)}") from None


def availability(selected=None) -> dict[str, tuple[bool, str]]:
    """``{name: (available, reason)}``; the reason names the failing import and the install line. The peers
    with a venv of their own are checked side by side (each a Python that imports it: seconds each), the
    others here, one after the other (their imports share this interpreter)."""
    names = list(selected or PEERS)
    apart = [n for n in names if n in VENVS and not in_venv() and python_for(n) is not None]
    with ThreadPoolExecutor(max_workers=max(1, len(apart))) as pool:
        pending = {n: pool.submit(get(n).check) for n in apart}
        here = {n: get(n).check() for n in names if n not in pending}
        return {n: here[n] if n in here else pending[n].result() for n in names}


__all__ = ["BASELINE", "FEEDLAB", "KINDS", "PEERS", "PRIORITY", "by_priority", "plan", "Conversion", "Peer", "Source", "Spec", "availability",
           "get", "names"]
