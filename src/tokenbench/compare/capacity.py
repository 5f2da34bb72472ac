"""Two runs' capacities under their SLOs side by side (``compare_capacity``): each answer, B's over A's where
they compare (one axis, one SLO), a bound said as a bound, and the table that prints both."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..cache_cliff import CHECK as CLIFF_CHECK
from ..capacity import SURE_LEGEND, CapacityAnswer, answer
from ..results import RunResult
from ..slo import SLO
from .levels import times
from .sides import run_name

if TYPE_CHECKING:
    from ..cache_cliff import Cliff

#: How a search ended, as a cell says it (``capacity.Ended``).
_ENDED_CELL = {"resolved": "resolved", "none": "no level met", "all": "every level met",
               "budget": "unresolved", "interrupted": "interrupted", "running": "cut short"}
#: What a side's capacity is, given how its search ended: the number itself, or a bound on it.
Bound = Literal["exact", "at least", "fewer than", "between", "no verdict"]
#: The objective a capacity search adds to an over-saturated level (``capacity.LevelStop.apply``): its limit is
#: that level's own queue, not part of the SLO asked for.
_QUEUE = "queue"


def _value(found: CapacityAnswer, v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:g}" if found.spec.axis == "rate" else f"{v:.0f}"


def _unit(found: CapacityAnswer, v: float | None) -> str:
    return "agent" if found.spec.axis == "concurrency" and v == 1 else found.unit


def bound(found: CapacityAnswer) -> Bound:
    """What ``found.capacity`` says of the box: the capacity itself (a resolved search), a lower bound (every
    level met, or a search cut before it resolved), an upper one (no level met), or nothing."""
    if found.capacity is None:
        return "no verdict" if found.first_fail is None else "fewer than"
    if found.ended == "resolved" and found.first_fail is not None:
        return "exact"
    return "at least" if found.first_fail is None else "between"


def capacity_text(found: CapacityAnswer) -> str:
    """"4 agents", "at least 16 agents", "fewer than 1 agent", "between 4 and 8 agents", "no verdict"."""
    cap, fail, kind = found.capacity, found.first_fail, bound(found)
    if kind == "exact":
        return f"{_value(found, cap)} {_unit(found, cap)}"
    if kind == "at least":
        return f"at least {_value(found, cap)} {found.unit}"
    if kind == "fewer than":
        return f"fewer than {_value(found, fail)} {_unit(found, fail)}"
    if kind == "between":
        return f"between {_value(found, cap)} and {_value(found, fail)} {found.unit}"
    return "no verdict"


def slo_words(found: CapacityAnswer) -> str:
    """The SLO as a buyer reads it ("TTFT p99 <= 2 s"): a capacity run stores it so; a sweep stores its terse
    form (ttft_p99<=2000ms), said again here in words."""
    try:
        return SLO.parse(found.slo.replace("<=", "=").replace(">=", "=")).headline()
    except ValueError:
        return found.slo


def _slo_key(found: CapacityAnswer) -> frozenset[tuple[str, float | None]]:
    """The objectives that decided the verdicts, each with its limit (the errors budget included, an
    over-saturated level's queue not): what makes two searches' capacities comparable."""
    # a cache-cliff search's limit is a share of its own lowest level's (cache_cliff.CHECK): the rule is the same
    # on both sides where the number is not, and the rule is what the words say
    return frozenset((c.name, None if c.name == CLIFF_CHECK else round(c.limit, 9))
                     for v in found.verdicts for c in v.checks if c.name != _QUEUE)


def same_slo(a: CapacityAnswer, b: CapacityAnswer) -> bool:
    ka, kb = _slo_key(a), _slo_key(b)
    if ka and kb:
        # a cliff's share is said in words only ("at least 50% of the lowest level's"): those must agree too
        return ka == kb and (CLIFF_CHECK not in {name for name, _ in ka} or slo_words(a) == slo_words(b))
    return slo_words(a) == slo_words(b)  # no stored checks on a side: the objectives as written


def _ended_warning(side: str, found: CapacityAnswer) -> str | None:
    """A search that did not resolve: what its number is, a bound, said plainly."""
    kind = bound(found)
    cap, fail = _value(found, found.capacity), _value(found, found.first_fail)
    if kind == "exact":
        return None
    if kind == "at least":
        return (f"{side}'s search did not resolve ({_why(found)}): its {cap} {found.unit} is a lower bound, at least "
                f"{cap}" + ("; a higher range would find the limit" if found.ended == "all" else ""))
    if kind == "fewer than":
        return (f"{side}'s search did not resolve (no level it ran met the SLO): it serves fewer than {fail} "
                f"{_unit(found, found.first_fail)}")
    if kind == "between":
        return (f"{side}'s search did not resolve ({_why(found)}): it serves between "
                f"{cap} and {fail} {found.unit} ({cap} met the SLO, {fail} did not)")
    return f"{side}'s search gave no verdict ({_why(found)})"


def _why(found: CapacityAnswer) -> str:
    """Why a search ended where it did, in words."""
    if found.ended == "budget":  # a sweep's levels read as a search: it had no budget, its levels were set so
        return "its time budget ran out" if found.spec.budget_s is not None else \
            "its levels leave a gap between the last that met the SLO and the first that did not"
    return {"interrupted": "it was interrupted", "running": "it was cut short", "none": "no level it ran met the SLO",
            "all": "every level it ran met the SLO"}.get(found.ended, found.ended)


@dataclass(slots=True)
class CapacityComparison:
    """Two runs' capacities under their SLOs: both answers, B's capacity over A's (``ratio``: only on one axis
    under one SLO, and only where the comparison has a direction, see ``ratio_bound``) and what the numbers
    cannot say (``warnings``)."""

    a: str
    b: str
    answer_a: CapacityAnswer
    answer_b: CapacityAnswer
    same_slo: bool
    ratio: float | None = None  # B's capacity / A's
    #: "exact" (both resolved), "at least" (B's a lower bound), "at most" (A's a lower bound); None: no ratio
    ratio_bound: Literal["exact", "at least", "at most"] | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def comparable(self) -> bool:
        return self.same_slo and self.answer_a.spec.axis == self.answer_b.spec.axis

    def verdict(self) -> str | None:
        """One line: "B serves 2.00x the agents of A at TTFT p99 <= 2 s"; None where the capacities do not
        compare (different SLOs or axes) or nothing says which serves more."""
        if not self.comparable:
            return None
        fa, fb = self.answer_a, self.answer_b
        at = f"at {slo_words(fa)}"
        if self.ratio is None or self.ratio_bound is None:
            return _ordered(fa, fb, at)
        if self.ratio_bound == "exact" and _overlap(fa, fb):
            if self.ratio == 1:
                return f"A and B serve the same, {capacity_text(fa)} each, {at}"
            return (f"no difference found: A {capacity_text(fa)}, B {capacity_text(fb)} {at}, within what the "
                    f"searches resolved (A failed at {_value(fa, fa.first_fail)}, B at {_value(fb, fb.first_fail)})")
        flip = {"at least": "at most", "at most": "at least", "exact": "exact"}
        more, less, r, qual = ("B", "A", self.ratio, self.ratio_bound) if self.ratio >= 1 else \
            ("A", "B", 1 / self.ratio, flip[self.ratio_bound])
        what = "agents" if fa.spec.axis == "concurrency" else "request rate"
        if qual == "exact":
            return f"{more} serves {times(r)}x the {what} of {less} {at}"
        if r == 1:  # B/A >= 1 (B serves at least as many) or <= 1 (A does)
            more, less = ("B", "A") if qual == "at least" else ("A", "B")
            return f"{more} serves at least as many {fa.unit} as {less} {at}"
        if qual == "at least":
            return f"{more} serves at least {times(r)}x the {what} of {less} {at}"
        return f"{more} serves at most {times(r)}x the {what} of {less} {at} ({less}'s capacity is a lower bound)"

    def to_dict(self) -> dict[str, object]:
        return {"a": self.answer_a.to_dict(), "b": self.answer_b.to_dict(), "same_slo": self.same_slo,
                "ratio": self.ratio, "ratio_bound": self.ratio_bound, "verdict": self.verdict(),
                "warnings": list(self.warnings)}


def _overlap(fa: CapacityAnswer, fb: CapacityAnswer) -> bool:
    """Both resolved, and each capacity below the other's first fail: the searches cannot tell them apart."""
    return (fa.capacity or 0) < (fb.first_fail or math.inf) and (fb.capacity or 0) < (fa.first_fail or math.inf)


