"""The plotted data of a set of runs, one object all exporters read."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..metrics import cost_per_mtok
from ..sweep import RunResult


@dataclass(slots=True)
class Line:
    name: str
    xs: list[float]
    ys: list[float]
    predicted: bool = False


@dataclass(slots=True)
class Plot:
    id: str
    title: str
    xlabel: str
    ylabel: str
    lines: list[Line] = field(default_factory=list)
    logx: bool = False

    @property
    def points(self) -> int:
        return sum(len(line.xs) for line in self.lines)


def is_predicted(r: RunResult) -> bool:
    return r.manifest.get("provenance") == "predicted" or bool(r.manifest.get("predicted"))


def run_name(r: RunResult) -> str:
    base = str(r.manifest.get("label") or r.run_id)
    return base + (" (PREDICTED)" if is_predicted(r) else "")


def _serve(r: RunResult) -> list:  # type: ignore[type-arg]
    lv = [o.summary for o in r.outcomes if (o.summary.test or "serve") == "serve" and o.summary.concurrency]
    by: dict[int, object] = {}
    for s in lv:  # one point per concurrency: the longest prompt (the run's main workload)
        cur = by.get(s.concurrency)  # type: ignore[arg-type]
        if cur is None or (s.input_tokens_mean or 0) > (getattr(cur, "input_tokens_mean", 0) or 0):
            by[s.concurrency] = s  # type: ignore[index]
    return [by[k] for k in sorted(by)]


def build(runs: list[RunResult], price_per_hour: float | None = None, currency: str | None = None) -> list[Plot]:
    plots = {
        "aggregate": Plot("aggregate", "Aggregate output throughput vs concurrency", "concurrent agents", "output tok/s", logx=True),
        "per_agent": Plot("per_agent", "Per-agent throughput vs concurrency", "concurrent agents", "tok/s per agent", logx=True),
        "ttft": Plot("ttft", "TTFT p50 and p99 vs concurrency", "concurrent agents", "ms", logx=True),
        "tpot": Plot("tpot", "TPOT (median) vs concurrency", "concurrent agents", "ms per output token", logx=True),
        "prefill_depth": Plot("prefill_depth", "Prefill vs context depth", "depth (tokens in cache)", "prompt tok/s"),
        "decode_depth": Plot("decode_depth", "Decode vs context depth", "depth (tokens in cache)", "generated tok/s"),
        "cost": Plot("cost", "Cost per million output tokens vs concurrency", "concurrent agents",
                     f"{currency or 'price'} per million output tokens", logx=True),
    }
    for r in runs:
        name, pred = run_name(r), is_predicted(r)
        sv = [s for s in _serve(r) if s.output_throughput_tps]
        if sv:
            xs = [float(s.concurrency) for s in sv]
            plots["aggregate"].lines.append(Line(name, xs, [s.output_throughput_tps for s in sv], pred))
            pa = [(float(s.concurrency), s.per_agent_tps) for s in sv if s.per_agent_tps]
            if pa:
                plots["per_agent"].lines.append(Line(name, [x for x, _ in pa], [y for _, y in pa], pred))
            price = price_per_hour if price_per_hour is not None else r.manifest.get("price_per_hour")
            if price:
                cs = [(float(s.concurrency), cost_per_mtok(price, s.output_throughput_tps)) for s in sv]
                plots["cost"].lines.append(Line(name, [x for x, _ in cs], [y for _, y in cs if y], pred))
        for pct in ("p50", "p99"):
            pts = [(float(s.concurrency), getattr(s.ttft_ms, pct)) for s in _serve(r) if getattr(s.ttft_ms, pct)]
            if pts:
                plots["ttft"].lines.append(Line(f"{name} {pct}", [x for x, _ in pts], [y for _, y in pts], pred))
        pts = [(float(s.concurrency), s.tpot_ms.p50) for s in _serve(r) if s.tpot_ms.p50]
        if pts:
            plots["tpot"].lines.append(Line(name, [x for x, _ in pts], [y for _, y in pts], pred))
        levels = [o.summary for o in r.outcomes]
        for key, attr in (("prefill_depth", "pp_tps"), ("decode_depth", "tg_tps")):
            pts = sorted((float(s.depth or 0), getattr(s, attr)) for s in levels if getattr(s, attr))
            if pts:
                plots[key].lines.append(Line(name, [x for x, _ in pts], [y for _, y in pts], pred))
    return [p for p in plots.values() if p.points]
