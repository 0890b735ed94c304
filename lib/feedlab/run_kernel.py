"""The runner's kernel: how it is started (IPC sockets in a folder of the runner's own) and how everything the
runner started stops with it on SIGTERM, SIGHUP or SIGINT.

A runner killed by a signal used to die silently: the kernel and 04's child interpreter kept running, the
notebook's ``*.tmp-<pid>-<hex>/`` folder stayed beside the record, and the kernel's ``kernel-ipc-N`` sockets
stayed in ``notebooks/`` (jupyter_client makes them in its working directory). Now:

* :func:`kernel_folder` — a temporary folder (in ``$TMPDIR``) for the kernel's sockets and its connection file
  (``JUPYTER_RUNTIME_DIR``), removed when the notebook ends, however it ends; :func:`kernel_options` points the
  kernel there.
* :func:`stop_on_signals` — within, SIGTERM, SIGHUP and SIGINT stop this process's descendants that were not
  there before (:func:`watch`: the kernel, its workers, what they started; by
  :func:`feedlab.run_limit.stop_processes`) at once, before anything unwinds, then raise :class:`RunnerStopped`
  (a KeyboardInterrupt: it leaves asyncio's tasks at once) so that the notebook's temporary folder is removed
  on the way out; further signals are held until the runner is back. The runner says so in one line and exits
  with 128 + the signal's number, at once (:func:`exit_now`). :func:`signals_held` holds them while torch is
  imported (a stop raised inside that import aborted the runner or was lost).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from feedlab import paths, procgroup, startup
from feedlab.run_limit import descendants, read_notebook, stop_processes, stopped_record

SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
#: the pids that were this process's descendants before the notebook under way started (None: none under way)
_BEFORE: dict = {"pids": None}
ADOPTING = {"on": False}   # this process is a child subreaper (adopt_orphans): new descendants are leftovers


def adopt_orphans() -> None:
    """A command line's runner adopts the orphans of what its notebooks start (a daemon with a cleared
    environment carries no token): :func:`watch` then stops every descendant a notebook left."""
    ADOPTING["on"] = procgroup.become_subreaper()


class RunnerStopped(KeyboardInterrupt):
    """A signal stopped the runner; ``stopped``: how many of its processes were still running then."""

    def __init__(self, signum: int, stopped: int = 0):
        self.signum, self.code, self.stopped = int(signum), 128 + int(signum), stopped
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    def line(self) -> str:
        what = (f"{self.stopped} process{'es' if self.stopped != 1 else ''} it had started (the kernel and what it "
                "started) stopped" if self.stopped else "no process of its own was running")
        return f"{self}: {what}; its temporary folder and the kernel's sockets removed; every record is as it was"


def exit_now(code: int) -> None:
    """End a command line's runner after its stop line: the exit handlers run (logging's flush and the like),
    its output is flushed, then ``os._exit``. The interpreter's own finalisation is skipped: every module torn
    down and the C++ static destructors of what it imported (torch's operator registry unregisters itself one
    operator at a time) took 1-2 s on a quiet 2-core machine and over 5 s on a busy one, after the line said the
    run was stopped (an outer ``timeout -k 5`` then SIGKILLed it: rc 137, not 143). By then everything the runner
    started is stopped and its temporaries are removed: nothing is left for the finalisation to do."""
    try:
        atexit._run_exitfuncs()
    except BaseException:  # pragma: no cover - a handler that fails must not keep us from ending
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed or broken stream: nothing more can be said on it
            pass
    os._exit(code)


def _on_signal(signum, _frame):
    for sig in SIGNALS:   # one stop: a second signal does not cut the clean-up short
        signal.signal(sig, signal.SIG_IGN)
    _BEFORE["logging"] = logging.root.manager.disable
    logging.disable(logging.CRITICAL)   # the kernel client's "Kernel died ..." as its kernel is stopped: the line says it
    before = _BEFORE["pids"] or set()   # no notebook under way: whatever is below the runner is its own
    procs = {p.pid for p in descendants() if p.pid not in before}
    if _BEFORE.get("token"):   # a daemon the notebook started that left the tree (setsid, a double fork)
        procs |= set(procgroup.carrying(_BEFORE["token"]))
    raise RunnerStopped(signum, stop_processes(sorted(procs)) if procs else 0)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within: SIGTERM, SIGHUP and SIGINT stop what the notebook under way started and raise
    :class:`RunnerStopped` (each where it has its default action: never over one that is ignored, as under
    nohup); put back on the way out. Off the main thread a no-op."""
    old: dict = {}
    if threading.current_thread() is threading.main_thread():
        # every one of SIGNALS is put back, not only those taken: a stop ignores them all (``_on_signal``), the
        # ones someone else handles (Ray's SIGTERM handler after ``ray.init``) too
        startup.started()   # the start-up handlers go back to the defaults first: those are what is put back
        old = {sig: signal.getsignal(sig) for sig in SIGNALS}
        for sig, handler in old.items():
            if handler in (signal.SIG_DFL, signal.default_int_handler, startup.on_signal):   # start-up's: ours
                signal.signal(sig, _on_signal)
    try:
        with procgroup.dropped_signals_raised():   # a stop raised inside a weakref callback is raised again
            yield
    finally:
        for sig, handler in old.items():
            if handler is not None:   # None: set outside Python; left as it is
                signal.signal(sig, handler)
        if "logging" in _BEFORE:
            logging.disable(_BEFORE.pop("logging"))


