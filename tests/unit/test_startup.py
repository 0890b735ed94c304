"""feedlab.startup: a signal while a command line is still importing is one line and exit 128+n (issue 47,
attack round eight W1/W2: Ctrl-C was a 20–50 line KeyboardInterrupt traceback, SIGTERM/SIGHUP no word at all)."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from feedlab import startup

REPO = Path(__file__).resolve().parents[2]


def test_command_name_is_the_module_a_person_typed_and_none_for_anything_else():
    py = sys.executable
    assert startup.command_name([py, "-m", "feedlab.bench", "--data", "x"]) == "python -m feedlab.bench"
    assert startup.command_name([py, "-X", "dev", "-mfeedlab.doctor"]) == "python -m feedlab.doctor"
    assert startup.command_name([py, "-m", "feedlab.report.readme"]) == "python -m feedlab.report.readme"
    assert startup.command_name([py, "-m", "data_prep", "pack"]) == "python -m data_prep"
    assert startup.command_name([py, "-m", "feedlab.peers.child"]) is None     # ours: we stop it, it says nothing
    assert startup.command_name([py, "-m", "feedlab.run"]) == "python -m feedlab.run"   # its module's imports too
    assert startup.command_name([py, "-m", "pytest", "-q"]) is None
    assert startup.command_name([py, "-c", "import feedlab"]) is None


def test_the_tuner_doctor_tune_became_is_named_as_the_command_typed(monkeypatch):
    """attack61 W3: `doctor --tune` stopped during its start-up said `python -m feedlab.tuner: … while starting`."""
    py = sys.executable
    monkeypatch.delenv("FEEDLAB_TUNER_PROG", raising=False)
    assert startup.command_name([py, "-m", "feedlab.tuner", "--data", "x"]) == "python -m feedlab.tuner"
    monkeypatch.setenv("FEEDLAB_TUNER_PROG", "python -m feedlab.doctor --tune")
    assert startup.command_name([py, "-m", "feedlab.tuner", "--data", "x"]) == "python -m feedlab.doctor --tune"
    assert startup.command_name([py, "-m", "feedlab.bench"]) == "python -m feedlab.bench"


_PROBE = """
import os, sys, time
sys.argv[0] = "-m"                                   # what `python -m` shows while it locates the module
sys.orig_argv = [sys.executable, "-m", "feedlab.bench"]
import feedlab
sys.path.insert(0, {tmp!r})
print("ready", flush=True)
if {during_import!r}:
    import slowmod                                   # a module whose import takes long (torch's, here 30 s)
try:
    print("running", flush=True)
    time.sleep(30)
finally:
    open({marker!r}, "w").close()                    # an unwinding exit runs this
