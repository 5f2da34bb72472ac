"""A level's warm-up, watched. Its requests are sent before the level's time starts, so no grace cuts them: each
waits for the server as long as any request may, until ``--stall-timeout`` (60 s without a byte) or ``--timeout``
fails it. A warm-up is where a server pays its one-time costs (a first batch of a shape compiled, a model loaded on
first use), so it has no shorter bound of its own: one would fail a healthy server still warming, or start the level
on a server not yet warm. What it waits for is said instead, where a stalled warm-up said nothing for 60 s:

- past ``WARMUP_QUIET_S`` the progress line says the warm-up is waiting on the server, for how long its
  longest-waiting request has been out, against the stall limit (``watched``);
- a warm-up request that failed at a limit is named in a warning, with how long it had waited, and one the server
  answered with an error with that error (``failures``).

The client reads a stream's bytes into tokens after it ends, so while a request is out it knows only when it was
sent: the wait said is from its send, and a stream that is still sending tokens waits on the server too."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .grace import CUT_KINDS, Waiting, told_until
from .layout import plural
from .records import RequestRecord

T = TypeVar("T")

#: Seconds a warm-up request waits before the progress line says the warm-up is waiting on the server: longer
#: than a healthy server's first token, so a short warm-up says nothing.
WARMUP_QUIET_S = 5.0

#: The requests a phase has in flight, and when the one that has waited longest was sent (perf_counter_ns; None:
#: none, or not known)
InFlight = Callable[[], tuple[int, int | None]]

#: The error kinds of a request the client gave up on at one of its limits, and the flag that sets it
LIMITS = {"stall": "--stall-timeout", "timeout": "--timeout"}


def in_flight(records: list[RequestRecord]) -> InFlight:
    """``InFlight`` read off a warm-up's records (a few: one a slot, by default)."""
    def read() -> tuple[int, int | None]:
        sent = [r.sent_ns for r in records
                if r.phase == "warmup" and r.end_ns is None and r.error_kind is None and r.sent_ns]
        return len(sent), min(sent, default=None)

    return read


async def watched(phase: Awaitable[T], out: InFlight, stall_s: float, waiting: Waiting | None) -> T:
    """Run a warm-up ``phase``; every WAIT_TICK_S, once a request of it has been out WARMUP_QUIET_S, tell
    ``waiting`` how long it has waited on the server, against ``stall_s``. Cancelling this cancels the phase."""
    task = asyncio.ensure_future(phase)
    if waiting is None:
        return await task
    def say(now: int) -> str | None:
        n, since = out()
        waited_s = 0.0 if since is None else (now - since) / 1e9
        return waiting_on_server(n, waited_s, stall_s) if n and waited_s >= WARMUP_QUIET_S else None

    try:
        await told_until(task, say, None, waiting)
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise
    finally:
        waiting(None)
    return task.result()


def waiting_on_server(n: int, waited_s: float, stall_s: float) -> str:
    """The progress line of a warm-up that has waited ``waited_s`` on the server."""
    return (f"warm-up: waiting on the server for {waited_s:,.0f} s ({plural(n, 'request')}; "
            f"--stall-timeout {stall_s:g}s)")


def failures(records: list[RequestRecord]) -> str | None:
    """A warning for the warm-up requests among ``records`` that failed: those the client gave up on at a limit (a
    stall, the request's time), how many and after how long, and those the server answered with an error (an
    HTTP 500 at first use), by kind with the first one's message; None where none did. The level goes on: its
    measured requests meet the server as it is."""
    warm = [r for r in records if r.phase == "warmup"]
    limited = [r for r in warm if r.error_kind in LIMITS]
    errors = [r for r in warm if r.error_kind is not None and r.error_kind not in LIMITS and r.error_kind not in CUT_KINDS]
    if not limited and not errors:
        return None
    kinds = sorted({r.error_kind for r in errors if r.error_kind is not None})
    answered = "; ".join(f"{k}: {next(r.error for r in errors if r.error_kind == k)}" for k in kinds)
    if not limited:
        return f"the warm-up failed: {len(errors)} of {plural(len(warm), 'warm-up request')} failed, {answered}; " \
            "the level goes on"
    what = "failed" if errors or len({r.error_kind for r in limited}) > 1 else \
        "stalled" if limited[0].error_kind == "stall" else "ran out of time"
    also = f"; {len(errors)} with an error, {answered}" if errors else ""
    return f"the warm-up {what}: {len(limited)} of {plural(len(warm), 'warm-up request')} failed " \
        f"{_at_a_limit(limited)}{also}; the level goes on"


def _at_a_limit(failed: list[RequestRecord]) -> str:
    """The warm-up requests the client gave up on at a limit: after how long, and which limit."""
    longest = max(((r.end_ns or r.sent_ns) - r.sent_ns) / 1e9 for r in failed)
    kinds = sorted({r.error_kind for r in failed if r.error_kind is not None})
    after = f"after {longest:,.1f} s" if len(failed) == 1 else f"after up to {longest:,.1f} s"
    return f"{after}, " + "; ".join(f"{next(r.error for r in failed if r.error_kind == k)} ({LIMITS[k]})"
                                   for k in kinds)
