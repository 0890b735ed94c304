"""Guards for running a user's code inside the doctor: a deadline on every wait, and
one named line (never a traceback) when the user's loader or step fails.

* :class:`UserCodeError` — the user's loader, dataset, collate or step raised (or
  yielded something the doctor cannot use); its message is one line naming which
  and what to do. A ``ValueError``, so every command line prints it as one line.
* :class:`Hung` — a wait passed its deadline (a dataset that never returns).
* :func:`deadline` — raises :class:`Hung` in the main thread after ``seconds``
  (:func:`feedlab.errors.deadline`: ``SIGALRM``, so a blocking read or sleep is
  interrupted; off the main thread it cannot interrupt).
* :func:`user_call` — calls the user's code, turning what it raises into a
  :class:`UserCodeError` that names ``what``; with ``limit_s``, one that does not return is
  :class:`Hung`, naming it (the length, the loader factory, the step).
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from feedlab.errors import Deadline, DeadlineError, one_line
from feedlab.errors import deadline as _deadline

DEFAULT_DEADLINE_S = 120.0


class UserCodeError(ValueError):
    """The user's loader or step failed; the message is one line."""


class Hung(UserCodeError):
    """A wait on the user's code passed its deadline."""


def can_interrupt() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextmanager
def deadline(seconds: float | None, what: str, hint: str = "") -> Iterator[Deadline]:
    """Raise :class:`Hung` naming ``what`` when the block runs past ``seconds`` (None or
    <= 0: no deadline; ``reset()`` on what it yields re-arms it): :func:`feedlab.errors.deadline`,
    its error as one of the user's."""
    d = None
    try:
        with _deadline(seconds, what, hint) as d:
            yield d
    except DeadlineError as exc:
        if d is None or exc.deadline is not d:   # an outer deadline's: its own line
            raise
        raise Hung(f"{what} did not return within {seconds:g} s{': ' + hint if hint else ''}") from None


#: what a :class:`Hung` line says to do
HUNG_HINT = "a call that never returns hangs training too; --deadline S waits longer if it is only slow"


def user_call(what: str, fn: Callable[..., Any], *args, hint: str = "", limit_s: float | None = None,
              **kw) -> Any:
    """``fn(*args, **kw)``; what it raises becomes one :class:`UserCodeError` line. ``limit_s``:
    a call that has not returned by then is :class:`Hung`, naming ``what``."""
    try:
        with deadline(limit_s, what, HUNG_HINT):
            return fn(*args, **kw)
    except (UserCodeError, DeadlineError):   # a deadline around the call is the deadline's to report
        raise
    except KeyboardInterrupt:
        raise
    except SystemExit as exc:   # attack61 F1: a make() or step() that calls sys.exit ended the command silently
        raise UserCodeError(f"{what} called sys.exit({exc.code!r}): it must return, not end the process"
                            f"{'; ' + hint if hint else ''}") from None
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


def load_callable(ref: str, flag: str, prog: str = "", limit_s: float | None = None):
    """``package.module:function`` imported as ``python -m`` would (the current folder first on the path: the
    console scripts do not put it there), for the doctor's and the tuner's ``--loader``/``--step``. What is wrong
    is one ``SystemExit`` line (``prog: error: …`` where ``prog`` is given): a reference of the wrong shape, a
    file's path, a module that cannot be found, one that raises while it imports (named with the line of your code
    that raised: attack60 F1 was a 27-line traceback from the tuner), a missing or uncallable name. ``limit_s``: an
    import that has not finished by then is :class:`Hung` (attack60 F2: a module that waits at import waited for
    ever)."""
    head = f"{prog}: error: " if prog else ""
    mod, _, name = ref.partition(":")
    if not mod or not name:
        raise SystemExit(f"{head}{flag} {ref!r}: write it as package.module:function")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    if "/" in mod or mod.endswith(".py"):   # a file's path: the module's dotted name is what imports
        dotted = mod.removesuffix(".py").strip("./").replace("/", ".")
        raise SystemExit(f"{head}{flag} {ref!r}: give the module, not its file: {dotted}:{name} (run from the "
                         "folder that holds its top package, or put that folder on PYTHONPATH)")
    try:
        with deadline(limit_s, f"{flag} {ref}: importing {mod}", "a module that never finishes importing hangs "
                      "training too; --deadline S waits longer if it is only slow"):
            module = importlib.import_module(mod)
    except (UserCodeError, DeadlineError):   # the deadline's own line
        raise
    except (ImportError, AttributeError) as exc:
        missing = getattr(exc, "name", None)
        if isinstance(exc, ModuleNotFoundError) and missing and not (mod == missing or mod.startswith(missing + ".")):
            raise SystemExit(f"{head}{flag} {ref!r}: importing {mod} needs {missing}, which is not installed here "
                             f"(pip install it, or run where your training runs)") from None   # attack61 W1
        raise SystemExit(f"{head}{flag} {ref!r}: cannot import it ({exc}); is its folder on PYTHONPATH?") from None
    except (Exception, SystemExit) as exc:   # your module raised (or called sys.exit) while it imported: one line
        last = traceback.extract_tb(exc.__traceback__)[-1:] or [None]
        where = (exc.filename, exc.lineno) if isinstance(exc, SyntaxError) and exc.filename else \
            ((last[0].filename, last[0].lineno) if last[0] is not None else None)   # a SyntaxError's is its file's
        at = f" at {os.path.basename(where[0])}:{where[1]}" if where else ""
        what = (f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else   # attack61 A2: rc 3, silent
                f"raised {type(exc).__name__}: {one_line(exc)}")
        raise SystemExit(f"{head}{flag} {ref!r}: importing {mod} {what}{at}; "
                         f"fix it there (python -c 'import {mod}' shows the whole traceback)") from None
    fn = getattr(module, name, None)
    if fn is None:   # the module imported: the PYTHONPATH hint would be wrong
        raise SystemExit(f"{head}{flag} {ref!r}: {mod} imports, but has no {name}; check the name after the colon")
    if not callable(fn):
        raise SystemExit(f"{head}{flag} {ref!r}: not callable")
    return fn
