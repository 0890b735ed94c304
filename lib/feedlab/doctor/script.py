"""The zero-code entry: ``python -m feedlab.doctor --script train.py [-- args]``.

Your unmodified training script runs in this process for a bounded number of
batches with ``torch.utils.data.DataLoader`` instrumented: each batch's *data wait*
(the time ``next()`` on the loader takes) and *step* (from the batch's arrival to the
next ``next()``: your copy, forward, backward, optimizer, logging) are recorded, and
the loader's settings are read from the object itself. After ``max_batches`` batches
of any one loader the script is stopped (an exception your ``except Exception`` does
not catch; a loader is known by its settings, so one built anew every epoch counts its
batches across them: :mod:`feedlab.doctor.script_record`), the verdict printed, and the
full stage-by-stage diagnosis of that loader offered (``--diagnose`` runs it:
:func:`feedlab.doctor.user.diagnose_loader`, with the step priced as your script ran it). What ``torch.utils.bottleneck`` does for CPU
profiles, done for the input pipeline.

Nothing the script does holds the doctor past its deadline (:mod:`feedlab.doctor.script_watch`):
the script is ended, after what was measured is printed, when it makes no progress (a batch
delivered or a step taken) in ``deadline_s`` (no DataLoader built, an empty one in a step-based
loop, a step that never returns, loaders in ``mp.spawn`` children), does not end ``deadline_s``
after the doctor's stop, or catches the stop (a bare ``except:``) and asks for more; the processes
the script started go with it. From the command line (``watch``) the script runs in a forked
child watched by the doctor's process, so a script stuck in C code that holds the GIL is ended too;
a library caller gets the in-process :class:`~feedlab.doctor.script_watch.Watchdog` thread, which
cannot reach such a script. Only
the process that started the doctor speaks: a forked copy of the script ends silently
at the stop. ``os._exit`` in the script ends the script, not the doctor: what was
measured up to then is reported.
"""

from __future__ import annotations

import gc
import os
import runpy
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from feedlab.errors import one_line
from feedlab.run_limit import descendants, stop_processes
from feedlab.signal_scope import Signalled, interrupt_unsent

from .guard import DEFAULT_DEADLINE_S, UserCodeError
from .report import fmt_rate
from .script_record import Enough, Recorder, default_fault_signals, stopped_pids
from .script_watch import Progress, Watchdog, Wire, fork_watched, quiet_exit, shm_hint, watch_child
from .verdict import DATA_BOUND_FRACTION, TOO_BUSY, VERDICT_MIN_BATCHES, spread_words, step_price, wait_share  # noqa: F401
from .watch_lines import worker_died_line
from .watch_mark import outside_line, reached_watcher

PROG = "python -m feedlab.doctor"
_real_exit = os._exit
_quiet_exit = quiet_exit


