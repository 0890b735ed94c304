"""A command line's first second: a signal that lands while ``python -m feedlab.X`` (or ``data_prep``) is still
importing — torch alone takes seconds — is one line and exit 128+n, like one that lands later (the commands a
person types: :data:`COMMANDS`).

Until a command's ``main`` installs its own handling (``procgroup.signals_raise``, ``errors.cli_errors``), no
handler of ours exists: Ctrl-C was a KeyboardInterrupt traceback of 20–50 lines through runpy and ``import torch``,
and SIGTERM or SIGHUP ended the process with no word at all. :func:`install` (called by ``feedlab/__init__.py``
only while ``python -m`` is locating a feedlab or data_prep module: ``sys.argv[0] == "-m"``) gives

* SIGINT, SIGTERM and SIGHUP, where they have their default action, a handler (:func:`on_signal`): while a
  module is being imported (torch's C++ initialisers abort on an exception raised under them; nothing of ours is
  made yet) one line and exit 128+n at once; after, SIGTERM and SIGHUP one line and ``SystemExit(128+n)`` — an
  unwinding exit: ``finally`` blocks and ``atexit`` run, nothing is left half-made — and SIGINT a
  KeyboardInterrupt, as Python's own; a forked child (a DataLoader worker started before the command's own
  handling) keeps the default action;
* an uncaught KeyboardInterrupt one line in place of its traceback (Python still ends the process by SIGINT:
  exit 130 to a shell); multiprocessing's fd hand-over thread losing a peer that died (:func:`handover_broken`)
  no traceback at all.

A command's own handling replaces these as soon as it is installed. Standard library only (the package's floor).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys

_state: dict = {}

#: the command lines a person types (the runner too, for its module's own imports: its main's stop,
#: ``run_kernel.stop_on_signals``, takes over from here, and holds a signal inside torch's import,
#: ``run_kernel.signals_held``; the processes feedlab starts itself — a peer's child, an experiment's worker — are
#: stopped by us, and say nothing)
COMMANDS = ("feedlab.bench", "feedlab.doctor", "feedlab.tuner", "feedlab.findings", "feedlab.run_plan", "feedlab.run",
            "data_prep")


#: the console scripts of ours (pyproject's [project.scripts]): their process runs the same commands
SCRIPTS = ("feedlab-bench", "feedlab-run", "feedlab-doctor")


def _module_run(argv: list[str]) -> str | None:
    """The module of ``python [options] -m MODULE …`` (``-m MODULE``, ``-mMODULE``, ``-Im MODULE``); None for
    ``-c``, a script, or no module."""
    skip = False
    for i, arg in enumerate(argv[1:], 1):
        if skip:
            skip = False
            continue
        if arg in ("-X", "-W", "--check-hash-based-pycs"):
            skip = True
            continue
        if arg.startswith("--"):
            continue
        if not arg.startswith("-") or arg == "-":
            return None                     # a script (or stdin): not a module run
        for j, ch in enumerate(arg[1:], 1):
            if ch == "c":
                return None
            if ch in "XW":
                break                       # -Xfoo: its argument attached
            if ch == "m":
                return arg[j + 1:] or (argv[i + 1] if i + 1 < len(argv) else None)
    return None


def command_name(argv: list[str] | None = None, script: str | None = None) -> str | None:
    """``python -m feedlab.bench`` for a process started as ``python … -m feedlab.bench …`` (``sys.orig_argv``),
    ``feedlab-doctor`` for a console script of ours (``script``: ``sys.argv[0]``); None for anything else (a
    notebook's kernel, pytest, an ``import feedlab``)."""
    script = os.path.basename(sys.argv[0] if script is None and sys.argv else script or "")
    if script in SCRIPTS:
        return script
    mod = _module_run(list(sys.orig_argv if argv is None else argv))
    mod = (mod or "").removesuffix(".__main__")
    if mod == "feedlab.tuner" and os.environ.get("FEEDLAB_TUNER_PROG", "").strip():   # `doctor --tune` became the
        return os.environ["FEEDLAB_TUNER_PROG"].strip()   # tuner (exec): its lines name the command typed (attack61 W3)
    return f"python -m {mod}" if mod in COMMANDS or mod.startswith("feedlab.report.") else None


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except Exception:  # a closed stderr: the exit status still says it
        pass


def importing() -> bool:
    """Whether a module is being imported now (its spec marked ``_initializing`` by importlib): torch's
    import runs C++ initialisers, and an exception raised in a Python callback under them aborts the process
    (SIGABRT, 100 lines of C++) or is swallowed (exit 0)."""
    for mod in list(sys.modules.values()):
        if getattr(getattr(mod, "__spec__", None), "_initializing", False):
            return True
    return False


def on_signal(signum, frame) -> None:
    """The start-up handler of SIGINT, SIGTERM and SIGHUP (:func:`install`); ``procgroup.signals_raise``
    replaces it. During an import (nothing of ours made yet): the line and exit 128+n at once. After: the line
    (not for SIGINT: Ctrl-C is a KeyboardInterrupt, as Python's own) and an unwinding exit."""
    if os.getpid() != _state.get("pid"):      # a forked child: what it had before the fork
        if signum == signal.SIGINT:
            signal.default_int_handler(signum, frame)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    name = "interrupted (Ctrl-C)" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    if not _state.get("started") and importing():
        _say(f"{_state['prog']}: {name} while starting")
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:  # a closed stream: nothing to flush
                pass
        if signum == signal.SIGINT:         # died by SIGINT, as Python's own Ctrl-C: a shell's loop stops too
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(128 + signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    _say(f"{_state['prog']}: {name}")
    raise SystemExit(128 + signum)


def handover_broken(kind, tb) -> bool:
    """Whether an exception is multiprocessing's fd hand-over thread (``resource_sharer._serve``) losing its peer
    (a connection reset, an EOF): that thread calls ``sys.excepthook`` itself, so a DataLoader worker killed
    mid-hand-over printed a 7-line traceback after the command's own line that said the worker died (attack53
    K05t). The death is said by whoever waited on it; the thread's part of it says nothing new."""
    if not issubclass(kind, (OSError, EOFError)):
        return False
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.replace(os.sep, "/").endswith("multiprocessing/resource_sharer.py"):
            return True
        tb = tb.tb_next
    return False


def _excepthook(kind, value, tb) -> None:
    if handover_broken(kind, tb):   # in the command's process and in its forked workers alike
        return
    if issubclass(kind, KeyboardInterrupt) and os.getpid() == _state.get("pid"):
        signum = getattr(value, "signum", signal.SIGINT)    # procgroup.Signalled: SIGTERM's, SIGHUP's
        _say(f"{_state['prog']}: " + ("interrupted (Ctrl-C)" if signum == signal.SIGINT
                                      else f"stopped by {signal.Signals(signum).name}"))
        return
    _state["previous"](kind, value, tb)


def install(argv: list[str] | None = None) -> bool:
    """The start-up handling above, for a feedlab command line started with ``python -m`` (else nothing; True if
    installed). Only in the main thread, only over default actions (an ignored SIGHUP, under ``nohup``, stays
    ignored), once a process."""
    prog = command_name(argv)
    if prog is None or _state or not _main_thread():
        return False
    _state.update(pid=os.getpid(), prog=prog, previous=sys.excepthook)
    atexit.register(_finalizing)   # registered before torch's hooks: run after them, the last Python of the exit
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, on_signal)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, on_signal)
    sys.excepthook = _excepthook
    return True


