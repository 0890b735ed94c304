"""The claim registry's building blocks: a claim, a run's results, a verdict.

A :class:`Claim` names what a write-up said (in our words, with its number), the
notebook whose results test it, the tolerance that counts as reproduced, what the
machine needs (``gpu``, ``cores>=N``), the preconditions of a fair test
(:class:`Precondition`, :mod:`feedlab.report.claims.fair`: steady batches, a GPU-bound step,
the worker counts the claim names, a machine not busy, enough repeats, a meter that
resolves its window), and a function of a :class:`Run` (that notebook's
``results.json`` payload, ``results.csv`` and ``fingerprint.json``) returning an
:class:`Outcome`. :func:`feedlab.report.claims.fair.judge` turns the two into a :class:`Verdict`; nothing here
holds a verdict written in advance.

Outcomes: ``reproduced`` / ``partly`` / ``not reproduced`` (judged), ``not tested fairly
here`` (the run measured it, but a precondition of a fair test failed: the note says
which), ``not run`` (the machine could, but the run did not measure it: the note says why),
``not testable here`` (only a capability the machine lacks: a GPU, cores, a library) and
``smoke: not judged`` (a smoke-profile run: plumbing, not a measurement). A verdict
from a run whose machine was busy carries ``caveat``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from feedlab import like_for_like as lfl
from feedlab.files import load_json

REPRODUCED = "reproduced"
PARTLY = "partly"
NOT_REPRODUCED = "not reproduced"
NOT_FAIR = "not tested fairly here"
NOT_TESTABLE = "not testable here"   # only a capability the machine lacks (a GPU, cores, a library)
NOT_RUN = "not run"                  # the machine could, but the run did not measure it (the note says why)
SMOKE = "smoke: not judged"
JUDGED = (REPRODUCED, PARTLY, NOT_REPRODUCED)
STATUSES = (REPRODUCED, PARTLY, NOT_REPRODUCED, NOT_FAIR, NOT_RUN, NOT_TESTABLE, SMOKE)


class NoData(Exception):
    """The run lacks a number the claim's test needs (the message says which)."""


class Unfair(Exception):
    """The run measured something, but not what a fair test of the claim needs (the
    message says what is missing, e.g. a worker count the claim names)."""


@dataclass(frozen=True)
class Outcome:
    status: str
    ours: str
    note: str = ""
    # the settings compared, as ``results.csv`` filters (``{"num_workers": 16, "batch_size": 8}``):
    # the preconditions check these rows
    settings: tuple = ()

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"unknown verdict {self.status!r}; one of {STATUSES}")


@dataclass(frozen=True)
class Claim:
    id: str
    writeup: str               # "000" … "004", the key of docs/WRITEUPS.md
    text: str                  # the claim in our words
    theirs: str                # their number (or words, where they gave none)
    notebook: str              # e.g. "01_worker_scaling"
    tolerance: str             # what counts as reproduced / partly
    test: Callable[["Run"], Outcome] = field(repr=False, compare=False)
    needs: tuple[str, ...] = ()  # "gpu", "cores>=N"; empty: any machine
    fair: tuple["Precondition", ...] = field(default=(), compare=False)  # a fair test's preconditions


@dataclass(frozen=True)
class Precondition:
    """One precondition of a fair test: ``check(run, outcome)`` returns '' when met, else
    the reason (one clause, naming the numbers); ``check`` None: the claim's test enforces
    it itself (raises :class:`Unfair`), e.g. the worker counts it names."""
    name: str                 # short, for the ledger: "steady", "GPU-bound", "not busy", ...
    text: str                 # what a fair test needs, in words
    check: Callable[["Run", Outcome], str] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Verdict:
    claim: str
    status: str
    ours: str
    theirs: str
    note: str = ""
    caveat: str = ""           # e.g. the machine was busy while it measured

    def as_dict(self) -> dict:
        return {"status": self.status, "ours": self.ours, "theirs": self.theirs, "note": self.note,
                "caveat": self.caveat}