def _ordered(fa: CapacityAnswer, fb: CapacityAnswer, at: str) -> str | None:
    """No ratio (a side met no level, or both are lower bounds): which serves more where the bounds say so."""
    lo = {s: f.capacity or 0.0 for s, f in (("A", fa), ("B", fb))}
    hi = {s: f.first_fail if f.first_fail is not None else math.inf for s, f in (("A", fa), ("B", fb))}
    if bound(fa) == "no verdict" or bound(fb) == "no verdict":
        return None
    for more, less in (("B", "A"), ("A", "B")):
        if hi[less] <= lo[more]:
            found = {"A": fa, "B": fb}
            return (f"{more} serves more {found[more].unit} than {less} {at}: {more} {capacity_text(found[more])}, "
                    f"{less} {capacity_text(found[less])}")
    return None


def compare_capacity(a: RunResult, b: RunResult) -> CapacityComparison | None:
    """Two runs' capacities side by side: each from a ``tokenbench capacity`` run or a sweep with an SLO
    (``capacity.answer``); None where either run has none."""
    fa, fb = answer(a), answer(b)
    if fa is None or fb is None:
        return None
    return compare_answers(fa, fb, run_name(a), run_name(b))


def compare_answers(fa: CapacityAnswer, fb: CapacityAnswer, a: str = "A", b: str = "B") -> CapacityComparison:
    """Two capacity answers side by side: B's over A's where they compare, and what they cannot say."""
    cc = CapacityComparison(a, b, fa, fb, same_slo(fa, fb))
    if not cc.same_slo:
        cc.warnings.append(f"the two searches used different SLOs (A: {slo_words(fa)}; B: {slo_words(fb)}): their "
                           "capacities do not compare, so no ratio is given")
    if fa.spec.axis != fb.spec.axis:
        cc.warnings.append(f"A searched {fa.unit} ({fa.spec.axis}), B {fb.unit} ({fb.spec.axis}): their capacities "
                           "do not compare, so no ratio is given")
    cc.warnings += [w for side, f in (("A", fa), ("B", fb)) if (w := _ended_warning(side, f)) is not None]
    if cc.comparable and fa.capacity and fb.capacity:
        ka, kb = bound(fa), bound(fb)
        cc.ratio_bound = "exact" if ka == kb == "exact" else "at least" if ka == "exact" else \
            "at most" if kb == "exact" else None
        cc.ratio = fb.capacity / fa.capacity if cc.ratio_bound is not None else None
    return cc


