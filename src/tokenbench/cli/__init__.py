"""Command line: parses, builds a typed config, calls one library function, prints.

``main(argv)`` returns the exit code so tests call it in-process; only ``entrypoint()`` reads sys.argv.
The commands live by what they do: one module each for ``sweep.py``, ``depth.py``, ``coldstart.py``, ``guard.py``,
``engines.py``, ``capacity.py``, ``quality.py``, ``compare.py``, ``cost.py``, ``recommend.py``, ``report.py`` and
``record.py``; ``predicting.py`` (fit, predict, calibrate, the catalogs), ``import_export.py`` (import, export),
``runs.py`` (runs and show); the grammar in ``parser.py``, its shared parts in ``options.py``, each command's options
in ``grammar/``. A command's module is imported only when it runs: ``--help`` and a bad argument import the grammar
alone, not the HTTP client, the engines or the store.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import signal
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from .. import redact
from ..errors import RunInterrupted, TokenbenchError
from ..spelling import readable_output
from .parser import build_parser

__all__ = ["main", "entrypoint"]

INTERNAL_ERROR = 70  # EX_SOFTWARE


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        a = parser.parse_args(_negatives_attached(argv))
    except SystemExit as e:  # --help, or a one-line argument error already printed
        return int(e.code or 0)
    from ..console import ReadableConsole as Console  # Rich: only for a command that runs

    # A table piped to a file or a CI log keeps its width instead of wrapping at 80 columns.
    # markup off: a label or model name like "[/bold]" is text, not a style (it used to crash the tables)
    # stderr alike: its progress and notes beside the table in one log (2>&1) at the table's width
    console = Console(highlight=False, markup=False, width=_width(sys.stdout))
    err = Console(stderr=True, highlight=False, markup=False, width=_width(sys.stderr))
    if getattr(a, "json", None) == "-":  # the JSON owns stdout: tables and messages go to stderr
        console = Console(stderr=True, highlight=False, markup=False, width=_width(sys.stderr))
    handlers = {
        "sweep": lambda: _handler("sweep:cmd_sweep")(a, argv, console, err),
        "capacity": lambda: _handler("capacity:cmd_capacity")(a, argv, console, err),
        "runs": lambda: _handler("runs:cmd_runs")(a, console),
        "show": lambda: _handler("runs:cmd_show")(a, console),
        "coldstart": lambda: _handler("coldstart:cmd_coldstart")(a, argv, console),
        "guard": lambda: _handler("guard:cmd_guard")(a, console),
        "agent": lambda: _handler("agent:cmd_agent")(a, console),
        "engines": lambda: _handler("engines:cmd_engines")(a, console, err),
        "depth": lambda: _handler("depth:cmd_depth")(a, argv, console, err),
        "hardware": lambda: _handler("predicting:cmd_catalog")(a, console),
        "models": lambda: _handler("predicting:cmd_catalog")(a, console),
        "fit": lambda: _handler("predicting:cmd_fit")(a, console),
        "predict": lambda: _handler("predicting:cmd_predict")(a, console),
        "calibrate": lambda: _handler("predicting:cmd_calibrate")(a, argv, console),
        "compare": lambda: _handler("compare:cmd_compare")(a, console),
        "cost": lambda: _handler("cost:cmd_cost")(a, console),
        "import": lambda: _handler("import_export:cmd_import")(a, console),
        "export": lambda: _handler("import_export:cmd_export")(a, console, err),
        "report": lambda: _handler("report:cmd_report")(a, console),
        "recommend": lambda: _handler("recommend:cmd_recommend")(a, console),
        "quality": lambda: _handler("quality:cmd_quality")(a, argv, console, err),
        "record": lambda: _handler("record:cmd_record")(a, console),
    }
    try:
        from .common import refuse_embedded_with_url

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


def _width(stream: TextIO) -> int | None:
    """A console's width: $COLUMNS when set (Rich reads it), a terminal's own, else 160 (a pipe, a log), so tables
    keep their columns."""
    return None if stream.isatty() or "COLUMNS" in os.environ else 160


def _handler(where: str) -> Callable[..., int]:
    """The command function ``where`` names ("sweep:cmd_sweep": a module of this package, a function in it), its
    module imported now: what a command needs only to run (the HTTP client, the engines, the store) is read when
    it runs, never for ``--help`` or a bad argument."""
    module, _, function = where.partition(":")
    handler: Callable[..., int] = getattr(importlib.import_module(f"{__name__}.{module}"), function)
    return handler


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
