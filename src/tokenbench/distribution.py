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


#: The resolution a sketch reads its percentiles at (ms): far below what a client on a shared machine can time;
#: from 10 ms up, to this share of the value (``_rounded``).
RESOLUTION_MS = 0.01
RELATIVE = 5e-4


def tolerance(value: float) -> float:
    """How far a sketch's percentile can read from the exact one, at ``value`` (ms)."""
    return max(RESOLUTION_MS, RELATIVE * abs(value))


def _rounded(v: float) -> float:
    """A latency kept to four significant digits from 10 ms up (a step of 0.01-0.1% of it), to ``RESOLUTION_MS``
    below: a sketch then holds at most 9,000 values a decade, however long the soak (to 10 µs, an hour's E2E
    times spread over seconds could each be a value of their own)."""
    if v < 10.0:
        return v
    step = 10.0 ** (math.floor(math.log10(v)) - 3)
    return round(v / step) * step


class Sketch:
    """One latency's samples, folded: exact count, mean, spread, least and most; percentiles from a ``Tally``."""

    __slots__ = ("hi", "lo", "n", "sum", "sumsq", "tally")

    def __init__(self) -> None:
        self.tally = Tally(RESOLUTION_MS)
        self.n, self.sum, self.sumsq = 0, 0.0, 0.0
        self.lo, self.hi = math.inf, -math.inf

    def add(self, v: float) -> None:
        self.tally.append(_rounded(v))
        self.n += 1
        self.sum += v
        self.sumsq += v * v
        self.lo, self.hi = min(self.lo, v), max(self.hi, v)

    def merge(self, other: Sketch) -> None:
        """``other``'s samples added to these, as if each had been added here."""
        for k, c in other.tally.counts.items():
            self.tally.counts[k] = self.tally.counts.get(k, 0) + c
        self.tally.n += other.tally.n
        self.n += other.n
        self.sum += other.sum
        self.sumsq += other.sumsq
        self.lo, self.hi = min(self.lo, other.lo), max(self.hi, other.hi)

    def distribution(self) -> Distribution:
        """As ``Distribution.of`` the samples, its percentiles at the resolution (the population's std)."""
        if not self.n:
            return Distribution(n=0)
        mean = self.sum / self.n
        std = math.sqrt(max(0.0, self.sumsq / self.n - mean * mean)) if self.n > 1 else 0.0
        p = self.tally.percentile
        return Distribution(n=self.n, mean=mean, std=std, min=self.lo, max=self.hi, p50=p(50), p90=p(90),
                            p95=p(95), p99=p(99))
