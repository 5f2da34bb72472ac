"""What the server host's agent answers on ``/v1/power``, as a typed value both sides share.

``now``: the agent host's monotonic clock when it answered, the mark a client keeps for a level's start. With
``since`` (a mark), the answer also holds each source's readings from it and its ``Interval`` up to a reading taken
for the answer: the client gets the level's figure from two requests, the host's sampling untouched by the
network between."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .base import Reading, SourceInfo
from .interval import Interval
from .sampler import BackgroundSampler


@dataclass(frozen=True, slots=True)
class PowerReport:
    now: float
    sources: list[SourceInfo] = field(default_factory=list)
    latest: list[Reading] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    since: float | None = None
    readings: list[Reading] = field(default_factory=list)
    intervals: list[Interval] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"now": self.now, "sources": [s.to_dict() for s in self.sources],
                               "latest": [r.to_dict() for r in self.latest], "notes": list(self.notes)}
        if self.since is not None:
            out.update(since=self.since, readings=[r.to_dict() for r in self.readings],
                       intervals=[i.to_dict() for i in self.intervals])
        return out

    @classmethod
    def from_dict(cls, d: Any) -> PowerReport:
        """The answer as ``to_dict`` wrote it; anything else a ValueError that says what is wrong."""
        if not isinstance(d, dict) or not isinstance(d.get("now"), (int, float)) or isinstance(d.get("now"), bool):
            raise ValueError("the power answer has no 'now'")
        lists = {k: d.get(k, []) for k in ("sources", "latest", "notes", "readings", "intervals")}
        if not all(isinstance(v, list) for v in lists.values()):
            raise ValueError("the power answer's lists are not lists")
        if not all(isinstance(n, str) for n in lists["notes"]):
            raise ValueError("the power answer's notes are not text")
        since = d.get("since")
        if since is not None and (not isinstance(since, (int, float)) or isinstance(since, bool)):
            raise ValueError("the power answer's 'since' is not a number")
        return cls(float(d["now"]), [SourceInfo.from_dict(s) for s in lists["sources"]],
                   [Reading.from_dict(r) for r in lists["latest"]], list(lists["notes"]),
                   None if since is None else float(since), [Reading.from_dict(r) for r in lists["readings"]],
                   [Interval.from_dict(i) for i in lists["intervals"]])


def report(samplers: Sequence[BackgroundSampler], notes: Sequence[str] = (), since: float | None = None
           ) -> PowerReport:
    """The answer now, each source read for it (blocking: run it on a thread): without ``since``, the readings that
    mark a level's start; with it, each source's readings and interval from ``since`` up to now."""
    now = time.monotonic()
    if since is None:
        return PowerReport(now, [s.source.info() for s in samplers], [s.read_now() for s in samplers], list(notes))
    intervals = [s.interval(since) for s in samplers]
    readings = [r for s in samplers for r in s.readings(since)]
    latest = [r for s in samplers if (r := s.latest()) is not None]
    return PowerReport(now, [s.source.info() for s in samplers], latest, list(notes), since, readings, intervals)
