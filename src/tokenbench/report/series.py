"""The plotted data of a set of runs, one object all exporters read."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ..cost import Pricing
from ..metrics import LevelSummary
from ..results import RunResult
from . import style


@dataclass(slots=True)
class Line:
    name: str
    xs: list[float]
    ys: list[float]
    predicted: bool = False
    run: int = 0  # the run's place in the report: its colour in every plot
    pct: str | None = None  # "p50" or "p99": one colour, two line styles


@dataclass(slots=True)
class Plot:
    id: str
    title: str
    xlabel: str
    ylabel: str
    lines: list[Line] = field(default_factory=list)
    logx: bool = False
    axis: str = "concurrency"  # or "depth": what x is, for its ticks and the hover text
    unit: str = ""  # the y values' unit, shown on hover

    @property
    def points(self) -> int:
        return sum(len(line.xs) for line in self.lines)

    @property
    def measured_points(self) -> int:
        return sum(len(line.xs) for line in self.lines if not line.predicted)

    @property
    def logy(self) -> bool:
        return style.wide(y for line in self.lines for y in line.ys)

    def drawn(self) -> list[Line]:
        """The lines in drawing order: PREDICTED first, so a measured point is never hidden under one."""
        return sorted(self.lines, key=lambda line: not line.predicted)

    def ticks(self) -> tuple[list[float], list[str]]:
        xs = sorted({x for line in self.lines for x in line.xs})
        if self.axis == "depth":
            return xs, [style.depth_label(x) for x in xs]
        return xs, [f"{x:g}" for x in xs]

    def x_text(self, x: float) -> str:
        return f"depth {style.depth_label(x)}" if self.axis == "depth" else f"concurrency {x:g}"


def is_predicted(r: RunResult) -> bool:
    return r.predicted_mark is not None


def run_name(r: RunResult) -> str:
    base = str(r.manifest.label or r.run_id)
    return base + (f" ({r.predicted_mark})" if is_predicted(r) else "")


def pricing(r: RunResult, price_per_hour: float | None = None, currency: str | None = None) -> Pricing | None:
    """A run's rental price as the cost command reads it: ``price_per_hour`` given for the report, else the
    run's own; None where neither is known."""
    return Pricing.of_run(r.manifest, price_per_hour, currency)


def _serve(r: RunResult) -> list[LevelSummary]:
    lv = [o.summary for o in r.outcomes if (o.summary.test or "serve") == "serve" and o.summary.concurrency]
    by: dict[int, LevelSummary] = {}
    for s in lv:  # one point per concurrency: the longest prompt (the run's main workload)
        c = s.concurrency or 0
        cur = by.get(c)
        if cur is None or (s.input_tokens_mean or 0) > (cur.input_tokens_mean or 0):
            by[c] = s
    return [by[k] for k in sorted(by)]


def _line(name: str, pts: list[tuple[float, float]], pred: bool, run: int, pct: str | None = None) -> Line:
    pts = [(x, y) for x, y in pts if math.isfinite(x) and math.isfinite(y)]
    return Line(name, [x for x, _ in pts], [y for _, y in pts], pred, run, pct)


def _add(plot: Plot, label: str, pts: list[tuple[float, float]], r: RunResult, i: int, pct: str | None = None) -> None:
    if pts:
        plot.lines.append(_line(label, pts, is_predicted(r), i, pct))


def _points(levels: list[LevelSummary], value: Callable[[LevelSummary], float | None]) -> list[tuple[float, float]]:
    """(concurrency, value) of the levels that have the value."""
    return [(float(s.concurrency or 0), v) for s in levels if (v := value(s))]


def _serve_lines(plots: dict[str, Plot], r: RunResult, i: int, price: Pricing | None, one: str | None) -> None:
    """A run's serving levels: throughput, per agent, cost, TTFT and TPOT against concurrency."""
    name, serve = run_name(r), _serve(r)
    sv = [s for s in serve if s.output_throughput_tps]
    _add(plots["aggregate"], name, _points(sv, lambda s: s.output_throughput_tps), r, i)
    _add(plots["per_agent"], name, _points(sv, lambda s: s.per_agent_tps), r, i)
    if price:
        _add(plots["cost"], name if one else f"{name} ({price.currency})",
             _points(sv, lambda s: price.per_mtok(s.output_throughput_tps)), r, i)
    for pct in ("p50", "p99"):
        _add(plots["ttft"], f"{name} {pct}", _points(serve, lambda s: getattr(s.ttft_ms, pct)), r, i, pct)
    _add(plots["tpot"], name, _points(serve, lambda s: s.tpot_ms.p50), r, i)


def _depth_lines(plots: dict[str, Plot], r: RunResult, i: int) -> None:
    """A run's depth levels: prefill and decode against the tokens in cache, one line per test."""
    name = run_name(r)
    for key, attr in (("prefill_depth", "pp_tps"), ("decode_depth", "tg_tps")):
        by_test: dict[str, list[tuple[float, float]]] = {}
        for s in (o.summary for o in r.outcomes):
            if getattr(s, attr):
                by_test.setdefault(s.test or "", []).append((float(s.depth or 0), getattr(s, attr)))
        for test, pts in by_test.items():
            _add(plots[key], name if len(by_test) == 1 else f"{name} {test}", sorted(pts), r, i)


def build(runs: list[RunResult], price_per_hour: float | None = None, currency: str | None = None) -> list[Plot]:
    prices = [pricing(r, price_per_hour, currency) for r in runs]
    currencies = {p.currency for p in prices if p}
    one = next(iter(currencies)) if len(currencies) == 1 else None
    conc = "concurrent agents"
    plots = {
        "aggregate": Plot("aggregate", "Aggregate output throughput vs concurrency", conc, "output tok/s", logx=True,
                          unit="tok/s"),
        "per_agent": Plot("per_agent", "Per-agent throughput vs concurrency", conc, "tok/s per agent", logx=True,
                          unit="tok/s per agent"),
        "ttft": Plot("ttft", "TTFT p50 (solid) and p99 (dotted) vs concurrency", conc, "TTFT (ms)", logx=True, unit="ms"),
        "tpot": Plot("tpot", "TPOT (median) vs concurrency", conc, "TPOT (ms per output token)", logx=True,
                     unit="ms per output token"),
        "prefill_depth": Plot("prefill_depth", "Prefill vs context depth", "depth (tokens in cache)",
                              "prompt tok/s", axis="depth", unit="prompt tok/s"),
        "decode_depth": Plot("decode_depth", "Decode vs context depth", "depth (tokens in cache)",
                             "generated tok/s", axis="depth", unit="generated tok/s"),
        "cost": Plot("cost", "Cost per million output tokens vs concurrency", conc,
                     f"{one or 'cost'} per million output tokens", logx=True,
                     unit=f"{one}/M output tokens" if one else "per M output tokens"),
    }
    for i, r in enumerate(runs):
        _serve_lines(plots, r, i, prices[i], one)
        _depth_lines(plots, r, i)
    return [p for p in plots.values() if p.points]
