"""How a report draws: one colour per run in every plot, line styles for p50/p99 and for PREDICTED, the axis
scales and tick labels. The interactive plots (``figures.py``) and the PNGs (``plots.py``) both read these,
so a run looks the same on the page and on a slide."""

from __future__ import annotations

import math
from collections.abc import Iterable

#: Okabe & Ito's colour-blind-safe palette (yellow dropped: unreadable on white), then two more.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#8C6D31")

#: A y axis turns logarithmic when its largest value is this many times its smallest: one series at 200 ms
#: must not flatten another at 10 ms into the floor.
WIDE = 10.0

#: PNG export, on the page's camera button and by ``--png``: a full-HD slide.
SLIDE_PX = (1920, 1080)


def colour(run: int) -> str:
    return PALETTE[run % len(PALETTE)]


def dash(predicted: bool, secondary: bool) -> str:
    """Plotly's dash name: measured solid (a tail percentile, p90 or p99, dotted), PREDICTED dashed (its tail
    dash-dotted)."""
    if predicted:
        return "dashdot" if secondary else "dash"
    return "dot" if secondary else "solid"


#: The same styles for Matplotlib.
MPL_DASH = {"solid": "-", "dot": ":", "dash": "--", "dashdot": "-."}


def marker(predicted: bool, cache: str | None, run: int = 0) -> str:
    """Plotly's marker symbol: a circle, a diamond for an agent session's busted level (no prefix cache, the
    baseline), open where PREDICTED. The line style stays free for measured/PREDICTED and the percentiles. Past
    the palette's colours, each turn around it takes the next shape (a square, a triangle, a cross), so a ninth
    run is told from the first by its marks."""
    shape = "diamond" if cache == "busted" else CYCLE_SHAPES[run // len(PALETTE) % len(CYCLE_SHAPES)]
    return shape if not predicted else f"{shape}-open"


#: The marker of a run, by its turn around the palette.
CYCLE_SHAPES = ("circle", "square", "triangle-up", "cross")
MPL_MARKER = {"circle": "o", "diamond": "D", "square": "s", "triangle-up": "^", "cross": "P"}


def wide(values: Iterable[float]) -> bool:
    v = [x for x in values if x is not None]
    return bool(v) and min(v) > 0 and max(v) / min(v) > WIDE


def log_ticks(values: Iterable[float]) -> list[float]:
    """1-2-5 ticks covering the values on a log axis: readable where every decade labels 2 through 9 crowds."""
    v = [x for x in values if x and x > 0]
    if not v:
        return []
    lo, hi = min(v), max(v)
    out: list[float] = []
    k = math.floor(math.log10(lo))
    while 10.0 ** k <= hi * 5:
        out += [m * 10.0 ** k for m in (1, 2, 5) if lo / 2 <= m * 10.0 ** k <= hi * 2]
        k += 1
    return out


def linear_ticks(values: Iterable[float], most: int = 8) -> list[float]:
    """1-2-5 steps covering the values on a linear axis, at most about ``most`` ticks."""
    v = [x for x in values if x is not None and math.isfinite(x)]
    if not v:
        return []
    lo, hi = min(v), max(v)
    span = (hi - lo) or abs(hi) or 1.0
    raw = span / most
    k = 10.0 ** math.floor(math.log10(raw))
    step = next(m * k for m in (1, 2, 5, 10) if m * k >= raw * (1 - 1e-9))
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(n * step, 12) for n in range(first, last + 1)]


def depth_label(d: float) -> str:
    """Depths as published tables write them: 8192 -> 8K, 65536 -> 64K, 512 -> 512."""
    n = int(d)
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}K"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return f"{n:,}"


def number(v: float) -> str:
    """Three significant figures or more, with thousands separators: 684, 56.9, 0.73, 12,345."""
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"
