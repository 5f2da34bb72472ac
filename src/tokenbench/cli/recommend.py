"""``tokenbench recommend``: its typed config (``recommend.RecommendConfig``), one library call
(``recommend.recommend``) and the printing of what comes back."""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console

from ..candidates import figure_span, figures_text
from ..console import print_hanging
from ..money import DEFAULT_KWH_PRICE
from ..errors import UsageError
from ..slo import duration_text, parse_duration_ms
from .common import check_output, emit_json
from .grammar.recommend import DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN

if TYPE_CHECKING:
    from ..candidates import Workload
    from ..recommend import Candidate, RecommendConfig, Recommendation


def recommend_config(a: argparse.Namespace) -> RecommendConfig:
    from ..recommend import RecommendConfig
    from .common import tokens
    from .predicting import session_shape

    given = [f for f, v in (("--turns", a.turns), ("--shared-prefix", a.shared_prefix), ("--tool-len", a.tool_len),
                            ("--think-time", a.think_time), ("--max-context", a.max_context)) if v is not None]
    if a.sessions is None and given:
        raise UsageError(f"{', '.join(given)} describe{'s' if len(given) == 1 else ''} an agent's session: add "
                         "--sessions")
    if a.sessions:  # predict's N (sessions in all) has no meaning here: it was taken and ignored
        raise UsageError(f"--sessions {a.sessions}: recommend's team is --agents N; write --sessions alone")
    shape = session_shape(a) if a.sessions is not None else None
    input_len = output_len = 0
    if shape is None:
        input_len = tokens(a.input_len, "--input-len") if a.input_len else DEFAULT_INPUT_LEN
        output_len = tokens(a.output_len, "--output-len") if a.output_len else DEFAULT_OUTPUT_LEN
    return RecommendConfig(a.model, a.agents, input_len, output_len,
                           parse_duration_ms(a.ttft_p99) if a.ttft_p99 else None,
                           parse_duration_ms(a.tpot) if a.tpot else None, a.currency, prices=tuple(a.price),
                           owned=tuple(a.owned), kwh_price=a.kwh_price, runs=tuple(a.runs), capacity=a.capacity,
                           parity_with=a.parity_with, latest=a.latest, db=a.db, sessions=shape, parallel=a.parallel)


def cmd_recommend(a: argparse.Namespace, console: Console) -> int:
    from ..console import print_table
    from ..recommend import recommend

    check_output(a.json, "--json")
    done = recommend(recommend_config(a))
    head, row = _recommend_head(a, done, console)
    if done.ranked:
        # engine and source said once where every box shares them; notes under the table where they do not fit
        print_table(console, head, [row(i, c) for i, c in enumerate(done.ranked)], a.format,
                    keep=(0, 1, *range(4, len(head) - 1)), aside=len(head) - 1)
        bands = band_line(done.ranked)
        for line in filter(None, (team_line(done), unsure_line(done), kv_line(done.ranked),
                                  memory_line(done.ranked, done.workload), bands)):
            print_hanging(console, line)
        if other := other_model_line(done.ranked, a.model):
            print_hanging(console, other, style="yellow")
    elif done.closest:
        _print_closest(console, done.closest, a.currency)
    else:
        console.print("no box fits, meets the SLOs and has a price", style="yellow", markup=False)
    _print_yours(console, done.excluded, done.closest, a.currency)
    _print_excluded(console, done.excluded, done.closest)
    if a.owned:
        print_hanging(console, f"owned boxes: purchase over its years, plus its watts at {a.kwh_price:g} "
                      f"{a.currency}/kWh" + (" (the default --kwh-price)" if a.kwh_price == DEFAULT_KWH_PRICE else ""))
    if a.json:
        emit_json(a.json, done.to_dict())
    return 0


def _recommend_row(i: int, c: Candidate) -> list[str]:
    return [str(i + 1), c.box, c.setup, c.mark, f"{c.throughput:,.0f}" if c.throughput else "—",
            f"{c.ttft_p99_ms:,.0f}" if c.ttft_p99_ms else "—",
            f"{c.tpot_ms:.1f}" if c.tpot_ms else "—", f"{c.cost_per_mtok:.2f}" if c.cost_per_mtok else "—",
            "; ".join(c.notes)]


