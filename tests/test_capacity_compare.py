"""Two boxes' capacities side by side (issue 22): ``tokenbench compare A B`` where both runs answer how many
agents their box serves within an SLO (a ``tokenbench capacity`` run, or a sweep with --slo). Two searches
bisect to levels of their own, so they often share no operating point; compare said so and stopped there.

The answers are built by hand for the rules (which side serves more, by how much, and when a number is only a
bound), and measured against the emitter set to saturate for the command: a box whose streams slow twice as fast
with each stream serves fewer agents at the same per-agent rate."""

from __future__ import annotations


import pytest

from tokenbench.capacity import CapacityAnswer, SearchSpec, Verdict
from tokenbench.compare import capacity_table, compare_answers
from tokenbench.slo import SloCheck

# ------------------------------------------------------------------------------------------------------------
# The rules, on answers built by hand


def _checks(limit: float, met: bool, name: str = "agent_tps") -> list[SloCheck]:
    return [SloCheck(name, 100.0 if met else 50.0, limit, "tok/s", met, 24, None, 0.01 if met else 0.01),
            SloCheck("errors", 0.0, 0.0, "share", True, 24, 0, 1.0)]


def found(capacity: float | None, first_fail: float | None, ended: str = "resolved", axis: str = "concurrency",
          limit: float = 90.0, slo: str = ">= 90 tok/s each", name: str = "agent_tps") -> CapacityAnswer:
    """An answer whose levels met the SLO at ``capacity`` and failed it at ``first_fail``."""
    levels = [(v, met) for v, met in ((capacity, True), (first_fail, False)) if v is not None]
    verdicts = [Verdict(v, met, _checks(limit, met, name), 24, None, i) for i, (v, met) in enumerate(levels)]
    spec = SearchSpec(axis, 1, 64)  # type: ignore[arg-type]
    return CapacityAnswer(spec, slo, ended, verdicts, capacity, first_fail, None, None)  # type: ignore[arg-type]


def test_the_box_serving_more_is_named_with_its_ratio_either_way_round() -> None:
    cc = compare_answers(found(2, 3), found(4, 5))
    assert cc.ratio == 2.0 and cc.ratio_bound == "exact" and not cc.warnings
    assert cc.verdict() == "B serves 2.00x the agents of A at >= 90 tok/s each"
    flipped = compare_answers(found(4, 5), found(2, 3))
    assert flipped.ratio == 0.5 and flipped.verdict() == "A serves 2.00x the agents of B at >= 90 tok/s each"


def test_equal_capacities_are_the_same_and_rates_within_the_resolution_show_no_difference() -> None:
    assert compare_answers(found(4, 5), found(4, 5)).verdict() == \
        "A and B serve the same, 4 agents each, at >= 90 tok/s each"
    # a rate search stops within 10%: 10 (failed 10.8) and 10.4 (failed 11.2) are one capacity as far as it knows
    cc = compare_answers(found(10, 10.8, axis="rate"), found(10.4, 11.2, axis="rate"))
    assert cc.ratio == pytest.approx(1.04)
    said = cc.verdict() or ""
    assert said.startswith("no difference found: A 10 requests/s, B 10.4 requests/s") and "1.04x" not in said
    apart = compare_answers(found(10, 10.8, axis="rate"), found(12, 13, axis="rate"))
    assert apart.verdict() == "B serves 1.20x the request rate of A at >= 90 tok/s each"


def test_a_search_that_did_not_resolve_is_a_bound_said_as_one() -> None:
    every, none = found(16, None, "all"), found(None, 1, "none")
    assert [row[1] for row in capacity_table(compare_answers(every, none))[1][:2]] == ["at least 16 agents", "16 / —"]
    assert capacity_table(compare_answers(every, none))[1][0][2] == "fewer than 1 agent"
    # B at least 16 against A's 4: B serves at least 4x; the other way round, A at least 4x
    cc = compare_answers(found(4, 5), every)
    assert (cc.ratio, cc.ratio_bound) == (4.0, "at least")
    assert cc.verdict() == "B serves at least 4.00x the agents of A at >= 90 tok/s each"
    assert any("B's search did not resolve (every level it ran met the SLO): its 16 agents is a lower bound, at "
               "least 16" in w for w in cc.warnings)
    assert compare_answers(every, found(4, 5)).verdict() == \
        "A serves at least 4.00x the agents of B at >= 90 tok/s each"
    # A only known to be at least 4 and B exactly 8: B serves at most twice A's, not surely more
    cc = compare_answers(found(4, None, "all"), found(8, 9))
    assert cc.ratio_bound == "at most" and cc.verdict() == \
        "B serves at most 2.00x the agents of A at >= 90 tok/s each (A's capacity is a lower bound)"
    # no level met on A: no ratio, but which serves more is known
    cc = compare_answers(none, found(4, 5))
    assert cc.ratio is None and cc.verdict() == \
        "B serves more agents than A at >= 90 tok/s each: B 4 agents, A fewer than 1 agent"
    assert any("A's search did not resolve (no level it ran met the SLO): it serves fewer than 1 agent" in w
               for w in cc.warnings)
    # two lower bounds: nothing says which serves more
    both = compare_answers(found(4, None, "all"), found(8, None, "all"))
    assert both.ratio is None and both.verdict() is None
    gap = compare_answers(found(4, 8, "budget"), found(16, 17))
    assert capacity_table(gap)[1][0][1] == "between 4 and 8 agents" and gap.ratio_bound == "at most"
    assert any("its levels leave a gap" in w for w in gap.warnings)


def test_capacities_under_different_slos_or_axes_do_not_compare() -> None:
    cc = compare_answers(found(2, 3), found(4, 5, limit=60, slo=">= 60 tok/s each"))
    assert not cc.same_slo and cc.ratio is None and cc.verdict() is None
    assert cc.warnings == ["the two searches used different SLOs (A: >= 90 tok/s each; B: >= 60 tok/s each): their "
                           "capacities do not compare, so no ratio is given"]
    assert ["SLO", ">= 90 tok/s each", ">= 60 tok/s each"] in capacity_table(cc)[1]
    other = compare_answers(found(2, 3, slo="ttft_p99<=2000ms", name="ttft_p99", limit=2000.0),
                            found(4, 5, slo="TTFT p99 <= 3 s", name="ttft_p99", limit=3000.0))
    assert other.verdict() is None and "A: TTFT p99 <= 2 s; B: TTFT p99 <= 3 s" in other.warnings[0]
    axes = compare_answers(found(2, 3), found(4, 5, axis="rate"))
    assert axes.ratio is None and axes.verdict() is None
    assert any("A searched agents (concurrency), B requests/s (rate)" in w for w in axes.warnings)


def test_one_slo_written_two_ways_is_one_slo() -> None:
    """A sweep stores its SLO tersely (ttft_p99<=2000ms), a capacity run in words: the objectives that decided the
    verdicts, and their limits, say whether the SLOs are one."""
    cc = compare_answers(found(2, 3, slo="ttft_p99<=2000ms", name="ttft_p99", limit=2000.0),
                         found(4, 5, slo="TTFT p99 <= 2 s", name="ttft_p99", limit=2000.0))
    assert cc.same_slo and cc.verdict() == "B serves 2.00x the agents of A at TTFT p99 <= 2 s"
