"""Findings: what a level's numbers cannot say by themselves, decided here and nowhere else.

Each finding is a typed value (``finding.Finding``). The detection rules are the ordered list ``LEVEL_RULES``;
each names its threshold constant and says why the threshold is what it is; the guard's finding follows it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .grace import CUT_KINDS, INTERRUPTED, unanswered
from .finding import Code, Finding
from .guard_results import GuardSnapshot
from .records import RequestRecord
from .layout import plural
from .replay_stats import OVERFLOW_LIMIT
from .soak import DECAY_MARGIN, decay
from .rate_findings import over_offered, rate_not_sustained
from .steady import DRIFT_RATIO, TAIL_SHARE, UNSEEN_TPOT_MS, QueueGrowth, decode_unseen, drift, queue_growth, \
    tail_cluster

if TYPE_CHECKING:  # the summary carries its findings; this module only reads it
    from .levels import ServingLevel


# ---------------------------------------------------------------------------------------------------------
# Named thresholds, each with its reason.

#: A p99 over fewer samples than this is an extrapolation from very few tail points (docs/metrics.md: "a p99 over
#: fewer than 100 samples is marked"; with 100 samples the p99 rests on its top one or two).
P99_MIN_SAMPLES = 100
#: Chunks carry several tokens when the mean is above this: speculative decoding or server-side batching of
#: chunks (the ITL rule, docs/metrics.md); 5% leaves room for one odd chunk (a final usage chunk, a two-token word).
MULTI_TOKEN_CHUNK_MEAN = 1.05
#: A prompt the server counted this much shorter than we built it was truncated (Ollama past num_ctx).
#: Servers add a BOS token or a chat template, which only makes the count larger, so any real
#: shortfall beyond a couple of tokens of tokenizer disagreement is truncation.
PROMPT_TRUNCATION_SLACK_TOKENS = 2
PROMPT_TRUNCATION_SLACK_RATIO = 0.02
#: The share of prompt tokens the responses say the prefix cache served, against the server's own /metrics hit
#: share over the level, may differ by this many points before it is flagged. Both count tokens, in the cache's
#: blocks: on vLLM and llama-server they agreed within 1 point on every level measured (sessions and traces).
CACHE_COUNT_TOLERANCE = 0.10
#: Answers of two tokens or more whose tokens all came in one network read (a server that buffers its stream, a
#: client too late to read it token by token): their TPOT reads 0 (as vllm bench serve's would), so this share of
#: them moves the level's TPOT mean by as much and its low percentiles to 0.
ONE_READ_SHARE = 0.10
#: An answer whose reads came closer together than this per token had no decode a client timed either: the
#: client's loop stalled while the tokens arrived, then read them back to back (a TPOT of 0.02 ms, "decode 53,695
#: tok/s", from a model that decodes 200). It counts as whole.

# ---------------------------------------------------------------------------------------------------------
# The level rules, in the order their flags are listed.


@dataclass(slots=True)
class LevelFacts:
    """What a level's rules look at: its records and summary, and what the runner saw around them."""

    records: list[RequestRecord]  # all of the level's records; the rules read the measured ones
    summary: ServingLevel
    concurrency: int | None = None
    requests: int | None = None  # the requests asked for (None: a duration)
    interrupted: bool = False
    run_id: str = ""
    guard: GuardSnapshot | None = None  # the guard's snapshot before the level
    client_reasons: Sequence[str] = ()  # ClientWatch.verdict: why the client was the limit
    slot_reasons: Sequence[str] = ()  # the adapter's slot warnings for this level
    max_error_rate: float | None = None  # None: the level's error share is not judged
    peak_in_flight: int | None = None
    node_guards: Sequence[GuardSnapshot] = ()  # the guard on each load-generating node but this one (workers.py)
    server_guard: GuardSnapshot | None = None  # the guard on the server host, through its agent (serverhost.py)
    lost_workers: Sequence[str] = ()  # workers lost mid-level, each said in a sentence (workers.WorkerPool)
    #: why the level stopped sending before its requests were all sent (a capacity search: its verdict was
    #: decided, the server over-saturated, the time budget spent); None: it ran to its end
    stopped: str | None = None
    #: the cached share the responses say over every request /metrics counted too (a replay's lanes' warm calls)
    sent_cached_share: float | None = None
    grace_s: float | None = None  # --grace: a --duration level's wait for those in flight at its end (None: all)
    measured: list[RequestRecord] = field(init=False)
    ok: list[RequestRecord] = field(init=False)
    failed: list[RequestRecord] = field(init=False)
    grew: QueueGrowth | None = field(init=False)  # an open loop's queue grew through it (read by two rules)

    def __post_init__(self) -> None:
        self.measured = [r for r in self.records if r.phase == "measured"]
        self.ok = [r for r in self.measured if r.ok]
        self.failed = [r for r in self.measured if not r.ok]
        self.grew = queue_growth(self.records) if self.summary.rate is not None else None


