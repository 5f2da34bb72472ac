"""The product speaks to its users, not about how it was made: no issue numbers of this project, no words about
how the work was organised, and no pointer to a file outside the repository, in the code (comments, docstrings,
messages), the README, docs/, DEVELOPING.md, benchmarks/ and examples/. A comment says the reason, not where it
was asked for; a figure names its machine (model, cores), not how the machine was come by.

Citations of other projects stay, with their repository: "ggml-org/llama.cpp#8075", "llama.cpp PR 8075",
"discussion 15013". The tests are held to the words (no "issue 23", no "the lent H200"): they are the next
engineer's reading; they may name ../shared, whose copies some of them check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

def _recorded(path: Path) -> bool:
    """Other projects' recordings, copied unchanged (examples/trajectories/public): their agents' words, not the
    product's (a recorded agent may well cite its own repository's "#4944"); the folder's README is scanned."""
    return (ROOT / "examples" / "trajectories" / "public") in path.parents and path.suffix != ".md"


#: What is scanned: text the product ships or shows. Data tables (CSV) are held to the process words only (the last
#: test), and the haystack prose is data, not words.
SCANNED = [
    *(p for p in (ROOT / "src").rglob("*") if p.suffix in (".py", ".toml", ".md", ".json")),
    ROOT / "README.md", ROOT / "DEVELOPING.md", ROOT / "Makefile",
    *(ROOT / "docs").rglob("*.md"), *(ROOT / "docs").rglob("*.py"),
    *(p for p in (ROOT / "benchmarks").rglob("*") if p.suffix in (".md", ".py", ".sh")),
    *(p for p in (ROOT / "examples").rglob("*") if p.is_file() and not _recorded(p)),
]

#: This project's issue numbers: "issue 24", "issues 11 and 21", "Issue 8", "issue #3", and a bare "#24" (a
#: reference with its repository, "owner/repo#24", is a citation of another project and stays).
ISSUE = re.compile(r"\bissues?\s+#?\d+|(?<![\w/.&#\"'-])#\d{1,6}\b(?![\w-])", re.I)
#: A bare number that is something else: a CSS colour, a rank in a table cell, a PR or discussion of another
#: project named as such.
NOT_AN_ISSUE = re.compile(r"color|background|border|\|\s*#\d+\s*\||\b(PR|pull|discussion|discussions)\s+#\d+", re.I)
#: Words about how the work was organised, or a pointer outside the repository.
PROCESS = re.compile(r"\blent\s+(GPU|machine|H100|H200|session|16-core)|\b(a|the)\s+lent\b|\bthis task\b|"
                     r"\bthe task's\b|\bCEO\b|\bissue tracker\b|\bthe lead\b|\.\./shared|shared/GPU\.md|\bshared/reference\b|"
                     r"\(lent\)|\bDESIGN\.md\b",
                     re.I)

def offences(path: Path) -> list[tuple[int, str]]:
    out = []
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        issue = [m for m in ISSUE.finditer(line) if not NOT_AN_ISSUE.search(line)]
        if issue or PROCESS.search(line):
            out.append((n, line.strip()))
    return out


def test_the_scan_covers_the_product() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in SCANNED}
    assert {"README.md", "DEVELOPING.md", "docs/results.md", "benchmarks/README.md",
            "src/tokenbench/sweep.py", "src/tokenbench/data/models.toml", "examples/mooncake-trace.jsonl"} <= names


@pytest.mark.parametrize("path", SCANNED, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_issue_numbers_or_process_words(path: Path) -> None:
    rel = path.relative_to(ROOT).as_posix()
    found = [f"{rel}:{n}: {line}" for n, line in offences(path)]
    assert not found, "say the reason, not where it was asked:\n" + "\n".join(found)


def test_the_patterns_catch_what_they_should() -> None:
    bad = ["the send path (issue 24)", "Issue 8: done", "issues 11 and 21", "as asked in #42", "(#13)",
           "measured on the lent GPU machine", "a lent H100", "this task could not run", "the CEO asked",
           "see ../shared/DESIGN.md", "filed in the issue tracker", "as the lead said"]
    good = ["llama.cpp PR 8075", "ggml-org/llama.cpp#8075", "janhq/cortex.llamacpp#147", "discussion #15013",
            "color: #222;", "| #1 | nvidia-l40s |", "the leading dense layers", "a silent failure",
            "one H100 SXM, 16 cores", "a quality task's items", "tissue 12"]
    for text in bad:
        assert ISSUE.search(text) and not NOT_AN_ISSUE.search(text) or PROCESS.search(text), text
    for text in good:
        assert not ([m for m in ISSUE.finditer(text) if not NOT_AN_ISSUE.search(text)] or PROCESS.search(text)), text



@pytest.mark.parametrize("path", sorted((ROOT / "src").rglob("*.csv")), ids=lambda p: p.name)
def test_the_shipped_data_tables_say_nothing_of_how_the_work_was_organised(path: Path) -> None:
    """The data tables are scanned for the process words and outside pointers only: their notes cite other
    projects' issues and pull requests by number, which are citations, but a host column or a note that says
    where the measurement was done here, or points at a file the repository does not hold, reaches the user
    through predict --against and calibrate as it stands."""
    bad = [(n, line[:120]) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
           if PROCESS.search(line)]
    assert not bad, bad


#: In the tests: an issue named in words, or a machine said to be lent.
TEST_WORDS = re.compile(r"\bissues?\s+#?\d+|\blent\s+(GPU|machine|H100|H200)|\b(a|the)\s+lent\b", re.I)


def test_the_tests_name_no_issue_numbers() -> None:
    found = [f"{p.relative_to(ROOT).as_posix()}:{n}: {line.strip()}"
             for p in sorted((ROOT / "tests").rglob("*.py")) if p.name != "test_product_words.py"  # its examples
             for n, line in enumerate(p.read_text().splitlines(), 1) if TEST_WORDS.search(line)]
    assert not found, "say the reason, not where it was asked:\n" + "\n".join(found)
