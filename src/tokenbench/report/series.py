"""The plotted data of a set of runs, one object all exporters read.

Against concurrency: aggregate and per-agent throughput, TTFT, TPOT, cost. Against interactivity (per-agent
tok/s, the view SemiAnalysis' InferenceMAX compares boxes by): aggregate throughput and cost per million output
tokens, one curve per box. Against depth: prefill and decode. Agent sessions: each turn's TTFT
against its context at each concurrency, and session time against concurrency. A session run's two levels at a
concurrency (warm and busted) are two lines, never one point chosen between them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import session_view
from ..pricing import Pricing
from ..levels import ServingLevel, depth_levels, serving
from ..results import RunResult
from ..session_view import BUSTED, cache_of
from ..sweep_table import tpot_shown
from . import style


@dataclass(slots=True)
class Line:
    name: str
    xs: list[float]
    ys: list[float]
    predicted: bool = False
    run: int = 0  # the run's place in the report: its colour in every plot
    pct: str | None = None  # "p50", "p90" or "p99": one colour, a line style for each
    cache: str | None = None  # a session level's cache mode: busted lines have their own marker
    labels: list[str] | None = None  # each point's own hover text (else the x axis says where it is)

    @property
    def secondary(self) -> bool:
        """A tail percentile: drawn dotted beside the solid median."""
        return self.pct not in (None, "p50")


@dataclass(slots=True)
class Plot:
    id: str
    title: str
    xlabel: str
    ylabel: str
    lines: list[Line] = field(default_factory=list)
    logx: bool = False
    #: what x is, for its ticks and the hover text: "concurrency", "depth", "context" (tokens a turn sent) or
    #: "interactivity" (per-agent tok/s), "time" (seconds into a soak) or "rate" (an open loop's requests/s)
    axis: str = "concurrency"
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
        """The x ticks both exporters draw: each level's own value on a concurrency or depth axis, 1-2-5 steps on
        a continuous one."""
        xs = sorted({x for line in self.lines for x in line.xs})
        if self.axis == "depth":
            return xs, [style.depth_label(x) for x in xs]
        if self.axis == "context":
            ticks = style.linear_ticks(xs)
            return ticks, [session_view.tokens(t) for t in ticks]
        if self.axis == "interactivity":
            ticks = style.log_ticks(xs) if self.logx else style.linear_ticks(xs)
            return ticks, [f"{t:,g}" for t in ticks]
        if self.axis == "time":
            ticks = style.linear_ticks(xs)
            return ticks, [f"{t:,g}" for t in ticks]
        if self.axis == "rate":
            return xs, [f"{x:g}/s" for x in xs]
        return xs, [f"{x:g}" for x in xs]

    def x_text(self, x: float) -> str:
        if self.axis == "depth":
            return f"depth {style.depth_label(x)}"
        if self.axis == "context":
            return f"{session_view.tokens(x)} tokens of context"
        if self.axis == "interactivity":
            return f"{style.number(x)} tok/s per agent"
        if self.axis == "time":
            return f"{x:,g} s into the soak"
        if self.axis == "rate":
            return f"{x:g} requests/s offered"
        return f"concurrency {x:g}"


def is_predicted(r: RunResult) -> bool:
    return r.predicted_mark is not None


def run_name(r: RunResult) -> str:
    base = str(r.manifest.label or r.run_id)
    return base + (f" ({r.predicted_mark})" if is_predicted(r) else "")


def pricing(r: RunResult, price_per_hour: float | None = None, currency: str | None = None) -> Pricing | None:
    """A run's rental price as the cost command reads it: ``price_per_hour`` given for the report, else the
    run's own; None where neither is known."""
    return Pricing.of_run(r.manifest, price_per_hour, currency)


def _serve(r: RunResult) -> dict[str | None, list[ServingLevel]]:
    """A run's serving levels by cache mode (None for a run that is no session run), one per concurrency: the
    longest prompt (the run's main workload) where a concurrency has several."""
    lv = [s for s in serving(o.summary for o in r.outcomes) if s.concurrency]
    by: dict[tuple[str | None, int], ServingLevel] = {}
    for s in lv:
        key = (cache_of(s), s.concurrency or 0)
        cur = by.get(key)
        if cur is None or (s.input_tokens_mean or 0) > (cur.input_tokens_mean or 0):
            by[key] = s
    out: dict[str | None, list[ServingLevel]] = {}
    for cache, c in sorted(by, key=lambda k: (k[0] == BUSTED, k[0] or "", k[1])):  # warm before busted
        out.setdefault(cache, []).append(by[(cache, c)])
    return out


