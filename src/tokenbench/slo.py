"""Service-level objectives: what ``--slo`` says, whether a level met each objective, and how sure that verdict
is given the requests it rests on (a p99 from 40 requests is not a p99).

An objective is one of:

- a percentile limit on a latency, ``ttft_p99=2s``, ``tpot_p90=50ms``, ``itl_p99=200ms``, ``e2e_p50=30s``
  (TTFT of a session level is each turn's TTFT);
- a per-request limit, the same names without a percentile (``tpot=50ms``): a request over it is not good
  (goodput, as ``vllm bench serve --goodput``); it decides no level by itself;
- ``agent_tps=30``: at least this many output tokens per second per agent (``ServingLevel.per_agent_tps``);
- ``agent_tps_p90=20``: at least 90% of the requests read at this rate or faster, each its output tokens over its
  send to last byte (``request_rate``); a request slower than the floor is not good, as one over a percentile's
  latency limit is not;
- ``errors=1%``: at most this share of failed requests (without it, one failed request fails the level);
- ``session_p90=5m``: an agent session's time, first turn sent to last byte, at a percentile.

How sure a verdict is: a percentile limit holds when at most a share ``1 - p`` of the samples is over it. With
``k`` of ``n`` samples over, the verdict is *sure* when a one-sided exact binomial test rejects the other side at
5%: a pass is sure when ``P(X <= k | n, 1 - p) <= 0.05`` (so few over would be unlikely were the true share at
the limit), a fail when ``P(X >= k | n, 1 - p) <= 0.05``. A p99 passes surely only from 299 requests with none
over, a p90 from 29, a p50 from 5. ``agent_tps`` is a mean: sure when the limit lies outside its 95% interval
(the per-request rates' standard error). The failed share is tested as a percentile is.
"""

from __future__ import annotations

import difflib
import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .grace import CUT_KINDS, known_over
from .records import RequestRecord

if TYPE_CHECKING:
    from .levels import ServingLevel

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
#: A verdict is sure when the one-sided test's p-value is at most this.
SURE_P = 0.05
LATENCIES = ("ttft", "tpot", "e2e", "itl")
PERCENTILES = ("p50", "p90", "p95", "p99")


#: Every duration is written with its unit; this says how, wherever a duration is refused or a help text asks for one.
DURATION_RULE = "a duration takes its unit: ms, s, m or h (500ms, 2s, 5m); a bare number other than 0 is refused"
_UNITS = (("ms", 1.0), ("us", 1e-3), ("s", 1000.0), ("m", 60_000.0), ("h", 3_600_000.0))


def parse_duration_ms(text: str, units: tuple[str, str] = ("ms", "s")) -> float:
    """``2s``, ``50ms``, ``1.5m``, ``1h`` -> milliseconds. A bare number is refused (DURATION_RULE), but 0, which
    is 0 in any unit: ``ttft_p99=2`` read as 2 ms and ``--think-time 5000`` as 5,000 s, each by the convention of
    the tool it came from, and neither said what it meant."""
    t = text.strip().lower()
    try:
        for suffix, scale in _UNITS:
            if t.endswith(suffix):
                v = float(t[: -len(suffix)]) * scale
                break
        else:
            v = float(t)
            if math.isfinite(v) and v != 0:  # a negative one is shown as its size: the unit is what is missing
                bare = t.lstrip("-")  # ``units``: the two a value of this kind is likely in, suggested
                raise ValueError(f"'{text}' has no unit: write {bare}{units[0]} or {bare}{units[1]} ({DURATION_RULE})")
    except ValueError as e:
        if "has no unit" in str(e):
            raise
        raise ValueError(f"'{text}' is not a duration: write a number with a unit, e.g. 2s, 500ms or 5m") from None
    if not math.isfinite(v):
        # nan and inf, bare or with a unit: no unit makes them a time, so none is suggested
        raise ValueError(f"'{text}' is not a finite duration: write a number with a unit, e.g. 2s, 500ms or 5m")
    return v


