"""``tokenbench import`` and ``tokenbench export``: other tools' results into the store, and a stored run out in
a shape another tool (or calibrate) reads, which import reads back."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from ..store import Store
from .common import check_output, write_stdout
from .options import LABEL, RUN_REF, add_db, add_latest
from ..layout import plural


def cmd_import(a: argparse.Namespace, console: Console) -> int:
    from ..importers import import_files

    store = Store(a.db)
    # every file parsed before any is stored: a bad file leaves the database as it was
    for f, (fmt, ids, new) in zip(a.files, import_files(store, [Path(f) for f in a.files], a.label)):
        labels = sorted({store.resolve(i).label or i for i in ids})
        shown = ", ".join(labels[:6]) + (" ..." if len(labels) > 6 else "")
        if new:
            console.print(f"{f}: {fmt}, {plural(len(ids), 'run')} imported: {shown}", markup=False, highlight=False)
        else:
            console.print(f"{f}: imported before, as {plural(len(ids), 'run')} ({', '.join(ids[:3])}): not imported again",
                          markup=False, highlight=False)
    return 0


def cmd_export(a: argparse.Namespace, console: Console, err: Console) -> int:
    from ..exports import Placing, export, unkept
    from ..reader import load_result

    check_output(a.out, "--out")
    store = Store(a.db, readonly=True)
    run = load_result(store, a.run, latest=a.latest, kinds=("sweep", "depth", "bench", "predict"), command="export")
    text = export(run, a.as_, Placing(a.hardware, a.model, a.engine, a.weights, a.kv))
    if lost := unkept(run, a.as_):
        err.print(lost, markup=False, highlight=False, soft_wrap=True)  # stderr: the rows may be going to stdout
    if a.out in (None, "-"):
        write_stdout(text)
    else:
        Path(a.out).write_text(text, encoding="utf-8")
        console.print(f"wrote run {run.run_id} to {a.out} ({a.as_})", markup=False, highlight=False)
    return 0


def add_export_parser(sub: Any) -> None:
    """``tokenbench export``'s options."""
    from ..exports import FORMATS

    ex = sub.add_parser("export", help="a stored run as published.csv rows or a llama-bench Markdown table, which "
                        "import reads back")
    ex.add_argument("run", help=f"the run: {RUN_REF}")
    ex.add_argument("--as", dest="as_", choices=FORMATS, required=True,
                    help="published-csv: the rows calibrate reads, with the engine build, each level's guard verdict, "
                    "flags, requests and errors in its rows' note, and the machine snapshot; llama-bench-md: "
                    "llama-bench's Markdown table (depth and llama-bench runs)")
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
    im.add_argument("files", nargs="+", metavar="FILE", help="a result file of vllm bench serve, llama-bench, "
                    "llama-benchy, AIPerf, inference-perf, InferenceX or GuideLLM, or a published.csv (the format is "
                    "read from the file)")
    im.add_argument("--label", type=LABEL, help="label for the imported runs (default: from the file)")
    add_db(im)
