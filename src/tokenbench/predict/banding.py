"""A predicted figure's band as printed, and the note under a table that says where each band comes from.

A band's fast end never passes the physical limit the roofline computes for the figure: a rate's fast end is held
at its ceiling, a time's at its floor (the time at efficiency 1), and a band of 100% or more reaches down to zero, not
below (``Span``). Every cell records the band it printed in a ``BandLog``, and the note under the table reads that log
(``band_note``): the note's figures are the cells' own."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from .bands import WIDE_BAND_PCT, Band
from .calibration import Calibration
from .setup import Setup

#: From this band (percent) on, "±" would reach below zero, which no measurement can: band_span prints "≤Nx".
TIMES_FROM_PCT = 100.0
#: The metrics that are rates (tokens per second): their fast end is above the estimate; the others are times.
RATES = frozenset({"prefill", "decode", "throughput"})
#: What marks a session table's cell whose band's fast end is held at its limit (the row's label holds the band).
HELD_MARK = "*"


def band_span(pct: float) -> str:
    """A band's reach as printed: ±X%; from TIMES_FROM_PCT on "≤Nx" (up to N times the estimate)."""
    return f"±{pct:.0f}%" if pct < TIMES_FROM_PCT else f"≤{1 + pct / 100:.1f}x"


def band_text(b: Band) -> str:
    """A band as printed beside its estimate (band_span), flagged "(wide)" past WIDE_BAND_PCT."""
    return band_span(b.pct) + (" (wide)" if b.wide else "")


def _floored(pct: float) -> str:
    """A held end's reach rounded toward the estimate: whole percent, and under 1% its first significant figure
    (an estimate 0.3% under its ceiling reads +0.3%, not +0%)."""
    if pct >= 1 or pct <= 0:
        return f"{math.floor(max(pct, 0)):.0f}"
    unit = 10 ** math.floor(math.log10(pct))
    return f"{math.floor(pct / unit) * unit:.{-math.floor(math.log10(pct))}f}"


@dataclass(frozen=True, slots=True)
class Span:
    """A band of ``pct`` around an estimate, in percent of it: how far it reaches below (``low``) and above
    (``high``) once its fast end is held at the physical ``limit`` (``held``: the band would have passed it)."""

    pct: float
    low: float
    high: float
    held: bool = False
    rate: bool = True
    limit: float | None = None

    def text(self) -> str:
        """±X% or ≤Nx as band_span; an end held at the limit makes it asymmetric: +H/−L% (measured between
        p·(1 − L) and p·(1 + H)), or ≤Nx with N the ceiling over the estimate."""
        if not self.held:
            return band_span(self.pct)
        # the held end rounded toward the estimate, so the printed reach never passes the limit either
        if self.pct >= TIMES_FROM_PCT:  # a rate's N held at its ceiling; a time's reaches down to its floor
            return f"≤{math.floor(10 + self.high / 10) / 10:.1f}x" if self.rate else band_span(self.pct)
        if self.rate:
            return f"+{_floored(self.high)}/−{self.low:.0f}%"
        return f"+{self.high:.0f}/−{_floored(self.low)}%"

    def to_dict(self) -> dict[str, Any]:
        return {"pct": self.pct, "low_pct": self.low, "high_pct": self.high, "held": self.held,
                "limit": self.limit, "fast_end": "ceiling" if self.rate else "floor"}


def span(pct: float, estimate: float | None, limit: float | None, rate: bool) -> Span:
    """The band ``pct`` around ``estimate``, its fast end held at ``limit`` (a rate's ceiling, a time's floor; None:
    no limit known) and its low end at zero."""
    low, high = min(pct, 100.0), pct
    if not estimate or limit is None or estimate <= 0:
        return Span(pct, low, high, rate=rate, limit=limit)
    if rate:
        room = max(limit / estimate - 1, 0.0) * 100
        return Span(pct, low, min(high, room), room < pct, rate, limit)
    room = max(1 - limit / estimate, 0.0) * 100
    return Span(pct, min(low, room), high, room < pct, rate, limit)


@dataclass(slots=True)
class Printed:
    """One band as a cell printed it: its metric, the band, its span there, and the concurrency whose kind of rows
    it was taken from."""

    metric: str
    band: Band
    span: Span
    concurrency: int = 1


@dataclass(slots=True)
class BandLog:
    """Every band the cells of a prediction printed: what the note under it and its JSON say."""

    printed: list[Printed] = field(default_factory=list)
    missing: set[str] = field(default_factory=set)  # metrics a cell had no band for
    marked: bool = False  # a cell was marked HELD_MARK: its band is its row's, its fast end held at its limit

    def add(self, metric: str, b: Band | None, sp: Span | None = None, concurrency: int = 1) -> None:
        if b is None:
            self.missing.add(metric)
        else:
            self.printed.append(Printed(metric, b, sp or Span(b.pct, min(b.pct, 100.0), b.pct), concurrency))

    def of(self, metric: str) -> list[Printed]:
        return [p for p in self.printed if p.metric == metric]

    def widest(self, metric: str) -> Band | None:
        return max((p.band for p in self.of(metric)), key=lambda b: b.pct, default=None)

    def band_pct(self, metrics: list[str]) -> dict[str, float | None]:
        """Each metric's widest band as printed (None: no cell had one)."""
        return {m: (b.pct if (b := self.widest(m)) else None) for m in metrics}

    def held(self) -> list[dict[str, Any]]:
        """The cells whose band's fast end was held at its limit, each as its metric and span."""
        return [{"metric": p.metric, **p.span.to_dict()} for p in self.printed if p.span.held]


