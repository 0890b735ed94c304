"""Notebook 08's reading, figure title and recorded payload, from the table
:func:`feedlab.experiments.hdf5_concurrency.tally` makes (re-exported there).

The table has one row per (reader, opened_in_parent, start_method, num_workers) with the
columns epochs, expected, right, wrong, missing, duplicated, raised (epochs that raised),
error (the first one, "" if none) and all_right. The payload's keys are read by the claims
ledger (:mod:`feedlab.report.claims`): ``settings`` (``reader/start_method/w<workers>`` ->
right, wrong, missing, expected, raised, error), ``versions``, ``per_worker_all_right`` and
``parent_fork_corrupted``; do not rename them.
"""

from __future__ import annotations

from feedlab.experiments._finding_titles import wrong_samples_title

NAIVE = "lmdb_reopen_naive"


def parts(tab) -> dict:
    """The slices the reading is made of: ``fork`` and ``spawn`` (the rows of each start method),
    ``fork_parent`` (fork rows of a handle opened in the parent), ``corrupt`` (those of them with a
    wrong, missing or raised sample),
    ``per_worker`` (handles opened per worker, the fix; the naive LMDB reopen excluded) and
    ``naive`` (the per-worker LMDB reopen that leaves the inherited env open)."""
    fork = tab[tab.start_method == "fork"]
    spawn = tab[tab.start_method == "spawn"]
    fork_parent = fork[fork.opened_in_parent.astype(bool)]
    corrupt = fork_parent[(fork_parent.wrong > 0) | (fork_parent.missing > 0) | (fork_parent.raised > 0)]
    per_worker = tab[~tab.opened_in_parent.astype(bool) & (tab.reader != NAIVE)]
    naive = tab[tab.reader == NAIVE]
    return {"fork": fork, "spawn": spawn, "fork_parent": fork_parent, "corrupt": corrupt,
            "per_worker": per_worker, "naive": naive}


def state(row) -> str:
    """One setting's outcome: "every sample right", or its wrong and missing counts of the
    expected ones, and the error if an epoch raised."""
    if row.all_right:
        return "every sample right"
    return (f"{int(row.wrong)} wrong, {int(row.missing)} missing of {int(row.expected)}"
            + (f"; raised {row.error}" if row.raised else ""))


def readings(tab, versions: dict) -> list[str]:
    """The lines of the notebook's reading: the library versions; under fork, whether the
    parent-opened handles returned every sample right (the write-up's corruption did NOT
    reproduce) or which settings failed (said only when such a setting ran); how many per-worker settings were all right; the
    naive LMDB reopen per start method; spawn with a parent-opened handle (or that spawn did
    not run); then one line per setting."""
    v = versions
    lines = [f"HDF5 {v['hdf5']} through h5py {v['h5py']}; py-lmdb {v['lmdb_py']} (LMDB {v['lmdb_lib']})."]
    if tab is None or tab.empty:
        return lines + ["No setting ran: nothing to read."]
    p = parts(tab)
    spawn, corrupt, per_worker = p["spawn"], p["corrupt"], p["per_worker"]
    if len(p["fork_parent"]):
        if corrupt.empty:
            lines.append("Under fork, handles opened in the parent returned every sample right here: the write-up's "
                         "corruption did NOT reproduce with this h5py/HDF5 (and py-lmdb) version.")
        else:
            lines.append(f"Under fork, {len(corrupt)} parent-opened setting(s) returned wrong data or failed: "
                         + ", ".join(f"{r.reader}/{r.num_workers}w" for _, r in corrupt.iterrows()))
    lines.append(f"Per-worker opening (the fix): {int(per_worker.all_right.sum())} of {len(per_worker)} settings "
                 f"returned every sample right.")
    for method, part in p["naive"].groupby("start_method"):
        bad = part[~part.all_right.astype(bool)]
        lines.append(f"A per-worker LMDB reopen that leaves the inherited env open, {method}: "
                     + ("every sample right" if bad.empty else
                        f"{int(bad.missing.sum())} of {int(bad.expected.sum())} samples missing over "
                        f"{len(bad)} setting(s); {bad.error.iloc[0]}"))
    for reader, part in spawn[spawn.opened_in_parent.astype(bool)].groupby("reader"):
        errors = sorted(set(e for e in part.error if e))
        lines.append(f"spawn + {reader}: " + ("every sample right" if part.all_right.all() else "; ".join(errors)))
    if spawn.empty:
        lines.append("spawn workers were not started in this profile; the pickle check above names what spawn "
                     "would raise.")
    lines.append("Per setting:")
    for _, r in tab.iterrows():
        lines.append(f"  {r.reader:24s} {r.start_method:6s} {r.num_workers} workers, {r.epochs} epochs: {state(r)}")
    return lines


def title(tab, epochs: int, samples: int, versions: dict) -> str:
    """The figure's title: what the bars show (:func:`~feedlab.experiments._finding_titles.wrong_samples_title`),
    then how much was read and with which library versions."""
    v = versions
    return (wrong_samples_title(tab) + f"\n{epochs} epoch(s) × {samples} samples per setting; "
            f"h5py {v['h5py']} / HDF5 {v['hdf5']}, py-lmdb {v['lmdb_py']} (a count, not a timing: no spread)")


def settings(tab) -> dict:
    """``reader/start_method/w<workers>`` -> right, wrong, missing, expected, raised (plain ints)
    and error (a string, "" if none)."""
    if tab is None or tab.empty:
        return {}
    return {f"{r.reader}/{r.start_method}/w{int(r.num_workers)}": {
        "right": int(r.right), "wrong": int(r.wrong), "missing": int(r.missing),
        "expected": int(r.expected), "raised": int(r.raised), "error": str(r.error or "")}
        for _, r in tab.iterrows()}


def payload(P, tab, versions: dict, pickled: dict, verify: bool) -> dict:
    """What notebook 08 records and the claims ledger judges. ``per_worker_all_right`` is None when
    no per-worker setting ran, ``parent_fork_corrupted`` None when no parent-opened handle ran under fork."""
    empty = tab is None or tab.empty
    p = None if empty else parts(tab)
    return {"notebook": "08_hdf5_concurrency", "profile": P.profile, "samples": P.samples,
            "epochs": P.epochs, "worker_counts": list(P.worker_counts), "readers": list(P.readers),
            "start_methods": list(P.start_methods), "pickle_for_spawn": dict(pickled),
            "versions": {k: v for k, v in versions.items() if k != "h5py_info"},
            "settings": settings(tab), "verify_checksums": bool(verify),  # did the readers check the checksums?
            "per_worker_all_right": bool(p["per_worker"].all_right.all()) if p and len(p["per_worker"]) else None,
            "parent_fork_corrupted": bool(len(p["corrupt"])) if p and len(p["fork_parent"]) else None}


__all__ = ["parts", "state", "readings", "title", "settings", "payload"]