"""


def _probe(tmp: Path, sig: int, during_import: bool) -> tuple[int, list[str], bool]:
    (tmp / "slowmod.py").write_text("import time\nprint('importing', flush=True)\ntime.sleep(30)\n")
    marker = tmp / "unwound"
    code = _PROBE.format(tmp=str(tmp), during_import=during_import, marker=str(marker))
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True)
    try:
        want = "importing" if during_import else "running"
        end = time.monotonic() + 60
        while time.monotonic() < end:
            line = p.stdout.readline()
            if not line or line.strip() == want:
                break
        p.send_signal(sig)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
    return p.returncode, [ln for ln in err.splitlines() if ln.strip()], marker.exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_during_an_import_is_one_line_and_exit_128_plus_n(tmp_path, sig):
    """SIGTERM and SIGHUP exit 128+n; Ctrl-C dies by SIGINT (130 to a shell, whose loop stops too)."""
    rc, lines, _ = _probe(tmp_path, sig, during_import=True)
    assert rc == (-sig if sig == signal.SIGINT else 128 + sig) and len(lines) == 1, (rc, lines)
    assert lines[0].startswith("python -m feedlab.bench: ") and lines[0].endswith("while starting"), lines


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_sigterm_after_the_imports_is_one_line_and_an_unwinding_exit(tmp_path, sig):
    rc, lines, unwound = _probe(tmp_path, sig, during_import=False)
    assert rc == 128 + sig and lines == [f"python -m feedlab.bench: stopped by {signal.Signals(sig).name}"], (rc, lines)
    assert unwound, "the finally block did not run: not an unwinding exit"


def test_ctrl_c_after_the_imports_is_a_keyboardinterrupt_said_in_one_line(tmp_path):
    rc, lines, unwound = _probe(tmp_path, signal.SIGINT, during_import=False)
    assert rc == -signal.SIGINT and lines == ["python -m feedlab.bench: interrupted (Ctrl-C)"], (rc, lines)
    assert unwound


def _catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (/proc's SigCgt mask)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except OSError:
        pass
    return False


def test_bench_interrupted_at_a_random_moment_of_its_start_says_one_line(sr_root):
    """The real command: Ctrl-C once the start-up handler is in place (/proc says so: never before Python has
    started), at a random moment of the next 2.5 s — in torch's import or after the bench's own handling is in
    place — is one line starting with the command's name, 130, never a traceback."""
    sig = signal.SIGINT
    p = subprocess.Popen([sys.executable, "-m", "feedlab.bench", "--data", str(sr_root), "--format", "npy",
                          "--epochs", "100000", "--num-workers", "0", "--warmup", "0", "--model", "none"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        end = time.monotonic() + 60
        # SIGTERM, not SIGINT: Python catches SIGINT itself from its first moments (default_int_handler), so only
        # SIGTERM's handler (installed by startup with SIGINT's, one line before) says feedlab's is in place
        while not _catches(p.pid, signal.SIGTERM) and p.poll() is None and time.monotonic() < end:
            time.sleep(0.01)
        at = random.uniform(0.01, 2.5)
        time.sleep(at)
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert p.returncode in (128 + sig, -sig) and len(lines) == 1, (at, p.returncode, err[-2000:])
    assert lines[0].startswith("python -m feedlab.bench: ") and "Traceback" not in err


def test_the_start_up_handler_gives_way_to_the_commands_own():
    """procgroup.signals_raise installs over the start-up handler (it is ours), and Ctrl-C is Python's own after."""
    code = textwrap.dedent("""
        import signal, sys
        sys.argv[0] = "-m"
        sys.orig_argv = [sys.executable, "-m", "feedlab.doctor"]
        import feedlab
        from feedlab import procgroup, startup
        assert signal.getsignal(signal.SIGTERM) is startup.on_signal
        with procgroup.signals_raise():
            assert signal.getsignal(signal.SIGTERM) is not startup.on_signal
            try:   # Ctrl-C: Python's own KeyboardInterrupt (in this process: signal_scope's owner)
                signal.raise_signal(signal.SIGINT)
                raise AssertionError("no KeyboardInterrupt")
            except KeyboardInterrupt as exc:
                assert type(exc) is KeyboardInterrupt
        # what the command puts back is the default, never the start-up line a second time (a second signal
        # after the command's own stop line: two lines, attack51 P03's shape)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-1500:]


_RUNNER_PROBE = """
import signal, sys
sys.argv[0] = "-m"                                   # `python -m feedlab.run` locating its module
sys.orig_argv = [sys.executable, "-m", "feedlab.run"]
import feedlab
from feedlab import run_kernel, startup
assert all(signal.getsignal(s) is startup.on_signal for s in run_kernel.SIGNALS), "no start-up handling"
sys.path.insert(0, {tmp!r})
print("ready", flush=True)
import slowmod                                       # run.py's own imports (findings, machines ...)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_the_runner_signalled_while_its_module_imports_says_one_line(tmp_path, sig):
    """``python -m feedlab.run`` before its main's stop handling is in place (run.py's module imports, ~0.5 s on
    a busy machine): SIGTERM ended it with no word (rc 143), Ctrl-C was a KeyboardInterrupt traceback through
    runpy and run.py (attack51 S02/S07); now one line and 128+n, and the runner's stop replaces the handler."""
    (tmp_path / "slowmod.py").write_text("import time\nprint('importing', flush=True)\ntime.sleep(30)\n")
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_RUNNER_PROBE.format(tmp=str(tmp_path)))],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True)
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            line = p.stdout.readline()
            if not line or line.strip() == "importing":
                break
        p.send_signal(sig)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert p.returncode == (-sig if sig == signal.SIGINT else 128 + sig) and lines == [
        f"python -m feedlab.run: {'interrupted (Ctrl-C)' if sig == signal.SIGINT else 'stopped by SIGTERM'} "
        "while starting"], (p.returncode, err[-1500:])


