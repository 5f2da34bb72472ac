"""The shape of the house (issue 8): no function too branchy to change safely, readers apart from runners,
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


@pytest.mark.parametrize("reader", ["compare.py", "cost.py", "recommend.py", "session_view.py", "report", "importers",
                                    "quality"])
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
