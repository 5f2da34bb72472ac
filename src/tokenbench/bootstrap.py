"""How sure a comparison is: a seeded bootstrap of each side's figure, and the 95% interval of their ratio.

``compare`` calls a side faster only where the interval of A/B excludes 1 (pyperf's ``is_significant`` and
hyperfine's "2.00 ± 0.05 times faster" are the anchors: a difference smaller than the runs' own spread is no
difference). What a level's figure is resampled from, in this order:

- **repetitions** (``sweep --repetitions N``, N >= 2): the figure of each repetition, resampled with replacement;
  the median of a resample, as ``results.combine_repetitions`` reports a repeated level. The spread between
  repetitions is what a rerun would see, so it wins over the requests of one repetition.
- **requests** (the store's records of the level's successful measured requests): a quantile (median or p99
  TTFT, median TPOT, the prefill rate, the decode rate from TPOT) is drawn exactly, without building the
  resample: the k-th smallest of n draws from n sorted values is the value at ``floor(n * U)``, U ~ Beta(k, n + 1
  - k), the k-th order statistic of n uniforms; so a draw costs two Beta variates whatever n is. A quantile
  with fewer than ``TAIL`` requests beyond it has no interval (a p99 needs 500). A rate
  (aggregate and per-agent throughput, which at a fixed concurrency is proportional to output tokens over request
  time) is the ratio Σ output tokens / Σ request seconds of a resample of at most ``BLOCKS`` blocks of
  consecutive requests (one request a block up to ``BLOCKS`` requests; beyond, a block bootstrap: neighbouring
  requests share the server's state, and the work stays fixed at 10,000 requests or a million).
- **mean ± sd over n repetitions** (a depth run's pp and tg): the mean drawn from its t distribution (n - 1
  degrees of freedom), the parametric bootstrap of a mean; a source that gives a sd but no n (a llama-bench
  import) has no interval.

Each side is drawn ``RESAMPLES`` times from a ``random.Random`` seeded with the run's id, the level and the
figure, so the same runs give the same interval on every call and a run beside itself gives exactly 1; the two
sides' draws are independent. The interval is the 2.5th and 97.5th percentiles of the ratios of the draws
(Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 13: the percentile interval). A figure
without samples on both sides (an import, a prediction, a single published number) has no interval.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .distribution import percentile
from .levels import DepthLevel, LevelSummary, ServingLevel
from .metrics import NS_PER_S
from .slo import request_tpot_ms
from .records import RequestRecord

if TYPE_CHECKING:
    from .results import LevelOutcome, RunResult
    from .store import Store

#: Draws per side: a percentile interval at 95% wants a thousand or more (Efron & Tibshirani 1993, §19.3).
RESAMPLES = 1000
#: The interval's coverage.
LEVEL = 0.95
#: A rate is resampled in at most this many blocks of consecutive requests.
BLOCKS = 100
#: A quantile has an interval only with at least this many requests beyond it, on its either side: a resample
#: holds no value its sample did not, so a p99 of 32 requests (their largest but one) is drawn from the two or three
#: largest and looks sure where nothing is known (the bootstrap of an extreme order statistic fails: Bickel &
#: Freedman 1981). A median needs 10 requests, a p99 500.
TAIL = 5
#: Fixed, so the same inputs give the same interval (the run, the level and the figure are mixed in).
SEED = "tokenbench-bootstrap-1"

#: The request values a figure is a quantile of: (values, percentile, the figure is 1000 / the quantile).
QUANTILES: dict[str, tuple[str, float, bool]] = {
    "Median TTFT": ("ttft_ms", 50.0, False),
    "P90 TTFT": ("ttft_ms", 90.0, False),
    "P99 TTFT": ("ttft_ms", 99.0, False),
    "Median TPOT": ("tpot_ms", 50.0, False),
    "Decode": ("tpot_ms", 50.0, True),  # LevelSummary.decode_tps: 1000 / median TPOT
    "Prefill": ("prefill_tps", 50.0, False),
}
#: Figures that are an output rate: resampled as output tokens over request time.
RATES = frozenset({"Aggregate output", "Per-agent"})
#: A depth level's figure, its sample sd and its distribution over repetitions (for n).
MEANS: dict[str, tuple[str, str, str]] = {"pp": ("pp_tps", "pp_tps_sd", "pp_tps_dist"),
                                          "tg": ("tg_tps", "tg_tps_sd", "tg_tps_dist")}


@dataclass(slots=True)
class LevelSamples:
    """What one level's figures can be resampled from: its repetitions, else its requests' values."""

    repetitions: list[LevelSummary] = field(default_factory=list)  # two or more, else none
    ttft_ms: list[float] = field(default_factory=list)  # sorted, as each quantile wants them
    tpot_ms: list[float] = field(default_factory=list)
    prefill_tps: list[float] = field(default_factory=list)
    #: (output tokens, request seconds) of each block of consecutive requests, in the order they were sent
    blocks: list[tuple[float, float]] = field(default_factory=list)
    requests: int = 0
    #: draws already made, by seed and stream: figures of the same values share them (aggregate and per-agent)
    drawn: dict[str, list[float]] = field(default_factory=dict)

    @classmethod
    def of(cls, outcome: LevelOutcome, records: list[RequestRecord]) -> LevelSamples:
        """A level's samples: its repetitions when it has two or more, else its successful measured requests
        (a serving level's only: a depth level's records are its fill, pp and tg requests)."""
        if len(outcome.repetitions) > 1:
            return cls(repetitions=list(outcome.repetitions))
        s = outcome.summary
        if not isinstance(s, ServingLevel):
            return cls()
        ok = sorted((r for r in records if r.phase == "measured" and r.ok), key=lambda r: (r.sent_ns, r.index))
        ttft = sorted(r.ttft_ns / 1e6 for r in ok if r.ttft_ns is not None)
        tpot = sorted(v for r in ok if (v := request_tpot_ms(r)) is not None)
        prefill = sorted(r.input_tokens / (r.ttft_ns / NS_PER_S) for r in ok if r.input_tokens and r.ttft_ns) \
            if s.concurrency == 1 else []
        timed = [(float(r.output_tokens), r.e2e_ns / NS_PER_S) for r in ok
                 if r.output_tokens is not None and r.e2e_ns]
        return cls(ttft_ms=ttft, tpot_ms=tpot, prefill_tps=prefill, blocks=_blocks(timed), requests=len(ok))


def _blocks(timed: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """At most ``BLOCKS`` runs of consecutive (tokens, seconds) pairs, summed; sizes differ by one at most."""
    n = len(timed)
    k = min(n, BLOCKS)
    out = []
    for i in range(k):
        part = timed[i * n // k:(i + 1) * n // k]
        out.append((sum(t for t, _ in part), sum(s for _, s in part)))
    return out


def run_samples(res: RunResult, store: Store | None) -> dict[int, LevelSamples]:
    """Each level's samples by its place in the run: repetitions from the result, requests from the store (none
    without one, or for an import or a prediction, which stored no requests)."""
    out = {}
    for o in res.outcomes:
        records = store.request_times(res.run_id, o.idx) if store is not None and res.run_id and \
            len(o.repetitions) <= 1 and isinstance(o.summary, ServingLevel) else []
        out[o.idx] = LevelSamples.of(o, records)
    return out


@dataclass(frozen=True, slots=True)
class Draws:
    """One side's figure, resampled: each draw over the figure as measured (1.0: the same), and how."""

    relative: list[float]
    how: str  # "repetitions" | "requests" | "mean ± sd"
    n: int  # repetitions or requests resampled


