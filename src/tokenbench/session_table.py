"""An agent-session run's tables: per agent count, each turn's context, cached share and TTFT warm and busted,
what the cache bought, and each level's totals (sessions finished, session time, cached share)."""

from __future__ import annotations

from rich.console import Console

from .finding import Code
from .grace import INTERRUPTED
from .cells import agents_text, level_label, ms, num
from .console import print_hanging, print_table
from .levels import ServingLevel
from .session_view import tokens
from .slo import duration_text


#: A session table shows every turn up to this many, then a readable subset (the first turns, every k-th, the last).
SESSION_TURNS_SHOWN = 12


def readable_turns(turns: list[int], most: int = SESSION_TURNS_SHOWN) -> list[int]:
    """Every turn up to ``most``, else the first three, every k-th and the last (about ``most`` in all)."""
    if len(turns) <= most:
        return turns
    step = -(-len(turns) // (most - 3))
    keep = set(turns[:3]) | set(turns[step - 1::step]) | {turns[-1]}
    return [t for t in turns if t in keep]


def share_of(part: float | None, whole: float | None) -> str:
    """``part`` as a whole percentage of ``whole``; "—" where either is not known (or the whole is 0)."""
    return f"{100 * part / whole:.0f}%" if part is not None and whole else "—"


def session_rows(warm: ServingLevel, busted: ServingLevel | None) -> tuple[list[str], list[list[str]]]:
    """One agent count's turns: the context each turn sent, the share the server served from its cache, TTFT with
    the cache warm and busted (p50 over the sessions), what the cache bought, and the decode rate at that turn."""
    assert warm.session is not None
    cold = {t.turn: t for t in busted.session.turns} if busted is not None and busted.session is not None else {}
    by_turn = {t.turn: t for t in warm.session.turns}
    header = ["Turn", "Context", "Cached", "TTFT warm", "TTFT busted", "Gain", "Decode tok/s"]
    rows = []
    for k in readable_turns(sorted(by_turn)):
        t, b = by_turn[k], cold.get(k)
        gain = b.ttft_ms.p50 / t.ttft_ms.p50 if b is not None and b.ttft_ms.p50 and t.ttft_ms.p50 else None
        rows.append([str(k + 1), tokens(t.context_tokens_mean), share_of(t.cached_tokens_mean, t.context_tokens_mean),
                     ms(t.ttft_ms.p50), ms(b.ttft_ms.p50) if b is not None else "—",
                     f"{gain:.1f}x" if gain else "—", num(t.decode_tps)])
    if busted is None:  # no baseline (--no-baseline, a cliff search): no busted TTFT, no gain, no columns of dashes
        header, rows = header[:4] + header[6:], [r[:4] + r[6:] for r in rows]
    return header, rows


def session_lines(s: ServingLevel) -> list[str]:
    """A session level's totals: sessions finished and their time, what the cache served by the responses' count
    and by the server's own counters."""
    st = s.session
    if st is None:
        return []
    done = []
    if st.sessions:
        done.append(f"{st.sessions_finished}/{st.sessions} sessions finished")
    if st.session_s.p50 is not None:
        done.append(f"session time p50 {st.session_s.p50:.1f} s" +
                    (f" (p90 {st.session_s.p90:.1f} s)" if st.session_s.p90 is not None and st.session_s.n > 1 else ""))
    cache = [f"cached {100 * st.cached_share:.0f}% of prompt tokens ({st.cached_source})"
             if st.cached_share is not None else "no turn finished" if not s.completed else
             "the server reported no cached tokens"]
    if st.server_hit_share is not None:
        cache.append(f"server prefix-cache hits {100 * st.server_hit_share:.0f}% (/metrics)")
    parts = [", ".join(done), ", ".join(cache)]
    if st.capped or st.compactions:
        parts.append(f"at the context cap {st.capped} ended, {st.compactions} compacted")
    if st.cut:  # an interrupt (one that cut requests, or found every session thinking), else the soak's end
        by = "the interrupt" if s.errors.get(INTERRUPTED) or s.finding(Code.INTERRUPTED) else "the soak's end"
        parts.append(f"{st.cut} cut short by {by}")
    beside = ["  " + st.background.line()] if st.background is not None else []
    return [f"{level_label(s)}: " + "; ".join(p for p in parts if p), *beside, *over_time(s)]


def over_time(s: ServingLevel) -> list[str]:
    """A soak's tenths: the cached share and turn TTFT p50 in each, first to last."""
    w = s.session.over_time if s.session is not None else []
    if not w:
        return []
    shares = " ".join("—" if x.cached_share is None else f"{100 * x.cached_share:.0f}%" for x in w)
    ttfts = " ".join(ms(x.ttft_ms_p50) for x in w)
    # a window's own length, by send time: "each tenth of 40 s" gave the whole soak's, read as each tenth's
    tenth = duration_text((w[0].end_s - w[0].start_s) * 1000)
    lines = [f"  over time, in tenths of the soak ({tenth} each): cached {shares}", f"  turn TTFT p50: {ttfts}"]
    if s.session is not None and (kept := s.session.sampled_sessions) is not None:
        lines.append(f"  kept {kept:,} of {s.session.sessions:,} sessions in memory (every turn stored): figures "
                     "over every turn, per-turn rows and findings over those kept")
    return lines


def session_headline(warm: ServingLevel, busted: ServingLevel | None) -> str | None:
    """What the cache bought at the last turn both modes reached: 'turn 20 at 4,810 tokens: TTFT 0.08 s cached,
    1.12 s uncached (14x)'."""
    if warm.session is None or busted is None or busted.session is None:
        return None
    cold = {t.turn: t for t in busted.session.turns}
    both = [t for t in warm.session.turns if t.turn in cold and t.ttft_ms.p50 and cold[t.turn].ttft_ms.p50]
    if not both:
        return None
    t = both[-1]
    b = cold[t.turn]
    assert t.ttft_ms.p50 is not None and b.ttft_ms.p50 is not None
    head = f"{agents_text(warm.concurrency)}, turn {t.turn + 1} at {tokens(t.context_tokens_mean)} tokens of context: "
    if not warm.session.cached_share:  # nothing said to be cached: the two are not the cache's doing
        return head + (f"TTFT {t.ttft_ms.p50 / 1000:.2f} s warm, {b.ttft_ms.p50 / 1000:.2f} s busted, and the "
                       "server reported no cached tokens: not a measure of its cache")
    return head + (f"TTFT {t.ttft_ms.p50 / 1000:.2f} s cached, {b.ttft_ms.p50 / 1000:.2f} s uncached "
                   f"({b.ttft_ms.p50 / t.ttft_ms.p50:.1f}x)")


def session_pairs(levels: list[ServingLevel]) -> list[tuple[ServingLevel, ServingLevel | None]]:
    """Each agent count's warm level and its busted baseline (None where it was not run)."""
    busted = {s.concurrency: s for s in levels if s.session is not None and s.session.cache == "busted"}
    return [(s, busted.get(s.concurrency)) for s in levels if s.session is not None and s.session.cache == "warm"]


def print_sessions(console: Console, levels: list[ServingLevel], fmt: str = "table") -> None:
    """The session view of a run: per agent count, TTFT against the turn and its context, warm and busted."""
    for warm, busted in session_pairs(levels):
        header, rows = session_rows(warm, busted)
        if not rows:  # a level an interrupt cut before any turn finished: no table of no rows
            continue
        print_table(console, header, rows, fmt,
                    title=f"{agents_text(warm.concurrency)}: each turn, p50 over the sessions", numeric=True)
        headline = session_headline(warm, busted)
        if headline:
            console.print(headline, markup=False, highlight=False)
    for s in levels:
        for line in session_lines(s):
            print_hanging(console, line)
