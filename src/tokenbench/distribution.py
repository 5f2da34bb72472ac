"""One measured quantity's statistics: count, mean, spread and percentiles (``Distribution``), the percentile
rule they use (linear between closest ranks: numpy's default, as ``vllm bench serve`` uses), and the spread of a
figure over repetitions (``coefficient_of_variation``)."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of pre-sorted values (numpy 'linear' method), q in [0, 100]."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


@dataclass(slots=True)
class Distribution:
    """One type for every metric: count, mean, std, min, max and percentiles, in the unit of its name."""

    n: int
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, values: list[float]) -> Distribution:
        if not values:
            return cls(n=0)
        s = sorted(values)
        return cls(
            n=len(s),
            mean=statistics.fmean(s),
            std=statistics.pstdev(s) if len(s) > 1 else 0.0,
            min=s[0],
            max=s[-1],
            p50=percentile(s, 50),
            p90=percentile(s, 90),
            p95=percentile(s, 95),
            p99=percentile(s, 99),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def coefficient_of_variation(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None]
    if len(vals) < 2:
        return None
    mean = statistics.fmean(vals)
    return statistics.stdev(vals) / mean if mean else None
