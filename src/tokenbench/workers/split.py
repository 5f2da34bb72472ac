"""A level's split across workers (``--workers N``, ``--workers auto``), exactly:

- closed loop: concurrency C over N workers is C//N each, the first C%N one more (a worker with none sits out);
  a request count is split in proportion to those shares by largest remainder. Where the workers' sends have
  been measured (``send_weights``: the send queue each saw in the pool's last phase), the streams beyond one
  each go by weights inverse to those queues, so a worker whose sends wait longer gets fewer;
- open loop: each worker sends at rate/N. Poisson arrivals of rate/N from N independent seeds add up to a Poisson
  process of the whole rate; constant arrivals are interleaved by starting worker k k/rate seconds late. Arrivals
  come one by one, not in waves, so the split stays even.

How many workers ``--workers auto`` starts (``auto_workers``): enough that a wave of re-sends, every stream of
the busiest level ending at once, reaches the sockets with its p90 send queue under ``SEND_QUEUE_GOAL_MS``, from
the cost of one send measured on this machine (``send_cost.send_cost_us``); at least one per
``STREAMS_PER_WORKER`` streams (the reads' share of a core); at most one per core.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..errors import UsageError
from ..layout import plural
from ..offered_load import Level
from ..distribution import percentile

#: Streams one worker is given before ``--workers auto`` adds another: at 64 streams of 100 tok/s one
#: process spends about 16% of a core on reads (2.5 µs a chunk, measured by benchmarks/client_overhead.py), and its send bursts stay short.
STREAMS_PER_WORKER = 64
#: ``--workers auto``'s goal for a wave of re-sends: its p90 send queue, in ms.
SEND_QUEUE_GOAL_MS = 1.0
#: Workers' send queues closer than this ratio (slowest over fastest) are one speed: the split stays even, so a
#: timer's noise does not move streams from level to level.
UNEVEN_QUEUE_RATIO = 1.5
#: A queue below this (ms) weighs as this: a timer's resolution, not a faster worker.
_QUEUE_FLOOR_MS = 0.001

Share = tuple[Level, "int | None", float]


def split_level(level: Level, requests: int | None, n: int,
                weights: Sequence[float] | None = None) -> list[Share]:
    """Each worker's (level, request count, start offset in s); see the module's docstring. Shares of nothing are
    dropped, so fewer than ``n`` may come back."""
    return [s for s in worker_shares(level, requests, n, weights) if s is not None]


def worker_shares(level: Level, requests: int | None, n: int,
                  weights: Sequence[float] | None = None) -> list[Share | None]:
    """``split_level`` by worker: worker k's share at place k, None where it sits out. ``weights`` (one per worker,
    ``send_weights``) split a closed loop's streams; None splits them evenly."""
    if level.rate is not None:
        counts = _apportion(requests, [1] * n) if requests is not None else [None] * n
        cap = _apportion(level.max_concurrency, [1] * n) if level.max_concurrency else [None] * n
        rate = level.rate / n
        out: list[Share | None] = []
        for k in range(n):
            if counts[k] == 0 or (cap[k] == 0):
                out.append(None)
                continue
            offset = k / level.rate if level.arrival == "constant" else 0.0
            out.append((replace(level, rate=rate, max_concurrency=cap[k]), counts[k], offset))
        return out
    c = level.concurrency or 1
    if weights is None or c < n:
        shares = [c // n + (1 if k < c % n else 0) for k in range(n)]
    else:  # one stream each, the rest by weight: a worker is never dropped for being slow
        assert len(weights) == n
        shares = [1 + x for x in _apportion(c - n, weights)]
    counts = _apportion(requests, shares) if requests is not None else [None] * n
    return [(replace(level, concurrency=s), counts[k], 0.0) if s > 0 and counts[k] != 0 else None
            for k, s in enumerate(shares)]


def _apportion(total: int | None, weights: Sequence[float]) -> list[Any]:
    """Largest remainder: integers in proportion to ``weights`` that add up to ``total`` exactly."""
    assert total is not None
    w = sum(weights)
    exact = [total * x / w for x in weights]
    out = [math.floor(e) for e in exact]
    for k in sorted(range(len(weights)), key=lambda k: exact[k] - out[k], reverse=True)[: total - sum(out)]:
        out[k] += 1
    return out


def send_weights(queues_ms: Sequence[float | None]) -> list[float] | None:
    """Weights for ``worker_shares``, inverse to each worker's measured send queue (its median, ms): a worker
    whose sends waited twice as long is given half the streams beyond its one. A worker with no measure weighs
    as the median of those measured; None (an even split) when none was measured, or when the slowest worker's
    queue is within ``UNEVEN_QUEUE_RATIO`` of the fastest's."""
    known = [max(q, _QUEUE_FLOOR_MS) for q in queues_ms if q is not None]
    if not known or max(known) < UNEVEN_QUEUE_RATIO * min(known):
        return None
    fill = statistics.median(known)
    return [1.0 / max(fill if q is None else q, _QUEUE_FLOOR_MS) for q in queues_ms]


def wave_queue_p90_ms(sends: int, send_us: float) -> float:
    """The p90 send queue of a wave of ``sends`` requests re-sent at once on one event loop, each send costing
    ``send_us``: the k-th reaches its socket k sends after the wave began, so the queues are c, 2c, ..., mc and
    their p90 (distribution.percentile) is c(1 + 0.9(m - 1))."""
    if sends < 1:
        return 0.0
    return percentile([send_us * k / 1000 for k in range(1, sends + 1)], 90)


def workers_for_sends(streams: int, send_us: float, cores: int, goal_ms: float = SEND_QUEUE_GOAL_MS) -> int:
    """The fewest workers (at most ``cores``) whose share of a wave of ``streams`` re-sends keeps its predicted
    p90 send queue (``wave_queue_p90_ms``) under ``goal_ms``."""
    for n in range(1, max(1, cores)):
        if wave_queue_p90_ms(math.ceil(streams / n), send_us) <= goal_ms:
            return n
    return max(1, cores)


def usable_core_ids() -> set[int] | None:
    """The cores this process may run on, by number; None where the platform cannot say (no sched_getaffinity)."""
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def usable_cores() -> int:
    """How many cores this process may run on."""
    ids = usable_core_ids()
    return len(ids) if ids is not None else (os.cpu_count() or 1)


def auto_workers(levels: Sequence[Level], cores: int | None = None, send_us: float | None = None) -> int:
    """``--workers auto``: the most of one worker per STREAMS_PER_WORKER streams of the busiest level and, where
    the cost of one send is known (``send_us``, measured), ``workers_for_sends``; at most one per core."""
    if cores is None:
        cores = usable_cores()
    streams = max((lv.concurrency or lv.max_concurrency or 1) for lv in levels) if levels else 1
    n = math.ceil(streams / STREAMS_PER_WORKER)
    if send_us is not None:
        n = max(n, workers_for_sends(streams, send_us, cores))
    return max(1, min(cores, n))


def usable_streams(levels: Sequence[Level]) -> int | None:
    """The most workers ``levels`` can give a share to (``worker_shares``): a closed loop's streams, an open loop's
    cap on requests in flight; None where an open loop has no cap (its rate splits over any number of workers)."""
    most = 1
    for lv in levels:
        if lv.open and not lv.max_concurrency:
            return None
        most = max(most, (lv.max_concurrency if lv.open else lv.concurrency) or 1)
    return most


def cap_workers(asked: int, levels: Sequence[Level], cores: int | None) -> tuple[int, str | None]:
    """``--workers N`` held to what can use them: no more than the busiest level's streams (a worker beyond them
    sits out every level, and starting one costs a second of a core) and, where they run on this machine
    (``cores`` given), no more than one per core (more only share the cores and queue each other's sends). The
    count, and the line that says so when it is less than asked (None when it is not)."""
    n, why = asked, ""
    streams = usable_streams(levels)
    if streams is not None and n > streams:
        n, why = streams, f"no level has more than {plural(streams, 'request')} in flight at once"
    if cores is not None and n > cores:
        n, why = cores, f"one per core this process may run on ({plural(cores, 'core')})"
    if n == asked:
        return asked, None
    return n, f"--workers {asked}: starting {plural(n, 'worker')}, as {why}"


def parse_workers(value: str) -> int | None:
    """``--workers``: a count, or ``auto`` (None: decided per sweep by :func:`auto_workers`)."""
    if value == "auto":
        return None
    try:
        n = int(value)
    except ValueError:
        raise UsageError(f"--workers {value}: give a number of processes (1 or more) or 'auto'") from None
    if n < 1:
        raise UsageError(f"--workers {value}: give a number of processes (1 or more) or 'auto'")
    return n
