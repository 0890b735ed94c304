"""Shared fixtures: a tiny SR set (48 pairs, 32px HR, x2) packed into every format,
and a tiny ImageFolder, each built once per test session in a temp dir."""

from __future__ import annotations

import os
import signal
import sys
import threading
import warnings
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[1]
for _p in (_REPO / "lib", _REPO):  # work without `pip install -e .`
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

# a figure defect (no legend for several series, a legend over the data, ...) fails the
# test that draws it; notebooks executed by the tests inherit this
os.environ.setdefault("FEEDLAB_STRICT_FIGURES", "1")

_SHM = Path("/dev/shm")


def _shm_names() -> set[str]:
    try:
        return {p.name for p in _SHM.iterdir()}
    except OSError:
        return set()


def shm_held_by_others(ours: set[int] | None = None) -> set[str]:
    """The /dev/shm names a live process other than ``ours`` (this one and its children) has open or mapped:
    another test run's on a shared machine, never a file this run left behind."""
    import psutil

    if ours is None:
        ours = {os.getpid(), *(c.pid for c in psutil.Process().children(recursive=True))}
    held: set[str] = set()
    for n in os.listdir("/proc"):
        if not n.isdigit() or int(n) in ours:
            continue
        try:
            with open(f"/proc/{n}/maps") as fh:
                held |= {ln.split("/dev/shm/", 1)[1].split(" (deleted)")[0].strip() for ln in fh if "/dev/shm/" in ln}
            for fd in os.listdir(f"/proc/{n}/fd"):
                target = os.readlink(f"/proc/{n}/fd/{fd}")
                if target.startswith("/dev/shm/"):
                    held.add(target[len("/dev/shm/"):])
        except OSError:
            continue
    return held


def pytest_sessionstart(session):
    # started in the background (bash's `cmd &` ignores SIGINT): the children the signal tests start would inherit
    # the ignore and never see their SIGINT; the suite runs with Ctrl-C's usual handler, as in a terminal
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # started under nohup (SIGHUP ignored): the children of the SIGHUP tests would inherit the ignore and run on to
    # their deadlines (a CI check of 2026-11-28: all seven SIGHUP cases). A handler that does nothing keeps the
    # suite itself alive through a hang-up, as nohup meant, and exec gives every child SIGHUP's default
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, _hangup_ignored)
    session.config._feedlab_shm = _shm_names()


def _hangup_ignored(_signum, _frame) -> None:
    """The suite's SIGHUP where it was started under nohup: nothing happens (as nohup meant), but a caught signal,
    unlike an ignored one, is not inherited across exec."""


#: what a test may not leave changed for the tests after it (and the children they start: an ignored signal and a
#: blocked one are inherited across exec): run_kernel.stop_on_signals once left SIGTERM ignored, and CI failed later
GUARDED_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP", "SIGINT", "SIGALRM") if hasattr(signal, n))


class LeftChanged(pytest.PytestWarning):
    """A test left a signal's handler, the signal mask, a FEEDLAB_* variable, TMPDIR or the working folder
    changed: put back after it, and named in the warnings summary."""


def _kernel_ignored() -> set[int]:
    """The guarded signals the kernel ignores for this process (what a child inherits), from /proc."""
    try:
        with open("/proc/self/status") as fh:
            bits = next((int(ln.split()[1], 16) for ln in fh if ln.startswith("SigIgn:")), 0)
    except OSError:
        return set()
    return {int(s) for s in GUARDED_SIGNALS if bits >> (int(s) - 1) & 1}


def process_state() -> dict:
    """This process's state a test must leave as it found it (:class:`LeftChanged`)."""
    return {"handlers": {s: signal.getsignal(s) for s in GUARDED_SIGNALS}, "ignored": _kernel_ignored(),
            "mask": signal.pthread_sigmask(signal.SIG_BLOCK, []), "cwd": os.getcwd(),
            "env": {k: v for k, v in os.environ.items() if k.startswith("FEEDLAB_") or k == "TMPDIR"}}


