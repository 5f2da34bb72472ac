"""The README and the pages of docs/ are the user's door: their examples run as written in a fresh clone.

Blocks fenced as ```sh run, in order (README.md first, then docs/*.md by name), as one bash script, from a
scratch directory that holds the clone's files (links), so what they write stays out of the checkout; a page's
blocks may use the runs the README's made (its `demo`). Every other block is a template for the user's own
servers and files: each `tokenbench` command in it must parse with the real parser, so a renamed or misspelt
option fails here instead of in a newcomer's terminal. And every page of docs/ is reached from the README's
documentation index, and every relative link resolves to a file of the repository (and a heading, where it
names one)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import need_engine
from tokenbench.cli.parser import EXIT_CODES, build_parser

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
#: The documents whose examples run: the README, then each page of docs/, by name.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The Markdown of the product whose links must resolve.
LINKED = [*PAGES, ROOT / "DEVELOPING.md", ROOT / "benchmarks" / "README.md", ROOT / "benchmarks" / "device" / "README.md"]


def page_blocks(page: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(page.read_text())]


def blocks() -> list[tuple[str, str]]:
    """Every fenced block of every page, in the order they run."""
    return [b for page in PAGES for b in page_blocks(page)]


def commands(text: str) -> list[str]:
    """The `tokenbench` commands of a block, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        if not line.lstrip().startswith("tokenbench "):  # an output block's lines are not shell ("each one's figures")
            continue
        words = shlex.split(line, comments=True)
        # a pipe or a list ends the command: `tokenbench ... --json - | jq .levels`
        words = words[:next((i for i, w in enumerate(words) if w in ("|", "||", "&&", ";")), len(words))]
        if words[:1] == ["tokenbench"]:
            out.append(shlex.join(words))
    return out


def git_ignored(names: list[str]) -> list[str]:
    """Which of these top-level names of the clone git ignores (.gitignore)."""
    out = subprocess.run(["git", "check-ignore", "--", *names], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode in (0, 1), out.stderr  # 1: none of them is ignored
    return sorted(Path(p).name for p in out.stdout.split())


def script() -> str:
    """The runnable blocks as one bash script, each page's announced with the seconds since the start, so a
    failure names its page and a pass says what each page's examples cost."""
    parts = ["set -euo pipefail"]
    for page in PAGES:
        runnable = [t for k, t in page_blocks(page) if k == "sh"]
        if runnable:
            parts.append(f"echo \"== {page.relative_to(ROOT)} at $SECONDS s\" >&2")
            parts.extend(runnable)
    parts.append('echo "== end at $SECONDS s" >&2')
    return "\n".join(parts)


def page_seconds(stderr: str) -> dict[str, int]:
    """Each page's examples' seconds, from the script's announcements."""
    marks = [(m.group(1), int(m.group(2))) for m in re.finditer(r"^== (\S+) at (\d+) s$", stderr, re.M)]
    return {page: end - start for (page, start), (_, end) in zip(marks, marks[1:])}


def test_the_readme_and_docs_have_runnable_blocks_and_templates() -> None:
    readme = [k for k, _ in page_blocks(ROOT / "README.md")]
    assert "sh" in readme and "" in readme  # the runnable ones, and templates beside them
    kinds = [k for k, _ in blocks()]
    assert kinds.count("sh") >= 10 and set(kinds) <= {"sh", ""}, set(kinds)


@pytest.mark.parametrize("command", [c for k, t in blocks() if k != "sh" for c in commands(t)])
def test_every_template_command_parses(command: str) -> None:
    parser = build_parser()
    try:
        parser.parse_args(shlex.split(command)[1:])
    except SystemExit as e:
        pytest.fail(f"README or docs/: `{command}` does not parse (exit {e.code})")


@pytest.mark.engine
@pytest.mark.timeout(1500)
def test_runnable_blocks_run_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        servers_ahead: None) -> None:
    """The measuring blocks use the embedded Transformers engine and llama.cpp's tools, as a fresh clone
    would after `make demo` and `make engines`; the others are predictions, imports and readers. They time nothing
    the test reads, so the vLLM and Transformers servers of the tests after it start beside them
    (``servers_ahead``)."""
    need_engine("transformers")
    need_engine("llama-server")
    scratch = tmp_path / "clone"
    scratch.mkdir()
    # the clone's tracked files, not what git ignores: a user who ran the examples in it has their outputs there
    entries = [e.name for e in ROOT.iterdir() if e.name != ".git"]
    for name in sorted(set(entries) - set(git_ignored(entries))):
        (scratch / name).symlink_to(ROOT / name)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               TOKENBENCH_DB=str(tmp_path / "results.db"), COLUMNS="80")
    proc = subprocess.run(["bash", "-c", script()], cwd=scratch, env=env, capture_output=True, text=True,
                          timeout=1400, check=False)
    assert proc.returncode == 0, f"a README or docs/ block failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stdout + proc.stderr
    took = page_seconds(proc.stderr)
    assert set(took) == {str(p.relative_to(ROOT)) for p in PAGES if any(k == "sh" for k, _ in page_blocks(p))}, took
    with capsys.disabled():
        print("\nseconds each page's examples took:", took)
    made = sorted(e.name for e in scratch.iterdir() if not e.is_symlink())
    assert {"demo.json", "report.html", "BENCHMARKS.md", "plots"} <= set(made), made
    assert any((scratch / "plots").iterdir())
    # following the README leaves nothing in a clone that git would show as new
    assert git_ignored(made) == made
    # the agents' replay on llama-server: each lane warms its first call inside the level, uncounted; the server's
    # /metrics counts it, so the responses' share is read over the same calls (it once flagged 94% against 81%)
    from tokenbench.reader import load_result
    from tokenbench.store import Store

    store = Store(tmp_path / "results.db", readonly=True)
    [replay] = [o.summary for o in load_result(store, store.resolve("agents-demo", False).id, None).outcomes]
    assert replay.telemetry is not None and replay.telemetry.prefix_cache_hit_rate is not None
    assert "cache_counts_disagree" not in replay.flags, replay.warnings


