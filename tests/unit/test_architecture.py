"""docs/ARCHITECTURE.md stays honest: it names every module, and every notebook is run by a test."""

import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIB = REPO / "lib" / "feedlab"


def _modules() -> list[str]:
    """Every module under lib/feedlab, dotted from ``feedlab`` (a package's ``__init__`` is the package)."""
    out = []
    for p in sorted(LIB.rglob("*.py")):
        rel = p.relative_to(LIB).with_suffix("")
        parts = [x for x in rel.parts if x != "__init__"]
        if parts:
            out.append(".".join(parts))
    return sorted(set(out))


def _doc() -> str:
    return (REPO / "docs" / "ARCHITECTURE.md").read_text()


def _levels(doc: str) -> dict[str, int]:
    """The level table: ``| 0 | `errors` | ...`` rows -> {"errors": 0}."""
    return {m: int(lv) for lv, m in re.findall(r"^\|\s*(\d+)\s*\|\s*`([a-z_][a-z0-9_]*)`\s*\|", doc, re.M)}


def _unnamed(doc: str, modules: list[str]) -> list[str]:
    """A top-level module (or package) must have its own row in the level table; a module inside a
    package must be named by its dotted name (`doctor.predict`), never by a bare word that happens
    to appear in backticks."""
    table = _levels(doc)
    dotted = set(re.findall(r"`([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+)`", doc))
    return [m for m in modules if (m not in table if "." not in m else m not in dotted)]


def test_every_module_is_named_in_architecture_md():
    missing = _unnamed(_doc(), _modules())
    assert not missing, f"docs/ARCHITECTURE.md does not name: {', '.join(missing)}"


def test_a_module_named_only_by_coincidence_is_not_named():
    doc = "| 0 | `errors` | x |\n`doctor.predict` and a bare `split`, `user` in prose; `formats.png`\n"
    assert _unnamed(doc, ["errors", "doctor.predict", "doctor.split", "user", "formats.png"]) == [
        "doctor.split", "user"]


DATA_PREP = REPO / "data_prep"


def _feedlab_imports(path: Path) -> set[str]:
    """The top-level feedlab modules ``path`` imports (lazy imports inside functions included), and
    ``data_prep`` where it imports that (the second top-level package, a room of its own)."""
    out = set()
    if path.is_relative_to(DATA_PREP):
        pkg = "data_prep"
    else:
        pkg = path.relative_to(LIB).parts[0] if len(path.relative_to(LIB).parts) > 1 else None
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: inside its own package
                names = [pkg] if pkg else []
            elif node.module == "feedlab":
                names = [f"feedlab.{a.name}" for a in node.names]
            else:
                names = [node.module or ""]
        else:
            continue
        for n in names:
            if n and n.startswith("feedlab."):
                out.add(n.split(".")[1])
            elif n and (n == "data_prep" or n.startswith("data_prep.")):
                out.add("data_prep")
            elif n and pkg and n == pkg:
                out.add(n)
    return out


def _sources() -> list[tuple[Path, str]]:
    """Every module of feedlab and of data_prep, with the room it belongs to."""
    out = [(p, p.relative_to(LIB).parts[0].removesuffix(".py")) for p in sorted(LIB.rglob("*.py"))]
    return out + [(p, "data_prep") for p in sorted(DATA_PREP.rglob("*.py"))]


def test_every_import_is_from_the_same_level_or_a_lower_one():
    levels = _levels(_doc())
    bad = []
    for p, own in _sources():
        rel = p.relative_to(REPO)
        if own == "__init__" or own not in levels:
            continue  # the package root; an unnamed module fails the test above
        for dep in sorted(_feedlab_imports(p)):
            if dep in levels and levels[dep] > levels[own]:
                bad.append(f"{rel} (level {levels[own]}) imports {dep} (level {levels[dep]})")
    assert not bad, "docs/ARCHITECTURE.md's levels are broken:\n" + "\n".join(bad)


def test_data_prep_has_a_level_and_keeps_it():
    """data_prep is a room too: named in the level table, its imports of feedlab checked like any other."""
    assert "data_prep" in _levels(_doc())
    assert "scale" not in set().union(*(_feedlab_imports(p) for p, own in _sources() if own == "data_prep"))