class OsExit(BaseException):
    """The script called ``os._exit(code)`` in the doctor's main thread: the script ends there."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def summarize(rec: dict) -> dict:
    """Verdict from data wait vs step, the first batch (start-up) left out: the data-wait share is the median
    over windows of the loop (:func:`feedlab.doctor.verdict.wait_share`: one burst moves one window, not the
    verdict), the step priced by its median per sample with its spread (:func:`~feedlab.doctor.verdict.step_price`)."""
    wait, step, n = rec["wait"], rec["step"], rec["n"]
    k = len(step)                              # batches whose step was seen end to end
    w, s, m = np.array(wait[1:k], float), np.array(step[1:k], float), np.array(n[1:k], float)
    settings = rec["settings"]
    out = {"loader": settings, "batches": len(wait), "first_batch_wait_s": wait[0]}
    loop = wait_share(w, s, settings["num_workers"]) if len(w) else None
    if loop is None:
        out.update(verdict=None, note=f"your script ran only {len(wait)} batch(es) of this loader: too few to "
                                      "separate data wait from step")
        return out
    total = w.sum() + s.sum()
    price = step_price(s, m, np.asarray(rec["step_cpu"][1:k], float)) if m.sum() else None
    out.update({"data_wait_s_per_batch": float(np.median(w)), "step_s_per_batch": float(np.median(s)),
                "data_wait_fraction": loop["share"], "samples_per_s": float(m.sum() / total) if m.sum() else None,
                "step_s_per_sample": price["s_per_sample"] if price else None,
                "step_cpu_s_per_sample": price.get("cpu_s_per_sample") if price else None,
                "step_price": price, "loop": loop, "verdict": loop["verdict"]})
    return out


def _summary(rec: Recorder, path: Path, args, stopped: str) -> dict | None:
    main = rec.main()
    if main is None:
        return None
    out = summarize(main)
    out.update(script=str(path), args=list(args), stopped=stopped, loaders_seen=len(rec.loaders))
    need = min(VERDICT_MIN_BATCHES, getattr(rec, "max_batches", VERDICT_MIN_BATCHES))
    if out.get("verdict") and len(main["wait"]) < need:   # however the run ended (os._exit, its deadline, a
        out.update(verdict=None, note=f"{stopped}: too few batches for a verdict (the doctor asks {need})")  # stop)
    return out


def _ended(rec: Progress, path: Path, args, why: str, limit: float | None,
           kids: int | None = None) -> tuple[dict | None, str]:
    """(summary of what was measured or None, the line that says why the doctor ended the script);
    ``kids``: how many processes the script had started (None: this process's descendants now)."""
    n, stop = rec.batches(), rec.stop
    if why == "caught" or why == "late":
        tail = ("caught the doctor's stop (a bare `except:` around its loop?) and asked for more" if why == "caught"
                else f"did not end within {limit:g} s of the doctor's stop (it caught the stop, or its clean-up "
                     "hangs)")
        what = f"{stop[0]}; your script {tail}, so the doctor ended it"
        return (None, f"--script {path}: {what}") if stop[1] else (_summary(rec, path, args, what), what)
    if why == "idle" and rec.waiting is not None:
        late = f"--script {path}: batch {n} of your script's DataLoader did not return within {limit + rec.waiting:g} s"
        held = stopped_pids(descendants())
        if held:   # a worker stopped from outside, not a sample that hangs (attack54 W4)
            return None, (f"{late}: its DataLoader worker (pid {', '.join(map(str, held))}) is stopped (SIGSTOP or "
                          "SIGTSTP from outside the command?), so the doctor ended it")
        return None, f"{late}: a sample that never returns hangs training too"
    if why == "idle":
        kids = len(descendants()) if kids is None else kids
        empty = rec.empty()
        if n == 0 and empty is not None:
            L = empty["settings"]
            size = ("an iterable data set, no length" if L['dataset_len'] is None else
                    f"{L['dataset_len']} samples")   # attack57 D41: "(None samples, …)"
            return None, (f"--script {path}: your script's DataLoader over {L['dataset']} ({size}, "
                          f"batch_size={L['batch_size']}, drop_last={L['drop_last']}) yielded no batches in "
                          f"{empty['empty']} pass(es), and no batch came within {limit:g} s (--deadline): its data "
                          "set is empty; check the data path it reads (and batch_size against drop_last)")
        if n and getattr(rec, "dry", 0):   # the loader went on being asked, and gave nothing (attack53 D01)
            what = (f"{n} batches, then your DataLoader yielded no batch in {rec.dry} pass(es) within {limit:g} s "
                    "(its data set became empty: check what shrinks it), so the doctor ended it (--deadline)")
        elif n:
            what = (f"{n} batches, then no batch asked for in {limit:g} s (a step or your script's own code that "
                    "does not return?), so the doctor ended it (--deadline)")
        if n:
            summary = _summary(rec, path, args, what)
            if summary and n < VERDICT_MIN_BATCHES:   # the numbers only, no verdict (_summary's rule), and why
                summary.update(verdict=None, note=f"the run ended at its deadline after {n} batch(es): too few for a "
                                                  f"verdict (the step under way then is not in these numbers)")
            return summary, what
        started = (f"; it started {kids} other process(es) (mp.spawn, multiprocessing?) whose loaders the doctor does "
                   "not see — run the training loop in this one process for the diagnosis; stopped them"
                   if kids else "")
        return None, (f"--script {path}: no batch from a DataLoader in this process within {limit:g} s (--deadline)"
                      f"{started}; raise --deadline if its set-up takes longer")
    return (None if n == 0 else _summary(rec, path, args, why)), f"--script {path}: {why}"


def _outcome(exc: BaseException | None, path: Path, max_batches: int, n: int) -> str:
    """How the script ended, as the summary says it (what it raised: one UserCodeError line)."""
    if exc is None:
        return "the script ended"
    if isinstance(exc, Enough):
        return str(exc) or f"stopped after {max_batches} batches"
    if isinstance(exc, OsExit):
        if exc.code:
            raise UserCodeError(f"--script {path} called os._exit({exc.code}) after {n} batches") from None
        return f"your script called os._exit(0) after {n} batches"
    if isinstance(exc, SystemExit):
        if exc.code not in (None, 0):
            raise UserCodeError(f"--script {path} exited with status {exc.code} before {max_batches} batches") from None
        return "the script ended"
    tb, where = exc.__traceback__, ""
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == str(path.resolve()):
            where = f" at {path.name}:{tb.tb_lineno}"
        tb = tb.tb_next
    sig = exc.signum if isinstance(exc, Signalled) else (
        signal.SIGINT if type(exc) is KeyboardInterrupt and not interrupt_unsent() else None)
    if sig is not None and reached_watcher() is False:   # a signal to this process only, never to the command
        raise UserCodeError(outside_line(path, sig, where, n)) from None
    if type(exc) is KeyboardInterrupt and interrupt_unsent():   # no Ctrl-C: the script's own raise
        raise UserCodeError(f"--script {path} raised KeyboardInterrupt{where} itself (no Ctrl-C or signal reached "
                            "the doctor)") from None
    if isinstance(exc, UserCodeError) or not isinstance(exc, Exception):
        raise exc
    died = None if shm_hint(exc) else worker_died_line(exc, path, where, n)
    if died:
        raise UserCodeError(died) from None
    raise UserCodeError(f"--script {path} raised {type(exc).__name__}{where}: {one_line(exc)}{shm_hint(exc)}") from None


def _status(outcome: BaseException | None) -> int:
    """The exit status of a script that ended so (a forked copy's, ended silently)."""
    if outcome is None or isinstance(outcome, (Enough, OsExit)):
        return 0
    if isinstance(outcome, SystemExit):
        return outcome.code if isinstance(outcome.code, int) else 0 if outcome.code is None else 1
    return 1


def _say_and_end(report, summary: dict | None, why: str) -> None:
    """The watchdog's last act: ``report(summary, why)`` (or the line alone), the script's
    processes stopped, this process ended with the report's status."""
    try:
        rc = report(summary, why)
    except Exception as exc:  # the report could not be written: one line, still the end
        print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr, flush=True)
        rc = 2
    for f in (sys.stdout, sys.stderr):   # the last word was the doctor's: what the script says as it goes is not
        try:
            f.flush()
            os.dup2(os.open(os.devnull, os.O_WRONLY), f.fileno())
        except (OSError, ValueError):
            pass
    stop_processes(descendants(), grace_s=2.0)
    _quiet_exit(rc)


