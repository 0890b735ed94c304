"""Notebook 16's heuristics (PyTorch's default, workers = cores, workers = cores − 1) against the grid's best, by the
one judge on the two grid rows (:func:`feedlab.doctor.trials.judge`: windows, passes, precision, load): "fails"
only where the judge says missed, "within" only where it says met; every other reading is named with its reason
(audit54 N6: "fails … compute (0.87)" stood on a 2-pass imprecise start the target line one row up refused).
The notebook's reading (``experiments._tune_readings``) and the copy of a recorded reading (``report.targets``) both
print :func:`heuristic_lines`."""

from __future__ import annotations

import dataclasses
import re

from feedlab import like_for_like as lfl
from feedlab.doctor import trials as TR

LABELS = {"tuner": "the tuner's pick", "start": "the user's start", "pytorch_default": "PyTorch's default (0 workers)",
          "cores": "workers = cores", "cores_minus_1": "workers = cores − 1"}
JUDGED = ("pytorch_default", "cores", "cores_minus_1")    # the heuristics judged against the best
_FIELDS = {f.name for f in dataclasses.fields(TR.Trial)}
_LINE = re.compile(r"^(?P<label>.+?) (?:fails where it gives under|is within) (?P<share>[\d.]+) of the best")


def _trial(row: dict) -> TR.Trial:
    return TR.Trial(**{k: v for k, v in row.items() if k in _FIELDS})


def share_verdict(record: dict, h: str, share: float) -> lfl.Verdict:
    """Heuristic ``h``'s grid setting over the grid's best, against ``share``, by the one judge; a heuristic that
    is the best is met by identity only where its rate stands by the precision rule (:func:`lfl.reread`)."""
    grid = {g.get("name"): g for g in record.get("grid") or []}
    name, best = (record.get("heuristic_names") or {}).get(h), record.get("best")
    if name not in grid or best not in grid:
        return lfl.Verdict(lfl.NOT_FAIR, "the grid rows of both sides are not in the record", target=share)
    t = _trial(grid[name])
    if name == best:
        return lfl.reread(lfl.Verdict(lfl.MET, "it is the best", 1.0, 1.0, 1.0, share), t.side(), t.side())
    return TR.judge(_trial(grid[best]), t, target=share)


def heuristic_line(records: list[dict], h: str, share: float) -> str:
    """One heuristic over the scenarios: where it fails (missed), and where it is not judged (why), by the judge."""
    fails, unread, within = [], [], 0
    for r in records:
        point = (r.get("shares") or {}).get(h)
        if point is None:
            continue
        v = share_verdict(r, h, share)
        if v.word == lfl.MISSED:
            fails.append(f"{r['key']} ({point:.2f})")
        elif v.word == lfl.MET:
            within += 1
        else:
            unread.append(f"{r['key']} ({point:.2f}: {v.word}: {v.why.split('; ')[0]})" if v.why else
                          f"{r['key']} ({point:.2f}: {v.word})")
    label = LABELS[h]
    if fails:
        line = f"{label} fails where it gives under {share:.2f} of the best: {', '.join(fails)}"
    elif not within:
        return f"{label} is not judged against {share:.2f} of the best: {'; '.join(unread)}"
    elif unread:
        line = f"{label} is within {share:.2f} of the best in {within} scenario(s) judged"
    else:
        line = f"{label} is within {share:.2f} of the best in every scenario measured"
    return line + (f"; not judged against {share:.2f}: {'; '.join(unread)}" if unread else "")


def heuristic_lines(records: list[dict], share: float) -> list[str]:
    """Every judged heuristic's line (:func:`heuristic_line`), then the tuner's pick over "cores − 1" as measured
    (a ratio of the grid's rates, no verdict)."""
    out = [heuristic_line(records, h, share) for h in JUDGED]
    beats = [(r["key"], (r.get("shares") or {}).get("tuner"), (r.get("shares") or {}).get("cores_minus_1"))
             for r in records]
    beats = [f"{k} ×{t / c:.2f}" for k, t, c in beats if t and c and t > c]
    if beats:
        out.append("The tuner's pick over \"cores − 1\" (the grid's rates): " + ", ".join(beats))
    return out


def recorded_line(line: str, run) -> str:
    """16's recorded heuristic line ("… fails where it gives under 0.90 of the best: …") printed again from the
    run's records by :func:`heuristic_line`; any other line as recorded."""
    m = _LINE.match(line)
    h = next((k for k in JUDGED if LABELS[k] == (m.group("label") if m else None)), None)
    records = (run.payload.get("scenarios") if run is not None else None) or []
    if h is None or not records:
        return line
    return heuristic_line(records, h, float(m.group("share")))
