"""A capacity answer in words, as the command prints it and a report writes it: the sentence a buyer reads
("this box serves 11 agents ..."), a cache cliff's beside it, and the lines under them (the cliff's arithmetic,
what a level costs, what stopped the box, the search itself)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .layout import plural
from .slo import SloCheck, beside_limit, quantity

if TYPE_CHECKING:
    from .capacity import CapacityAnswer


def amount(found: CapacityAnswer, v: float) -> str:
    """A value on the search's axis with its unit: "1 agent", "12 agents", "3.5 requests/s"."""
    unit = "agent" if found.unit == "agents" and v == 1 else found.unit
    return f"{value_format(found)(v)} {unit}"


def headline(found: CapacityAnswer) -> str:
    """"this box serves 11 agents (11 met the SLO, 12 did not) at TTFT p99 <= 2 s": the sentence a buyer reads."""
    fmt = value_format(found)
    if found.capacity is None and found.first_fail is None:
        return f"no level gave a verdict on {found.slo} ({ENDED[found.ended]})"
    if found.capacity is None:
        return f"no level met {found.slo}: not even {amount(found, found.first_fail or found.spec.low)}"
    if found.first_fail is None:
        why = "every level searched met it: raise the range's top" if found.ended == "all" else \
            f"{ENDED[found.ended]} before the limit was found"
        return f"this box serves at least {amount(found, found.capacity)} at {found.slo} ({why})"
    return (f"this box serves {amount(found, found.capacity)} ({fmt(found.capacity)} met the SLO, "
            f"{fmt(found.first_fail)} did not) at {found.slo}")


def value_format(found: CapacityAnswer) -> Callable[[float | None], str]:
    return (lambda v: f"{v:g}" if v is not None else "?") if found.spec.axis == "rate" else \
        (lambda v: f"{v:.0f}" if v is not None else "?")


def money_lines(found: CapacityAnswer) -> list[str]:
    out = []
    per_agent, per_mtok = found.cost_per_agent_hour(), found.cost_per_mtok()
    if per_agent is not None or per_mtok is not None:
        parts = [f"{per_agent:.3f} {found.currency} per agent-hour"] if per_agent is not None else []
        parts += [f"{per_mtok:.2f} {found.currency} per million output tokens"] if per_mtok is not None else []
        out.append(", ".join(parts) + " at that load")
    j, per_kw = found.energy()
    if j is not None:
        tele = found.at.telemetry if found.at is not None else None
        measures = f" ({tele.power_measures} power)" if tele is not None and tele.power_measures else ""
        out.append(f"{j:.3f} J per output token" + (f", {per_kw:.1f} agents per kW" if per_kw else "") + measures)
    return out


ENDED = {"resolved": "resolved", "none": "no level met the SLO", "all": "every level met the SLO",
         "budget": "the time budget ran out before the search resolved", "interrupted": "interrupted",
         "running": "cut short"}


def answer_lines(found: CapacityAnswer) -> tuple[list[str], list[str]]:
    """The answer's sentences (its headline, and a cliff's), and the lines under them."""
    sentences = [headline(found), *([found.cliff.headline()] if found.cliff is not None else [])]
    details = [*(found.cliff.explained() if found.cliff is not None else []), *money_lines(found)]
    if found.limit is not None and found.first_fail is not None:
        details.append(f"limit at {amount(found, found.first_fail)}: {found.limit}")
    if (unsure := _unsure(found)) is not None:
        details.append(unsure)
    details.append(f"search: {plural(len(found.verdicts), 'level')}, {plural(found.requests, 'request')}, "
                   f"{ENDED[found.ended]}")
    return sentences, details


def _unsure(found: CapacityAnswer) -> str | None:
    """The verdicts the answer rests on (the last pass, the first fail) that are not sure: a rerun may turn them,
    and the capacity with them."""
    at = {v.value: v for v in found.verdicts}
    fmt = value_format(found)
    said = [f"the {what} at {fmt(value)}" for value, what in ((found.capacity, "pass"), (found.first_fail, "fail"))
            if value is not None and (v := at.get(value)) is not None and v.met is not None and not v.sure]
    if not said:
        return None
    return (f"not sure: {' and '.join(said)} may turn on a rerun, and the capacity with it (Sure below; more "
            "requests a level make a verdict sure)")


def verdict_table(found: CapacityAnswer) -> tuple[list[str], list[list[str]]]:
    """Each level the search ran, in the order of its value: its verdict, how sure, the requests it spent, and
    each objective's figure (with the limit where it failed)."""
    header = ["Agents" if found.spec.axis == "concurrency" else "Rate req/s", "SLO", "Sure", "Requests",
              "Objectives"]
    fmt_v = value_format(found)
    rows = [[fmt_v(v.value), "-" if v.met is None else "pass" if v.met else "FAIL",
             "-" if v.met is None else "yes" if v.sure else "no", str(v.requests),
             "; ".join(check_text(c) for c in v.checks if c.name != "errors" or not c.met) + _stopped(v.stopped)]
            for v in sorted(found.verdicts, key=lambda v: v.value)]
    return header, rows


def check_text(c: SloCheck) -> str:
    """One objective at one level: its value, and the limit where it failed."""
    value = "-" if c.value is None else quantity(c.value, c.unit) if c.met else beside_limit(c.value, c.limit, c.unit)
    limit = "" if c.met else f" (limit {quantity(c.limit, c.unit)})"
    over = f", {c.over}/{c.n} {'under' if c.unit == 'tok/s' else 'over'}" if c.over is not None else ""
    more = f", sure from {c.needed}" if c.met and not c.sure and c.needed else ""
    return f"{c.name} {value}{limit}{over}{more}"


def _stopped(reason: str | None) -> str:
    # the why in short ("the p90 cannot pass"); the whole reason is the level's stopped_early note above
    return f" (stopped early: {reason.rsplit(': ', 1)[-1]})" if reason else ""