def _capacity_row(i: int, c: Candidate) -> list[str]:
    """--capacity: the agents a box serves within the SLOs ('>=' where every count tried met them), the boxes the
    team needs, and the price per agent-hour and per million tokens there (an agent-hour at a capacity that is a
    floor costs at most that: '<=')."""
    agents = f"{'>=' if c.at_least else ''}{c.capacity}"
    return [str(i + 1), c.box, c.setup, c.mark, agents, str(c.boxes) if c.boxes else "—",
            f"{'<=' if c.at_least else ''}{c.cost_per_agent_hour:.3f}" if c.cost_per_agent_hour else "—",
            f"{c.cost_per_mtok:.2f}" if c.cost_per_mtok else "—", "; ".join(c.notes)]


def _sessions_row(i: int, c: Candidate) -> list[str]:
    """--sessions: as --capacity, with the TTFT p99 at that many agents in place of the price per million tokens:
    what decided the capacity."""
    row = _capacity_row(i, c)
    row[7] = f"{c.ttft_p99_ms / 1000:,.2f}" if c.ttft_p99_ms else "—"
    del row[5]  # the boxes the team needs: the line under the table, with what they cost it
    return row


def team_line(done: Recommendation) -> str | None:
    """By capacity: what the team of --agents pays an hour on each box, for the boxes it needs (a box serving more
    agents than the team has is paid whole), cheapest first: the ranking per agent-hour at each box's capacity
    says which box is the better buy per agent, this what the team pays."""
    if not done.capacity:
        return None
    n, cur = done.workload.agents, done.workload.currency
    # by the hour, ties in ranked order (two boxes at one price: a Candidate has no order of its own)
    teams = sorted(((c.boxes * c.cost_per_agent_hour * c.capacity, c) for c in done.ranked
                    if c.boxes and c.capacity and c.cost_per_agent_hour), key=lambda t: t[0])
    if not teams:
        return None
    # the table's per agent-hour is at the box's capacity; a team that leaves a box part idle pays it whole
    said = [f"{c.box} x{c.boxes}{_slow_end(c, n)}, {cur} {hourly:,.2f}/hour ({hourly / n:.3f} per agent-hour"
            f"{', whole boxes paid' if (c.boxes or 0) * (c.capacity or 0) > n else ''})" for hourly, c in teams]
    return f"for {n} agents: " + "; ".join(said)


