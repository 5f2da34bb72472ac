"""Cross-checks against a reference tool run in rounds (A-B, B-A, A-B: a drift of the shared machine falls on both
tools) and decide by medians over the rounds, so that one run a busy machine slowed does not decide. Three rounds
at most; the third runs only when the first two leave a rule open.

The median of three values lies between the other two, whatever the third: if the first two rounds both keep a
median rule, the third cannot break it, and if they straddle its limit, it decides. So a rule on medians is
settled after two rounds when every value the third round could leave as the median keeps it, and running the
third then changes no verdict. What a rule checks of each run on its own (every request completed, the same
prompt tokens sent) is checked on every run made, two or three.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

#: Each round's order of the two tools, "a" the one under test: three rounds at most.
ORDERS = ("ab", "ba", "ab")


def within(values: Sequence[float], lo: float, hi: float) -> bool:
    """Whether the median of ``values`` and any one more value lies in [lo, hi]: it lies between the two."""
    return lo <= min(values) and max(values) <= hi


def ratio_within(ours: Sequence[float], theirs: Sequence[float], lo: float, hi: float) -> bool:
    """Whether median(ours + [x]) / median(theirs + [y]) lies in [lo, hi] for any further positive run x and y:
    each median lies between its two runs, so the ratio lies between the runs' extreme ratios."""
    return lo <= min(ours) / max(theirs) and max(ours) / min(theirs) <= hi


def played(settled: Callable[[], bool]) -> Iterator[tuple[int, str]]:
    """Each round to run, and its order of the two tools: two, and the third unless ``settled()``, asked once
    the two have run, says it cannot change a verdict."""
    for rnd, order in enumerate(ORDERS):
        if rnd == 2 and settled():
            return
        yield rnd, order


def runs_within(ours: Sequence[Mapping[str, float]], theirs: Sequence[Mapping[str, float]], keys: Sequence[str],
                tolerance: float) -> bool:
    """``ratio_within`` both ways by ``tolerance``, for each of ``keys`` of the two tools' runs."""
    return all(ratio_within([r[k] for r in ours], [r[k] for r in theirs], 1 - tolerance, 1 + tolerance)
               for k in keys)
