"""``tokenbench report``: its options, its typed config (``report.document.ReportConfig``) and the exporters it
writes with."""
from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from ..errors import UsageError
from .common import check_output, check_output_dir
from .options import CURRENCY, POSITIVE, RUN_REF, add_db, add_latest

if TYPE_CHECKING:
    from ..report.document import ReportConfig


def report_config(a: argparse.Namespace) -> ReportConfig:
    from ..report.document import ReportConfig

    return ReportConfig(tuple(a.runs), a.latest, a.title, a.price_per_hour, a.currency, a.db)


def cmd_report(a: argparse.Namespace, console: Console) -> int:
    from ..report.document import report
    from ..report.export import EXPORTERS

    asked = [(e, Path(p)) for e in EXPORTERS if (p := getattr(a, e.option[2:]))]
    if not asked:
        raise UsageError("say what to write: " + ", ".join(f"{e.option} {e.target.upper()}" for e in EXPORTERS))
    for e, path in asked:  # refused before anything is read or written
        if e.needs is not None and importlib.util.find_spec(e.needs) is None:
            raise UsageError(f"{e.option} needs {e.needs}: pip install 'tokenbench[report]' (in a clone: "
                             "pip install -e '.[report]')")
        (check_output if e.target == "file" else check_output_dir)(str(path), e.option)
    rep = report(report_config(a))
    for e, path in asked:
        console.print(e.write(rep, path), markup=False)
    return 0


def add_report_parser(sub: Any) -> None:
    """``tokenbench report``'s options."""
    rp = sub.add_parser("report", help="Markdown (BENCHMARKS.md), a self-contained HTML report with plots, PNGs, JSON")
    rp.add_argument("runs", nargs="+", help=f"the runs, each by {RUN_REF} (predicted runs are drawn dashed)")
    rp.add_argument("--html", help="write the HTML report here")
    rp.add_argument("--md", help="append or rewrite each run's section of this Markdown file")
    rp.add_argument("--png", help="write each plot as a PNG into this directory")
    rp.add_argument("--json", help="write the runs, the plotted series and each pair compared as JSON here")
    rp.add_argument("--price-per-hour", type=POSITIVE,
                    help="price per hour for the cost columns and plot (default: each run's own price, if it has one)")
    rp.add_argument("--currency", type=CURRENCY)
    rp.add_argument("--title", default="tokenbench report")
    add_latest(rp)
    add_db(rp)