def test_every_command_has_examples_in_its_help_and_they_parse() -> None:
    import argparse

    from tokenbench.cli.parser import EXAMPLES

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(EXAMPLES) == set(sub.choices), set(sub.choices) ^ set(EXAMPLES)
    for name, sp in sub.choices.items():
        assert re.search(rf"examples:\n(  # .*\n)?  tokenbench {name}", sp.format_help()), name
        for example in EXAMPLES[name]:
            try:
                build_parser().parse_args(shlex.split(example, comments=True)[1:])
            except SystemExit as e:
                pytest.fail(f"tokenbench {name} --help: `{example}` does not parse (exit {e.code})")


def test_a_predicted_example_prints_what_the_docs_show() -> None:
    """The recommend --capacity example (docs/capacity.md) is all prediction (no server): its output, at the 80
    columns the page shows it at, is what the block after it says, so a catalog or calibration change that moves
    it fails here."""
    found = [(i, t) for i, (k, t) in enumerate(blocks()) if "tokenbench recommend --model llama-3.1-8b --capacity" in t]
    assert len(found) == 1
    i, text = found[0]
    [command] = commands(text)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", COLUMNS="80")
    out = subprocess.run(shlex.split(command), env=env, capture_output=True, text=True, timeout=120, check=True)
    shown = [ln.rstrip() for ln in blocks()[i + 1][1].rstrip("\n").splitlines()]
    assert [ln.rstrip() for ln in out.stdout.rstrip("\n").splitlines()] == shown


def _capacity_levels(*rows: tuple[int, int, float, int, float, bool]) -> list[str]:
    """The verdict table capacity prints at 80 columns for levels of a TTFT p90 <= 1 s and >= 15 tok/s search
    (agents, requests, TTFT p90 in ms, requests over it, tok/s per agent, stopped early), sure verdicts."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from tokenbench.capacity import Verdict
    from tokenbench.capacity_text import verdict_table
    from tokenbench.console import print_table
    from tokenbench.slo import SloCheck

    verdicts = [Verdict(agents, ttft <= 1000 and tps >= 15,
                        [SloCheck("ttft_p90", ttft, 1000.0, "ms", ttft <= 1000, n, over=over, p_value=0.01),
                         SloCheck("agent_tps", tps, 15.0, "tok/s", tps >= 15, n, p_value=0.01)],
                        n, "stopped sending: the p90 cannot pass" if stopped else None, 0)
                for agents, n, ttft, over, tps, stopped in rows]
    header, body = verdict_table(SimpleNamespace(spec=SimpleNamespace(axis="concurrency"),  # type: ignore
                                                 verdicts=verdicts))
    out = io.StringIO()
    print_table(Console(file=out, width=80, color_system=None), header, body, "table", numeric=True)
    return [ln.rstrip() for ln in out.getvalue().rstrip("\n").splitlines()]


def test_the_capacity_examples_show_the_table_capacity_prints() -> None:
    """docs/capacity.md's searches show their levels' table as capacity writes it now: rates with one decimal
    (17.0 tok/s, the limit 15.0 tok/s), as the tables write them (one once showed "17 tok/s" and "(limit 15
    tok/s)" beside the other's "15.0")."""
    text = (ROOT / "docs" / "capacity.md").read_text()
    llama = _capacity_levels((1, 32, 212, 0, 59.4, False), (2, 32, 420, 0, 26.0, False), (4, 32, 819, 0, 18.7, False),
                             (5, 15, 1010, 8, 13.8, True), (6, 12, 1190, 7, 12.6, True), (8, 16, 1540, 16, 11.0, True))
    vllm = _capacity_levels((1, 32, 48.7, 0, 36.3, False), (2, 32, 89.7, 0, 33.4, False), (4, 32, 119, 0, 32.2, False),
                            (8, 32, 259, 0, 27.5, False), (16, 32, 635, 0, 19.9, False))
    for table in (llama, vllm):
        assert "\n".join(table) + "\n```" in text, "\n".join(table)
    assert "(limit 15 tok/s)" not in text and "agent_tps 17 tok/s" not in text


