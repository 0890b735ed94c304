"""docs/ARCHITECTURE.md stays honest: it names every module, and every notebook is run by a test."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIB = REPO / "lib" / "feedlab"


def _modules() -> list[str]:
    out = []
    for p in sorted(LIB.rglob("*.py")):
        rel = p.relative_to(LIB).with_suffix("")
        parts = [x for x in rel.parts if x != "__init__"]
        if parts:
            out.append(".".join(parts))
    return sorted(set(out))


def test_every_module_is_named_in_architecture_md():
    doc = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"`([a-z_][a-z0-9_.]*)`", doc))
    missing = [m for m in _modules() if m not in named]
    assert not missing, f"docs/ARCHITECTURE.md does not name: {', '.join(missing)}"


def test_every_notebook_has_a_papermill_test():
    tests = "\n".join(p.read_text() for p in (REPO / "tests" / "notebooks").glob("test_*.py"))
    missing = [nb.stem for nb in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")) if nb.stem not in tests]
    assert not missing, f"no test in tests/notebooks runs: {', '.join(missing)}"


def test_no_module_over_about_400_lines_in_the_doctor_and_pipeline():
    for p in [LIB / "pipeline.py", *sorted((LIB / "doctor").glob("*.py"))]:
        n = len(p.read_text().splitlines())
        assert n <= 420, f"{p.relative_to(REPO)} has {n} lines"


def test_nothing_outside_formats_names_a_private_store_member():
    bad = re.compile(r"\._read\(|_env_for|\._decode_into|\._environment\(")
    for p in LIB.rglob("*.py"):
        if "formats" in p.relative_to(LIB).parts:
            continue
        assert not bad.search(p.read_text()), p.relative_to(REPO)
