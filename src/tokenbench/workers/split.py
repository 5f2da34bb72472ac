"""A level's split across workers (``--workers N``, ``--workers auto``), exactly:

- closed loop: concurrency C over N workers is C//N each, the first C%N one more (a worker with none sits out);
  a request count is split in proportion to those shares by largest remainder;
- open loop: each worker sends at rate/N. Poisson arrivals of rate/N from N independent seeds add up to a Poisson
  process of the whole rate; constant arrivals are interleaved by starting worker k k/rate seconds late.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..errors import UsageError
from ..loadgen import Level

#: Streams one worker is given before ``--workers auto`` adds another: at 64 streams of 100 tok/s one
#: process spends about 16% of a core on reads (2.5 µs a chunk, issue 13), and its send bursts stay short.
STREAMS_PER_WORKER = 64


def split_level(level: Level, requests: int | None, n: int) -> list[tuple[Level, int | None, float]]:
    """Each worker's (level, request count, start offset in s); see the module's docstring. Shares of nothing are
    dropped, so fewer than ``n`` may come back."""
    if level.rate is not None:
        counts = _apportion(requests, [1] * n) if requests is not None else [None] * n
        cap = _apportion(level.max_concurrency, [1] * n) if level.max_concurrency else [None] * n
        rate = level.rate / n
        out = []
        for k in range(n):
            if counts[k] == 0 or (cap[k] == 0):
                continue
            offset = k / level.rate if level.arrival == "constant" else 0.0
            out.append((replace(level, rate=rate, max_concurrency=cap[k]), counts[k], offset))
        return out
    c = level.concurrency or 1
    shares = [c // n + (1 if k < c % n else 0) for k in range(n)]
    counts = _apportion(requests, shares) if requests is not None else [None] * n
    return [(replace(level, concurrency=s), counts[k], 0.0) for k, s in enumerate(shares)
            if s > 0 and counts[k] != 0]


def _apportion(total: int | None, weights: Sequence[int]) -> list[Any]:
    """Largest remainder: integers in proportion to ``weights`` that add up to ``total`` exactly."""
    assert total is not None
    w = sum(weights)
    exact = [total * x / w for x in weights]
    out = [math.floor(e) for e in exact]
    for k in sorted(range(len(weights)), key=lambda k: exact[k] - out[k], reverse=True)[: total - sum(out)]:
        out[k] += 1
    return out


def auto_workers(levels: Sequence[Level], cores: int | None = None) -> int:
    """``--workers auto``: one worker per STREAMS_PER_WORKER streams of the busiest level, at most one per core."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    streams = max((lv.concurrency or lv.max_concurrency or 1) for lv in levels) if levels else 1
    return max(1, min(cores, math.ceil(streams / STREAMS_PER_WORKER)))


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