def _line(name: str, pts: list[tuple[float, float]], pred: bool, run: int, pct: str | None = None,
          cache: str | None = None, labels: list[str] | None = None) -> Line:
    keep = [k for k, (x, y) in enumerate(pts) if math.isfinite(x) and math.isfinite(y)]
    return Line(name, [pts[k][0] for k in keep], [pts[k][1] for k in keep], pred, run, pct, cache,
                [labels[k] for k in keep] if labels is not None else None)


def _add(plot: Plot, label: str, pts: list[tuple[float, float]], r: RunResult, i: int, pct: str | None = None,
         cache: str | None = None, labels: list[str] | None = None) -> None:
    if pts:
        plot.lines.append(_line(label, pts, is_predicted(r), i, pct, cache, labels))


def _points(levels: list[ServingLevel], value: Callable[[ServingLevel], float | None]) -> list[tuple[float, float]]:
    """(concurrency, value) of the levels that have the value."""
    return [(float(s.concurrency or 0), v) for s in levels if (v := value(s))]


def _serve_lines(plots: dict[str, Plot], r: RunResult, i: int, price: Pricing | None, one: str | None) -> None:
    """A run's serving levels: throughput, per agent, cost, TTFT and TPOT against concurrency, and throughput and
    cost against interactivity; a session run's warm and busted levels as two lines each."""
    for cache, serve in _serve(r).items():
        name = run_name(r) + (f" {cache}" if cache else "")
        # the rates the terminal's table shows and a level is priced at: over its plateau where it held its load
        sv = [s for s in serve if s.output_throughput_tps]
        _add(plots["aggregate"], name, _points(sv, lambda s: s.sustained_tps), r, i, cache=cache)
        _add(plots["per_agent"], name, _points(sv, lambda s: s.sustained_per_agent_tps), r, i, cache=cache)
        if price:
            _add(plots["cost"], name if one else f"{name} ({price.currency})",
                 _points(sv, lambda s: price.per_mtok(s.sustained_tps)), r, i, cache=cache)
        for pct in ("p50", "p99"):
            _add(plots["ttft"], f"{name} {pct}", _points(serve, lambda s: getattr(s.ttft_ms, pct)), r, i, pct, cache)
        _add(plots["tpot"], name, _points(serve, tpot_shown), r, i, cache=cache)  # none the tables withhold
        _interactivity_lines(plots, name, sv, r, i, price, one, cache)


def _interactivity_lines(plots: dict[str, Plot], name: str, levels: list[ServingLevel], r: RunResult, i: int,
                         price: Pricing | None, one: str | None, cache: str | None) -> None:
    """InferenceMAX's view: aggregate output and cost per million output tokens against per-agent tok/s (how
    interactive each agent's stream is), one curve per box; each point says its concurrency on hover."""
    pts = sorted((a, s) for s in levels if (a := s.sustained_per_agent_tps))
    labels = [f"concurrency {s.concurrency}, {style.number(x)} tok/s per agent" for x, s in pts]
    _add(plots["interactivity"], name, [(x, s.sustained_tps) for x, s in pts], r, i, cache=cache,
         labels=labels)
    if price:
        costs = [(x, c, lab) for (x, s), lab in zip(pts, labels) if (c := price.per_mtok(s.sustained_tps))]
        _add(plots["cost_interactivity"], name if one else f"{name} ({price.currency})",
             [(x, c) for x, c, _ in costs], r, i, cache=cache, labels=[lab for *_, lab in costs])


