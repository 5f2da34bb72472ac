"""The README is the user's door: its examples run as written in a fresh clone (issue 10).

Blocks fenced as ```sh run, in order, as one bash script, from a scratch directory that holds the clone's
files (links), so what they write stays out of the checkout. Every other block is a template for the user's
own servers and files: each `tokenbench` command in it must parse with the real parser, so a renamed or
misspelt option fails here instead of in a newcomer's terminal."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import need_engine
from tokenbench.cli.parser import build_parser

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer((ROOT / "README.md").read_text())]


def commands(text: str) -> list[str]:
    """The `tokenbench` commands of a block, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        if not line.lstrip().startswith("tokenbench "):  # an output block's lines are not shell ("each one's figures")
            continue
        words = shlex.split(line, comments=True)
        if words[:1] == ["tokenbench"]:
            out.append(shlex.join(words))
    return out


def git_ignored(names: list[str]) -> list[str]:
    """Which of these top-level names of the clone git ignores (.gitignore)."""
    out = subprocess.run(["git", "check-ignore", "--", *names], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode in (0, 1), out.stderr  # 1: none of them is ignored
    return sorted(Path(p).name for p in out.stdout.split())


def test_the_readme_has_runnable_blocks_and_templates() -> None:
    kinds = [k for k, _ in blocks()]
    assert kinds.count("sh") >= 3 and "" in kinds  # the runnable ones, and templates beside them


@pytest.mark.parametrize("command", [c for k, t in blocks() if k != "sh" for c in commands(t)])
def test_every_template_command_parses(command: str) -> None:
    parser = build_parser()
    try:
        parser.parse_args(shlex.split(command)[1:])
    except SystemExit as e:
        pytest.fail(f"README: `{command}` does not parse (exit {e.code})")


@pytest.mark.engine
@pytest.mark.timeout(1500)
def test_runnable_blocks_run_as_written(tmp_path: Path) -> None:
    """The measuring blocks use the embedded Transformers engine and llama.cpp's tools, as a fresh clone
    would after `make demo` and `make engines`."""
    need_engine("transformers")
    need_engine("llama-server")
    scratch = tmp_path / "clone"
    scratch.mkdir()
    # the clone's tracked files, not what git ignores: a user who ran the examples in it has their outputs there
    entries = [e.name for e in ROOT.iterdir() if e.name != ".git"]
    for name in sorted(set(entries) - set(git_ignored(entries))):
        (scratch / name).symlink_to(ROOT / name)
    script = "\n".join(["set -euo pipefail"] + [t for k, t in blocks() if k == "sh"])
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               TOKENBENCH_DB=str(tmp_path / "results.db"), COLUMNS="80")
    proc = subprocess.run(["bash", "-c", script], cwd=scratch, env=env, capture_output=True, text=True,
                          timeout=1400, check=False)
    assert proc.returncode == 0, f"a README block failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stdout + proc.stderr
    made = sorted(e.name for e in scratch.iterdir() if not e.is_symlink())
    assert {"demo.json", "report.html", "BENCHMARKS.md", "plots"} <= set(made), made
    assert any((scratch / "plots").iterdir())
    # following the README leaves nothing in a clone that git would show as new
    assert git_ignored(made) == made


def test_every_command_has_examples_in_its_help_and_they_parse() -> None:
    import argparse

    from tokenbench.cli.parser import EXAMPLES

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(EXAMPLES) == set(sub.choices), set(sub.choices) ^ set(EXAMPLES)
    for name, sp in sub.choices.items():
        assert "examples:\n  tokenbench " + name in sp.format_help(), name
        for example in EXAMPLES[name]:
            try:
                build_parser().parse_args(shlex.split(example, comments=True)[1:])
            except SystemExit as e:
                pytest.fail(f"tokenbench {name} --help: `{example}` does not parse (exit {e.code})")


def test_a_predicted_example_prints_what_the_readme_shows() -> None:
    """The recommend --capacity example is all prediction (no server): its output, at the 80 columns the README
    shows it at, is what the block after it says, so a catalog or calibration change that moves it fails here."""
    found = [(i, t) for i, (k, t) in enumerate(blocks()) if "tokenbench recommend --model llama-3.1-8b --capacity" in t]
    assert len(found) == 1
    i, text = found[0]
    [command] = commands(text)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", COLUMNS="80")
    out = subprocess.run(shlex.split(command), env=env, capture_output=True, text=True, timeout=120, check=True)
    shown = [ln.rstrip() for ln in blocks()[i + 1][1].rstrip("\n").splitlines()]
    assert [ln.rstrip() for ln in out.stdout.rstrip("\n").splitlines()] == shown


def test_the_session_example_says_what_the_commands_print() -> None:
    """The turn-20 figures under the session examples are what those commands print with the packaged
    calibration (they went stale once: 1.76 s where the command printed 2.00 s)."""
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
    text = " ".join((ROOT / "README.md").read_text().split())
    h100 = h100_warm.removesuffix(" ms")
    assert f"Strix Halo TTFT {strix_warm} with the cache, {strix_cold} without; H100 (vLLM) {h100} ms and {h100_cold}." \
        in text