def started() -> None:
    """The command's own signal handling takes over (``procgroup.signals_raise``, ``run_kernel.stop_on_signals``
    call this in the main thread, before they save the handlers they put back): every start-up handler goes back
    to Python's default (SIGINT its KeyboardInterrupt, SIGTERM and SIGHUP their default action), so what the
    command puts back when its handling ends is the default, never this module's line a second time; and no more
    exits at once during an import (a lazy ``import ray`` mid-run unwinds, its temporaries removed)."""
    if _state and not _state.get("started"):
        _state["started"] = True
        for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL),
                             (signal.SIGHUP, signal.SIG_DFL)):
            if signal.getsignal(sig) is on_signal:
                signal.signal(sig, default)


_EXITING: list[int] = []   # the exit status once a command line said its stop line (:func:`exiting`)


def exiting(code: int) -> None:
    """A command line has said its stop line and is exiting with ``code`` (main thread only). What still
    comes is taken quietly: a further SIGINT, SIGTERM or SIGHUP (a wrapper forwarding the group's signal, a
    second Ctrl-C) is noted, and the one after ends the process at once with ``code`` (it never becomes a
    KeyboardInterrupt in the interpreter's shutdown: "Exception ignored in threading._shutdown"); torch's SIGCHLD
    handler (a DataLoader worker the same group signal killed) no longer raises "DataLoader worker … killed by
    signal" from the exit's finalizers. ``procgroup.signals_raise`` leaves these in place on its way out."""
    if not _main_thread() or _EXITING:
        return
    _EXITING.append(int(code))
    seen: list[int] = []

    def again(signum, _frame):
        if seen:
            for f in (sys.stdout, sys.stderr):
                try:
                    f.flush()
                except Exception:  # a closed stream: nothing to flush
                    pass
            os._exit(_EXITING[0])
        seen.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, again)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)


def work_done() -> None:
    """The command's outermost signal scope has ended (``signal_scope.signals_raise``): what comes is its exit."""
    _state["done"] = True


def _finalizing() -> None:
    """The last exit hook of a command line whose work is done: past it the interpreter finalizes (torch's C++
    teardown: a second or more), and Python puts every signal it handles back to the default action there, so a
    SIGTERM ended it silently with 143 over the work's own exit status (attack56 W3). What handles a signal now
    is the default, or the teardown's (``signal_scope``: marked ``feedlab_teardown``): ignored from here, the exit
    status is the work's. A handler of someone else is left as it is."""
    if not _state.get("done") or _state.get("pid") != os.getpid() or not _main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        handler = signal.getsignal(sig)
        if handler in (signal.SIG_DFL, signal.default_int_handler) or getattr(handler, "feedlab_teardown", False):
            signal.signal(sig, signal.SIG_IGN)


def command() -> str | None:
    """The command line this process runs (``python -m data_prep``, ``feedlab-doctor``) where :func:`install`
    installed its start-up handling in this very process; None elsewhere (a kernel, pytest, a forked child)."""
    return _state.get("prog") if _state.get("pid") == os.getpid() else None


def exiting_with() -> int | None:
    """The exit status :func:`exiting` was told, or None before."""
    return _EXITING[0] if _EXITING else None


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


__all__ = ["install", "handover_broken", "command_name", "on_signal", "importing", "started", "exiting", "exiting_with",
           "COMMANDS", "SCRIPTS"]
