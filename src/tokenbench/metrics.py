"""Pure functions from request records to a level summary. No I/O.

Definitions follow DESIGN.md and match ``vllm bench serve`` so numbers are comparable:
- TTFT: request sent -> first chunk carrying a generated token (reasoning or answer).
- E2E: request sent -> last byte of the response.
- TPOT: (E2E - TTFT) / (output_tokens - 1) per request; undefined for one output token.
- ITL: gaps between successive token-bearing chunks (the per-chunk rule; a chunk may carry
  several tokens, and ``tokens_per_chunk_mean`` says how many on average).
- Percentiles: linear interpolation between closest ranks (numpy's default, as vLLM uses).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

from .checks import GuardSnapshot
from .keyed import Keyed
from .findings import Code, Finding
from .records import RequestRecord
from .slo import (SLO, SloCheck, assess, request_itls_ms, request_meets,
                  request_tpot_ms, session_seconds)

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000

T = TypeVar("T")


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of pre-sorted values (numpy 'linear' method), q in [0, 100]."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


@dataclass(slots=True)
class Distribution:
    """One type for every metric: count, mean, std, min, max and percentiles, in the unit of its name."""

    n: int
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, values: list[float]) -> Distribution:
        if not values:
            return cls(n=0)
        s = sorted(values)
        return cls(
            n=len(s),
            mean=statistics.fmean(s),
            std=statistics.pstdev(s) if len(s) > 1 else 0.0,
            min=s[0],
            max=s[-1],
            p50=percentile(s, 50),
            p90=percentile(s, 90),
            p95=percentile(s, 95),
            p99=percentile(s, 99),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class TurnPoint:
    """One turn of an agent session, over every session of a level that reached it: the context the turn sent,
    how much of it the server's prefix cache served, and what the turn cost in time."""

    turn: int  # 0: the first turn
    n: int  # successful requests at this turn
    context_tokens_mean: float | None  # the whole prompt the turn sent (system, history, new tool result)
    cached_tokens_mean: float | None  # of which the server said it served from its cache (None: it did not say)
    uncached_tokens_mean: float | None  # the rest, which it prefilled
    ttft_ms: Distribution
    tpot_ms: Distribution

    @property
    def decode_tps(self) -> float | None:
        """1 / median TPOT: the turn's decode rate at its context."""
        return 1000.0 / self.tpot_ms.p50 if self.tpot_ms.p50 else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["decode_tps"] = self.decode_tps
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TurnPoint:
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        for k in ("ttft_ms", "tpot_ms"):
            d[k] = Distribution(**d[k]) if isinstance(d.get(k), dict) else Distribution(n=0)
        return cls(**d)


@dataclass(slots=True)
class SessionStats:
    """An agent-session level (sessions.py): sessions that grow turn by turn, re-sending their history. ``cache``
    says whether the history could be served from the prefix cache (``warm``) or every turn began with a marker
    no cache can serve (``busted``, the baseline that says what the cache bought)."""

    cache: str  # "warm" or "busted"
    sessions: int  # sessions started in the measured window
    sessions_finished: int  # ... whose every turn succeeded
    turns_per_session: float | None  # turns sent, mean over sessions
    session_s: Distribution  # first turn sent -> last turn's last byte, think times included (finished sessions)
    cached_share: float | None  # cached prompt tokens / prompt tokens, over the turns whose server said
    cached_source: str | None  # where the cached counts came from ("usage", "server_timings", mixed)
    #: the server's own prefix-cache hit share over the level (/metrics), beside the responses' ``cached_share``
    server_hit_share: float | None = None
    compactions: int = 0  # sessions that reached the context cap and were compacted
    capped: int = 0  # sessions that reached the context cap and ended
    turns: list[TurnPoint] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["turns"] = [t.to_dict() for t in self.turns]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SessionStats:
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        d["session_s"] = Distribution(**d["session_s"]) if isinstance(d.get("session_s"), dict) else Distribution(n=0)
        d["turns"] = [TurnPoint.from_dict(t) for t in d.get("turns") or [] if isinstance(t, dict)]
        return cls(**d)


