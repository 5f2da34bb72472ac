"""The parts of the grammar several commands share: the argparse types of numbers, shares and currencies, and
the option groups (the endpoint and its embedded engine, --json, --db, --latest). ``parser.py`` builds the
commands from them, and ``quality.py`` its own."""
from __future__ import annotations

import argparse
import re
from typing import Any

from ..registry import LAUNCHERS, find


def _number(kind: type, low: float, strict: bool, what: str) -> Any:
    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not {what}") from None
        if v != v or abs(v) > 2**31 or (v <= low if strict else v < low):
            raise argparse.ArgumentTypeError(f"'{text}' is not {what}")
        return v
    parse.__name__ = what
    return parse


POSITIVE_INT = _number(int, 0, True, "a positive whole number")
NONNEG_INT = _number(int, 0, False, "a whole number, 0 or more")
POSITIVE = _number(float, 0, True, "a positive number")
NONNEG = _number(float, 0, False, "a number, 0 or more")


def SHARE(text: str) -> float:
    v = NONNEG(text)
    if v > 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a share from 0 to 1")
    return float(v)


def CURRENCY(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z]{3}", text.strip()):
        raise argparse.ArgumentTypeError(f"'{text}' is not a currency code: write e.g. USD or EUR")
    return text.strip().upper()


def add_latest(p: argparse.ArgumentParser) -> None:
    p.add_argument("--latest", action="store_true",
                   help="a label several runs share means the newest of them (default: refuse, listing them)")


def add_json(p: argparse.ArgumentParser, what: str = "the table") -> None:
    p.add_argument("--json", help=f"also write {what} to this JSON file, numbers unformatted; - for stdout "
                   "(the table then goes to stderr)")


def add_db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="results database (default: $TOKENBENCH_DB or the user data dir)")


def engine_name(value: str) -> str:
    """An embedded engine's launcher name from any of its engine's names (the registry's); an unknown name as
    given, for argparse's choices to refuse."""
    eng = find(value)
    return eng.launcher if eng is not None and eng.launcher else value


def add_endpoint(g: argparse._ActionsContainer, engine: str, api: str | None = None, api_help: str = "") -> None:
    """The endpoint every measuring command talks to (sweep, depth, quality), one set of flags with one help
    each (SHARED_HELP): its URL or the embedded ``engine``, the model, the key, the tokenizer, and for the
    commands that send either kind of request the ``api`` they send by default."""
    g.add_argument("--url", help="OpenAI-compatible base URL (…/v1); omitted: start the embedded engine")
    g.add_argument("--model")
    if api is not None:
        g.add_argument("--api", choices=["completions", "chat"], default=api,
                       help=f"/v1/completions or /v1/chat/completions (default {api}: {api_help})")
    g.add_argument("--api-key")
    g.add_argument("--tokenizer")
    add_embedded(g, engine)


def add_embedded(g: argparse._ActionsContainer, default: str) -> None:
    g.add_argument("--engine", type=engine_name, default=default,
                   choices=LAUNCHERS,
                   help=f"embedded engine when no --url (default {default}); vllm and llama-server are made on "
                        "first use (minutes; see the README)")
    g.add_argument("--model-size", choices=["tiny", "small", "small-utf8"], default="tiny",
                   help="embedded model: tiny (0.9M parameters, default), small (140M), or small-utf8 (140M, "
                        "its tokens often pieces of a multi-byte character, as real models' on CJK or emoji)")
    g.add_argument("--quant", help="llama engines: a llama-quantize type for the embedded GGUF, e.g. Q8_0")