def _session_lines(plots: dict[str, Plot], r: RunResult, i: int) -> None:
    """An agent-session run: each turn's TTFT p50 against the context it sent, one plot per concurrency and a
    line per cache mode; session time p50 and p90 against concurrency."""
    by = session_view.levels(r)
    for (c, cache), s in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1] == BUSTED)):
        st = s.session
        assert st is not None
        if s.replay is not None:  # a replay's calls are no turns of one session: its TTFT by context is its table's
            continue
        plot = plots.setdefault(f"session_ttft_c{c}", Plot(
            f"session_ttft_c{c}", f"Agent sessions at concurrency {c}: each turn's TTFT p50 vs its context",
            "context the turn sent (tokens)", "TTFT p50 (s)", axis="context", unit="s"))
        pts = [(t.context_tokens_mean, t.ttft_ms.p50 / 1000) for t in st.turns
               if t.context_tokens_mean is not None and t.ttft_ms.p50 is not None]
        labels = [f"turn {t.turn + 1}, {session_view.tokens(t.context_tokens_mean)} tokens of context"
                  + (f" ({session_view.tokens(t.cached_tokens_mean)} cached)" if t.cached_tokens_mean else "")
                  for t in st.turns if t.context_tokens_mean is not None and t.ttft_ms.p50 is not None]
        _add(plot, f"{run_name(r)} {cache}", pts, r, i, cache=cache, labels=labels)
    for cache in session_view.CACHES:
        levels = sorted((s for (c, k), s in by.items() if k == cache), key=lambda s: s.concurrency or 0)
        # where live sessions stop staying warm (capacity --cache-cliff): the cached share falls at one more agent
        shares = [(float(s.concurrency or 0), 100 * v) for s in levels
                  if s.session is not None and (v := s.session.cached_share) is not None]
        _add(plots["cached_share"], f"{run_name(r)} {cache}", shares, r, i, cache=cache)
        _soak_lines(plots, r, i, cache, levels)
        for pct in ("p50", "p90"):
            pts = [(float(s.concurrency or 0), v) for s in levels
                   if s.session is not None and (v := getattr(s.session.session_s, pct)) is not None]
            _add(plots["session_time"], f"{run_name(r)} {cache} {pct}", pts, r, i, pct, cache)


def _soak_lines(plots: dict[str, Plot], r: RunResult, i: int, cache: str, levels: list[ServingLevel]) -> None:
    """A soak's tenths (``SessionStats.over_time``): does the cache keep holding the sessions over the run?"""
    for s in levels:
        over = s.session.over_time if s.session is not None else []
        name = f"{run_name(r)} {cache} at {s.concurrency}"
        _add(plots["soak_cached"], name, [((w.start_s + w.end_s) / 2, 100 * w.cached_share) for w in over
                                          if w.cached_share is not None], r, i, cache=cache)
        _add(plots["soak_ttft"], name, [((w.start_s + w.end_s) / 2, w.ttft_ms_p50) for w in over
                                        if w.ttft_ms_p50 is not None], r, i, cache=cache)


def _rate_lines(plots: dict[str, Plot], r: RunResult, i: int) -> None:
    """An open loop's levels (--rate): throughput, TTFT and TPOT against the rate offered, as GuideLLM plots its
    rate sweeps. A level the server did not keep up with still plots: its TTFT is where that shows."""
    levels = sorted((s for s in serving(o.summary for o in r.outcomes) if s.rate and not s.concurrency),
                    key=lambda s: s.rate or 0.0)
    name = run_name(r)

    def pts(value: Callable[[ServingLevel], float | None]) -> list[tuple[float, float]]:
        return [(float(s.rate or 0.0), v) for s in levels if (v := value(s))]

    _add(plots["rate_throughput"], name, pts(lambda s: s.sustained_tps if s.output_throughput_tps else None), r, i)
    for pct in ("p50", "p99"):
        _add(plots["rate_ttft"], f"{name} {pct}", pts(lambda s: getattr(s.ttft_ms, pct)), r, i, pct)
    _add(plots["rate_tpot"], name, pts(tpot_shown), r, i)


def _depth_lines(plots: dict[str, Plot], r: RunResult, i: int) -> None:
    """A run's depth levels: prefill and decode against the tokens in cache, one line per test and concurrency
    (llama-benchy's ``(c2)``); a test measured twice at one depth (its tg after each pp) by its last row, as
    compare's table shows it."""
    name = run_name(r)
    levels = depth_levels(o.summary for o in r.outcomes)
    concurrent = any((s.concurrency or 1) > 1 for s in levels)
    for key, attr in (("prefill_depth", "pp_tps"), ("decode_depth", "tg_tps")):
        by_test: dict[str, dict[float, float]] = {}
        for s in levels:
            if getattr(s, attr):
                test = f"{s.test or ''} c{s.concurrency or 1}" if concurrent else s.test or ""
                by_test.setdefault(test, {})[float(s.depth or 0)] = getattr(s, attr)
        for test, pts in by_test.items():
            _add(plots[key], name if len(by_test) == 1 else f"{name} {test}", sorted(pts.items()), r, i)


