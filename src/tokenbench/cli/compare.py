"""``tokenbench compare``: its typed config (``compare.runs.CompareConfig``), one library call
(``compare.runs.compare_runs``) and the printing of what comes back."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich.console import Console

from .common import check_output, emit_json
from ..layout import plural

if TYPE_CHECKING:
    from ..compare.capacity import CapacityComparison
    from ..compare.runs import CompareConfig, Compared


def compare_config(a: argparse.Namespace) -> CompareConfig:
    from ..compare.runs import CompareConfig

    return CompareConfig(a.a, a.b, agents=a.agents or 16, tokens=a.tokens or 200, latest=a.latest, db=a.db)


def cmd_compare(a: argparse.Namespace, console: Console) -> int:
    from ..compare.runs import compare_runs

    check_output(a.json, "--json")
    cfg = compare_config(a)
    done = compare_runs(cfg)
    if done.replays is not None or done.sessions is not None:
        (_print_replays if done.replays is not None else _print_sessions)(console, done, a.format)
        if a.agents is not None or a.tokens is not None:  # asked for, and no line of it: said, not dropped
            console.print("--agents, --tokens: the effective-serving line is for runs of fixed-length requests; "
                          f"the levels of {'replays' if done.replays is not None else 'agent sessions'} are their "
                          "agents already", style="yellow", markup=False, highlight=False)
    else:
        _print_rows(console, cfg, done, a.format)
    if done.capacity is not None:
        _print_capacity(console, done.capacity, a.format,
                        bool(done.comparison.rows) or done.sessions is not None or done.replays is not None)
    q, c = done.quality, done.comparison
    if q is not None:  # the boxes' quality runs, found by the speed runs' labels
        console.print(f"quality (runs {q.run_a} and {q.run_b}): " + "; ".join(q.lines(c.a, c.b)), markup=False,
                      highlight=False)
    if a.json:
        emit_json(a.json, done.to_dict())
    return 0


def _print_rows(console: Console, cfg: CompareConfig, done: Compared, fmt: str) -> None:
    """The rows aligned on the shared operating points, their legend, the crossovers and the effective-serving
    line."""
    from ..compare.levels import GROUP_COLUMN, NO_SHARED_POINT, VALUE_COLUMNS, legend, table
    from ..console import print_table
    from ..layout import md_paragraph

    c, cap = done.comparison, done.capacity
    md = fmt == "markdown"

    def say(text: str, style: str | None = None) -> None:
        """A line; in Markdown a paragraph of its own (after a table, a line without a blank one is a row)."""
        console.print(f"\n{md_paragraph(text)}" if md else text, style=style, markup=False, highlight=False)

    for w in c.warnings:
        if not (cap is not None and w.startswith(NO_SHARED_POINT)):  # their capacities are what compares
            say(f"warning: {w}", "yellow")
    if c.rows:
        head, rows = table(c)
        say(f"A = {c.a}, B = {c.b}")
        if md:
            console.print("")
        print_table(console, head, rows, fmt, keep=VALUE_COLUMNS, group=GROUP_COLUMN)
        for line in legend(c):
            say(line)
        if c.unmatched:
            say(f"not compared: {'; '.join(c.unmatched)} (no level of the other run to set beside it)")
    for line in c.crossovers:
        say(line)
    if c.effective:
        say(f"{cfg.agents} agents x {cfg.tokens} tokens: " + "; ".join(c.effective))


def _print_replays(console: Console, done: Compared, fmt: str) -> None:
    """Two replays of recorded agents at each lane count both ran: their levels, and TTFT by context."""
    from ..compare.replays import lanes_title, replay_notes, replay_tables
    from ..console import print_table
    from ..layout import md_paragraph

    r = done.replays
    assert r is not None
    md = fmt == "markdown"

    def say(text: str, style: str | None = None) -> None:
        """A line; in Markdown a paragraph of its own (a note's leading "*" not a bullet, a table's title apart)."""
        console.print(f"\n{md_paragraph(text)}\n" if md else text, style=style, markup=False, highlight=False)

    for w in r.warnings:
        say(f"warning: {w}", "yellow")
    say(f"replays of recorded agents: A = {r.a}, B = {r.b}. A/B: A's figure over B's (a time below 1, or a rate "
        "above 1: A is faster); TTFT's with its 95% interval.")
    for block in r.blocks:
        (h1, r1), (h2, r2) = replay_tables(block)
        for title, (head, rows) in ((lanes_title(block.lanes), (h1, r1)),
                                    ("TTFT by the context a call sent (tokens)", (h2, r2))):
            if not rows:
                continue
            if md:
                say(title + ":")
            print_table(console, head, rows, fmt, title=None if md else title, numeric=True)
            if rows is r1:
                for note in replay_notes(block):
                    say(note)
    if r.unmatched:
        say(f"not compared: {'; '.join(r.unmatched)} (no level of the other run to set beside it)")


def _print_capacity(console: Console, cap: CapacityComparison, fmt: str, after_table: bool) -> None:
    """Both boxes' capacities within their SLOs: what each search says can be compared, the table, then one
    verdict line (none where the SLOs or axes differ)."""
    from ..compare.capacity import CAPACITY_LEGEND, capacity_table
    from ..console import print_table

    gap = "\n" if after_table or fmt == "markdown" else ""
    console.print(f"{gap}capacity within the SLO: A = {cap.a}, B = {cap.b}" + ("\n" if fmt == "markdown" else ""),
                  markup=False, highlight=False)
    for w in cap.warnings:
        console.print(f"warning: {w}", style="yellow", markup=False, highlight=False)
    head, rows = capacity_table(cap)
    print_table(console, head, rows, fmt)
    console.print("\n" if fmt == "markdown" else "", end="")  # Markdown: a line after a table would be its row
    console.print(CAPACITY_LEGEND, style="dim", markup=False, highlight=False)
    said = cap.verdict()
    if said is not None:
        console.print(said, markup=False, highlight=False)


def _print_sessions(console: Console, done: Compared, fmt: str) -> None:
    """Two agent-session runs: at each shared concurrency, TTFT per turn against context (warm and busted, both
    boxes), the levels' session time, and what each box's cache bought."""
    from ..compare.sessions import session_level_table, session_turn_table
    from ..console import print_table

    sc = done.sessions
    assert sc is not None
    for w in sc.warnings:
        console.print(f"warning: {w}", style="yellow", markup=False, highlight=False)
    busted = "; busted: a marker at the start of every turn, so no cache serves it" if sc.busted else ""
    console.print(f"agent sessions: A = {sc.a}, B = {sc.b}. TTFT p50 in seconds at each turn (turn 1 is the first); "
                  f"warm: the history re-sent for the prefix cache to serve{busted}. A/B: A's figure over B's (a time "
                  "below 1, or a rate above 1: A is faster).", markup=False, highlight=False)
    for note in sc.notes:
        console.print(note, markup=False, highlight=False)
    for block in sc.blocks:
        sessions = plural(block.concurrency, "session")
        console.print(f"\nconcurrency {block.concurrency} ({sessions} at once)", markup=False, highlight=False)
        gap = "\n" if fmt == "markdown" else ""  # two Markdown tables apart, not one
        head, rows = session_turn_table(block)
        print_table(console, head, rows, fmt, numeric=True)
        if len(rows) < len(block.turns):
            console.print(f"{len(rows)} of {len(block.turns)} turns shown; --json has every turn", markup=False,
                          highlight=False)
        console.print(gap, end="")
        head, rows = session_level_table(block)
        print_table(console, head, rows, fmt, numeric=True)
        console.print(gap, end="")
        for line in block.gains:
            console.print(f"the cache's gain on {line}", markup=False, highlight=False)