def _quantile_draws(values: list[float], q: float, rng: random.Random, count: int) -> list[float]:
    """The percentile ``q`` (linear between ranks, as ``distribution.percentile``) of ``count`` bootstrap resamples of
    the sorted ``values``, drawn through the order statistics of uniforms: no resample is built."""
    n = len(values)
    pos = (n - 1) * q / 100.0
    lo = math.floor(pos)
    frac = pos - lo
    out = []
    for _ in range(count):
        u = rng.betavariate(lo + 1, n - lo)  # the (lo+1)-th smallest of n uniforms
        x = values[min(int(n * u), n - 1)]
        if frac and lo + 1 < n:
            u2 = u + (1.0 - u) * rng.betavariate(1, n - lo - 1)  # the next one: the least of the n-lo-1 above u
            x += (values[min(int(n * u2), n - 1)] - x) * frac
        out.append(x)
    return out


def _rate_draws(blocks: list[tuple[float, float]], rng: random.Random, count: int) -> list[float]:
    """Σ tokens / Σ seconds of ``count`` resamples of the blocks (16 ms for a thousand of 100 blocks)."""
    out = []
    for _ in range(count):
        tokens, seconds = map(sum, zip(*rng.choices(blocks, k=len(blocks))))
        out.append(tokens / seconds if seconds else math.inf)
    return out


def _mean_draws(mean: float, sd: float, n: int, rng: random.Random, count: int) -> list[float]:
    """Means drawn from mean + sd / sqrt(n) * T, T ~ Student's t with n - 1 degrees of freedom."""
    df = n - 1
    scale = sd / math.sqrt(n)
    return [mean + scale * rng.gauss(0.0, 1.0) / math.sqrt(2.0 * rng.gammavariate(df / 2.0, 1.0) / df)
            for _ in range(count)]


def _median_draws(values: list[float], rng: random.Random, count: int) -> list[float]:
    n = len(values)
    return [statistics.median(values[int(rng.random() * n)] for _ in range(n)) for _ in range(count)]


