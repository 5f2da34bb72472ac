"""Command line: parses, builds a typed config, calls one library function, prints.

``main(argv)`` returns the exit code so tests call it in-process; only ``entrypoint()`` reads sys.argv.
The commands live by what they do: one module each for ``sweep.py``, ``depth.py``, ``coldstart.py``, ``guard.py``,
``engines.py``, ``capacity.py``, ``quality.py``, ``compare.py``, ``cost.py``, ``recommend.py``, ``report.py`` and
``record.py``; ``predicting.py`` (fit, predict, calibrate, the catalogs), ``import_export.py`` (import, export),
``runs.py`` (runs and show); the grammar in ``parser.py``, its shared parts in ``options.py``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .. import redact
from ..errors import RunInterrupted, TokenbenchError
from ..console import ReadableConsole as Console
from ..console import readable_output
from .agent import cmd_agent
from .capacity import cmd_capacity
from .import_export import cmd_export, cmd_import
from .report import cmd_report
from .coldstart import cmd_coldstart
from .common import refuse_embedded_with_url
from .compare import cmd_compare
from .cost import cmd_cost
from .depth import cmd_depth
from .engines import cmd_engines
from .guard import cmd_guard
from .sweep import cmd_sweep
from .parser import build_parser
from .predicting import cmd_calibrate, cmd_catalog, cmd_fit, cmd_predict
from .quality import cmd_quality
from .recommend import cmd_recommend
from .record import cmd_record
from .runs import cmd_runs, cmd_show

__all__ = ["main", "entrypoint"]

INTERNAL_ERROR = 70  # EX_SOFTWARE


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # A table piped to a file or a CI log keeps its width instead of wrapping at 80 columns.
    # markup off: a label or model name like "[/bold]" is text, not a style (it used to crash the tables)
    # $COLUMNS, when set, wins (Rich reads it); otherwise a pipe gets 160 so tables keep their columns in a log
    wide = sys.stdout.isatty() or "COLUMNS" in os.environ
    console = Console(highlight=False, markup=False, width=None if wide else 160)
    err = Console(stderr=True, highlight=False, markup=False)
    parser = build_parser()
    try:
        a = parser.parse_args(_negatives_attached(argv))
    except SystemExit as e:  # --help, or a one-line argument error already printed
        return int(e.code or 0)
    if getattr(a, "json", None) == "-":  # the JSON owns stdout: tables and messages go to stderr
        console = Console(stderr=True, highlight=False, markup=False)
    handlers = {
        "sweep": lambda: cmd_sweep(a, argv, console, err),
        "capacity": lambda: cmd_capacity(a, argv, console, err),
        "runs": lambda: cmd_runs(a, console),
        "show": lambda: cmd_show(a, console),
        "coldstart": lambda: cmd_coldstart(a, argv, console),
        "guard": lambda: cmd_guard(a, console),
        "agent": lambda: cmd_agent(a, console),
        "engines": lambda: cmd_engines(a, console, err),
        "depth": lambda: cmd_depth(a, argv, console, err),
        "hardware": lambda: cmd_catalog(a, console),
        "models": lambda: cmd_catalog(a, console),
        "fit": lambda: cmd_fit(a, console),
        "predict": lambda: cmd_predict(a, console),
        "calibrate": lambda: cmd_calibrate(a, argv, console),
        "compare": lambda: cmd_compare(a, console),
        "cost": lambda: cmd_cost(a, console),
        "import": lambda: cmd_import(a, console),
        "export": lambda: cmd_export(a, console, err),
        "report": lambda: cmd_report(a, console),
        "recommend": lambda: cmd_recommend(a, console),
        "quality": lambda: cmd_quality(a, argv, console, err),
        "record": lambda: cmd_record(a, console),
    }
    try:
        refuse_embedded_with_url(a, argv)
        with _terminate_as_interrupt():
            return int(handlers[a.command]())
    except RunInterrupted as e:  # a stored run the user stopped, closed as interrupted (the command showed it)
        print(f"tokenbench: {e}", file=sys.stderr)
        return e.exit_code
    except TokenbenchError as e:
        # One line, never wrapped where it is read by a program (a pipe, a log: scripts grep it); on a terminal
        # wrapped between words, as the terminal would cut it mid-word
        first, *rest = str(e).splitlines() or [""]
        print(_on_terminal(f"tokenbench: error: {first}"), file=sys.stderr)
        if rest:  # e.g. an engine's log tail, after the one line
            print("\n".join(rest), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:  # before any run was stored, or in a command that stores none
        print("tokenbench: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug in tokenbench: one line, the run (if any) already closed; the trace on request
        if os.environ.get("TOKENBENCH_DEBUG"):
            raise
        print(f"tokenbench: internal error: {type(e).__name__}: {redact.url(str(e))[:300]} (a bug: rerun with "
              "TOKENBENCH_DEBUG=1 for the traceback and report it)", file=sys.stderr)
        return INTERNAL_ERROR


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (timeout, Docker, CI cancellation) and SIGHUP (a closed terminal) end a run as Ctrl-C does: the
    level in progress is kept and marked interrupted, the run closed, the JSON written, exit 130."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wanted = [sig for sig in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if sig]
    before = {sig: signal.getsignal(sig) for sig in wanted}
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # a script's background job: asyncio installs its cancel-the-run handler only over Python's default one,
        # and a KeyboardInterrupt raised anywhere else could skip closing the run
        before[signal.SIGINT] = signal.SIG_IGN
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def as_interrupt(signum: int, frame: Any) -> None:
        handler = signal.getsignal(signal.SIGINT)  # asyncio's during a run: it cancels the run's task
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    for sig in wanted:
        signal.signal(sig, as_interrupt)
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def entrypoint() -> None:
    readable_output(sys.stdout, sys.stderr)  # an ASCII terminal (LANG=C, UTF-8 mode off) gets ASCII, not a crash
    sys.exit(main())


def _on_terminal(line: str) -> str:
    """``line`` wrapped between words to the terminal's width where stderr is one, each later line indented; as it
    is where stderr is a pipe or a file."""
    if not sys.stderr.isatty():
        return line
    width = shutil.get_terminal_size().columns
    return textwrap.fill(line, max(40, width), subsequent_indent="  ", break_long_words=False,
                         break_on_hyphens=False)


def _negatives_attached(argv: list[str]) -> list[str]:
    """A negative value with a unit after its option (``--duration -5s``) attached to it (``--duration=-5s``), so
    the option's own check says what it takes: argparse reads "-5s" as an option and said only "expected one
    argument". A plain negative number it takes as a value already; no option of tokenbench starts "-" and a digit,
    so the token was an error either way."""
    out: list[str] = []
    for k, tok in enumerate(argv):
        if tok == "--":  # what follows is positional, as written
            return out + argv[k:]
        prev = out[-1] if out else ""
        if re.match(r"-\d", tok) and not re.fullmatch(r"-\d+|-\d*\.\d+", tok) and prev.startswith("--") \
                and prev != "--" and "=" not in prev:
            out[-1] = f"{prev}={tok}"
        else:
            out.append(tok)
    return out
