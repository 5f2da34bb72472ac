"""How a level's figures are written in a table's cell: a number, a time in ms or s, a level's label (its rate or
concurrency, a session's cache mode), a count of agents."""

from __future__ import annotations

import math

from .layout import plural
from .levels import ServingLevel


def num(v: float | None, digits: int = 1) -> str:
    if v is None:
        return "—"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def money(v: float | None) -> str:
    """A price: two decimals from 1 up; below, two significant digits written out (0.000062, never 6.2e-05), so
    0.011 and 0.0087 are not both "0.01"."""
    if v is None:
        return "—"
    if v >= 1 or v == 0:
        return f"{v:,.2f}"
    return f"{float(f'{v:.2g}'):.{max(2, 1 - math.floor(math.log10(abs(v))))}f}"


def ms(v: float | None) -> str:
    if v is None:
        return "—"
    if v >= 10_000:
        return f"{v / 1000:.1f} s"
    if v >= 100:
        return f"{v:,.0f} ms"
    return f"{v:.1f} ms"


def level_label(s: ServingLevel) -> str:
    """A level in a table's first column: its rate or concurrency, and an agent session's cache mode ("4 warm":
    a session run measures each concurrency twice)."""
    cache = f" {s.session.cache}" if s.session is not None else ""
    if s.replay is not None and not s.concurrency:
        # a replay at the recorded times (its heading says how fast): no lanes, and no rate of requests
        return "open loop"
    if s.rate is not None:
        return f"{s.rate:g}/s{cache}"
    return f"{s.concurrency}{cache}" if s.concurrency is not None else "trace"  # a trace sent all at once


def agents_text(n: int | None) -> str:
    """"1 agent", "8 agents"."""
    return plural(n, "agent")
