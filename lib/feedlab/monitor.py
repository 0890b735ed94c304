"""Utilisation while something runs: CPU (psutil) everywhere, GPU where there is one.

    with CpuMonitor() as cpu, GpuMonitor() as gpu:
        run_epoch(...)
    cpu.summary()  # {'cpu_percent_mean': 187.0, 'cpu_saturation': 0.94, ...}

``cpu_percent`` is psutil's system-wide figure summed over cores (200 = two
cores busy); ``cpu_saturation`` divides it by the usable cores (1.0 = every
core busy). The process-tree figure counts this process and its DataLoader
workers only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time

import numpy as np


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
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
        try:
            procs = [self._me, *self._me.children(recursive=True)]
        except self._psutil.Error:
            procs = [self._me]
        for p in procs:
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
                    "cpu_saturation": float("nan"), "cores": cores}
        a = np.asarray(self.samples, dtype=float)
        system = float(a[:, 1].mean()) * cores  # psutil: 0..100 over all cores
        return {"cpu_percent_mean": system,
                "process_tree_cpu_percent_mean": float(a[:, 2].mean()),
                "cpu_saturation": system / (100.0 * cores),
                "cores": cores, "n_samples": len(a)}


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
        a = np.asarray(self.samples, dtype=float)
        return {"gpu_util_mean": float(a[:, 1].mean()), "gpu_util_max": float(a[:, 1].max()),
                "gpu_available": True, "n_samples": len(a)}