def put_back(before: dict) -> list[str]:
    """Put back what changed since ``before`` (:func:`process_state`); returns what was changed, in words."""
    now, said = process_state(), []
    for sig, handler in before["handlers"].items():
        if now["handlers"][sig] is not handler or (int(sig) in now["ignored"]) != (int(sig) in before["ignored"]):
            said.append(f"{signal.Signals(sig).name}'s handler")
            if handler is not None:   # None: set outside Python, nothing to put back
                signal.signal(sig, handler)
    if now["mask"] != before["mask"]:
        said.append("the signal mask")
        signal.pthread_sigmask(signal.SIG_SETMASK, before["mask"])
    for key in sorted(set(now["env"]) | set(before["env"])):
        if now["env"].get(key) != before["env"].get(key):
            said.append(f"${key}")
            if key in before["env"]:
                os.environ[key] = before["env"][key]
            else:
                os.environ.pop(key, None)
    if now["cwd"] != before["cwd"]:
        said.append("the working folder")
        os.chdir(before["cwd"])
    return said


@pytest.fixture(autouse=True)
def _leaves_the_process_as_found(request):
    """Every test: what it changed of :func:`process_state` is put back, and a :class:`LeftChanged` warning
    names it (a later test never sees it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = process_state()
    yield
    said = put_back(before)
    if said:
        warnings.warn(LeftChanged(f"{request.node.nodeid} left {', '.join(said)} changed: put back"), stacklevel=1)


SLOW_LIST = Path(__file__).parent / "unit" / "slow_tests.txt"


def slow_tests() -> set[str]:
    """``file::function`` of every unit test listed as slow (tests/unit/slow_tests.txt)."""
    return {line.strip() for line in SLOW_LIST.read_text().splitlines() if line.strip() and not line.startswith("#")}


def pytest_collection_modifyitems(config, items):
    """Mark the listed slow tests ``slow`` (``make test`` runs ``-m "not slow"``, ``make test-slow`` the rest)."""
    slow = slow_tests()
    for item in items:
        if item.nodeid.split("[")[0] in slow:
            item.add_marker(pytest.mark.slow)


def pytest_collection_finish(session):
    """Every module the tests import (torch, pandas, matplotlib, feedlab: ~280,000 objects) is imported by now:
    move them out of the collector's sight (``gc.freeze``). A full collection (the library's own ``gc.collect``
    after closing a store or a loader, and Python's automatic ones) then walks only what the tests made since:
    microseconds instead of 0.1-0.7 s each, hundreds of times a run. What a test makes is collected as before."""
    import gc

    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session, exitstatus):
    """A test run leaves /dev/shm as it found it: a ring or loader file left behind fails the run, named."""
    before = getattr(session.config, "_feedlab_shm", None)
    if before is None:
        return
    import time

    def left_behind() -> list[str]:
        new = _shm_names() - before
        return sorted(new - shm_held_by_others()) if new else []

    end = time.monotonic() + 5.0   # a stopped process's semaphores: its resource tracker unlinks them a moment later
    while (left := left_behind()) and time.monotonic() < end:
        time.sleep(0.2)
    if left:
        print(f"\n/dev/shm: the tests left {len(left)} file(s) behind: {', '.join(left[:5])}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


SR_COUNT = 48
SR_PATCH = 32
SR_SCALE = 2


@pytest.fixture(scope="session")
def sr_root(tmp_path_factory) -> Path:
    """An SR set with every packable format; tests must not modify it."""
    import data_prep

    root = tmp_path_factory.mktemp("data") / "sr32"
    data_prep.build_sr(root, SR_PATCH, SR_SCALE, SR_COUNT, seed=0, log=lambda _m: None)
    data_prep.pack(root, "all", log=lambda _m: None, chunk_len=16)
    return root


@pytest.fixture(scope="session")
def sr_reference(sr_root):
    """The PNG samples decoded once: list of (lr, hr) uint8 arrays."""
    from feedlab.formats import open_dataset

    ds = open_dataset(sr_root, "png")
    return [ds[i] for i in range(len(ds))]


@pytest.fixture(scope="session")
def cls_root(tmp_path_factory) -> Path:
    import data_prep

    root = tmp_path_factory.mktemp("data") / "cls"
    data_prep.build_cls(root, classes=2, per_class=5, min_size=32, max_size=64, seed=0, log=lambda _m: None)
    return root
