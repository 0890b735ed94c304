"""Utilisation while something runs: CPU (psutil) everywhere, GPU where there is one.

    with CpuMonitor() as cpu, GpuMonitor() as gpu:
        run_epoch(...)
    cpu.summary()  # {'cpu_percent_mean': 187.0, 'cpu_saturation': 0.94, ...}

``process_tree_cpu_percent`` counts this process and its DataLoader workers only,
summed over cores (200 = two cores busy); ``cpu_saturation`` divides it by the usable
cores (1.0 = the loader's own process tree keeps every core busy): what the loader used,
the reading claims are judged on. ``cpu_percent`` is psutil's system-wide figure, and
``cpu_system_saturation`` its share of the cores: other processes included (a busy
machine reads 1.0 while the loader used a third of it), kept for the busy check.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from statistics import fmean

from feedlab import procgroup
from feedlab.paths import env_number


def usable_cores() -> int:
    """Cores available to this process, or ``$FEEDLAB_CORES`` when set (a pretend count). The one
    definition (``feedlab.machines`` re-exports it): it lives on the ground floor, with what
    measures the machine, so nothing below ``machines`` imports upward."""
    pretend = env_number("FEEDLAB_CORES", None, int, low=1, unit="cores")
    if pretend is not None:
        return pretend
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class _Sampler:
    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.samples: list[tuple[float, ...]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self):  # pragma: no cover - overridden
        raise NotImplementedError

    def _prime(self) -> None:
        pass

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            s = self._sample()
            if s is not None:
                self.samples.append(s)

    def __enter__(self):
        self._prime()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        s = self._sample()  # a closing sample covers the tail of short runs
        if s is not None:
            self.samples.append(s)


def _tree(me, psutil) -> list:
    """``me`` (a ``psutil.Process``) and its children, all generations; ``me`` alone where they cannot be read."""
    try:
        return [me, *me.children(recursive=True)]
    except psutil.Error:
        return [me]


class RssPeak(_Sampler):
    """Peak resident set size of this process and its children (bytes)."""

    def _prime(self) -> None:
        import psutil

        self._me = psutil.Process()
        self._psutil = psutil

    def _sample(self):
        total = 0
        for p in _tree(self._me, self._psutil):
            try:
                total += p.memory_info().rss
            except self._psutil.Error:
                continue
        return (total,)

    def peak(self) -> int:
        return int(max((s[0] for s in self.samples), default=0))


class CpuMonitor(_Sampler):
    """System-wide and process-tree CPU percent, sampled every ``interval`` s."""

    def _prime(self) -> None:
        import psutil

        self._psutil = psutil
        self._me = psutil.Process()
        psutil.cpu_percent(None)
        self._procs: dict[int, object] = {}
        self._tree_percent()

    def _tree_percent(self) -> float:
        total = 0.0
        for p in _tree(self._me, self._psutil):
            known = self._procs.setdefault(p.pid, p)
            try:
                total += known.cpu_percent(None)
            except self._psutil.Error:
                continue
        return total

    def _sample(self):
        return (time.perf_counter(), self._psutil.cpu_percent(None), self._tree_percent())

    def summary(self) -> dict:
        cores = usable_cores()
        if not self.samples:
            return {"cpu_percent_mean": float("nan"), "process_tree_cpu_percent_mean": float("nan"),
                    "cpu_saturation": float("nan"), "cpu_system_saturation": float("nan"), "cores": cores}
        samples = list(self.samples)  # one copy: the sampler thread may still append
        system = fmean(float(s[1]) for s in samples) * cores  # psutil: 0..100 over all cores
        tree = fmean(float(s[2]) for s in samples)  # psutil: 100 per core, summed over the tree
        return {"cpu_percent_mean": system,
                "process_tree_cpu_percent_mean": tree,
                "cpu_saturation": tree / (100.0 * cores),
                "cpu_system_saturation": system / (100.0 * cores),
                "cores": cores, "n_samples": len(samples)}


class GpuMonitor(_Sampler):
    """GPU utilisation (%) from NVML (``torch.cuda.utilization``) or nvidia-smi.
    ``available`` is False on a machine without CUDA; ``summary()`` then says why."""

    def __init__(self, interval: float = 0.1, device: int = 0) -> None:
        super().__init__(interval)
        self.device = device
        self.available, self.reason = self._probe()

    def _probe(self) -> tuple[bool, str]:
        try:
            import torch

            if not torch.cuda.is_available():
                return False, "no CUDA device on this machine"
            try:
                torch.cuda.utilization(self.device)
                self._how = "nvml"
                return True, ""
            except Exception:
                if shutil.which("nvidia-smi"):
                    self._how = "smi"
                    return True, ""
                return False, "CUDA present but neither pynvml nor nvidia-smi to read utilisation"
        except Exception as exc:  # pragma: no cover
            return False, f"torch unavailable: {exc}"

    def _prime(self) -> None:
        pass

    def _sample(self):
        if not self.available:
            return None
        if self._how == "nvml":
            import torch

            return (time.perf_counter(), float(torch.cuda.utilization(self.device)))
        out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                              f"--id={self.device}"], capture_output=True, text=True, timeout=5).stdout
        try:
            return (time.perf_counter(), float(out.strip().splitlines()[0]))
        except (ValueError, IndexError):
            return None

    def __enter__(self):
        if not self.available:
            return self
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        if self.available:
            super().__exit__(*exc)

    def summary(self) -> dict:
        if not self.available or not self.samples:
            return {"gpu_util_mean": float("nan"), "gpu_available": self.available,
                    "gpu_reason": self.reason or "no samples"}
        util = [float(s[1]) for s in self.samples]
        return {"gpu_util_mean": fmean(util), "gpu_util_max": max(util),
                "gpu_available": True, "n_samples": len(util)}


# ---- a busy machine: CPU used by other processes while we measure ---------------------

BUSY_THRESHOLD = float(os.environ.get("FEEDLAB_BUSY_THRESHOLD", "0.25"))  # of the usable cores
BUSY_SPEED = 0.90   # the doctor's own probe found less of a core per process: too busy to judge (report.targets)


def speed_left(summary: dict, k: int) -> float | None:
    """What other programs left each of ``k`` busy processes of ours, as a share of a core, over a
    :class:`LoadWindow` (its ``summary()``): the usable cores less those others used (and the hypervisor
    stole), over ``min(k, cores)``, at most 1. Unlike this process's own CPU over its wall time, a pass
    that waits on I/O or sleeps still reads 1 on an idle machine. None where the window could not read."""
    if not summary.get("available"):
        return None
    c = float(summary["usable_cores"])
    free = max(0.0, c - float(summary["other_cpu_cores"]) - float(summary.get("steal_cores") or 0.0))
    return min(1.0, free / min(float(k), c)) if c > 0 else None


def process_speed(capacity: float | None, k: int, cores: int | None, own: float | None = None) -> float | None:
    """One busy process's share of a core: the CPU-s/s that ``k`` busy processes got (``capacity``) over
    what an idle machine gives them (``min(k, cores)``), and ``own`` (what others left a pass: :func:`speed_left`),
    whichever is lower; None where neither is a number. Under :data:`BUSY_SPEED`: too busy to judge."""
    import math

    v = [x for x in (capacity / min(k, cores or k) if capacity is not None else None, own)
         if x is not None and math.isfinite(x)]
    return min(v) if v else None


def _usable_cpus() -> list[int] | None:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:
        return None


def _busy_seconds() -> tuple[float, float]:
    """(busy, steal) CPU seconds summed over this process's usable CPUs, since boot."""
    import psutil

    per_cpu = psutil.cpu_times(percpu=True)
    cpus = _usable_cpus()
    chosen = [per_cpu[i] for i in cpus if i < len(per_cpu)] if cpus else per_cpu
    busy = steal = 0.0
    for t in chosen:
        # guest time is already inside user on Linux; idle and iowait are not busy
        busy += t.user + t.system + getattr(t, "nice", 0.0) + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
        steal += getattr(t, "steal", 0.0)
    return busy, steal


