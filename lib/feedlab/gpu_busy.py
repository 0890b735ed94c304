"""How busy the GPU was while a loop ran, measured two ways.

:class:`BusyMeter` (the reading the workbook uses, column ``gpu_busy``): a CUDA event is
recorded on the stream before and after each training step (the host→device copy, the
forward and the backward + optimizer step); at the end of the window the device is
synchronised once and ``sum(GPU time of the steps) ÷ wall time of the loop`` is the busy
fraction. The wall time counts everything the loop did (waiting for data included); the
GPU time is what the stream spent between each step's two events, so a step the GPU
waited on the host to launch counts its gaps too: the fraction is an upper bound on the
kernels' own share and it is exact for a step that is GPU-bound. ``steady`` windows leave
out the warm-up steps, the way ``pipeline.rate_of`` leaves them out of a rate. Off CUDA
every reading is NaN: there is no GPU to be busy.

:class:`NvmlWindow` (a second reading, column ``nvml_util``): NVML's utilisation is an
average over its own sample period (1/6 s to 1 s by product), so it is read from the
driver's sample buffer (``nvmlDeviceGetSamples(handle, NVML_GPU_UTILIZATION_SAMPLES,
last_seen)``), only the samples after the window began, and only when the window spans
at least :data:`MIN_PERIODS` of those periods; a shorter window is NaN with an
``nvml_note`` saying "not measured: window X s < 10 sample periods (Y s)".

Both take their clock, device, events and NVML module as arguments, so the CUDA paths run
on a CPU in the tests with fakes.
"""

from __future__ import annotations

import time
from typing import Any, Callable

MIN_PERIODS = 10
NAN = float("nan")


