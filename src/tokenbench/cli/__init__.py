"""Command line: parses, builds a typed config, calls one library function, prints.

``main(argv)`` returns the exit code so tests call it in-process; only ``entrypoint()`` reads sys.argv.
The commands live by what they do: ``measure.py``, ``predicting.py``, ``analysis.py``; the grammar in
``parser.py``.
"""

from __future__ import annotations

import sys

from rich.console import Console

from ..errors import TokenbenchError
from .analysis import cmd_compare, cmd_cost, cmd_import, cmd_recommend, cmd_report
from .measure import cmd_coldstart, cmd_depth, cmd_guard, cmd_runs, cmd_show, cmd_sweep
from .parser import build_parser
from .predicting import cmd_calibrate, cmd_catalog, cmd_fit, cmd_predict

__all__ = ["main", "entrypoint"]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # A table piped to a file or a CI log keeps its width instead of wrapping at 80 columns.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    err = Console(stderr=True, highlight=False)
    parser = build_parser()
    a = parser.parse_args(argv)
    handlers = {
        "sweep": lambda: cmd_sweep(a, argv, console, err),
        "runs": lambda: cmd_runs(a, console),
        "show": lambda: cmd_show(a, console),
        "coldstart": lambda: cmd_coldstart(a, argv, console),
        "guard": lambda: cmd_guard(a, console),
        "depth": lambda: cmd_depth(a, argv, console, err),
        "hardware": lambda: cmd_catalog(a, console),
        "models": lambda: cmd_catalog(a, console),
        "fit": lambda: cmd_fit(a, console),
        "predict": lambda: cmd_predict(a, console),
        "calibrate": lambda: cmd_calibrate(a, argv, console),
        "compare": lambda: cmd_compare(a, console),
        "cost": lambda: cmd_cost(a, console),
        "import": lambda: cmd_import(a, console),
        "report": lambda: cmd_report(a, console),
        "recommend": lambda: cmd_recommend(a, console),
    }
    try:
        return int(handlers[a.command]())
    except TokenbenchError as e:
        # One line, never wrapped: scripts and people grep it.
        first, *rest = str(e).splitlines() or [""]
        print(f"tokenbench: error: {first}", file=sys.stderr)
        if rest:  # e.g. an engine's log tail, after the one line
            print("\n".join(rest), file=sys.stderr)
        return e.exit_code


def entrypoint() -> None:
    sys.exit(main())
