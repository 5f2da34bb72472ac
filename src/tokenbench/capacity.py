"""Capacity under an SLO: the most agents (concurrency) or requests per second (rate) a box serves while it meets
every objective, found by search rather than read off a table by eye.

The search (``CapacitySearch``, a level plan the sweep runs) brackets the limit by doubling from the low end of
the range, then bisects between the last level that met the SLO and the first that did not, until they are
adjacent (concurrency) or within the resolution (rate), or the time budget is spent. The next level is always a
function of the levels run so far, so the answer (``answer``) is recomputed from the stored levels alone: a run
read back says what the search said, and every level it ran is a stored level.

A level stops sending early (``LevelStop``) once its verdict cannot change (enough requests already over a
percentile limit, or failed), once an open-loop level is clearly over-saturated (requests pile up in flight while
TTFT climbs), or at the time budget; the finding ``stopped_early`` says which. A level cut by the budget before
its verdict was decided gives no verdict.

Peers: ``vllm bench sweep serve_sla`` searches the SLA limit with a spline fit, AIPerf with Bayesian optimisation
recipes, inference-perf probes with Little's law, GuideLLM stops a sweep at over-saturation. A bracket and a
bisection assumes only that more load is no better, and says how sure each verdict was
(``slo.SloCheck``: a p99 from 40 requests is not a p99).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .cache_cliff import CHECK as CLIFF_CHECK, Cliff, cliff, hold_cache
from .finding import Code
from .offered_load import Level
from .levels import Telemetry
from .records import RequestRecord
from .slo import SLO, SloCheck, decided_fail
from .steady import OVERSATURATED_MIN_DONE, oversaturated, thirds_ttft_ms

if TYPE_CHECKING:
    from .levels import ServingLevel
    from .results import LevelOutcome, Manifest, RunResult

NS_PER_S = 1_000_000_000
Axis = Literal["concurrency", "rate"]
#: A KV cache this full at its peak is the engine's limit (preemption, queueing), not the hardware's speed.
KV_FULL = 0.95
#: Requests that waited in the engine's queue (its own count, not a sampled gauge) this share of the level's median
#: TTFT or more: the engine's batch limit held the level back. A tenth: below it, the wait is within the noise of a
#: TTFT; the first failing level of a search past the engine's batch limit waits for a whole request's time.
ENGINE_QUEUE_SHARE = 0.10
Ended = Literal["resolved", "none", "all", "budget", "interrupted", "running"]
#: What "Sure" means, under every table of verdicts.
SURE_LEGEND = ("Sure: a one-sided binomial test at 5% (a p99 passes surely from 299 requests with none over it, a "
               "p90 from 29); agent_tps: the limit outside the mean's 95% interval; cached_share: the floor "
               "outside the share's, each session one sample.")


@dataclass(slots=True, frozen=True)
class SearchSpec:
    """What to search: the axis and its range, when two levels are close enough, and the time allowed."""

    axis: Axis
    low: float
    high: float
    resolution: float = 0.1  # rate: stop when first fail / last pass <= 1 + this; concurrency: adjacent integers
    budget_s: float | None = None
    arrival: Literal["poisson", "constant"] = "poisson"
    max_concurrency: int | None = None
    sessions: bool = False  # agent sessions: each level runs them with the prefix cache warm
    #: a cache-cliff search (cache_cliff.py): a level also fails once its cached share falls below this share of
    #: the lowest level's (None: no such objective)
    cache_drop: float | None = None

    def __post_init__(self) -> None:
        if not (0 < self.low <= self.high) or not math.isfinite(self.high):
            raise ValueError(f"the range {self.low:g}:{self.high:g} must be LOW:HIGH with 0 < LOW <= HIGH")
        if self.axis == "concurrency" and (self.low != int(self.low) or self.high != int(self.high)):
            raise ValueError("a concurrency range is whole agents, e.g. 1:64")
        if self.cache_drop is not None and not 0 < self.cache_drop < 1:
            raise ValueError(f"a cached share's fall of {self.cache_drop:g}: give a share above 0 and below 1, e.g. "
                             "0.5 (a level fails once its cached share is under half the lowest level's)")

    def level(self, value: float) -> Level:
        if self.axis == "concurrency":
            return Level(concurrency=int(value), cache="warm" if self.sessions else None)
        return Level(rate=value, arrival=self.arrival, max_concurrency=self.max_concurrency)

    def value(self, level: Level) -> float | None:
        return float(level.concurrency) if self.axis == "concurrency" and level.concurrency else level.rate

    def resolved(self, last_pass: float, first_fail: float) -> bool:
        if self.axis == "concurrency":
            return first_fail - last_pass <= max(1, math.floor(last_pass * self.resolution))
        return first_fail <= last_pass * (1 + self.resolution)

    def between(self, last_pass: float, first_fail: float) -> float:
        if self.axis == "concurrency":
            return float((int(last_pass) + int(first_fail)) // 2)
        return float(f"{math.sqrt(last_pass * first_fail):.3g}")

    def up(self, value: float) -> float:
        """The next level of the bracket: twice the last, within the range."""
        return min(self.high, value * 2)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SearchSpec:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(slots=True)
class Verdict:
    """One level's answer to the SLO, as the search read it."""

    value: float
    met: bool | None  # None: the level gave no verdict (cut by the budget or interrupted before it was decided)
    checks: list[SloCheck]
    requests: int  # measured requests it spent
    stopped: str | None  # why it stopped early, if it did
    idx: int

    @property
    def sure(self) -> bool:
        """Sure of a pass when every objective's pass is sure; of a fail when a failing objective's is."""
        if self.met is None:
            return False
        if self.met:
            return all(c.sure for c in self.checks)
        return any(c.sure for c in self.checks if not c.met)


