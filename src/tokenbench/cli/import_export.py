"""``tokenbench import`` and ``tokenbench export``: other tools' results into the store, and a stored run out in
a shape another tool (or calibrate) reads, which import reads back."""
from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from ..store import Store
from .common import check_output, write_stdout
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
    from ..exports import Placing, export, unfinished, unkept
    from ..reader import load_result

    check_output(a.out, "--out")
    store = Store(a.db, readonly=True)
    run = load_result(store, a.run, latest=a.latest, kinds=("sweep", "depth", "bench", "predict"), command="export")
    text = export(run, a.as_, Placing(a.hardware, a.model, a.engine, a.weights, a.kv))
    cut = unfinished(run)
    for lost in (unkept(run, a.as_),
                 f"run {run.manifest.label or run.run_id} {cut}: its rows are of the levels it finished" if cut else None):
        if lost:
            err.print(lost, markup=False, highlight=False, soft_wrap=True)  # stderr: the rows may be going to stdout
    if a.out in (None, "-"):
        write_stdout(text)
    else:
        Path(a.out).write_text(text, encoding="utf-8")
        console.print(f"wrote run {run.run_id} to {a.out} ({a.as_})", markup=False, highlight=False)
    return 0
