"""``tokenbench engines``: which embedded engines are built, and building them."""

from __future__ import annotations

import argparse

from rich.console import Console

from ..errors import UsageError
from ..console import print_table
from .common import check_output, emit_json, notifier
from .options import add_json
from typing import Any


def cmd_engines(a: argparse.Namespace, console: Console, err: Console) -> int:
    from ..engines import status

    check_output(a.json, "--json")
    names = list(status.NAMES) if not a.names or a.names == ["all"] else a.names
    bad = [n for n in names if n not in status.NAMES and not status.known(n)]
    if bad:
        raise UsageError(f"unknown engine {bad[0]!r}: use {', '.join(status.NAMES)} or all")
    if a.build:
        note = notifier(err)
        for n in names:
            status.build(n, note)  # returns at once for an engine that is ready
    states = [status.status(n) for n in names]
    rows = [[s.name, "ready" if s.ready else "not yet", s.where, s.needs] for s in states]
    print_table(console, ["Engine", "State", "Where", "What it needs"], rows)
    if a.json:
        emit_json(a.json, [{"engine": s.name, "ready": s.ready, "where": s.where, "needs": s.needs} for s in states])
    return 0


def add_engines_parser(sub: Any) -> None:
    """``tokenbench engines``'s options."""
    en = sub.add_parser("engines", help="the embedded engines: which are ready, what each needs; build them")
    en.add_argument("build", nargs="?", choices=["build"], help="make the named engines ready now")
    en.add_argument("names", nargs="*", metavar="ENGINE",
                    help="transformers, vllm, llama-server, llama-cpp-python, aiperf (a reference tool), or all")
    add_json(en, "each engine's state")
