"""``tokenbench runs``' and ``show``'s options: the grammar ``--help`` is built from. What the command does is in
``cli/runs.py``, imported only when it runs."""
from __future__ import annotations

from typing import Any

from ..options import POSITIVE_INT, RUN_REF, add_db, add_json, add_latest


def add_runs_parser(sub: Any) -> None:
    """``tokenbench runs``'s options."""
    r = sub.add_parser("runs", help="list saved runs")
    r.add_argument("--limit", type=POSITIVE_INT, default=30, help="the newest this many runs (default 30)")
    add_json(r, "the list")
    add_db(r)


def add_show_parser(sub: Any) -> None:
    """``tokenbench show``'s options."""
    sh = sub.add_parser("show", help="print a saved run again")
    sh.add_argument("run", help=f"the run: {RUN_REF}")
    sh.add_argument("--json", help="also write it to this JSON file (every level); - for stdout")
    sh.add_argument("--all", action="store_true", help="print every level (default: the first 200)")
    one = sh.add_mutually_exclusive_group()
    one.add_argument("--guard", nargs="?", const=0, type=POSITIVE_INT, metavar="LEVEL",
                     help="print the guard's snapshot taken before each level, or before level LEVEL (1 is the first)")
    one.add_argument("--trees", nargs="?", const=0, type=POSITIVE_INT, metavar="LEVEL",
                     help="a replay's trees one by one (sweep --trace of agents): each finished or cut, its time, "
                          "calls, subagents and TTFT p50; every replay level's, or level LEVEL's")
    sh.add_argument("--format", choices=["table", "markdown"], default="table")
    add_latest(sh)
    add_db(sh)
