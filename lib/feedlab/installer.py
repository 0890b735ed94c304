"""How feedlab installs packages: uv where it can honour everything pip is configured with, else pip.

uv installs from one cache, hard-linked into ``.venv`` and each peer venv, so torch is fetched and unpacked
once (2026-11-26, cpu-2c: ``make install`` 38 s against 89 with pip; the peer venvs 86 s against 154). uv
does not read pip's configuration, though: a site index, extra indexes, local wheels, a site constraints
file or a certificate set for pip would be passed over, and uv would install from PyPI what pip would
have taken from them. So each install reads pip's configuration (``pip config list``: its files and its
``PIP_*`` variables) and hands uv the same settings (:func:`uv_options`); where pip is configured with
something uv has no equivalent for, pip installs, and one line says which setting.

The Makefile runs this file as a script before feedlab is installed (standard library only): ::

    python lib/feedlab/installer.py [--python PY] [--timeout S] [--what LABEL] -- <pip install arguments>
    python lib/feedlab/installer.py bootstrap --python PY [--constraints FILE]

``FEEDLAB_INSTALLER``: ``pip`` installs with pip alone; ``uv`` or unset uses uv where it is (beside ``PY``,
else on ``PATH``). A uv step that fails is run again by pip, said in one line; every step has a deadline.
"""

from __future__ import annotations

import argparse
import ast
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

if not __package__:   # run as a file (the Makefile, before feedlab is installed): its package from beside it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from feedlab.errors import seconds  # noqa: E402  (standard library and procgroup only)
from feedlab.procgroup import run_group  # noqa: E402  (standard library only; a group killed whole at its limit)

ENV = "FEEDLAB_INSTALLER"
TIMEOUT_S = 1800        # an install of torch and its CUDA libraries from an empty cache, with room
CONFIG_TIMEOUT_S = 60   # `pip config list`
BOOTSTRAP_TIMEOUT_S = 300

# pip's settings (`pip config list` keys, underscores as dashes) and what uv takes for each: a flag per value
# (whitespace-separated lists, as pip reads them), an environment variable, or nothing it needs
_FLAG_EACH = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
              "constraint": "--constraint", "trusted-host": "--allow-insecure-host",
              "only-binary": "--only-binary", "no-binary": "--no-binary"}
_SWITCH = {"no-index": ["--no-index"], "pre": ["--prerelease", "allow"],
           "break-system-packages": ["--break-system-packages"]}
_ENV = {"default-timeout": "UV_HTTP_TIMEOUT", "timeout": "UV_HTTP_TIMEOUT", "retries": "UV_HTTP_RETRIES"}
_HARMLESS = {"config-file", "disable-pip-version-check", "progress-bar", "quiet", "verbose", "no-color", "no-input",
             "root-user-action", "no-warn-script-location", "require-virtualenv", "no-cache-dir", "cache-dir",
             "no-python-version-warning", "no-warn-conflicts"}


def choice(env=os.environ) -> str:
    """``"pip"`` or ``"uv"`` from :data:`ENV` (case and spaces ignored; unset or ``auto`` is uv where it is)."""
    raw = (env.get(ENV) or "").strip().lower()
    if raw in ("", "auto", "uv"):
        return "uv"
    if raw == "pip":
        return "pip"
    raise ValueError(f"{ENV}={env.get(ENV)!r}: use pip or uv (or leave it unset)")


def find_uv(python: str | os.PathLike | None = None, env=os.environ) -> str | None:
    """uv beside ``python`` (``make install`` puts it in .venv), else on PATH; None where :data:`ENV` says
    pip or there is none."""
    if choice(env) == "pip":
        return None
    here = Path(python or sys.executable).parent / "uv"
    return str(here) if here.is_file() and os.access(here, os.X_OK) else shutil.which("uv")


def parse_config(text: str) -> dict[str, str]:
    """``pip config list``'s lines (``global.find-links='/opt/wheels'``, ``:env:.cert='...'``) as pip applies
    them: ``global``, then ``install`` over it, then ``PIP_*`` variables (``:env:``) over both."""
    rank = {"global": 0, "install": 1, ":env:": 2}
    rows = []
    for line in text.splitlines():
        m = re.match(r"^(:env:|[\w-]+)\.([\w-]+)=(.*)$", line.strip())
        if not m or m[1] not in rank:   # another command's section (download, wheel, ...)
            continue
        try:
            value = ast.literal_eval(m[3])
        except (ValueError, SyntaxError):
            value = m[3].strip("'\"")
        if str(value).strip():   # pip ignores an empty value (PIP_INDEX_URL= leaves the file's index)
            rows.append((rank[m[1]], m[2].replace("_", "-"), str(value)))
    return {key: value for _, key, value in sorted(rows, key=lambda r: r[0])}


