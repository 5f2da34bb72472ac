"""What the server says about itself during a level: its Prometheus ``/metrics`` sampled as time series,
summarized per level (requests running and waiting, peak KV-cache use, prefix-cache hit rate, speculative
decoding acceptance rate and mean acceptance length), and GPU power through NVML where present (energy per
output token, tokens per watt).

Counters are reported as their change over the level, never as the server's lifetime totals.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp

from . import adapters
from .background import cancel_and_wait
from .errors import TokenbenchError
from .levels import Telemetry
from .prometheus import parse
from .servers import once_more_if_closed
from .power.interval import Interval, above_idle

if TYPE_CHECKING:
    from .power.sampler import PowerMeter

#: The quantities summarized per level; each engine's adapter says what it calls them (first name found wins).
GAUGE_KEYS = ("running", "waiting", "kv_cache_usage", "busy_slots_per_decode")
COUNTER_KEYS = ("prefix_queries", "prefix_hits", "drafts", "draft_tokens", "accepted_tokens", "generation_tokens",
                "prompt_tokens", "queue_time_sum", "queue_time_count")
_NAMES = adapters.metric_names()
GAUGES = {k: list(_NAMES.get(k, ())) for k in GAUGE_KEYS}
COUNTERS = {k: list(_NAMES.get(k, ())) for k in COUNTER_KEYS}
#: Failed GETs in a row, before any success, after which a server is taken to have no /metrics.
GIVE_UP_AFTER = 3


def _first(sample: dict[str, float], names: list[str]) -> float | None:
    for n in names:
        if n in sample:
            return sample[n]
    return None


KEPT = {n for names in (*GAUGES.values(), *COUNTERS.values()) for n in names}
#: The counters of cached prompt tokens by the tier that supplied them, each read apart by its "source" label.
TIERS = {n: "source" for n in _NAMES.get("cached_by_tier", ())}


def kept(sample: dict[str, float]) -> dict[str, float]:
    """The part of a sample worth storing as a time series (a vLLM /metrics page is mostly histograms)."""
    return {k: v for k, v in sample.items() if k in KEPT or k.split("{", 1)[0] in TIERS}


def _tiers(first: dict[str, float], last: dict[str, float]) -> dict[str, float]:
    """Cached prompt tokens by tier over the level (device, host, disk, ...), the tiers that served any."""
    out = {}
    for key, b in last.items():
        name, _, label = key.partition("{")
        if name in TIERS and label and (a := first.get(key)) is not None and b - a > 0:
            out[label.rstrip("}").split("=", 1)[1]] = b - a
    return out


def summarize(samples: list[tuple[float, dict[str, float]]]) -> dict[str, Any]:
    """A level's samples (time, parsed /metrics) -> its telemetry summary."""
    if not samples:
        return {}
    out: dict[str, Any] = {"samples": len(samples)}
    for key, names in GAUGES.items():
        vals = [v for _, s in samples if (v := _first(s, names)) is not None]
        if vals:
            out[f"{key}_max"] = max(vals)
            out[f"{key}_mean"] = sum(vals) / len(vals)
    first, last = samples[0][1], samples[-1][1]
    delta = {}
    for key, names in COUNTERS.items():
        a, b = _first(first, names), _first(last, names)
        if a is not None and b is not None:
            delta[key] = b - a
    out["counters"] = delta
    if tiers := _tiers(first, last):
        out["cached_by_tier"] = tiers
    if delta.get("prefix_queries"):
        out["prefix_cache_hit_rate"] = delta.get("prefix_hits", 0.0) / delta["prefix_queries"]
    elif "prefix_queries" not in delta and delta.get("prefix_hits") is not None and delta.get("prompt_tokens") is not None:
        # llama.cpp counts cached prompt tokens apart from processed ones
        seen = delta["prefix_hits"] + delta["prompt_tokens"]
        if seen:
            out["prefix_cache_hit_rate"] = delta["prefix_hits"] / seen
    if delta.get("draft_tokens"):
        out["spec_acceptance_rate"] = delta.get("accepted_tokens", 0.0) / delta["draft_tokens"]
    if delta.get("drafts"):
        out["spec_mean_acceptance_length"] = 1 + delta.get("accepted_tokens", 0.0) / delta["drafts"]
    if delta.get("queue_time_count") and delta.get("queue_time_sum") is not None:
        out["queue_time_mean_ms"] = 1000 * delta["queue_time_sum"] / delta["queue_time_count"]
    return out