def _turn_point(turn: int, at: list[RequestRecord]) -> TurnPoint:
    """One turn over the sessions' successful requests at it."""
    ctx = [r.input_tokens for r in at if r.input_tokens is not None]
    cached = [r.cached_tokens for r in at if r.cached_tokens is not None]
    uncached = [r.input_tokens - r.cached_tokens for r in at if r.input_tokens is not None and r.cached_tokens is not None]
    return TurnPoint(
        turn=turn, n=len(at), context_tokens_mean=_mean(ctx), cached_tokens_mean=_mean(cached),
        uncached_tokens_mean=_mean(uncached),
        ttft_ms=Distribution.of([r.ttft_ns / NS_PER_MS for r in at if r.ttft_ns is not None]),
        # a response whose tokens all arrived in one network read (a stalled client, a server that buffers) has no
        # decode time to measure: 0 ms per token would read as millions of tokens per second
        tpot_ms=Distribution.of([v for r in at if len(set(r.chunk_ns)) > 1 and (v := request_tpot_ms(r)) is not None]))


def cached_share(ok: list[RequestRecord]) -> tuple[float | None, str | None]:
    """Cached prompt tokens / prompt tokens over the successful requests whose server said how many it served
    from its prefix cache, and where it said so (``usage``, ``server_timings``, mixed); (None, None) where no
    server said."""
    said = [r for r in ok if r.cached_tokens is not None and r.input_tokens]
    prompt = sum(r.input_tokens or 0 for r in said)
    return (sum(r.cached_tokens or 0 for r in said) / prompt if prompt else None), _source(said, "cached_tokens_source")


def session_stats(records: list[RequestRecord], cache: str) -> SessionStats:
    """The session view of a level's measured records (each carries its ``session`` and ``turn``)."""
    measured = [r for r in records if r.phase == "measured" and r.session is not None]
    by_session: dict[int, list[RequestRecord]] = {}
    for r in measured:
        by_session.setdefault(r.session or 0, []).append(r)
    ok = [r for r in measured if r.ok]
    share, source = cached_share(ok)
    times = session_seconds(list(by_session.values()))
    return SessionStats(
        cache=cache, sessions=len(by_session), sessions_finished=len(times),
        turns_per_session=statistics.fmean(len(rs) for rs in by_session.values()) if by_session else None,
        session_s=Distribution.of(times), cached_share=share, cached_source=source,
        turns=[_turn_point(k, [r for r in ok if r.turn == k]) for k in sorted({r.turn for r in ok if r.turn is not None})])


@dataclass(slots=True)
class ClientReport(Keyed):
    """What the client saw of itself during one level (loadgen.ClientWatch: its CPU, event-loop lag and requests
    in flight; with several workers, the busiest one's figures, every worker's and their clocks; with Ray, each
    node's guard), and for a llama-bench style depth level, its steps one by one. The JSON contract's ``client``
    object, written back with the keys, values and order it was read with (keyed.Keyed)."""

    cpu_pct: float | None = None
    loop_lag_samples: int | None = None
    loop_lag_ms_p50: float | None = None
    loop_lag_ms_p99: float | None = None
    loop_lag_ms_max: float | None = None
    inflight_mean: float | None = None
    worker: str | None = None  # one worker's report: its name
    workers: list[Any] | None = None  # every worker's report
    clocks: list[Any] | None = None  # each worker's clock against the parent's
    node_guards: list[Any] | None = None  # Ray: each node's guard snapshot
    # a depth level's steps: the rate of each repetition, the fill and prompt times, the server's own timings
    pp_tps_reps: list[Any] | None = None
    tg_tps_reps: list[Any] | None = None
    fill_ms: list[Any] | None = None
    pp_ms: list[Any] | None = None
    server_pp_tps: float | None = None
    server_tg_tps: float | None = None
    tg_tps_client: float | None = None  # the client's tg rate, withheld above the server's (chunks held back)