@dataclass(frozen=True, slots=True)
class Rule:
    code: Code
    reason: str  # why the rule exists and where its threshold comes from
    check: Callable[[LevelFacts], Finding | None]


def _multi_token_chunks(f: LevelFacts) -> Finding | None:
    tpc = f.summary.tokens_per_chunk_mean
    if tpc is None or tpc <= MULTI_TOKEN_CHUNK_MEAN:
        return None
    return Finding(Code.MULTI_TOKEN_CHUNKS, f"chunks carry {tpc:.2f} tokens on average",
                   "ITL is per chunk, TPOT is per token", tpc, MULTI_TOKEN_CHUNK_MEAN, "tokens/chunk", len(f.ok))


def _one_read(f: LevelFacts) -> Finding | None:
    decoded = [r for r in f.ok if (r.output_tokens or 0) >= 2 and r.chunk_ns]
    whole = sum(1 for r in decoded if decode_unseen(r))
    if not decoded or whole <= ONE_READ_SHARE * len(decoded):
        return None
    share = whole / len(decoded)
    return Finding(Code.ONE_READ, f"{whole} of {len(decoded)} answers ({share:.0%}) arrived whole in one network "
                   f"read, or in reads under {UNSEEN_TPOT_MS:g} ms a token apart: their decode was not seen, and TPOT "
                   "and ITL read 0 for them",
                   "the server buffers its stream or the client read late (client_bound); longer answers "
                   "(--output-len) or the server's own timings show the decode", share, ONE_READ_SHARE, "share",
                   len(decoded))


def _usage_absent(f: LevelFacts) -> Finding | None:
    source = f.summary.output_tokens_source
    if not f.ok or source == "usage":
        return None
    return Finding(Code.USAGE_ABSENT, f"output token counts are estimated ({source}): the server sent no usage",
                   "use a server that honours stream_options.include_usage for exact counts", n=len(f.ok))


def _output_short(f: LevelFacts) -> Finding | None:
    # each request against its own length: where lengths vary (draws, a dataset) no level-wide length exists
    short = [r for r in f.ok if r.expected_output_tokens and (r.output_tokens or 0) < r.expected_output_tokens]
    if not short:
        return None
    lengths = sorted(r.output_tokens or 0 for r in short)
    asked = sorted({r.expected_output_tokens or 0 for r in short})
    worst = min(short, key=lambda r: (r.output_tokens or 0) / (r.expected_output_tokens or 1))
    reasons = ",".join(sorted({str(r.finish_reason) for r in short}))
    before = f"{asked[0]} tokens" if len(asked) == 1 else \
        f"the length each asked for ({asked[0]}..{asked[-1]} tokens)"
    return Finding(
        Code.OUTPUT_SHORT,
        f"{len(short)}/{len(f.ok)} outputs stopped before {before} (reached {lengths[0]}..{lengths[-1]}, "
        f"finish_reason {reasons}): the server does not honour ignore_eos/min_tokens",
        "compare TPOT, not throughput", worst.output_tokens or 0, worst.expected_output_tokens, "tokens", len(f.ok))


def _is_truncated(r: RequestRecord) -> bool:
    return bool(r.expected_input_tokens and r.input_tokens is not None and r.input_tokens_source == "usage"
                and r.input_tokens < r.expected_input_tokens * (1 - PROMPT_TRUNCATION_SLACK_RATIO)
                - PROMPT_TRUNCATION_SLACK_TOKENS)


