"""feedlab.installer: uv given what pip is configured with, pip where uv cannot honour it or fails, every step
under a deadline, and a changed uv pin reaching an existing venv."""

import subprocess
import sys

import pytest

from feedlab import installer

# `pip config list` on a machine with a site constraints file, two local indexes, a wheel folder and a certificate
THIS_BOX = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.disable-pip-version-check='1'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/other.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/srv/old-wheels'
download.no-deps='true'
"""


def _proc(rc=0, out="", err=""):
    return subprocess.CompletedProcess([], rc, out, err)


def test_pip_configuration_is_read_as_pip_applies_it():
    cfg = installer.parse_config(THIS_BOX)
    assert cfg["find-links"] == "/opt/wheels"                   # PIP_FIND_LINKS over the file's
    assert cfg["cert"] == "/etc/ssl/certs/ca-certificates.crt"
    assert cfg["extra-index-url"].split() == ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"]
    assert "no-deps" not in cfg                                 # another command's section
    assert installer.parse_config("install.index-url='https://a'\nglobal.index-url='https://b'\n") == \
        {"index-url": "https://a"}                              # install's section over global's


def test_uv_is_handed_every_source_and_the_site_constraints():
    flags, env, untranslated = installer.uv_options(installer.parse_config(THIS_BOX))
    pairs = list(zip(flags[::2], flags[1::2]))
    assert ("--constraint", "/etc/xdg/pip/constraints.txt") in pairs
    assert ("--extra-index-url", "file:///opt/pypi/simple") in pairs
    assert ("--extra-index-url", "file:///opt/pypi-more/simple") in pairs
    assert ("--find-links", "/opt/wheels") in pairs and ("--find-links", "/srv/old-wheels") not in pairs
    assert ("--index-strategy", "unsafe-best-match") in pairs   # every source searched, as pip does
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", "UV_HTTP_TIMEOUT": "180"}
    assert untranslated == []
    assert installer.uv_options({}) == ([], {}, [])             # no configuration: uv as it is


def test_a_setting_uv_cannot_honour_has_pip_install_and_says_which(tmp_path):
    calls, said = [], []

    def run(cmd, **kw):
        calls.append(cmd)
        return _proc(0, "global.proxy='http://proxy:3128'\n") if "config" in cmd else _proc()

    rc, line = installer.install("/v/bin/python", ["-e", ".[dev]"], what="feedlab", uv="/v/bin/uv", run=run,
                                 log=said.append)
    assert rc == 0 and line == "pip installed feedlab"
    assert [c[0] for c in calls] == ["/v/bin/python", "/v/bin/python"] and calls[1][1:4] == ["-m", "pip", "install"]
    assert said == ["install: pip installs feedlab: your pip configuration sets proxy, which uv does not read"]


def test_uv_failing_hands_the_same_request_to_pip_and_both_failing_is_one_line():
    calls, said = [], []

    def run(cmd, pip_rc=0, **kw):
        calls.append(cmd)
        if "config" in cmd:
            return _proc()
        return _proc(1, "", "noise\nerror: no index has toy") if cmd[0] == "/uv" else _proc(pip_rc, "", "E: gone")

    rc, line = installer.install("/py", ["-c", "c.txt", "toy"], uv="/uv", run=run, log=said.append)
    assert rc == 0 and line == "pip installed toy"
    assert calls[1][-3:] == calls[2][-3:] == ["-c", "c.txt", "toy"]
    assert len(said) == 1 and "uv failed (error: no index has toy)" in said[0]
    calls.clear()
    rc, line = installer.install("/py", ["toy"], uv="/uv", run=lambda c, **k: run(c, pip_rc=1), log=said.append)
    assert rc == 1 and line == "pip install toy: E: gone"


def test_a_step_past_its_deadline_is_not_tried_again():
    calls = []

    def run(cmd, **kw):
        calls.append((cmd, kw.get("timeout")))
        if "config" in cmd:
            return _proc()
        raise subprocess.TimeoutExpired(cmd, kw["timeout"])

    rc, line = installer.install("/py", ["torch"], uv="/uv", run=run, timeout=7)
    assert rc == 124 and line == "uv pip install torch: ran past 7 s"
    assert [c[0][0] for c in calls] == ["/py", "/uv"] and all(t for _, t in calls)   # every step has a deadline


@pytest.mark.parametrize("value, want", [("", "uv"), ("PIP", "pip"), (" pip ", "pip"), ("uv", "uv"), ("auto", "uv")])
def test_feedlab_installer_is_read_one_way(value, want):
    assert installer.choice({"FEEDLAB_INSTALLER": value}) == want


def test_feedlab_installer_misspelt_is_one_line(capsys, monkeypatch):
    monkeypatch.setenv("FEEDLAB_INSTALLER", "conda")
    assert installer.main(["--", "toy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["install: FEEDLAB_INSTALLER='conda': use pip or uv (or leave it unset)"]


def test_bootstrap_reinstalls_uv_at_a_changed_pin_and_says_one_line_when_it_cannot(tmp_path, monkeypatch):
    monkeypatch.delenv("FEEDLAB_INSTALLER", raising=False)
    (tmp_path / "bin").mkdir()
    py, uv = tmp_path / "bin" / "python", tmp_path / "bin" / "uv"
    uv.write_text("")
    cons = tmp_path / "constraints.txt"
    cons.write_text("torch==2.14.1\nuv==0.13.9\n")
    calls, said = [], []

    def run(cmd, have="uv 0.13.9 (x86_64)", rc=0, **kw):
        calls.append(cmd)
        return _proc(0, have) if cmd[-1] == "--version" else _proc(rc, "", "ERROR: No matching distribution for uv")

    assert installer.bootstrap(str(py), str(cons), run=run, log=said.append)
    assert calls == [[str(uv), "--version"]]                   # at the pin: nothing installed
    calls.clear()
    assert installer.bootstrap(str(py), str(cons), run=lambda c, **k: run(c, have="uv 0.12.0"), log=said.append)
    assert calls[-1] == [str(py), "-m", "pip", "install", "-q", "--only-binary=:all:", "-c", str(cons), "uv"]
    uv.unlink()
    monkeypatch.setattr(installer.shutil, "which", lambda _name: None)
    said.clear()
    assert not installer.bootstrap(str(py), str(cons), run=lambda c, **k: run(c, rc=1), log=said.append)
    assert said == [f"install: uv did not install in {py.parent} (ERROR: No matching distribution for uv); pip installs"]


def test_the_script_runs_before_feedlab_is_installed(tmp_path):
    """The Makefile runs it as a file with ``-P`` before feedlab is installed: no site-packages here (``-S``),
    so a third-party import would fail."""
    script = installer.__file__
    out = subprocess.run([sys.executable, "-S", "-P", script, "--python", sys.executable], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 2 and "nothing to install" in out.stderr


def test_what_uv_would_stop_at_is_handed_over_as_pip_reads_it(tmp_path):
    certs = tmp_path / "certs"
    certs.mkdir()
    cfg = installer.parse_config(f"""global.index-url='https://mirror.example/simple'
