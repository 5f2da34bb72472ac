"""Background asyncio tasks that sample while a level runs."""

from __future__ import annotations

import asyncio


async def cancel_and_wait(task: asyncio.Task[None] | None) -> None:
    """Stop a sampling task and wait until it has stopped."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