def _rate(key: str, text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{key}={text}: give a positive rate in tokens/s, e.g. {key}=20")
    return v


def _share(text: str) -> float:
    t = text.strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        v = math.nan
    if not 0 <= v < 1:
        raise ValueError(f"errors={text}: give a share below 1, e.g. errors=1% or errors=0.01")
    return v


@dataclass(slots=True)
class SLO:
    """Service-level objectives: per-request limits in milliseconds, per-level percentile limits, and the level
    objectives that are not latencies (per-agent rate, failed share, session time)."""

    per_request_ms: dict[str, float] = field(default_factory=dict)  # ttft, tpot, e2e, itl
    percentile_ms: dict[tuple[str, str], float] = field(default_factory=dict)  # (metric, "p99") -> ms
    agent_tps: float | None = None  # at least, output tokens per second per agent
    error_share: float | None = None  # at most; None: no request may fail
    session_ms: dict[str, float] = field(default_factory=dict)  # "p90" -> ms
    #: "p90" -> tok/s: at least this share of the requests read their output at this rate or faster (output tokens
    #: over send to last byte): AA-AgentPerf's per-agent speed tiers
    agent_tps_pct: dict[str, float] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> SLO:
        """``ttft_p99=2s,tpot=50ms,agent_tps=30,errors=1%``. A bare latency is a per-request limit; ``_pNN`` a
        level limit that is also applied per request for goodput (a request over the limit never counts as good)."""
        slo, seen = cls(), set()
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            if not sep:
                raise ValueError(f"SLO '{part}' has no value: write it as metric=limit, e.g. ttft_p99=2s")
            key = key.strip().lower()
            if key in seen:
                raise ValueError(f"{key} is given twice: give each objective once")
            seen.add(key)
            slo._add(key, value)
        if not seen:
            raise ValueError("no objective given: write at least one, e.g. ttft_p99=2s")
        return slo

    @property
    def needs_sessions(self) -> str | None:
        """The objective that only agent sessions can be measured against (a session's time), or None."""
        return f"session_{next(iter(self.session_ms))}" if self.session_ms else None

    def check_workload(self, sessions: bool) -> None:
        """Refuse an objective the workload cannot measure: a session's time without agent sessions."""
        if not sessions and self.needs_sessions:
            raise ValueError(f"{self.needs_sessions} is an agent session's time: add --sessions, or drop it")

    def _add(self, key: str, value: str) -> None:
        if key.startswith("agent_tps_"):
            pct = key[len("agent_tps_"):]
            if pct not in PERCENTILES:
                raise ValueError(f"unknown SLO percentile '{pct}': use p50, p90, p95 or p99")
            self.agent_tps_pct[pct] = _rate(key, value)
            return
        if key == "agent_tps":
            try:
                self.agent_tps = float(value)
            except ValueError:
                self.agent_tps = math.nan
            if not (math.isfinite(self.agent_tps) and self.agent_tps > 0):
                raise ValueError(f"agent_tps={value}: give a positive rate in tokens/s, e.g. agent_tps=30")
            return
        if key == "errors":
            self.error_share = _share(value)
            return
        metric, _, pct = key.partition("_")
        if metric not in (*LATENCIES, "session"):
            known = [*LATENCIES, "agent_tps", "errors", *(f"{m}_{p}" for m in (*LATENCIES, "session", "agent_tps")
                                                        for p in PERCENTILES)]
            near = difflib.get_close_matches(key, known, n=1)  # ttftp99: a slip of ttft_p99
            hint = f"{near[0]}? " if near else ""
            raise ValueError(f"unknown SLO metric '{key}': {hint and 'did you mean ' + hint}use ttft, tpot, e2e, itl or "
                             "agent_tps (bare, or with a percentile: ttft_p99=2s), session_pNN, or errors")
        if pct and pct not in PERCENTILES:
            raise ValueError(f"unknown SLO percentile '{pct}': use p50, p90, p95 or p99")
        limit = parse_duration_ms(value)
        if not limit > 0:
            raise ValueError(f"{key}={value.strip()}: a limit must be above 0, e.g. {key}=2s")
        if metric == "session":
            if not pct:
                raise ValueError("session needs a percentile: write it as session_p90=5m")
            self.session_ms[pct] = limit
            return
        if pct:
            self.percentile_ms[(metric, pct)] = limit
        self.per_request_ms[metric] = min(limit, self.per_request_ms.get(metric, math.inf))

    @property
    def rate_floor(self) -> float | None:
        """The rate a good request reads at, at least: the highest ``agent_tps_pNN`` floor, as a latency's
        per-request limit is its lowest (None: no such objective). ``agent_tps`` is the level's mean per agent,
        no request's."""
        return max(self.agent_tps_pct.values(), default=None)

    @property
    def decides_levels(self) -> bool:
        """Whether a level can fail it other than by a failed request (a per-request limit alone cannot)."""
        return bool(self.percentile_ms or self.agent_tps is not None or self.session_ms
                    or self.error_share is not None or self.agent_tps_pct)

    def describe(self) -> str:
        parts = [f"{m}_{p}<={v:g}ms" for (m, p), v in self.percentile_ms.items()]
        parts += [f"{m}<={v:g}ms" for m, v in self.per_request_ms.items() if not any(k[0] == m for k in self.percentile_ms)]
        if self.agent_tps is not None:
            parts.append(f"agent_tps>={self.agent_tps:g}")
        parts += [f"agent_tps_{p}>={v:g}" for p, v in self.agent_tps_pct.items()]
        if self.error_share is not None:
            parts.append(f"errors<={self.error_share:g}")
        parts += [f"session_{p}<={v:g}ms" for p, v in self.session_ms.items()]
        return ",".join(parts)

    def headline(self) -> str:
        """The objectives in words a buyer reads: "TTFT p99 <= 2 s and >= 30 tok/s each"."""
        parts = [f"{m.upper()} {p} <= {_duration(v)}" for (m, p), v in self.percentile_ms.items()]
        if self.agent_tps is not None:
            parts.append(f">= {self.agent_tps:g} tok/s each")
        parts += [f">= {v:g} tok/s for {p[1:]}% of requests" for p, v in self.agent_tps_pct.items()]
        if self.error_share is not None:
            parts.append(f"<= {self.error_share:.1%} failed")
        parts += [f"session {p} <= {_duration(v)}" for p, v in self.session_ms.items()]
        return " and ".join(parts) or "no failed request"


def duration_text(ms: float) -> str:
    """A measured time in its unit, three figures: 2931 -> "2.93 s", 2000 -> "2 s", 36.6 -> "36.6 ms"."""
    v, unit = (ms / 1000, "s") if ms >= 1000 else (ms, "ms")
    return f"{v:,.0f} {unit}" if v >= 100 else f"{v:.3g} {unit}"


def quantity(v: float, unit: str) -> str:
    """An objective's figure as the tables write it: 884 ms, 1.06 s (never 1.06e+03 ms), 14.0 tok/s, 1,575 tok/s,
    1.0%."""
    if unit == "share":
        return f"{v:.1%}"
    if unit == "ms":
        return duration_text(v)
    return f"{v:,.0f} {unit}" if abs(v) >= 1000 else f"{v:.1f} {unit}"


def beside_limit(v: float, limit: float, unit: str) -> str:
    """A failed objective's figure, with as many more decimals as tell it from its limit where the usual ones do
    not: "30.01 ms" against 30 ms, not "30 ms", which beside "(limit 30 ms)" reads as a tie that failed."""
    said = quantity(v, unit)
    if said != quantity(limit, unit) or v == limit:
        return said
    scale = 100 if unit == "share" else 1
    places = next((p for p in range(1, 7) if round(v * scale, p) != round(limit * scale, p)), 6)
    return f"{v * scale:.{places}f}%" if unit == "share" else f"{v:,.{places}f} {unit}"


def _duration(ms: float) -> str:
    if ms >= 60_000:
        return f"{ms / 60_000:g} min"
    return f"{ms / 1000:g} s" if ms >= 1000 else f"{ms:g} ms"


@dataclass(slots=True)
class SloCheck:
    """One objective at one level: its value against the limit, the verdict, and how sure it is."""

    name: str  # "ttft_p99", "agent_tps", "errors", "session_p90"
    value: float | None  # None: nothing to measure it on (no successful request)
    limit: float
    unit: str  # "ms", "tok/s", "share"
    met: bool
    n: int  # the samples the verdict rests on
    over: int | None = None  # samples beyond the limit (a percentile or a share)
    p_value: float | None = None  # the one-sided test's p-value for the verdict (small: sure)
    #: a pass that is not sure: the samples that would make it sure with none over the limit
    needed: int | None = None

    @property
    def sure(self) -> bool:
        return self.p_value is not None and self.p_value <= SURE_P

    def describe(self) -> str:
        verdict = "pass" if self.met else "FAIL"
        how = "sure" if self.sure else "not sure"
        basis = f"{self.over} of {self.n} over" if self.over is not None else f"n={self.n}"
        more = f", sure from {self.needed}" if self.needed and not self.sure and self.met else ""
        return f"{self.name} {verdict} ({how}: {basis}{more})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SloCheck | None:
        try:
            return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})
        except TypeError:
            return None