def _from_repetitions(reps: list[LevelSummary], get: Callable[[LevelSummary], float | None], rng: random.Random,
                      count: int) -> Draws | None:
    values = [get(r) for r in reps]
    vals = [v for v in values if v is not None]
    if len(vals) < 2 or len(vals) < len(values) or not (mid := statistics.median(vals)):
        return None
    return Draws([d / mid for d in _median_draws(vals, rng, count)], "repetitions", len(vals))


def _from_requests(samples: LevelSamples, metric: str, stream: str, rng: random.Random,
                   count: int) -> Draws | None:
    if metric in QUANTILES:
        name, q, inverse = QUANTILES[metric]
        values = getattr(samples, name)
        if len(values) * min(q, 100 - q) / 100 < TAIL or not (mid := percentile(values, q)):
            return None
        got = samples.drawn.get(stream) or samples.drawn.setdefault(stream, _quantile_draws(values, q, rng, count))
        return Draws([mid / d if d else math.inf for d in got] if inverse else [d / mid for d in got],
                     "requests", len(values))
    b = samples.blocks
    seconds = sum(s for _, s in b)
    if metric not in RATES or len(b) < 2 or not seconds or not (mid := sum(t for t, _ in b) / seconds):
        return None
    got = samples.drawn.get(stream) or samples.drawn.setdefault(stream, _rate_draws(b, rng, count))
    return Draws([d / mid for d in got], "requests", samples.requests)


def _from_mean(summary: LevelSummary, metric: str, rng: random.Random, count: int) -> Draws | None:
    if not isinstance(summary, DepthLevel):
        return None
    value, sd_name, dist_name = MEANS[metric]
    mean, sd, dist = getattr(summary, value), getattr(summary, sd_name), getattr(summary, dist_name)
    n = dist.n if dist is not None else 0
    if not mean or sd is None or n < 2:
        return None
    return Draws([max(d, 1e-12) / mean for d in _mean_draws(mean, sd, n, rng, count)], "mean ± sd", n)


def draws(samples: LevelSamples, summary: LevelSummary, metric: str, get: Callable[[LevelSummary], float | None],
          seed: str, count: int = RESAMPLES) -> Draws | None:
    """The figure ``metric`` (``get`` reads it off a summary) of one side, resampled; None where its samples
    cannot say (no repetitions, no requests, fewer than two values, a figure of zero)."""
    # figures drawn from the same values share their draws: aggregate and per-agent, median TPOT and decode
    stream = "rate" if metric in RATES else ":".join(map(str, QUANTILES[metric][:2])) if metric in QUANTILES \
        else metric
    stream = f"{SEED}:{seed}:{stream}:{count}"
    rng = random.Random(stream)
    if samples.repetitions:
        return _from_repetitions(samples.repetitions, get, rng, count)
    if metric in MEANS:
        return _from_mean(summary, metric, rng, count)
    return _from_requests(samples, metric, stream, rng, count)


@dataclass(frozen=True, slots=True)
class Interval:
    """The interval of a ratio A/B at ``LEVEL``, and what each side's was drawn from."""

    low: float
    high: float
    how_a: str
    how_b: str
    n_a: int
    n_b: int

    def excludes_one(self) -> bool:
        return self.low > 1.0 or self.high < 1.0

    @property
    def how(self) -> str:
        """What the interval was drawn from, in words: "requests (40 and 40)", "repetitions (3) and requests"."""
        if self.how_a == self.how_b:
            return f"{self.how_a} ({self.n_a} and {self.n_b})"
        return f"{self.how_a} ({self.n_a}) and {self.how_b} ({self.n_b})"


def ratio_interval(a: float, b: float, da: Draws, db: Draws) -> Interval:
    """The percentile interval of A/B from the two sides' draws (paired by order; the sides are independent)."""
    ratios = sorted((a * x) / (b * y) if b * y else math.inf for x, y in zip(da.relative, db.relative))
    tail = (1.0 - LEVEL) / 2 * 100
    return Interval(percentile(ratios, tail), percentile(ratios, 100 - tail), da.how, db.how, da.n, db.n)


def interval(a: float, b: float, sa: LevelSamples | None, sb: LevelSamples | None, summary_a: LevelSummary,
             summary_b: LevelSummary, metric: str, get: Callable[[LevelSummary], float | None],
             seeds: Sequence[str]) -> Interval | None:
    """The 95% interval of ``a / b`` (each side's figure ``metric``), or None where a side has no samples."""
    if sa is None or sb is None:
        return None
    da = draws(sa, summary_a, metric, get, seeds[0])
    db = draws(sb, summary_b, metric, get, seeds[1]) if da is not None else None
    if da is None or db is None:
        return None
    return ratio_interval(a, b, da, db)
