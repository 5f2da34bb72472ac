"""The cross-checks' early stop (tests/rounds.py): after two rounds that settle a median rule, no third round can
change its verdict, and two that straddle its limit run the third."""

from __future__ import annotations

import random
import statistics

import rounds


def test_a_settled_median_rule_holds_whatever_the_third_round_reads() -> None:
    rng = random.Random(7)
    settled = open_ = 0
    for _ in range(2000):
        two = [rng.uniform(0.8, 1.2) for _ in range(2)]
        lo, hi = 0.9, 1.1
        if rounds.within(two, lo, hi):
            settled += 1
            for third in (0.0, 0.2, 0.95, 1.05, 3.0, rng.uniform(-5, 5)):
                assert lo <= statistics.median([*two, third]) <= hi, (two, third)
        else:
            open_ += 1
            # and one third round exists that breaks it: the rule was open
            assert any(not lo <= statistics.median([*two, third]) <= hi for third in (-1e9, 1e9)), two
    assert settled > 100 and open_ > 100  # both cases were met


def test_a_settled_ratio_of_medians_holds_whatever_either_third_run_reads() -> None:
    rng = random.Random(11)
    settled = open_ = 0
    for _ in range(2000):
        ours = [rng.uniform(0.85, 1.2) for _ in range(2)]
        theirs = [rng.uniform(0.9, 1.1) for _ in range(2)]
        lo, hi = 0.9, 1.1
        thirds = (1e-6, 0.5, 1.0, 2.0, 1e6)
        outcomes = {lo <= statistics.median([*ours, a]) / statistics.median([*theirs, b]) <= hi
                    for a in thirds for b in thirds}
        if rounds.ratio_within(ours, theirs, lo, hi):
            settled += 1
            assert outcomes == {True}, (ours, theirs)
        else:
            open_ += 1
            assert False in outcomes, (ours, theirs)
    assert settled > 100 and open_ > 100


def test_two_rounds_at_least_and_a_third_only_while_a_rule_is_open() -> None:
    asked: list[int] = []

    def settled(answer: bool) -> bool:
        asked.append(len(ran))
        return answer

    for answer, rounds_run in ((True, [(0, "ab"), (1, "ba")]), (False, [(0, "ab"), (1, "ba"), (2, "ab")])):
        ran: list[tuple[int, str]] = []
        asked.clear()
        for rnd in rounds.played(lambda: settled(answer)):
            ran.append(rnd)
        assert ran == rounds_run and asked == [2]  # asked once, after the two


def test_runs_within_holds_every_key_both_ways() -> None:
    ours = [{"a": 1.0, "b": 1.0}, {"a": 1.05, "b": 0.95}]
    theirs = [{"a": 1.0, "b": 1.0}, {"a": 1.02, "b": 1.0}]
    assert rounds.runs_within(ours, theirs, ("a", "b"), 0.10)
    assert not rounds.runs_within(ours, [{"a": 1.0, "b": 1.2}, {"a": 1.0, "b": 1.0}], ("a", "b"), 0.10)
    assert rounds.runs_within(ours, [{"a": 1.0, "b": 1.2}, {"a": 1.0, "b": 1.0}], ("a",), 0.10)