class BusyMeter:
    """``start_window()``, then ``step_begin()`` / ``step_end()`` around each step, then
    ``stop()`` (``run_epoch`` calls it as its loop ends) and
    ``end_window(skip_steps=k)`` → ``{"gpu_busy", "gpu_busy_steady", "gpu_step_s", "window_s", "steps"}``.

    ``device``: a torch device or name; off CUDA the meter records nothing and reads NaN.
    ``event``: a factory of CUDA-event-like objects (``record()``, ``elapsed_time(other)`` in ms);
    ``sync``: waits for the device; ``clock``: host seconds. The defaults are torch's.
    """

    def __init__(self, device="cpu", event: Callable[[], Any] | None = None,
                 sync: Callable[[], None] | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        self.cuda = str(device).startswith("cuda")
        self.clock = clock
        self._event = event
        self._sync = sync
        if self.cuda and event is None:
            import torch

            self._event = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
        if self.cuda and sync is None:
            import torch

            self._sync = lambda: torch.cuda.synchronize(device)  # noqa: E731
        self._pairs: list[list] = []
        self._ends: list[float] = []  # host time at each step_end: where a steady window starts
        self._t0: float | None = None
        self._t1: float | None = None

    def start_window(self) -> None:
        self._pairs.clear()
        self._ends.clear()
        self._t1 = None
        self._t0 = self.clock()

    def stop(self) -> None:
        """End the window: wait for the device once (on CUDA), then read the clock."""
        if self._t0 is None:
            raise RuntimeError("BusyMeter.stop() before start_window()")
        if self.cuda:
            self._sync()
        self._t1 = self.clock()

    def step_begin(self) -> None:
        if not self.cuda:
            return
        ev = self._event()
        ev.record()
        self._pairs.append([ev, None])

    def step_end(self) -> None:
        if not self.cuda or not self._pairs or self._pairs[-1][1] is not None:
            return
        ev = self._event()
        ev.record()
        self._pairs[-1][1] = ev
        self._ends.append(self.clock())

    def end_window(self, skip_steps: int = 0) -> dict:
        """Synchronise once, then read every step's events."""
        if self._t1 is None:
            self.stop()
        end = self._t1
        if not self.cuda:
            return {"gpu_busy": NAN, "gpu_busy_steady": NAN, "gpu_step_s": NAN,
                    "window_s": end - self._t0, "steps": 0}
        steps = [b.elapsed_time(e) / 1e3 for b, e in self._pairs if e is not None]
        wall = end - self._t0
        busy = sum(steps) / wall if wall > 0 else NAN
        steady = NAN
        k = int(skip_steps)
        if 0 < k < len(steps):
            w = end - self._ends[k - 1]
            steady = sum(steps[k:]) / w if w > 0 else NAN
        elif k == 0:
            steady = busy
        mean = sum(steps[k:]) / len(steps[k:]) if len(steps) > k else NAN
        return {"gpu_busy": busy, "gpu_busy_steady": steady, "gpu_step_s": mean, "window_s": wall,
                "steps": len(steps)}


def _load_nvml():
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    return pynvml


class NvmlWindow:
    """NVML's own utilisation samples over one window (see the module docstring).

    ``nvml``: a module with pynvml's names (``nvmlDeviceGetHandleByIndex``,
    ``nvmlDeviceGetSamples``, ``NVML_GPU_UTILIZATION_SAMPLES``); None loads pynvml.
    ``clock``: host seconds. Off CUDA, or without pynvml, :meth:`summary` says why.
    """

    def __init__(self, device="cpu", index: int = 0, nvml=None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.reason = ""
        self.nvml = None
        if not str(device).startswith("cuda"):
            self.reason = "not measured: no CUDA device"
            return
        try:
            self.nvml = nvml if nvml is not None else _load_nvml()
            self.handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            self.nvml = None
            self.reason = f"not measured: NVML unavailable ({type(exc).__name__}: {exc})"

    def _samples(self, last_seen: int) -> list[tuple[int, float]]:
        try:
            _kind, samples = self.nvml.nvmlDeviceGetSamples(self.handle, self.nvml.NVML_GPU_UTILIZATION_SAMPLES,
                                                            int(last_seen))
        except Exception as exc:
            if "NOTFOUND" in type(exc).__name__.upper().replace("_", "") or "not found" in str(exc).lower():
                return []  # no sample newer than last_seen yet
            raise
        out = []
        for s in samples:
            v = s.sampleValue
            out.append((int(s.timeStamp), float(getattr(v, "uiVal", v))))
        return out

    def __enter__(self):
        if self.nvml is not None:
            try:
                before = self._samples(0)
                self.last_seen = max((t for t, _ in before), default=0)
                self._t0 = self.clock()
            except Exception as exc:
                self.nvml = None
                self.reason = f"not measured: nvmlDeviceGetSamples failed ({type(exc).__name__}: {exc})"
        return self

    def __exit__(self, *exc) -> None:
        self._t1 = self.clock()
        self._got: list[tuple[int, float]] = []
        if self.nvml is not None:
            try:
                self._got = self._samples(self.last_seen)
            except Exception as e:
                self.nvml = None
                self.reason = f"not measured: nvmlDeviceGetSamples failed ({type(e).__name__}: {e})"

    def summary(self) -> dict:
        """``{"nvml_util": % or NaN, "nvml_period_s", "nvml_samples", "nvml_note"}``."""
        if self.nvml is None:
            return {"nvml_util": NAN, "nvml_period_s": NAN, "nvml_samples": 0, "nvml_note": self.reason}
        got = sorted(self._got)
        window = self._t1 - self._t0
        if len(got) < 2:
            return {"nvml_util": NAN, "nvml_period_s": NAN, "nvml_samples": len(got),
                    "nvml_note": f"not measured: window {window:.2f} s holds {len(got)} NVML sample(s); "
                                 f"its sample period is unknown"}
        gaps = sorted(b[0] - a[0] for a, b in zip(got, got[1:]))
        period = gaps[len(gaps) // 2] / 1e6
        if period <= 0 or window < MIN_PERIODS * period:
            return {"nvml_util": NAN, "nvml_period_s": period, "nvml_samples": len(got),
                    "nvml_note": f"not measured: window {window:.2f} s < {MIN_PERIODS} sample periods "
                                 f"({MIN_PERIODS * period:.2f} s)"}
        util = sum(v for _, v in got) / len(got)
        return {"nvml_util": util, "nvml_period_s": period, "nvml_samples": len(got),
                "nvml_note": f"{len(got)} NVML samples, period {period:.3f} s"}


__all__ = ["BusyMeter", "NvmlWindow", "MIN_PERIODS"]