def binomial_cdf(k: int, n: int, q: float) -> float:
    """P(X <= k) for X ~ Binomial(n, q), summed in logs (exact enough for any n a level has)."""
    if k < 0:
        return 0.0
    if k >= n or q <= 0:
        return 1.0
    if q >= 1:
        return 0.0
    lq, l1q = math.log(q), math.log1p(-q)
    total = 0.0
    for i in range(k + 1):
        total += math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lq + (n - i) * l1q)
    return min(total, 1.0)


def needed_for_sure_pass(q: float) -> int | None:
    """Samples, none over the limit, for a sure pass when a share ``q`` may be over it."""
    return math.ceil(math.log(SURE_P) / math.log1p(-q)) if 0 < q < 1 else None


def share_check(name: str, over: int, n: int, allowed: float, value: float | None, limit: float,
                unit: str) -> SloCheck:
    """A verdict on "at most a share ``allowed`` of ``n`` samples beyond the limit", ``over`` of them being so."""
    met = value is not None and value <= limit
    if allowed <= 0:  # nothing may be over: the sample itself is the verdict (no rate is claimed)
        return SloCheck(name, value, limit, unit, met, n, over, 0.0 if (over or n) else None)
    p = binomial_cdf(over, n, allowed) if met else 1.0 - binomial_cdf(over - 1, n, allowed)
    return SloCheck(name, value, limit, unit, met, n, over, p, needed_for_sure_pass(allowed) if met else None)