def pip_config(python: str, run: Callable = run_group, env: dict[str, str] | None = None,
               timeout: float = CONFIG_TIMEOUT_S) -> dict[str, str] | None:
    """pip's configuration as ``python -m pip`` would apply it to an install (:func:`parse_config`), under the
    install's environment (``PIP_*`` included); None where pip cannot say (then pip installs: uv would be
    guessing at the indexes and constraints)."""
    try:
        r = run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_config(r.stdout or "") if r.returncode == 0 else None


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


UV_LONGEST_TIMEOUT_S = 86400   # pip's `inf` (wait for ever) as uv takes it: whole seconds, a day


def _uv_number(key: str, value: str) -> str | None:
    """A pip timeout or retry count as uv takes it (whole seconds, a whole number of retries), or None
    where uv has no equivalent and pip should read it itself: a timeout that is not a number, NaN, zero
    or negative; a retry count that is not a whole number >= 0. ``inf`` (pip takes it: no limit) is
    :data:`UV_LONGEST_TIMEOUT_S`, the longest uv is told to wait."""
    text = value.strip()
    if key == "retries":
        return text if text.isdigit() else None
    try:
        seconds = float(text)
    except ValueError:
        return None
    if math.isnan(seconds) or seconds <= 0:
        return None
    return str(UV_LONGEST_TIMEOUT_S if seconds > UV_LONGEST_TIMEOUT_S else math.ceil(seconds))


def uv_options(config: dict[str, str]) -> tuple[list[str], dict[str, str], list[str]]:
    """``(flags, environment, untranslated)``: pip's settings as uv reads them. ``untranslated`` names the
    settings uv has no equivalent for (a proxy, a client certificate, a target folder, ...): with any, pip
    installs. Several sources (an index and extra indexes or local wheels) are searched as pip searches
    them, every version from every source (``--index-strategy unsafe-best-match``), not the first source's."""
    flags: list[str] = []
    env: dict[str, str] = {}
    untranslated: list[str] = []
    for key, value in config.items():
        if key in _FLAG_EACH:
            for item in value.split():
                if key == "find-links" and "://" not in item and not Path(item).exists():
                    continue   # pip passes over a missing local folder with a warning; uv stops at it
                flags += [_FLAG_EACH[key], item]
        elif key in _SWITCH:
            flags += _SWITCH[key] if _truthy(value) else []
        elif key == "cert":
            env["SSL_CERT_DIR" if Path(value).is_dir() else "SSL_CERT_FILE"] = value
        elif key in _ENV:
            number = _uv_number(key, value)
            if number is None:   # pip reads it its own way (or refuses it in its own words): pip installs
                untranslated.append(key)
            else:
                env[_ENV[key]] = number
        elif key not in _HARMLESS:
            untranslated.append(key)
    sources = sum(1 for k in ("index-url", "extra-index-url", "find-links") for _ in config.get(k, "").split())
    if sources and ("extra-index-url" in config or "find-links" in config):
        flags += ["--index-strategy", "unsafe-best-match"]
    return flags, env, untranslated


def _last(text: str, n: int = 1) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip() and not ln.startswith("WARNING: Location")]
    return " | ".join(lines[-n:]) or "no output"


_TAKES_VALUE = {"-c", "--constraint", "-r", "--requirement", "-i", "--index-url", "--extra-index-url", "-f",
                "--find-links"}


def _label(args: list[str]) -> str:
    """What an install asks for, without its options (``-c c.txt toy`` is ``toy``)."""
    out, skip = [], False
    for a in args:
        if not skip and not a.startswith("-"):
            out.append(a)
        skip = a in _TAKES_VALUE
    return " ".join(out)


def _step(tool: str) -> str:
    return "uv pip install" if tool == "uv" else "pip install"


