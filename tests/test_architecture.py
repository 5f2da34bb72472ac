"""The shape of the house: no function too branchy to change safely, readers apart from runners,
findings decided in one place."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tokenbench"
#: The most decision points one function may have (radon's cyclomatic complexity). Past 25 a function mixes
#: several jobs; metrics.summarize was 93 when detection rules lived inside the statistics.
MAX_COMPLEXITY = 25


def _functions(blocks: list) -> list:  # type: ignore[type-arg]
    from radon.visitors import Class, Function

    out = []
    for b in blocks:
        if isinstance(b, Function):
            out.append(b)
        out += _functions(list(getattr(b, "closures", [])))
        if isinstance(b, Class):
            out += _functions(list(b.methods))
    return out


def test_no_function_in_src_is_over_the_complexity_limit() -> None:
    from radon import complexity as radon  # in the test extra: pip install -e '.[test]'

    over = [f"{p.relative_to(SRC.parent)}:{f.lineno} {f.fullname} ({f.complexity})"
            for p in sorted(SRC.rglob("*.py")) for f in _functions(radon.cc_visit(p.read_text()))
            if f.complexity > MAX_COMPLEXITY]
    assert not over, f"cyclomatic complexity over {MAX_COMPLEXITY}: split these:\n" + "\n".join(over)


def test_summarize_keeps_statistics_only() -> None:
    from radon import complexity as radon

    (summarize,) = [f for f in _functions(radon.cc_visit((SRC / "metrics.py").read_text())) if f.name == "summarize"]
    assert summarize.complexity < 20
    text = ast.get_source_segment((SRC / "metrics.py").read_text(), next(
        n for n in ast.parse((SRC / "metrics.py").read_text()).body
        if isinstance(n, ast.FunctionDef) and n.name == "summarize")) or ""
    assert "price" not in text and "flags" not in text.replace("flags=[]", "") and "warnings" not in text


def _imports(path: Path) -> set[str]:
    mods = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            pkg = path.relative_to(SRC).parent.parts[: len(path.relative_to(SRC).parent.parts) - node.level + 1]
            mods.add(".".join((*pkg, node.module or "")).strip("."))
            mods.update(".".join((*pkg, node.module or "", a.name)).strip(".") for a in node.names)
    return mods


@pytest.mark.parametrize("reader", ["compare", "pricing.py", "cost.py", "recommend.py", "session_view.py", "report",
                                    "importers", "quality"])
def test_readers_do_not_import_a_runner(reader: str) -> None:
    paths = [SRC / reader] if reader.endswith(".py") else sorted((SRC / reader).rglob("*.py"))
    runners = {"sweep", "depth", "coldstart", "sessions"}
    bad = [f"{p.name} imports {m}" for p in paths for m in _imports(p) if m in runners]
    assert not bad, bad


def test_level_warnings_are_decided_in_findings_only() -> None:
    """A level's flags and warnings are a view of its findings: the modules that make levels add findings and
    never write the view themselves (LevelSummary.add keeps it)."""
    makers = [SRC / n for n in ("sweep.py", "depth.py", "results.py", "endpoint.py")] + sorted(
        (SRC / "importers").glob("*.py"))
    bad = [p.name for p in makers if ".flags.append(" in p.read_text() or ".warnings.append(" in p.read_text()
           or "in w for w in" in p.read_text()]
    assert not bad, bad


def _module(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``path`` (the module ``name``) imports when it runs: at the top, or inside a function (imported
    at its first call, but imported all the same); an import under ``if TYPE_CHECKING:`` is for mypy only and
    does not count."""
    def typing_only(node: ast.If) -> bool:
        t = node.test
        return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
            isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")

    found: list[ast.Import | ast.ImportFrom] = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and typing_only(child):
                for stmt in child.orelse:
                    walk(stmt)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            walk(child)

    walk(ast.parse(path.read_text()))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in found:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module or ""
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        for n in names:  # `from . import x` names the module x; `from .m import f` names m
            while n and n not in modules:
                n = n.rpartition(".")[0]
            if n and n != name:
                out.add(n)
                # importing pkg.mod runs pkg/__init__ first (unless the importer is inside pkg already)
                parent = n.rpartition(".")[0]
                while parent and parent in modules and not name.startswith(parent + "."):
                    out.add(parent)
                    parent = parent.rpartition(".")[0]
    return out


