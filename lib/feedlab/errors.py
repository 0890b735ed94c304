"""Errors that name the thing, and the one-line report every command line prints.

* :class:`SampleError` — a sample could not be read or decoded: carries the format,
  the index and the path, so a DataLoader worker's re-raised traceback still says
  which file to look at.
* :class:`ChecksumError` — a sample read back differs from the checksum written
  with it (a flipped byte, a stale or truncated store).
* :func:`cli_errors` — wraps a command's ``main``: the failures a user can fix
  (missing or unreadable files, permissions, malformed JSON, corrupt data, bad
  values) become ``prog: error: <one line>`` and exit status 2 instead of a
  traceback. Programming errors still raise.
* :func:`seconds` / :func:`seconds_or_zero` — the one argparse type of every seconds option: a
  finite number > 0 (or >= 0 where 0 means "wait for ever"); ``nan`` and ``inf`` never pass.
* :func:`strict_json` — JSON without ``NaN``/``Infinity`` (they become ``null``).
* :func:`deadline` — a wait with a limit: :class:`DeadlineError` (a ``TimeoutError``, so
  :func:`cli_errors` prints it on one line) naming what was being waited for; re-armed by
  ``reset()`` on progress, so it bounds a stall rather than a whole run. Deadlines nest, each
  keeping its own time.
* :func:`leave_stuck` — after a deadline, a thread still blocked in what timed out (zarr's IO
  pool, a reader thread) would be joined at interpreter exit and hang it: a command line ends
  its process at once instead (flushed, its worker processes stopped).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from feedlab import procgroup


class FormatError(RuntimeError):
    """A packed store is missing, malformed or does not match its header."""


class SampleError(FormatError):
    """Reading or decoding one sample failed (the message names index and path)."""


class ChecksumError(SampleError):
    """A sample's bytes do not match the checksum stored with the data set."""


def sample_error(fmt: str, index: int, path, exc: BaseException | str) -> SampleError:
    why = exc if isinstance(exc, str) else f"{type(exc).__name__}: {_first_line(str(exc))}"
    return SampleError(f"{fmt}: sample {index} ({shown(path)}) cannot be read: {why}")


def shown(name) -> str:
    """A user's file name as one line prints it: as it is, or quoted (``repr``) where it holds a control
    character (a newline would split the one line in two)."""
    text = str(name)
    return repr(text) if any(ord(c) < 32 or ord(c) == 127 for c in text) else text


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[0] if lines else ""


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line. For an exception a DataLoader re-raised
    from a worker (``Caught X in DataLoader worker process N. Original Traceback
    ...``), the original exception's last line, with the worker named."""
    text = str(exc)
    if "Original Traceback" in text:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        head = lines[0].rstrip(".") if lines else ""
        last = lines[-1] if lines else ""
        where = head.split(" in ", 1)[1] if " in " in head else "a worker"
        return f"{last} (in {where})"
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, OSError) and exc.filename is not None and str(exc.filename) not in text:
        text = f"{text}: {exc.filename}"
    elif isinstance(exc, OSError) and exc.filename is None and \
            _raised_in(exc, os.path.join("multiprocessing", "synchronize.py")):
        # a semaphore (a Queue's, a Lock's, a DataLoader's) is a file in /dev/shm: an error with no file named
        text = (f"{text}: multiprocessing could not make a semaphore in /dev/shm (queues, locks and DataLoader "
                "workers need one there); make /dev/shm writable with room to spare (docker run --shm-size=...)")
    return _first_line(text)


def _raised_in(exc: BaseException, suffix: str) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(suffix):
            return True
        tb = tb.tb_next
    return False


# What a user can fix: files, permissions, JSON, data, values given on the command line.
USER_ERRORS: tuple[type[BaseException], ...] = (OSError, json.JSONDecodeError, FormatError)


def _user_error_types() -> tuple[type[BaseException], ...]:
    extra: list[type[BaseException]] = []
    try:
        import lmdb

        extra.append(lmdb.Error)
    except ImportError:  # pragma: no cover
        pass
    # ValueError: a bad value given on the command line or in the environment (a worker
    # count, a device, a size) is raised as ValueError by the code that checks it
    return USER_ERRORS + (ValueError,) + tuple(extra)


