"""Between epochs (what tf.data's AUTOTUNE does online, for a DataLoader): :class:`Retuned`, opt-in.

    loader = feedlab.tuner.Retuned(make_loader, step=train_step)
    for epoch in range(epochs):
        for batch in loader:          # one epoch of the loader it holds now
            train_step(batch)

Each epoch the wrapper measures the data wait of the user's loop (the time spent in ``next()`` over the
epoch's wall time) and what other programs used of the cores (``monitor.LoadWindow``). At the boundary it
re-tunes (:func:`feedlab.tuner.search.tune`, from the user's own loader) and rebuilds the loader when the data
wait crosses the field's 5% line upward, or the free cores changed by ``core_change`` or more since the last
tune; it logs why, and keeps each boundary's reading in :attr:`Retuned.events`.

A load that stays is the machine the job now runs on: the re-tune's trials are judged busy only where the other
load moved by more than the workbook's threshold from the level at the boundary (:class:`SteadyLoad`), so a
CPU hog that started mid-run is tuned for, and one that comes and goes during the trials is "too busy to tune".
"""

from __future__ import annotations

import time
from typing import Any, Callable

from feedlab import monitor

from .search import tune

WAIT_LINE = 0.05      # the field's line: a loop waiting more than 5% of its time on data is input-bound


class SteadyLoad:
    """A load window whose ``busy`` means the other load *moved*: more than ``threshold`` of the cores away
    from ``baseline`` other cores (the level measured at the boundary)."""

    def __init__(self, baseline: float, threshold: float = monitor.BUSY_THRESHOLD, inner=monitor.LoadWindow):
        self.baseline, self.threshold, self.w = float(baseline), float(threshold), inner()

    def summary(self) -> dict:
        s = dict(self.w.summary())
        if s.get("available"):
            moved = abs(float(s.get("other_cpu_cores", 0.0)) - self.baseline)
            s["busy"] = moved > self.threshold * float(s["usable_cores"])
            s["baseline_cores"] = self.baseline
        return s


class Retuned:
    """The user's loader, re-tuned at epoch boundaries when the data wait crosses 5% or the free cores
    change (this module's docstring). ``tune_kw`` goes to :func:`tune` (budget, windows, passes);
    ``tune_first``: tune before the first epoch too."""

    def __init__(self, make_loader: Callable[[], Any], step: Callable[[Any], Any] | None = None, *,
                 wait_line: float = WAIT_LINE, core_change: float = 0.75, tune_first: bool = False,
                 log: Callable[[str], None] | None = print, load_window=monitor.LoadWindow, **tune_kw):
        self.make_loader, self.step = make_loader, step
        self.base = make_loader()
        self.loader = self.base
        self.settings: dict = {}
        self.wait_line, self.core_change = float(wait_line), float(core_change)
        self.log = log or (lambda m: None)
        self.load_window = load_window
        self.tune_kw = tune_kw
        self.events: list[dict] = []
        self.epoch = 0
        self._above = False
        self._free: float | None = None
        if tune_first:
            self._retune("asked to tune before the first epoch", None)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        window = self.load_window()
        wait, t0 = 0.0, time.perf_counter()
        it = iter(self.loader)
        try:
            while True:
                a = time.perf_counter()
                try:
                    batch = next(it)
                except StopIteration:
                    break
                wait += time.perf_counter() - a
                yield batch
        finally:
            del it
        wall = time.perf_counter() - t0
        self._boundary(wait / wall if wall > 0 else 0.0, window.summary())

    def _boundary(self, share: float, s: dict) -> None:
        self.epoch += 1
        free = (float(s["usable_cores"]) - float(s.get("other_cpu_cores", 0.0))) if s.get("available") else None
        why = []
        above = share > self.wait_line
        if above and not self._above:
            why.append(f"the data wait crossed {self.wait_line:.0%} ({share:.1%} of the epoch)")
        if free is not None and self._free is not None and abs(free - self._free) >= self.core_change:
            why.append(f"the free cores changed from {self._free:.1f} to {free:.1f}")
        self._above = above
        if self._free is None:
            self._free = free
        event = {"epoch": self.epoch, "wait_share": share, "free_cores": free, "why": why, "retuned": False,
                 "settings": dict(self.settings)}
        self.events.append(event)
        if why:
            self._retune("; ".join(why), free, event, s.get("other_cpu_cores", 0.0))

    def _retune(self, why: str, free: float | None, event: dict | None = None, other: float = 0.0) -> None:
        self.log(f"epoch {self.epoch}: {why}: re-tuning at the boundary")
        res = tune(lambda: self.base, self.step, load_window=lambda: SteadyLoad(other, inner=self.load_window),
                   **self.tune_kw)
        if res.busy:
            self.log(f"epoch {self.epoch}: {res.busy}; the loader kept as it was")
        else:
            self.settings = dict(res.settings)
            self.loader = res.loader
            self.log(f"epoch {self.epoch}: {res.render().splitlines()[0]}")
        if free is not None:
            self._free = free
        if event is not None:
            event.update(retuned=not res.busy, settings=dict(self.settings), busy=res.busy,
                         tune_s=res.seconds, verdict=str(res.verdict) if res.verdict else None)