@dataclass(slots=True)
class Telemetry(Keyed):
    """What the server said of itself during one level, typed: its /metrics sampled (telemetry.summarize: the
    gauges' peak and mean, the counters' change over the level, the rates derived from them) and GPU power where
    NVML is (energy per output token, tokens per watt). The JSON contract's ``telemetry`` object, written back
    with the keys, values and order it was read with (keyed.Keyed)."""

    available: bool | None = None  # False: the server exposes no /metrics (``note`` says so)
    note: str | None = None
    failed_gets: int | None = None
    samples: int | None = None
    running_max: float | None = None
    running_mean: float | None = None
    waiting_max: float | None = None
    waiting_mean: float | None = None
    kv_cache_usage_max: float | None = None
    kv_cache_usage_mean: float | None = None
    busy_slots_per_decode_max: float | None = None
    busy_slots_per_decode_mean: float | None = None
    counters: dict[str, Any] | None = None  # each counter's change over the level
    prefix_cache_hit_rate: float | None = None
    spec_acceptance_rate: float | None = None
    spec_mean_acceptance_length: float | None = None
    #: the mean time the level's finished requests waited in the engine's queue (its histogram's sum over count)
    queue_time_mean_ms: float | None = None
    gpu_power: str | None = None  # "not available" without NVML
    gpu_power_w_mean: float | None = None
    energy_j: float | None = None
    j_per_output_token: float | None = None
    output_tokens_per_watt: float | None = None


#: The latencies with an error split, as ``ServingLevel`` names them.
FAILED_SPLITS = ("e2e_failed_ms", "ttft_failed_ms", "itl_failed_ms", "ttfb_failed_ms")

#: The JSON result contract's level keys, in the order a level is written (DESIGN.md: extend, never rename).
#: Both kinds of level write every key, the other kind's empty, so a stored run reads the same whatever it holds.
LEVEL_KEYS = (
    "concurrency", "rate", "completed", "failed", "errors", "duration_s", "output_throughput_tps", "per_agent_tps",
    "request_throughput_rps", "input_tokens_mean", "output_tokens_mean", "output_tokens_source", "ttft_ms",
    "tpot_ms", "itl_ms", "e2e_ms", "ttfb_ms", "time_to_first_answer_ms", "flags", "cost_per_mtok",
    "total_input_tokens", "total_output_tokens", "reasoning_tokens_mean", "reasoning_share",
    "answer_throughput_tps", "output_tokens_min", "output_tokens_max", "expected_output_tokens",
    "input_tokens_source", "tokens_per_chunk_mean", "itl_rule", "prefill_tps", "decode_tps",
    "achieved_concurrency", "send_delay_ms", "send_queue_ms", "time_to_first_text_ms", *FAILED_SPLITS,
    "goodput_rps", "slo", "slo_met", "slo_checks", "warnings", "client", "test", "depth", "pp_tps", "tg_tps",
    "pp_tps_sd", "tg_tps_sd", "pp_tps_dist", "tg_tps_dist", "guard", "telemetry", "findings", "session",
    "cached_share", "cached_source",
)

#: The keys whose value is a Distribution, in either kind of level.
DISTRIBUTIONS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "ttfb_ms", "time_to_first_answer_ms", "send_delay_ms",
                 "send_queue_ms", "time_to_first_text_ms", "pp_tps_dist", "tg_tps_dist", *FAILED_SPLITS)


def _nothing() -> Distribution:
    return Distribution(n=0)


