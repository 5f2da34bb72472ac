"""The driver's side of one worker, whatever carries it (a local process, a Ray actor), and how it fails."""

from __future__ import annotations

from typing import Any, Protocol


class WorkerLost(Exception):
    """A worker process or actor stopped answering: its finished records are kept, the level is partial."""


class Handle(Protocol):
    """The driver's side of one worker: a local process or a Ray actor."""

    name: str

    async def call(self, method: str, *args: Any) -> Any: ...
    async def close(self) -> None: ...
