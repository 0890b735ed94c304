"""A multi-node Ray test cluster on this host, standing for several machines.

``ray.cluster_utils.Cluster`` starts a head node and worker nodes as separate raylets
(each with its own object store) on this host. The head plays the trainer: it is started
while this process is pinned to the trainer's cores and offers only the resource
``feedlab_trainer`` (as many as the trainer has cores); each worker node is started
pinned to its own slice of the other cores and offers ``feedlab_decode`` (its CPUs).
A process inherits its parent's CPU affinity, so each raylet and the Ray workers it
spawns stay on the cores of their "machine". A ``map_batches`` task that asks for
``feedlab_decode`` can only run on a worker node, one asking for ``feedlab_trainer``
only on the head: :func:`epoch` picks where decode runs by that resource, and every
batch carries the id of the node that decoded it (:class:`Recorder`), so placement and
exactly-once are checked on the batches the trainer really received.

What this is not: the "nodes" share one host's memory bus, page cache and kernel; a
batch moves between object stores over loopback, not a network. Real network transfer
is not measured here.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from time import perf_counter

import numpy as np

from feedlab import monitor, paths
from feedlab import pipeline as pl
from feedlab.scale import remote_decode as RD

TRAINER_RES = "feedlab_trainer"
DECODE_RES = "feedlab_decode"


def _set_all_threads(cores) -> None:
    """``sched_setaffinity`` sets one thread; every thread of this process gets ``cores``
    (torch's pools started before, and those started meanwhile when restoring)."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:  # a thread that ended meanwhile
            pass


@contextmanager
def pinned(cores):
    """This process, all its threads, and what it starts meanwhile on ``cores``; the old
    affinity comes back for every thread afterwards, also after an error."""
    old = os.sched_getaffinity(0)
    _set_all_threads({int(c) for c in cores})
    try:
        yield
    finally:
        _set_all_threads(old)


def split_cores(cores, trainer_cores: int = 0) -> tuple[list[int], list[int]]:
    """``(trainer's cores, the others)``: the first ``trainer_cores`` of ``cores`` (0: a quarter,
    at least one: the GPU box with too few cores). One line when nothing is left for the decode nodes."""
    cores = sorted(int(c) for c in cores)
    k = int(trainer_cores) or max(1, len(cores) // 4)
    if len(cores) < 2:
        raise ValueError(f"a trainer and a decode node need 2 usable cores; this process has {len(cores)}")
    if not 1 <= k < len(cores):
        raise ValueError(f"trainer_cores={trainer_cores}: the trainer needs 1..{len(cores) - 1} of the "
                         f"{len(cores)} usable cores so the decode nodes get the rest")
    return cores[:k], cores[k:]


def node_slices(cores, nodes: int) -> list[list[int]]:
    """The cores of each of ``nodes`` worker nodes: disjoint slices of ``cores`` when there are
    enough, else every node on all of them (they then share those cores, and say so)."""
    cores, nodes = sorted(int(c) for c in cores), int(nodes)
    if nodes < 1:
        raise ValueError(f"ray_nodes={nodes}: at least one decode node")
    if len(cores) >= nodes:
        return [[int(c) for c in a] for a in np.array_split(cores, nodes)]
    return [list(cores) for _ in range(nodes)]


class TestCluster:
    """Head (the trainer's cores) + ``len(node_cores)`` decode nodes of ``node_cpus`` CPUs each
    (0: as many as the node's slice has cores). Use as a context manager: whatever was started
    is shut down on the way out."""

    __test__ = False  # not a pytest class

    def __init__(self, trainer_cores, node_cores, node_cpus: int = 1, object_store_mb: int = 256):
        self.trainer_cores = [int(c) for c in trainer_cores]
        self.node_cores = [[int(c) for c in s] for s in node_cores]
        self.node_cpus = [int(node_cpus) or len(s) for s in self.node_cores]
        self.object_store = int(object_store_mb) * 2 ** 20
        self.cluster = None
        self.head_id = ""
        self.nodes: dict[str, dict] = {}  # node id -> role, cores it was started on, cores its workers report
        self.start_s = float("nan")

    @property
    def remote_cpus(self) -> int:
        """Decode CPUs over all worker nodes (Ray runs that many decode tasks at once)."""
        return int(sum(self.node_cpus))

    def start(self) -> "TestCluster":
        import ray
        from ray.cluster_utils import Cluster
        from ray.data import DataContext

        t = perf_counter()
        try:
            with pinned(self.trainer_cores):
                self.cluster = Cluster(initialize_head=True, head_node_args=dict(
                    num_cpus=len(self.trainer_cores), resources={TRAINER_RES: len(self.trainer_cores)},
                    object_store_memory=self.object_store, include_dashboard=False,
                    **({"temp_dir": paths.ray_temp_dir()} if paths.ray_temp_dir() else {})))
            for cores, cpus in zip(self.node_cores, self.node_cpus):
                with pinned(cores):
                    self.cluster.add_node(num_cpus=cpus, resources={DECODE_RES: cpus},
                                          object_store_memory=self.object_store)
            self.cluster.wait_for_nodes()
            with pinned(self.trainer_cores):  # the driver's own Ray threads stay on the trainer's cores
                ray.init(address=self.cluster.address, log_to_driver=False, configure_logging=False)
            DataContext.get_current().enable_progress_bars = False
            self.head_id = ray.get_runtime_context().get_node_id()
            self.nodes = self._probe()
        except BaseException:
            self.shutdown()
            raise
        self.start_s = perf_counter() - t
        return self

    def _probe(self) -> dict[str, dict]:
        """One task per node, pinned there by node affinity: which cores its Ray workers run on.
        (It also starts a Ray worker on every node, with feedlab imported, before anything is timed.)"""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        @ray.remote(num_cpus=0)
        def where():
            return ray.get_runtime_context().get_node_id(), sorted(os.sched_getaffinity(0))

        alive = [n for n in ray.nodes() if n.get("Alive")]
        refs = [where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
                for n in alive]
        out = {}
        for n, (nid, cores) in zip(alive, ray.get(refs)):
            head = TRAINER_RES in n.get("Resources", {})
            out[nid] = {"role": "head (trainer)" if head else "decode node", "worker_cores": cores,
                        "cpus": int(n.get("Resources", {}).get("CPU", 0))}
        names = iter(range(1, len(out) + 1))
        for v in out.values():
            if v["role"] == "decode node":
                v["role"] = f"decode node {next(names)}"
        return out

    def shutdown(self) -> None:
        import ray

        monitor.note_own_tree()   # the cluster's processes are ours: their CPU is not other load after they end
        try:
            if ray.is_initialized():
                ray.shutdown()
        finally:
            if self.cluster is not None:
                self.cluster.shutdown()
                self.cluster = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.shutdown()
        return False


class Recorder:
    """``iter_torch_batches``' collate that keeps, per batch the trainer received: the sample
    ids, the node that decoded them and the bytes of every column moved; gives ``(lr, hr)``
    uint8 NCHW as the DataLoader's ``fast`` collate does."""

    def __init__(self):
        self.ids: list[np.ndarray] = []
        self.nodes: list[str] = []
        self.nbytes = 0

    def collate(self):
        from ray.data.collate_fn import NumpyBatchCollateFn

        rec = self

        class Keep(NumpyBatchCollateFn):
            def __call__(self, batch: dict):
                rec.ids.append(np.asarray(batch["id"]).copy())
                rec.nodes.extend({bytes(x).decode() for x in batch["node"]})
                rec.nbytes += sum(int(np.asarray(v).nbytes) for v in batch.values())
                return RD._nchw(batch["lr"]), RD._nchw(batch["hr"])

        return Keep()

    def check(self, n: int, head_id: str, where: str) -> dict:
        """Every sample once? Did decode run where it was sent (off the head for ``remote``,
        on it for ``local``)?"""
        ids = np.concatenate(self.ids) if self.ids else np.zeros(0, dtype=np.int64)
        counts = np.bincount(ids, minlength=n) if len(ids) else np.zeros(n, dtype=np.int64)
        used = sorted(set(self.nodes))
        placed = (head_id not in used) if where == "remote" else (used == [head_id])
        once = bool(len(ids) == n and (counts == 1).all())
        return {"samples": int(len(ids)), "missing": int((counts == 0).sum()), "repeated": int((counts > 1).sum()),
                "once": once, "nodes_used": used, "placed_as_asked": bool(placed and used), "ok": once and placed}


def epoch(root, spec: pl.PipelineSpec, order, seed: int, work: int, where: str, rec: Recorder):
    """One epoch as Ray Data: ``order``'s ids, decoded by ``map_batches`` tasks on the decode
    nodes (``where="remote"``) or on the head, the trainer's cores (``"local"``)."""
    import ray.data

    res = {"remote": DECODE_RES, "local": TRAINER_RES}[where]
    ds = ray.data.from_items([{"id": int(i)} for i in order])
    ds = ds.map_batches(RD.decode_augment, fn_kwargs={"root": str(root), "spec": spec.as_dict(), "seed": seed,
                                                      "work": int(work), "where": True},
                        batch_size=spec.batch_size, batch_format="numpy", num_cpus=1, resources={res: 1})
    return ds.iter_torch_batches(batch_size=spec.batch_size, collate_fn=rec.collate(), prefetch_batches=2)


quiet_ray_data = RD.quiet_ray_data  # one definition (remote_decode), used by both Ray measurements