def test_the_session_example_says_what_the_commands_print() -> None:
    """The turn-20 figures under the session examples (docs/predict.md) are what those commands print with the
    packaged calibration (they went stale once: 1.76 s where the command printed 2.00 s)."""
    found = [t for _, t in blocks() if "--sessions" in t and "--save h100-session" in t]
    assert len(found) == 1
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", COLUMNS="200")
    said = []
    for command in commands(found[0]):
        args = [a for a in shlex.split(command) if a != "--save" and a != "h100-session"]
        out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, check=True).stdout
        m = re.search(r"^turn 20: TTFT (.+?) with the prefix cache, (.+?) without", out, re.M)
        assert m, out
        said.append(m.groups())
    (strix_warm, strix_cold), (h100_warm, h100_cold) = said
    text = " ".join(" ".join(p.read_text() for p in PAGES).split())
    h100 = h100_warm.removesuffix(" ms")
    assert f"Strix Halo TTFT {strix_warm} with the cache, {strix_cold} without; H100 (vLLM) {h100} ms and {h100_cold}." \
        in text


# --- every page reached, every link resolves ------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())  # a code block's brackets are not links
    return [a or b for a, b in LINK.findall(text)]


def anchors(page: Path) -> set[str]:
    """The ids GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    out = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        if m := re.match(r"#+ (.*)", line):
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


def test_every_docs_page_is_in_the_readme_index() -> None:
    linked = {(ROOT / t).resolve() for t in links(ROOT / "README.md") if not t.startswith(("http:", "https:", "#"))}
    pages = sorted((ROOT / "docs").glob("*.md"))
    assert pages and not [p.name for p in pages if p.resolve() not in linked]
    for other in ("DEVELOPING.md", "benchmarks/README.md"):
        assert (ROOT / other).resolve() in linked, other


@pytest.mark.parametrize("page", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or ROOT.resolve() not in dest.parents:
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_no_link_leaves_the_repository() -> None:
    """The product links nothing outside its own tree (a path like ../shared/ exists only beside a checkout)."""
    for page in LINKED + [ROOT / "docs" / "ARCHITECTURE.md"]:
        assert "../shared" not in page.read_text(), page


def test_the_predicted_cache_cliffs_are_what_the_commands_print() -> None:
    """The three seed boxes' predicted warm sessions in the README are what those commands print at 80 columns."""
    found = [(i, t) for i, (k, t) in enumerate(blocks()) if "--sessions --turns 20" in t and "nvidia-a30" in t]
    assert len(found) == 1
    i, text = found[0]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", COLUMNS="80")
    said = []
    for command in commands(text):
        out = subprocess.run(shlex.split(command), env=env, capture_output=True, text=True, timeout=120,
                             check=True).stdout
        said += [ln.rstrip() for ln in out.splitlines() if ln.startswith("cache (PREDICTED)")]
    assert said == blocks()[i + 1][1].rstrip("\n").splitlines()


def test_every_exit_code_is_in_the_readme() -> None:
    """A script reads the exit code: every one an error class ends a command with is in the README's table (6,
    --guard strict's refusal, was once missing)."""
    src = ROOT / "src" / "tokenbench"
    codes = {int(c) for f in src.rglob("*.py") for c in re.findall(r"^\s+exit_code = (\d+)$", f.read_text(), re.M)}
    table = (ROOT / "README.md").read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = [int(m) for m in re.findall(r"^\| (\d+) \|", table, re.M)]
    listed = set(rows)
    assert len(rows) == len(listed), rows  # each code once
    assert {2, 3, 6} <= codes and codes <= listed, codes - listed
    # and --help's list says the same codes as the README's table (6 was missing from it)
    assert {int(c) for c in re.findall(r"^  (\d+) ", EXIT_CODES, re.M)} == listed
