"""``tokenbench guard``: the clean-bench checks on this machine, now; the table ``show --guard`` prints too."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from ..guard_results import GuardSnapshot
from ..console import print_table
from .common import check_output, emit_json, guard_targets
from typing import Any


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


def add_guard_parser(sub: Any) -> None:
    """``tokenbench guard``'s options."""
    gd = sub.add_parser("guard", help="check the machine is clean enough to measure (exit 1 if not)",
                        description="Check this machine is clean enough to measure: each check with what it "
                        "observed, its threshold and advice. Exit 0 when it is clean (no check failed; a check "
                        "at severity warn, or one this machine cannot read, does not make it dirty), 1 when it is "
                        "dirty (a check failed), 2 on bad arguments or input (a --guard-config that is missing or "
                        "refused, a --json that cannot be written), 130 when interrupted; --json is written on 0 "
                        "and 1, so a script can ask `tokenbench guard && ...`.")
    gd.add_argument("--guard-config", help="guard thresholds TOML (default: packaged, then the user config dir)")
    gd.add_argument("--url", help="the server to be measured, if on this machine (not counted against the bench)")
    gd.add_argument("--root", default="/", help=argparse.SUPPRESS)
    gd.add_argument("--json", help="write the snapshot to this JSON file; - for stdout")
