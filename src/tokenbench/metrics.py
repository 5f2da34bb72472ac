"""Pure functions from request records to a level summary. No I/O.

Definitions (docs/metrics.md) match ``vllm bench serve`` so numbers are comparable:
- TTFT: request sent -> first chunk carrying a generated token (reasoning or answer).
- Time to first tool call: request sent -> first chunk carrying a tool call's tokens, over the requests that
  called a tool.
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

from .grace import CUT_KINDS, INTERRUPTED
from .distribution import Distribution
from .levels import ServingLevel, SessionStats, TurnPoint
from .steady import plateau, waves
from .records import RequestRecord
from .slo import SLO, assess, by_session, request_itls_ms, request_meets, request_tpot_ms, session_seconds
from .soak import WINDOWS, SoakWindow

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


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


def _said_cached(records: list[RequestRecord]) -> list[RequestRecord]:
    """The requests whose server said how many of their prompt tokens it served from its cache."""
    return [r for r in records if r.said_cached]


def cached_share(ok: list[RequestRecord]) -> tuple[float | None, str | None]:
    """Cached prompt tokens / prompt tokens over the successful requests whose server said how many it served
    from its prefix cache, and where it said so (``usage``, ``server_timings``, mixed); (None, None) where no
    server said."""
    said = _said_cached(ok)
    cached, prompt = cached_counts(said)
    return (cached / prompt if prompt else None), _source(said, "cached_tokens_source")


def cached_counts(ok: list[RequestRecord]) -> tuple[int, int]:
    """Cached prompt tokens and prompt tokens, over the successful requests whose server said how many it served
    from its prefix cache."""
    said = _said_cached(ok)
    return sum(r.cached_tokens or 0 for r in said), sum(r.input_tokens or 0 for r in said)


def session_stats(records: list[RequestRecord], cache: str, cut: frozenset[int] = frozenset()) -> SessionStats:
    """The session view of a level's measured records (each carries its ``session`` and ``turn``); ``cut``: the
    sessions a soak's end cut short, left out of the sessions' times."""
    measured = [r for r in records if r.phase == "measured" and r.session is not None]
    sessions = by_session(measured)
    ok = [r for r in measured if r.ok]
    share, source = cached_share(ok)
    times = session_seconds(whole_sessions(records, cut))
    return SessionStats(
        cut=len(cut), cache=cache, sessions=len(sessions), sessions_finished=len(times),
        turns_per_session=statistics.fmean(len(rs) for rs in sessions.values()) if sessions else None,
        session_s=Distribution.of(times), cached_share=share, cached_source=source,
        cached_share_se=cached_share_se([[r for r in rs if r.ok] for rs in sessions.values()]),
        turns=[_turn_point(k, [r for r in ok if r.turn == k]) for k in sorted({r.turn for r in ok if r.turn is not None})])


def whole_sessions(records: list[RequestRecord], cut: frozenset[int]) -> list[list[RequestRecord]]:
    """The measured calls of each session not in ``cut`` (those a soak's end or an interrupt cut short)."""
    return [rs for k, rs in by_session([r for r in records if r.phase == "measured"]).items() if k not in cut]


def cached_share_se(sessions: list[list[RequestRecord]]) -> float | None:
    """The standard error of the cached share (cached over prompt tokens, a ratio of two sums) with each session
    one sample, as its turns share one cache's fate: the delta method's sqrt(sum((c_i - R p_i)^2) / (n (n - 1)))
    / mean(p_i), over the sessions whose server said. None with fewer than two."""
    pairs = [(sum(r.cached_tokens or 0 for r in said), sum(r.input_tokens or 0 for r in said)) for rs in sessions
             if (said := _said_cached(rs))]
    n = len(pairs)
    if n < 2:
        return None
    share = sum(c for c, _ in pairs) / sum(p for _, p in pairs)
    spread = sum((c - share * p) ** 2 for c, p in pairs) / (n - 1)
    return math.sqrt(spread / n) / (sum(p for _, p in pairs) / n)


def soak_windows(records: list[RequestRecord], duration_s: float, n: int = WINDOWS) -> list[SoakWindow]:
    """A soak level's successful measured turns in ``n`` windows of its duration, by the time each was sent."""
    ok = [r for r in records if r.phase == "measured" and r.ok and r.session is not None]
    if not ok or duration_s <= 0:
        return []
    start = min(r.sent_ns for r in ok)
    width = duration_s / n
    bins: list[list[RequestRecord]] = [[] for _ in range(n)]
    for r in ok:
        bins[min(n - 1, int((r.sent_ns - start) / NS_PER_S / width))].append(r)
    return [SoakWindow(i * width, (i + 1) * width, len(b), cached_share(b)[0],
                       statistics.median(t) if (t := [r.ttft_ns / NS_PER_MS for r in b if r.ttft_ns]) else None)
            for i, b in enumerate(bins)]


def _source(records: list[RequestRecord], attr: str) -> str | None:
    sources = Counter(getattr(r, attr) for r in records if getattr(r, attr))
    if not sources:
        return None
    if len(sources) == 1:
        return str(next(iter(sources)))
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
    """Each latency's error split: the same definitions as the success split, over the failed requests (not those
    a duration's grace or an interrupt cut: they failed nowhere)."""
    ttft, _tpot, itl, e2e, ttfb, _ttfa, _text = _latencies([r for r in failed if r.error_kind not in CUT_KINDS])
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


def _one_asked(ok: list[RequestRecord]) -> int | None:
    """The output length the level's requests asked for, where they all asked the same (drawn lengths, a dataset
    or a trace ask each their own: it was the first request's, read as the level's)."""
    asked = {r.expected_output_tokens for r in ok if r.expected_output_tokens}
    return asked.pop() if len(asked) == 1 else None


def client_delays(measured: list[RequestRecord]) -> tuple[Distribution | None, Distribution | None]:
    """The client's own lateness: sends after their scheduled arrival (open loop), and the wait from the start
    of a send to its last byte on the socket (``send_queue_ms``)."""
    delays = [(r.sent_ns - r.scheduled_ns) / NS_PER_MS for r in measured if r.scheduled_ns is not None]
    queued = [(r.written_ns - r.sent_ns) / NS_PER_MS for r in measured if r.written_ns is not None]
    return (Distribution.of(delays) if delays else None), (Distribution.of(queued) if queued else None)


def _client_delays(summary: ServingLevel, measured: list[RequestRecord]) -> None:
    summary.send_delay_ms, summary.send_queue_ms = client_delays(measured)


def _goodput(summary: ServingLevel, measured: list[RequestRecord], slo: SLO | None,
             sessions: list[list[RequestRecord]] | None) -> None:
    """Goodput (the requests within every per-request limit and at the rate floor, ``slo.request_meets``, per
    second) and each level objective's verdict (``slo.assess``: the value, pass or fail, how sure); the level
    meets the SLO when every objective passes."""
    if slo is None or not (slo.per_request_ms or slo.decides_levels):
        return
    summary.slo = slo.describe()
    if all(r.error_kind == INTERRUPTED for r in measured):  # nothing ended before the interrupt: no verdict
        return  # (it read FAIL, goodput 0.00, beside "no level gave a verdict")
    ok = [r for r in measured if r.ok]
    good = [r for r in ok if request_meets(r, slo)]
    summary.goodput_rps = len(good) / summary.duration_s
    summary.slo_checks = assess(summary, measured, slo, sessions)
    summary.slo_met = all(c.met for c in summary.slo_checks)


def summarize(
    records: list[RequestRecord],
    *,
    concurrency: int | None,
    rate: float | None,
    window_start_ns: int,
    window_end_ns: int | None = None,
    slo: SLO | None = None,
    sessions: list[list[RequestRecord]] | None = None,
) -> ServingLevel:
    """The statistics of one level's measured requests (warm-up records are ignored here). What the numbers
    cannot say by themselves is decided in ``findings``, and what they cost in ``cost``. ``sessions``: the
    sessions that ran to their end, as the level's kind knows them (``slo.assess``)."""
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
        expected_output_tokens=_one_asked(ok),
        input_tokens_source=_source(ok, "input_tokens_source"),
        tokens_per_chunk_mean=sum(out_tokens) / chunks if chunks else None,
        time_to_first_text_ms=ttftext,
        time_to_first_tool_ms=Distribution.of(_ms_since_sent(ok, "first_tool_ns")),
    )
    _failure_split(summary, failed)
    _reasoning(summary, ok)
    summary.achieved_concurrency = _achieved_concurrency(measured, window_start_ns, end)
    summary.prefill_tps = _prefill_tps(summary, ok)
    _client_delays(summary, measured)
    _steady(summary, measured, concurrency, (window_start_ns, end))  # the plateau before the SLO reads its rate
    _goodput(summary, measured, slo, sessions)
    summary.cached_share, summary.cached_source = cached_share(ok)
    return summary


def _steady(summary: ServingLevel, measured: list[RequestRecord], concurrency: int | None,
            window: tuple[int, int]) -> None:
    """The level's steady state (steady.py): its plateau, a closed loop's waves (none for agents, whose turns
    pause), an open loop's latency from arrival."""
    summary.plateau = plateau(measured, concurrency, window)
    if not any(r.session is not None for r in measured):
        summary.waves = waves(measured, concurrency, summary.tpot_ms.p50)
    _from_arrival(summary, [r for r in measured if r.ok])


def _from_arrival(summary: ServingLevel, ok: list[RequestRecord]) -> None:
    """An open loop's TTFT and end-to-end time from each request's scheduled arrival, not its send: a client or
    server that falls behind cannot hide its queue (coordinated omission)."""
    arrived = [r for r in ok if r.scheduled_ns is not None]
    if not arrived:
        return
    summary.ttft_from_arrival_ms = Distribution.of(
        [(r.first_token_ns - (r.scheduled_ns or 0)) / NS_PER_MS for r in arrived if r.first_token_ns is not None])
    summary.e2e_from_arrival_ms = Distribution.of(
        [(r.end_ns - (r.scheduled_ns or 0)) / NS_PER_MS for r in arrived if r.end_ns is not None])


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