def _prompt_truncated(f: LevelFacts) -> Finding | None:
    truncated = [r for r in f.ok if _is_truncated(r)]
    if not truncated:
        return None
    r0 = truncated[0]
    return Finding(
        Code.PROMPT_TRUNCATED,
        f"the server counted {r0.input_tokens} prompt tokens where {r0.expected_input_tokens} were sent "
        f"({len(truncated)} requests): it truncates the prompt (Ollama: raise num_ctx)",
        "prefill figures of this level are not valid", r0.input_tokens, r0.expected_input_tokens, "tokens",
        len(f.ok))


def _cache_counts_disagree(f: LevelFacts) -> Finding | None:
    """The responses' cached share (usage or llama.cpp's timings) against the server's /metrics over the level."""
    said = f.summary.cached_share if f.sent_cached_share is None else f.sent_cached_share
    hit = f.summary.telemetry.prefix_cache_hit_rate if f.summary.telemetry is not None else None
    if said is None or hit is None or abs(said - hit) <= CACHE_COUNT_TOLERANCE or f.interrupted:
        return None  # an interrupt cut requests the server had counted and no response said: not the same requests
    return Finding(
        Code.CACHE_COUNTS_DISAGREE,
        f"the responses say the prefix cache served {said:.0%} of the prompt tokens, the server's /metrics "
        f"{hit:.0%} over the same requests",
        "another client on the server, or a server that counts otherwise: trust neither cached share until "
        "one is explained", abs(said - hit), CACHE_COUNT_TOLERANCE, "share points", len(f.ok))


def _p99_estimate(f: LevelFacts) -> Finding | None:
    if not f.ok or len(f.ok) >= P99_MIN_SAMPLES:
        return None
    return Finding(Code.P99_ESTIMATE, f"p99 over {len(f.ok)} requests is an estimate",
                   observed=len(f.ok), threshold=P99_MIN_SAMPLES, unit="requests", n=len(f.ok), severity="note")


def _errors(f: LevelFacts) -> Finding | None:
    # those in flight at Ctrl-C (_interrupted's) or past a duration's grace (the table's "cut") failed nowhere
    failed = [r for r in f.failed if r.error_kind not in CUT_KINDS]
    if not failed:
        return None
    return Finding(Code.ERRORS, f"{len(failed)} requests failed", observed=len(failed), unit="requests",
                   n=len(f.measured), severity="note")


def _interrupted(f: LevelFacts) -> Finding | None:
    if not f.interrupted:
        return None
    cut = sum(1 for r in f.failed if r.error_kind == INTERRUPTED)
    return Finding(Code.INTERRUPTED, "the level was cut short" + (f": {plural(cut, 'request')} in flight left "
                   "unfinished" if cut else ""), n=len(f.measured), severity="note")


def _stopped_early(f: LevelFacts) -> Finding | None:
    if f.stopped is None:
        return None
    asked = f" of {f.requests}" if f.requests else ""
    return Finding(Code.STOPPED_EARLY, f"stopped after {len(f.measured)}{asked} requests: {f.stopped}",
                   observed=len(f.measured), threshold=f.requests, unit="requests", n=len(f.measured))


def _dirty_bench(f: LevelFacts) -> Finding | None:
    here = guard_finding(f.guard, f.run_id)
    elsewhere = [f"load-generating node {n.node} dirty before this level (" + ", ".join(c.name for c in n.failed) + ")"
                 for n in f.node_guards if n.dirty]
    if f.server_guard is not None and f.server_guard.dirty and not f.server_guard.unchecked:
        elsewhere.append("the server host dirty before this level ("
                         + ", ".join(c.name for c in f.server_guard.failed) + ")")
    if not elsewhere:
        return here
    said = "; ".join(elsewhere)
    message = f"{here.message}; the guard found {said}" if here else f"the guard found {said}"
    return Finding(Code.DIRTY_BENCH, message, here.remedy if here else _where_snapshots(f.run_id),
                   observed=((here.observed or 0) if here else 0) + len(elsewhere), threshold=0, unit="dirty machines")


