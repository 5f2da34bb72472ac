"""The effective-serving line: how long N agents asking for M tokens each take on a box, batched at the concurrency
it measured, or as one sequential stream where it does not batch."""

from __future__ import annotations

import math

from .. import adapters
from ..pricing import effective_serving_s
from ..levels import DepthLevel, LevelSummary, ServingLevel, serving
from ..results import RunResult
from ..sweep_table import tpot_shown
from .sides import run_name

#: Aggregate throughput at the highest concurrency over single-stream throughput above which a server whose
#: batching is unknown is taken to batch (queued requests alone gain a little from hidden HTTP overhead).
BATCHING_GAIN = 1.3


def _sequential(res: RunResult) -> bool:
    """One stream at a time: from what the server said of itself (its adapter and slots), else measured."""
    server = res.manifest.server or {}
    batches = server.get("batches") if "batches" in server else \
        adapters.by_name(res.manifest.engine).batches(server.get("slots"))
    if batches is not None:
        return not batches
    serve = sorted((s for s in serving(o.summary for o in res.outcomes) if s.concurrency and s.output_throughput_tps),
                   key=lambda s: s.concurrency or 0)
    if serve and serve[0].concurrency != 1:
        return False  # measured only with several requests in flight: its levels' own rounds say how long
    if len(serve) < 2:
        return True  # nothing measured shows batching
    return serve[-1].output_throughput_tps < BATCHING_GAIN * serve[0].output_throughput_tps


def _one_stream(s: LevelSummary) -> float | None:
    """A level's single-stream decode rate: a serving level's at concurrency 1, a depth level's tg."""
    return s.decode_tps if isinstance(s, ServingLevel) else s.tg_tps if isinstance(s, DepthLevel) else None


#: Flags that say a level's figures are no measurement to build on.
NOT_MEASURED = frozenset({"unstable", "decode_past_prefill", "exceeds_server_timings"})


def effective_line(res: RunResult, agents: int, tokens: int, whole: bool = False) -> str | None:
    """How long `agents` requests of `tokens` tokens take: batched at concurrency N, or one sequential stream;
    from levels measured whole, not one an interrupt cut or one flagged as no measurement (``NOT_MEASURED``:
    llama-benchy's unstable tg read 650 tok/s beside a steady 1,518). ``whole``: the comparison reads rates over
    the whole window (one side has no plateau), and so does this line."""
    levels = [o.summary for o in res.outcomes if o.status == "complete" and not NOT_MEASURED & set(o.summary.flags)]
    serve = [s for s in serving(levels) if s.concurrency and s.output_throughput_tps]
    if serve and not _sequential(res):
        return _batched_line(res, serve, agents, tokens, whole)
    return _sequential_line(res, levels, serve, agents, tokens)


def _batched_line(res: RunResult, serve: list[ServingLevel], agents: int, tokens: int, whole: bool = False) -> str:
    """N agents at the highest concurrency measured up to N (the lowest measured when all are above it)."""
    at = [s for s in serve if s.concurrency and s.concurrency <= agents]
    s = max(at, key=lambda x: x.concurrency or 0) if at else min(serve, key=lambda x: x.concurrency or 0)
    how = "predicted" if res.predicted_mark else "measured"
    note = "" if s.concurrency == agents else f" ({how} at concurrency {s.concurrency}, the nearest)"
    # the median TPOT the tables show: none where the answers came whole in one read (its 0 is no decode, and a
    # time built on it read a vLLM level as fast as a llama-server one 1.5x its throughput): the rate serves then
    ttft, tpot = s.ttft_ms.p50, tpot_shown(s)
    rate = s.output_throughput_tps if whole else s.sustained_tps
    if whole and s.plateau is not None:
        note += " over its whole window, as compared"
    if ttft is not None and tpot is not None and s.concurrency:
        # each request waits for its first token, then decodes the rest: the level's own medians, in rounds
        # of its concurrency (tokens / aggregate rate would leave the first token's wait out)
        c = s.concurrency
        rounds = math.ceil(agents / c)
        t = rounds * (ttft + (tokens - 1) * tpot) / 1000
        each = (f"{rounds} rounds of {c}, each" if rounds > 1 else f"{min(agents, c)} at once, each request")
        return (f"{_named(res)}: ~{t:,.1f} s batched ({each} TTFT {ttft:,.0f} ms + {tokens - 1} x TPOT {tpot:.1f} "
                f"ms); {rate:,.0f} tok/s aggregate{note}")
    t = effective_serving_s(agents, tokens, rate)
    return f"{_named(res)}: ~{t:,.1f} s batched, {rate:,.0f} tok/s aggregate{note}"


def _named(res: RunResult) -> str:
    """A run's name on an effective-serving line, marked where its figures were predicted (as show names it)."""
    return run_name(res) + (f" ({res.predicted_mark})" if res.predicted_mark else "")


def _sequential_line(res: RunResult, levels: list[LevelSummary], serve: list[ServingLevel], agents: int,
                     tokens: int) -> str | None:
    """N agents in turn on one stream: each request's first token, then its tokens, where a concurrency-1 level
    measured both; else tokens over the decode rate (llama-bench's tg: decoding only, said so)."""
    one = next((s for s in serve if s.concurrency == 1), None)
    ttft, tpot = (one.ttft_ms.p50, tpot_shown(one)) if one is not None else (None, None)
    if ttft is not None and tpot is not None:
        t = agents * (ttft + (tokens - 1) * tpot) / 1000
        return (f"{_named(res)}: ~{t:,.1f} s as one sequential stream ({agents} requests in turn, each TTFT "
                f"{ttft:,.0f} ms + {tokens - 1} x TPOT {tpot:.1f} ms)")
    # the last level of a test measured more than once (llama-benchy's tg after each pp), as compare's table shows it
    single = next((rate for s in reversed(levels) if (rate := _one_stream(s)) and not s.depth
                   and (s.concurrency or 1) == 1), None)
    rate = single or (serve[0].sustained_tps if serve else None)
    if not rate:
        return None
    t = effective_serving_s(agents, tokens, rate)
    how = "predicted" if res.predicted_mark else "measured"
    return (f"{_named(res)}: ~{t:,.1f} s as one sequential stream at {rate:,.1f} tok/s"
            + (f", decoding only: no time to first token {how}" if single else ""))