class Run:
    """One notebook run's results: the payload (in memory or ``results.json``), the
    tidy table ``results.csv`` and ``fingerprint.json`` of ``out_dir``."""

    def __init__(self, payload: dict | None = None, out_dir: str | Path | None = None,
                 fingerprint: dict | None = None, frame=None):
        self.out_dir = Path(out_dir) if out_dir is not None else None
        if payload is None and self.out_dir is not None and (self.out_dir / "results.json").is_file():
            payload = load_json(self.out_dir / "results.json")
        self.payload = payload or {}
        if fingerprint is None and self.out_dir is not None and (self.out_dir / "fingerprint.json").is_file():
            fingerprint = load_json(self.out_dir / "fingerprint.json")
        self.fingerprint = fingerprint
        self._frame = frame

    # -- the payload
    def get(self, *keys: Any) -> Any:
        """``payload[k0][k1]…``; :class:`NoData` naming the path when absent or null."""
        cur: Any = self.payload
        for i, k in enumerate(keys):
            if isinstance(cur, dict) and k in cur:
                cur = cur[k]
            elif isinstance(cur, dict) and str(k) in cur:
                cur = cur[str(k)]
            else:
                raise NoData(f"results.json has no {'/'.join(map(str, keys[:i + 1]))}")
        if cur is None or (isinstance(cur, float) and math.isnan(cur)):
            raise NoData(f"results.json: {'/'.join(map(str, keys))} was not measured")
        return cur

    # -- the tidy table
    @property
    def frame(self):
        if self._frame is None:
            path = self.out_dir / "results.csv" if self.out_dir is not None else None
            if path is None or not path.is_file():
                raise NoData("no results.csv beside the results")
            import pandas as pd
            self._frame = pd.read_csv(path)
        return self._frame

    def rows(self, **where):
        """Rows of results.csv matching every ``column=value`` (NoData if none)."""
        df = self.frame
        for k, v in where.items():
            if k not in df.columns:
                raise NoData(f"results.csv has no column {k!r}")
            df = df[df[k] == v]
        if df.empty:
            raise NoData("results.csv has no rows with " + ", ".join(f"{k}={v}" for k, v in where.items()))
        return df

    def median(self, by: list[str], **where):
        """Median value per group of ``by`` over repeats, as a pandas Series."""
        return self.rows(**where).groupby(by)["value"].median()

    def wide(self, by: list[str], column: str, **where):
        """:meth:`median` per group of ``by`` with one column per value of ``column`` (a DataFrame)."""
        return self.median([*by, column], **where).unstack(column)

    # -- the machine
    @property
    def cores(self) -> int | None:
        fp = self.fingerprint or {}
        return fp.get("cpu_usable") or fp.get("cpu_logical")

    @property
    def has_gpu(self) -> bool | None:
        if self.fingerprint is None:
            return None
        return bool(self.fingerprint.get("cuda_available")) and bool(self.fingerprint.get("gpus"))


def unmet_need(needs: tuple[str, ...], run: Run) -> str:
    """Why this machine cannot test the claim ('' when it can), from the fingerprint."""
    if not needs:
        return ""
    fp = run.fingerprint
    if fp is None:
        return "no fingerprint.json beside the results, so the machine is unknown"
    for need in needs:
        if need == "gpu" and not run.has_gpu:
            return "needs a CUDA GPU; this machine has none (fingerprint: cuda_available false)"
        if need.startswith("cores>="):
            n = int(need.split(">=", 1)[1])
            have = run.cores
            if have is None or have < n:
                return f"needs at least {n} usable cores; this machine has {have}"
    return ""


def is_smoke(run: Run) -> bool:
    """A smoke-profile run (``results.json`` → ``profile``): plumbing, never judged."""
    return str(run.payload.get("profile") or "").lower() == "smoke"


# ---------------------------------------------------------------- helpers for tests