def _host_unchecked(f: LevelFacts) -> Finding | None:
    if f.server_guard is None or not f.server_guard.dirty or not f.server_guard.unchecked:
        return None
    return Finding(Code.HOST_UNCHECKED, "the guard could not check the server host before this level "
                   f"({f.server_guard.failed[0].observed})",
                   "nobody saw the host clean or dirty: start its agent again (tokenbench agent), or measure "
                   "without --agent", observed=1, threshold=0, unit="unchecked hosts")


def _where_snapshots(run_id: str) -> str:
    return (f"'tokenbench show {run_id} --guard' prints each machine's checks" if run_id else
            "the level's client.node_guards and client.server_guard say more")


def _worker_lost(f: LevelFacts) -> Finding | None:
    if not f.lost_workers:
        return None
    return Finding(Code.WORKER_LOST, "; ".join(f.lost_workers),
                   "the level is partial: its finished requests are a result of fewer workers than asked",
                   observed=len(f.lost_workers), threshold=0, unit="workers", n=len(f.measured))


def _client_bound(f: LevelFacts) -> Finding | None:
    if not f.client_reasons:
        return None
    return Finding(Code.CLIENT_BOUND,
                   "the client was a limit, so timings may read late (a server on the same cores competes with it): "
                   + "; ".join(f.client_reasons), n=len(f.measured))


def _slots_exceeded(f: LevelFacts) -> Finding | None:
    if not f.slot_reasons:
        return None
    return Finding(Code.SLOTS_EXCEEDED, "; ".join(f.slot_reasons), observed=f.concurrency, unit="requests")


def _cache_decay(f: LevelFacts) -> Finding | None:
    fell = decay(f.summary.session.over_time) if f.summary.session is not None else None
    return None if fell is None else Finding(
        Code.CACHE_DECAY, f"the cached share fell from {fell[0]:.0%} of prompt tokens in the run's first tenth to "
        f"{fell[1]:.0%} in its last: the cache stopped holding the sessions", "the report draws the share and turn "
        "TTFT over time; a restart that restores the share says the engine lost its cache, not the box",
        observed=fell[0] - fell[1], threshold=DECAY_MARGIN, unit="share of prompt tokens")


def _context_overflow(f: LevelFacts) -> Finding | None:
    replay = f.summary.replay
    if replay is None or not replay.overflowed:
        return None
    share = replay.overflow_share or 0.0
    invalid = ": more than 1%, so the replay is invalid for this box (AgentX's rule)" if replay.invalid else ""
    return Finding(Code.CONTEXT_OVERFLOW,
                   f"{replay.overflowed} of {replay.calls} calls ({share:.1%}) did not fit the server's context "
                   f"and were refused{invalid}",
                   "give each slot more context (llama-server --ctx-size over --parallel, vLLM --max-model-len), or "
                   "replay the trace's shape smaller (--trace-scale)",
                   observed=share, threshold=OVERFLOW_LIMIT, unit="share of calls", n=replay.calls,
                   severity="warning" if replay.invalid else "note")


#: A per-agent rate below this share of what the level's own TTFT, TPOT and output length allow contradicts them,
#: for requests of at least RATE_BELOW_TPOT_MIN_MS (shorter ones are the client's own gaps between sends).
RATE_BELOW_TPOT_SHARE = 0.5
RATE_BELOW_TPOT_MIN_MS = 20.0


def _agents(f: LevelFacts) -> bool:
    """Agents that pause between turns (sessions, replays): their in-flight count and rate are the workload's."""
    return f.summary.session is not None


def _no_plateau(f: LevelFacts) -> Finding | None:
    s = f.summary
    if s.plateau is not None or _agents(f) or len(f.ok) < 4 or f.interrupted or f.stopped:
        return None
    more = "a longer --duration" if f.requests is None else "run more requests per level (--requests), or a --duration"
    return Finding(Code.NO_PLATEAU, "the level never held its load for half its window: its figures are mostly "
                   "ramp-up and drain", more,
                   n=len(f.measured), severity="note")


