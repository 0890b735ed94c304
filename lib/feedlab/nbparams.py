"""The parameters a notebook accepts: the names assigned in its cell tagged ``parameters``.

``feedlab.run -p KEY VALUE`` passes ``KEY`` only to the notebooks that declare it,
and refuses a key no selected notebook declares (naming the ones they do), so a
``-p`` key can never be code injected into a notebook.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from feedlab.files import load_json


def notebook_json(path) -> dict:
    """A notebook's JSON object, read with :func:`feedlab.files.load_json` (a broken merge, a FIFO, JSON nested
    too deeply: one line naming the file, attack57 J20); a value that is not an object is named too."""
    nb = load_json(path, "notebook")
    if not isinstance(nb, dict):
        raise ValueError(f"{path}: the notebook holds {type(nb).__name__}, not a notebook object; check it out again")
    return nb


def parameters_cell_problem(path: str | os.PathLike) -> str:
    """"" where the notebook has exactly one code cell tagged ``parameters`` (the house rule papermill needs to
    inject a run's values); otherwise one line naming the file and the fix (attack58 W4: a notebook without one
    passed the dry run, then failed with papermill's "Passed unknown parameter" lines)."""
    nb = notebook_json(path)
    if type(nb.get("nbformat")) is not int or nb.get("nbformat") != 4:   # attack60 N1: "4", a string
        return (f"{path}: its nbformat is {nb.get('nbformat')!r}, not the number 4 papermill runs; restore it "
                f"(git checkout -- {path})")
    minor, meta = nb.get("nbformat_minor", 0), nb.get("metadata", {})
    if type(minor) is not int or minor < 0 or not isinstance(meta, dict):   # attack61 N5: metadata [], minor -1
        field = "metadata" if not isinstance(meta, dict) else "nbformat_minor"
        return (f"{path}: its {field} is {nb.get(field)!r}, not what papermill reads (an object; a number >= 0); "
                f"restore it (git checkout -- {path})")
    tagged = [c for c in nb.get("cells") or [] if isinstance(c, dict) and c.get("cell_type") == "code"
              and "parameters" in ((c.get("metadata") or {}).get("tags") or [])]
    if len(tagged) == 1:
        return ""
    what, fix = (("no code cell tagged parameters", "tag the cell of its parameters") if not tagged else
                 (f"{len(tagged)} code cells tagged parameters", "untag all but the first"))
    return (f"{path}: {what} (a notebook has exactly one, where a run's values go): restore it "
            f"(git checkout -- {path}), or {fix}")


def _parameters_body(path, cell: dict) -> list:
    """The parsed statements of a notebook's ``parameters`` cell; a cell that is not Python (a half-edited
    ``batches = (``) is one ``ValueError`` naming the file and the line (attack60 N3: a 28-line traceback)."""
    src = cell.get("source", "")
    if isinstance(src, list) and all(isinstance(x, str) for x in src):
        src = "".join(src)
    if not isinstance(src, str):   # attack61 N3: a list holding a null was a TypeError traceback
        raise ValueError(f"{path}: its parameters cell's source is not text; restore it (git checkout -- {path})")
    try:
        return ast.parse(src).body
    except SyntaxError as exc:
        raise ValueError(f"{path}: its parameters cell is not valid Python (line {exc.lineno}: {exc.msg}); fix the "
                         f"cell, or restore it (git checkout -- {path})") from None


def notebook_parameters(path: str | os.PathLike) -> dict:
    """``{name: default}`` for the names assigned at top level in the notebook's ``parameters``
    cell, in order (``x = 1`` and ``x: int = None``); a default that is not a literal is kept
    as its source text."""
    nb = notebook_json(path)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code" and "parameters" in (cell.get("metadata", {}).get("tags") or []):
            out: dict = {}
            for node in _parameters_body(path, cell):
                if isinstance(node, ast.Assign):
                    targets, value = node.targets, node.value
                elif isinstance(node, ast.AnnAssign):
                    targets, value = [node.target], node.value
                else:
                    continue
                for t in targets:
                    if isinstance(t, ast.Name) and t.id not in out:
                        try:
                            out[t.id] = ast.literal_eval(value) if value is not None else None
                        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                            out[t.id] = ast.unparse(value)   # attack61 N4: {[1]: 2} is a TypeError
            return out
    return {}


def parameter_choices(path: str | os.PathLike) -> dict[str, list[str]]:
    """``{name: [choice, ...]}`` for the list parameters whose line in the ``parameters`` cell says
    ``# list from: a, b, c`` (up to a ``;`` or ``(``): the runner refuses any other item before a cell runs."""
    nb = notebook_json(path)
    out: dict[str, list[str]] = {}
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code" and "parameters" in (cell.get("metadata", {}).get("tags") or []):
            src = cell.get("source", "")
            for line in ("".join(src) if isinstance(src, list) else src).splitlines():
                m = re.match(r"\s*(\w+)\s*[:=][^#]*#\s*list from:\s*([^;(]+)", line)
                if m:
                    out[m.group(1)] = [c.strip() for c in m.group(2).split(",") if c.strip()]
    return out


def parameter_types(path: str | os.PathLike) -> dict[str, str]:
    """``{name: type}`` for the names of the notebook's ``parameters`` cell, as papermill infers them
    (``papermill.inspect_notebook``'s ``inferred_type_name``): the annotation's text (``int``,
    ``list[int]``, ``str``), ``"None"`` where a name has none. Read here, without importing papermill
    (seconds on a loaded machine): the runner types each ``-p`` value by it (:mod:`feedlab.run_params`)."""
    nb = notebook_json(path)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code" and "parameters" in (cell.get("metadata", {}).get("tags") or []):
            out: dict[str, str] = {}
            for node in _parameters_body(path, cell):
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    out.setdefault(node.target.id, ast.unparse(node.annotation))
                elif isinstance(node, ast.Assign):
                    for t in node.targets:
                        if isinstance(t, ast.Name):
                            out.setdefault(t.id, "None")
            return out
    return {}


def route_params(params: dict, notebooks: list[Path]) -> dict[Path, dict]:
    """``{notebook: the params it declares}``. Raises ``ValueError`` naming a key that is
    not an identifier, or that none of ``notebooks`` declares, with the allowed names."""
    declared = {nb: notebook_parameters(nb) for nb in notebooks}
    allowed = sorted({n for names in declared.values() for n in names})
    for key in params:
        if not str(key).isidentifier():
            raise ValueError(f"-p {key!r}: not a parameter name; allowed: {', '.join(allowed)}")
        if key not in allowed:
            which = ", ".join(nb.stem for nb in notebooks) if len(notebooks) <= 3 else f"{len(notebooks)} notebooks"
            raise ValueError(f"-p {key}: not a parameter of {which}; allowed: {', '.join(allowed)}")
    return {nb: {k: v for k, v in params.items() if k in declared[nb] or k == "profile"} for nb in notebooks}