def request_tpot_ms(r: RequestRecord) -> float | None:
    if r.first_token_ns is None or r.end_ns is None or not r.output_tokens or r.output_tokens < 2:
        return None
    return (r.end_ns - r.first_token_ns) / NS_PER_MS / (r.output_tokens - 1)


def request_itls_ms(r: RequestRecord) -> list[float]:
    c = r.chunk_ns
    return [(c[i] - c[i - 1]) / NS_PER_MS for i in range(1, len(c))]


def request_values(r: RequestRecord, metric: str) -> list[float]:
    """A request's samples of a latency: one each (TTFT, TPOT, E2E), every gap for ITL."""
    if metric == "itl":
        return request_itls_ms(r)
    if metric == "ttft":
        v = None if r.ttft_ns is None else r.ttft_ns / NS_PER_MS
    elif metric == "tpot":
        v = request_tpot_ms(r)
    else:
        v = None if r.e2e_ns is None else r.e2e_ns / NS_PER_MS
    return [] if v is None else [v]


def request_meets(r: RequestRecord, slo: SLO) -> bool:
    """Whether a request is good: within every per-request latency limit, and at the rate floor or faster where
    its rate is known (``request_rate``: a request without one is left out of the level's rate check too)."""
    for metric, limit in slo.per_request_ms.items():
        values = request_values(r, metric)
        if values and max(values) > limit:
            return False
        if not values and metric in ("ttft", "e2e"):  # a request that never answered is not good
            return False
    floor, rate = slo.rate_floor, request_rate(r)
    return floor is None or rate is None or rate >= floor


def session_seconds(sessions: list[list[RequestRecord]]) -> list[float]:
    """Each session whose every turn succeeded: its first turn sent -> its last turn's last byte."""
    return [(max(r.end_ns or r.sent_ns for r in rs) - min(r.sent_ns for r in rs)) / NS_PER_S
            for rs in sessions if rs and all(r.ok for r in rs)]


def by_session(records: list[RequestRecord]) -> dict[int, list[RequestRecord]]:
    """The records of each session, in the order sent."""
    out: dict[int, list[RequestRecord]] = {}
    for r in records:
        if r.session is not None:
            out.setdefault(r.session, []).append(r)
    return out


def request_rate(r: RequestRecord) -> float | None:
    """A request's output tokens over its send to last byte, tok/s: the rate its agent read it at (None without
    output tokens or an end)."""
    return r.output_tokens / (r.e2e_ns / NS_PER_S) if r.output_tokens and r.e2e_ns else None


def request_rates(ok: list[RequestRecord]) -> list[float]:
    """Each request's rate (``request_rate``), those that have one."""
    return [v for r in ok if (v := request_rate(r)) is not None]


def _rate_share_check(name: str, rates: list[float], share: float, limit: float) -> SloCheck:
    """At least ``share`` of the requests at ``limit`` tok/s or faster: the rate that share reached (the
    (1 - share) quantile), sure as a percentile's verdict is, by the requests under the floor."""
    value = _percentile(rates, 100 * (1 - share)) if rates else None
    under, n, allowed = sum(v < limit for v in rates), len(rates), 1 - share
    met = value is not None and value >= limit
    p = binomial_cdf(under, n, allowed) if met else 1.0 - binomial_cdf(under - 1, n, allowed)
    return SloCheck(name, value, limit, "tok/s", met, n, under, p if n else None,
                    needed_for_sure_pass(allowed) if met else None)