@contextmanager
def cli_errors(prog: str, hint: str = "") -> Iterator[None]:
    """``with cli_errors("python -m feedlab.bench"): ...`` turns a user-fixable failure
    into one line on stderr and ``SystemExit(2)``. SIGTERM and SIGHUP raise like SIGINT inside
    (:func:`feedlab.procgroup.signals_raise`): every process group we started is stopped, what
    registered with :func:`feedlab.procgroup.on_stop` is undone (our temporaries), one line says
    which signal, and the exit status is 128+n (130 for Ctrl-C)."""
    fired = deadlines_fired()
    try:
        with procgroup.signals_raise():
            yield
    except _user_error_types() as exc:
        msg = one_line(exc)
        print(f"{prog}: error: {msg}{' (' + hint + ')' if hint else ''}", file=sys.stderr)
        leave_stuck(2, since=fired)
        leave_threads(2, prog)
        raise SystemExit(2) from None
    except KeyboardInterrupt as exc:
        code = procgroup.stopped(prog, exc)
        leave_stuck(code, since=fired)
        leave_threads(code, prog)
        raise SystemExit(code) from None


class DeadlineError(TimeoutError):
    """A wait ran past its deadline (the message names what was waited for and the limit);
    ``deadline`` is the :class:`Deadline` that fired."""

    deadline: "Deadline | None" = None


class Deadline:
    """What :func:`deadline` yields: ``reset(what=None)`` re-arms it (progress was made),
    ``what`` updates the description the error will carry."""

    def __init__(self, seconds: float | None, what: str | Callable[[], str], on_progress: bool = False,
                 hint: str = "", fire: "Callable[[Deadline], BaseException] | None" = None):
        self.seconds = seconds
        self.fire = fire   # what it raises when it fires (default: a DeadlineError)
        self.what = what
        self.hint = hint
        self.armed = False
        self.on_progress = on_progress
        self.due = 0.0   # time.monotonic() at which it fires, while armed

    def describe(self) -> str:
        return self.what() if callable(self.what) else str(self.what)

    def reset(self, what: str | Callable[[], str] | None = None) -> None:
        if what is not None:
            self.what = what
        if self.armed:
            self.due = time.monotonic() + float(self.seconds)
            _arm()


_ACTIVE: list[Deadline] = []   # the open deadlines, innermost last; one timer, for the earliest due
_OLD_HANDLER: list = []        # SIGALRM's handler before the outermost deadline
_FIRED = [0]                   # deadlines that have fired in this process


def _arm() -> None:
    dues = [d.due for d in _ACTIVE if d.armed]
    # never past MAX_SECONDS: a deadline given in code (no option's check) must not overflow the OS's timer
    signal.setitimer(signal.ITIMER_REAL, min(MAX_SECONDS, max(1e-3, min(dues) - time.monotonic())) if dues else 0)


def _on_alarm(_signum, _frame) -> None:
    late = [d for d in _ACTIVE if d.armed and d.due <= time.monotonic() + 1e-3]
    if not late:   # woke early (a deadline reset meanwhile): wait for the earliest one
        _arm()
        return
    d = late[-1]   # the innermost that is late names the wait most closely
    d.armed = False
    _FIRED[0] += 1
    _arm()
    if d.fire is not None:
        raise d.fire(d)
    err = DeadlineError(f"{d.describe()}: no progress in {d.seconds:g} s{f' ({d.hint})' if d.hint else ''}")
    err.deadline = d
    raise err


def progress() -> None:
    """Progress was made (a batch, a timed call): re-arms each open deadline opened with
    ``on_progress=True``; costs nothing without one."""
    if _ACTIVE:
        for d in _ACTIVE:
            if d.on_progress and d.armed:
                d.due = time.monotonic() + float(d.seconds)
        _arm()


@contextmanager
def deadline(seconds: float | None, what: str | Callable[[], str], hint: str = "",
             on_progress: bool = False, fire: Callable[[Deadline], BaseException] | None = None
             ) -> Iterator[Deadline]:
    """Raise :class:`DeadlineError` in this (main) thread when ``seconds`` pass without a
    ``reset()``: ``"<what>: no progress in N s (<hint>)"``. ``None`` or ``0``: no limit (an
    outer deadline still runs). ``on_progress``: :func:`progress` (called by the measuring
    loops) re-arms it too. Deadlines nest, each keeping its own time: an inner one never
    lengthens or cancels an outer one. Off the main thread (where no signal can be
    delivered) it is a no-op, said by ``armed``. This module is SIGALRM's one owner: every timer of
    feedlab is a deadline here (:func:`feedlab.run_limit.limit` too, with ``fire``: called when it
    fires, before anything unwinds, it returns the exception to raise)."""
    d = Deadline(seconds, what, on_progress, hint, fire)
    usable = bool(seconds) and seconds > 0 and threading.current_thread() is threading.main_thread()
    if not usable:
        yield d
        return
    if not _ACTIVE:
        _OLD_HANDLER[:] = [signal.signal(signal.SIGALRM, _on_alarm)]
    _ACTIVE.append(d)
    d.armed, d.due = True, time.monotonic() + float(seconds)
    _arm()
    try:
        yield d
    finally:
        d.armed = False
        if d in _ACTIVE:
            _ACTIVE.remove(d)
        if _ACTIVE:
            _arm()
        else:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, _OLD_HANDLER[0] if _OLD_HANDLER else signal.SIG_DFL)


