"""What a replay level of recorded agent trajectories says beside a sweep's figures (``ServingLevel.replay``): per
tree (a session and its subagents) how long it took and how many calls it made; per call TTFT against the context
it sent and against the part the server had to prefill (its uncached tokens); the trace's ideal cached share beside
what the server served; the per-agent rate 90% of calls reached (interactivity); and the share of calls the server
refused for their context (AgentX marks a run invalid when over 1% overflow)."""

from __future__ import annotations

import re
import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .distribution import Distribution, percentile
from .records import RequestRecord
from .slo import SloCheck, request_rates

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
#: A replay level whose share of calls that overflowed the server's context is above this is invalid (AgentX).
OVERFLOW_LIMIT = 0.01
#: The smallest bin edge of the context tables, tokens; each bin doubles the one before.
FIRST_EDGE = 256
#: What servers say when a prompt is longer than their context (vLLM: "maximum context length", llama-server:
#: "exceeds the available context size", SGLang: "longer than the model's context length"; OpenAI's
#: ``context_length_exceeded``).
_OVERFLOW = re.compile(r"context.{0,20}(length|size|window)|exceed\w*.{0,40}context|too (long|many tokens)",
                       re.IGNORECASE)


def overflowed(r: RequestRecord) -> bool:
    """A call the server refused because its prompt did not fit its context."""
    return not r.ok and r.http_status is not None and 400 <= r.http_status < 500 and \
        bool(_OVERFLOW.search(r.error or ""))


@dataclass(slots=True)
class ContextBin:
    """Calls whose context (or uncached tokens) fell in [low, high) tokens."""

    low: int
    high: int
    calls: int
    context_tokens_mean: float
    uncached_tokens_mean: float | None  # None: the server said nothing of its cache
    ttft_ms: Distribution

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ContextBin:
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        d["ttft_ms"] = Distribution(**d["ttft_ms"]) if isinstance(d.get("ttft_ms"), dict) else Distribution(n=0)
        return cls(**d)


@dataclass(slots=True)
class ReplayStats:
    """A replay level. ``trees``: session trees started in the level (a recorded session with its subagents);
    ``tree_s``: a finished tree's first send to its last answer, its pauses and subagents included."""

    trees: int
    trees_finished: int
    subagents: int
    calls: int
    calls_per_tree: float | None
    tree_s: Distribution
    ideal_cached_share: float | None  # what an unbounded prefix cache could serve of the trace (None: unknown)
    agent_tps_p90: float | None  # output tokens / (send to last byte) that 90% of calls reached or passed
    overflowed: int
    overflow_share: float | None
    by_context: list[ContextBin] = field(default_factory=list)
    by_uncached: list[ContextBin] = field(default_factory=list)
    asked: int | None = None  # the calls the level asked for (--requests); None: every trajectory once
    #: what the ideal share is of: "tokens" (hash-id blocks), "characters" (a full-text set's messages)
    ideal_basis: str | None = None
    #: the trees (numbered as ``by_tree`` keys them: their root session) whose every call answered but that the
    #: level's end or an interrupt cut before their last call; None: not known (a level stored without it)
    cut_trees: list[int] | None = None
    #: the trees whose first call measured was past their trajectory's first (a lane's first tree starts at a
    #: random call), and the calls of their own sessions before it, not measured (the one just before was sent
    #: uncounted, to warm the cache); None: not known (a level stored before)
    mid_trees: int | None = None
    calls_skipped: int | None = None

    @property
    def invalid(self) -> bool:
        return self.overflow_share is not None and self.overflow_share > OVERFLOW_LIMIT

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["by_context"] = [b.to_dict() for b in self.by_context]
        out["by_uncached"] = [b.to_dict() for b in self.by_uncached]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReplayStats:
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        d["tree_s"] = Distribution(**d["tree_s"]) if isinstance(d.get("tree_s"), dict) else Distribution(n=0)
        for k in ("by_context", "by_uncached"):
            d[k] = [ContextBin.from_dict(b) for b in d.get(k) or [] if isinstance(b, dict)]
        return cls(**d)


def tokens(n: int) -> str:
    """A bin's edge in tokens: "512", "2K"."""
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


def replay_stats(records: list[RequestRecord], ideal: float | None, asked: int | None = None,
                 ended: set[int] | None = None, basis: str | None = None) -> ReplayStats:
    """A replay level's view of its measured calls (each carries its tree in ``session``, a subagent's parent
    tree in ``parent``); ``asked``: the calls it was to measure (--requests), where it was given a count;
    ``ended``: the trees (a subagent's its own) the replay sent to their last call, so a tree cut by the level's
    end or an interrupt is not called finished for the calls it did send."""
    calls = [r for r in records if r.phase == "measured" and r.session is not None]
    trees = by_tree(calls)
    finished = [rs for rs in trees.values()
                if all(r.ok and (ended is None or r.session in ended) for r in rs)]
    ok = [r for r in calls if r.ok]
    n_over = sum(overflowed(r) for r in calls)
    starts = _starts(trees)
    return ReplayStats(
        trees=len(trees), trees_finished=len(finished),
        subagents=len({r.session for r in calls if r.parent is not None}), calls=len(calls),
        calls_per_tree=statistics.fmean(len(rs) for rs in trees.values()) if trees else None,
        tree_s=Distribution.of([_span_s(rs) for rs in finished]), ideal_cached_share=ideal,
        agent_tps_p90=_rate_reached_by(ok, 0.9), overflowed=n_over,
        overflow_share=n_over / len(calls) if calls else None,
        by_context=bins(ok, lambda r: r.input_tokens), by_uncached=bins(ok, _uncached), asked=asked,
        ideal_basis=basis if ideal is not None else None, cut_trees=_cut(trees, ended),
        mid_trees=sum(1 for s in starts if s),
        calls_skipped=sum(starts))


