"""doctor.report_fields: the report typed in one place. A report's JSON read back (``Report.from_dict``) gives
the same JSON byte for byte (``as_dict``); every key the doctor sets on a report is a field of ``Report``.

The fixtures are real reports, printed by ``--json``'s encoder: ``doctor_report_data.json`` from
``diagnose(doc, spec)`` on test_doctor's fake store (one worker, a slow model: the loop's verdict set),
``doctor_report_user.json`` from ``diagnose_loader`` on a small DataLoader with a step (its batches, the
loop, the step-side trials and the other load set after the build)."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import fields
from pathlib import Path

import pytest

from feedlab.doctor.report import json_default
from feedlab.doctor.report_fields import COMMON_KEYS, LATER_KEYS, PREDICTION_KEYS, REPORT_KEYS, Report
from feedlab.errors import strict_json

FIXTURES = Path(__file__).parent / "fixtures"
REAL = ("doctor_report_data.json", "doctor_report_user.json")
DOCTOR = Path(__file__).parents[2] / "lib" / "feedlab" / "doctor"


def _text(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.mark.parametrize("name", REAL)
def test_a_real_report_read_back_gives_its_json_byte_for_byte(name):
    text = _text(name)
    d = json.loads(text)
    rep = Report.from_dict(d)
    assert strict_json(rep.as_dict(), default=json_default) + "\n" == text
    again = Report.from_dict(rep.as_dict())
    assert strict_json(again.as_dict(), default=json_default) + "\n" == text
    assert rep.kind == d["kind"] and rep.verdict == d["verdict"] and rep.loop == d["loop"]
    assert rep.bound_stage == d["bound_stage"] and rep.stages == d["stages"]
    assert strict_json(rep, default=json_default) + "\n" == text   # --json's encoder writes a Report as its dict


def test_a_later_key_set_to_none_and_a_key_no_field_names_come_back_in_their_order():
    d = json.loads(_text("doctor_report_user.json"))
    d = {**d, "tried": None, "from_a_newer_doctor": {"x": 1}, "script": {"verdict": "data-bound"}}
    out = Report.from_dict(d).as_dict()
    assert list(out) == list(d) and out == d                    # nothing read back is lost, nor moved
    assert Report.from_dict(d).has("tried") and not Report.from_dict(d).has("what_if")


def test_a_later_field_set_on_a_built_report_reaches_its_json_in_the_order_set():
    rep = Report.from_dict(json.loads(_text("doctor_report_data.json")))
    rep.tried = []
    rep.verdict_note = None                                     # set again, to None: still a key, in its place
    rep.step_changes = [{"change": "threads"}]
    rep.advice_start = None                                     # set to None: a key of the JSON all the same
    rep.loop = dict(rep.loop, share=0.5)                        # set again: keeps its place
    d = rep.as_dict()
    assert [k for k in d if k in LATER_KEYS] == ["predicted_verdict", "loop", "verdict_note", "tried", "step_changes",
                                                   "advice_start"]
    assert d["loop"]["share"] == 0.5 and d["verdict_note"] is None and d["advice_start"] is None


def test_a_hand_made_dict_reads_with_what_it_lacks_empty():
    rep = Report.of({"measured_samples_per_s": 10.0})
    assert (rep.stages, rep.advice, rep.notes, rep.end_to_end) == ([], [], [], [])
    assert rep.verdict is None and rep.tried is None and rep.calibration is None
    assert Report.of(rep) is rep


def test_every_key_of_the_json_is_a_field_of_report_in_one_place():
    """Adding a field is one place: each head key of REPORT_KEYS is a field (or the prediction's, or a kind's
    own head key, read back into ``extra``), each later key is a field, and every field is one of them."""
    names = {f.name for f in fields(Report)} - {"extra", "rest", "tail_order", "prediction"}
    assert names == set(COMMON_KEYS) | set(LATER_KEYS)
    for kind, keys in REPORT_KEYS.items():
        assert len(set(keys)) == len(keys), kind
        assert set(COMMON_KEYS) | set(PREDICTION_KEYS) <= set(keys), kind
        full = {k: f"<{k}>" for k in keys} | {"kind": kind} | {k: f"<{k}>" for k in LATER_KEYS}
        rep = Report.from_dict(full)
        assert rep.rest == {}, rep.rest                           # every key landed in its field
        assert list(rep.as_dict()) == list(full) and rep.as_dict() == full
        for k in LATER_KEYS:
            assert getattr(rep, k) == f"<{k}>"


def _keys_set_on_reports() -> set[str]:
    """Every ``rep["key"] = …`` / ``report["key"] = …`` (a report's dict), ``rep.key = …`` (a Report) and
    ``put(rep, "key", …)`` (either) in the doctor's modules."""
    found = set()
    for p in DOCTOR.glob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "put"
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)):
                found.add(node.args[1].value)
            for t in (node.targets if isinstance(node, ast.Assign) else []):
                if not (isinstance(t, (ast.Subscript, ast.Attribute)) and isinstance(t.value, ast.Name)
                        and t.value.id in ("rep", "report")):
                    continue
                if isinstance(t, ast.Attribute):
                    found.add(t.attr)
                elif isinstance(t.slice, ast.Constant):
                    found.add(t.slice.value)
    return found


def test_every_key_the_doctor_sets_on_a_report_is_a_field():
    """A key set on a report after its build (``rep["tried"] = …``) that no field names fails here: add it
    to ``Report`` (and ``LATER_KEYS``) first, the one place the report's fields are listed."""
    known = set(COMMON_KEYS) | set(PREDICTION_KEYS) | set(LATER_KEYS) | {k for v in REPORT_KEYS.values() for k in v}
    found = _keys_set_on_reports()
    assert {"tried", "loop", "verdict", "script", "resize_ahead", "step_changes"} <= found   # the scan sees the writers
    assert found <= known, sorted(found - known)
    assert re.fullmatch(r"[a-z_]+", "".join(sorted(found)))


def test_a_report_refuses_a_field_it_does_not_declare():
    rep = Report.from_dict(json.loads(_text("doctor_report_user.json")))
    with pytest.raises(AttributeError, match="no field 'step_prices'.*report_fields"):
        rep.step_prices = "as it ran"                           # a typo, or a field not added in its one place
    rep.verdict = "data-bound"                                  # the prediction's verdict: the run's one verdict
    assert rep.as_dict()["verdict"] == "data-bound" and rep.prediction["verdict"] == "data-bound"


def test_the_readers_print_the_same_from_the_json_and_from_the_typed_report():
    """render, render_user, the answer, the verdict and the what-if's answer take the typed report; a saved
    report's JSON read back prints what the report printed."""
    from feedlab.doctor.answer import answer_lines, render_user, top_changes
    from feedlab.doctor.report import render
    from feedlab.doctor.verdict import verdict_of_report
    from feedlab.doctor.whatif import answer as whatif_answer

    for name, show in (("doctor_report_data.json", render), ("doctor_report_user.json", render_user)):
        d = json.loads(_text(name))
        rep = Report.from_dict(d)
        assert show(d) == show(rep) and "VERDICT" in show(rep)
        assert answer_lines(d) == answer_lines(rep)
        assert verdict_of_report(d) == verdict_of_report(rep) and verdict_of_report(rep).verdict == d["verdict"]
        assert top_changes(d) == top_changes(rep)
        assert whatif_answer([], d) == whatif_answer([], rep)
