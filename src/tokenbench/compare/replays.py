"""Two replays of recorded agents side by side (``compare_replays``): at each lane count both ran, the trees each
box finished and how long they took, what its cache served beside what the trace allows, the per-agent rate 90%
of calls reached, the calls it refused for their context, and TTFT against the context a call sent. A replay
beside a run that is no replay is refused; two replays of different traces are compared with a warning."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from ..levels import ServingLevel, serving
from ..replay_stats import ContextBin
from ..results import RunResult
from .sides import condition_warnings, model_warnings, run_name


def is_replay_run(r: RunResult) -> bool:
    return (r.manifest.workload or {}).get("kind") == "replay" or any(
        s.replay is not None for s in serving(o.summary for o in r.outcomes))


def _by_lanes(r: RunResult) -> dict[int, ServingLevel]:
    return {s.concurrency or 0: s for s in serving(o.summary for o in r.outcomes) if s.replay is not None}


@dataclass(slots=True)
class ReplayRow:
    label: str
    a: float | None
    b: float | None
    unit: str  # "s", "ms", "share", "tok/s", "count"
    lower_is_better: bool | None  # None: no ratio (a count, a share)

    @property
    def ratio(self) -> float | None:
        return self.a / self.b if self.a and self.b and self.lower_is_better is not None else None


@dataclass(slots=True)
class ReplayBlock:
    lanes: int
    rows: list[ReplayRow]
    bins: list[tuple[int, int, float | None, float | None]]  # (low, high, A's TTFT p50 ms, B's)


@dataclass(slots=True)
class ReplayComparison:
    a: str
    b: str
    blocks: list[ReplayBlock]
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "warnings": self.warnings, "blocks": [
            {"lanes": b.lanes, "rows": [{"label": r.label, "a": r.a, "b": r.b, "unit": r.unit, "ratio": r.ratio}
                                        for r in b.rows],
             "ttft_by_context": [{"low": lo, "high": hi, "a_ms": x, "b_ms": y} for lo, hi, x, y in b.bins]}
            for b in self.blocks]}


def _rows(x: ServingLevel, y: ServingLevel) -> list[ReplayRow]:
    rx, ry = x.replay, y.replay
    assert rx is not None and ry is not None
    return [
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


def _bins(x: list[ContextBin], y: list[ContextBin]) -> list[tuple[int, int, float | None, float | None]]:
    bx, by = {(b.low, b.high): b for b in x}, {(b.low, b.high): b for b in y}
    return [(lo, hi, bx[k].ttft_ms.p50 if k in bx else None, by[k].ttft_ms.p50 if k in by else None)
            for k in sorted(set(bx) | set(by)) for lo, hi in [k]]


def _context_bins(s: ServingLevel) -> list[ContextBin]:
    return s.replay.by_context if s.replay is not None else []


def compare_replays(a: RunResult, b: RunResult) -> ReplayComparison:
    """Both replays at each lane count both ran. Refuses (``UsageError``) a replay beside a run that is not, and
    two replays that share no lane count."""
    if is_replay_run(a) != is_replay_run(b):
        other = b if is_replay_run(a) else a
        raise UsageError(f"{run_name(a if other is b else b)} replays recorded agents and {run_name(other)} does "
                         "not: compare replays with replays")
    la, lb = _by_lanes(a), _by_lanes(b)
    shared = sorted(set(la) & set(lb))
    if not shared:
        raise UsageError(f"{run_name(a)} and {run_name(b)} share no lane count: the first ran "
                         f"{', '.join(map(str, sorted(la))) or 'none'}; the second {', '.join(map(str, sorted(lb))) or 'none'}")
    blocks = [ReplayBlock(c, _rows(la[c], lb[c]), _bins(_context_bins(la[c]), _context_bins(lb[c]))) for c in shared]
    warnings = model_warnings(a.manifest, b.manifest) + condition_warnings(a, b)
    ta = ((a.manifest.workload or {}).get("trajectories") or {}).get("sha256")
    tb = ((b.manifest.workload or {}).get("trajectories") or {}).get("sha256")
    if ta != tb:
        warnings.append("the two runs replayed different trajectories: their figures are of different work")
    warnings += [f"{run_name(r)} is {r.predicted_mark}, not measured" for r in (a, b) if r.predicted_mark]
    return ReplayComparison(run_name(a), run_name(b), blocks, warnings)


def _figure(v: float | None, unit: str) -> str:
    if v is None:
        return "—"
    if unit == "share":
        return f"{v:.0%}"
    if unit == "s":
        return f"{v:,.1f} s"
    if unit == "ms":
        return f"{v:,.0f} ms" if v >= 100 else f"{v:.3g} ms"
    return f"{v:,.1f}" if unit == "tok/s" else f"{v:,.0f}"


def replay_tables(block: ReplayBlock) -> list[tuple[list[str], list[list[str]]]]:
    """The block's level table and its TTFT-by-context table (A/B: A's over B's, below 1 A is faster for a time)."""
    level = (["Per level", "A", "B", "A/B"],
             [[r.label, _figure(r.a, r.unit), _figure(r.b, r.unit), f"{r.ratio:.2f}×" if r.ratio else ""]
              for r in block.rows if r.a is not None or r.b is not None])
    bins = (["Context", "A TTFT p50", "B TTFT p50", "A/B"],
            [[f"{lo:,}-{hi:,}", _figure(x, "ms"), _figure(y, "ms"), f"{x / y:.2f}×" if x and y else ""]
             for lo, hi, x, y in block.bins])
    return [level, bins]