def cut_short(outcome: LevelOutcome) -> bool:
    """A level that gives no verdict of its own: cut (by the budget, a lost worker) or interrupted before it was
    decided, or where its server went (what the load did to it is unknown)."""
    s = outcome.serving
    return outcome.status in ("interrupted", "partial") or (s is not None and s.finding(Code.SERVER_GONE) is not None)


def verdict(outcome: LevelOutcome, spec: SearchSpec) -> Verdict | None:
    """A level's verdict: its SLO's, unless it was cut before the verdict was decided."""
    value = spec.value(outcome.level)
    s = outcome.serving
    if value is None or s is None:
        return None
    stopped = s.finding(Code.STOPPED_EARLY)
    requests = s.completed + s.failed
    # a level cut (by the budget, a lost worker) or interrupted before its verdict was decided gives none; a
    # level stopped because its verdict was decided is complete
    if cut_short(outcome) or s.slo_met is None:
        met: bool | None = None
    elif outcome.status == "failed":
        met = False  # more failures than --max-error-rate: no SLO allows that
    else:
        met = s.slo_met
    # a cliff's check put on the summary (mark_levels) is decided again here, against the levels measured now
    checks = [c for c in s.slo_checks if c.name != CLIFF_CHECK]
    return Verdict(value, met, checks, requests, stopped.message if stopped else None, outcome.idx)


def verdicts(outcomes: list[LevelOutcome], spec: SearchSpec) -> list[Verdict]:
    """Every level's verdict; a cache-cliff search's also hold each level's cached share to the lowest level's."""
    found = [v for o in outcomes if (v := verdict(o, spec)) is not None]
    if spec.cache_drop is not None:
        hold_cache(found, outcomes, spec.cache_drop)
    return found


def bracket(verdicts: list[Verdict]) -> tuple[float | None, float | None]:
    """The last level that met the SLO below the first that did not, and that first (None where there is none):
    the lowest failing level bounds the answer; a pass above it (noise) does not move the answer up."""
    fails = [v.value for v in verdicts if v.met is False]
    first_fail = min(fails) if fails else None
    passes = [v.value for v in verdicts if v.met and (first_fail is None or v.value < first_fail)]
    return (max(passes) if passes else None), first_fail