def _slow_end(c: Candidate, n: int) -> str:
    """The boxes a predicted box's team needs with every figure at the slow end of its band, where that is more
    than its estimate needs: how far the answer may move."""
    if c.capacity_band is None or c.boxes is None:
        return ""
    low = c.capacity_band[0]
    if low <= 0:
        return " (at the slow end of its bands it serves none)"
    need = -(-n // low)
    return f" (x{need} at the slow end of its bands)" if need > c.boxes else ""


def unsure_line(done: Recommendation) -> str | None:
    """The ranked boxes whose predicted TTFT p99 or TPOT meets its limit while the slow end of its band does not:
    a ranking at the estimate that its band could overturn (by capacity, the team line says as much in boxes)."""
    if done.capacity:
        return None
    w, said = done.workload, []
    for c in done.ranked:
        if c.source != "predicted":
            continue
        for name, metric, value, limit in (("TTFT p99", "ttft", c.ttft_p99_ms, w.ttft_p99_ms),
                                           ("TPOT", "tpot", c.tpot_ms, w.tpot_ms)):
            if value is None or limit is None or metric not in c.bands:
                continue
            slow = value * (1 + c.bands[metric] / 100)
            if value <= limit < slow:
                said.append(f"{c.box} ({name} {duration_text(value)}, {duration_text(slow)} at the slow end of its "
                            f"band, against {duration_text(limit)})")
    return "within their bands these may miss the SLOs: " + "; ".join(said) if said else None


#: The bands a ranking's predicted figures are said with, and how each is named.
BAND_NAMES = (("throughput", "tok/s"), ("ttft", "TTFT"), ("tpot", "TPOT"))


def agents_span(low: int, high: int, every: bool) -> str:
    """The capacity at the slow and the fast end of the bands: "49 to 74", "40 to at least 128" where the fast end
    met the SLOs at every level searched, "at least 128" where the slow end did too, "4" where both ends agree."""
    if low == high:
        return f"at least {high}" if every else str(high)
    return f"{low} to {'at least ' if every else ''}{high}"


def band_line(ranked: list[Candidate]) -> str | None:
    """Every predicted figure's band, said once for the boxes that share them: 80% of held-out rows of their kind
    measured within it (a borrowed band, at least 80%); measured figures are the run's own."""
    groups: dict[str, list[str]] = {}
    held = False  # a band's fast end held at its limit, said in the legend
    for c in ranked:
        spans = [(name, sp) for m, name in BAND_NAMES if (sp := figure_span(c, m)) is not None]
        said = ", ".join(f"{name} {sp.text()}" for name, sp in spans)
        if c.capacity_band is not None:  # the capacity searched again with every figure at either end of its band
            said = f"agents {agents_span(*c.capacity_band)}, " + said
        if c.source == "predicted" and said:
            groups.setdefault(said, []).append(c.box)
            held |= any(sp.held for _, sp in spans)
    if not groups:
        return None
    return ("bands of the predicted figures (80% of held-out rows of the same kind measured within them; "
            "predict.md, Reading the bands; agents: the capacity with every figure at the slow end of its band, and "
            "at the fast end" + ("; a fast end held at the physical limit reads +H/−L%, or ≤Nx for a rate's"
                                 if held else "")
            + "): " + "; ".join(f"{', '.join(boxes)}: {said}"
                                                          for said, boxes in groups.items()))


def _print_yours(console: Console, excluded: list[Candidate], shown: list[Candidate], currency: str) -> None:
    """Every box the user priced that is out of the ranking, with its figures and why it is out: the box a buyer
    priced is the one they ask about, never hidden in a group."""
    for c in excluded:
        if c.priced and not any(c is x for x in shown):
            print_hanging(console, f"your box {c.box} ({c.setup}, {c.mark}): {c.excluded}; {figures_text(c, currency)}")


#: Boxes an exclusion line names before it counts the rest.
EXCLUDED_NAMED = 8


def _print_excluded(console: Console, excluded: list[Any], shown: list[Any]) -> None:
    """Stored runs one by one; the catalog's predicted boxes by reason, the nearest to meeting the SLOs first, at
    most EXCLUDED_NAMED named and none of those ``shown`` above (the catalog is long: 40 lines of it hid the
    ranking); a box the user priced is said on its own line (``_print_yours``), never in a group."""
    groups: dict[str, list[Any]] = {}
    for c in excluded:
        if c.stored and not c.priced and not any(c is x for x in shown):
            print_hanging(console, f"excluded {c.box} ({c.mark}): {c.excluded}")
        elif not (c.stored or c.priced):
            groups.setdefault(c.reason or "", []).append(c)
    for reason, cs in groups.items():
        if len(cs) == 1:
            if not any(cs[0] is x for x in shown):
                print_hanging(console, f"excluded {cs[0].box} (predicted): {cs[0].excluded}")
        elif line := _group_line(reason, cs, shown):
            print_hanging(console, line)


def _group_line(reason: str, cs: list[Any], shown: list[Any]) -> str | None:
    """One reason's predicted boxes in a line: the nearest first, EXCLUDED_NAMED named, the rest counted."""
    from ..recommend import shortfall

    rest = sorted((c for c in cs if not any(c is x for x in shown)),  # stable: catalog order where no shortfall
                  key=lambda c: shortfall(c) or (0, 0.0))
    above = len(cs) - len(rest)
    if not rest:
        return None
    named = ", ".join(c.box for c in rest[:EXCLUDED_NAMED])
    more = [f"{len(rest) - EXCLUDED_NAMED} more"] if len(rest) > EXCLUDED_NAMED else []
    more += [f"the {above} above"] if above else []
    tail = (", " if named and len(more) == 2 else " and " if named else "") + " and ".join(more)
    remedy = " (give --price ID=PER_HOUR or --owned ID=PURCHASE:YEARS:WATTS)" if reason == "no price" else ""
    return (f"excluded, {reason}{remedy}: {named}{tail if more else ''} ({len(cs)} predicted boxes; "
            "--json has each one's figures)")


def other_model_line(ranked: list[Candidate], model: str) -> str | None:
    """The ranked runs measured with a model of another name: their figures are that model's, ranked as given
    (a server may name the model its own way), said apart from the notes, where a tiny test model ranked first
    for a 35B one read as an answer."""
    said = [f"{c.box} ({c.other_model})" for c in ranked if c.other_model]
    if not said:
        return None
    return (f"measured with another model than {model}: {', '.join(said)}; {'its' if len(said) == 1 else 'their'} "
            "figures are that model's, ranked as given: give runs of this model, or rank for the model measured")


def memory_line(ranked: list[Candidate], w: Workload) -> str | None:
    """What a memory-bound capacity assumes, where one is ranked: every agent's context at its longest at once (a
    session's last turn), which the bands, being the speed's, can lower but never raise."""
    from ..boxes import MEMORY_BOUND, context

    bound = [c.box for c in ranked if MEMORY_BOUND in c.notes]
    if not bound:
        return None
    at = "every session at its last turn at once" if w.sessions is not None else "every request at once"
    return (f"{MEMORY_BOUND}: {', '.join(bound)}: one agent more does not fit beside the weights, with {at} "
            f"({context(w):,} tokens each); the speed's bands can lower {'such a' if len(bound) > 1 else 'this'} "
            "capacity, never raise it"
            + ("; `predict --sessions` says how many sessions stay warm at a session's mean context"
               if w.sessions is not None else ""))


def kv_line(ranked: list[Candidate]) -> str | None:
    """The KV cache each predicted setup in the ranking assumes, said once per setup, and each saved prediction's
    by its name (it moves the numbers: an fp8 cache holds twice the tokens of a 16-bit one and reads half the
    bytes; a box saved with a 16-bit cache ranked below itself predicted afresh with fp8, and nothing said why);
    None when none is predicted."""
    said = {f"{c.kv}{' (the model dtype)' if c.kv == 'auto' else ''} with "
            f"{f'{c.box} (as saved)' if c.stored else c.setup}": None for c in ranked if c.kv}
    return "KV cache assumed: " + "; ".join(said) if said else None


def _print_closest(console: Console, near: list[Any], currency: str) -> None:
    """No box meets the SLOs: the closest, by how far each missed."""
    from ..recommend import miss_text

    console.print("no box meets the SLOs; the closest, by how far each missed its worst SLO (not fitting in "
                  "memory is further than any miss):", style="yellow", markup=False, highlight=False)
    for i, c in enumerate(near):
        source = "PREDICTED" if c.source == "predicted" else c.source
        cost = f"; {currency} {c.cost_per_mtok:.2f}/M output" if c.cost_per_mtok else ""
        kv = f", {c.kv} KV" if c.kv else ""
        notes = "".join(f", {n}" for n in c.notes)  # UNCALIBRATED, one stream at a time: as the table's Notes
        print_hanging(console, f"  {i + 1}. {c.box} ({c.setup}{kv}, {source}{notes}): {miss_text(c)}{cost}", hang=3)


def _recommend_head(a: argparse.Namespace, done: Recommendation,
                    console: Console) -> tuple[list[str], Callable[[int, Candidate], list[str]]]:
    """What the ranking is of, printed (the SLOs as the user wrote them), and its table's header and row: per
    million tokens at --agents, or (--capacity, --sessions) per agent-hour at each box's capacity."""
    from .predicting import session_text

    w = done.workload
    slos = (f", TTFT p99 <= {a.ttft_p99}" if a.ttft_p99 else "") + (f", TPOT <= {a.tpot}" if a.tpot else "")
    if done.capacity:
        if w.sessions is not None:
            console.print(f"agent {session_text(w.sessions)}; the prefix cache on", markup=False, highlight=False)
            what = f"model {a.model}"
        else:
            what = f"model {a.model}, {w.input_len} in / {w.output_len} out tokens"
        console.print(what + slos, markup=False, highlight=False)
        if w.sessions is not None:
            console.print("Agents: the most each box serves within the SLOs; TTFT p99 s: at that many agents, the "
                          "slowest of turn 1's prompts; cheapest per agent-hour first", markup=False, highlight=False)
            return ["Rank", "Box", "Engine", "Source", "Agents", f"{a.currency} per agent-hour", "TTFT p99 s",
                    "Notes"], _sessions_row
        console.print(f"Agents: the most each box serves within the SLOs; Boxes: how many serve {a.agents}; "
                      "cheapest per agent-hour first", markup=False, highlight=False)
        return ["Rank", "Box", "Engine", "Source", "Agents", "Boxes", f"{a.currency} per agent-hour",
                f"{a.currency}/M output", "Notes"], _capacity_row
    console.print(f"{a.agents} agents, {w.input_len} in / {w.output_len} out tokens, model {a.model}{slos}",
                  markup=False, highlight=False)
    # units in the headers, not in every cell: the table fits 80 columns with a box's whole name
    return ["Rank", "Box", "Engine", "Source", "Aggregate tok/s", "TTFT p99 ms", "TPOT ms", f"{a.currency}/M output",
            "Notes"], _recommend_row
