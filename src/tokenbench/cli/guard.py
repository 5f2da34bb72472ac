"""``tokenbench guard``: the clean-bench checks on this machine, now; the table ``show --guard`` prints too."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from ..guard_results import GuardSnapshot
from ..console import print_table
from .common import check_output, emit_json, guard_targets


def guard_rows(snap: GuardSnapshot) -> tuple[list[str], list[list[str]]]:
    return (["Check", "Status", "Observed", "Threshold", "Advice"],
            [[c.name, c.status, c.observed, c.threshold, c.advice] for c in snap.results])


def cmd_guard(a: argparse.Namespace, console: Console) -> int:
    from .. import guard

    check_output(a.json, "--json")  # before the checks' seconds of sampling: an unwritable file is bad input (2)
    env = guard.GuardEnv(root=Path(a.root), config=guard.load_config(Path(a.guard_config) if a.guard_config else None),
                         target_pids=guard_targets(a.url) if a.url else set())
    snap = guard.snapshot(env)
    print_table(console, *guard_rows(snap))
    console.print("DIRTY: fix the failed checks before measuring" if snap.dirty else "clean: ready to measure",
                  markup=False)
    if a.json:
        emit_json(a.json, snap.to_dict())
    return 1 if snap.dirty else 0
