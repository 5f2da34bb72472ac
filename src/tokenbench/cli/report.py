"""``tokenbench report``: its typed config (``report.document.ReportConfig``) and the exporters it
writes with."""
from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from ..errors import UsageError
from .common import check_output, check_output_dir, write_stdout

if TYPE_CHECKING:
    from ..report.document import ReportConfig


def report_config(a: argparse.Namespace) -> ReportConfig:
    from ..report.document import ReportConfig

    return ReportConfig(tuple(a.runs), a.latest, a.title, a.price_per_hour, a.currency, a.db)


def cmd_report(a: argparse.Namespace, console: Console) -> int:
    from ..report.document import report
    from ..report.export import EXPORTERS, JsonExport

    asked = [(e, Path(p)) for e in EXPORTERS if (p := getattr(a, e.option[2:]))]
    if not asked:
        raise UsageError("say what to write: " + ", ".join(f"{e.option} {e.target.upper()}" for e in EXPORTERS))
    for e, path in asked:  # refused before anything is read or written
        if e.needs is not None and importlib.util.find_spec(e.needs) is None:
            raise UsageError(f"{e.option} needs {e.needs}: pip install 'tokenbench[report]' (in a clone: "
                             "pip install -e '.[report]')")
        if str(path) == "-" and not isinstance(e, JsonExport):
            raise UsageError(f"{e.option} -: only --json writes to stdout; give {e.option} a file name")
        (check_output if e.target == "file" else check_output_dir)(str(path), e.option)
    rep = report(report_config(a))
    for e, path in asked:
        if isinstance(e, JsonExport) and str(path) == "-":  # the document alone on stdout, as every --json -
            write_stdout(e.text(rep))
            continue
        try:
            said = e.write(rep, path)
        except OSError as err:  # a place no check can foresee: /proc, a full disk, a folder made read-only since
            raise UsageError(f"{e.option} {path}: cannot write it ({err.strerror or type(err).__name__})") from None
        console.print(said, markup=False)
    return 0