class _OwnTree:
    """CPU seconds of this process and its descendants: each live process's own time and its reaped
    children's (``children_*``), plus what :func:`note_own_tree` saw of descendants that then left the tree
    without being reaped inside it (a local Ray's workers, reparented when Ray shuts down: notebook 14,
    2026-11-26, read 0.54 of 2 cores of its own Ray as "the machine was busy").

    A noted process that is gone is credited with its noted seconds less what the tree reaped since the look
    before (``children_*`` grew by it where a parent inside the tree waited for it: then nothing is added, so
    nothing is counted twice). A lower bound, so a busy machine is never hidden: CPU a noted process used
    after the note, and CPU the tree reaped of others in the same interval, are not credited."""

    def __init__(self) -> None:
        self.noted: dict[int, tuple[float, float]] = {}   # pid -> (its start time, own seconds when noted)
        self.credit = 0.0                                 # seconds of noted processes that left unreaped
        self.reaped: float | None = None                  # the live tree's children_* at the last look
        self._own: dict[int, tuple[float, float]] = {}    # pid -> (start time, own seconds) at the last look

    def _look(self) -> tuple[float, float, dict[int, tuple[float, float]], dict[int, float | None]]:
        """``(own and reaped, reaped, {pid: (start, own)} of live processes, {pid: start} present)``. A tree
        that cannot be listed raises (the window then says it is unavailable rather than guess); a process
        that cannot be read is present, not gone (its credit would count seconds it still carries)."""
        import psutil

        procs = [psutil.Process()]
        for pid in procgroup.descendants():   # the one tree walk (raises where /proc cannot be listed)
            try:
                procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:     # ended since it was listed
                continue
        total = reaped = 0.0
        own: dict[int, tuple[float, float]] = {}
        present: dict[int, float | None] = {}
        for p in procs:
            try:
                with p.oneshot():
                    t, start = p.cpu_times(), p.create_time()
            except psutil.NoSuchProcess:   # ended since it was listed (a zombie is still read, on Linux)
                continue
            except psutil.Error:
                present[p.pid] = None
                continue
            kids = getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
            total += t.user + t.system + kids
            reaped += kids
            own[p.pid] = (start, t.user + t.system)
            present[p.pid] = start
        return total, reaped, own, present

    @staticmethod
    def _same(start: float, now: float | None) -> bool:
        """The same process, not its pid reused: start times within a second (psutil derives them from the
        boot time, read afresh each time, so a clock step moves them a little), or unreadable now."""
        return now is None or abs(start - now) < 1.0

    def seconds(self) -> float:
        total, reaped, own, present = self._look()
        gone = [pid for pid, (start, _s) in self.noted.items()
                if pid not in present or not self._same(start, present[pid])]
        if gone:
            lost = sum(self.noted.pop(pid)[1] for pid in gone)
            absorbed = max(0.0, reaped - (reaped if self.reaped is None else self.reaped))
            self.credit += max(0.0, lost - absorbed)
        self.reaped = reaped
        self._own = own
        return total + self.credit

    def note(self) -> None:
        """Remember each live descendant's seconds now (:func:`note_own_tree`)."""
        self.seconds()
        mine = os.getpid()
        self.noted.update({pid: v for pid, v in self._own.items() if pid != mine})