def test_every_notebook_has_a_papermill_test():
    tests = "\n".join(p.read_text() for p in (REPO / "tests" / "notebooks").glob("test_*.py"))
    missing = [nb.stem for nb in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")) if nb.stem not in tests]
    assert not missing, f"no test in tests/notebooks runs: {', '.join(missing)}"


def test_no_module_over_about_400_lines_in_the_doctor_and_pipeline():
    for p in [*sorted((LIB / "pipeline").glob("*.py")), *sorted((LIB / "doctor").glob("*.py"))]:
        n = len(p.read_text().splitlines())
        assert n <= 420, f"{p.relative_to(REPO)} has {n} lines"


# modules still over the cap, each with the most lines it may have until it is split (shrink only)
OVER_THE_CAP: dict[str, int] = {}


def test_no_module_in_lib_over_about_450_lines():
    over = []
    for p in sorted(LIB.rglob("*.py")):
        rel = str(p.relative_to(LIB))
        n = len(p.read_text().splitlines())
        if n > OVER_THE_CAP.get(rel, 450):
            over.append(f"{rel}: {n} lines")
    assert not over, "split along a concern, re-exporting (as formats._io, decode_support): " + "; ".join(over)


def test_nothing_outside_formats_names_a_private_store_member():
    bad = re.compile(r"\._read\(|_env_for|\._decode_into|\._environment\(|_open_env")
    for p in LIB.rglob("*.py"):
        if "formats" in p.relative_to(LIB).parts:
            continue
        assert not bad.search(p.read_text()), p.relative_to(REPO)


def _rooms_graph() -> dict[str, set[str]]:
    """Room → rooms it imports: a room is a top-level module or package of feedlab (lazy imports
    included; a package's own modules are one room)."""
    graph: dict[str, set[str]] = {}
    for p, own in _sources():
        if own == "__init__":
            continue
        graph.setdefault(own, set()).update(d for d in _feedlab_imports(p) if d != own)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more rooms (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_a_circle_between_rooms_is_found():
    g = {"paths": {"machines"}, "machines": {"fingerprint"}, "fingerprint": {"monitor"},
         "monitor": {"machines"}, "errors": set()}
    assert _circles(g) == [["fingerprint", "machines", "monitor"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_circle_between_rooms_even_on_one_level():
    """Importing only downward or sideways is not enough: two rooms on one level that import
    each other (even lazily, inside a function) are one room in two files."""
    circles = _circles(_rooms_graph())
    assert not circles, "import circles between rooms: " + "; ".join(" ↔ ".join(c) for c in circles)


def _dotted(path: Path, lib: Path = LIB) -> str:
    """``lib/feedlab/doctor/user.py`` → ``feedlab.doctor.user`` (a package's ``__init__`` is the package)."""
    rel = path.relative_to(lib.parent).with_suffix("")
    return ".".join(x for x in rel.parts if x != "__init__")


def _imports_of(path: Path, tree: ast.AST, known: set[str], lib: Path = LIB) -> list[tuple[str, ast.AST]]:
    """(feedlab module imported, the import node) for every import in ``tree``, relative ones resolved:
    ``from . import predict`` names the module ``….predict``, ``from .wrap import x`` the module ``….wrap``."""
    me = _dotted(path, lib)
    pkg = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg[:len(pkg) - (node.level - 1)] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t not in known and "." in t:
                t = t.rsplit(".", 1)[0]
            if t in known and t != me:
                out.append((t, node))
    return out


def _module_graph(lib: Path = LIB) -> dict[str, set[str]]:
    """Module → the feedlab modules it imports, inside packages too, imports inside functions included."""
    paths = {_dotted(p, lib): p for p in sorted(lib.rglob("*.py"))}
    return {m: {t for t, _ in _imports_of(p, ast.parse(p.read_text()), set(paths), lib)} for m, p in paths.items()}


def test_a_circle_inside_a_package_closed_by_an_import_in_a_function_is_found(tmp_path):
    pkg = tmp_path / "feedlab" / "doctor"
    pkg.mkdir(parents=True)
    (tmp_path / "feedlab" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from .report import render\n")
    (pkg / "report.py").write_text("from .words import fit\n\ndef render():\n    from .answer import lines\n")
    (pkg / "answer.py").write_text("from feedlab.doctor import report\n")
    (pkg / "words.py").write_text("")
    circles = _circles(_module_graph(tmp_path / "feedlab"))
    assert circles == [["feedlab.doctor.answer", "feedlab.doctor.report"]]
    (pkg / "answer.py").write_text("from .words import fit\n")
    assert _circles(_module_graph(tmp_path / "feedlab")) == []


def test_no_circle_between_modules_even_inside_a_package():
    """Two modules of one package that import each other (one of them inside a function, where the
    room test above cannot see it) are one module in two files: move the shared piece down."""
    circles = _circles(_module_graph())
    assert not circles, "import circles between modules: " + "; ".join(" ↔ ".join(c) for c in circles)


# ---------------------------------------------------------------- imports at the top
# The third-party packages a module may import at its top: feedlab's dependencies (pyproject). torch and
# torchvision are dependencies too, but heavy (seconds to import): they enter only a module that already
# imports them. Anything else (ray, the peers' loaders, simplejpeg, pynvml, ...) is optional.
CORE = frozenset({"numpy", "PIL", "pandas", "matplotlib", "psutil", "lmdb", "lz4", "h5py", "zarr", "google_crc32c",
                  "yaml", "skimage", "sklearn", "tqdm", "webdataset", "papermill", "nbformat", "IPython",
                  "traitlets", "data_prep"})
HEAVY = frozenset({"torch", "torchvision"})
# what a peer's own venv holds (feedlab.peers.venvs.BASE): the modules it runs import nothing else
PEER_VENV = frozenset({"torch", "torchvision", "numpy", "PIL", "psutil", "h5py", "lmdb", "lz4", "zarr", "google_crc32c"})
STDLIB_FLOOR = ("feedlab", "feedlab.paths", "feedlab.machines")  # other Pythons import these without dependencies
PEER_CHILD = ("feedlab.peers.child", "feedlab.peers.ffcv_peer", "feedlab.peers.mosaic_streaming",
              "feedlab.peers.spdl_peer")                          # run by a peer venv's Python
# an import of feedlab inside a function that no package explains, with its reason
LAZY: dict[tuple[str, str], str] = {
    ("feedlab.doctor", "feedlab.doctor.__main__"): "runpy: `python -m feedlab.doctor` runs __main__ afresh; "
                                                   "the package importing it first would warn",
}
# files other changes were editing when the imports moved up (issue 35): their in-function imports wait
PENDING: tuple[str, ...] = ()   # every file now keeps the rule (the list held files other work was changing)


def _in_function(tree: ast.AST) -> set[ast.AST]:
    """The import nodes inside a function body (run when it is called, not when the module is imported)."""
    out = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            out.update(n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))
    for node in ast.walk(tree):   # `if TYPE_CHECKING:` imports never run
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return out


def _third_party(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and not node.level:
        names = [node.module or ""]
    else:
        return set()
    tops = {n.split(".")[0] for n in names}
    return {t for t in tops if t and t not in ("feedlab", "__future__") and t not in sys.stdlib_module_names}


def _scan(lib: Path = LIB) -> dict[str, dict]:
    """Per module: the feedlab modules and third-party packages it imports at its top, and its imports of
    feedlab inside functions as ``(module, line)``."""
    paths = {_dotted(p, lib): p for p in sorted(lib.rglob("*.py"))}
    out = {}
    for m, p in paths.items():
        tree = ast.parse(p.read_text())
        lazy_nodes = _in_function(tree)
        top_3p: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and node not in lazy_nodes:
                top_3p |= _third_party(node)
        pairs = _imports_of(p, tree, set(paths), lib)
        parents = {".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 1)}
        out[m] = {"path": p, "top": {t for t, n in pairs if n not in lazy_nodes} | parents, "top_3p": top_3p,
                  "lazy": sorted({(t, n.lineno) for t, n in pairs if n in lazy_nodes})}
    return out


def _closure(scan: dict, roots) -> set[str]:
    """The feedlab modules importing ``roots`` runs (their packages' ``__init__`` included)."""
    seen, todo = set(), [r for r in roots if r in scan]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(t for t in scan[m]["top"] if t in scan)
    return seen


def _brings(scan: dict, m: str) -> set[str]:
    return set().union(*(scan[x]["top_3p"] for x in _closure(scan, [m])))


def _why_lazy(scan: dict, m: str, t: str) -> str:
    """Why ``m`` imports ``t`` inside a function ('' when nothing does: it belongs at the top)."""
    new = _brings(scan, t) - _brings(scan, m)
    if m in _closure(scan, STDLIB_FLOOR) and new:
        return f"{m} is imported by other Pythons without dependencies; {t} brings {', '.join(sorted(new))}"
    if m in _closure(scan, PEER_CHILD) and new - PEER_VENV:
        return f"{m} runs in a peer's venv, which lacks {', '.join(sorted(new - PEER_VENV))}"
    if new & HEAVY:
        return f"{t} brings {', '.join(sorted(new & HEAVY))} (heavy), which {m} does not import"
    if new - CORE - HEAVY:
        return f"{t} brings the optional {', '.join(sorted(new - CORE - HEAVY))}"
    return LAZY.get((m, t), "")


def _unexplained_lazy(scan: dict, lib: Path = LIB) -> list[str]:
    bad = []
    for m, info in scan.items():
        rel = str(info["path"].relative_to(lib))
        if any(rel == f or (f.endswith("/") and rel.startswith(f)) for f in PENDING):
            continue
        bad += [f"{rel}:{line} imports {t} inside a function" for t, line in info["lazy"] if not _why_lazy(scan, m, t)]
    return bad


def test_an_import_inside_a_function_needs_a_reason(tmp_path):
    lib = tmp_path / "feedlab"
    lib.mkdir()
    (lib / "__init__.py").write_text("")
    (lib / "light.py").write_text("import json\n")
    (lib / "heavy.py").write_text("import torch\n")
    (lib / "user.py").write_text("def f():\n    from feedlab import light\n\ndef g():\n    from . import heavy\n")
    scan = _scan(lib)
    assert _unexplained_lazy(scan, lib) == ["user.py:2 imports feedlab.light inside a function"]
    assert "torch" in _why_lazy(scan, "feedlab.user", "feedlab.heavy")


def test_imports_of_feedlab_are_at_the_top_unless_a_package_explains_why():
    """An import inside a function hides wiring from a reader and from the tests above. It stays inside
    only where the module it imports would bring a package the importer does not import: torch (heavy),
    an optional dependency, anything for the standard-library floor, anything a peer's venv lacks; the
    few others are named in LAZY with their reason (docs/ARCHITECTURE.md, "Imports")."""
    bad = _unexplained_lazy(_scan())
    assert not bad, "move to the top (or give a reason in LAZY):\n" + "\n".join(bad)


_STDLIB_ONLY = '''
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top != "feedlab" and top not in sys.stdlib_module_names:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: not the standard library)")
        return None
sys.meta_path.insert(0, Block())
import feedlab, feedlab.paths, feedlab.machines
print("imports", feedlab.__version__)
'''


def test_the_ground_floor_imports_with_the_standard_library_alone():
    """.ci/other-pythons installs feedlab without its dependencies under each other Python and imports
    ``feedlab, feedlab.paths, feedlab.machines``: a third-party import on that floor (numpy in
    ``monitor`` once) fails CI there although every test here passes."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _STDLIB_ONLY], capture_output=True, text=True,
                         cwd=REPO, env={"PYTHONPATH": str(REPO / "lib"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-600:]
    assert out.stdout.startswith("imports ")


def test_every_test_listed_slow_exists():
    """tests/unit/slow_tests.txt names tests `make test` leaves to `make test-slow`: a renamed or removed test
    there would silently move nothing, and one still listed after it got fast keeps costing CI nothing wrong."""
    from tests.conftest import slow_tests

    missing = []
    for entry in sorted(slow_tests()):
        path, _, name = entry.partition("::")
        src = REPO / path
        if not src.is_file() or f"def {name}(" not in src.read_text():
            missing.append(entry)
    assert not missing, f"listed slow but not found: {', '.join(missing)}"
    # about 5% of the ~1,500 unit tests: the end-to-end ones (deadlines, subprocesses, whole notebooks)
    assert len(slow_tests()) <= 80, "the slow list is for the few end-to-end tests, not a place to park tests"