@dataclass(slots=True, kw_only=True)
class LevelSummary:
    """One operating point, measured, imported or predicted: what both kinds of level hold. A level is a
    ``ServingLevel`` (requests under load: ``test`` None or "serve") or a ``DepthLevel`` (llama-bench's one
    stream at a context depth: ``test`` "pp512", "tg128", ...); ``LevelSummary.from_dict`` reads either from
    the JSON contract and returns the kind its ``test`` names. Code that needs one kind's figures narrows with
    ``isinstance``; ``serving(levels)`` and ``depth_levels(levels)`` pick them out of a run."""

    concurrency: int | None = 1
    rate: float | None = None  # open loop: requests per second offered (None: a closed loop)
    completed: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    duration_s: float = 0.0
    #: the shape of a request: tokens in its prompt and out of it (a depth level's pp prompt, tg output)
    input_tokens_mean: float | None = None
    output_tokens_mean: float | None = None
    flags: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    client: ClientReport = field(default_factory=ClientReport)
    test: str | None = None  # "serve" (or None), "pp512", "tg128", ...
    depth: int | None = None  # context tokens already in the cache before the measured prompt
    guard: GuardSnapshot | None = None  # the clean-bench guard's snapshot taken before this level
    telemetry: Telemetry | None = None  # what the server's /metrics (and NVML) said during this level
    #: the typed findings (findings.py) behind ``flags`` and ``warnings``, which are their view
    findings: list[Finding] = field(default_factory=list)

    def add(self, finding: Finding) -> bool:
        """Record a finding, once per code, and keep ``flags`` and ``warnings`` (its view) in step. Returns
        whether it was new."""
        if self.finding(finding.code) is not None:
            return False
        self.findings.append(finding)
        if finding.code.value not in self.flags:
            self.flags.append(finding.code.value)
        if finding.severity == "warning":
            self.warnings.append(finding.text)
        return True

    def finding(self, code: Code) -> Finding | None:
        return next((f for f in self.findings if f.code == code), None)

    def _own(self) -> dict[str, Any]:
        """This level's own fields in the contract's JSON values (typed values written by their to_dict)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if hasattr(v, "to_dict"):  # a Distribution, ClientReport, Telemetry, GuardSnapshot, SessionStats
                out[f.name] = v.to_dict()
            elif isinstance(v, list):
                out[f.name] = [x.to_dict() if hasattr(x, "to_dict") else x for x in v]
            elif isinstance(v, dict):
                out[f.name] = dict(v)
            else:
                out[f.name] = v
        return out

    def to_dict(self) -> dict[str, Any]:
        """The level in the result contract's names and order, derived rates included where the contract lists
        them, the other kind's keys empty."""
        raise NotImplementedError

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LevelSummary:
        """A level read from the JSON contract: a ``DepthLevel`` where its ``test`` is a llama-bench test, else a
        ``ServingLevel``. Unknown keys are dropped (a newer writer's), malformed typed values read as absent."""
        d = dict(d)
        for k in DISTRIBUTIONS:
            if isinstance(d.get(k), dict):
                d[k] = Distribution(**d[k])
        d["telemetry"] = Telemetry.from_dict(d["telemetry"]) if isinstance(d.get("telemetry"), dict) else None
        d["client"] = ClientReport.from_dict(d["client"]) if isinstance(d.get("client"), dict) else ClientReport()
        d["guard"] = GuardSnapshot.from_dict(d["guard"]) if isinstance(d.get("guard"), dict) else None
        # runs stored before findings have flags and warnings only: they load with no findings
        stored = d.get("findings")
        d["findings"] = [f for x in (stored if isinstance(stored, list) else [])
                         if isinstance(x, dict) and (f := Finding.from_dict(x))]
        kind: type[LevelSummary] = ServingLevel if d.get("test") in (None, "serve") else DepthLevel
        return kind._read(d)

    @classmethod
    def _read(cls, d: dict[str, Any]) -> LevelSummary:
        return _built(cls, d)