def estimate_cell(s: Setup, cal: Calibration, metric: str, text: str, context: int, concurrency: int = 1,
                  estimate: float | None = None, limit: float | None = None, log: BandLog | None = None) -> str:
    """A calibrated estimate with its cross-validated band, widened for what this operating point (its
    ``context`` tokens, its ``concurrency``) reaches beyond the rows, its fast end held at ``limit`` (a rate's
    ceiling, a time's floor); UNCALIBRATED where no fit stands behind it. ``log`` records the band printed."""
    if not s.calibrated:
        return "UNCALIBRATED"
    b = s.band(cal, metric, context, concurrency)
    if log is not None:
        log.add(metric, b, span(b.pct, estimate, limit, metric in RATES) if b else None, concurrency)
    if b is None:
        return f"{text} (no CV band)"
    sp = span(b.pct, estimate, limit, metric in RATES)
    return f"{text} {sp.text()}" + (" (wide)" if b.wide else "")


def _range(printed: list[Printed]) -> str:
    """The bands a metric's cells printed, from the narrowest to the widest: "±44%", "±44% to ±46%"."""
    lo = min(p.band.pct for p in printed)
    hi = max(p.band.pct for p in printed)
    return band_span(hi) if band_span(lo) == band_span(hi) else f"{band_span(lo)} to {band_span(hi)}"


def source_text(s: Setup, cal: Calibration, log: BandLog, metrics: list[str]) -> str:
    """Whose rows each metric's band comes from, in one sentence that says first what a band is, each band as its
    cells printed it: the prediction's own kind's, or those it borrows (a borrowed band states at least 80%: the
    widest at hand, widened further)."""
    groups: dict[tuple[str, bool], list[str]] = {}
    for m in metrics:
        printed = log.of(m)
        if not printed:
            continue
        top = max(printed, key=lambda p: p.band.pct)
        widest = top.band
        found = cal.band_source(s.kind_of(top.concurrency), m) if cal.kind_bands else None
        whose, b, borrowed = found or (s.backend, cal.bands.get(s.backend, {}).get(m), False)
        shown = _range(printed)
        held_out = f"from {band_span(b.pct)}, " if b is not None and band_span(b.pct) != shown else ""
        groups.setdefault((whose, borrowed or widest.borrowed), []).append(
            f"{m} {shown} ({held_out}n={b.n if b is not None else widest.n})")
    said = [f"{whose}'s {', '.join(ms)}" + (", borrowed (at least 80%)" if borrowed else "")
            for (whose, borrowed), ms in groups.items()]
    return "bands (each source's rows predicted by a fit on the others: 80% measured within): " + "; ".join(said)


def _numbers_as_numbers(text: str) -> list[tuple[int, str]]:
    """A reason's sort key that reads its numbers as numbers ("concurrency 8" before "concurrency 16", which a
    plain sort put after 40), thousands separators and all."""
    return [(int(part.replace(",", "")), "") if part[:1].isdigit() else (-1, part)
            for part in re.split(r"(\d[\d,]*)", text) if part]


def band_note(s: Setup, cal: Calibration, metrics: list[str], log: BandLog) -> str:
    """The note under a prediction's table: where each band its cells printed (``log``) comes from, what widened
    it, which are wide, which had their fast end held at the physical limit, and which metrics had none."""
    if not s.calibrated:
        return (f"UNCALIBRATED: no measurements of {s.backend} stand behind a fitted estimate; only the physical "
                "ceiling is shown")
    banded = [m for m in metrics if log.of(m)]
    parts = []
    if banded:
        parts.append(source_text(s, cal, log, banded))
        wider = sorted({why for p in log.printed for why in p.band.widened}, key=_numbers_as_numbers)
        if wider:  # each reason on a line of its own: joined by semicolons, they read as one 600-character blur
            parts.append("widened, where an estimate reaches beyond the rows, up to "
                         + ", ".join(f"{m} {band_span(b.pct)}" for m in banded if (b := log.widest(m)))
                         + " for what no row measured:" + "".join(f"\n{REASON}{why}" for why in wider))
    wide = [m for m in banded if (b := log.widest(m)) and b.wide]
    if wide:
        parts.append(f"flagged wide (over ±{WIDE_BAND_PCT:.0f}%, more than half the estimate): " + ", ".join(wide)
                     + ": an order of magnitude, not a value"
                     + ("; ≤Nx: up to N times the estimate" if any(p.band.pct >= TIMES_FROM_PCT for p in log.printed)
                        else ""))
    held = list(dict.fromkeys(p.metric for p in log.printed if p.span.held))
    if held:
        parts.append("fast end held at the physical limit beside it (a rate's ceiling, a time's floor), which no "
                     "measurement passes: " + ", ".join(held)
                     + (f" ({HELD_MARK}: the turns where their row's band would pass it)" if log.marked else ""))
    missing = [m for m in metrics if m not in banded]
    if missing:
        parts.append("too few rows held out for a band: " + ", ".join(missing))
    if s.spec is not None:
        parts.append("no published row used speculative decoding: the decode, TPOT and throughput bands widen by "
                     "its gain, which the acceptance rate you gave decides")
    return "\n".join(parts)


#: How a reason a band was widened begins its line in ``band_note``.
REASON = "  - "


def one_line(note: str) -> str:
    """``band_note`` in one line, for a table's cell or a Markdown paragraph: its lines joined by semicolons,
    the reasons after their colon."""
    out: list[str] = []
    for line in note.splitlines():
        if line.startswith(REASON) and out:
            out[-1] += ("" if out[-1].endswith(":") else ";") + " " + line[len(REASON):]
        else:
            out.append(line)
    return "; ".join(out)
