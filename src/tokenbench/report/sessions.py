"""The report's agent-session tables, as rows of text both the HTML page and the Markdown section
show: each turn's context and TTFT warm beside busted at one concurrency, and each session level's time, cache
share, throughput and cost. The numbers are ``session_view``'s and ``cost``'s; this module only arranges them."""

from __future__ import annotations

from ..pricing import Pricing, session_cost_points
from ..results import RunResult
from ..session_view import BUSTED, WARM, concurrencies, gain_line, levels, seconds, share, tokens, turn_rows
from . import style

#: Where a table has no figure.
NONE = "—"


def turn_table(r: RunResult, concurrency: int) -> tuple[list[str], list[list[str]]]:
    """Every turn at ``concurrency``, the figures the terminal's session table shows: the context sent, the share
    the cache served of it, TTFT p50 warm and busted, the cache's gain (busted over warm), and the decode rate
    (warm). Without a busted level (a run with no baseline) the busted and gain columns are left out, as there."""
    head = ["Turn", "Context (tokens)", "Cached (warm)", "TTFT p50 warm (s)", "TTFT p50 busted (s)",
            "Busted / warm", "Decode (tok/s, warm)"]
    turns = turn_rows(r, concurrency)
    rows = [[str(t.turn + 1), tokens(t.context_tokens), share(t.cached_share), seconds(t.warm_ttft_ms),
             seconds(t.busted_ttft_ms), f"{t.gain:.1f}×" if t.gain else NONE,
             style.number(t.decode_tps) if t.decode_tps else NONE] for t in turns]
    if (concurrency, BUSTED) not in levels(r):
        head, rows = head[:4] + head[6:], [row[:4] + row[6:] for row in rows]
    return head, rows


def level_table(r: RunResult, price: Pricing | None) -> tuple[list[str], list[list[str]]]:
    """Each session level, warm before busted at each concurrency: sessions finished, session time, what the
    cache served, throughput, and (with a price) the cost per finished session and per million output tokens."""
    cur = price.currency if price else ""
    head = ["Level", "Sessions finished", "Session p50 (s)", "Session p90 (s)", "Turns per session", "Cached share",
            "Server cache hits", "Aggregate output (tok/s)", "Per-agent (tok/s)"]
    if price:
        head += [f"{cur} per session", f"{cur} per M output tokens"]
    by = levels(r)
    ordered = [by[(c, k)] for c in concurrencies(r) for k in (WARM, BUSTED) if (c, k) in by]
    costs = session_cost_points(price, ordered) if price else []
    rows = []
    for k, s in enumerate(ordered):
        st = s.session
        assert st is not None
        p50, p90 = st.session_s.p50, st.session_s.p90
        row = [f"concurrency {s.concurrency}, {st.cache}", f"{st.sessions_finished} of {st.sessions}",
               seconds(p50 * 1000) if p50 is not None else NONE, seconds(p90 * 1000) if p90 is not None else NONE,
               f"{st.turns_per_session:.1f}" if st.turns_per_session is not None else NONE, share(st.cached_share),
               share(st.server_hit_share),
               style.number(s.output_throughput_tps) if s.output_throughput_tps else NONE,
               style.number(s.per_agent_tps) if s.per_agent_tps else NONE]
        if costs:
            c = costs[k]
            row += [style.number(c.cost_per_session) if c.cost_per_session else NONE,
                    style.number(c.cost_per_mtok) if c.cost_per_mtok else NONE]
        rows.append(row)
    return head, rows


def gains(r: RunResult) -> list[str]:
    """What the cache bought at each concurrency, in words."""
    return [f"concurrency {c}, {g}" for c in concurrencies(r) if (g := gain_line(r, c))]
