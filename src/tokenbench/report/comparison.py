"""The report's comparison of runs, in the shape of the published write-ups: for each pair of runs that share
operating points, both sides' values, the ratio and its 95% interval, the winner per row (only where the interval
excludes 1), the crossovers, and the cost per million output tokens beside each output rate. The rows, ratios,
intervals and crossovers are ``compare.levels.compare``'s; the cost is ``cost.Pricing``'s: this module only arranges
them."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING

from .. import session_view
from ..compare.levels import METRICS, CompareRow, Comparison, compare
from ..pricing import Pricing
from ..results import RunResult
from .series import pricing
from .style import depth_label

if TYPE_CHECKING:
    from ..store import Store

#: The metrics whose value is an output rate: the rate a row's cost is priced at.
OUTPUT_RATES = {"Aggregate output", "Decode", "tg"}
#: The effective-serving line: how long this many agents asking for this many tokens each take.
AGENTS, TOKENS = 16, 200


@dataclass(slots=True)
class Pair:
    a: int  # places of the two runs in the report (their colours)
    b: int
    cmp: Comparison
    price_a: Pricing | None
    price_b: Pricing | None

    def groups(self) -> list[tuple[str, str, list[CompareRow]]]:
        """Rows by metric, in ``compare.levels.METRICS`` order: (metric, unit, rows along the workload axes)."""
        out = []
        for name, unit, _, _ in METRICS:
            rows = [r for r in self.cmp.rows if r.metric == name]
            if rows:
                out.append((name, unit, sorted(rows, key=lambda r: (r.test, r.input_len, r.depth, r.concurrency,
                                                                    r.cache == session_view.BUSTED))))
        return out

    def cost(self, row: CompareRow) -> tuple[float | None, float | None]:
        if row.metric not in OUTPUT_RATES:
            return None, None
        return (self.price_a.per_mtok(row.a) if self.price_a else None,
                self.price_b.per_mtok(row.b) if self.price_b else None)

    @property
    def priced(self) -> bool:
        return bool(self.price_a or self.price_b)


def point(row: CompareRow, prompts: int) -> str:
    """A row's operating point in words: "concurrency 4", "tg128 at depth 32K"."""
    if row.test == "serve":
        out = (f"rate {row.rate:g}/s" if row.rate else f"concurrency {row.concurrency}") + (
            f", {row.cache} cache" if row.cache else "")
        if row.depth:
            out += f" at depth {depth_label(row.depth)}"
        if prompts > 1 and row.input_len:
            out += f", ~{row.input_len:,}-token prompts"
        return out
    out = f"{row.test} at depth {depth_label(row.depth)}"
    return out + (f", concurrency {row.concurrency}" if row.concurrency and row.concurrency != 1 else "")


def pairs(runs: list[RunResult], price_per_hour: float | None = None, currency: str | None = None,
          store: Store | None = None) -> tuple[list[Pair], list[str]]:
    """Every pair of runs that share an operating point, and a line for each pair that shares none; ``store``:
    where the runs' requests are, for each ratio's interval (``compare.levels.compare``)."""
    out, apart = [], []
    for i, j in combinations(range(len(runs)), 2):
        why = session_view.mismatch(runs[i], runs[j])
        if why is not None:  # a session run beside a plain sweep: said, never a table of unlike numbers
            apart.append(why)
            continue
        c = compare(runs[i], runs[j], AGENTS, TOKENS, store)
        if c.rows:
            out.append(Pair(i, j, c, pricing(runs[i], price_per_hour, currency),
                            pricing(runs[j], price_per_hour, currency)))
        else:
            apart.append(f"{c.a} and {c.b} share no operating point (test, depth, concurrency, prompt length)")
    return out, apart
