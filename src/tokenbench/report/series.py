"""The plotted data of a set of runs, one object all exporters read."""

from __future__ import annotations

import math
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
    return r.manifest.get("provenance") == "predicted" or bool(r.manifest.get("predicted"))


def run_name(r: RunResult) -> str:
    base = str(r.manifest.get("label") or r.run_id)
    return base + (" (PREDICTED)" if is_predicted(r) else "")


def pricing(r: RunResult, price_per_hour: float | None = None, currency: str | None = None) -> Pricing | None:
    """A run's rental price as the cost command reads it: ``price_per_hour`` given for the report, else the
    run's own; None where neither is known."""
    price = price_per_hour if price_per_hour is not None else r.manifest.get("price_per_hour")
    if not price:
        return None
    return Pricing(currency=str(currency or r.manifest.get("currency") or "USD"), price_per_hour=float(price))


def output_rate(s: LevelSummary) -> float | None:
    """The output tokens per second a level sustains, the rate its cost is priced at (as in ``cost``)."""
    return s.output_throughput_tps or s.decode_tps or s.tg_tps or None


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
        name, pred = run_name(r), is_predicted(r)
        serve = _serve(r)
        sv = [s for s in serve if s.output_throughput_tps]
        if sv:
            plots["aggregate"].lines.append(_line(name, [(float(s.concurrency or 0), s.output_throughput_tps)
                                                         for s in sv], pred, i))
            pa = [(float(s.concurrency or 0), s.per_agent_tps) for s in sv if s.per_agent_tps]
            if pa:
                plots["per_agent"].lines.append(_line(name, pa, pred, i))
            p = prices[i]
            if p:
                cs = [(float(s.concurrency or 0), p.per_mtok(s.output_throughput_tps)) for s in sv]
                label = name if one else f"{name} ({p.currency})"
                plots["cost"].lines.append(_line(label, [(x, y) for x, y in cs if y], pred, i))
        for pct in ("p50", "p99"):
            pts = [(float(s.concurrency or 0), getattr(s.ttft_ms, pct)) for s in serve if getattr(s.ttft_ms, pct)]
            if pts:
                plots["ttft"].lines.append(_line(f"{name} {pct}", pts, pred, i, pct))
        pts = [(float(s.concurrency or 0), s.tpot_ms.p50) for s in serve if s.tpot_ms.p50]
        if pts:
            plots["tpot"].lines.append(_line(name, pts, pred, i))
        levels = [o.summary for o in r.outcomes]
        for key, attr in (("prefill_depth", "pp_tps"), ("decode_depth", "tg_tps")):
            by_test: dict[str, list[tuple[float, float]]] = {}
            for s in levels:
                if getattr(s, attr):
                    by_test.setdefault(s.test or "", []).append((float(s.depth or 0), getattr(s, attr)))
            for test, pts in by_test.items():
                label = name if len(by_test) == 1 else f"{name} {test}"
                plots[key].lines.append(_line(label, sorted(pts), pred, i))
    return [p for p in plots.values() if p.points]
