"""The end of a level bounded by time (``--duration``): it stops sending at its end, and the calls still in flight
get a grace period (``--grace``) to answer. A call still running after it is cancelled and marked cut by the
level's end (``LEVEL_END``): a wedged server (a slot that admitted a request and never ran it) held a 20 s level
4 minutes, each call waiting for the stall limit. A cut call is neither a sample nor a failure of the server:
``errors`` counts it apart, as an interrupt's, and no latency or throughput reads it.

While it waits, the level says so (``Waiting``): the bar had reached its end and sat there, up to 30 s, with
nothing said."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from .finding import Code, Finding
from .layout import plural
from .records import RequestRecord

#: ``error_kind`` of a call still in flight when a duration's grace ran out, cancelled by the client
LEVEL_END = "level_end"
#: ``error_kind`` of a call in flight at an interrupt (Ctrl-C)
INTERRUPTED = "interrupted"
#: the kinds no server failed: calls cut short by the client (levels.LevelSummary.cut)
CUT_KINDS = frozenset({INTERRUPTED, LEVEL_END})
#: Seconds a duration-bounded level waits for its calls in flight after its end, as AIPerf's
#: --benchmark-grace-period: long enough for a healthy server's longest usual answer to finish (and count),
#: well under the 60 s stall limit that a wedged server's calls would otherwise each wait out.
DEFAULT_GRACE_S = 30.0
#: How often a wait past a level's end is told again (the requests still in flight, the time left)
WAIT_TICK_S = 0.5

#: Where a phase says what it waits for, as a line of text (progress.Reporter.waiting); None: it waits no more
Waiting = Callable[[str | None], None]


def mark_unfinished(records: Iterable[RequestRecord], kind: str, why: str) -> int:
    """Calls with no end and no error yet end now, as ``kind``; returns how many."""
    now = time.perf_counter_ns()
    n = 0
    for r in records:
        if r.end_ns is None and r.error_kind is None:
            r.error_kind, r.error, r.end_ns = kind, why, now
            n += 1
    return n


async def within_grace(work: Awaitable[Any], records: list[RequestRecord], stop_ns: int | None,
                       grace_s: float | None, waiting: Waiting | None = None,
                       in_flight: Callable[[], int] | None = None) -> bool:
    """Run ``work``: a level's sending and the calls it waits for. Where the level ends at ``stop_ns``
    (perf_counter_ns) and ``grace_s`` is not None, what is still running ``grace_s`` after it is cancelled, its
    calls in flight marked ``LEVEL_END``; returns whether it was. An interrupt cancels ``work`` as well and
    propagates (the caller marks what it cut). ``waiting``: told, past the level's end, how many calls are still
    in flight (``in_flight``, or those of ``records``) and how long the grace has left, until they are done."""
    task = asyncio.ensure_future(work)
    if stop_ns is None or (grace_s is None and waiting is None):
        await task  # cancelling this await cancels the work
        return False
    until_ns = None if grace_s is None else stop_ns + int(grace_s * 1e9)
    try:
        done = await _until(task, stop_ns)
        if not done:
            done = await _until(task, until_ns) if waiting is None else \
                await _told(task, in_flight or _left(records), until_ns, waiting)
    except asyncio.CancelledError:
        await _cancelled(task)
        raise
    finally:
        if waiting is not None:
            waiting(None)
    if done:
        task.result()
        return False
    await _cancelled(task)
    mark_unfinished(records, LEVEL_END, f"in flight {grace_s:g} s after the level's end (its grace): cancelled")
    return True


async def _until(task: asyncio.Future[Any], at_ns: int | None) -> bool:
    """Wait for ``task`` until ``at_ns`` (perf_counter_ns; None: for as long as it runs); whether it finished."""
    timeout = None if at_ns is None else max(0.0, (at_ns - time.perf_counter_ns()) / 1e9)
    done, _ = await asyncio.wait({task}, timeout=timeout)
    return bool(done)


def _left(records: list[RequestRecord]) -> Callable[[], int]:
    """How many of ``records`` are in flight, asked past the level's end: no call is sent after it, so the ones
    in flight then are the only ones to follow, and the records (a soak's run to millions) are read once."""
    left = [r for r in records if r.end_ns is None and r.error_kind is None]

    def count() -> int:
        left[:] = [r for r in left if r.end_ns is None and r.error_kind is None]
        return len(left)

    return count


async def _told(task: asyncio.Future[Any], in_flight: Callable[[], int], until_ns: int | None,
                waiting: Waiting) -> bool:
    """Past the level's end: wait for ``task`` until ``until_ns``, telling ``waiting`` every WAIT_TICK_S how
    many calls are still in flight."""
    def say(now: int) -> str | None:
        n = in_flight()
        return overtime(n, None if until_ns is None else (until_ns - now) / 1e9) if n else None

    return await told_until(task, say, until_ns, waiting)


async def told_until(task: asyncio.Future[Any], say: Callable[[int], str | None], until_ns: int | None,
                     waiting: Waiting) -> bool:
    """Wait for ``task`` until ``until_ns`` (perf_counter_ns; None: for as long as it runs), telling ``waiting``
    every WAIT_TICK_S what ``say`` says at that moment (None: nothing to say); whether it finished."""
    while True:
        now = time.perf_counter_ns()
        if until_ns is not None and now >= until_ns:
            return False
        waiting(say(now))
        tick_ns = now + int(WAIT_TICK_S * 1e9)
        if await _until(task, tick_ns if until_ns is None else min(tick_ns, until_ns)):
            return True


def overtime(in_flight: int, left_s: float | None) -> str:
    """What a level past its end waits for: its requests in flight, up to the grace's ``left_s`` (None: no
    bound, --grace inf)."""
    up_to = " (no bound: --grace inf)" if left_s is None else f", up to {max(1, math.ceil(left_s)):,} s more"
    return f"the level's time is up: waiting for {plural(in_flight, 'request')} in flight{up_to}"


async def _cancelled(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` (a gather cancels what it gathers) and wait until it has stopped."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass


def waited_ms(r: RequestRecord) -> float:
    """How long a request cut at a level's end had waited when it was cut (ms): its TTFT, had it none yet, and its
    end-to-end time are at least that."""
    return ((r.end_ns or r.sent_ns) - r.sent_ns) / 1e6


def known_over(measured: list[RequestRecord], metric: str, limit_ms: float) -> list[float]:
    """The requests a level's end cut whose ``metric`` (ttft, e2e) is known to be over ``limit_ms`` already: each
    one's wait, a lower bound of it. A wedged server's calls are cut, not answered; without these an SLO over the
    answered ones would pass the server that wedged."""
    if metric not in ("ttft", "e2e"):
        return []
    return [w for r in measured if r.error_kind == LEVEL_END and (metric == "e2e" or r.first_token_ns is None)
            and (w := waited_ms(r)) > limit_ms]


def unanswered(measured: list[RequestRecord], grace_s: float | None = None) -> Finding | None:
    """Requests still unanswered at a level's end and its grace: the figures are the answered ones', and a server
    that stalls reads fast on those. With ``--grace 0s`` every request in flight at the end is cut, as asked: a
    note, not a server's stall."""
    cut = [r for r in measured if r.error_kind == LEVEL_END]
    if not cut:
        return None
    longest = max(waited_ms(r) for r in cut) / 1000
    silent = sum(1 for r in cut if r.first_token_ns is None)
    if grace_s == 0:
        return Finding(Code.UNANSWERED, f"{plural(len(cut), 'request')} in flight at the level's end cancelled, as "
                       f"--grace 0s asks ({silent} without a first token; the longest had waited {longest:.1f} s): the "
                       "latencies and rates are the answered requests'", "--grace inf waits for every one",
                       len(cut), None, "requests", len(measured), severity="note")
    return Finding(Code.UNANSWERED, f"{plural(len(cut), 'request')} still unanswered at the level's end and its grace "
                   f"({silent} without a first token; the longest had waited {longest:.1f} s), cancelled: the "
                   "latencies and rates are the answered requests'",
                   "a server that stalls reads fast on what it answered: look at the server, or wait for every "
                   "request with --grace inf", len(cut), None, "requests", len(measured))
