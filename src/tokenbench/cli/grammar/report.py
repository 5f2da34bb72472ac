"""``tokenbench report``'s options: the grammar ``--help`` is built from. What the command does is in
``cli/report.py``, imported only when it runs."""
from __future__ import annotations

from typing import Any

from ..options import CURRENCY, POSITIVE, RUN_REF, add_db, add_latest


def add_report_parser(sub: Any) -> None:
    """``tokenbench report``'s options."""
    rp = sub.add_parser("report", help="Markdown (BENCHMARKS.md), a self-contained HTML report with plots, PNGs, JSON")
    rp.add_argument("runs", nargs="+", help=f"the runs, each by {RUN_REF} (predicted runs are drawn dashed)")
    rp.add_argument("--html", help="write the HTML report here")
    rp.add_argument("--md", help="append or rewrite each run's section of this Markdown file")
    rp.add_argument("--png", help="write each plot as a PNG into this directory")
    rp.add_argument("--json", help="write the runs, the plotted series and each pair compared as JSON here; - for "
                    "stdout")
    rp.add_argument("--price-per-hour", type=POSITIVE,
                    help="price per hour for the cost columns and plot (default: each run's own price, if it has one)")
    rp.add_argument("--currency", type=CURRENCY)
    rp.add_argument("--title", default="tokenbench report")
    add_latest(rp)
    add_db(rp)
