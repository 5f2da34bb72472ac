"""A replay level's trees one by one (``show RUN --trees``): each session tree the level started, whether it
finished, failed or was cut, its time from first send to last byte, its calls, its subagents and its TTFT p50.

Read from the level's stored calls (each carries its tree in ``session``, a subagent's parent in ``parent``) and
its ``ReplayStats``, so a run stored before this view shows it too. A tree is numbered in the order the level
started it (closed loop: the trace's order); the records keep no trajectory id. Which answered trees the level's
end cut is in ``ReplayStats.cut_trees``. A level stored before it says only how many (``trees_finished``): a tree
that ended before the level's last send was not cut; one still running then was, where as many were running as
were cut; otherwise it is said as "cut?"."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from .grace import CUT_KINDS
from .cells import ms
from .records import RequestRecord
from .replay_stats import NS_PER_MS, NS_PER_S, ReplayStats, by_tree, first_own_call
from .replay_table import seconds

FINISHED, FAILED, CUT, UNSAID = "finished", "failed", "cut", "cut?"


@dataclass(slots=True)
class TreeRow:
    """One tree of a replay level, its subagents' calls in it."""

    tree: int  # 1: the first tree the level started
    status: str  # finished | failed | cut | cut? (cut or finished: the records do not say)
    first_call: int  # the first call of its own it sent, 1 the trajectory's first (a lane's first tree starts later)
    calls: int  # measured calls, its subagents' included
    subagents: int
    time_s: float  # its first send to its last byte, its pauses and subagents included
    ttft_ms_p50: float | None  # over its calls that answered

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ended(rs: list[RequestRecord]) -> str | None:
    """A tree's end where its calls say it: cut by an interrupt or the level's end, failed; None where every call
    answered."""
    if any(r.error_kind in CUT_KINDS for r in rs):
        return CUT
    return FAILED if any(not r.ok for r in rs) else None


def _row(n: int, root: int, rs: list[RequestRecord], status: str) -> TreeRow:
    ttfts = [r.ttft_ns / NS_PER_MS for r in rs if r.ok and r.ttft_ns is not None]
    return TreeRow(n, status, (first_own_call(root, rs) or 0) + 1, len(rs),
                   len({r.session for r in rs if r.parent is not None}),
                   (max(r.end_ns or r.sent_ns for r in rs) - min(r.sent_ns for r in rs)) / NS_PER_S,
                   statistics.median(ttfts) if ttfts else None)


def tree_rows(records: list[RequestRecord], stats: ReplayStats | None) -> list[TreeRow]:
    """The level's trees in the order it started them, from its stored calls; ``stats``: the level's replay view,
    which says which trees its end cut (or, stored before it did, how many it finished)."""
    calls = [r for r in records if r.phase == "measured" and r.session is not None]
    trees = sorted(by_tree(calls).items())
    if not trees:
        return []
    status = {k: _ended(rs) for k, rs in trees}
    answered = [k for k, _ in trees if status[k] is None]
    if stats is not None and stats.cut_trees is not None:
        status.update({k: CUT if k in stats.cut_trees else FINISHED for k in answered})
    else:
        status.update(_guessed(trees, answered, stats, max(r.sent_ns for r in calls)))
    return [_row(i + 1, k, rs, status[k] or FINISHED) for i, (k, rs) in enumerate(trees)]


def _guessed(trees: list[tuple[int, list[RequestRecord]]], answered: list[int], stats: ReplayStats | None,
             last_send: int) -> dict[int, str]:
    """A level stored without its cut trees: those running at its last send were cut where as many were running as
    were cut; otherwise it is not known which."""
    cut = len(answered) - stats.trees_finished if stats is not None else 0
    running = {k for k, rs in trees if k in answered and max(r.end_ns or 0 for r in rs) >= last_send}
    return {k: FINISHED if cut <= 0 or k not in running else CUT if len(running) == cut else UNSAID
            for k in answered}


def tree_table(rows: list[TreeRow]) -> tuple[list[str], list[list[str]]]:
    """The trees as a table; the first-call column only where a tree started past its first call."""
    header = ["Tree", "Status", "Time", "Calls", "Subagents", "TTFT p50", "From call"]
    cells = [[str(t.tree), t.status, seconds(t.time_s), str(t.calls), str(t.subagents), ms(t.ttft_ms_p50),
              str(t.first_call)] for t in rows]
    if all(t.first_call == 1 for t in rows):
        header, cells = header[:-1], [c[:-1] for c in cells]
    return header, cells


def tree_notes(rows: list[TreeRow], stats: ReplayStats | None) -> list[str]:
    """What the table cannot say by itself: why a tree starts past its first call, and trees cut without the
    records saying which."""
    out = []
    if any(t.first_call > 1 for t in rows):
        out.append("From call: a lane's first tree starts at a random call of its trajectory (the calls before it "
                   "are not sent)")
    unsaid = sum(t.status == UNSAID for t in rows)
    if unsaid and stats is not None:
        cut = sum(t.status != FAILED for t in rows) - stats.trees_finished - sum(t.status == CUT for t in rows)
        out.append(f"cut?: {cut} of these {unsaid} trees, running when the level stopped sending, were cut by its "
                   "end (--requests, --duration); the stored calls do not say which")
    return out