@contextmanager
def signals_held() -> Iterator[None]:
    """Within (on the main thread): SIGTERM, SIGHUP and SIGINT are noted, not acted on; on the way out the first
    one noted is handed to the handler that was there (the runner's stop: :class:`RunnerStopped` raised here, in
    Python). Around the runner's import of torch: a stop raised from a signal handler inside that import was
    raised inside C++ (torch's pybind11 modules run Python while loading) and aborted the runner ("terminate
    called after throwing an instance of 'pybind11::error_already_set'", rc 134, a C++ trace), or was caught
    inside the import and lost (the run went on to "ok", rc 0). The import is bounded; the stop waits for it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    old = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig, handler in old.items():
        if callable(handler):
            signal.signal(sig, lambda signum, _frame: noted.append(signum))
    try:
        yield
    finally:
        for sig, handler in old.items():
            if callable(handler):
                signal.signal(sig, handler)
    if noted:
        old[noted[0]](noted[0], None)


@contextmanager
def watch() -> Iterator[None]:
    """Around a notebook: the processes that appear below this one are the ones a signal stops. The kernel
    (started within) carries a token of :mod:`feedlab.procgroup` in its environment, and so does whatever it
    starts: a daemon that left the tree (``setsid``, a double fork) is found by it, stopped at a signal, and
    stopped when the notebook has ended (nothing the notebook started outlives its run)."""
    token = os.urandom(8).hex()
    old = os.environ.get(procgroup.TOKENS)
    os.environ[procgroup.TOKENS] = procgroup.marked_env({} if old is None else {procgroup.TOKENS: old},
                                                        token)[procgroup.TOKENS]
    _BEFORE["pids"], _BEFORE["token"] = {p.pid for p in descendants()}, token
    unnote = _note_kernel_exit()
    try:
        yield
    finally:
        unnote()
        before = _BEFORE["pids"] or set()
        _BEFORE["pids"] = _BEFORE["token"] = None
        if old is None:
            os.environ.pop(procgroup.TOKENS, None)
        else:
            os.environ[procgroup.TOKENS] = old
        left = procgroup.carrying(token)
        if ADOPTING["on"]:   # orphans that reparented here (procgroup.become_subreaper), whatever their environment
            left = sorted(set(left) | {p.pid for p in descendants()} - before)
        if left:
            stop_processes(left)


#: the exit status of the notebook's kernel as jupyter_client polled it (-n: ended by signal n), for the line
_KERNEL_EXIT: dict = {}


def _note_kernel_exit():
    """From now on the kernel's exit status is noted (:data:`_KERNEL_EXIT`) as jupyter_client's local provisioner
    polls it (papermill drops the process with its status: a kernel killed from outside read only "Kernel died",
    attack53 R11); returns what puts the provisioner back."""
    _KERNEL_EXIT.clear()
    try:
        from jupyter_client.provisioning.local_provisioner import LocalProvisioner
    except ImportError:   # another jupyter_client: the line goes without the signal
        return lambda: None
    original = LocalProvisioner.poll

    async def poll(self):
        ret = await original(self)
        if ret is not None and getattr(self, "process", None) is not None:
            _KERNEL_EXIT.setdefault("code", ret)   # its first exit: a later shut-down's poll changes nothing
        return ret

    LocalProvisioner.poll = poll
    said = logging.getLogger("papermill")   # nbclient logs the death through papermill's logger: the line says it
    said.addFilter(_death_unlogged)

    def unnote():
        LocalProvisioner.poll = original
        said.removeFilter(_death_unlogged)
    return unnote


def _death_unlogged(record: logging.LogRecord) -> bool:
    """nbclient's "Kernel died while waiting for execute reply." dropped: a stray line in the progress bar, said
    again by the runner's own (:func:`kernel_failure`)."""
    return not str(record.msg).startswith("Kernel died while waiting")


