"""Guards for running a user's code inside the doctor: a deadline on every wait, and
one named line (never a traceback) when the user's loader or step fails.

* :class:`UserCodeError` — the user's loader, dataset, collate or step raised (or
  yielded something the doctor cannot use); its message is one line naming which
  and what to do. A ``ValueError``, so every command line prints it as one line.
* :class:`Hung` — a wait passed its deadline (a dataset that never returns).
* :func:`deadline` — raises :class:`Hung` in the main thread after ``seconds``
  (``SIGALRM``; a blocking read or sleep is interrupted). Off the main thread, or
  where there is no ``SIGALRM``, it cannot interrupt and says so through ``on_skip``.
* :func:`user_call` — calls the user's code, turning what it raises into a
  :class:`UserCodeError` that names ``what``.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from feedlab.errors import one_line

DEFAULT_DEADLINE_S = 120.0


class UserCodeError(ValueError):
    """The user's loader or step failed; the message is one line."""


class Hung(UserCodeError):
    """A wait on the user's code passed its deadline."""


def can_interrupt() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextmanager
def deadline(seconds: float | None, what: str, hint: str = "") -> Iterator[None]:
    """Raise :class:`Hung` naming ``what`` when the block runs past ``seconds`` (None or
    <= 0: no deadline). Nested deadlines: the inner one holds while it runs, the outer
    one is re-armed with what is left of it afterwards."""
    if not seconds or seconds <= 0 or not can_interrupt():
        yield
        return
    import time

    def _alarm(signum, frame):
        raise Hung(f"{what} did not return within {seconds:g} s{': ' + hint if hint else ''}")

    prev_handler = signal.signal(signal.SIGALRM, _alarm)
    prev_left, _ = signal.getitimer(signal.ITIMER_REAL)
    t0 = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, float(seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, prev_handler)
        if prev_left:
            signal.setitimer(signal.ITIMER_REAL, max(1e-3, prev_left - (time.monotonic() - t0)))


def user_call(what: str, fn: Callable[..., Any], *args, hint: str = "", **kw) -> Any:
    """``fn(*args, **kw)``; what it raises becomes one :class:`UserCodeError` line."""
    try:
        return fn(*args, **kw)
    except UserCodeError:
        raise
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # the user's code: any exception is theirs to fix
        raise UserCodeError(f"{what} raised {type(exc).__name__}: {one_line(exc)}"
                            f"{'; ' + hint if hint else ''}") from None


def collate_hint(exc_text: str) -> str:
    """What to do about a collate failure the doctor recognises."""
    t = exc_text.lower()
    if "equal size" in t or "stack expects" in t or "must match" in t or "resize" in t:
        return ("the samples of one batch have different sizes: crop or resize them to one size in the "
                "dataset's transform (e.g. RandomResizedCrop(S)), or give the DataLoader a collate_fn that pads")
    if "default_collate" in t or "must contain tensors" in t:
        return "a sample holds a type default_collate cannot batch: give the DataLoader a collate_fn for it"
    return "run one batch of the loader by hand (next(iter(loader))) to see where it fails"
