"""Two replays of recorded agents side by side (``compare_replays``): at each lane count both ran, the trees each
box finished and how long they took, what its cache served beside what the trace allows, the per-agent rate 90%
of calls reached, the calls it refused for their context, and TTFT against the context a call sent. Each side
says how many calls it measured, and TTFT's ratios carry their 95% interval (``bootstrap``) where both sides
measured enough calls for one. A replay beside a run that is no replay is refused; two replays of different
traces are compared with a warning."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..cells import ms
from ..bootstrap import LEVEL, QUANTILES, TAIL, Interval, LevelSamples, interval, run_samples
from ..errors import UsageError
from ..layout import plural
from ..levels import LevelSummary, ServingLevel
from ..replay_stats import ContextBin, tokens
from ..replay_table import seconds
from ..results import LevelOutcome, RunResult
from ..session_view import is_replay_run
from .sides import condition_warnings, model_warnings, run_name

if TYPE_CHECKING:
    from ..store import Store

#: The rows whose ratio has an interval where both sides measured calls enough: the row, the bootstrap's figure.
RESAMPLED = {"TTFT p50": "Median TTFT", "TTFT p90": "P90 TTFT"}


def _by_lanes(r: RunResult) -> dict[int, LevelOutcome]:
    return {o.summary.concurrency or 0: o for o in r.outcomes
            if isinstance(o.summary, ServingLevel) and o.summary.replay is not None}


def _lanes(by: dict[int, LevelOutcome]) -> str:
    """What a replay's lane counts were, as a refusal says them: an open loop at the recorded times has none."""
    closed = sorted(c for c in by if c)
    if not closed:
        return "replayed at the recorded times (an open loop: no lanes)"
    return f"ran {', '.join(map(str, closed))} lanes" + (" and at the recorded times" if 0 in by else "")


def fewest_calls(metric: str) -> int:
    """The calls a side needs for its quantile to have an interval: ``TAIL`` beyond it on its either side."""
    q = QUANTILES[metric][1]
    return -(-TAIL * 100 // int(min(q, 100 - q)))


@dataclass(slots=True)
class ReplayRow:
    label: str
    a: float | None
    b: float | None
    unit: str  # "s", "ms", "share", "tok/s", "count"
    lower_is_better: bool | None  # None: no ratio (a count, a share)
    interval: Interval | None = None  # A/B's 95% interval (RESAMPLED rows where both sides measured enough)

    @property
    def ratio(self) -> float | None:
        return self.a / self.b if self.a and self.b and self.lower_is_better is not None else None


@dataclass(slots=True)
class ReplayBlock:
    lanes: int
    rows: list[ReplayRow]
    bins: list[tuple[int, int, float | None, float | None, int, int]]  # (low, high, TTFT p50 ms, calls: A's, B's)


@dataclass(slots=True)
class ReplayComparison:
    a: str
    b: str
    blocks: list[ReplayBlock]
    warnings: list[str] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)  # "only B has 2 lanes": not compared, and said

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "warnings": self.warnings, "unmatched": self.unmatched, "blocks": [
            {"lanes": b.lanes, "rows": [{"label": r.label, "a": r.a, "b": r.b, "unit": r.unit, "ratio": r.ratio,
                                         "interval": _interval_dict(r.interval)} for r in b.rows],
             "ttft_by_context": [{"low": lo, "high": hi, "a_ms": x, "b_ms": y, "a_calls": ca, "b_calls": cb}
                                 for lo, hi, x, y, ca, cb in b.bins]}
            for b in self.blocks]}


def _interval_dict(iv: Interval | None) -> dict[str, Any] | None:
    return None if iv is None else {"low": iv.low, "high": iv.high, "level": LEVEL, "how": iv.how}


