"""A replay run's tables: per level, TTFT against the context a call sent and against the tokens the server had to
prefill, then the level's trees (finished, their time, their subagents), what the cache served beside what the
trace could have had served, the per-agent rate 90% of calls reached, and how many calls overflowed the context."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from .cells import level_label, ms, num
from .console import print_table
from .levels import ServingLevel, TurnPoint
from .replay_stats import ContextBin, ReplayStats, tokens
from .layout import plural
from .session_table import readable_turns, share_of


def seconds(v: float) -> str:
    """A tree's time: "12.3 s"; under a second in ms, as every other time here ("47.0 ms", "290 ms")."""
    return f"{v:,.1f} s" if v >= 1 else ms(v * 1000)


def _range(b: ContextBin) -> str:
    return f"{tokens(b.low)}-{tokens(b.high)}"


def bin_rows(s: ServingLevel, markdown: bool = False) -> tuple[list[str], list[list[str]]]:
    """A level's calls by the context they sent (mean uncached tokens beside), and by the tokens prefilled: two
    tables side by side, a bar between them in a terminal; in Markdown, where a bar is a cell's edge, the second
    table's columns say "prefilled" instead."""
    assert s.replay is not None
    bar = "" if markdown else "| "
    header = ["Context", "Calls", "Uncached", "TTFT p50", "TTFT p90"] + (
        ["Prefilled", "Calls (prefilled)", "TTFT p50 (prefilled)"] if markdown else ["| Prefilled", "Calls", "TTFT p50"])
    left = [[_range(b), str(b.calls), num(b.uncached_tokens_mean, 0), ms(b.ttft_ms.p50), ms(b.ttft_ms.p90)]
            for b in s.replay.by_context]
    right = [[bar + _range(b), str(b.calls), ms(b.ttft_ms.p50)] for b in s.replay.by_uncached]
    rows = []
    for i in range(max(len(left), len(right))):
        rows.append((left[i] if i < len(left) else ["", "", "", "", ""]) +
                    (right[i] if i < len(right) else [bar.strip(), "", ""]))
    return header, rows


#: The most calls of a session the by-call table shows: every one up to it, then a readable subset.
CALLS_SHOWN = 10
BY_CALL_TITLE = "TTFT by the call's place in its recorded session (a subagent's in its own), p50 over the " \
    "sessions that reached it"


def call_rows(s: ServingLevel) -> tuple[list[str], list[list[str]]]:
    """A replay level's calls by their place in their recorded session: how many sessions reached it, the mean
    context they sent and its cached share, TTFT p50 and p90. Every call up to CALLS_SHOWN, then the first three,
    every k-th and the last."""
    assert s.session is not None
    by = {t.turn: t for t in s.session.turns if t.n}
    return ["Call", "Sessions", "Context", "Cached", "TTFT p50", "TTFT p90"], \
        [_call_row(by[k]) for k in readable_turns(sorted(by), CALLS_SHOWN)]


def _call_row(t: TurnPoint) -> list[str]:
    ctx = t.context_tokens_mean
    return [str(t.turn + 1), str(t.n), tokens(round(ctx)) if ctx is not None else "—",
            share_of(t.cached_tokens_mean, ctx), ms(t.ttft_ms.p50), ms(t.ttft_ms.p90)]


def lanes_warmed(s: ServingLevel) -> bool:
    """Whether a level's lanes each sent an uncounted warm-up call (the one before its random first call) inside
    the window: a replay with more than one lane. The server's /metrics count it; the cached share leaves it out
    with the rest of the warm-up."""
    return s.replay is not None and (s.concurrency or 1) > 1


