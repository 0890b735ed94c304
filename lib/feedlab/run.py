"""The batch runner: execute every notebook with papermill.

    python -m feedlab.run [--profile quick|full|smoke] [--only NAME ...]
                          [-p KEY VALUE ...] [--out-root DIR] [--data-only]
                          [--dry-run [--cores N]] [--tar FILE]
                          [--limit-s N [N ...]] [--deadline-s T]

Values after ``-p`` are typed by the notebook's parameters cell (:mod:`feedlab.run_params`): a ``str``
(a path) verbatim, ``int``/``float``/``bool`` as such, a list as YAML (``-p batch_sizes "[8, 32]"``); the
profile, ``out_dir`` and ``data_root`` are resolved once with the runner's own options (a ``-p`` that
contradicts ``--profile``, ``--out-root`` or ``--data-only`` is refused).
A ``-p`` key reaches only the notebooks that declare it; the runner says which do
not (``-p data_root DIR``: the notebooks that measure built-in data, and why).
Each notebook shows a per-cell progress bar while it runs.
Each executed notebook is kept beside its figures (``figures/<name>/<name>.executed.ipynb``)
as the record of the run. A notebook runs into a temporary folder beside its record; only a
run that ends well replaces the record, whole, in one rename (a failed one is kept under
``runs/failed/<name>/``, ``<name>-<key>/`` for a folder of the caller's own); a second run of the same notebook into the same folder refuses.
``--out-root DIR`` writes each notebook's record in ``DIR/<name>/``; ``-p out_dir DIR`` one notebook's
in DIR. A folder that holds anything but that notebook's record, or lies inside ``figures/``
elsewhere than the runner's own folder, is refused before anything runs; only the files a record
consists of are replaced (:func:`feedlab.run_record.check_destination`). The data the notebooks need is built first if missing.
Exits non-zero naming the notebook and the cell that failed. ``--dry-run`` prints,
per notebook, the parameters it would run with once the profile is resolved for this
machine (``--cores N`` pretends N usable cores), and runs nothing. ``--tar FILE``
rewrites FILE (``.tar`` or ``.tar.gz``) after each notebook, ok or failed, with this
machine's results (``figures/*/<machine_key>/``): on a borrowed machine whose tree is
replaced between commands, that one file carries the results home (docs/GPU_RUN.md).
``--limit-s N`` stops a notebook that runs past N seconds (its kernel and workers too) and
keeps what it had executed, with ``STOPPED.json`` (the cell it was in, each finished cell's
seconds), under ``runs/failed/<name>/``; ``--tar`` carries it home as
``runs/failed/<machine>/<name>/`` (as is a failed notebook's folder), never as a result
(:mod:`feedlab.run_limit`).
``--deadline-s T`` fits a list of notebooks into one command of T seconds: each limit is
cut to what is left, and a notebook with too little left is not started (and named).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from feedlab import files, findings, machines, paths
from feedlab.budget import DEADLINE_ENV
from feedlab.errors import cli_errors, command_line, one_line, seconds
from feedlab.machines import machine_key
from feedlab.nbparams import notebook_parameters, route_params  # noqa: F401  (notebook_parameters re-exported)
from feedlab.paths import NOTEBOOKS_DIR, RUNNER_ENV, check_scratch, default_cls_root, default_sr_root
from feedlab.profiles import PROFILES, check_workers, profile_values
from feedlab.results import atomic_write
from feedlab.run_kernel import (  # noqa: F401  (kernel_options re-exported: tests/notebooks/nbrun.py)
    RunnerStopped,
    adopt_orphans,
    exit_now,
    kernel_failure,
    kernel_folder,
    kernel_options,
    progress_options,
    signals_held,
    stop_on_signals,
    watch,
)
from feedlab.run_limit import (  # noqa: F401  (notebook_limits, within_deadline and the margins re-exported)
    MIN_START_S,
    STOP_MARGIN_S,
    NotebookLimit,
    NotebookStopped,
    all_cells_finished,
    descendants,
    describe,
    limit,
    mark_stopped_cell,
    notebook_limits,
    quiet_abandoned_tasks,
    read_notebook,
    stop_processes,
    stopped_record,
    within_deadline,
)
from feedlab.run_params import builtin_data_reason, plan_parameters, resolve_run  # noqa: F401  (re-exported)
from feedlab.run_plan import list_notebooks, plan, planned_machine_key, print_plan  # noqa: F401  (re-exported)
from feedlab.run_record import (  # noqa: F401  (re-exported: the runner's record, tests use them here)
    RecordWouldLose,
    RunLocked,
    check_destination,
    check_tar_dest,
    destination,
    install_record,
    keep_failed,
    restore_env,
    run_lock,
    tar_results,
)


def select(notebooks: list[Path], only: list[str] | None) -> list[Path]:
    if not only:
        return notebooks
    chosen = []
    for want in only:
        hits = [p for p in notebooks if p.stem == want or p.stem.startswith(want)
                or p.stem.split("_", 1)[0] == want]
        if not hits:
            names = ", ".join(p.stem for p in notebooks)
            raise SystemExit(f"--only {want!r}: no such notebook; choose from: {names}")
        chosen.extend(h for h in hits if h not in chosen)
    return chosen


def prepare_data(profile: str, log=print) -> None:
    """Build the embedded data sets the notebooks read, for this profile, if missing."""
    import data_prep

    values = profile_values("defaults", profile)
    patch, scale = int(values.get("patch", 64)), int(values.get("scale", 2))
    count = int(values["dataset_count"])
    t0 = time.perf_counter()
    root = data_prep.ensure_sr(default_sr_root(profile, patch), patch=patch, scale=scale,
                               count=count, formats="all")
    log(f"data: {root} ready ({count} pairs, every format) in {time.perf_counter() - t0:.1f} s")
    if hasattr(data_prep, "ensure_cls"):
        t0 = time.perf_counter()
        cls_root = data_prep.ensure_cls(default_cls_root(profile))
        log(f"data: {cls_root} ready in {time.perf_counter() - t0:.1f} s")


def _failed_cell(exc) -> str:
    cell = getattr(exc, "exec_count", None)
    ename = getattr(exc, "ename", type(exc).__name__)
    evalue = getattr(exc, "evalue", str(exc))
    where = f"cell [{cell}]" if cell is not None else "a cell"
    return f"{where}: {ename}: {str(evalue).splitlines()[0] if evalue else ''}"


# the environment a notebook's kernel runs in (set around each notebook, then restored)
KERNEL_ENV = {RUNNER_ENV: "1", "MPLBACKEND": "module://matplotlib_inline.backend_inline"}


def run_notebook(nb: Path, profile: str, params: dict, out_root: Path | None,
                 kernel: str = "python3", limit_s: float | None = None) -> Path:
    """Execute ``nb`` into a temporary folder beside its destination (``<dest>.tmp-<pid>-XXXXXX``);
    only when every cell ran is that folder (executed notebook, results, figures) put in place
    of the old record, in one rename. A failed run's folder goes to ``runs/failed/<name>/`` for
    a look, as does one stopped at ``limit_s`` (with ``STOPPED.json``; raises
    :class:`NotebookStopped`); an interrupted one is removed. The old record stays as it was."""
    import papermill as pm

    name = nb.stem
    final = destination(name, profile, params, out_root)
    final.parent.mkdir(parents=True, exist_ok=True)
    with run_lock(final):
        check_destination(name, profile, params, out_root)  # again, under the lock
        files.sweep_orphans(final.parent)
        tmp = files.tmp_sibling(final)
        tmp.mkdir()
        executed = tmp / f"{name}.executed.ipynb"
        if params.get("profile", profile) != profile:   # one truth: never a second profile in the kernel
            raise ValueError(f"-p profile {params['profile']} contradicts the run's profile {profile}")
        parameters = {**params, "profile": profile, "out_dir": str(tmp)}
        # the kernel inherits these: only the runner writes under figures/ (paths.RUNNER_ENV), and its
        # figures show inline in the executed record even where the caller set MPLBACKEND=Agg
        before = {k: os.environ.get(k) for k in (*KERNEL_ENV, DEADLINE_ENV)}
        os.environ.update(KERNEL_ENV)
        # the notebook's budgets end its grids before the limit stops it (feedlab.budget)
        os.environ.pop(DEADLINE_ENV, None)
        if limit_s and limit_s > 0:
            os.environ[DEADLINE_ENV] = f"{time.time() + limit_s:.3f}"
        before_pids, t0 = {p.pid for p in descendants()}, time.perf_counter()
        try:
            try:   # a signal stops what this notebook started (run_kernel.watch); its sockets go with kernel_folder
                with kernel_folder() as sockets, watch(), limit(
                        limit_s, snapshot=lambda: read_notebook(executed),
                        stop=lambda procs: stop_processes([p for p in procs if p.pid not in before_pids])):
                    pm.execute_notebook(str(nb), str(executed), parameters=parameters, kernel_name=kernel,
                                        cwd=str(NOTEBOOKS_DIR), progress_bar=progress_options(name),
                                        log_output=False, **kernel_options(sockets))
            except NotebookLimit as stop:
                stop_processes([p for p in stop.procs if p.pid not in before_pids])
                quiet_abandoned_tasks()
                rec = stopped_record(stop.snapshot, limit_s, time.perf_counter() - t0)
                if not all_cells_finished(rec):
                    raise NotebookStopped(*_keep_stopped(tmp, executed, rec, name, final)) from None
                print(f"    {name}: the limit came after its last cell had finished: kept as a result", flush=True)
            for path in tmp.rglob("*"):
                if path.suffix in (".ipynb", ".json", ".csv", ".txt", ".md") and path.is_file():
                    scrub_paths(path, {str(tmp): str(final)})

            findings.add_findings(executed)  # what this run found, as the notebook's first cell
            install_record(tmp, final, name, whole=bool(out_root) or not params.get("out_dir"))
        except NotebookStopped:
            raise
        except Exception as exc:
            kept = keep_failed(tmp, name, final)
            try:
                exc.feedlab_kept = kept  # the runner carries this run's folder in --tar
            except AttributeError:  # pragma: no cover - an exception without a __dict__
                pass
            raise
        except BaseException:
            files.remove(tmp)
            raise
        finally:
            restore_env(before)
    return final / executed.name


def _keep_stopped(tmp: Path, executed: Path, rec: dict, name: str, final: Path) -> tuple[str, Path | None]:
    """A notebook stopped at its limit: STOPPED.json beside the partly executed notebook (whose
    cut cell says so), the folder kept under runs/failed/<name>/ (never a result)."""
    mark_stopped_cell(executed, rec)
    for path in tmp.rglob("*"):
        if path.suffix in (".ipynb", ".json", ".txt") and path.is_file():
            scrub_paths(path, {str(tmp): str(final)})
    atomic_write(tmp / "STOPPED.json", json.dumps(rec, indent=1) + "\n")
    return describe(name, rec), keep_failed(tmp, name, final)


def scrub_paths(path: Path, also: dict[str, str] | None = None) -> None:
    """The executed notebook is a record kept in the repository: name files relative to the
    repository root, not where this machine keeps its checkout (papermill's metadata and
    printed paths would carry it), and by the folder it ends up in (``also``: the temporary
    folder it ran in → its destination). Rewritten atomically."""
    text = path.read_text(encoding="utf-8")
    clean = text
    for old, new in (also or {}).items():
        clean = clean.replace(old, new)
    clean = clean.replace(str(paths.REPO_ROOT) + "/", "").replace(str(paths.REPO_ROOT), ".")
    if clean != text:
        atomic_write(path, clean)


def main(argv: list[str] | None = None) -> int:
    env = {k: os.environ.get(k) for k in ("FEEDLAB_PROFILE", "FEEDLAB_CORES")}   # _main sets them for its kernels
    if command_line():   # a notebook's daemon, whatever its environment, is adopted here and stopped (run_kernel.watch)
        adopt_orphans()
    try:
        with stop_on_signals(), cli_errors("python -m feedlab.run"):
            try:
                if command_line():   # a signal inside torch's import is acted on after it (run_kernel.signals_held)
                    with signals_held():
                        import torch  # noqa: F401
                return _main(argv)
            except RunnerStopped as stop:   # SIGTERM, SIGHUP, SIGINT: what it started is stopped, one line
                quiet_abandoned_tasks()
                print(f"python -m feedlab.run: {stop.line()}", file=sys.stderr, flush=True)
                code = stop.code
    finally:
        restore_env(env)   # a caller in the same process (a test, a notebook) gets its own back
    if command_line():   # ends at once after its line: no seconds of interpreter finalisation (run_kernel.exit_now)
        exit_now(code)
    return code


def _main(argv: list[str] | None = None) -> int:
    t_command = time.perf_counter()  # --deadline-s counts from here: the data build is inside it
    ap = argparse.ArgumentParser(prog="python -m feedlab.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="", help=f"one of {', '.join(PROFILES)} "
                    "(default: $FEEDLAB_PROFILE or quick)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="notebooks by name, prefix or number")
    ap.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
                    help="override a notebook parameter; VALUE is typed by the notebook's parameters cell "
                         "(text verbatim for a str, YAML for a list)")
    ap.add_argument("--out-root", type=Path, help="write results/figures under DIR/<notebook> "
                    "instead of figures/")
    ap.add_argument("--data-only", action="store_true", help="only build the data sets")
    ap.add_argument("--no-data", action="store_true", help="do not build data first")
    ap.add_argument("--keep-going", action="store_true", help="run the rest after a failure")
    ap.add_argument("--list", action="store_true", help="list the notebooks and exit")
    ap.add_argument("--dry-run", action="store_true",
                    help="print each notebook's resolved parameters and run nothing")
    ap.add_argument("--cores", type=int, metavar="N",
                    help="with --dry-run: resolve worker counts for N usable cores instead of this machine's")
    ap.add_argument("--tar", type=Path, metavar="FILE",
                    help="after each notebook, write FILE: a tar of this machine's results (figures/*/<machine>/)")
    ap.add_argument("--limit-s", type=seconds, nargs="+", metavar="N",
                    help="stop a notebook after N seconds and keep what it executed (runs/failed/<name>/, "
                         "STOPPED.json; in --tar as runs/failed/<machine>/<name>/); one N for every "
                         "notebook, or one per notebook in --only's order")
    ap.add_argument("--deadline-s", type=seconds, metavar="T",
                    help="this whole command's seconds: a notebook starts only with at least "
                         f"{MIN_START_S:g} s left, and its limit is cut to what is left (less {STOP_MARGIN_S:g} s "
                         "to stop it and write the tar); the ones not started are named")
    args = ap.parse_args(argv)
    for value, flag in [(v, "--limit-s") for v in args.limit_s or []] + [(args.deadline_s, "--deadline-s")]:
        if value is not None and value <= 0:
            ap.error(f"{flag} {value:g}: must be more than 0 seconds")
    if args.cores is not None:
        if not args.dry_run:
            ap.error("--cores only applies with --dry-run (a real run uses the cores it has)")
        if args.cores < 1:
            ap.error(f"--cores {args.cores}: must be at least 1")
        os.environ["FEEDLAB_CORES"] = str(args.cores)

    notebooks = select(list_notebooks(), args.only)
    route_params(dict(args.param), notebooks)  # a key must be a parameter some selected notebook declares
    # one truth: the profile, the folders and every -p value, resolved once; all below read only these
    run_params = resolve_run(notebooks, [tuple(kv) for kv in args.param], args.profile, args.out_root,
                             args.data_only,   # a gpu plan's folders are the GPU machine's, not this one's
                             here=not (args.dry_run and "gpu" in (args.profile, dict(args.param).get("profile", ""))))
    profile, params, args.out_root = run_params.profile, run_params.params, run_params.out_root
    os.environ["FEEDLAB_PROFILE"] = profile
    if args.list:
        for nb in notebooks:
            print(nb.stem)
        return 0
    params_for = {nb: {k: run_params.for_notebook.get(nb, {}).get(k, v) for k, v in given.items()}
                  for nb, given in (plan_parameters(notebooks, params) if not args.data_only else {}).items()}
    if params.get("out_dir") and len(notebooks) > 1 and not args.data_only:
        ap.error(f"-p out_dir {params['out_dir']} names one folder for {len(notebooks)} notebooks: each would "
                 "replace the last one's results; use --out-root DIR (each notebook's record in a folder of its "
                 "own, DIR/<notebook>/)")
    try:
        limits = notebook_limits(notebooks, args.limit_s)
    except ValueError as exc:
        ap.error(str(exc))
    if args.dry_run:   # it agrees with the run: the same refusals (the gpu plan is drawn up on any machine)
        for nb, given in params_for.items() if profile != "gpu" else ():
            check_destination(nb.stem, profile, given, args.out_root, planning=True)
        if args.tar is not None and not args.data_only:
            check_tar_dest(args.tar.expanduser().resolve(), planning=True)
        check_scratch(make=False)   # a FIFO for FEEDLAB_SCRATCH: the plan refuses it as the run does
        rows = plan(notebooks, profile, params, run_params.for_notebook, args.out_root)   # where the run writes (W5)
        print_plan(rows, profile, machines.usable_cores())
        return 2 if any(isinstance(values, str) for _, values in rows) else 0
    if args.tar is not None and not args.data_only:
        check_tar_dest(args.tar.expanduser().resolve())
    check_workers(params, "-p ")  # a worker count over the cap is refused here, not in a notebook's cell
    for nb, given in params_for.items():  # a folder that is not the runner's own: refused before anything runs
        check_destination(nb.stem, profile, given, args.out_root)
    check_scratch()   # the locks, temporaries and failed runs' folder: a file there is one line, not a cell's
    for name, values in plan(list(params_for), profile, {}, params_for):  # each value as its notebook resolves it
        if isinstance(values, str):
            raise ValueError(f"{name}: {values.removeprefix('cannot resolve: ')}")
    if not args.no_data and not params.get("data_root"):
        prepare_data(profile)  # with data_root, notebooks build only the built-in data they use
    if args.data_only:
        return 0
    if not notebooks:
        print(f"no notebooks found in {NOTEBOOKS_DIR}", file=sys.stderr)
        return 2
    failures = []
    kept: dict[str, Path] = {}  # this invocation's stopped or failed runs, carried in --tar
    t_all = time.perf_counter()  # the notebooks' time (the summary line)
    for i, nb in enumerate(notebooks, 1):
        limit_s = within_deadline(limits[nb], args.deadline_s, time.perf_counter() - t_command)
        if limit_s == 0:
            left = [n.stem for n in notebooks[i - 1:]]
            msg = f"not started, {args.deadline_s:g} s --deadline-s nearly spent: {', '.join(left)}"
            print(f"    {msg}", flush=True)
            failures.append(msg)
            break
        print(f"[{i}/{len(notebooks)}] {nb.stem} (profile {profile}"
              + (f", limit {limit_s:.0f} s" if limit_s else "") + ") ...", flush=True)
        t0 = time.perf_counter()
        try:
            executed = run_notebook(nb, profile, params_for[nb], args.out_root, limit_s=limit_s)
        except RunLocked:
            raise  # one line from cli_errors: nothing of this notebook was touched
        except NotebookStopped as exc:
            print(f"    STOPPED after {time.perf_counter() - t0:.1f} s: {exc}", flush=True)
            failures.append(str(exc))
            if exc.kept is not None:
                kept[nb.stem] = exc.kept
                print(f"    kept (not a result): {exc.kept}", flush=True)
            if args.tar:
                _tar(args.tar, args.out_root, kept)
            if not args.keep_going:
                break
            continue
        except Exception as exc:  # papermill raises PapermillExecutionError with the cell
            msg = kernel_failure(nb.name, exc, getattr(exc, "feedlab_kept", None)) or (  # ended from outside
                f"{nb.name} failed in {_failed_cell(exc)}" if hasattr(exc, "ename") else
                f"{nb.name}: {one_line(exc)}")   # the runner's own failure (a folder, a file): never blamed on a cell
            print(f"    FAILED after {time.perf_counter() - t0:.1f} s: {msg}", flush=True)
            failures.append(msg)
            if getattr(exc, "feedlab_kept", None) is not None:  # this run's folder, never an older one
                kept[nb.stem] = exc.feedlab_kept
            if args.tar:
                _tar(args.tar, args.out_root, kept)
            if not args.keep_going:
                break
            continue
        if args.tar:
            _tar(args.tar, args.out_root, kept)
        print(f"    ok in {time.perf_counter() - t0:.1f} s -> {_shown(executed)}", flush=True)
    total = time.perf_counter() - t_all
    if failures:
        print(f"{len(failures)} notebook(s) failed ({total:.0f} s):", file=sys.stderr)
        for msg in failures:
            print(f"  {msg}", file=sys.stderr)
        return 1
    print(f"all {len(notebooks)} notebook(s) ran in {total:.0f} s (profile {profile})")
    return 0


def _shown(path: Path) -> str:
    """``path`` as the user can open it from here: relative to the current folder where it lies below it, else
    whole (attack53 X06: 'smoke/04_…/….ipynb' named no file from the folder the command was typed in)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def _tar(dest: Path, out_root: Path | None, kept: dict[str, Path]) -> None:
    key = machine_key()
    tar_results(dest, out_root, extra={f"runs/failed/{key}/{name}": path for name, path in kept.items()})


if __name__ == "__main__":
    sys.exit(main())