def test_the_runners_stop_takes_over_and_puts_back_the_defaults():
    code = textwrap.dedent("""
        import signal, sys
        sys.argv[0] = "-m"
        sys.orig_argv = [sys.executable, "-m", "feedlab.run"]
        import feedlab
        from feedlab import run_kernel, startup
        assert all(signal.getsignal(s) is startup.on_signal for s in run_kernel.SIGNALS)
        with run_kernel.stop_on_signals():
            assert all(signal.getsignal(s) is run_kernel._on_signal for s in run_kernel.SIGNALS), "not taken over"
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-1500:]


def test_command_name_knows_combined_flags_and_our_console_scripts():
    py = sys.executable
    assert startup.command_name([py, "-Im", "feedlab.bench"], script="") == "python -m feedlab.bench"
    assert startup.command_name([py, "-X", "utf8", "-m", "data_prep"], script="") == "python -m data_prep"
    assert startup.command_name([py, "-c", "x", "-m", "feedlab.bench"], script="") is None
    assert startup.command_name([py, "/venv/bin/feedlab-doctor"], script="/venv/bin/feedlab-doctor") == "feedlab-doctor"


def test_an_uncaught_signalled_names_its_signal():
    code = textwrap.dedent("""
        import signal, sys
        sys.argv[0] = "-m"
        sys.orig_argv = [sys.executable, "-m", "feedlab.doctor"]
        import feedlab
        from feedlab import procgroup
        raise procgroup.Signalled(signal.SIGTERM)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.stderr.strip() == "python -m feedlab.doctor: stopped by SIGTERM", out.stderr[-1500:]


def test_the_fd_handover_thread_losing_a_dead_peer_prints_no_traceback(monkeypatch):
    """attack53 K05t: multiprocessing's resource_sharer thread calls sys.excepthook itself when the DataLoader
    worker it hands an fd to dies mid-hand-over: a 7-line traceback after the command's line. Our hook drops that
    (a connection reset, an EOF, raised in resource_sharer) and passes anything else on."""
    import threading
    from multiprocessing import resource_sharer

    seen = []
    monkeypatch.setitem(startup._state, "previous", lambda kind, value, tb: seen.append(kind))
    monkeypatch.setattr(sys, "excepthook", startup._excepthook)

    class Conn:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def recv(self):
            return None   # the sharer's stop message: _serve returns

    class Listener:   # what the thread meets: a peer gone mid-hand-over, a bug of its own, then its stop
        events = [ConnectionResetError(104, "Connection reset by peer"), EOFError(), ValueError("a bug"), None]

        def accept(self):
            event = self.events.pop(0)
            if event is not None:
                raise event
            return Conn()

    sharer = resource_sharer._ResourceSharer.__new__(resource_sharer._ResourceSharer)
    sharer._listener, sharer._cache = Listener(), {}
    t = threading.Thread(target=sharer._serve, daemon=True)   # it blocks every signal in its own thread
    t.start()
    t.join(10)
    assert not t.is_alive()
    assert seen == [ValueError]   # the peer's death dropped (twice), the thread's own bug still said