def replay_lines(s: ServingLevel) -> list[str]:
    """A replay level's totals in words."""
    r = s.replay
    if r is None:
        return []
    trees = f"{r.trees_finished}/{r.trees} trees finished"
    if r.tree_s.p50 is not None:
        trees += f", tree time p50 {seconds(r.tree_s.p50)}" + (
            f" (p90 {seconds(r.tree_s.p90)})" if r.tree_s.p90 is not None and r.tree_s.n > 1 else "")
    if r.calls_per_tree is not None:
        trees += f", {r.calls_per_tree:.1f} calls a tree"
    if r.subagents:  # of every tree the level ran ("1/4 trees finished (1 subagent)" read as the finished one's)
        trees += f"; {plural(r.subagents, 'subagent')} among the {plural(r.trees, 'tree')}"
    cache = [f"cached {s.cached_share:.0%} of prompt tokens ({s.cached_source})" if s.cached_share is not None
             else "the server reported no cached tokens"]
    if r.ideal_cached_share is not None:
        cache.append(f"the trace's ideal {r.ideal_cached_share:.0%}" + _of(r.ideal_basis))
    hits = s.telemetry.prefix_cache_hit_rate if s.telemetry is not None else None
    if hits is not None:
        warm = ", the lanes' warm-up calls too" if lanes_warmed(s) else ""
        cache.append(f"the server's prefix-cache hits {hits:.0%} (/metrics: every call it served{warm})")
    # each call's own rate (its output over its send to last byte), not the table's per-agent share of the
    # aggregate, which the agents' pauses between calls are part of
    rate = f"90% of calls streamed at {r.agent_tps_p90:,.1f} tok/s or faster" if r.agent_tps_p90 is not None else \
        "no call's rate"
    over = f"{r.overflowed} of {r.calls} calls overflowed the context" + (" (INVALID: over 1%)" if r.invalid else "")
    short = f"; {r.calls} of the {r.asked} calls asked (--requests): {_why_fewer(s)}" if r.asked and \
        r.calls < r.asked else ""
    return [f"{level_label(s)}: {trees}; " + "; ".join(cache) + f"; {rate}; {over}{short}{_mid(r)}"]


def _mid(r: ReplayStats) -> str:
    """Trees a lane started mid-trajectory, and their calls before that point, which were not measured (the one
    just before was sent uncounted, to warm the cache; those before it not at all): a short recording replayed
    in several lanes can leave a large share of its calls out so."""
    if not r.mid_trees:
        return ""
    return (f"; {plural(r.mid_trees, 'tree')} started mid-trajectory, as each lane's first does (at a random "
            f"call): {plural(r.calls_skipped or 0, 'call')} before not measured ('show RUN --trees': From call)")


def _why_fewer(s: ServingLevel) -> str:
    """Why a replay level sent fewer calls than --requests asked."""
    if "interrupted" in s.flags:
        return "the level was interrupted"
    if "stopped_early" in s.flags:
        return "the search stopped the level once its verdict could not change"
    if s.failed:
        return f"{plural(s.failed, 'call')} failed, and a failed call ends its tree (an agent with no answer has " \
            "nothing to go on)"
    mid = ", each lane's first from a random call on" if (s.concurrency or 1) > 1 else ""
    return f"a level replays each trajectory once{mid}, and these were all it had"


def print_replays(console: Console, levels: list[ServingLevel], fmt: str = "table") -> None:
    """The replay view of a run: per level, TTFT against context and against prefilled tokens; its totals."""
    for s in levels:
        if s.replay is None or not (s.replay.by_context or s.replay.by_uncached):
            continue
        print_table(console, *bin_rows(s), fmt, numeric=True,
                    title=f"{level_label(s)}: TTFT by the context a call sent, and by the tokens prefilled")
        if s.session is not None and any(t.n for t in s.session.turns):
            print_table(console, *call_rows(s), fmt, numeric=True, title=f"{level_label(s)}: {BY_CALL_TITLE}")
    for s in levels:
        for line in replay_lines(s):
            console.print(line, markup=False, highlight=False)


def replay_heading(wl: dict[str, Any]) -> str:
    """A replay's workload as the run's description states it (the manifest's, written by ReplayPlan)."""
    t = wl.get("trajectories") if isinstance(wl.get("trajectories"), dict) else {}
    assert isinstance(t, dict)
    think = wl.get("max_think_s")
    n = t.get("trajectories")
    parts = [f"replay of {t.get('path')} ({t.get('format')}: {plural(n, 'trajectory', 'trajectories')}, "
             f"{t.get('calls')} calls, {plural(t.get('subagents'), 'subagent')})",
             "pauses as recorded" if think is None else f"pauses capped at {think:g} s"]
    if wl.get("scale") not in (None, 1, 1.0):
        parts.append(f"lengths / {wl['scale']:g}")
    if wl.get("speed") is not None:
        parts.append(f"open loop at {wl['speed']:g}x the recorded times")
    if wl.get("full_text") or t.get("format") == "mlcommons":
        parts.append(f"answers {wl.get('answers')}")
    if t.get("ideal_cached_share") is not None:
        parts.append(f"ideal cached share {t['ideal_cached_share']:.0%}" + _of(t.get("ideal_basis")))
    skipped = t.get("skipped") if isinstance(t.get("skipped"), dict) else {}
    assert isinstance(skipped, dict)
    parts += [f"{plural(n, 'line')} {why} left out" for why, n in skipped.items() if isinstance(n, int) and n]
    return ", ".join(parts)


def _of(basis: object) -> str:
    """A full-text set's ideal share is of its characters (trajectories/figures.py): said beside it."""
    return " (of characters)" if basis == "characters" else ""
