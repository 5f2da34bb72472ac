"""Paired statistics for two runs of the same items, written with the standard library only.

- McNemar's exact test for pass/fail items: only the discordant pairs carry information; under "no difference"
  each is equally likely to favour either run, so their split is Binomial(b + c, 1/2). Two-sided p-value:
  ``min(1, 2 * P(X <= min(b, c)))``.
- Newcombe's (1998) score interval for the difference of two paired shares (pass/fail items): each run's share
  gets Wilson's interval, and the two are combined through the correlation of the pairs (its phi, continuity
  corrected as Newcombe's paper gives it where the runs agree more than chance). Unlike a bootstrap, it never
  collapses where every pair agrees: 6 items all passed by both runs span -39 to +39 points, 400 about +-0.5.
- A paired bootstrap interval for the difference of means of other scores: resample items (pairs) with
  replacement, a seeded generator, the 2.5th and 97.5th percentiles of the resampled mean differences.
- A paired sign-flip permutation test for scores that are not pass/fail.
- The items needed to detect a given difference at 80% power and a 5% two-sided level: Connor's (1987) sample
  size for McNemar's test from the discordant share; for scores, the normal approximation from the spread of
  the paired differences.
- Wilson's score interval for a share (agreement).
- Fisher's exact test, one-sided, for "do two hosts' outputs differ more often than the same host's twice?":
  given how many pairs differ in all (both comparisons together), the share of them that fall in the
  comparison of the two hosts is hypergeometric under "no difference"; the p-value is its upper tail.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from statistics import NormalDist, fmean, stdev

#: Two-sided significance level of every verdict.
ALPHA = 0.05
#: Power at which "items needed" is computed.
POWER = 0.80
#: Bootstrap resamples and sign-flip permutations (a 95% percentile interval is stable to about ±0.2 points
#: at 4,000 resamples for a few hundred items).
RESAMPLES = 4000
#: The difference people ask about: "within 1 to 2 points".
DETECT_POINTS = 2.0


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value; ``b`` pairs where only A passed, ``c`` where only B passed."""
    if b < 0 or c < 0:
        raise ValueError("counts must be >= 0")
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2.0 * float(tail))