def next_value(spec: SearchSpec, verdicts: list[Verdict]) -> tuple[float | None, Ended]:
    """Where the search goes next, from the verdicts so far; None and why it ended."""
    decided = [v for v in verdicts if v.met is not None]
    if not decided:
        return (spec.low, "running") if not verdicts else (None, "budget")
    last_pass, first_fail = bracket(decided)
    if last_pass is None:
        if first_fail is not None and first_fail <= spec.low:
            return None, "none"
        return spec.low, "running"
    if first_fail is None:
        return (None, "all") if last_pass >= spec.high else (spec.up(last_pass), "running")
    if spec.resolved(last_pass, first_fail):
        return None, "resolved"
    mid = spec.between(last_pass, first_fail)
    if mid <= last_pass or mid >= first_fail or any(v.value == mid for v in decided):
        return None, "resolved"
    return mid, "running"


def search_by(spec: SearchSpec, meets: Callable[[float], bool | None]) -> tuple[float | None, float | None, Ended]:
    """The same search over a function instead of a server (a prediction, a table of stored levels): the last
    value that met, the first that did not, and why it ended."""
    seen: list[Verdict] = []
    while True:
        value, ended = next_value(spec, seen)
        if value is None:
            last_pass, first_fail = bracket([v for v in seen if v.met is not None])
            return last_pass, first_fail, ended
        seen.append(Verdict(value, meets(value), [], 0, None, len(seen)))


