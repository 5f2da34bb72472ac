"""A source's readings over an interval -> its mean watts and joules, and the share of a load above idle.

Energy counters give the interval's joules exactly: the sum of each channel's differences between consecutive
readings, a counter that went past its range counted round its wrap. Instantaneous watts are integrated by the
trapezoid rule over the readings. Either way the figure covers the span from the first to the last good reading;
when a source failed within the interval, or its readings do not reach its ends, the figure is marked partial and
its note says why in one line. Fewer than two good readings give no figure at all."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .base import Reading

COUNTER, SAMPLED, NONE = "counter", "sampled", "none"


@dataclass(frozen=True, slots=True)
class Interval:
    """One source's figure over [start, stop] (the reading host's monotonic seconds). ``covered_s``: the span its
    readings cover; ``joules`` is over that span and ``mean_w`` is joules / covered_s. ``partial``: the source
    failed within the interval or does not cover it, ``note`` says why."""

    source: str
    measures: str
    start: float
    stop: float
    joules: float | None
    mean_w: float | None
    method: str
    samples: int
    covered_s: float
    partial: bool
    note: str = ""

    @property
    def seconds(self) -> float:
        return self.stop - self.start

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "measures": self.measures, "start": self.start, "stop": self.stop,
                "joules": self.joules, "mean_w": self.mean_w, "method": self.method, "samples": self.samples,
                "covered_s": self.covered_s, "partial": self.partial, "note": self.note}

    @classmethod
    def from_dict(cls, d: Any) -> Interval:
        """An interval as ``to_dict`` wrote it; anything else is a ValueError."""
        if not isinstance(d, dict):
            raise ValueError("an interval is an object")
        nums = ("start", "stop", "covered_s")
        if not all(_num(d.get(k)) for k in nums) or not all(d.get(k) is None or _num(d.get(k))
                                                            for k in ("joules", "mean_w")):
            raise ValueError("an interval's times and figures are numbers")
        if not all(isinstance(d.get(k), str) for k in ("source", "measures", "method", "note")) or \
                not isinstance(d.get("partial"), bool) or not isinstance(d.get("samples"), int):
            raise ValueError("an interval names its source, method and note, and says whether it is partial")
        return cls(d["source"], d["measures"], float(d["start"]), float(d["stop"]),
                   None if d["joules"] is None else float(d["joules"]),
                   None if d["mean_w"] is None else float(d["mean_w"]), d["method"], d["samples"],
                   float(d["covered_s"]), d["partial"], d["note"])

    def telemetry(self, output_tokens: int, seconds: float) -> dict[str, Any]:
        """The level's power keys as telemetry names them (``Telemetry``): mean watts, joules, joules per output
        token and output tokens per second per watt; "not available" without a figure."""
        if self.mean_w is None or self.joules is None:
            return {"gpu_power": "not available"}
        out: dict[str, Any] = {"gpu_power_w_mean": self.mean_w, "energy_j": self.joules}
        if output_tokens:
            # the mean draw over the level's own seconds, as tok/s per W reads it: the interval can run past the
            # level (--workers: their start and drain) or stop short of it (a source gone), and per token they
            # are then each other's inverse
            out["j_per_output_token"] = (self.mean_w * seconds if seconds else self.joules) / output_tokens
            out["output_tokens_per_watt"] = (output_tokens / seconds) / self.mean_w if seconds and self.mean_w \
                else None
        return out


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _counter_joules(good: Sequence[Reading]) -> tuple[float | None, str]:
    """The joules of the channels every good reading counts, and why not all could be counted."""
    channels = set(good[0].joules)
    for r in good[1:]:
        channels &= set(r.joules)
    if not channels:
        return None, ""
    total, why = 0.0, ""
    for ch in sorted(channels):
        for a, b in zip(good, good[1:]):
            d = b.joules[ch] - a.joules[ch]
            wrap = b.wraps.get(ch) or a.wraps.get(ch)
            if d < 0 and wrap:
                d += wrap
            if d < 0:  # a counter that went back with no known range: a reset (driver reloaded), not energy
                why = why or f"{ch}'s energy counter went back at {b.t - good[0].t:.1f} s (reset?)"
                continue
            total += d
    return total, why


def _trapezoid(good: Sequence[Reading]) -> float | None:
    pts = [(r.t, r.total_w) for r in good if r.total_w is not None]
    if len(pts) < 2:
        return None
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(pts, pts[1:]))


def _figure(good: Sequence[Reading]) -> tuple[float | None, str, str]:
    """(joules, method, why not whole) of good readings: the counters where every reading has them and none went
    back unexplained, else the watts integrated."""
    joules, why = _counter_joules(good)
    if joules is not None and not why:
        return joules, COUNTER, ""
    sampled = _trapezoid(good)
    if sampled is not None:
        return sampled, SAMPLED, ""
    return joules, COUNTER if joules is not None else NONE, why


def _window(readings: Sequence[Reading], start: float | None, stop: float | None
            ) -> tuple[list[Reading], float, float]:
    """The readings within [start, stop] in time order, and the interval's ends (the readings' own by default)."""
    rs = sorted((r for r in readings if (start is None or r.t >= start) and (stop is None or r.t <= stop)),
                key=lambda r: r.t)
    lo = start if start is not None else (rs[0].t if rs else 0.0)
    hi = stop if stop is not None else (rs[-1].t if rs else lo)
    return rs, lo, hi


def _note(name: str, why: str, first_error: str, counted: bool, short: bool, covered: float, span: float) -> str:
    """One line: why the figure is not whole, the first failed read, and how much of the interval it covers."""
    notes = [why] if why else []
    if first_error:
        notes.append(first_error + (" (the counters still cover the interval)" if counted and not short else ""))
    if short:
        notes.append(f"{name}'s readings cover {covered:.1f} s of the {span:.1f} s interval")
    return "; ".join(notes)


def integrate(readings: Sequence[Reading], start: float | None = None, stop: float | None = None,
              source: str | None = None, measures: str = "", slack_s: float = 1.0) -> Interval:
    """The figure of one source's ``readings`` over [start, stop] (default: the readings' own span). Readings
    outside it are ignored. ``slack_s``: how far the first and last good readings may sit inside the ends before
    the figure is partial (the sampling interval's worth)."""
    rs, lo, hi = _window(readings, start, stop)
    name = source or (rs[0].source if rs else "")
    good = [r for r in rs if r.ok]
    first_error = next((r.error or "" for r in rs if not r.ok), "")
    if len(good) < 2:
        why = first_error or f"{name}: fewer than two readings in the interval"
        return Interval(name, measures, lo, hi, None, None, NONE, len(good), 0.0, True, why)
    covered = good[-1].t - good[0].t
    joules, method, why = _figure(good)
    if joules is None:
        return Interval(name, measures, lo, hi, None, None, NONE, len(good), covered, True,
                        why or f"{name}: its readings hold neither a counter nor watts throughout")
    short = good[0].t - lo > slack_s or hi - good[-1].t > slack_s
    partial = bool(short or why or (first_error and method == SAMPLED))
    note = _note(name, why, first_error, method == COUNTER, short, covered, hi - lo)
    return Interval(name, measures, lo, hi, joules, joules / covered if covered > 0 else None, method, len(good),
                    covered, partial, note)


@dataclass(frozen=True, slots=True)
class AboveIdle:
    """A load's draw against the same box idle: ``share`` of the load's watts above idle (0..1)."""

    idle_w: float
    load_w: float
    above_w: float
    share: float
    joules_above: float

    def to_dict(self) -> dict[str, float]:
        return {"idle_w": self.idle_w, "load_w": self.load_w, "above_idle_w": self.above_w,
                "above_idle_share": self.share, "above_idle_j": self.joules_above}


def above_idle(load: Interval, idle: Interval) -> AboveIdle | None:
    """The load's share above the idle box, from the same source; None without both figures."""
    if load.mean_w is None or idle.mean_w is None or load.joules is None or load.mean_w <= 0 \
            or load.source != idle.source:
        return None
    above = load.mean_w - idle.mean_w
    return AboveIdle(idle.mean_w, load.mean_w, above, max(0.0, above) / load.mean_w,
                     load.joules - idle.mean_w * load.covered_s)