@dataclass(slots=True, kw_only=True)
class ServingLevel(LevelSummary):
    """A level of requests under load (a concurrency or a rate; an agent-session level): latencies, throughput,
    what the client and the SLO said."""

    output_throughput_tps: float = 0.0
    request_throughput_rps: float = 0.0
    output_tokens_source: str | None = None
    ttft_ms: Distribution = field(default_factory=_nothing)
    tpot_ms: Distribution = field(default_factory=_nothing)
    itl_ms: Distribution = field(default_factory=_nothing)
    e2e_ms: Distribution = field(default_factory=_nothing)
    ttfb_ms: Distribution = field(default_factory=_nothing)
    time_to_first_answer_ms: Distribution = field(default_factory=_nothing)
    cost_per_mtok: float | None = None
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    reasoning_tokens_mean: float | None = None
    #: share of output tokens spent on reasoning, and the answer tokens per second that leaves (issue 12)
    reasoning_share: float | None = None
    answer_throughput_tps: float | None = None
    output_tokens_min: int | None = None
    output_tokens_max: int | None = None
    expected_output_tokens: int | None = None
    input_tokens_source: str | None = None
    tokens_per_chunk_mean: float | None = None
    itl_rule: str = "per_chunk"
    prefill_tps: float | None = None  # input tokens / TTFT, reported at concurrency 1 only
    #: a decode rate a source gave as such (a published table); otherwise ``decode_tps`` is derived
    given_decode_tps: float | None = None
    achieved_concurrency: float | None = None
    send_delay_ms: Distribution | None = None  # open loop: actual - scheduled send time
    send_queue_ms: Distribution | None = None  # request on the socket - request started: the client's own wait
    #: request sent -> first chunk with visible text; later than TTFT where the first tokens' text was held back
    #: (a piece of a multi-byte character) or empty; None for levels stored before it existed
    time_to_first_text_ms: Distribution | None = None
    #: the error split of each latency, over the failed requests (``ttft_ms``, ``itl_ms``, ``e2e_ms`` and
    #: ``ttfb_ms`` are the success split): request sent -> failure (its last byte, or the client giving up);
    #: the first token and the gaps between chunks of a stream that then failed (a server that dies mid-stream,
    #: a stall); the first byte of an answer that failed (an HTTP error's body, a stream's error event). None
    #: for a level not measured here (an import, a prediction, a run stored before the split)
    e2e_failed_ms: Distribution | None = None
    ttft_failed_ms: Distribution | None = None
    itl_failed_ms: Distribution | None = None
    ttfb_failed_ms: Distribution | None = None
    goodput_rps: float | None = None
    slo: str | None = None
    slo_met: bool | None = None
    #: each level objective of the SLO: its value, verdict and how sure (slo.assess); empty without an SLO
    slo_checks: list[SloCheck] = field(default_factory=list)
    #: an agent-session level: its turns, sessions and what the prefix cache served (None: not a session level)
    session: SessionStats | None = None
    #: cached prompt tokens / prompt tokens over the level's successful requests, as their servers said
    #: (``metrics.cached_share``; None where no response said), and where they said it
    cached_share: float | None = None
    cached_source: str | None = None

    @property
    def per_agent_tps(self) -> float | None:
        """Aggregate output throughput / concurrency (how the published tables define it); an open-loop level
        divides by the concurrency it achieved. None for a level with no throughput figure."""
        agents = self.concurrency or self.achieved_concurrency
        if not agents or not (self.output_throughput_tps or self.completed or self.failed):
            return None
        return self.output_throughput_tps / agents

    @property
    def decode_tps(self) -> float | None:
        """Single-stream decode rate, 1 / median TPOT of the requests measured at concurrency 1 (llama-bench's
        "tg"), unless a source gave one."""
        if self.given_decode_tps is not None:
            return self.given_decode_tps
        if self.concurrency == 1 and self.completed and self.tpot_ms.p50:
            return 1000.0 / self.tpot_ms.p50
        return None

    def to_dict(self) -> dict[str, Any]:
        own = self._own()
        own["per_agent_tps"], own["decode_tps"] = self.per_agent_tps, self.decode_tps
        return {k: own.get(k) for k in LEVEL_KEYS}

    @classmethod
    def _read(cls, d: dict[str, Any]) -> LevelSummary:
        d["session"] = SessionStats.from_dict(d["session"]) if isinstance(d.get("session"), dict) else None
        checks = d.get("slo_checks")
        d["slo_checks"] = [c for x in (checks if isinstance(checks, list) else [])
                           if isinstance(x, dict) and (c := SloCheck.from_dict(x))]
        # per_agent_tps and decode_tps are derived; a stored decode rate is kept only where nothing derives it
        decode = d.get("decode_tps")
        tpot = d.get("tpot_ms")
        derived = d.get("concurrency") == 1 and d.get("completed") and isinstance(tpot, Distribution) and tpot.p50
        if decode is not None and not derived:
            d.setdefault("given_decode_tps", decode)
        return _built(cls, d)