@dataclass(slots=True)
class MetricsSampler:
    """Polls ``root/metrics`` every ``interval_s`` while a level runs. It gives up (and says so) on a server
    without it: a 404, or ``GIVE_UP_AFTER`` failures in a row before any success. Once a page was read, a failed
    GET is counted in ``failed`` and sampling goes on."""

    http: aiohttp.ClientSession
    root: str
    interval_s: float = 1.0
    headers: dict[str, str] = field(default_factory=dict)
    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    available: bool | None = None
    failed: int = 0
    _in_a_row: int = 0
    _task: asyncio.Task[None] | None = None

    def _fail(self, absent: bool = False) -> None:
        self.failed += 1
        self._in_a_row += 1
        if not self.available and (absent or self._in_a_row >= GIVE_UP_AFTER):
            self.available = False

    async def sample(self) -> None:
        async def once(http: aiohttp.ClientSession) -> tuple[int, str]:
            async with http.get(f"{self.root}/metrics", headers=self.headers,
                                timeout=aiohttp.ClientTimeout(total=5)) as r:
                return r.status, (await r.text(errors="replace") if r.status == 200 else "")

        try:  # a GET: asked again where a kept-alive connection was closed (a sample every 5 s meets idle closes)
            status, text = await once_more_if_closed(self.http, once)
        except (aiohttp.ClientError, asyncio.TimeoutError):
            self._fail()
            return
        if status != 200:
            self._fail(absent=status in (404, 405, 501))
            return
        try:
            parsed = parse(text, TIERS)
        except ValueError:
            self._fail(absent=True)
            return
        self.available = True
        self._in_a_row = 0
        now = time.perf_counter_ns()
        # only the series a summary reads and the run stores: a level keeps a sample every interval for as long
        # as it runs (a soak's hour), and a vLLM page parses into a hundred-odd series
        self.samples.append((now / 1e9, kept(parsed)))

    async def _loop(self) -> None:
        while True:
            await self.sample()
            if self.available is False:
                return
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> dict[str, Any]:
        await cancel_and_wait(self._task)
        if self.available:
            await self.sample()  # the level's end
        if not self.available:
            return {"available": False, "note": "the server exposes no Prometheus /metrics"}
        return {"available": True, "failed_gets": self.failed, **summarize(self.samples)}


class LevelTelemetry:
    """Everything sampled while one level runs: the server's /metrics and, where a meter reads the box under test
    (serverhost.py), its power. ``stop()`` always stops both (also on Ctrl-C); ``summary()`` then combines them
    with the level's tokens."""

    def __init__(self, http: aiohttp.ClientSession, root: str, interval_s: float | None,
                 headers: dict[str, str] | None = None, meter: PowerMeter | None = None,
                 idle: Sequence[Interval] = (), note: str = "") -> None:
        self.metrics = MetricsSampler(http, root, interval_s, headers or {}) if interval_s else None
        self.meter, self.idle = meter, list(idle)
        self.metrics_summary: dict[str, Any] = {}
        self._mark: asyncio.Task[float] | None = None
        self.power: Interval | None = None
        self.power_error: str | None = None
        self.note = note  # why there is no meter, where there is none

    def start(self) -> None:
        if self.metrics is not None:
            self.metrics.start()
        if self.meter is not None:
            self._mark = asyncio.get_running_loop().create_task(self.meter.mark())

    async def stop(self) -> None:
        try:
            if self.metrics is not None:
                self.metrics_summary = await self.metrics.stop()
        finally:
            await self._stop_power()

    async def _stop_power(self) -> None:
        """The level's power over its span: the meter's first source, from the mark taken at the start. A meter
        that stops answering is one line in the level's power note, its other figures kept."""
        if self.meter is None or self._mark is None:
            return
        try:
            since = await self._mark
            found = await self.meter.intervals(since)
            self.power = found[0] if found else None
        except (TokenbenchError, OSError, asyncio.TimeoutError) as e:
            self.power_error = str(e).splitlines()[0] if str(e) else type(e).__name__

    def power_summary(self, output_tokens: int, seconds: float) -> dict[str, Any]:
        """The power keys of ``Telemetry``: the figure and where it came from, its share above the box idle."""
        if self.power is None:
            note = self.power_error or self.note or "no power source answered"
            return {"gpu_power": "not available", "power_note": note}
        p = self.power
        out = p.telemetry(output_tokens, seconds) | {"power_source": p.source, "power_measures": p.measures,
                                                     "power_partial": p.partial, "power_note": p.note or None}
        idle = next((i for i in self.idle if i.source == p.source), None)
        more = above_idle(p, idle) if idle is not None else None
        if more is not None:
            out |= {"idle_power_w": more.idle_w, "power_above_idle_share": more.share}
        return out

    def summary(self, output_tokens: int, seconds: float) -> Telemetry:
        """The level's telemetry, typed: a key ``Telemetry`` does not name is an error here, where it is written."""
        return Telemetry.written(**self.metrics_summary, **self.power_summary(output_tokens, seconds))

    def series(self) -> list[tuple[int, dict[str, float]]]:
        """The samples worth storing (``kept`` when sampled), as (perf_counter_ns, {name: value})."""
        return [(int(t * 1e9), v) for t, v in self.metrics.samples] if self.metrics is not None else []