def bootstrap_interval(diffs: list[float], seed: int = 0, resamples: int = RESAMPLES,
                       level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the mean of ``diffs`` (paired differences), resampling pairs."""
    if not diffs:
        raise ValueError("no pairs")
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(resamples))
    lo_i = int(math.floor((1 - level) / 2 * resamples))
    hi_i = min(resamples - 1, int(math.ceil((1 + level) / 2 * resamples)) - 1)
    return means[lo_i], means[hi_i]


def sign_flip_p(diffs: list[float], seed: int = 0, resamples: int = RESAMPLES) -> float:
    """Two-sided p-value of a paired permutation test: under "no difference" each pair's sign is a coin flip."""
    nonzero = [d for d in diffs if d != 0]
    if not nonzero:
        return 1.0
    observed = abs(sum(nonzero))
    rng = random.Random(seed)
    hits = sum(abs(sum(d if rng.random() < 0.5 else -d for d in nonzero)) >= observed - 1e-12
               for _ in range(resamples))
    return (hits + 1) / (resamples + 1)


def fisher_greater(k1: int, n1: int, k0: int, n0: int) -> float:
    """One-sided p-value of Fisher's exact test that ``k1`` of ``n1`` is a larger share than ``k0`` of ``n0``:
    P(X >= k1), X hypergeometric (``n1`` drawn from ``n1 + n0`` of which ``k1 + k0`` count)."""
    if not (0 <= k1 <= n1 and 0 <= k0 <= n0):
        raise ValueError("counts must be within 0..n")
    n, k = n1 + n0, k1 + k0
    if n1 == 0 or k1 == 0:
        return 1.0
    tail = sum(math.comb(k, x) * math.comb(n - k, n1 - x) for x in range(k1, min(k, n1) + 1))
    return min(1.0, tail / math.comb(n, n1))


def _z(q: float) -> float:
    return NormalDist().inv_cdf(q)


def items_needed_binary(discordant_share: float, delta: float = DETECT_POINTS / 100, alpha: float = ALPHA,
                        power: float = POWER) -> int:
    """Pairs needed for McNemar's test to detect a difference ``delta`` (a share), Connor (1987):
    n = (z_{1-α/2}·√ψ + z_{power}·√(ψ - δ²))² / δ², with ψ the share of discordant pairs. A difference δ
    needs at least δ of the pairs discordant, so ψ is taken as at least δ (identical runs give the least n)."""
    psi = max(discordant_share, delta)
    n = (_z(1 - alpha / 2) * math.sqrt(psi) + _z(power) * math.sqrt(max(psi - delta**2, 0.0))) ** 2 / delta**2
    return math.ceil(n)


def items_needed_scores(sd_diff: float, delta: float = DETECT_POINTS / 100, alpha: float = ALPHA,
                        power: float = POWER) -> int | None:
    """Pairs needed to detect a mean difference ``delta`` given the spread of paired differences (normal
    approximation): n = ((z_{1-α/2} + z_{power}) · sd / δ)². None when the differences have no spread."""
    if sd_diff <= 0:
        return None
    return math.ceil(((_z(1 - alpha / 2) + _z(power)) * sd_diff / delta) ** 2)


def wilson_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval for a share k/n."""
    if n == 0:
        return 0.0, 1.0
    z = _z(1 - (1 - level) / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def paired_share_interval(a_only: int, b_only: int, both: int, neither: int,
                          level: float = 0.95) -> tuple[float, float]:
    """Newcombe's (1998, "Improved confidence intervals for the difference between binomial proportions based on
    paired data") hybrid score interval for A's pass share less B's, over pairs where only A passed, only B
    passed, both and neither: Wilson's interval for each share, combined through the pairs' phi coefficient, taken
    as max(both·neither − a_only·b_only − n/2, 0) / √(product of the margins) where the runs agree more than
    chance (the paper's continuity correction; uncorrected, two runs that agree on every item of mixed outcome
    would get a zero-width interval), as 0 where a margin is empty."""
    n = a_only + b_only + both + neither
    if n == 0:
        return -1.0, 1.0
    pa, pb = (both + a_only) / n, (both + b_only) / n
    (la, ua), (lb, ub) = wilson_interval(both + a_only, n, level), wilson_interval(both + b_only, n, level)
    margins = (both + a_only) * (b_only + neither) * (both + b_only) * (a_only + neither)
    agree = both * neither - a_only * b_only
    phi = 0.0 if margins == 0 else (max(agree - n / 2, 0.0) if agree > 0 else agree) / math.sqrt(margins)
    below = math.sqrt(max(0.0, (pa - la) ** 2 - 2 * phi * (pa - la) * (ub - pb) + (ub - pb) ** 2))
    above = math.sqrt(max(0.0, (ua - pa) ** 2 - 2 * phi * (ua - pa) * (pb - lb) + (pb - lb) ** 2))
    return max(-1.0, pa - pb - below), min(1.0, pa - pb + above)


Verdict = str  # "same within noise" | "A better" | "B better"


@dataclass(slots=True)
class Paired:
    """Two runs' scores on the same items, compared."""

    n: int
    mean_a: float
    mean_b: float
    diff_points: float  # (A - B) in points (percentage points for shares)
    ci_points: tuple[float, float]
    p_value: float
    test: str  # "mcnemar" | "sign-flip"
    a_only: int | None  # pass/fail: pairs only A passed
    b_only: int | None
    items_needed: int | None  # to detect a DETECT_POINTS difference
    verdict: Verdict

    def verdict_for(self, name_a: str, name_b: str) -> str:
        """The verdict with the runs' names for A and B."""
        return self.verdict.replace("A better", f"{name_a} better").replace("B better", f"{name_b} better")

    def to_dict(self) -> dict[str, object]:
        return {"n": self.n, "score_a": self.mean_a, "score_b": self.mean_b, "diff_points": self.diff_points,
                "ci_points": list(self.ci_points), "p_value": self.p_value, "test": self.test,
                "a_only": self.a_only, "b_only": self.b_only, "items_needed_2pt": self.items_needed,
                "verdict": self.verdict}


def compare_paired(a: list[float], b: list[float], seed: int = 0, alpha: float = ALPHA) -> Paired:
    """Compare paired scores (``a[i]`` and ``b[i]`` are the same item). Pass/fail (all 0 or 1) uses McNemar's
    exact test and Newcombe's paired score interval, other scores a sign-flip permutation test and the paired
    bootstrap interval."""
    if len(a) != len(b) or not a:
        raise ValueError("need the same, non-zero number of scores in both runs")
    diffs = [x - y for x, y in zip(a, b)]
    binary = all(v in (0.0, 1.0) for v in a + b)
    if binary:
        b_only_a = sum(1 for x, y in zip(a, b) if x > y)
        b_only_b = sum(1 for x, y in zip(a, b) if y > x)
        both = sum(1 for x, y in zip(a, b) if x == y == 1.0)
        lo, hi = paired_share_interval(b_only_a, b_only_b, both, len(a) - b_only_a - b_only_b - both)
        p = mcnemar_exact(b_only_a, b_only_b)
        needed: int | None = items_needed_binary((b_only_a + b_only_b) / len(a))
        test, ao, bo = "mcnemar", b_only_a, b_only_b
    else:
        lo, hi = bootstrap_interval(diffs, seed)
        p = sign_flip_p(diffs, seed)
        needed = items_needed_scores(stdev(diffs) if len(diffs) > 1 else 0.0)
        test, ao, bo = "sign-flip", None, None
    diff = fmean(diffs)
    verdict = "same within noise" if p >= alpha else ("A better" if diff > 0 else "B better")
    return Paired(len(a), fmean(a), fmean(b), 100 * diff, (100 * lo, 100 * hi), p, test, ao, bo, needed, verdict)
