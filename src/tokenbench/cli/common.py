"""Parsing helpers shared by the commands."""
from __future__ import annotations

import argparse
import textwrap
import json
import os
import sys
import math
from pathlib import Path
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from ..console import silence
from ..errors import LevelFailed, UsageError
from ..grace import DEFAULT_GRACE_S
from ..jsontext import json_fault, json_text
from ..slo import parse_duration_ms

if TYPE_CHECKING:
    from ..results import RunResult
    from ..engines.embedded import EmbeddedSpec


def _no_empty_entry(text: str, what: str, example: str) -> None:
    """``1,,2``: an entry left out by a slip is refused, not dropped without a word."""
    if any(not x.strip() for x in text.split(",")):
        raise UsageError(f"{what} '{text}' has an empty entry: write the values between commas, e.g. {example}")


def _once_each(vals: Sequence[float], text: str, what: str) -> None:
    """``1,2,2``: a value twice is refused; its levels' notes, labelled by value, could not be told apart."""
    twice = sorted({v for v in vals if vals.count(v) > 1})
    if twice:
        raise UsageError(f"{what} '{text}' lists {', '.join(f'{v:g}' for v in twice)} more than once: give each value "
                         "once (a sweep's --repetitions N measures each level N times)")


def int_list(text: str, what: str) -> list[int]:
    _no_empty_entry(text, what, "1,4,8")
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{what} '{text}' is not a comma-separated list of integers, e.g. 1,4,8") from None
    if not vals or any(v < 1 for v in vals):
        raise UsageError(f"{what} '{text}' needs positive integers, e.g. 1,4,8")
    _once_each(vals, text, what)
    return vals


def float_list(text: str, what: str) -> list[float]:
    _no_empty_entry(text, what, "0.5,1,2")
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{what} '{text}' is not a comma-separated list of numbers, e.g. 0.5,1,2") from None
    if math.inf in vals:  # vllm bench serve's default --request-rate: every request sent at t=0
        raise UsageError(f"{what} '{text}': an infinite rate sends every request at once, which is a closed loop: "
                         "give --concurrency N --requests N")
    if not vals or any(not (0 < v < math.inf) for v in vals):
        raise UsageError(f"{what} '{text}' needs positive numbers, e.g. 0.5,1,2")
    _once_each(vals, text, what)
    return vals


def seconds(text: str | None, what: str, units: tuple[str, str] = ("ms", "s")) -> float | None:
    """A positive duration option in seconds; ``units``: the two a bare number is suggested in (a level's
    ``--duration 60`` is 60s or 60m, not 60ms)."""
    if text is None:
        return None
    try:
        v = parse_duration_ms(text, units) / 1000.0  # a bare number is refused, as every duration (slo.DURATION_RULE)
    except ValueError as e:
        if "has no unit" in str(e) or "not a finite" in str(e):
            raise UsageError(f"{what} {e}") from None
        raise UsageError(f"{what} '{text}' is not a duration: write e.g. 30s, 500ms or 2m") from None
    if v <= 0:
        raise UsageError(f"{what} must be positive")
    return v


def grace(text: str | None, what: str = "--grace") -> float | None:
    """A grace period: a duration, 0s (cancel at once), or inf (wait for every request: None)."""
    if text is None:
        return DEFAULT_GRACE_S
    if text.strip().lower() in ("inf", "none"):
        return None
    try:
        v = parse_duration_ms(text) / 1000.0
    except ValueError as e:
        raise UsageError(f"{what} {e}; or inf to wait for every request") from None
    if v < 0:
        raise UsageError(f"{what} must be 0 or more, or inf")
    return v


def tokens(text: str, what: str, zero: bool = False) -> int:
    n = _tokens(text, what)
    if n < 0 or (n == 0 and not zero):
        raise UsageError(f"{what} '{text}' must be a positive token count, e.g. 65536 or 64k")
    return n


def _tokens(text: str, what: str) -> int:
    """A token count: 65536, or 64k. ``Nk`` means the power of two people mean by it when N thousand or N·1024 is
    within 2.5% of one ("8k" 8,192; "65K" 65,536; "131K" 131,072), else N·1024."""
    t = text.strip().lower()
    try:
        n = float(int(t)) if not t.endswith("k") else float(t[:-1])
        if not math.isfinite(n) or abs(n) > 2**31:
            raise ValueError
    except (ValueError, OverflowError):  # "9" * 400 is an int no float holds
        raise UsageError(f"{what} '{text}' is not a token count: write e.g. 65536 or 64k") from None
    if not t.endswith("k"):
        return int(n)
    binary = int(n * 1024)
    if binary > 0:
        p2 = 1 << round(math.log2(binary))
        if min(abs(p2 - n * 1000), abs(p2 - binary)) <= 0.025 * p2:
            return p2
    return binary


def check_output(path: str | None, what: str) -> None:
    """Refuse, before any work, an output file that could not be written at the end."""
    if path is None or path == "-":
        return
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{what} {path} is a directory: give a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{what} {path}: " + _not_a_folder(parent))
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise UsageError(f"{what} {path} cannot be written here (permission denied)")


def check_output_dir(path: str, what: str) -> None:
    """Refuse, before any work, an output folder that is a file, or whose parent is missing: the folder itself
    is made, as an output file is; a tree of missing ones is a typo."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{what} {path} is a file: give a directory")
    if not p.exists() and not p.parent.is_dir():
        raise UsageError(f"{what} {path}: " + _not_a_folder(p.parent))


def _not_a_folder(parent: Path) -> str:
    return (f"{parent} is not a directory" if parent.exists() else
            f"the directory {parent} does not exist; create it first")


def write_stdout(text: str) -> None:
    """``text`` onto stdout; a reader that went away (``| head``) has read what it wanted, which is no failure."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        silence(sys.stdout)


