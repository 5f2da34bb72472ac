"""What a level is, typed: the two kinds of level (``ServingLevel``: requests under load; ``DepthLevel``:
llama-bench's one stream at a context depth) on their base ``LevelSummary``, what they carry (the client's report
of itself, the server's telemetry, an agent session's statistics, findings), and the JSON contract they are
written in and read back from (``LEVEL_KEYS``, ``LevelSummary.from_dict``). The numbers are computed in
``metrics.py``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

from .grace import CUT_KINDS
from .guard_results import GuardSnapshot
from .replay_stats import ReplayStats
from .steady import Plateau, Waves
from .distribution import Distribution
from .client_report import ClientReport
from .finding import Code, Finding
from .jsontext import finite_number
from .keyed import Keyed
from .slo import SloCheck
from .soak import SoakWindow
from .tenants import BackgroundStats

T = TypeVar("T")


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
    #: a predicted turn's floors (ms), the fastest it could be at efficiency 1 (``ttft_ms``, ``tpot_ms``: the
    #: medians'), which no band around the prediction reaches past; None for a turn measured
    limits: dict[str, float] | None = None

    @property
    def decode_tps(self) -> float | None:
        """1 / median TPOT: the turn's decode rate at its context."""
        return 1000.0 / self.tpot_ms.p50 if self.tpot_ms.p50 else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        limits = out.pop("limits")  # the keys the contract gained come after the ones it had (decode_tps)
        return out | {"decode_tps": self.decode_tps, "limits": limits}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TurnPoint:
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        for k in ("ttft_ms", "tpot_ms"):
            d[k] = Distribution(**d[k]) if isinstance(d.get(k), dict) else Distribution(n=0)
        d["limits"] = _limits(d.get("limits"))
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
    cut: int = 0  # sessions a soak's end or an interrupt cut short (not whole: out of session_s)
    over_time: list[SoakWindow] = field(default_factory=list)  # a soak's turns in tenths of its duration
    background: BackgroundStats | None = None  # the batch load beside the sessions (tenants.py)
    #: the cached share's standard error, each session one sample (None: fewer than two sessions said)
    cached_share_se: float | None = None
    #: a soak that let go of ended sessions' records to bound its memory: the sessions it kept, a uniform sample.
    #: Its counts, rates, shares, latencies and tenths are over every turn; its per-turn rows, error split,
    #: objectives and findings over the sample (None: every session kept)
    sampled_sessions: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["turns"] = [t.to_dict() for t in self.turns]
        out["over_time"] = [w.to_dict() for w in self.over_time]
        out["background"] = self.background.to_dict() if self.background is not None else None
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SessionStats:
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        d["session_s"] = Distribution(**d["session_s"]) if isinstance(d.get("session_s"), dict) else Distribution(n=0)
        d["turns"] = [TurnPoint.from_dict(t) for t in d.get("turns") or [] if isinstance(t, dict)]
        d["over_time"] = [w for x in d.get("over_time") or [] if isinstance(x, dict)
                          and (w := SoakWindow.from_dict(x)) is not None]
        bg = d.get("background")
        d["background"] = BackgroundStats.from_dict(bg) if isinstance(bg, dict) else None
        return cls(**d)


#: How a level's power note begins where no meter was there to read the box (none named, none on the host), not
#: where one stopped: the first is said of every level alike, the second only of the levels it cost.
NO_METER_NOTES = ("no meter reads the box under test", "the server host has no power source its agent reads",
                  "this machine has no power source tokenbench reads")


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
    #: prompt tokens served from the cache, by the tier that supplied them ("device", "host", "disk"; vLLM)
    cached_by_tier: dict[str, float] | None = None
    spec_acceptance_rate: float | None = None
    spec_mean_acceptance_length: float | None = None
    #: the mean time the level's finished requests waited in the engine's queue (its histogram's sum over count)
    queue_time_mean_ms: float | None = None
    gpu_power: str | None = None  # "not available": nothing read the box under test's power
    gpu_power_w_mean: float | None = None  # the mean watts of the source below (a GPU board, a package, a box)
    energy_j: float | None = None
    j_per_output_token: float | None = None
    output_tokens_per_watt: float | None = None
    power_source: str | None = None  # where the watts were read: "nvml", "amdgpu hwmon", "rapl", a URL, a command
    power_measures: str | None = None  # what it measures: a GPU board, an APU package, a CPU package, a whole box
    power_partial: bool | None = None  # the source stopped (or started) within the level: its figure is partial
    power_note: str | None = None  # why there is no figure, or what limits it
    idle_power_w: float | None = None  # the same source with the box idle before the run (--idle-power)
    power_above_idle_share: float | None = None  # the level's watts above idle over its watts


#: The latencies with an error split, as ``ServingLevel`` names them.
FAILED_SPLITS = ("e2e_failed_ms", "ttft_failed_ms", "itl_failed_ms", "ttfb_failed_ms")

#: The JSON result contract's level keys, in the order a level is written (docs/results.md: extend, never rename).
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
    "cached_share", "cached_source", "replay", "time_to_first_tool_ms", "plateau", "ttft_from_arrival_ms",
    "e2e_from_arrival_ms", "waves", "limits",
)

#: The figures a predicted level's ``limits`` may hold (LevelSummary.limits).
LIMITS = ("output_throughput_tps", "ttft_ms", "ttft_p99_ms", "tpot_ms", "pp_tps", "tg_tps")