@dataclass(slots=True, kw_only=True)
class DepthLevel(LevelSummary):
    """llama-bench's figure for one test at one depth, one stream (a depth run, an imported llama-bench or
    published row, a prediction): the prompt rate (pp) or the generation rate (tg) over its repetitions."""

    pp_tps: float | None = None
    tg_tps: float | None = None
    #: llama-bench's sample standard deviation over the repetitions
    pp_tps_sd: float | None = None
    tg_tps_sd: float | None = None
    #: a measured depth level's rate over its repetitions, as every other measured quantity: a Distribution
    #: (its std the population's; ``pp_tps_sd``/``tg_tps_sd`` are llama-bench's sample standard deviation)
    pp_tps_dist: Distribution | None = None
    tg_tps_dist: Distribution | None = None

    def to_dict(self) -> dict[str, Any]:
        own = self._own()
        blank = _serving_blank()
        return {k: own[k] if k in own else blank.get(k) for k in LEVEL_KEYS}


def _built(kind: type[LevelSummary], d: dict[str, Any]) -> LevelSummary:
    """A level of ``kind`` from its keys (typed values already read); the keys it has no field for are dropped
    (a newer writer's, or the other kind's, written empty). A module function: a slotted dataclass's methods
    cannot call ``super()`` without arguments."""
    known = {f.name for f in fields(kind)}
    return kind(**{k: v for k, v in d.items() if k in known})


def _serving_blank() -> dict[str, Any]:
    """A serving level's keys with nothing measured: what a depth level writes for them."""
    return ServingLevel()._own()


def of_serving(get: Callable[[ServingLevel], T]) -> Callable[[LevelSummary], T | None]:
    """A figure only a serving level has, read off any level: None on a depth level (a table's column, a
    compared metric)."""
    return lambda s: get(s) if isinstance(s, ServingLevel) else None


def of_depth(get: Callable[[DepthLevel], T]) -> Callable[[LevelSummary], T | None]:
    """A figure only a depth level has, read off any level: None on a serving level."""
    return lambda s: get(s) if isinstance(s, DepthLevel) else None


def serving(levels: Iterable[LevelSummary]) -> list[ServingLevel]:
    """The serving levels among ``levels``, in order."""
    return [s for s in levels if isinstance(s, ServingLevel)]


def depth_levels(levels: Iterable[LevelSummary]) -> list[DepthLevel]:
    """The depth levels among ``levels``, in order."""
    return [s for s in levels if isinstance(s, DepthLevel)]


def _source(records: list[RequestRecord], attr: str) -> str | None:
    sources = Counter(getattr(r, attr) for r in records if getattr(r, attr))
    if not sources:
        return None
    if len(sources) == 1:
        return next(iter(sources))
    return "mixed:" + ",".join(f"{k}={v}" for k, v in sorted(sources.items()))


def _ms_since_sent(records: list[RequestRecord], attr: str) -> list[float]:
    return [(t - r.sent_ns) / NS_PER_MS for r in records if (t := getattr(r, attr)) is not None]