def _rows(x: ServingLevel, y: ServingLevel) -> list[ReplayRow]:
    rx, ry = x.replay, y.replay
    assert rx is not None and ry is not None
    return [
        ReplayRow("Calls measured", x.completed, y.completed, "count", None),
        ReplayRow("Trees finished", rx.trees_finished, ry.trees_finished, "count", None),
        ReplayRow("Tree time p50", rx.tree_s.p50, ry.tree_s.p50, "s", True),
        ReplayRow("Tree time p90", rx.tree_s.p90, ry.tree_s.p90, "s", True),
        ReplayRow("TTFT p50", x.ttft_ms.p50, y.ttft_ms.p50, "ms", True),
        ReplayRow("TTFT p90", x.ttft_ms.p90, y.ttft_ms.p90, "ms", True),
        ReplayRow("Output tok/s", x.output_throughput_tps or None, y.output_throughput_tps or None, "tok/s", False),
        ReplayRow("Agent tok/s, p90", rx.agent_tps_p90, ry.agent_tps_p90, "tok/s", False),
        ReplayRow("Cached share", x.cached_share, y.cached_share, "share", None),
        ReplayRow("Ideal share", rx.ideal_cached_share, ry.ideal_cached_share, "share", None),
        ReplayRow("Overflowed", rx.overflow_share, ry.overflow_share, "share", None),
    ]


def _bins(x: list[ContextBin], y: list[ContextBin]) -> list[tuple[int, int, float | None, float | None, int, int]]:
    bx, by = {(b.low, b.high): b for b in x}, {(b.low, b.high): b for b in y}
    return [(lo, hi, bx[k].ttft_ms.p50 if k in bx else None, by[k].ttft_ms.p50 if k in by else None,
             bx[k].calls if k in bx else 0, by[k].calls if k in by else 0)
            for k in sorted(set(bx) | set(by)) for lo, hi in [k]]


def _intervals(rows: list[ReplayRow], sides: tuple[tuple[RunResult, LevelOutcome, LevelSamples | None], ...]) -> None:
    """TTFT's ratios given their 95% interval, from each side's measured calls (seeded by run and level, as the
    level comparison's: the same runs give the same interval)."""
    (ra, oa, sa), (rb, ob, sb) = sides
    if not (ra.run_id and rb.run_id):
        return
    gets: dict[str, Callable[[LevelSummary], float | None]] = {
        "Median TTFT": lambda s: s.ttft_ms.p50 if isinstance(s, ServingLevel) else None,
        "P90 TTFT": lambda s: s.ttft_ms.p90 if isinstance(s, ServingLevel) else None}
    for r in rows:
        metric = RESAMPLED.get(r.label)
        if metric is not None and r.a and r.b:
            r.interval = interval(r.a, r.b, sa, sb, oa.summary, ob.summary, metric, gets[metric],
                                  [f"{ra.run_id}:{oa.idx}", f"{rb.run_id}:{ob.idx}"])


def _context_bins(s: ServingLevel) -> list[ContextBin]:
    return s.replay.by_context if s.replay is not None else []


def compare_replays(a: RunResult, b: RunResult, store: Store | None = None) -> ReplayComparison:
    """Both replays at each lane count both ran; ``store``: where their calls are, for TTFT's intervals (none
    without it). Refuses (``UsageError``) a replay beside a run that is not, and two replays that share no lane
    count."""
    if is_replay_run(a) != is_replay_run(b):
        other = b if is_replay_run(a) else a
        raise UsageError(f"{run_name(a if other is b else b)} replays recorded agents and {run_name(other)} does "
                         "not: compare replays with replays")
    la, lb = _by_lanes(a), _by_lanes(b)
    shared = sorted(set(la) & set(lb))
    if not shared:
        raise UsageError(f"{run_name(a)} and {run_name(b)} share no lane count: the first {_lanes(la)}; the second "
                         f"{_lanes(lb)}")
    samples = (run_samples(a, store), run_samples(b, store)) if store is not None else ({}, {})
    blocks = []
    for c in shared:
        x, y = serving_of(la[c]), serving_of(lb[c])
        rows = _rows(x, y)
        _intervals(rows, ((a, la[c], samples[0].get(la[c].idx)), (b, lb[c], samples[1].get(lb[c].idx))))
        blocks.append(ReplayBlock(c, rows, _bins(_context_bins(x), _context_bins(y))))
    warnings = model_warnings(a.manifest, b.manifest) + condition_warnings(a, b)
    ta = ((a.manifest.workload or {}).get("trajectories") or {}).get("sha256")
    tb = ((b.manifest.workload or {}).get("trajectories") or {}).get("sha256")
    if ta != tb:
        warnings.append("the two runs replayed different trajectories: their figures are of different work")
    warnings += _replay_differences(a.manifest.workload or {}, b.manifest.workload or {})
    warnings += [f"{run_name(r)} is {r.predicted_mark}, not measured" for r in (a, b) if r.predicted_mark]
    unmatched = [f"only {side} has {', '.join(lanes_title(c) for c in sorted(only))}"
                 for side, only in (("A", set(la) - set(lb)), ("B", set(lb) - set(la))) if only]
    return ReplayComparison(run_name(a), run_name(b), blocks, warnings, unmatched)


