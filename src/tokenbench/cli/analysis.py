"""Commands that read the store and have no module of their own: import, export and report (compare, cost and
recommend are in ``compare.py``, ``cost.py`` and ``recommend.py``)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any
from rich.console import Console
from ..errors import UsageError
from ..store import Store
from .common import check_output
from .options import CURRENCY, POSITIVE, add_db, add_latest

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
    for e, path in asked:  # refused before anything is read
        if e.target == "file":
            check_output(str(path), e.option)
        elif path.exists() and not path.is_dir():
            raise UsageError(f"{e.option} {path} is a file: give a directory")
    rep = report(report_config(a))
    for e, path in asked:
        console.print(e.write(rep, path), markup=False)
    return 0


def cmd_import(a: argparse.Namespace, console: Console) -> int:
    from ..importers import import_files

    store = Store(a.db)
    # every file parsed before any is stored: a bad file leaves the database as it was
    for f, (fmt, ids, new) in zip(a.files, import_files(store, [Path(f) for f in a.files], a.label)):
        labels = sorted({store.resolve(i).label or i for i in ids})
        shown = ", ".join(labels[:6]) + (" ..." if len(labels) > 6 else "")
        if new:
            console.print(f"{f}: {fmt}, {len(ids)} run(s) imported: {shown}", markup=False, highlight=False)
        else:
            console.print(f"{f}: imported before, as {len(ids)} run(s) ({', '.join(ids[:3])}): not imported again",
                          markup=False, highlight=False)
    return 0


def cmd_export(a: argparse.Namespace, console: Console) -> int:
    import sys

    from ..exports import Placing, export
    from ..reader import load_result

    check_output(a.out, "--out")
    store = Store(a.db, readonly=True)
    run = load_result(store, a.run, latest=a.latest, kinds=("sweep", "depth", "bench", "predict"), command="export")
    text = export(run, a.as_, Placing(a.hardware, a.model, a.engine, a.weights, a.kv))
    if a.out in (None, "-"):
        sys.stdout.write(text)
    else:
        Path(a.out).write_text(text, encoding="utf-8")
        console.print(f"wrote run {run.run_id} to {a.out} ({a.as_})", markup=False, highlight=False)
    return 0


def add_export_parser(sub: Any) -> None:
    """``tokenbench export``'s options."""
    from ..exports import FORMATS

    ex = sub.add_parser("export", help="a stored run as published.csv rows or a llama-bench Markdown table, which "
                        "import reads back")
    ex.add_argument("run", help="run id, id prefix or label")
    ex.add_argument("--as", dest="as_", choices=FORMATS, required=True,
                    help="published-csv: the rows calibrate reads, with the engine build, guard stamp and machine "
                    "snapshot; llama-bench-md: llama-bench's Markdown table (depth and llama-bench runs)")
    ex.add_argument("--out", help="write here (default: stdout)")
    place = ex.add_argument_group("published-csv: what the rows say of the box (default: what the run says)")
    place.add_argument("--hardware", help="the catalog box it ran on ('tokenbench hardware' lists ids)")
    place.add_argument("--model", help="the catalog model it served")
    place.add_argument("--engine", help="engine and backend, e.g. 'llama.cpp vulkan', vllm")
    place.add_argument("--weights", help="weight format, e.g. Q4_K_M, FP8")
    place.add_argument("--kv", help="KV cache format")
    add_latest(ex)
    add_db(ex)


def add_import_parser(sub: Any) -> None:
    """``tokenbench import``'s options."""
    im = sub.add_parser("import", help="vllm bench serve, llama-bench, llama-benchy, AIPerf, inference-perf, InferenceX, "
                        "GuideLLM or published.csv results into the store")
    im.add_argument("files", nargs="+")
    im.add_argument("--label", help="label for the imported runs (default: from the file)")
    add_db(im)


def add_report_parser(sub: Any) -> None:
    """``tokenbench report``'s options."""
    rp = sub.add_parser("report", help="Markdown (BENCHMARKS.md), a self-contained HTML report with plots, PNGs, JSON")
    rp.add_argument("runs", nargs="+", help="run ids, id prefixes or labels (predicted runs are drawn dashed)")
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