def _cut(trees: dict[int, list[RequestRecord]], ended: set[int] | None) -> list[int] | None:
    """The trees whose every call answered but that did not reach their last call (None: not known)."""
    if ended is None:
        return None
    return sorted(k for k, rs in trees.items() if all(r.ok for r in rs) and any(r.session not in ended for r in rs))


def first_own_call(root: int, calls: list[RequestRecord]) -> int | None:
    """A tree's first call of its own session measured (its place in the trajectory, 0 the first); None where
    only its subagents' calls were."""
    return min((r.turn or 0 for r in calls if r.session == root), default=None)


def _starts(trees: dict[int, list[RequestRecord]]) -> list[int]:
    """Each tree's first call of its own session measured, 0 its trajectory's first."""
    return [k for root, rs in trees.items() if (k := first_own_call(root, rs)) is not None]


#: The objective a replay level held to an SLO is also held to: its share of calls refused for their context.
VALIDITY_CHECK = "context_overflow"


def validity_check(stats: ReplayStats) -> SloCheck | None:
    """AgentX's validity rule as one more objective of a level held to an SLO: more than 1% of its calls refused
    for their context fails the level (a capacity search then does not count it as served), whatever its TTFT
    said of the calls that fit. The share observed is the verdict, as AgentX reads it, not an estimate of a rate;
    a level with no call refused has nothing to add."""
    if not stats.overflowed or stats.overflow_share is None:
        return None
    return SloCheck(VALIDITY_CHECK, stats.overflow_share, OVERFLOW_LIMIT, "share", not stats.invalid, stats.calls,
                    stats.overflowed, 0.0)


def by_tree(calls: list[RequestRecord]) -> dict[int, list[RequestRecord]]:
    """Calls by the tree they belong to: a subagent's (``parent`` set, nested or not) by its root session's."""
    root: dict[int, int] = {}
    for r in sorted(calls, key=lambda r: r.session or 0):  # a parent tree is numbered before its subagents
        s = r.session or 0
        root[s] = root.get(r.parent, r.parent) if r.parent is not None else s
    out: dict[int, list[RequestRecord]] = {}
    for r in calls:
        out.setdefault(root[r.session or 0], []).append(r)
    return out


def tree_sessions(records: list[RequestRecord], ended: set[int] | None = None
                  ) -> tuple[list[RequestRecord], frozenset[int]]:
    """A replay level's measured calls as sessions, one a tree (a subagent's calls in its root tree's session),
    and the trees the level's end cut (a call of theirs never sent, ``ended`` as in ``replay_stats``): the
    session view then counts finished what ``replay_stats`` does, so a tree of 4 sessions is one, not four."""
    calls = [r for r in records if r.phase == "measured" and r.session is not None]
    trees = by_tree(calls)
    cut = frozenset(k for k, rs in trees.items() if ended is not None and any(r.session not in ended for r in rs))
    return [replace(r, session=k) for k, rs in trees.items() for r in rs], cut


def _span_s(calls: list[RequestRecord]) -> float:
    return (max(r.end_ns or 0 for r in calls) - min(r.sent_ns for r in calls)) / NS_PER_S


def _rate_reached_by(ok: list[RequestRecord], share: float) -> float | None:
    """The per-call output rate (tokens over send to last byte) that ``share`` of the calls reached or passed."""
    rates = sorted(request_rates(ok))
    return percentile(rates, 100 * (1 - share)) if rates else None


def _uncached(r: RequestRecord) -> int | None:
    return None if r.input_tokens is None or r.cached_tokens is None else r.input_tokens - r.cached_tokens


def bins(calls: list[RequestRecord], key: Any) -> list[ContextBin]:
    """The calls grouped by ``key`` (tokens) into bins that double from FIRST_EDGE; empty bins left out."""
    keyed = [(k, r) for r in calls if (k := key(r)) is not None and r.ttft_ns is not None]
    if not keyed:
        return []
    out, low, high = [], 0, FIRST_EDGE
    top = max(k for k, _ in keyed)
    while low <= top:
        inside = [r for k, r in keyed if low <= k < high]
        if inside:
            uncached = [u for r in inside if (u := _uncached(r)) is not None]
            out.append(ContextBin(low, high, len(inside), statistics.fmean(r.input_tokens or 0 for r in inside),
                                  statistics.fmean(uncached) if uncached else None,
                                  Distribution.of([(r.ttft_ns or 0) / NS_PER_MS for r in inside])))
        low, high = high, high * 2
    return out