@contextmanager
def kernel_folder() -> Iterator[Path]:
    """A folder of the runner's own for the kernel's IPC sockets and connection file (a short path in
    ``$TMPDIR``, or in ``/tmp`` where ``$TMPDIR`` is too long: a socket's name is at most 107 bytes), removed with whatever the kernel left in it. The
    kernel's ``TMPDIR`` (``TEMP``, ``TMP``) is inside it too: a kernel killed mid-cell leaves no temporary."""
    folder = Path(tempfile.mkdtemp(prefix="feedlab-kernel-", dir=paths.socket_parent("/feedlab-kernel-XXXXXXXX/kernel-ipc-NNNNN")))
    (folder / "tmp").mkdir()
    names = ("JUPYTER_RUNTIME_DIR", "TMPDIR", "TEMP", "TMP")
    before = {k: os.environ.get(k) for k in names}
    os.environ.update({k: str(folder if k == "JUPYTER_RUNTIME_DIR" else folder / "tmp") for k in names})
    try:
        yield folder
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(folder, ignore_errors=True)


#: the signals a process gets from its own fault (attack54 R24b: SIGTERM, SIGHUP, SIGUSR1 … come from outside, and
#: were offered "a crash in native code" as a cause)
FAULT_SIGNALS = frozenset(int(getattr(signal, n)) for n in ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGFPE", "SIGILL",
                                                            "SIGSYS", "SIGTRAP") if hasattr(signal, n))


def kernel_failure(nb_name: str, exc: BaseException, kept: Path | None) -> str | None:
    """The runner's line for a notebook whose kernel was ended from outside the runner (the runner's own stop never
    gets here: it raises :class:`RunnerStopped`): a KeyboardInterrupt in a cell is a SIGINT sent to the kernel
    alone, not the cell's fault (attack53 R10); a kernel that died says the signal that ended it (noted by
    :func:`watch`), where, and what to suspect, not papermill's bare "Kernel died" (R11; ``kept``: the failed
    run's folder, whose notebook papermill saved cell by cell).
    None for any other failure."""
    if getattr(exc, "ename", None) == "KeyboardInterrupt":
        cell = getattr(exc, "exec_count", None)
        where = f"cell [{cell}]" if cell is not None else "a cell"
        return (f"{nb_name}: its kernel got SIGINT from outside the runner (a kill -INT by its pid?) in {where}; "
                "nothing of this run is a result (a Ctrl-C to the runner stops the whole run)")
    if type(exc).__name__ != "DeadKernelError":
        return None
    nb = read_notebook(Path(kept) / f"{Path(nb_name).stem}.executed.ipynb") if kept else None
    cut = stopped_record(nb, 0.0, 0.0)["stopped_in"] if nb else None
    where = f" in the cell at index {cut['cell']} (`{cut['first_line']}`)" if cut else ""
    code = _KERNEL_EXIT.get("code")
    if code == -signal.SIGKILL:
        return (f"{nb_name}: its kernel was killed by SIGKILL{where} from outside the runner (the out-of-memory "
                "killer, or a kill -9?); nothing of this run is a result")
    if isinstance(code, int) and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        if -code in FAULT_SIGNALS:   # the kernel's own fault, raised by the CPU or by abort()
            return (f"{nb_name}: its kernel was ended by {name}{where} without a Python error: a crash in native "
                    "code (a C extension's bug, a bad memory access, an abort); nothing of this run is a result")
        return (f"{nb_name}: its kernel was ended by {name}{where} from outside the runner (a kill by its pid?); "
                "nothing of this run is a result")
    how = f" with exit status {code}" if code else ""
    return (f"{nb_name}: its kernel died{how}{where} without a Python error: killed from outside the runner (the "
            "out-of-memory killer, or a kill -9?) or a crash in native code; nothing of this run is a result")


def kernel_options(folder: Path | None = None) -> dict:
    """papermill keyword arguments for the kernel: IPC sockets instead of TCP, so the kernel has nothing to
    warn about ("running over TCP without encryption") and its channels are not open to other users of the
    machine; in ``folder`` (:func:`kernel_folder`) where given, never in the notebook's working directory."""
    if os.name != "posix":
        return {}
    from traitlets.config import Config

    cfg = Config()
    cfg.KernelManager.transport = "ipc"
    if folder is not None:
        cfg.KernelManager.ip = str(Path(folder) / "kernel-ipc")
    return {"config": cfg}


def progress_options(name: str) -> dict:
    """papermill's per-cell bar, labelled with the notebook."""
    return {"desc": f"    {name}", "unit": "cell", "leave": False, "mininterval": 0.5}