def mean_p_value(value: float, limit: float, se: float) -> float:
    """The one-sided normal test's p-value of an estimate ``value`` (standard error ``se``) against ``limit``:
    small where the limit lies far outside the estimate's interval (0 where the estimate has no spread)."""
    z = abs(value - limit) / se if se > 0 else math.inf
    return 0.5 * math.erfc(z / math.sqrt(2))


def _agent_rate_check(summary: ServingLevel, ok: list[RequestRecord], limit: float) -> SloCheck:
    """Per-agent tok/s against its floor; sure when the floor is outside the 95% interval of the mean (the
    per-request rates' relative standard error applied to the level's rate). The rate is the one the table
    shows beside the verdict (over the level's plateau where it held its load): the whole window's read 441 tok/s
    against the table's 382.8."""
    value = summary.sustained_per_agent_tps
    rates = request_rates(ok)
    met = value is not None and value >= limit
    p = None
    if value and len(rates) >= 2 and statistics.fmean(rates) > 0:
        p = mean_p_value(value, limit, value * statistics.stdev(rates) / statistics.fmean(rates) /
                         math.sqrt(len(rates)))
    return SloCheck("agent_tps", value, limit, "tok/s", met, len(rates), None, p)


def assess(summary: ServingLevel, measured: list[RequestRecord], slo: SLO,
           sessions: list[list[RequestRecord]] | None = None) -> list[SloCheck]:
    """Every level objective of ``slo`` on one level's measured requests, in the order written. ``sessions``: the
    level's sessions that ran to their end, as its kind knows them (a session a soak's end or an interrupt cut has
    fewer turns, and a shorter time, than a finished one); by default every session among the requests."""
    ok = [r for r in measured if r.ok]
    checks: list[SloCheck] = []
    for (metric, pct), limit in slo.percentile_ms.items():
        samples = [v for r in ok for v in request_values(r, metric)]
        value = getattr(getattr(summary, f"{metric}_ms"), pct) if samples else None
        if over := known_over(measured, metric, limit):  # cut unanswered at the level's end, already over
            samples += over
            value = _percentile(sorted(samples), int(pct[1:]))
        allowed = 1 - int(pct[1:]) / 100
        checks.append(share_check(f"{metric}_{pct}", sum(v > limit for v in samples), len(samples), allowed,
                                  value, limit, "ms"))
    if slo.agent_tps is not None:
        checks.append(_agent_rate_check(summary, ok, slo.agent_tps))
    for pct, limit in slo.agent_tps_pct.items():
        checks.append(_rate_share_check(f"agent_tps_{pct}", sorted(request_rates(ok)), int(pct[1:]) / 100, limit))
    for pct, limit in slo.session_ms.items():
        whole = sessions if sessions is not None else list(by_session(measured).values())
        times = sorted(t * 1000 for t in session_seconds(whole))
        value = _percentile(times, int(pct[1:])) if times else None
        checks.append(share_check(f"session_{pct}", sum(t > limit for t in times), len(times),
                                  1 - int(pct[1:]) / 100, value, limit, "ms"))
    # a request the level's end or an interrupt cut failed nowhere
    judged = [r for r in measured if r.error_kind not in CUT_KINDS]
    failed = len(judged) - len(ok)
    share = failed / len(judged) if judged else None
    allowed_fail = slo.error_share if slo.error_share is not None else 0.0
    checks.append(share_check("errors", failed, len(judged), allowed_fail, share, allowed_fail, "share"))
    return checks


def _percentile(sorted_values: list[float], q: float) -> float:
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def decided_fail(slo: SLO, done: list[RequestRecord], planned: int) -> str | None:
    """A level of ``planned`` requests that can no longer meet a percentile limit (or its error budget), whatever
    the rest do: why, in words; None while it still can. With ``k`` of the planned ``N`` over the limit, the
    percentile's lower neighbouring rank ``floor((N - 1) p)`` is then over it too, so the interpolated percentile is."""
    for (metric, pct), limit in slo.percentile_ms.items():
        if metric == "itl":
            continue  # a request's gaps are not known in number beforehand
        over = sum(1 for r in done if r.ok and any(v > limit for v in request_values(r, metric)))
        if over and planned - over <= math.floor((planned - 1) * int(pct[1:]) / 100):
            return (f"when it stopped sending, {over} of the {planned} planned requests were over {metric.upper()} "
                    f"{_duration(limit)} (those in flight then finished too): the {pct} cannot pass")
    failed = sum(1 for r in done if not r.ok)
    allowed = slo.error_share if slo.error_share is not None else 0.0
    if failed and failed > allowed * planned:
        return (f"when it stopped sending, {failed} of the {planned} planned requests had failed: over the error "
                f"budget ({allowed:.1%})")
    return None