_OWN = _OwnTree()


def _own_tree_seconds() -> float:
    """CPU seconds of this process tree, live, reaped and noted (:class:`_OwnTree`)."""
    return _OWN.seconds()


def note_own_tree() -> None:
    """Look at this process tree now: call it just before shutting down processes this one started that will
    leave the tree rather than be reaped inside it (a local Ray), so that their seconds stay ours."""
    try:
        _OWN.note()
    except Exception:  # no psutil: the load window says it is unavailable
        pass


class LoadWindow:
    """CPU used by *other* processes (not this one, not its workers) on the usable cores,
    from creation to :meth:`summary`: the whole machine's busy time from ``/proc/stat``
    minus this process tree's. No sampling thread, so nothing is added to what is timed."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._t0, self._pid = time.monotonic(), os.getpid()
        try:
            self._busy0, self._steal0 = _busy_seconds()
            self._own0 = _own_tree_seconds()
            self.available = True
        except Exception:  # no psutil, no /proc: say so rather than guess
            self.available = False

    def summary(self, threshold: float = BUSY_THRESHOLD) -> dict:
        cores = usable_cores()
        wall = time.monotonic() - self._t0
        if not self.available or wall <= 0:
            return {"available": False, "window_s": round(wall, 3), "usable_cores": cores}
        try:
            busy, steal = _busy_seconds()
            own = _own_tree_seconds() + _forked_from(self._pid)
        except Exception:  # the tree or /proc could not be read this time: say so rather than guess
            return {"available": False, "window_s": round(wall, 3), "usable_cores": cores}
        other = max(0.0, (busy - self._busy0) - (own - self._own0)) / wall
        steal_cores = max(0.0, steal - self._steal0) / wall
        fraction = (other + steal_cores) / cores
        return {"available": True, "window_s": round(wall, 3), "usable_cores": cores,
                "other_cpu_cores": round(other, 3), "steal_cores": round(steal_cores, 3),
                "other_fraction": round(fraction, 3), "threshold_fraction": threshold,
                "busy": fraction > threshold}


def _forked_from(pid: int) -> float:
    """A window read in a fork of the process it began in (the doctor's ``--script`` child): that process's CPU
    seconds, its own and what it reaped, so the tree the window began with is still the one subtracted (a fork's
    own seconds start at 0: the watcher's torch import read as other load, "too busy" on an idle machine)."""
    if pid == os.getpid():
        return 0.0
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:   # it ended: its seconds cannot be read, nothing added (a busier reading, never a quieter)
        return 0.0
    return t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)


_RUN = LoadWindow()      # since the notebook (or process) started measuring
_LAST = LoadWindow()     # since the previous check_busy()
_WINDOWS: list[dict] = []


def start_run() -> None:
    """Start the run's load windows afresh (``feedlab.profiles.resolve`` calls it)."""
    _RUN.reset()
    _LAST.reset()
    _WINDOWS.clear()
    _SAID.clear()


_SAID: list[bool] = []   # the full busy sentence was printed in this run (then shorter ones)


def busy_message(s: dict, what: str = "", again: bool = False) -> str:
    """One plain sentence; ``again``: the short form, after the run has said it once."""
    where = f" during {what}" if what else ""
    steal = f" + {s['steal_cores']:.2f} stolen by the hypervisor" if s.get("steal_cores") else ""
    if again:
        return (f"Busy again{where}: other processes used {s['other_cpu_cores']:.2f}{steal} of "
                f"{s['usable_cores']} usable cores ({s['other_fraction']:.0%}).")
    return (f"The machine was busy{where}: other processes used {s['other_cpu_cores']:.2f}"
            f"{steal} of {s['usable_cores']} usable cores ({s['other_fraction']:.0%}, over the "
            f"{s['threshold_fraction']:.0%} this workbook accepts), so these readings may be slowed and "
            f"their ratios distorted; re-run on an idle machine before relying on them.")


def check_busy(what: str = "", log=print, threshold: float = BUSY_THRESHOLD) -> dict:
    """Load by other processes since the previous call (one measurement); warns in one line
    when it exceeds ``threshold`` of the usable cores. The window is kept for the fingerprint."""
    s = _LAST.summary(threshold)
    s["what"] = what
    _LAST.reset()
    if s.get("available"):
        _WINDOWS.append(s)
        if s["busy"] and log is not None:
            log(busy_message(s, what, again=bool(_SAID)))
            _SAID.append(True)
    return s


def load_record(threshold: float = BUSY_THRESHOLD) -> dict:
    """For the fingerprint: the load by other processes over the whole run and in its
    busiest checked window (each measurement ends with :func:`check_busy`)."""
    run = _RUN.summary(threshold)
    windows = [w for w in _WINDOWS if w.get("available")]
    busiest = max(windows, key=lambda w: w["other_fraction"]) if windows else None
    return {"whole_run": run, "busiest_window": busiest, "windows_checked": len(windows),
            "busy": bool(run.get("busy") or (busiest and busiest["busy"]))}