def _report(report, summary: dict | None, why: str) -> int:
    """The watching process's last act: ``report(summary, why)`` (or the line alone); its exit status."""
    try:
        return report(summary, why)
    except Exception as exc:  # the report could not be written: one line, still the end
        print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr, flush=True)
        return 2


def _say(summary: dict | None, why: str) -> int:
    print(f"{PROG}: error: {why}", file=sys.stderr, flush=True)
    return 2


def _by(who: str, ended: tuple[dict | None, str]) -> tuple[dict | None, str]:
    """:func:`_ended`'s summary and line with the command that ended the script named (``the tuner``: attack53 D02,
    its deadline line said "so the doctor ended it")."""
    summary, line = ended
    if who != "the doctor":
        line = line.replace("the doctor", who)
        for k in ("stopped", "note"):
            if summary and isinstance(summary.get(k), str):
                summary[k] = summary[k].replace("the doctor", who)
    return summary, line


def run_script(path, args=(), max_batches: int = 30, deadline_s: float | None = DEFAULT_DEADLINE_S,
               log=lambda m: None, report=_say, watch: bool = False, who: str = "the doctor") -> tuple[dict, Any]:
    """Run ``path`` as ``__main__`` with ``args`` until one DataLoader delivered
    ``max_batches`` batches (or the script ended); returns (summary, that loader).
    Where the script cannot be stopped so (:mod:`feedlab.doctor.script_watch`), ``report(summary
    or None, why)`` says what was measured and returns the exit status of this process, which
    then ends (``who``: the command that ends it, as its lines name it). With ``watch`` (a command line's run: never in a process that must go on, such as a
    test runner's), the script runs in a forked child that this process watches (this process exits
    with the child's status; the child returns here)."""
    from torch.utils.data import DataLoader

    path = Path(path)
    if not path.is_file():
        raise UserCodeError(f"--script {path}: no such file")
    watched = watch and hasattr(os, "fork")   # a command line's run: watched from outside
    tell = None
    if watched:
        pid, fd = fork_watched()
        if pid:   # this process watches the script's (the child's); it ends with it, or ends it
            seen = Progress()
            watch_child(pid, fd, seen, deadline_s,
                        lambda why, kids: _report(report, *_by(who, _ended(seen, path, args, why, deadline_s,
                                                                            len(kids)))))
        tell = Wire(fd)
    rec = Recorder(max_batches, deadline_s, tell)
    original = DataLoader.__iter__
    dog = Watchdog(rec, deadline_s, lambda why: _say_and_end(report, *_by(who, _ended(rec, path, args, why, deadline_s))))

    def __iter__(self):
        default_fault_signals(self)   # a worker's fault is the doctor's one line, not torch's too (attack55 W3)
        return rec.wrap(self, original(self))

    def _exit(code=0):
        if os.getpid() != rec.owner or dog.done.is_set():   # a DataLoader worker, a forked copy: as asked
            _real_exit(code)
        why = f"your script called os._exit({code}) after {rec.batches()} batches"
        if threading.current_thread() is not threading.main_thread():
            if watched:                              # from one of its threads: the watching process reports
                rec.tell("fire", why)
                while True:
                    time.sleep(1)
            dog.fire(why)                            # from one of its threads: report and end here
        rec.stopping(why, error=bool(code))
        raise OsExit(code)

    def excepthook(a, hook=threading.excepthook):
        if not issubclass(a.exc_type, (Enough, OsExit)):   # the doctor's stop ends a thread of the script quietly
            hook(a)

    argv, cwd_path, os_exit, thread_hook = sys.argv, list(sys.path), os._exit, threading.excepthook
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path.resolve().parent))
    DataLoader.__iter__, os._exit, threading.excepthook = __iter__, _exit, excepthook
    log(f"running {path} {' '.join(args)} for at most {max_batches} batches of its DataLoader")
    outcome: BaseException | None = None
    if not watched:
        dog.start()
    try:
        runpy.run_path(str(path), run_name="__main__")
    except BaseException as exc:  # how the script ended, said below (a KeyboardInterrupt goes on)
        outcome = exc
    finally:
        if os.getpid() != rec.owner:                 # a forked copy of the script ends here, silently
            _quiet_exit(_status(outcome))
        rec.tell("done")
        if watched:
            dog.done.set()
        else:
            dog.close()
        DataLoader.__iter__, os._exit, threading.excepthook = original, os_exit, thread_hook
        sys.argv, sys.path[:] = argv, cwd_path
    clean = outcome is None
    try:
        stopped = _outcome(outcome, path, max_batches, rec.batches())
    finally:
        # the exception that ended the script holds this frame (and the frame it holds): a cycle that kept the
        # script's loop, and a DataLoader iterator the stop left with live workers, until a garbage collection;
        # one in a process --diagnose forks then ran its __del__ there ("Exception ignored ... can only test a
        # child process", a traceback per probe: attack50 D09). Broken here: its workers end in their owner.
        outcome = None
        _torch_sigchld_off()
        gc.collect()
    if clean and rec.stop is not None:    # stopped in one of its threads (or the stop caught), then ended
        if rec.stop[1]:
            raise UserCodeError(f"--script {path}: {rec.stop[0]}")
        stopped = rec.stop[0]
    main = rec.main()
    if main is None:
        raise UserCodeError(f"--script {path}: no torch.utils.data.DataLoader delivered a batch ({stopped}); "
                            "does the script build its loader under `if __name__ == '__main__':`?")
    return _summary(rec, path, args, stopped), main["loader"]   # no verdict under 16 batches (or --batches)


