"""The session view of a run, as compare, cost and the report show it: an agent-session run's levels
by concurrency and cache mode, each turn's TTFT warm beside busted, and what the prefix cache bought, in words.

A session run is a sweep whose levels carry ``LevelSummary.session`` (``levels.SessionStats``, written by the
session runner): each concurrency twice, ``warm`` (the history re-sent as it is, for the server's prefix cache
to serve) and ``busted`` (a marker at the start of every turn, so no cache serves it: the baseline that says
what the cache bought). Two levels share a concurrency, so a level is keyed by (concurrency, cache), never by
its concurrency alone. Reads results only.
"""

from __future__ import annotations

from dataclasses import dataclass

from .levels import LevelSummary, ServingLevel, SessionStats, serving
from .results import RunResult

WARM, BUSTED = "warm", "busted"
CACHES = (WARM, BUSTED)
#: A warm level whose server said it served less than this share of the prompt tokens from its cache: the
#: cache did not do its job (off, too small, or evicting), so "warm" measured no cache.
WARM_CACHED_MIN = 0.2
#: A busted level whose server still said it served more than this share from its cache is no uncached baseline.
BUSTED_CACHED_MAX = 0.1
#: A terminal table shows at most about this many turns (the first, every n-th, the last); the JSON has all.
MOST_TURNS = 16


def is_replay_run(r: RunResult) -> bool:
    """A replay of recorded agent trajectories (``sweep --trace`` of agents): its levels carry tree statistics."""
    return (r.manifest.workload or {}).get("kind") == "replay" or any(
        s.replay is not None for s in serving(o.summary for o in r.outcomes))


def is_session_run(r: RunResult) -> bool:
    """An agent-session run: its levels carry session statistics, or its workload says so. A replay's levels carry
    them too (over its lanes), but its calls are a recording's, not turns of one growing session: it is none."""
    if is_replay_run(r):
        return False
    return any((s := o.serving) is not None and s.session is not None for o in r.outcomes) or \
        (r.manifest.workload or {}).get("kind") == "sessions"


def cache_of(s: LevelSummary) -> str | None:
    """A level's cache mode (warm, busted), None for a level that is no session level."""
    return s.session.cache if isinstance(s, ServingLevel) and s.session is not None and s.replay is None else None


def name(r: RunResult) -> str:
    return str(r.manifest.label or r.run_id)


_KINDS = {"sweep": "a plain sweep", "depth": "a depth run", "bench": "a llama-bench run", "predict": "a prediction"}


def described(r: RunResult) -> str:
    if is_replay_run(r):
        return "a replay of recorded agents"
    return "an agent-session run" if is_session_run(r) else _KINDS.get(r.kind, f"a {r.kind} run")


def mismatch(a: RunResult, b: RunResult) -> str | None:
    """Why two runs cannot be compared when one is a session run and the other is not (one line), else None."""
    if is_session_run(a) == is_session_run(b):
        return None
    return (f"{name(a)} is {described(a)} and {name(b)} is {described(b)}: a session's turns re-send a growing "
            "history that a prefix cache can serve, so its TTFT and throughput say nothing of fixed-length requests; "
            "compare session runs with session runs")


def levels(r: RunResult) -> dict[tuple[int, str], ServingLevel]:
    """The run's session levels by (concurrency, cache mode); the first where a key repeats; none for a replay."""
    out: dict[tuple[int, str], ServingLevel] = {}
    if is_replay_run(r):
        return out
    for s in serving(o.summary for o in r.outcomes):
        if s.session is not None:
            out.setdefault((s.concurrency or 0, s.session.cache), s)
    return out


def concurrencies(r: RunResult) -> list[int]:
    return sorted({c for c, _ in levels(r)})


def level_label(s: LevelSummary) -> str:
    """A session level in a table's cell: "4 warm" (concurrency and cache mode)."""
    cache = cache_of(s)
    return f"{s.concurrency}" + (f" {cache}" if cache else "")


@dataclass(slots=True)
class TurnRow:
    """One turn of one run at one concurrency: warm beside busted."""

    turn: int  # as stored: 0 is the first turn
    context_tokens: float | None  # the warm level's context at this turn (the busted one's where warm has none)
    cached_tokens: float | None  # of which the warm level's server said its cache served
    warm_ttft_ms: float | None  # TTFT p50
    busted_ttft_ms: float | None
    decode_tps: float | None = None  # the warm level's decode rate at this turn (1 / median TPOT)
    warm_ttft_floor_ms: float | None = None  # a predicted warm turn's TTFT floor (TurnPoint.limits)

    @property
    def cached_share(self) -> float | None:
        """The share of the turn's context the warm level's server said its cache served."""
        if self.cached_tokens is None or not self.context_tokens:
            return None
        return self.cached_tokens / self.context_tokens

    @property
    def gain(self) -> float | None:
        """Busted TTFT over warm TTFT: how many times faster the turn's first token came with the cache."""
        if self.warm_ttft_ms and self.busted_ttft_ms:
            return self.busted_ttft_ms / self.warm_ttft_ms
        return None


def _turns(stats: SessionStats | None) -> dict[int, tuple[float | None, ...]]:
    return {t.turn: (t.context_tokens_mean, t.cached_tokens_mean, t.ttft_ms.p50, t.decode_tps,
                     (t.limits or {}).get("ttft_ms")) for t in (stats.turns if stats else [])}