#: The keys whose value is a Distribution, in either kind of level.
DISTRIBUTIONS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "ttfb_ms", "time_to_first_answer_ms", "send_delay_ms",
                 "send_queue_ms", "time_to_first_text_ms", "pp_tps_dist", "tg_tps_dist", *FAILED_SPLITS,
                 "time_to_first_tool_ms", "ttft_from_arrival_ms", "e2e_from_arrival_ms")


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
    #: a predicted level's physical limits, in its figures' units: the fastest each could be at efficiency 1 (a
    #: rate's ceiling: ``output_throughput_tps``, ``pp_tps``, ``tg_tps``; a time's floor: ``ttft_ms`` the median's,
    #: ``ttft_p99_ms`` the slowest prompt's, ``tpot_ms``), which no band around the prediction reaches past; None
    #: for a level measured or imported
    limits: dict[str, float] | None = None

    @property
    def cut(self) -> int:
        """Requests in flight when the run was interrupted (Ctrl-C) or a duration's grace ran out: counted in
        ``failed``, under ``errors``' "interrupted" or "level_end" (grace.CUT_KINDS), though no server failed them."""
        return sum(self.errors.get(k, 0) for k in CUT_KINDS)

    def ok_failed(self, sep: str = "/") -> str | None:
        """The requests that came back and those that failed, the ones an interrupt cut apart ("8/0, 4 cut");
        None for a level that sent none."""
        if not (self.completed or self.failed):
            return None
        return f"{self.completed}{sep}{self.failed - self.cut}" + (f", {self.cut} cut" if self.cut else "")

    def add(self, finding: Finding, replace: bool = False) -> bool:
        """Record a finding, once per code, and keep ``flags`` and ``warnings`` (its view) in step. Returns
        whether it was new. ``replace``: this finding stands in for one of its code already there (a figure's own
        reading of a flag an imported table only marked)."""
        if (old := self.finding(finding.code)) is not None:
            if not replace:
                return False
            self.findings.remove(old)
            if old.text in self.warnings:
                self.warnings.remove(old.text)
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
        d["limits"] = _limits(d.get("limits"))
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
    #: share of output tokens spent on reasoning, and the answer tokens per second that leaves: a reasoning model's
    #: throughput counts tokens no reader sees
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
    #: a replay level of recorded agent trajectories: its trees, TTFT against context, validity (None: not one)
    replay: ReplayStats | None = None
    #: request sent -> first chunk carrying a tool call's tokens (its name or arguments), over the successful
    #: requests that called a tool, beside TTFT; None for a level not measured here or stored before it existed
    time_to_first_tool_ms: Distribution | None = None
    #: the level's figures over its steady state, beside the whole window's (steady.py; None: no plateau)
    plateau: Plateau | None = None
    #: an open loop's TTFT and end-to-end time from each request's scheduled arrival (None: a closed loop)
    ttft_from_arrival_ms: Distribution | None = None
    e2e_from_arrival_ms: Distribution | None = None
    #: a closed loop's waves: requests sent within one server step of each other, each size with its TTFT
    waves: Waves | None = None

    @property
    def sustained_tps(self) -> float:
        """The aggregate output rate the sweep table shows and a level's cost is priced at: over its plateau
        where it held its load (steady.py), else over its whole window, ramp and drain included."""
        return self.plateau.output_throughput_tps if self.plateau is not None else self.output_throughput_tps

    @property
    def sustained_per_agent_tps(self) -> float | None:
        """The per-agent rate the sweep table shows: the plateau's aggregate over the agents where the level held
        its load, else ``per_agent_tps``."""
        if self.plateau is not None and self.concurrency:
            return self.sustained_tps / self.concurrency
        return self.per_agent_tps

    @property
    def per_agent_tps(self) -> float | None:
        """Aggregate output throughput / concurrency (how the published tables define it); an open-loop level
        divides by the concurrency it achieved. None for a level with no throughput figure."""
        agents = self.concurrency or self.achieved_concurrency
        if not agents or not (self.output_throughput_tps or self.completed or self.failed):
            return None
        return self.output_throughput_tps / agents

    @property
    def under_one_in_flight(self) -> bool:
        """An open loop with under one request in flight on average: the aggregate over that would be a request's
        own speed, above the aggregate (a trace read 46.3 tok/s aggregate, 631.5 per agent)."""
        held = self.achieved_concurrency
        return not self.concurrency and held is not None and held < 1

    @property
    def per_agent_withheld(self) -> bool:
        """An open loop's per-agent rate is no figure (the tables show "—", the JSON null): a replay at the recorded
        times has no agent count, nor a level ``under_one_in_flight``."""
        return (not self.concurrency and self.replay is not None) or self.under_one_in_flight

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
        own["per_agent_tps"] = None if self.per_agent_withheld else self.per_agent_tps
        own["decode_tps"] = self.decode_tps
        return {k: own.get(k) for k in LEVEL_KEYS}

    @classmethod
    def _read(cls, d: dict[str, Any]) -> LevelSummary:
        d["session"] = SessionStats.from_dict(d["session"]) if isinstance(d.get("session"), dict) else None
        d["replay"] = ReplayStats.from_dict(d["replay"]) if isinstance(d.get("replay"), dict) else None
        d["plateau"] = Plateau.from_dict(d["plateau"]) if isinstance(d.get("plateau"), dict) else None
        d["waves"] = Waves.from_dict(d["waves"]) if isinstance(d.get("waves"), dict) else None
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


def _limits(v: Any) -> dict[str, float] | None:
    """A stored level's ``limits``: the known figures' finite positive limits; anything else read as absent."""
    if not isinstance(v, dict):
        return None
    out = {k: float(x) for k, x in v.items() if k in LIMITS and finite_number(x) and x > 0}
    return out or None


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