def emit_json(path: str, obj: Any) -> None:
    """``obj`` as JSON into ``path``, or onto stdout for ``-`` (the tables then go to stderr: see cli.main)."""
    text = json_text(obj)
    if path == "-":
        write_stdout(text)
    else:
        Path(path).write_text(text)


def run_exit(res: RunResult) -> int:
    """A finished command's exit: 0 for a complete run; else the run's state and reason on stderr, and the exit of
    a failed level (its levels are kept and were shown, marked; the code tells a script or CI the run failed)."""
    if res.status == "complete":
        return 0
    print(f"tokenbench: run {res.status}: {res.error}", file=sys.stderr)
    return LevelFailed.exit_code


def saved(console: Console, res: RunResult, db: Path, fmt: str = "table", where: str = "saved in") -> None:
    """Every command's closing line, "run ID (STATUS) saved in DB" ("from" when shown again): depth's said its
    kind where the others say the run's status, coldstart's not where. Markdown output is pasted or redirected
    into a file, which is no place for a local path: there the line goes to stderr, whole; a table keeps to the
    terminal's width."""
    line = f"run {res.run_id} ({res.status}) {where} {db}"
    if fmt == "markdown":
        print(line, file=sys.stderr)
    else:
        console.print(line, style="dim", markup=False, highlight=False)


def write_json(path: str, res: RunResult) -> None:
    emit_json(path, res.to_json())


def json_object(text: str | None, flag: str) -> dict[str, Any]:
    """An option's JSON object (``--extra-body '{"top_k": 1}'``), or a one-line error that says how to write it."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as e:  # JSONDecodeError, or a number too long to convert (no .msg then)
        why = json_fault(e, line=False) if isinstance(e, json.JSONDecodeError) else str(e)
        raise UsageError(f"{flag} is not valid JSON ({why}): quote it, e.g. '{{\"top_k\": 1}}'") from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object")
    return value


def guard_targets(url: str | None) -> set[int]:
    """Processes of a server measured on this machine: the guard must not count them against the bench."""
    if not url:
        return set()
    from urllib.parse import urlparse

    from ..servers import listening_pids

    if not urlparse(url if "://" in url else "http://" + url).port:
        return set()
    return listening_pids(url)


def guard_config(path: str | None) -> dict[str, dict[str, Any]]:
    from .. import guard

    return guard.load_config(Path(path) if path else None)


def notifier(err: Console) -> Callable[[str], None]:
    """Progress notes on stderr, dim: wrapped between words at a terminal's width (where the terminal would cut a
    word), each on one line where piped (a log keeps a note whole, to grep)."""
    def note(text: str) -> None:
        if err.is_terminal:
            text = "\n".join(textwrap.wrap(text, max(20, err.width), subsequent_indent="  ", break_long_words=False,
                                            break_on_hyphens=False)) or text
        err.print(text, style="dim", markup=False, highlight=False, soft_wrap=True)

    return note


#: depth's llama-bench options -> llama-bench's own flags (the same spellings llama-server takes).
LLAMA_BENCH_FLAGS = {"threads": "-t", "flash_attn": "-fa", "batch_size": "-b", "ubatch_size": "-ub",
                     "cache_type_k": "-ctk", "cache_type_v": "-ctv", "n_gpu_layers": "-ngl"}


def llama_options(a: argparse.Namespace, server: bool = False) -> list[str]:
    """The llama.cpp options the user gave, as flags (llama-server spells flash attention on/off, llama-bench 1/0)."""
    out: list[str] = []
    for key, flag in LLAMA_BENCH_FLAGS.items():
        v = getattr(a, key, None)
        if v is not None:
            out += [flag, {"1": "on", "0": "off"}[v] if server and key == "flash_attn" else str(v)]
    return out


def embedded_spec(a: argparse.Namespace) -> EmbeddedSpec | None:
    """The embedded engine the options name (--engine, --model-size, --quant, llama.cpp options); None with --url,
    where nothing is started."""
    from ..engines.embedded import EmbeddedSpec

    if a.url:
        return None
    from ..engines.tiny import served_name

    model = getattr(a, "model", None)
    if model and model != served_name(a.model_size):  # it would measure the embedded model under another's name
        raise UsageError(f"--model {model}: without --url the embedded engine serves its own model "
                         f"({served_name(a.model_size)}); give --url for a server of yours, or drop --model")
    flags = tuple(llama_options(a, server=True)) if a.engine == "llama-server" else ()  # its server's, no other's
    return EmbeddedSpec(a.engine, a.model_size, a.quant, flags)


def refuse_embedded_with_url(a: argparse.Namespace, argv: list[str]) -> None:
    """--engine, --model-size and --quant choose the embedded engine, which --url replaces: given with it, they were
    accepted and ignored (sweep --url ... --engine vllm measured the server at the URL, whatever it ran)."""
    if not getattr(a, "url", None) or getattr(a, "llama_bench", None):
        return
    given = sorted({w.split("=", 1)[0] for w in argv} & {"--engine", "--model-size", "--quant"})
    if given:
        raise UsageError(f"{', '.join(given)} choose{'s' if len(given) == 1 else ''} the embedded engine, which "
                         "--url replaces: drop one or the other")
