"""Errors a user can act on: each carries a one-line message that says what to do."""

from __future__ import annotations


class TokenbenchError(Exception):
    """Base: the CLI prints ``str(err)`` on one line and exits non-zero."""

    exit_code = 2


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
