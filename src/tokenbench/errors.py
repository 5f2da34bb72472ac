"""Errors a user can act on: each carries a one-line message that says what to do."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .results import RunResult


class TokenbenchError(Exception):
    """Base: the CLI prints ``str(err)`` on one line and exits non-zero. ``run_id`` and ``result``: the stored run
    this error ended and that run as ``reader.load_result`` reads it back (its finished levels or items, its
    final state), set by ``endpoint.RunLog.abort`` once the run is closed, so the CLI shows and writes that run
    and no other (None: the error came before a run was stored)."""

    exit_code = 2
    run_id: str | None = None
    result: RunResult | None = None


class UsageError(TokenbenchError):
    """Bad command-line input."""


class EndpointError(TokenbenchError):
    """The endpoint cannot be used (unreachable, wrong model, refuses the request)."""

    exit_code = 3


class EngineError(TokenbenchError):
    """The embedded engine could not be built or started."""

    exit_code = 4


class LevelFailed(TokenbenchError):
    """A level produced results that must not be published (e.g. the server truncated prompts)."""

    exit_code = 5


class RunInterrupted(TokenbenchError):
    """The user stopped a stored run (Ctrl-C, SIGTERM, SIGHUP), or a caller cancelled the task running it (a
    library user's ``asyncio.wait_for``): raised by the runner in the interrupt's place once the run is closed
    as interrupted, carrying it (``run_id``, ``result``). An interrupt before any run was stored stays a
    KeyboardInterrupt (or the CancelledError)."""

    exit_code = 130
