"""The console script. An interrupt (Ctrl-C, SIGTERM, SIGHUP) while Python still reads tokenbench's modules, or
before a command takes over the signals (cli._terminate_as_interrupt), ends it as one during a run does: one line
and exit 130, not a traceback (Ctrl-C) or a kill (SIGTERM's 143). Imports nothing of tokenbench until then."""

from __future__ import annotations

import signal
import sys
from typing import Any


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def run() -> None:
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:  # nohup's SIG_IGN is kept
            signal.signal(sig, _interrupt)
    try:
        from .cli import entrypoint

        entrypoint()
    except KeyboardInterrupt:
        print("tokenbench: interrupted", file=sys.stderr)
        sys.exit(130)