class LevelStop:
    """Watches one level's finished requests and says when to stop sending (``halted``), and why (``reason``):
    the verdict is decided (``slo.decided_fail``), the open-loop queue grows without bound, or the budget is spent."""

    def __init__(self, slo: SLO, planned: int | None, open_loop: bool, deadline_ns: int | None,
                 records: list[RequestRecord]) -> None:
        self.slo, self.planned, self.open_loop, self.deadline_ns = slo, planned, open_loop, deadline_ns
        self.records = records
        self.done: list[RequestRecord] = []
        self.in_flight_at_done: list[int] = []
        self.reason: str | None = None
        self.cut = False  # stopped by the budget, not by a verdict
        self.saturated: tuple[int, int] | None = None  # over-saturated: requests in flight, then and at the stop

    def wrap(self, on_done: Callable[[RequestRecord], None] | None) -> Callable[[RequestRecord], None]:
        def seen(record: RequestRecord) -> None:
            if on_done is not None:
                on_done(record)
            if record.phase == "measured":
                self.see(record)
        return seen

    def see(self, record: RequestRecord) -> None:
        self.done.append(record)
        if self.reason is not None:
            return
        if self.planned:
            self.reason = decided_fail(self.slo, self.done, self.planned)
        if self.reason is None and self.open_loop:
            self.in_flight_at_done.append(sum(1 for r in self.records if r.phase == "measured" and r.end_ns is None))
            self.reason = self._oversaturated()

    def _oversaturated(self) -> str | None:
        done = [r for r in self.done if r.ok and r.ttft_ns is not None]
        if len(done) < OVERSATURATED_MIN_DONE:
            return None
        early, late = thirds_ttft_ms(sorted(done, key=lambda r: r.sent_ns))
        first, now = self.in_flight_at_done[len(self.in_flight_at_done) // 3], self.in_flight_at_done[-1]
        if oversaturated(first, now, early, late):
            self.saturated = (first, now)
            return (f"over-saturated: requests in flight grew from {first} to {now} while TTFT rose from "
                    f"{early:.0f} to {late:.0f} ms through the level")
        return None

    def apply(self, summary: ServingLevel) -> None:
        """An over-saturated level fails its SLO whatever its objectives read when it stopped: the box does not
        sustain that load (its queue grows without bound). Said as an objective of its own, ``queue``."""
        if self.saturated is None or summary.slo_met is None:
            return
        first, now = self.saturated
        summary.slo_checks.append(SloCheck("queue", float(now), float(first), "requests", False, len(self.done),
                                           None, 0.0))
        summary.slo_met = False

    def halted(self) -> bool:
        if self.reason is None and self.deadline_ns is not None and time.monotonic_ns() >= self.deadline_ns:
            self.reason, self.cut = "the time budget was spent", True
        return self.reason is not None


@dataclass(slots=True)
class CapacitySearch:
    """The level plan of a capacity search: the next level from the outcomes so far (``next_value``)."""

    spec: SearchSpec
    slo: SLO
    started_ns: int = field(default_factory=time.monotonic_ns)
    ended: Ended = "running"
    total: int | None = None  # levels are not known beforehand
    kv_pool: dict[str, Any] | None = None  # a cache search's: the engine's KV pool as read before it (cache_cliff)

    def next_level(self, outcomes: list[LevelOutcome]) -> Level | None:
        if self.spent():
            self.ended = "budget"
            return None
        value, self.ended = next_value(self.spec, verdicts(outcomes, self.spec))
        return self.spec.level(value) if value is not None else None

    def spent(self) -> bool:
        return self.spec.budget_s is not None and time.monotonic_ns() >= self.deadline_ns()

    def deadline_ns(self) -> int:
        return self.started_ns + int((self.spec.budget_s or 0) * NS_PER_S)

    def stop(self, level: Level, planned: int | None, records: list[RequestRecord]) -> LevelStop:
        return LevelStop(self.slo, planned, level.open, self.deadline_ns() if self.spec.budget_s else None, records)

    def widest(self) -> int:
        """The most requests in flight: the range's top level's."""
        top = self.spec.level(self.spec.high)
        return top.concurrency or top.max_concurrency or 1

    def annotate(self, manifest: Manifest) -> None:
        """How it searched and for what (its levels are found, not listed)."""
        manifest.capacity = {**self.spec.to_dict(), "slo": self.slo.describe(), "objectives": self.slo.headline()}
        if self.kv_pool is not None:
            manifest.capacity["kv_pool"] = self.kv_pool
        manifest.load = {**(manifest.load or {}), "levels": []}

    def verdict(self, outcomes: list[LevelOutcome], manifest: Manifest) -> tuple[str, str | None]:
        """A search's levels answer it whether they met the SLO or failed it (too many errors is a fail): the run
        is complete once the search ended, and says how in its manifest."""
        if manifest.capacity is not None:
            manifest.capacity["ended"] = self.ended
        return "complete", None


@dataclass(slots=True)
class CapacityAnswer:
    """What a capacity search found, from its stored levels."""

    spec: SearchSpec
    slo: str  # the SLO in words
    ended: Ended
    verdicts: list[Verdict]
    capacity: float | None  # the last level that met the SLO (None: none did)
    first_fail: float | None  # the first level above it that did not (None: every level met it)
    at: ServingLevel | None  # the level at the capacity
    limit: str | None  # what limited it at the first failing level, when it was not the hardware
    price_per_hour: float | None = None
    currency: str = "USD"
    cliff: Cliff | None = None  # a cache-cliff search's: where the cached share collapsed, and why

    @property
    def requests(self) -> int:
        return sum(v.requests for v in self.verdicts)

    @property
    def unit(self) -> str:
        return "agents" if self.spec.axis == "concurrency" else "requests/s"

    def cost_per_agent_hour(self) -> float | None:
        if self.price_per_hour is None or not self.capacity or self.spec.axis != "concurrency":
            return None
        return self.price_per_hour / self.capacity

    def cost_per_mtok(self) -> float | None:
        return self.at.cost_per_mtok if self.at is not None else None

    def energy(self) -> tuple[float | None, float | None]:
        """Joules per output token and agents per kW at the capacity, where power was measured."""
        tele = self.at.telemetry if self.at is not None else None
        j, w = (tele.j_per_output_token, tele.gpu_power_w_mean) if tele is not None else (None, None)
        per_kw = self.capacity / (w / 1000) if w is not None and w > 0 and self.capacity and \
            self.spec.axis == "concurrency" else None
        return j, per_kw

    def whole(self, value: float | None) -> float | int | None:
        """Agents are whole: 6, not 6.0, in the JSON."""
        return int(value) if value is not None and self.spec.axis == "concurrency" else value

    def to_dict(self) -> dict[str, Any]:
        j, per_kw = self.energy()
        return {"axis": self.spec.axis, "unit": self.unit, "slo": self.slo, "ended": self.ended,
                "capacity": self.whole(self.capacity), "first_fail": self.whole(self.first_fail), "limit": self.limit,
                "requests": self.requests, "range": [self.spec.low, self.spec.high],
                "cost_per_agent_hour": self.cost_per_agent_hour(), "cost_per_mtok": self.cost_per_mtok(),
                "currency": self.currency, "j_per_output_token": j, "agents_per_kw": per_kw,
                **({"cache_cliff": self.cliff.to_dict()} if self.cliff is not None else {}),
                "levels": [{"value": self.whole(v.value), "met": v.met, "sure": v.sure, "requests": v.requests,
                            "stopped": v.stopped, "checks": [c.to_dict() for c in v.checks]} for v in self.verdicts]}


def limit_cause(s: ServingLevel, passed: ServingLevel | None = None) -> str | None:
    """What held a failing level back when it was not the hardware: the engine's slots, a full KV cache, an engine
    that ran fewer requests at once than were sent, or the client. When the engine showed its own limit and the
    client was also flagged, both are said, the engine's first: a client that waited a few milliseconds does not
    explain a queue the engine's /metrics saw. ``passed``: the level below it that met the SLO; slots it also
    exceeded are no limit (a search answered 5 agents on 4 slots and blamed the slots for 6)."""
    client = s.finding(Code.CLIENT_BOUND)
    said = client.message.split(": ", 1)[-1] if client is not None else ""
    engine = _engine_limit(s, slots=passed is None or passed.finding(Code.SLOTS_EXCEEDED) is None)
    if engine is None:
        return f"perhaps the client, not the box (it was flagged): {said}" if client is not None else None
    return f"{engine}; the client was also flagged: {said}" if client is not None else engine


def _engine_limit(s: ServingLevel, slots: bool = True) -> str | None:
    if slots and (f := s.finding(Code.SLOTS_EXCEEDED)) is not None:
        return "the engine's slots: " + f.message
    tele = s.telemetry or Telemetry()
    kv = tele.kv_cache_usage_max
    if kv is not None and kv >= KV_FULL:
        return f"the engine's KV cache was full (peak {kv:.0%}): requests waited for room"
    queued, ttft = tele.queue_time_mean_ms, s.ttft_ms.p50
    if queued is not None and ttft and queued >= ENGINE_QUEUE_SHARE * ttft:
        return (f"requests waited {queued:,.0f} ms each in the engine's queue on average ({queued / ttft:.0%} of the "
                "median TTFT, as its /metrics counted it): its batch limit (vLLM --max-num-seqs, llama.cpp --parallel)")
    running, waiting = tele.running_max, tele.waiting_max
    if running is not None and waiting is not None and waiting > 0 and s.concurrency and running < s.concurrency:
        # /metrics is sampled, so the peak seen running may be under the limit: said as seen
        return (f"requests waited in the engine's queue (at most {waiting:g} waiting and {running:g} running, as "
                "its /metrics was sampled): its batch limit (vLLM --max-num-seqs, llama.cpp --parallel)")
    return None


def answer(result: RunResult) -> CapacityAnswer | None:
    """The capacity a run's levels show: a capacity search's (its manifest says how it searched), or any sweep
    with an SLO over one axis (the range its levels span). None for a run with no SLO verdicts."""
    stored = result.manifest.capacity or {}
    spec = _spec(result, stored)
    if spec is None:
        return None
    vs = verdicts(result.outcomes, spec)
    if not stored and not any(v.met is not None for v in vs):
        return None
    last_pass, first_fail = bracket([v for v in vs if v.met is not None])
    met = {v.idx for v in vs if v.met}
    at = next((o.serving for o in result.outcomes if spec.value(o.level) == last_pass and o.idx in met), None)
    failing = next((o.serving for o in result.outcomes if spec.value(o.level) == first_fail), None)
    ended: Ended = stored.get("ended") or _ended(spec, last_pass, first_fail, result.status, bool(stored))
    slo = str(stored.get("objectives") or next((s.slo for o in result.outcomes if (s := o.serving) and s.slo), ""))
    if spec.cache_drop is not None:
        slo += f" and a cached share of at least {spec.cache_drop:.0%} of the lowest level's"
    found = CapacityAnswer(spec, slo, ended, vs, last_pass, first_fail, at,
                            limit_cause(failing, at) if failing is not None else None,
                            result.manifest.price_per_hour, result.manifest.currency or "USD")
    if spec.cache_drop is not None:
        _add_cliff(result, found)
    return found


def _add_cliff(result: RunResult, found: CapacityAnswer) -> None:
    """A cache-cliff search's cliff put on its answer. Where the cache failed, the cliff is the answer: the
    engine's slots or queue, which a cliff search outgrows on purpose, are not a limit to raise ("start
    llama-server with -np 5")."""
    found.cliff = cliff(result, found)
    if found.cliff is not None and found.cliff.cache_failed:
        found.limit = None


def mark_levels(result: RunResult) -> None:
    """A search's verdicts put on each level's own summary: a level cut or interrupted before its verdict was
    decided has none (its slo_met read true where the search's table said no verdict). A cache-cliff search's
    cached-share verdict too, beside its SLO's: ``show``,
    ``report`` and ``cost`` read a level's ``slo_met``, which the SLO's objectives alone decided, and printed
    "pass" at every level of a search that found the cliff at the fifth. The verdict is relative to the search's
    lowest level, so it is put on when a search ends and when its levels are read back; nothing for other runs."""
    for o in result.outcomes:  # a level the search gave no verdict (cut, interrupted) reads none of its own either
        if (cut := o.serving) is not None and cut_short(o):
            cut.slo_met = None
    found = answer(result) if (result.manifest.capacity or {}).get("cache_drop") is not None else None
    if found is None:
        return
    by_idx = {v.idx: v for v in found.verdicts}
    for o in result.outcomes:
        v, s = by_idx.get(o.idx), o.serving
        held = [c for c in v.checks if c.name == CLIFF_CHECK] if v is not None else []
        if s is None or not held:
            continue
        s.slo_checks = [c for c in s.slo_checks if c.name != CLIFF_CHECK] + held
        if s.slo_met and not held[0].met:
            s.slo_met = False


def _spec(result: RunResult, stored: dict[str, Any]) -> SearchSpec | None:
    if stored.get("axis"):
        try:
            return SearchSpec.from_dict(stored)
        except (TypeError, ValueError):
            return None
    levels = [o.level for o in result.outcomes if (s := o.serving) is not None and s.slo_met is not None]
    if not levels:
        return None
    axis: Axis = "rate" if any(lv.rate is not None for lv in levels) else "concurrency"
    values = [v for lv in levels if (v := (lv.rate if axis == "rate" else lv.concurrency))]
    return SearchSpec(axis, min(values), max(values)) if values else None


def _ended(spec: SearchSpec, last_pass: float | None, first_fail: float | None, status: str,
           searched: bool) -> Ended:
    """How a search ended where it did not say (it says once it ends): interrupted, or cut short by an error (its
    server gone); a sweep's levels read as a search, by the range they span."""
    if status == "interrupted":
        return "interrupted"
    if searched:
        return "running"
    if last_pass is None:
        return "none"
    if first_fail is None:
        return "all"
    return "resolved" if spec.resolved(last_pass, first_fail) else "budget"