def turn_rows(r: RunResult, concurrency: int) -> list[TurnRow]:
    """Every turn either cache mode reached at ``concurrency``, warm beside busted."""
    by = levels(r)
    warm = _turns(by[(concurrency, WARM)].session if (concurrency, WARM) in by else None)
    busted = _turns(by[(concurrency, BUSTED)].session if (concurrency, BUSTED) in by else None)
    out = []
    for k in sorted(set(warm) | set(busted)):
        w, b = warm.get(k, (None,) * 5), busted.get(k, (None,) * 5)
        out.append(TurnRow(k, w[0] if w[0] is not None else b[0], w[1], w[2], b[2], w[3], w[4]))
    return out


def shown_turns(turns: list[int], most: int = MOST_TURNS) -> list[int]:
    """The turns a terminal table shows: all of up to ``most``, else the first, every n-th and the last."""
    if len(turns) <= most:
        return turns
    step = -(-len(turns) // (most - 4))  # ceil: about most - 4 rows, so the last fits beside them
    picked = turns[::step]
    return picked + ([turns[-1]] if picked[-1] != turns[-1] else [])


def seconds(ms: float | None) -> str:
    """A time in seconds, two or three significant figures: 0.031, 0.31, 9.8, 12.3, 1,234."""
    if ms is None:
        return "—"
    s = ms / 1000.0
    if s >= 100:
        return f"{s:,.0f}"
    return f"{s:.3g}" if s >= 1 else f"{s:.2g}"


def tokens(n: float | None) -> str:
    """A token count as contexts are spoken of: 812, 4.1K, 48K (K: a thousand)."""
    if n is None:
        return "—"
    if n < 1000:
        return f"{n:,.0f}"
    if n < 9950:
        return f"{n / 1000:.1f}K"
    return f"{n / 1000:,.0f}K"


def share(v: float | None) -> str:
    return "—" if v is None else f"{v:.0%}" if v >= 0.01 or v == 0 else f"{v:.1%}"


def gain_line(r: RunResult, concurrency: int) -> str | None:
    """What the cache bought at the last turn both cache modes reached: "turn 20 at 48K context: TTFT 0.31 s
    cached, 9.8 s uncached (32x faster with the cache; the server said its cache served 93% of the warm prompt
    tokens)". None without both modes."""
    both = [t for t in turn_rows(r, concurrency) if t.gain is not None]
    if not both:
        return None
    t = both[-1]
    gain = t.gain or 0.0
    said = f"{gain:.1f}x faster with the cache" if gain >= 1 else f"{1 / gain:.1f}x slower with the cache"
    warm = levels(r)[(concurrency, WARM)].session
    cached = warm.cached_share if warm is not None else None
    if warm is not None and warm.cached_source == "predicted":
        said += (f"; predicted: the cache serves {share(cached)} of the warm prompt tokens" if cached is not None
                 else "")
    else:
        said += (f"; the server said its cache served {share(cached)} of the warm prompt tokens"
                 if cached is not None else "; the server did not say how much its cache served")
    return (f"turn {t.turn + 1} at {tokens(t.context_tokens)} context: TTFT {seconds(t.warm_ttft_ms)} s cached, "
            f"{seconds(t.busted_ttft_ms)} s uncached ({said})")


def with_baseline(r: RunResult) -> bool:
    """Whether the run set out to measure a busted baseline beside its warm levels (not ``--no-baseline``, not a
    capacity search's warm-only levels); a run whose manifest does not say is taken to have."""
    return (r.manifest.workload or {}).get("baseline") is not False


def warnings(r: RunResult) -> list[str]:
    """What a session run's numbers cannot say by themselves: a warm level the cache did not serve, a busted
    level it did, a concurrency with one mode only, sessions that did not finish."""
    out = []
    by = levels(r)
    # a cache-cliff search grows the sessions until the cache stops serving them: a low share is its answer
    cliff = (r.manifest.capacity or {}).get("cache_drop") is not None
    alone: dict[str, list[int]] = {}  # the concurrencies with one mode only, by the mode missing: said once
    for c in concurrencies(r):
        where = f"{name(r)} at concurrency {c}"
        warm, busted = by.get((c, WARM)), by.get((c, BUSTED))
        ws = warm.session if warm is not None else None
        bs = busted.session if busted is not None else None
        if ws is None or bs is None:
            alone.setdefault(BUSTED if bs is None else WARM, []).append(c)
        if ws is not None and ws.cached_share is not None and ws.cached_share < WARM_CACHED_MIN \
                and (ws.turns_per_session or 0) > 1 and ws.cached_source != "predicted" and not cliff:
            out.append(f"{where}: the server said its cache served only {share(ws.cached_share)} of the warm prompt "
                       "tokens: is its prefix cache on (vLLM --enable-prefix-caching, llama.cpp cache_prompt) and "
                       "large enough for every session?")
        if bs is not None and bs.cached_share is not None and bs.cached_share > BUSTED_CACHED_MAX:
            out.append(f"{where}: the busted level still had {share(bs.cached_share)} of its prompt tokens served "
                       "from the cache: it is no uncached baseline")
        for st in (ws, bs):
            # a soak's end cuts the sessions then running short: no turn of theirs failed (show says how many)
            if st is not None and (failed := st.sessions - st.sessions_finished - st.cut) > 0:
                out.append(f"{where} {st.cache}: {failed} of {st.sessions} sessions did not finish (a turn failed)")
    if not with_baseline(r):  # no busted level by choice: not a fault of the run's
        alone.pop(BUSTED, None)
    for mode, cs in alone.items():
        at = f"concurrency {cs[0]}" if len(cs) == 1 else f"concurrencies {', '.join(map(str, cs))}"
        out.insert(0, f"{name(r)} has no {mode} level at {at}: what the cache bought cannot be said")
    return out
