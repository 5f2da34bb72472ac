"""``tokenbench compare``'s options: the grammar ``--help`` is built from. What the command does is in
``cli/compare.py``, imported only when it runs."""
from __future__ import annotations

from typing import Any

from ..options import POSITIVE_INT, RUN_REF, add_db, add_json, add_latest


def add_compare_parser(sub: Any) -> None:
    """``tokenbench compare``'s options."""
    c = sub.add_parser("compare", help="two runs side by side: ratios with 95%% intervals, the faster side where it is "
                       "significant, crossovers, effective serving")
    c.add_argument("a", metavar="RUN_A", help=f"the first run: {RUN_REF}")
    c.add_argument("b", metavar="RUN_B", help=f"the second run: {RUN_REF}")
    # default None: given, they are said to apply to neither sessions nor replays, where no effective line is
    c.add_argument("--agents", type=POSITIVE_INT, help="effective-serving line: this many agents ... (default 16)")
    c.add_argument("--tokens", type=POSITIVE_INT, help="... each asking for this many tokens (default 200)")
    c.add_argument("--format", choices=["table", "markdown"], default="table")
    add_json(c, "the comparison")
    add_latest(c)
    add_db(c)