def serving_of(o: LevelOutcome) -> ServingLevel:
    assert isinstance(o.summary, ServingLevel)
    return o.summary


#: How a replay was run, beside the trajectories it replayed: what differs makes the two runs different work.
REPLAY_SETTINGS = (("scale", "lengths divided by", "1"), ("max_think_s", "pauses capped at (s)", "none"),
                   ("speed", "the speed of the recorded times", "lanes"), ("answers", "answers sent", "recorded"))


def _replay_differences(wa: dict[str, Any], wb: dict[str, Any]) -> list[str]:
    """The replay settings the two runs differ in, said as values: "lengths divided by: 8 vs 16"."""
    def said(v: Any, unset: str) -> str:
        return unset if v is None else f"{v:g}" if isinstance(v, (int, float)) else str(v)

    return [f"the two replays differ in {what}: {said(wa.get(key), unset)} vs {said(wb.get(key), unset)}"
            for key, what, unset in REPLAY_SETTINGS if wa.get(key) != wb.get(key)]


def lanes_title(lanes: int) -> str:
    """A block's heading: its lanes, or the recorded times (an open loop has none)."""
    return plural(lanes, "lane") if lanes else "at the recorded times (open loop)"


def _figure(v: float | None, unit: str) -> str:
    if v is None:
        return "—"
    if unit == "share":
        return f"{v:.0%}"
    if unit == "s":
        return seconds(v)
    if unit == "ms":
        return ms(v)  # as every table: "17.0 ms" beside "30.2 ms", not "17 ms"
    return f"{v:,.1f}" if unit == "tok/s" else f"{v:,.0f}"


def _ratio(r: ReplayRow) -> str:
    if not r.ratio:
        return ""
    iv = r.interval
    # two significant figures where two decimals would read 0.00x (a tree of 19 ms beside one of 7.7 s)
    ratio = f"{r.ratio:.2f}×" if r.ratio >= 0.1 else f"{r.ratio:.2g}×"
    return ratio + (f" ({iv.low:.2f}–{iv.high:.2f})" if iv is not None else "*" if r.label in RESAMPLED else "")


def replay_tables(block: ReplayBlock) -> list[tuple[list[str], list[list[str]]]]:
    """The block's level table and its TTFT-by-context table (A/B: A's over B's, below 1 A is faster for a time;
    TTFT's with its 95% interval, or a "*" where a side measured too few calls for one: ``replay_notes``)."""
    level = (["Per level", "A", "B", "A/B"],
             [[r.label, _figure(r.a, r.unit), _figure(r.b, r.unit), _ratio(r)]
              for r in block.rows if r.a is not None or r.b is not None])
    # the calls each side measured in a bin, in two columns ("Calls A/B" with "12/14" read as a ratio)
    bins = (["Context", "A TTFT p50", "B TTFT p50", "A/B", "A calls", "B calls"],
            [[f"{tokens(lo)}-{tokens(hi)}", _figure(x, "ms"), _figure(y, "ms"), f"{x / y:.2f}×" if x and y else "",
              f"{ca:,}", f"{cb:,}"] for lo, hi, x, y, ca, cb in block.bins])
    return [level, bins]


def replay_notes(block: ReplayBlock) -> list[str]:
    """What a "*" on a ratio means, where the block has one."""
    if not any(r.label in RESAMPLED and r.ratio and r.interval is None for r in block.rows):
        return []
    return [f"* no 95% interval: a side measured fewer calls than one needs (TTFT p50 {fewest_calls('Median TTFT')}, "
            f"p90 {fewest_calls('P90 TTFT')}), or its calls were not stored: the ratio alone"]
