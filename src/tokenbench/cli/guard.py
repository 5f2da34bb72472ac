"""``tokenbench guard``: the clean-bench checks on this machine, now; the table ``show --guard`` prints too."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from ..errors import UsageError
from ..guard_results import GuardSnapshot
from ..console import print_noted
from .common import check_output, emit_json, guard_targets


def guard_rows(snap: GuardSnapshot) -> tuple[list[str], list[list[str]]]:
    return (["Check", "Status", "Observed", "Threshold", "Advice"],
            [[c.name, c.status, c.observed, c.threshold, c.advice] for c in snap.results])


#: The column of guard_rows that holds sentences: under each check's row where the table is too narrow for it.
ADVICE = 4


def print_guard(console: Console, snap: GuardSnapshot, fmt: str = "table", title: str | None = None) -> None:
    """A snapshot's checks as a table, each check's advice under its row where the width leaves it no room."""
    print_noted(console, *guard_rows(snap), ADVICE, fmt, title=title)


def _check_target(url: str) -> None:
    """--url names the server measured, found by its port: one that names none would count it as other work."""
    from urllib.parse import urlsplit

    from ..servers import normalize_base_url

    base = normalize_base_url(url) if url.strip() else ""  # refuses another scheme, a bad port, credentials
    if not base or urlsplit(base).port is None:
        raise UsageError(f"--url '{url}': give the measured server's URL with its port, e.g. "
                         "http://127.0.0.1:8080/v1 (the guard leaves out the processes listening there)")


def cmd_guard(a: argparse.Namespace, console: Console) -> int:
    from .. import guard

    check_output(a.json, "--json")  # before the checks' seconds of sampling: an unwritable file is bad input (2)
    if a.url is not None:
        _check_target(a.url)
    env = guard.GuardEnv(root=Path(a.root), config=guard.load_config(Path(a.guard_config) if a.guard_config else None),
                         target_pids=guard_targets(a.url) if a.url else set())
    snap = guard.snapshot(env)
    print_guard(console, snap)
    console.print("DIRTY: fix the failed checks before measuring" if snap.dirty else "clean: ready to measure",
                  markup=False)
    if a.json:
        emit_json(a.json, snap.to_dict())
    return 1 if snap.dirty else 0