def graded(value: float, reproduced: Callable[[float], bool], partly: Callable[[float], bool]) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise NoData("the compared number is missing")
    if reproduced(value):
        return REPRODUCED
    if partly(value):
        return PARTLY
    return NOT_REPRODUCED


def at_least(value: float, full: float, part: float) -> str:
    """reproduced at ``value >= full``, partly at ``value >= part``."""
    return graded(value, lambda v: v >= full, lambda v: v >= part)


def at_most(value: float, full: float, part: float) -> str:
    """reproduced at ``value <= full``, partly at ``value <= part``."""
    return graded(value, lambda v: v <= full, lambda v: v <= part)


def loglog_slope(xs, ys) -> float:
    """Least-squares slope of log(y) on log(x): 1 = proportional, 0 = flat."""
    import numpy as np

    x, y = np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float))
    if len(x) < 2 or np.ptp(x) == 0:
        raise NoData("fewer than two sizes to fit a slope")
    return float(np.polyfit(x, y, 1)[0])


def verdict(reproduced: bool, partly: bool = False) -> str:
    """REPRODUCED when ``reproduced`` holds, else PARTLY when ``partly`` does, else NOT_REPRODUCED."""
    return REPRODUCED if reproduced else PARTLY if partly else NOT_REPRODUCED


def all_or_some(flags) -> str:
    """REPRODUCED when every flag holds, PARTLY when some do, else NOT_REPRODUCED."""
    flags = list(flags)
    return verdict(all(flags), any(flags))


def status_of(full: "lfl.Verdict", part: "lfl.Verdict | None" = None) -> tuple[str, str]:
    """The one place a judge's words (:func:`feedlab.like_for_like.verdict`) become a claim's status: ``full``
    judged against the claim's reproduced bound, ``part`` against its partly bound. Sides not like for like
    (a differing or unrecorded invariant: "not known", never equal) or a side not fair: not tested fairly here
    (the judge's words); met the reproduced bound: reproduced; its interval holds the reproduced bound (not told
    apart from it): partly; else met the partly bound: partly; else not reproduced (the partly bound inside the
    interval is said)."""
    if full.word == lfl.NOT_LIKE:
        return NOT_FAIR, str(full)
    if full.word == lfl.NOT_FAIR:   # the status says "not tested fairly here": the judge's reason follows it
        return NOT_FAIR, full.why
    if full.word == lfl.MET:
        return REPRODUCED, full.why
    if full.word == lfl.WITHIN:
        return PARTLY, f"within spread of the reproduced bound: {full.why}"
    if part is None or part.word == lfl.MISSED:
        return NOT_REPRODUCED, part.why if part is not None else full.why
    if part.word == lfl.MET:
        return PARTLY, part.why
    return NOT_REPRODUCED, f"within spread of the partly bound: {part.why}"


def by_int(mapping: dict) -> dict[int, float]:
    """``{"2": 3.5}`` → ``{2: 3.5}``: a payload table keyed by a count (workers, batch size)."""
    return {int(k): float(v) for k, v in mapping.items()}


_PART = re.compile(r"([a-z]+)(\d+)")


def keyed(mapping: dict, prefix: str = "", fields: tuple[str, ...] = ("w", "b"), **where: int) -> dict[tuple, float]:
    """A payload table keyed by setting names (``"w2_b8"``, ``"baseline_w2_pin0_b8"``) → ``{(2, 8): x}``:
    keys starting with ``prefix``, the rest split at ``_`` into name + number; ``fields`` pick the
    tuple (a missing one is 0), ``where`` keeps only keys with those numbers (``pin=1``)."""
    out = {}
    for k, v in mapping.items():
        if not k.startswith(prefix):
            continue
        parts = {m.group(1): int(m.group(2)) for p in k[len(prefix):].split("_") if (m := _PART.fullmatch(p))}
        if all(parts.get(f, 0) == n for f, n in where.items()):
            out[tuple(parts.get(f, 0) for f in fields)] = float(v)
    if not out:
        raise NoData(f"no '{prefix}…' entries")
    return out
