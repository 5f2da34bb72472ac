"""Sampling sources in the background, and the meter a run reads a level's figure from.

``BackgroundSampler`` reads one source every ``interval_s`` on a thread of its own (a slow source, a command with a
timeout, holds up no other source and never the event loop that times requests) and keeps the last ``keep_s``
seconds of readings. A level's figure is ``interval(start)``: one more reading at its end, then the readings
between, integrated (``interval.integrate``).

``PowerMeter`` is what a run asks, the same whether the sources are on this machine (``LocalMeter``) or on the
server host behind ``tokenbench agent`` (``hostagent.client.AgentClient``): ``mark()`` at a level's start (a time on
the sources' own clock), ``intervals(mark)`` at its end, one ``Interval`` per source."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Protocol

from .base import PowerSource, Reading, SourceInfo
from .interval import Interval, integrate

#: How long a sampler keeps its readings: a level longer than this loses its first part (and says so).
KEEP_S = 7200.0
DEFAULT_INTERVAL_S = 0.5


class BackgroundSampler:
    """One source read every ``interval_s`` on a thread, its readings kept for ``keep_s`` seconds."""

    def __init__(self, source: PowerSource, interval_s: float = DEFAULT_INTERVAL_S, keep_s: float = KEEP_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.interval_s = interval_s
        self.clock = clock
        self._buf: deque[Reading] = deque(maxlen=int(keep_s / interval_s) + 16)
        self._lock = threading.Lock()
        self._reading = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> BackgroundSampler:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"power-{self.source.name}", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        self.read_now()
        while not self._stop.wait(self.interval_s):
            self.read_now()

    def read_now(self) -> Reading:
        """A reading now, kept with the others (one read of the source at a time)."""
        with self._reading:
            r = self.source.read(self.clock)
        with self._lock:
            self._buf.append(r)
        return r

    def readings(self, since: float | None = None, until: float | None = None) -> list[Reading]:
        with self._lock:
            return [r for r in self._buf if (since is None or r.t >= since) and (until is None or r.t <= until)]

    def latest(self) -> Reading | None:
        with self._lock:
            return self._buf[-1] if self._buf else None

    def interval(self, start: float, stop: float | None = None) -> Interval:
        """The figure over [start, stop]; without ``stop``, up to a reading taken now."""
        if stop is None:
            stop = self.read_now().t
        return integrate(self.readings(start, stop), start, stop, self.source.name, str(self.source.measures),
                         slack_s=max(1.0, 2 * self.interval_s))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None


class PowerMeter(Protocol):
    """What a run reads power through, here or on the server host."""

    async def mark(self) -> float: ...

    async def intervals(self, since: float) -> list[Interval]: ...


class LocalMeter:
    """The sources of this machine, each sampled in the background from ``start()`` to ``close()``."""

    def __init__(self, sources: Iterable[PowerSource], interval_s: float = DEFAULT_INTERVAL_S,
                 notes: Iterable[str] = ()) -> None:
        self.samplers = [BackgroundSampler(s, interval_s) for s in sources]
        self.notes = list(notes)

    @property
    def sources(self) -> list[SourceInfo]:
        return [s.source.info() for s in self.samplers]

    def start(self) -> LocalMeter:
        for s in self.samplers:
            s.start()
        return self

    def _mark(self) -> float:
        t = time.monotonic()
        for s in self.samplers:
            s.read_now()
        return t

    async def mark(self) -> float:
        return await asyncio.to_thread(self._mark)

    async def intervals(self, since: float) -> list[Interval]:
        return await asyncio.to_thread(lambda: [s.interval(since) for s in self.samplers])

    async def close(self) -> None:
        await asyncio.to_thread(self.stop)

    def stop(self) -> None:
        for s in self.samplers:
            s.stop()
            s.source.close()


async def measure_idle(meter: PowerMeter, seconds: float) -> list[Interval]:
    """Each source's figure for the box left idle ``seconds`` (``--idle-power``), before a run: the load's share
    above it is ``interval.above_idle(load, idle)``."""
    t = await meter.mark()
    await asyncio.sleep(seconds)
    return await meter.intervals(t)
