"""The end of a level bounded by time (``--duration``): it stops sending at its end, and the calls still in flight
get a grace period (``--grace``) to answer. A call still running after it is cancelled and marked cut by the
level's end (``LEVEL_END``): a wedged server (a slot that admitted a request and never ran it) held a 20 s level
4 minutes, each call waiting for the stall limit. A cut call is neither a sample nor a failure of the server:
``errors`` counts it apart, as an interrupt's, and no latency or throughput reads it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterable
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
                       grace_s: float | None) -> bool:
    """Run ``work``: a level's sending and the calls it waits for. Where the level ends at ``stop_ns``
    (perf_counter_ns) and ``grace_s`` is not None, what is still running ``grace_s`` after it is cancelled, its
    calls in flight marked ``LEVEL_END``; returns whether it was. An interrupt cancels ``work`` as well and
    propagates (the caller marks what it cut)."""
    task = asyncio.ensure_future(work)
    if stop_ns is None or grace_s is None:
        await task  # cancelling this await cancels the work
        return False
    try:
        left_s = (stop_ns - time.perf_counter_ns()) / 1e9 + grace_s
        done, _ = await asyncio.wait({task}, timeout=max(0.0, left_s))
    except asyncio.CancelledError:
        await _cancelled(task)
        raise
    if done:
        task.result()
        return False
    await _cancelled(task)
    mark_unfinished(records, LEVEL_END, f"in flight {grace_s:g} s after the level's end (its grace): cancelled")
    return True


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


def unanswered(measured: list[RequestRecord]) -> Finding | None:
    """Requests still unanswered at a level's end and its grace: the figures are the answered ones', and a server
    that stalls reads fast on those."""
    cut = [r for r in measured if r.error_kind == LEVEL_END]
    if not cut:
        return None
    longest = max(waited_ms(r) for r in cut) / 1000
    silent = sum(1 for r in cut if r.first_token_ns is None)
    return Finding(Code.UNANSWERED, f"{plural(len(cut), 'request')} still unanswered at the level's end and its grace "
                   f"({silent} without a first token; the longest had waited {longest:.1f} s), cancelled: the "
                   "latencies and rates are the answered requests'",
                   "a server that stalls reads fast on what it answered: look at the server, or wait for every "
                   "request with --grace inf", len(cut), None, "requests", len(measured))