def _sure(found: CapacityAnswer) -> str:
    """Whether the verdicts that bracket the capacity are sure: "yes / no" (its pass, then its fail)."""
    def said(value: float | None, met: bool) -> str:
        v = next((v for v in found.verdicts if v.value == value and v.met is met), None)
        return "—" if v is None else "yes" if v.sure else "no"
    return f"{said(found.capacity, True)} / {said(found.first_fail, False)}"


#: What the table's "Sure" row means (as ``tokenbench capacity`` says under its levels).
CAPACITY_LEGEND = SURE_LEGEND + " A verdict not sure may turn on a rerun, and the capacity with it."


def _money(v: float | None, digits: int, currency: str) -> str:
    return "—" if v is None else f"{v:.{digits}f} {currency}"


def capacity_table(cc: CapacityComparison) -> tuple[list[str], list[list[str]]]:
    """Both capacities as a table of 80 columns: the capacity (or its bound), the levels that bracket it and how
    sure they are, the SLO, what the search spent, money and energy where known, and what limited a side when
    it was not the hardware. A row neither side has a figure for is left out."""
    fa, fb = cc.answer_a, cc.answer_b
    rows = [["Capacity", capacity_text(fa), capacity_text(fb)],
            ["Met / failed at", *(f"{_value(f, f.capacity)} / {_value(f, f.first_fail)}" for f in (fa, fb))],
            ["Sure (met / failed)", _sure(fa), _sure(fb)],
            ["SLO", *(slo_words(f) for f in (fa, fb))] if not cc.same_slo else ["SLO", slo_words(fa), "same"],
            ["Ended", *(f"{_ENDED_CELL.get(f.ended, f.ended)}, {len(f.verdicts)} levels" for f in (fa, fb))],
            ["Requests spent", *(f"{f.requests:,}" for f in (fa, fb))]]
    optional = [("Cost per agent-hour", [_money(f.cost_per_agent_hour(), 3, f.currency) for f in (fa, fb)]),
                ("Cost per Mtok out", [_money(f.cost_per_mtok(), 2, f.currency) for f in (fa, fb)]),
                ("J per output token", [f"{j:.3f}" if (j := f.energy()[0]) is not None else "—" for f in (fa, fb)]),
                ("Agents per kW", [f"{k:.1f}" if (k := f.energy()[1]) else "—" for f in (fa, fb)]),
                ("Limit (not the box)", [f.limit if f.limit and f.first_fail is not None else "—" for f in (fa, fb)]),
                *_cliff_rows(fa, fb)]
    rows += [[label, *cells] for label, cells in optional if any(c != "—" for c in cells)]
    return ["Capacity search", "A", "B"], rows


def _cliff_rows(fa: CapacityAnswer, fb: CapacityAnswer) -> list[tuple[str, list[str]]]:
    """A cache-cliff search's: the cached share either side of the cliff, a session's size, the engine's pool."""
    def cells(f: Callable[[Cliff], str | None]) -> list[str]:
        return [(f(c) or "—") if (c := x.cliff) is not None else "—" for x in (fa, fb)]

    def pct(v: float | None) -> str:
        return "—" if v is None else f"{v:.0%}"
    return [("Cached share, warm", cells(lambda c: f"{pct(c.share_kept)} at {c.kept:.0f}" if c.kept else None)),
            ("Cached share, past", cells(lambda c: f"{pct(c.share_fell)} at {c.fell_at:.0f}" if c.fell_at else None)),
            ("Session context", cells(lambda c: f"{c.session_tokens:,.0f} tok mean" if c.session_tokens else None)),
            ("KV pool", cells(lambda c: f"{c.pool.tokens:,} tok, holds {c.holds}" if c.pool else None))]
