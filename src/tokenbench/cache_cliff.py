"""The cache cliff: how many live agent sessions a box keeps warm (``capacity --cache-cliff``).

A box serves N agents warm only while their sessions' KV fits the engine's cache. Past that the engine evicts a
session between its turns, and every later turn prefills its whole context again: the cached share of the prompt
tokens collapses and turn TTFT jumps, at one more agent. The search is capacity's (capacity.py) over live
sessions, each agent running one session whose turns re-send its history, with one more objective: a level fails
once the share of its prompt tokens the server said it served from its cache falls below ``drop`` (default half)
of the lowest level's, the warm share (``hold_cache``).

Beside the answer, the arithmetic that explains it (``Cliff``): the working set (live sessions x each one's
context) against the engine's KV pool as the engine reports it: llama.cpp's slots and context per slot (its
``/props``), vLLM's KV blocks and block size (its ``/metrics`` ``cache_config_info``). A session's size is its
mean context over its turns: live sessions are at every stage at once. The pool holds ``holds`` sessions of that
size (one a slot on llama.cpp); the cliff should come one session after.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from . import prometheus
from .slo import SloCheck, mean_p_value
from .layout import plural

if TYPE_CHECKING:
    from .capacity import CapacityAnswer, Verdict
    from .levels import ServingLevel
    from .results import LevelOutcome, RunResult

CHECK = "cached_share"
#: More sessions than the pool holds, their cached share within this share of the warm one: a cache beyond the
#: pool kept them warm; below it they passed only partly warm.
HELD_SHARE = 0.8


def _share(s: ServingLevel | None) -> float | None:
    return s.session.cached_share if s is not None and s.session is not None else None


def _check(s: ServingLevel | None, share: float, floor: float) -> SloCheck:
    """A level's cached share against the floor; sure when the floor lies outside the share's 95% interval,
    each session one sample (a one-sided normal test, as ``agent_tps``'s); not sure where fewer than two
    sessions said."""
    st = s.session if s is not None else None
    se = st.cached_share_se if st is not None else None
    p = mean_p_value(share, floor, se) if se is not None else None
    return SloCheck(CHECK, share, floor, "share", share >= floor, st.sessions if st is not None else 0, None, p)


def hold_cache(verdicts: list[Verdict], outcomes: list[LevelOutcome], drop: float) -> None:
    """Each level's cached share against ``drop`` of the lowest level's (the warm share), as an objective of its
    own (``cached_share``): a level whose share fell below it fails. A level whose server did not say what its
    cache served is held to nothing (the answer says the server did not say)."""
    by_idx = {o.idx: o for o in outcomes}
    shares = {v.idx: _share(by_idx[v.idx].serving) for v in verdicts}
    warm = next((shares[v.idx] for v in sorted(verdicts, key=lambda v: v.value)
                 if shares[v.idx] is not None and v.met is not None), None)
    if warm is None:
        return
    for v in verdicts:
        share = shares[v.idx]
        if share is None:
            continue
        check = _check(by_idx[v.idx].serving, share, warm * drop)
        v.checks.append(check)
        if not check.met and v.met:
            v.met = False


@dataclass(frozen=True, slots=True)
class KvPool:
    """The engine's KV cache as it reports it: its size in tokens, and how many sessions of a size it holds."""

    tokens: int
    how: str  # "4 slots x 1,024 tokens (llama-server /props)"
    slot_tokens: int | None = None  # llama.cpp: a session lives in one slot, so the pool holds one per slot
    block_tokens: int | None = None  # vLLM: a session takes whole blocks

    def holds(self, session_tokens: float) -> int:
        """Sessions of ``session_tokens`` each the pool keeps whole at once."""
        if session_tokens <= 0:
            return 0
        if self.slot_tokens is not None:
            return self.tokens // self.slot_tokens if session_tokens <= self.slot_tokens else 0
        block = self.block_tokens or 1
        return int(self.tokens // (math.ceil(session_tokens / block) * block))

    @classmethod
    def of_run(cls, result: RunResult) -> KvPool | None:
        """The pool a run's server reported: llama.cpp's slots from the manifest's server facts, vLLM's blocks as
        read before the search (``vllm_pool``) and kept in the search's manifest entry."""
        stored = (result.manifest.capacity or {}).get("kv_pool")
        if isinstance(stored, dict) and isinstance(stored.get("tokens"), int) and isinstance(stored.get("how"), str):
            return cls(stored["tokens"], stored["how"], stored.get("slot_tokens"), stored.get("block_tokens"))
        server = result.manifest.server or {}
        slots, ctx = server.get("slots"), server.get("slot_ctx")
        if isinstance(slots, int) and isinstance(ctx, int) and slots > 0 and ctx > 0:
            return cls(slots * ctx, f"{slots} slots x {ctx:,} tokens (llama-server /props)", ctx)
        return None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def vllm_pool(metrics_text: str) -> KvPool | None:
    """vLLM's KV pool from its ``/metrics``: ``vllm:cache_config_info``'s labels ``num_gpu_blocks`` (the pool's
    blocks, on a CPU build too) and ``block_size`` (tokens a block). None where the page does not say."""
    labels = prometheus.info_labels(metrics_text, "vllm:cache_config_info")
    try:
        blocks, size = int(labels.get("num_gpu_blocks", "")), int(labels.get("block_size", ""))
    except ValueError:
        return None
    if blocks <= 0 or size <= 0:
        return None
    return KvPool(blocks * size, f"{blocks:,} blocks x {size} tokens (vLLM /metrics cache_config_info)",
                  block_tokens=size)


@dataclass(frozen=True, slots=True)
class Cliff:
    """Where the cached share collapsed, and the arithmetic beside it."""

    drop: float
    warm_share: float | None  # the lowest level's cached share
    warm_at: float | None  # ... at this many sessions
    kept: float | None  # sessions kept warm: the capacity (None: not even the lowest)
    fell_at: float | None  # the first level that failed (None: none did)
    share_kept: float | None
    share_fell: float | None
    ttft_ratio: float | None  # median turn TTFT at fell_at over that at kept
    cache_failed: bool  # the first failing level failed on its cached share (not on TTFT alone)
    session_tokens: float | None  # a session's context, mean over its turns, at the first failing level
    last_turn_tokens: float | None  # ... at its last turn
    working_set: float | None  # fell_at x session_tokens
    pool: KvPool | None
    holds: int | None  # sessions of session_tokens the pool holds

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pool"] = self.pool.to_dict() if self.pool is not None else None
        return d

    def headline(self) -> str:
        """"the cache keeps 4 sessions of 330 tokens warm; at 5 the cached share fell from 60% to 2% and median
        turn TTFT rose 1.8x"."""
        if self.warm_share is None:
            return "the server did not say how many prompt tokens its cache served: no cached share to follow"
        size = f" of up to {self.last_turn_tokens:,.0f} tokens" if self.last_turn_tokens else ""
        if self.kept is None:
            return f"no level kept its sessions warm (the lowest, {self.warm_at:.0f}, cached {self.warm_share:.0%})"
        kept = f"the cache keeps {plural(round(self.kept), 'session')}{size} warm"
        if self.fell_at is None:
            return f"{kept} (every level searched: cached share {self.share_kept:.0%} at {self.kept:.0f})"
        if not self.cache_failed:
            return (f"{kept} as far as the SLO went: at {self.fell_at:.0f} turn TTFT broke it with the cached "
                    f"share still {self.share_fell:.0%}")
        return (f"{kept}; at {self.fell_at:.0f} the cached share fell from {self.share_kept:.0%} to "
                f"{self.share_fell:.0%}{_ttft_moved(self.ttft_ratio)}")

    def explained(self) -> list[str]:
        out = []
        if self.working_set is not None and self.fell_at is not None:
            out.append(f"working set at {self.fell_at:.0f} sessions: {self.working_set:,.0f} tokens "
                       f"({self.fell_at:.0f} x {self.session_tokens:,.0f}, a session's mean context over its turns)")
        if self.pool is not None:
            holds = f": it holds {self.holds} such sessions" if self.holds is not None else ""
            out.append(f"the engine's KV pool: {self.pool.tokens:,} tokens, {self.pool.how}{holds}")
            if self.holds is not None and self.kept is not None and self.kept > self.holds:
                out.append(self._beyond_the_pool())
        else:
            out.append("the engine did not say how large its KV pool is")
        return out


    def _beyond_the_pool(self) -> str:
        """More sessions passed than the pool holds: kept warm by a cache beyond it where their cached share held
        (within ``HELD_SHARE`` of the warm one), else only partly warm, above the floor. A share that fell from 60%
        to 33% was said to be restored by a host cache a server had switched off."""
        assert self.kept is not None
        if self.share_kept is not None and self.warm_share and self.share_kept >= HELD_SHARE * self.warm_share:
            beyond = "llama-server's host prompt cache, --cache-ram" if self.pool and self.pool.slot_tokens \
                else "an offload tier"
            return f"{self.kept:.0f} stayed warm, more than the pool holds: a cache beyond it restored them ({beyond})"
        fell = f" fell to {self.share_kept:.0%} (from {self.warm_share:.0%}) and" \
            if self.share_kept is not None and self.warm_share else ""
        floor = f" of {self.drop * self.warm_share:.0%}" if self.warm_share else ""
        return (f"{self.kept:.0f} is more than the pool holds: their cached share{fell} stayed above the "
                f"floor{floor}, so they passed only partly warm")


def cliff(result: RunResult, found: CapacityAnswer) -> Cliff | None:
    """The cliff a cache search's levels show (None for any other search)."""
    drop = found.spec.cache_drop
    if drop is None:
        return None
    levels = {found.whole(o.level.concurrency): o.serving for o in result.outcomes}
    checked = sorted((v for v in found.verdicts if any(c.name == CHECK for c in v.checks)), key=lambda v: v.value)
    warm_at = checked[0].value if checked else None
    warm = _share(levels.get(found.whole(warm_at))) if warm_at is not None else None
    kept, fell = levels.get(found.whole(found.capacity)), levels.get(found.whole(found.first_fail))
    failing = next((v for v in found.verdicts if v.value == found.first_fail and v.met is False), None)
    cache_failed = failing is not None and any(c.name == CHECK and not c.met for c in failing.checks)
    turns = fell if fell is not None else kept
    size, last = _session_tokens(turns)
    pool = KvPool.of_run(result)
    ttft = (fell.ttft_ms.p50 / kept.ttft_ms.p50) if fell is not None and kept is not None and \
        fell.ttft_ms.p50 and kept.ttft_ms.p50 else None
    whole = found.whole
    return Cliff(drop, warm, whole(warm_at), whole(found.capacity), whole(found.first_fail), _share(kept), _share(fell), ttft,
                 cache_failed, size, last, size * found.first_fail if size is not None and found.first_fail else None,
                 pool, pool.holds(size) if pool is not None and size is not None else None)


def _session_tokens(s: ServingLevel | None) -> tuple[float | None, float | None]:
    """A session's context: the mean over its turns (what it holds in the cache at a moment taken at random, so
    the working set of sessions at every stage) and at its last turn (mean over the sessions that reached each)."""
    turns = [t for t in (s.session.turns if s is not None and s.session is not None else [])
             if t.context_tokens_mean is not None and t.n > 0]
    if not turns:
        return None, None
    mean = sum((t.context_tokens_mean or 0.0) * t.n for t in turns) / sum(t.n for t in turns)
    return mean, max(t.context_tokens_mean or 0.0 for t in turns)


def _ttft_moved(ratio: float | None) -> str:
    """What median turn TTFT did at the cliff: a small model re-prefills a session in little more than its warm
    turn took, so "rose 1.0x" would read as a rise."""
    if not ratio:
        return ""
    if ratio >= 1.05:
        return f" and median turn TTFT rose {ratio:.1f}x"
    if ratio <= 0.95:
        return f" and median turn TTFT fell to {ratio:.2f}x"
    return f", median turn TTFT within 5% ({ratio:.2f}x): re-sending the sessions cost little here"

