"""The load a level offers: a closed loop of so many streams, an open loop at a rate (Poisson or constant
arrivals), or an explicit schedule (a trace's or a replay's send times). A value every part of a run reads: the
load generator sends to it, the results carry it, the reader rebuilds it from a run's JSON; so it lives apart
from the sender and its HTTP client."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from .layout import plural


@dataclass(slots=True, frozen=True)
class Level:
    concurrency: int | None = None
    rate: float | None = None  # requests per second, open loop
    arrival: Literal["poisson", "constant"] = "poisson"
    #: open loop on an explicit schedule (a trace's replay): each request's send time, seconds after the start
    schedule: tuple[float, ...] | None = None
    max_concurrency: int | None = None  # open loop: cap on requests in flight (queueing shows as send delay)
    cache: Literal["warm", "busted"] | None = None  # an agent-session level (sessions.py): its prefix cache

    def describe(self) -> str:
        if self.schedule is not None:
            span = self.schedule[-1] - self.schedule[0] if self.schedule else 0.0
            n, over = len(self.schedule), f"{round(span, 1):g}" if span < 10 else f"{span:,.0f}"
            if self.cache is not None:  # a replay's schedule: when each trajectory (its first call) starts
                if n == 1 or span <= 0:
                    return "replay of 1 trajectory" if n == 1 else f"replay of {n} trajectories, all started at once"
                return f"replay of {n} trajectories starting over {over} s"
            return f"trace {plural(n, 'request')} over {over} s"
        if self.rate is not None:
            return f"rate {self.rate:g}/s {self.arrival}"
        if self.cache is not None:
            return f"{plural(self.concurrency, 'agent')}, cache {self.cache}"
        return f"concurrency {self.concurrency}"

    @property
    def open(self) -> bool:
        """Requests are sent at arrival times, however many are in flight (a rate, or a schedule)."""
        return self.rate is not None or self.schedule is not None

    @property
    def offered_rate(self) -> float | None:
        """Requests per second the level offers: its rate, or a schedule's arrivals over its span (to 3 significant
        digits: it labels the level, 1.85/s rather than 1.85351/s)."""
        if self.schedule is not None and len(self.schedule) > 1 and self.schedule[-1] > self.schedule[0]:
            return float(f"{(len(self.schedule) - 1) / (self.schedule[-1] - self.schedule[0]):.3g}")
        return self.rate

    def arrivals(self, offset_s: float, rng: random.Random) -> Iterator[float]:
        """Open loop: each request's send time, seconds after the start (a schedule's own, or the rate's
        process: Poisson gaps drawn from ``rng``, or constant ones)."""
        if self.schedule is not None:
            for t in self.schedule:
                yield offset_s + t
            return
        assert self.rate is not None
        t = offset_s
        while True:
            yield t
            t += rng.expovariate(self.rate) if self.arrival == "poisson" else 1.0 / self.rate