def _drift(f: LevelFacts) -> Finding | None:
    found = drift(f.records)
    if found is None or _agents(f) or f.grew is not None:
        return None  # a queue that grew is no server unsettled: rate_not_sustained says it
    name, a, b = found
    way = "rose" if b > a else "fell"
    return Finding(Code.DRIFT, f"median {name} {way} from {a:,.1f} ms in the level's first third to {b:,.1f} ms in "
                   "its last: the server (or the client) had not settled",
                   "more warm-up (--warmup auto), more requests per level, or --repetitions",
                   observed=b / a, threshold=DRIFT_RATIO, unit="x", n=len(f.ok))


#: Slow first tokens whose prompts left this many times the rest's tokens to prefill (their median, uncached) are
#: the workload's own large prompts (a trace's, a dataset's), not a cost paid once.
TAIL_PREFILL_RATIO = 2.0


def _uncached(r: RequestRecord) -> int:
    return max(0, (r.input_tokens or 0) - (r.cached_tokens or 0))


def _tail_cluster(f: LevelFacts) -> Finding | None:
    timed = sorted((r for r in f.ok if r.ttft_ns is not None), key=lambda r: r.ttft_ns or 0)
    found = tail_cluster([(r.ttft_ns or 0) / 1e6 for r in timed])
    if found is None:
        return None
    k, low, rest = found
    slow, body = [_uncached(r) for r in timed[-k:]], [_uncached(r) for r in timed[:-k]]
    if statistics.median(slow) >= TAIL_PREFILL_RATIO * max(statistics.median(body), 1):
        return None  # the slow ones had the most to prefill: a trace's or a dataset's large prompts, measured
    return Finding(Code.TAIL_CLUSTER, f"{k} of {len(f.ok)} requests waited {low:,.0f} ms or more for their first "
                   f"token where the rest took {rest:,.1f} ms at the median: a cost paid once (a compile, a cache "
                   "fill) inside the measured window, not the level's tail",
                   "more warm-up (--warmup auto)", observed=k, threshold=TAIL_SHARE * len(f.ok), unit="requests",
                   n=len(f.ok))


def _rate_below_tpot(f: LevelFacts) -> Finding | None:
    """A per-agent rate below half of what a request of the level's median TTFT, TPOT and output length gives."""
    s = f.summary
    rate, ttft, tpot, out = s.per_agent_tps, s.ttft_ms.p50, s.tpot_ms.p50, s.output_tokens_mean
    if _agents(f) or s.rate is not None or not (rate and ttft and tpot and out) or out < 2:
        return None
    request_ms = ttft + (out - 1) * tpot
    allowed = out / (request_ms / 1000.0)
    if rate >= RATE_BELOW_TPOT_SHARE * allowed or request_ms < RATE_BELOW_TPOT_MIN_MS:
        return None
    return Finding(Code.RATE_BELOW_TPOT, f"{rate:,.1f} tok/s per agent, where its median request ({out:,.0f} tokens "
                   f"at TTFT {ttft:,.1f} ms and TPOT {tpot:,.2f} ms) gives {allowed:,.1f}: the window holds waits "
                   "that are not the requests' (slow outliers, gaps between them)",
                   "more warm-up (--warmup auto) or more requests per level; the plateau's figures leave out the "
                   "ramp and drain", observed=rate, threshold=RATE_BELOW_TPOT_SHARE * allowed, unit="tok/s",
                   n=len(f.ok))


def _phase_locked(f: LevelFacts) -> Finding | None:
    w = f.summary.waves
    if w is None or not w.phase_locked:
        return None
    said = ", ".join(f"{plural(s.waves, 'wave')} of {s.size} (TTFT p50 {s.ttft_ms_p50:,.0f} ms)" for s in w.by_size
                     if s.waves >= 3 and s.ttft_ms_p50 is not None)
    return Finding(Code.PHASE_LOCKED, f"the closed loop fell into waves it kept, requests sent within {w.step_ms:,.1f} "
                   f"ms of each other: {said}; a request's TTFT says which wave it landed in as much as the server",
                   "--phase staggered (streams that arrive as agents do), or compare tools on the same phase",
                   n=len(f.ok), severity="note")


