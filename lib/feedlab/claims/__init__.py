"""The claims ledger: every write-up claim, tested by a notebook's results.

``CLAIMS`` is the one registry (see :mod:`feedlab.claims.core` for a claim's
fields). A notebook calls :func:`report` on its record-results payload: it judges
that notebook's claims on this run, prints one line per claim (verdict, our
number, theirs, the tolerance) and adds ``verdicts`` to the payload.
``python -m feedlab.readme`` regenerates ``docs/CLAIMS.md`` from the committed
results of every machine (:mod:`feedlab.claims.ledger`).
"""

from __future__ import annotations

from pathlib import Path

from feedlab.claims import w000, w001, w002, w003, w004
from feedlab.claims.core import (
    NOT_REPRODUCED,
    NOT_TESTABLE,
    PARTLY,
    REPRODUCED,
    STATUSES,
    Claim,
    NoData,
    Outcome,
    Run,
    Verdict,
    judge,
)

CLAIMS: tuple[Claim, ...] = w000.CLAIMS + w001.CLAIMS + w002.CLAIMS + w003.CLAIMS + w004.CLAIMS
BY_ID = {c.id: c for c in CLAIMS}
if len(BY_ID) != len(CLAIMS):  # pragma: no cover - a registry edit gone wrong
    raise RuntimeError("duplicate claim ids in feedlab.claims")


def claims_for(notebook: str) -> tuple[Claim, ...]:
    return tuple(c for c in CLAIMS if c.notebook == notebook)


def verdicts(notebook: str, run: Run) -> list[Verdict]:
    return [judge(c, run) for c in claims_for(notebook)]


def format_verdict(claim: Claim, v: Verdict) -> str:
    line = f"[{v.status}] {claim.id}: {claim.text} Theirs: {claim.theirs}. Ours: {v.ours}."
    if v.note:
        line += f" ({v.note})"
    if v.status != NOT_TESTABLE:
        line += f" Tolerance: {claim.tolerance}."
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


__all__ = ["CLAIMS", "BY_ID", "STATUSES", "REPRODUCED", "PARTLY", "NOT_REPRODUCED", "NOT_TESTABLE",
           "Claim", "NoData", "Outcome", "Run", "Verdict", "claims_for", "judge", "report", "verdicts"]