def _ends(records: list[RequestRecord]) -> list[int]:
    return [r.end_ns for r in records if r.end_ns is not None]


def _latencies(ok: list[RequestRecord]) -> tuple[Distribution, ...]:
    """TTFT, TPOT, ITL, E2E, TTFB, time to first answer and time to first visible text of the requests (the
    successful ones, or the failed ones for the error split), in that order."""
    return (
        Distribution.of([r.ttft_ns / NS_PER_MS for r in ok if r.ttft_ns is not None]),
        Distribution.of([v for r in ok if (v := request_tpot_ms(r)) is not None]),
        Distribution.of([v for r in ok for v in request_itls_ms(r)]),
        Distribution.of([r.e2e_ns / NS_PER_MS for r in ok if r.e2e_ns is not None]),
        Distribution.of(_ms_since_sent(ok, "first_byte_ns")),
        Distribution.of(_ms_since_sent(ok, "first_answer_ns")),
        Distribution.of(_ms_since_sent(ok, "first_text_ns")),
    )




def _failure_split(summary: ServingLevel, failed: list[RequestRecord]) -> None:
    """Each latency's error split: the same definitions as the success split, over the failed requests."""
    ttft, _tpot, itl, e2e, ttfb, _ttfa, _text = _latencies(failed)
    summary.e2e_failed_ms, summary.ttft_failed_ms, summary.itl_failed_ms, summary.ttfb_failed_ms = e2e, ttft, itl, ttfb


def _achieved_concurrency(measured: list[RequestRecord], start_ns: int, end_ns: int) -> float | None:
    """The requests in flight on average over the window: busy time / window."""
    busy_ns = sum(r.e2e_ns for r in measured if r.e2e_ns is not None)
    return busy_ns / (end_ns - start_ns) if end_ns > start_ns else None


def _mean(values: list[int]) -> float | None:
    return statistics.fmean(values) if values else None


def _reasoning(summary: ServingLevel, ok: list[RequestRecord]) -> None:
    """Reasoning tokens are output tokens: the share of the output budget they took, and what is left."""
    if not any(r.reasoning_tokens for r in ok):
        return
    summary.reasoning_tokens_mean = statistics.fmean([r.reasoning_tokens or 0 for r in ok])
    if summary.total_output_tokens:
        summary.reasoning_share = min(1.0, sum(r.reasoning_tokens or 0 for r in ok) / summary.total_output_tokens)
        summary.answer_throughput_tps = summary.output_throughput_tps * (1 - summary.reasoning_share)


def _prefill_tps(summary: ServingLevel, ok: list[RequestRecord]) -> float | None:
    """Prefill rate, median input tokens / TTFT (llama-bench's "pp"): concurrency 1 only. The decode rate is
    derived from TPOT (``LevelSummary.decode_tps``)."""
    if summary.concurrency != 1:
        return None
    pp = [r.input_tokens / (r.ttft_ns / NS_PER_S) for r in ok if r.input_tokens and r.ttft_ns]
    return statistics.median(pp) if pp else None


def client_delays(measured: list[RequestRecord]) -> tuple[Distribution | None, Distribution | None]:
    """The client's own lateness: sends after their scheduled arrival (open loop), and the wait from the start
    of a send to its last byte on the socket (``send_queue_ms``)."""
    delays = [(r.sent_ns - r.scheduled_ns) / NS_PER_MS for r in measured if r.scheduled_ns is not None]
    queued = [(r.written_ns - r.sent_ns) / NS_PER_MS for r in measured if r.written_ns is not None]
    return (Distribution.of(delays) if delays else None), (Distribution.of(queued) if queued else None)


def _client_delays(summary: ServingLevel, measured: list[RequestRecord]) -> None:
    summary.send_delay_ms, summary.send_queue_ms = client_delays(measured)


