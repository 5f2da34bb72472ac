"""``tokenbench guard``'s options: the grammar ``--help`` is built from. What the command does is in
``cli/guard.py``, imported only when it runs."""
from __future__ import annotations

import argparse
from typing import Any



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