def _torch_sigchld_off() -> None:
    """The script is over: torch's SIGCHLD handler (a DataLoader worker's death raised as a RuntimeError wherever
    the main thread is) goes back to the default, or a worker killed from outside raised it over the script's own
    outcome inside the garbage collection below (attack53 K05: a 31-line chained traceback)."""
    handler = signal.getsignal(signal.SIGCHLD)
    if callable(handler) and str(getattr(handler, "__module__", "")).startswith("torch"):
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        except ValueError:   # not the main thread: nothing to put back here
            pass


def too_busy(s: dict, load: dict) -> dict:
    """Your script's loop measured while other programs took the CPU (``load``: a
    :class:`feedlab.monitor.LoadWindow` summary over the script's run): the verdict becomes "too busy to judge"
    (the measured one kept as ``measured_verdict``), ``busy`` names why, ``load`` is kept. Returns ``s``."""
    if s.get("verdict") is not None and load.get("busy"):
        s.update(measured_verdict=s["verdict"], verdict=TOO_BUSY, load=load,
                 busy=(f"other programs used {load.get('other_cpu_cores', float('nan')):.2f} of "
                       f"{load.get('usable_cores', '?')} usable cores"))
    return s


def render_script(s: dict, offer: bool = True) -> str:
    L = s["loader"]
    lines = [f"feedlab doctor · --script {s['script']} · {s['batches']} batches ({s['stopped']})",
             f"your DataLoader: {L['dataset']} ({L['dataset_len']} samples), batch_size={L['batch_size']}, "
             f"num_workers={L['num_workers']}, pin_memory={L['pin_memory']}, prefetch_factor={L['prefetch_factor']}, "
             f"persistent_workers={L['persistent_workers']}, timeout={L['timeout']}", ""]
    if s.get("verdict") is None:
        lines.append(f"VERDICT: not measured — {s['note']}")
        if s.get("data_wait_s_per_batch") is not None:   # what was measured, without a verdict from it
            lines.append(f"measured (median per batch, first batch left out): data wait "
                         f"{s['data_wait_s_per_batch'] * 1e3:,.1f} ms, step {s['step_s_per_batch'] * 1e3:,.1f} ms")
        return "\n".join(lines)
    what = ("the input pipeline bounds training: the step waits for data"
            if s["verdict"] == "data-bound" else "the step bounds training: data is ready when it asks")
    if s["verdict"] == TOO_BUSY:
        what = (f"your loop was measured while {s['busy']}: a busy window moves its data-wait share; run again "
                "when the machine is quiet")
    lines += [f"VERDICT: {s['verdict']} — {what}",
              f"per batch (median, first batch left out): data wait {s['data_wait_s_per_batch'] * 1e3:,.1f} ms, "
              f"step {s['step_s_per_batch'] * 1e3:,.1f} ms; waiting for data {100 * s['data_wait_fraction']:.0f}% "
              f"of the loop (median over its windows); {fmt_rate(s['samples_per_s'])} samples/s; first batch after "
              f"{s['first_batch_wait_s']:.2f} s{' (worker start-up)' if L['num_workers'] else ''}"]
    lines += loop_lines(s)
    if offer and "diagnosis" not in s:
        args = f" -- {' '.join(s['args'])}" if s["args"] else ""
        lines.append(f"the full stage-by-stage diagnosis of this loader (which stage bounds; changes measured on your loop): "
                     f"python -m feedlab.doctor --script {s['script']} --diagnose{args}")
    return "\n".join(lines)


def loop_lines(s: dict) -> list[str]:
    """How the verdict and the step's price were read: the windows, a burst named, the step's spread."""
    loop, price, out = s.get("loop") or {}, s.get("step_price"), []
    if loop:
        burst = (f"; {loop['bursts']} burst window(s) (≥ ×2 the median window's time): the whole window's mean "
                 f"share is {100 * loop['mean_share']:.0f}%, the median stands" if loop.get("bursts") else "")
        out.append(f"data-wait share: median of {loop['windows']} window(s) of {loop['window_batches']} batch(es)"
                   f"{burst}")
    if price:
        out.append(f"the step priced by its median over the script's window: {spread_words(price)}")
    return out