def deadlines_fired() -> int:
    """How many deadlines have fired in this process (``since`` for :func:`leave_stuck`)."""
    return _FIRED[0]


def command_line() -> bool:
    """Whether this process is one of feedlab's command lines: ``python -m feedlab...`` / ``python -m
    data_prep``, or a ``feedlab-*`` console script. Anything else (a kernel, pytest, a user's script
    that called a ``main``) is a library caller that goes on after the call."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = str(getattr(spec, "name", "") or "")
    if name.split(".")[0] in ("feedlab", "data_prep"):
        return True
    return os.path.basename(sys.argv[0] if sys.argv else "").startswith("feedlab-")


def leave_stuck(code: int, since: int = 0) -> None:
    """End this process now with ``code`` when a deadline fired after ``since`` (a count of
    :func:`deadlines_fired`) and another thread is still alive: it may be blocked in what timed out
    (a read that never returns in zarr's IO pool), and interpreter exit joins such threads, daemon
    or not (``concurrent.futures`` joins its own). Output flushed, worker processes and our groups stopped,
    our temporaries removed (:func:`procgroup.stop_all`: ``os._exit`` runs no exit hook), then ``os._exit``.
    Otherwise return (the caller exits as usual). For a command line's last step: a
    library caller (a notebook, a test runner, a script that imported feedlab and called a ``main``)
    is never ended here (:func:`command_line`)."""
    if _FIRED[0] <= since or not command_line():
        return
    if not any(t.is_alive() and t is not threading.main_thread() for t in threading.enumerate()):
        return
    import multiprocessing

    children = multiprocessing.active_children()
    for p in children:
        p.terminate()
    for p in children:
        p.join(2.0)
        if p.is_alive():
            p.kill()
    for stream in (sys.stdout, sys.stderr):   # the line first: what follows may take a grace or two
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    try:   # what a signal's stop does too: our groups stopped, our temporaries (multiprocessing's folder
        procgroup.stop_all(grace_s=1.0)   # among them) removed: os._exit skips every exit hook (attack59 F1)
    except Exception:
        pass
    os._exit(code)


def leave_threads(code: int, prog: str) -> int:
    """``code``, or, in a command line whose user code left threads running that interpreter exit would wait on
    for ever (a non-daemon thread started at import: attack61 F2, the report printed and the process never
    ended), one line naming them, our groups and temporaries gone, and ``os._exit(code)``."""
    left = [t for t in threading.enumerate() if t.is_alive() and not t.daemon and t is not threading.main_thread()
            and not t.name.startswith("ThreadPoolExecutor-")]   # an executor's idle workers end at exit by themselves
    if not left or not command_line():
        return code
    names = ", ".join(t.name for t in left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
    print(f"{prog}: note: {len(left)} thread(s) your code started are still running ({names}) and would hold this "
          "process for ever: the command ends without waiting for them", file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    try:
        procgroup.stop_all(grace_s=1.0)
    except Exception:
        pass
    os._exit(code)


MAX_SECONDS = 1e9   # ~31 years: past this the OS's timers (setitimer, a lock's timeout) overflow (attack58 D55)


def _seconds(text: str, zero: bool) -> float:
    want = f"a finite number of seconds up to {MAX_SECONDS:g} " + (">= 0 (0: wait for ever)" if zero else "> 0")
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give {want}") from None
    if not math.isfinite(value) or value < 0 or value > MAX_SECONDS or (value == 0 and not zero):
        raise argparse.ArgumentTypeError(f"{text!r}: give {want}")
    return value


def seconds(text: str) -> float:
    """argparse ``type=`` of a seconds option: a finite number > 0 (never nan or inf), else one line
    naming the option (argparse adds it) and what to give."""
    return _seconds(text, zero=False)


def seconds_or_zero(text: str) -> float:
    """As :func:`seconds`, where 0 means "wait for ever"."""
    return _seconds(text, zero=True)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return _finite(obj.item())
        if isinstance(obj, np.ndarray):
            return _finite(obj.tolist())
    except ImportError:  # pragma: no cover
        pass
    return obj


def strict_json(obj: Any, **kw) -> str:
    """``json.dumps`` that never writes ``NaN`` or ``Infinity``: non-finite floats
    become ``null`` (an unmeasurable value), so any JSON parser reads the result."""
    return json.dumps(_finite(obj), allow_nan=False, **kw)
