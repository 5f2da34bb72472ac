"""One measured quantity's statistics: count, mean, spread and percentiles (``Distribution``), the percentile
rule they use (linear between closest ranks: numpy's default, as ``vllm bench serve`` uses), and the spread of a
figure over repetitions (``coefficient_of_variation``), and samples kept as a tally of their values for a watch
that runs as long as a soak (``Tally``)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of pre-sorted values (numpy 'linear' method), q in [0, 100]."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if len(sorted_values) == 1:
        return sorted_values[0]
    lo, hi, frac = _ranks(len(sorted_values), q)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def _ranks(n: int, q: float) -> tuple[int, int, float]:
    """The two closest ranks (0-based) of the q-th percentile of n sorted values, and how far between them."""
    pos = (n - 1) * q / 100.0
    lo = math.floor(pos)
    return lo, min(lo + 1, n - 1), pos - lo


class Tally:
    """Samples kept as counts of their values rounded to ``resolution``, their percentiles read as ``percentile``
    reads a sorted list of the rounded values: memory bounded by the distinct values, not the samples (a watch
    of the event loop every 10 ms takes 360,000 samples an hour, of a few hundred values at 10 µs)."""

    __slots__ = ("counts", "n", "resolution")

    def __init__(self, resolution: float, values: Iterable[float] = ()) -> None:
        self.counts: dict[int, int] = {}
        self.n = 0
        self.resolution = resolution
        for v in values:
            self.append(v)

    def append(self, value: float) -> None:
        k = round(value / self.resolution)
        self.counts[k] = self.counts.get(k, 0) + 1
        self.n += 1

    def __len__(self) -> int:
        return self.n

    def max(self) -> float:
        return max(self.counts) * self.resolution

    def percentile(self, q: float) -> float:
        """As ``percentile`` on the sorted rounded samples: linear between the two closest ranks."""
        if not self.n:
            raise ValueError("percentile of no values")
        lo, hi, frac = _ranks(self.n, q)
        at_lo = at_hi = 0
        seen = 0
        for k in sorted(self.counts):
            seen += self.counts[k]
            if seen > lo and seen - self.counts[k] <= lo:
                at_lo = k
            if seen > hi:
                at_hi = k
                break
        return (at_lo + (at_hi - at_lo) * frac) * self.resolution


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