def build(runs: list[RunResult], price_per_hour: float | None = None, currency: str | None = None) -> list[Plot]:
    prices = [pricing(r, price_per_hour, currency) for r in runs]
    currencies = {p.currency for p in prices if p}
    one = next(iter(currencies)) if len(currencies) == 1 else None
    conc = "concurrent agents"
    inter = "interactivity: output tok/s per agent"
    rate = "offered rate (requests/s)"
    plots = {
        "aggregate": Plot("aggregate", "Aggregate output throughput vs concurrency", conc, "output tok/s", logx=True,
                          unit="tok/s"),
        "per_agent": Plot("per_agent", "Per-agent throughput vs concurrency", conc, "tok/s per agent", logx=True,
                          unit="tok/s per agent"),
        "ttft": Plot("ttft", "TTFT p50 (solid) and p99 (dotted) vs concurrency", conc, "TTFT (ms)", logx=True, unit="ms"),
        "tpot": Plot("tpot", "TPOT (median) vs concurrency", conc, "TPOT (ms per output token)", logx=True,
                     unit="ms per output token"),
        "rate_throughput": Plot("rate_throughput", "Output throughput vs offered rate (open loop)", rate,
                                "output tok/s", axis="rate", unit="tok/s"),
        "rate_ttft": Plot("rate_ttft", "TTFT p50 (solid) and p99 (dotted) vs offered rate (open loop)", rate,
                          "TTFT (ms)", axis="rate", unit="ms"),
        "rate_tpot": Plot("rate_tpot", "TPOT (median) vs offered rate (open loop)", rate,
                          "TPOT (ms per output token)", axis="rate", unit="ms per output token"),
        "prefill_depth": Plot("prefill_depth", "Prefill vs context depth", "depth (tokens in cache)",
                              "prompt tok/s", axis="depth", unit="prompt tok/s"),
        "decode_depth": Plot("decode_depth", "Decode vs context depth", "depth (tokens in cache)",
                             "generated tok/s", axis="depth", unit="generated tok/s"),
        "cost": Plot("cost", "Cost per million output tokens vs concurrency", conc,
                     f"{one or 'cost'} per million output tokens", logx=True,
                     unit=f"{one}/M output tokens" if one else "per M output tokens"),
        "interactivity": Plot("interactivity", "Aggregate output throughput vs interactivity (per-agent tok/s)",
                              inter, "output tok/s", axis="interactivity", unit="tok/s"),
        "cost_interactivity": Plot("cost_interactivity", "Cost per million output tokens vs interactivity", inter,
                                   f"{one or 'cost'} per million output tokens", axis="interactivity",
                                   unit=f"{one}/M output tokens" if one else "per M output tokens"),
        "cached_share": Plot("cached_share", "Agent sessions: share of prompt tokens served from the cache vs live "
                             "sessions", "concurrent sessions", "cached share (%)", logx=True, unit="%"),
        "soak_cached": Plot("soak_cached", "Agent sessions over a soak: cached share of prompt tokens over time",
                            "time into the run (s)", "cached share (%)", axis="time", unit="%"),
        "soak_ttft": Plot("soak_ttft", "Agent sessions over a soak: turn TTFT p50 over time", "time into the run (s)",
                          "TTFT p50 (ms)", axis="time", unit="ms"),
        "session_time": Plot("session_time", "Agent sessions: session time p50 (solid) and p90 (dotted) vs "
                             "concurrency", "concurrent sessions", "session time (s)", logx=True, unit="s"),
    }
    for i, r in enumerate(runs):
        _serve_lines(plots, r, i, prices[i], one)
        _rate_lines(plots, r, i)
        _depth_lines(plots, r, i)
        _session_lines(plots, r, i)
    for p in plots.values():
        if p.axis in ("interactivity", "rate"):  # per-agent rates span decades from one stream to hundreds
            p.logx = style.wide(x for line in p.lines for x in line.xs)
    plots["cached_share"] = plots.pop("cached_share")  # after the turns, beside the session time
    plots["session_time"] = plots.pop("session_time")  # after the turns it sums up
    return [p for p in plots.values() if p.points]