def _concurrency_not_reached(f: LevelFacts) -> Finding | None:
    c, peak = f.concurrency, f.peak_in_flight
    if not c or c <= 1 or not f.measured or peak is None or peak >= c:
        return None
    if _agents(f):  # agents pause between turns: fewer calls in flight than agents is the load
        return None
    why = (f"only {f.requests} requests were asked for" if f.requests is not None and f.requests < c
           else "requests ended before the others were sent")
    return Finding(Code.CONCURRENCY_NOT_REACHED,
                   f"the level never had {c} requests in flight (at most {peak}): {why}",
                   f"raise --requests to at least {2 * c} or give --duration", peak, c, "requests", len(f.measured))


def _error_rate(f: LevelFacts) -> Finding | None:
    s = f.summary
    attempted = s.completed + s.failed - s.cut  # a request the level's end cut was not the server's to fail
    failed = s.failed - s.cut
    if f.max_error_rate is None or f.interrupted or not attempted or failed / attempted <= f.max_error_rate:
        return None
    share = failed / attempted
    kinds = ", ".join(f"{k} x{n}" for k, n in sorted(s.errors.items()) if k not in CUT_KINDS)
    return Finding(Code.ERROR_RATE,
                   f"{failed} of {attempted} requests failed ({share:.0%}, above --max-error-rate "
                   f"{f.max_error_rate:.0%}): {kinds}", "the level is failed, not a result",
                   share, f.max_error_rate, "share", attempted)


#: The level rules, in order. A level's flags list them in this order, each at most once.
LEVEL_RULES: tuple[Rule, ...] = (
    Rule(Code.MULTI_TOKEN_CHUNKS, "ITL is per chunk; one chunk carrying several tokens makes ITL and TPOT differ "
         "(docs/metrics.md)", _multi_token_chunks),
    Rule(Code.ONE_READ, "an answer whose tokens all came in one read has no decode time to measure: its TPOT "
         "and ITL read 0 (ONE_READ_SHARE)", _one_read),
    Rule(Code.USAGE_ABSENT, "output tokens counted by a local tokenizer or by chunks are estimates "
         "(docs/metrics.md: usage, else server timings, else the tokenizer; record which)", _usage_absent),
    Rule(Code.OUTPUT_SHORT, "a server that ignores ignore_eos/min_tokens ends early, so throughput is not "
         "comparable (verify on every response; never assume)", _output_short),
    Rule(Code.PROMPT_TRUNCATED, "Ollama silently truncates prompts past num_ctx; the usage count shows it "
         "(PROMPT_TRUNCATION_SLACK_*)", _prompt_truncated),
    Rule(Code.P99_ESTIMATE, "docs/metrics.md: a p99 over fewer than 100 samples is flagged as an estimate "
         "(P99_MIN_SAMPLES)", _p99_estimate),
    Rule(Code.ERRORS, "failed requests are left out of the latencies; the level says there were some", _errors),
    Rule(Code.INTERRUPTED, "a level cut short by the user keeps what it measured, marked", _interrupted),
    Rule(Code.UNANSWERED, "a --duration level cancels what is unanswered after its grace (grace.py); the figures "
         "are then the answered requests', which a stalling server makes look fast",
         lambda f: unanswered(f.measured, f.grace_s)),
    Rule(Code.STOPPED_EARLY, "a capacity search stops a level once its verdict cannot change, the server is "
         "clearly over-saturated, or its time budget is spent (capacity.LevelStop); what it measured is kept",
         _stopped_early),
    Rule(Code.WORKER_LOST, "a load-generating worker (a process, or a Ray node) lost mid-level takes its requests in "
         "flight with it; what it had finished is kept and the level is partial (workers.py)", _worker_lost),
    Rule(Code.DIRTY_BENCH, "the clean-bench guard failed a check before the level (guard.py, pyperf's system "
         "checks)", _dirty_bench),
    Rule(Code.HOST_UNCHECKED, "the server host's guard runs through its agent; an agent that does not answer "
         "leaves the level on a host nobody checked (serverhost.ServerHost.guard)", _host_unchecked),
    Rule(Code.CLIENT_BOUND, "the client's own limits (loop lag, CPU, send delay; loadgen.ClientWatch and its "
         "thresholds) make timings read late", _client_bound),
    Rule(Code.SLOTS_EXCEEDED, "the server's slots or the context it gives a request cannot hold the level (the "
         "adapter's slot_warnings: each server's own limits)", _slots_exceeded),
    Rule(Code.CONCURRENCY_NOT_REACHED, "a level that never had its concurrency in flight did not measure it",
         _concurrency_not_reached),
    Rule(Code.ERROR_RATE, "a level with more failures than --max-error-rate is failed, not published",
         _error_rate),
    Rule(Code.CACHE_COUNTS_DISAGREE, "the cached share the responses report is checked against the server's own "
         "prefix-cache counters (CACHE_COUNT_TOLERANCE)", _cache_counts_disagree),
    Rule(Code.CONTEXT_OVERFLOW, "a replay whose calls overflow the server's context measures refusals, not the box: "
         "AgentX marks a run invalid over 1% (replay_stats.OVERFLOW_LIMIT)", _context_overflow),
    Rule(Code.NO_PLATEAU, "a level's figures over its whole window count its ramp and drain as load; a level "
         "whose plateau is under half its window has mostly those (steady.PLATEAU_MIN_SHARE)", _no_plateau),
    Rule(Code.DRIFT, "a level whose latency moves between its first and last third had not settled "
         "(steady.DRIFT_RATIO)", _drift),
    Rule(Code.TAIL_CLUSTER, "a tail far from the body is a one-time cost inside the window, not the level's tail "
         "(steady.TAIL_SHARE, TAIL_RATIO)", _tail_cluster),
    Rule(Code.RATE_BELOW_TPOT, "a per-agent rate under half of what the level's own TTFT and TPOT give is "
         "not the server's rate (RATE_BELOW_TPOT_SHARE)", _rate_below_tpot),
    Rule(Code.OVER_OFFERED, "an open loop's output above the load it offered measured its few arrivals, not the "
         "rate (rate_findings.OVER_OFFERED_RATIO)", over_offered),
    Rule(Code.RATE_NOT_SUSTAINED, "an open loop whose queue grew through the level measured how long it ran, not "
         "the box at that rate (steady.queue_growth, as a capacity search stops such a level)", rate_not_sustained),
    Rule(Code.CACHE_DECAY, "a soak whose cached share falls from its first tenth to its last lost what its cache "
         "held (soak.DECAY_MARGIN)", _cache_decay),
    Rule(Code.PHASE_LOCKED, "a closed loop whose streams keep one split (one alone, three together) reads a "
         "phase nobody chose into TTFT (steady.PHASE_TTFT_RATIO)", _phase_locked),
)