def _goodput(summary: ServingLevel, measured: list[RequestRecord], slo: SLO | None) -> None:
    """Goodput (the requests within every per-request limit, per second) and each level objective's verdict
    (``slo.assess``: the value, pass or fail, how sure); the level meets the SLO when every objective passes."""
    if slo is None or not (slo.per_request_ms or slo.decides_levels):
        return
    ok = [r for r in measured if r.ok]
    good = [r for r in ok if request_meets(r, slo.per_request_ms)]
    summary.goodput_rps = len(good) / summary.duration_s
    summary.slo = slo.describe()
    summary.slo_checks = assess(summary, measured, slo)
    summary.slo_met = all(c.met for c in summary.slo_checks)


def summarize(
    records: list[RequestRecord],
    *,
    concurrency: int | None,
    rate: float | None,
    window_start_ns: int,
    window_end_ns: int | None = None,
    slo: SLO | None = None,
) -> ServingLevel:
    """The statistics of one level's measured requests (warm-up records are ignored here). What the numbers
    cannot say by themselves is decided in ``findings``, and what they cost in ``cost``."""
    measured = [r for r in records if r.phase == "measured"]
    ok = [r for r in measured if r.ok]
    failed = [r for r in measured if not r.ok]
    end = window_end_ns if window_end_ns is not None else max(_ends(measured), default=window_start_ns)
    duration_s = max(end - window_start_ns, 1) / NS_PER_S
    out_tokens = [r.output_tokens for r in ok if r.output_tokens is not None]
    in_tokens = [r.input_tokens for r in ok if r.input_tokens is not None]
    chunks = sum(len(r.chunk_ns) for r in ok)
    ttft, tpot, itl, e2e, ttfb, ttfa, ttftext = _latencies(ok)
    summary = ServingLevel(
        concurrency=concurrency,
        rate=rate,
        completed=len(ok),
        failed=len(failed),
        errors=dict(Counter(r.error_kind for r in failed if r.error_kind)),
        duration_s=duration_s,
        output_throughput_tps=sum(out_tokens) / duration_s,
        request_throughput_rps=len(ok) / duration_s,
        input_tokens_mean=_mean(in_tokens),
        output_tokens_mean=_mean(out_tokens),
        output_tokens_source=_source(ok, "output_tokens_source"),
        ttft_ms=ttft, tpot_ms=tpot, itl_ms=itl, e2e_ms=e2e, ttfb_ms=ttfb, time_to_first_answer_ms=ttfa,
        flags=[],
        total_input_tokens=sum(in_tokens),
        total_output_tokens=sum(out_tokens),
        output_tokens_min=min(out_tokens, default=None),
        output_tokens_max=max(out_tokens, default=None),
        expected_output_tokens=next((r.expected_output_tokens for r in ok if r.expected_output_tokens), None),
        input_tokens_source=_source(ok, "input_tokens_source"),
        tokens_per_chunk_mean=sum(out_tokens) / chunks if chunks else None,
        time_to_first_text_ms=ttftext,
    )
    _failure_split(summary, failed)
    _reasoning(summary, ok)
    summary.achieved_concurrency = _achieved_concurrency(measured, window_start_ns, end)
    summary.prefill_tps = _prefill_tps(summary, ok)
    _client_delays(summary, measured)
    _goodput(summary, measured, slo)
    summary.cached_share, summary.cached_source = cached_share(ok)
    return summary


def coefficient_of_variation(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None]
    if len(vals) < 2:
        return None
    mean = statistics.fmean(vals)
    return statistics.stdev(vals) / mean if mean else None


def peak_in_flight(records: list[RequestRecord]) -> int:
    """The most requests that were in flight at once (from each request's send to its last byte)."""
    events = []
    for r in records:
        if r.end_ns is not None:
            events.append((r.sent_ns, 1))
            events.append((r.end_ns, -1))
    events.sort(key=lambda e: (e[0], e[1]))  # an end and a send at the same instant do not overlap
    peak = cur = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak
