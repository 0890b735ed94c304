"""The claims ledger: every write-up claim, tested by a notebook's results.

``CLAIMS`` is the one registry (see :mod:`feedlab.report.claims.core` for a claim's
fields). A notebook calls :func:`report` on its record-results payload: it judges
that notebook's claims on this run, prints one line per claim (verdict, our
number, theirs, the tolerance; "not tested fairly here" with the precondition that
failed; "smoke: not judged" on a smoke run; a busy run's caveat) and adds ``verdicts``
to the payload.
``python -m feedlab.report.readme`` regenerates ``docs/CLAIMS.md`` from the committed
results of every machine (:mod:`feedlab.report.claims.ledger`).
"""

from __future__ import annotations

from pathlib import Path

from feedlab.report.claims import w000, w001, w002, w003, w004
from feedlab.report.claims.core import (
    JUDGED,
    NOT_FAIR,
    NOT_REPRODUCED,
    NOT_RUN,
    NOT_TESTABLE,
    PARTLY,
    REPRODUCED,
    SMOKE,
    STATUSES,
    Claim,
    NoData,
    Outcome,
    Precondition,
    Run,
    Unfair,
    Verdict,
)
from feedlab.report.claims.fair import judge

CLAIMS: tuple[Claim, ...] = w000.CLAIMS + w001.CLAIMS + w002.CLAIMS + w003.CLAIMS + w004.CLAIMS
BY_ID = {c.id: c for c in CLAIMS}
if len(BY_ID) != len(CLAIMS):  # pragma: no cover - a registry edit gone wrong
    raise RuntimeError("duplicate claim ids in feedlab.report.claims")


def claims_for(notebook: str) -> tuple[Claim, ...]:
    return tuple(c for c in CLAIMS if c.notebook == notebook)


def verdicts(notebook: str, run: Run) -> list[Verdict]:
    return [judge(c, run) for c in claims_for(notebook)]


def format_verdict(claim: Claim, v: Verdict) -> str:
    """One line per verdict. "not tested fairly here" leads with its reason and labels the
    number measured as no verdict; a busy run's caveat closes the line."""
    if v.status == NOT_FAIR:
        line = f"[{v.status}: {v.note}] {claim.id}: {claim.text} Theirs: {claim.theirs}."
        if v.ours and v.ours != "—":
            line += f" Measured, not judged: {v.ours}."
    else:
        line = f"[{v.status}] {claim.id}: {claim.text} Theirs: {claim.theirs}. Ours: {v.ours}."
        if v.note:
            line += f" ({v.note})"
        if v.status in JUDGED:
            line += f" Tolerance: {claim.tolerance}."
    if v.caveat:
        line += f" Caveat: {v.caveat}."
    return line


def report(notebook: str, payload: dict, out_dir: str | Path | None = None,
           fingerprint: dict | None = None) -> list[Verdict]:
    """Judge ``notebook``'s claims on this run, print them, and add ``payload['verdicts']``.

    ``out_dir`` is where the run wrote ``results.csv`` and ``fingerprint.json``.
    """
    run = Run(payload, out_dir, fingerprint)
    vs = verdicts(notebook, run)
    if vs:
        print(f"Claims of the write-ups tested here ({len(vs)}; docs/CLAIMS.md holds every machine's):")
        if payload.get("profile") == "smoke":
            print("Smoke profile: tiny sizes that check the code runs; these verdicts are not findings.")
    for v in vs:
        print(format_verdict(BY_ID[v.claim], v))
    payload["verdicts"] = {v.claim: v.as_dict() for v in vs}
    return vs


__all__ = ["CLAIMS", "BY_ID", "STATUSES", "JUDGED", "REPRODUCED", "PARTLY", "NOT_REPRODUCED", "NOT_FAIR",
           "NOT_RUN", "NOT_TESTABLE", "SMOKE", "Claim", "NoData", "Outcome", "Precondition", "Run", "Unfair", "Verdict",
           "claims_for", "format_verdict", "judge", "report", "verdicts"]