def install(python: str, args: list[str], *, what: str = "", uv: str | None = None, run: Callable = run_group,
            log: Callable[[str], None] = print, timeout: float = TIMEOUT_S,
            env: dict[str, str] | None = None) -> tuple[int, str]:
    """``pip install args`` into ``python``'s environment: with uv (:func:`find_uv`; ``uv=""``: pip only) given
    pip's configuration, else with pip. Returns ``(rc, line)``: 0 installed; 124 a step ran past ``timeout``
    (not tried again: pip would take longer); else the failing step's last lines. A uv step that fails, or a
    pip configuration uv cannot honour, is said in one line through ``log`` and pip installs. A failure's
    line is ``<step> <what>: <why>`` (``pip install toy-loader: ERROR: no matching distribution``)."""
    label = what or _label(args)
    base = {**os.environ, **(env or {})}
    uv = find_uv(python, base) if uv is None else (uv or None)
    end = time.monotonic() + timeout   # one deadline for the whole install, every step inside it
    steps: list[tuple[str, list[str], dict[str, str]]] = []
    if uv:
        config = pip_config(python, run, base, min(CONFIG_TIMEOUT_S, timeout))
        flags, uv_env, untranslated = uv_options(config or {})
        if config is None:
            log(f"install: pip installs {label}: `pip config list` did not answer, so uv would not know your indexes")
        elif untranslated:
            log(f"install: pip installs {label}: your pip configuration sets {', '.join(untranslated)}, "
                f"which uv does not read")
        else:
            steps.append(("uv", [uv, "pip", "install", "-q", "--compile-bytecode", "--python", python, *flags, *args],
                          {**base, **{k: v for k, v in uv_env.items() if k not in base}}))
    steps.append(("pip", [python, "-m", "pip", "install", "-q", *args], base))
    rc, line = 1, ""
    for i, (tool, cmd, step_env) in enumerate(steps):
        left = end - time.monotonic()
        if left <= 0:
            return 124, f"{_step(tool)} {label}: not started, the install's {timeout:.0f} s had passed"
        try:
            r = run(cmd, capture_output=True, text=True, timeout=left, env=step_env)
        except subprocess.TimeoutExpired:
            return 124, f"{_step(tool)} {label}: ran past {timeout:.0f} s"
        except OSError as exc:
            r = subprocess.CompletedProcess(cmd, 1, "", f"{type(exc).__name__}: {exc}")
        if r.returncode == 0:
            return 0, f"{tool} installed {label}"
        rc, line = r.returncode, f"{_step(tool)} {label}: {_last(r.stderr or r.stdout, 3)}"
        if i < len(steps) - 1:
            log(f"install: uv failed ({_last(r.stderr or r.stdout)}); pip installs {label} instead, "
                f"with your pip configuration")
    return rc, line


def bootstrap(python: str, constraints: str | None = None, run: Callable = run_group,
              log: Callable[[str], None] = print, timeout: float = BOOTSTRAP_TIMEOUT_S) -> bool:
    """Put uv beside ``python`` at the version ``constraints`` pins (a changed pin reaches an existing venv);
    a wheel only, under a deadline. Where it does not install, one line says so and pip installs: False."""
    if choice() == "pip":
        return False
    pin = None
    if constraints and Path(constraints).is_file():
        pin = next(iter(re.findall(r"^uv==([\w.]+)\s*$", Path(constraints).read_text(), re.M)), None)
    here = Path(python).parent / "uv"
    if here.is_file():
        try:
            have = run([str(here), "--version"], capture_output=True, text=True, timeout=30).stdout.split()
        except (OSError, subprocess.SubprocessError):
            have = []
        if pin is None or pin in have:
            return True
    cmd = [python, "-m", "pip", "install", "-q", "--only-binary=:all:",
           *(["-c", constraints] if constraints else []), "uv"]
    try:
        r = run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        r = subprocess.CompletedProcess(cmd, 1, "", f"ran past {timeout:.0f} s")
    except OSError as exc:
        r = subprocess.CompletedProcess(cmd, 1, "", str(exc))
    if r.returncode != 0:
        other = shutil.which("uv")
        log(f"install: uv did not install in {Path(python).parent} ({_last(r.stderr or r.stdout)}); "
            + (f"the uv on PATH ({other}) installs, pip where it fails" if other else "pip installs"))
        return False
    return True


class Signalled(KeyboardInterrupt):
    """A signal stopped the install; its exit status is 128 + the signal's number (143 for SIGTERM)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)   # "SIGTERM": the line names it
        self.code = 128 + signum


def _interrupt(signum, _frame):
    raise Signalled(signum)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if __name__ == "__main__":   # a timeout or a cancelled job stops the step under way with its group
        signal.signal(signal.SIGTERM, _interrupt)
        signal.signal(signal.SIGHUP, _interrupt)
    if argv[:1] == ["bootstrap"]:
        ap = argparse.ArgumentParser(prog="installer.py bootstrap")
        ap.add_argument("--python", default=sys.executable)
        ap.add_argument("--constraints", default=None)
        a = ap.parse_args(argv[1:])
        try:
            bootstrap(a.python, a.constraints)
        except ValueError as exc:
            print(f"install: {exc}", file=sys.stderr)
            return 2
        return 0
    ap = argparse.ArgumentParser(prog="installer.py", description="pip install ARGS, through uv where it can")
    ap.add_argument("--python", default=sys.executable, help="the environment's interpreter")
    ap.add_argument("--timeout", type=seconds, default=TIMEOUT_S, help="the install's deadline in seconds")
    ap.add_argument("--what", default="", help="what the lines call this install")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then pip install's arguments")
    a = ap.parse_args(argv)
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    if not args:
        ap.error("nothing to install: give pip install's arguments after --")
    try:
        rc, line = install(a.python, args, what=a.what, timeout=a.timeout)
    except ValueError as exc:   # FEEDLAB_INSTALLER set to something else
        print(f"install: {exc}", file=sys.stderr)
        return 2
    print(f"install: {line}", file=sys.stderr if rc else sys.stdout)
    return rc


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:   # Ctrl-C or a signal: the step's group is already stopped, in one line
        print(f"install: stopped ({str(exc) or 'Ctrl-C'}) with everything it had started", file=sys.stderr)
        sys.exit(getattr(exc, "code", 130))