def import_circles() -> list[list[str]]:
    """Every set of tokenbench's modules that import each other round a circle at run time (the strongly
    connected components of the runtime import graph, Tarjan's algorithm), each sorted."""
    paths = {_module(p): p for p in SRC.rglob("*.py")}
    graph = {m: _runtime_imports(p, m, set(paths)) for m, p in paths.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_runtime_import_circle() -> None:
    """Modules that import each other at run time (a package's __init__ and its own modules included) have
    blurred what each is for: the shared thing belongs to one of them, or to a module of its own. An import only
    type checking reads (under ``if TYPE_CHECKING:``) is allowed; one inside a function is not."""
    circles = import_circles()
    assert not circles, "runtime import circles: move what they share to the module it belongs to:\n" + "\n".join(
        " <-> ".join(c) for c in circles)


def test_the_circle_check_sees_function_level_imports_and_skips_type_checking(tmp_path: Path) -> None:
    src = tmp_path / "a.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n"
                   "def f():\n    from .c import g\n    from . import d\n")
    names = {"tokenbench.a", "tokenbench.b", "tokenbench.c", "tokenbench.d"}
    assert _runtime_imports(src, "tokenbench.a", names) == {"tokenbench.c", "tokenbench.d"}


# ---- the sweep conducts; each workload kind is a plug-in ------------------------------------------------------

def test_the_sweep_conducts_and_names_no_workload_kind() -> None:
    """sweep.py runs levels; what is sent is a kind's (kinds/). It stays small, imports only the kinds' contract,
    their registry and the default kind, and never branches on a kind or names the capacity search."""
    text = (SRC / "sweep.py").read_text()
    assert len(text.splitlines()) <= 500
    kinds = {m.split(".")[1] for m in _imports(SRC / "sweep.py") if m.startswith("kinds.")}
    assert kinds <= {"base", "lengths", "WorkloadKind"}, kinds
    tree = ast.parse(text)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    named = names & {"sessions", "trace", "dataset", "replay", "capacity", "search", "isinstance", "SessionsKind",
                     "TraceKind", "DatasetKind", "ReplayKind", "CapacitySearch"}
    assert not named, f"sweep.py names {sorted(named)}"


def test_every_kind_is_registered_and_speaks_the_contract() -> None:
    from tokenbench.kinds import KINDS, WorkloadKind
    from tokenbench.kinds.base import Kind

    assert set(KINDS) == {"lengths", "dataset", "trace", "sessions", "replay"}
    assert set(WorkloadKind.__args__) == set(KINDS.values())  # type: ignore[attr-defined]
    members = [n for n in dir(Kind) if not n.startswith("_")]
    for name, cls in KINDS.items():
        assert cls.name == name and isinstance(cls.splits, bool)
        missing = [m for m in members if not hasattr(cls, m)]
        assert not missing, f"{cls.__name__} lacks {missing}"
        assert (SRC / "kinds" / f"{name}.py").exists()  # each kind in a module of its own


def test_no_module_is_over_500_lines() -> None:
    """A room over 500 lines holds several concepts: split it by what each part answers."""
    over = [f"{p.relative_to(SRC.parent)} ({n})" for p in sorted(SRC.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > 500]
    assert not over, over


def test_a_library_module_imports_a_name_from_where_it_is_defined() -> None:
    """A name is imported from the module that defines it, never through a package that re-exports it: the import
    line says where the name lives (a package's ``__init__`` may offer its names to users and tests)."""
    mods = {_module(p): p for p in SRC.rglob("*.py")}

    def defined(p: Path) -> set[str]:
        out: set[str] = set()
        for n in ast.parse(p.read_text()).body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(n.name)
            elif isinstance(n, ast.Assign):
                out |= {t.id for t in n.targets if isinstance(t, ast.Name)}
            elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                out.add(n.target.id)
        return out

    bad = []
    for name, path in mods.items():
        pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level):
                continue
            base = ".".join(pkg[: len(pkg) - node.level + 1] + ([node.module] if node.module else []))
            if base == name or base not in mods or mods[base].name != "__init__.py":
                continue
            bad += [f"{name} imports {a.name} through {base}" for a in node.names
                    if f"{base}.{a.name}" not in mods and a.name not in defined(mods[base])]
    assert not bad, bad


def test_the_benchmarks_import_what_exists() -> None:
    """No test runs the benchmarks, so a name moved in src/ would break them unseen: every ``from tokenbench...
    import name`` in benchmarks/ must name a module and a name that exist."""
    import importlib

    bad = []
    for path in sorted((SRC.parents[1] / "benchmarks").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        # a fallback for an older tree (try: ... except ImportError:) is allowed to name what is gone
        guarded = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try)
                   and any("ImportError" in ast.unparse(h.type or ast.Name("")) for h in t.handlers)
                   for part in (t.body, *(h.body for h in t.handlers)) for n in part}
        for node in ast.walk(tree):
            if id(node) in guarded:
                continue
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tokenbench"):
                try:
                    module = importlib.import_module(node.module or "")
                except ImportError as e:
                    bad.append(f"{path.name}: {e}")
                    continue
                bad += [f"{path.name}: {node.module} has no {a.name}" for a in node.names
                        if not hasattr(module, a.name) and not _is_submodule(node.module or "", a.name)]
    assert not bad, bad


def _is_submodule(package: str, name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(f"{package}.{name}") is not None
    except ModuleNotFoundError:
        return False