:env:.index-url=''
:env:.config-file='/etc/pip-ci.conf'
global.default-timeout='15.5'
global.cert='{certs}'
global.find-links='{tmp_path / "missing"} {tmp_path} https://wheels.example/'
""")
    assert cfg["index-url"] == "https://mirror.example/simple"     # an empty PIP_INDEX_URL leaves the file's
    flags, env, untranslated = installer.uv_options(cfg)
    pairs = list(zip(flags[::2], flags[1::2]))
    assert ("--index-url", "https://mirror.example/simple") in pairs
    assert ("--find-links", str(tmp_path)) in pairs and ("--find-links", "https://wheels.example/") in pairs
    assert ("--find-links", str(tmp_path / "missing")) not in pairs   # pip warns and goes on; uv would stop
    assert env == {"UV_HTTP_TIMEOUT": "16", "SSL_CERT_DIR": str(certs)}
    assert untranslated == []                                    # PIP_CONFIG_FILE: its settings are listed


def test_pip_configuration_that_cannot_be_read_has_pip_install():
    calls, said = [], []

    def run(cmd, **kw):
        calls.append(cmd)
        if "config" in cmd:
            raise subprocess.TimeoutExpired(cmd, kw["timeout"])
        return _proc()

    rc, line = installer.install("/py", ["toy"], uv="/uv", run=run, log=said.append)
    assert rc == 0 and line == "pip installed toy" and [c[0] for c in calls] == ["/py", "/py"]
    assert "`pip config list` did not answer" in said[0]


def test_an_install_has_one_deadline_for_all_its_steps():
    import itertools

    clock = itertools.count(0, 60)   # each look at the clock: 60 s later
    given = []

    def run(cmd, **kw):
        if "config" in cmd:
            return _proc()
        given.append(kw["timeout"])
        return _proc(1, "", "error: nope")

    import unittest.mock as mock
    with mock.patch.object(installer.time, "monotonic", lambda: float(next(clock))):
        rc, line = installer.install("/py", ["toy"], uv="/uv", run=run, log=lambda _m: None, timeout=100)
    assert rc == 124 and line == "pip install toy: not started, the install's 100 s had passed"
    assert given == [40.0]     # uv had what was left of the 100 s; pip nothing, so it was not started


def test_past_its_deadline_a_step_is_stopped_with_what_it_started(tmp_path):
    """uv or pip stopped at the deadline takes its build processes with it (a compiler left running would load
    the machine through the tests that follow)."""
    import time

    import psutil

    pidfile = tmp_path / "grandchild.pid"   # a grandchild that ignores SIGTERM and holds the output open
    cmd = ["sh", "-c", f"(trap '' TERM; exec sleep 60) & echo $! > {pidfile}; wait"]
    t = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        installer.run_group(cmd, timeout=0.5)
    assert time.monotonic() - t < 15
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the step's child outlived its deadline"
        time.sleep(0.05)


@pytest.mark.parametrize("signame, word", [("SIGTERM", "SIGTERM"), ("SIGINT", "Ctrl-C"), ("SIGHUP", "SIGHUP")])
def test_a_signal_stops_the_install_with_its_step_in_one_line(tmp_path, signame, word):
    """SIGTERM (a timeout around make, a cancelled job) stops the step under way with its process group, and
    the script says so in one line (uv left running would hold its cache lock for the next install), naming the
    signal (it read 'stopped (signal 15)', and 'stopped ()' for Ctrl-C: attack51 S05/I01)."""
    import os
    import signal
    import time

    fake = tmp_path / "python"
    pidfile = tmp_path / "step.pid"
    fake.write_text(f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 60\n")
    fake.chmod(0o755)
    env = {**os.environ, "FEEDLAB_INSTALLER": "pip"}
    proc = subprocess.Popen([sys.executable, "-P", installer.__file__, "--python", str(fake), "--", "toy"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 20
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pidfile.exists(), "the step did not start"
    sig = getattr(signal, signame)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 128 + sig and "Traceback" not in err   # 128+n, as the other commands (issue 47 W5)
    assert err.strip().splitlines() == [f"install: stopped ({word}) with everything it had started"]
    step = int(pidfile.read_text())
    end = time.monotonic() + 5   # the step sleeps 60 s: one left running is still there at 5 (init may reap late)
    while True:
        try:
            os.kill(step, 0)
            alive = open(f"/proc/{step}/stat").read().split()[2] != "Z"
        except (ProcessLookupError, FileNotFoundError):
            alive = False
        if not alive or time.monotonic() > end:
            break
        time.sleep(0.05)
    assert not alive, "the step outlived the signal"


@pytest.mark.parametrize("value, uv_env", [("inf", "86400"), ("Infinity", "86400"), ("1e300", "86400"),
                                           ("2.5", "3"), ("nan", None), ("-5", None), ("0", None),
                                           ("soon", None)])
def test_every_timeout_pip_takes_reaches_an_install_without_a_traceback(value, uv_env):
    """PIP_DEFAULT_TIMEOUT=inf (pip takes it: no limit) was an OverflowError traceback and no install; a
    value uv has no equivalent for (NaN, zero, negative, not a number) is pip's to read, as pip reads it."""
    calls, said = [], []

    def run(cmd, **kw):
        calls.append((cmd, kw.get("env") or {}))
        return _proc(0, f":env:.default-timeout='{value}'\n") if "config" in cmd else _proc()

    rc, line = installer.install("/v/bin/python", ["toy"], what="toy", uv="/v/bin/uv", run=run, log=said.append,
                                 timeout=60)
    assert rc == 0, line
    cmd, env = calls[-1]
    if uv_env is None:
        assert cmd[:3] == ["/v/bin/python", "-m", "pip"] and "default-timeout" in " ".join(said), (cmd, said)
    else:
        assert cmd[0] == "/v/bin/uv" and env.get("UV_HTTP_TIMEOUT") == uv_env, (cmd, env)
    flags, uv, untranslated = installer.uv_options({"retries": "inf"})
    assert "retries" in untranslated and "UV_HTTP_RETRIES" not in uv     # pip's whole number only