def assess(facts: LevelFacts, rules: Iterable[Rule] = LEVEL_RULES) -> list[Finding]:
    """Run the rules over a level and add what they find to its summary (each code once); returns the findings
    added."""
    added = []
    for rule in rules:
        found = rule.check(facts)
        if found is not None and facts.summary.add(found):
            added.append(found)
    return added


def server_gone(why: Exception, *summaries: ServingLevel | None) -> None:
    """The server stopped answering in a level (or its engine died), which ended the run: the level, stored when
    it ended, is failed, and says why. Its answers before are kept; it is no verdict on the load it offered."""
    for s in filter(None, summaries):  # a level's repetition, and the level they make (one object where one ran)
        s.add(Finding(Code.SERVER_GONE, f"the run stopped here: {why}",
                      "its answers before the server went are measured; run the level again once the server is up",
                      n=s.completed + s.failed))


# ---- the guard's finding, raised before a level (sweep.py) ----------------------------------------------

def guard_finding(snap: GuardSnapshot | None, run_id: str = "") -> Finding | None:
    """A dirty guard snapshot as a finding: the failed checks, what each observed, and their advice."""
    if snap is None or not snap.dirty:
        return None
    names = ", ".join(c.name for c in snap.failed)
    where = f"'tokenbench show {run_id} --guard' prints the snapshots" if run_id else "the guard's snapshot says more"
    return Finding(Code.DIRTY_BENCH, f"the guard found the bench dirty before this level ({names})", where,
                   observed=len(snap.failed), threshold=0, unit="failed checks", n=len(snap.results))
