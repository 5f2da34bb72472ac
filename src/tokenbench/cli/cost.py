"""``tokenbench cost``: its typed config (``cost.CostConfig``), one library call
(``cost.cost``) and the printing of what comes back."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich.console import Console

from ..cells import money
from ..money import DEFAULT_KWH_PRICE
from .common import check_output, emit_json

if TYPE_CHECKING:
    from ..cost import CostConfig, Costed


def cost_config(a: argparse.Namespace) -> CostConfig:
    from ..cost import CostConfig

    return CostConfig(run=a.run, tps=a.tps, price_per_hour=a.price_per_hour, busy_hours=a.busy_hours, owned=a.owned,
                      purchase=a.purchase, life_years=a.life_years, watts=a.watts, kwh_price=a.kwh_price,
                      hours_per_day=a.hours_per_day, currency=a.currency, api_price=a.api_price,
                      api_currency=a.api_currency, exchange_rate=a.exchange_rate, latest=a.latest, db=a.db)


def cmd_cost(a: argparse.Namespace, console: Console) -> int:
    from ..cost import cost

    check_output(a.json, "--json")
    done = cost(cost_config(a))
    if done.sessions is not None:
        _print_sessions(console, done, a.format)
    else:
        _print_points(console, done, a.format)
    if done.api_note:
        console.print(done.api_note, markup=False, highlight=False)
    if a.json:
        emit_json(a.json, done.to_dict())
    return 0


def _print_points(console: Console, done: Costed, fmt: str) -> None:
    """The price, then each operating point per million output tokens (beside the API's)."""
    from ..console import print_table

    currency, api = done.currency, done.api
    head = ["Operating point", "Output tok/s", f"{currency}/M output"]
    if api is not None:
        head += [f"API {currency}/M", "Box vs API"]
    rows = []
    for p in done.points:
        vs = p.vs_api()
        rows.append([p.operating_point, f"{p.output_tps:,.1f}",
                     f"{p.cost_per_mtok:,.2f}" if p.cost_per_mtok is not None else "—",
                     *([f"{api:,.2f}", vs] if api is not None and vs else [])])
    console.print(describe(done), markup=False, highlight=False)
    print_table(console, head, rows, fmt)


def describe(done: Costed) -> str:
    """The price as ``Pricing.describe`` says it, and the electricity price's origin where it is the default; a
    predicted run's mark first, as show, compare and report name it."""
    said = done.pricing.describe()
    if done.pricing.owned and done.kwh_default:
        said += f" (the default --kwh-price, {DEFAULT_KWH_PRICE:g} {done.currency}/kWh)"
    run = done.run
    if run is not None and (mark := run.predicted_mark):
        said = (f"{mark}: the rates were predicted, not measured ('tokenbench show {run.manifest.label or run.run_id}' "
                f"prints their bands), so the prices are estimates too. {said[:1].upper()}{said[1:]}")
    return said


def _print_sessions(console: Console, done: Costed, fmt: str) -> None:
    """An agent-session run priced level by level, warm and busted: per finished session and per million output
    tokens."""
    from ..console import print_table
    from ..session_view import seconds

    currency, api, points = done.currency, done.api, done.sessions or []
    console.print(describe(done), markup=False, highlight=False)
    console.print(f"agent sessions. Level: concurrency and cache mode. {currency}/session: the price of the hours "
                  "the level held the box, over the sessions it finished (about price x session time / "
                  f"concurrency). tok/s: the level's aggregate output rate, which {currency}/M output is priced at.",
                  markup=False, highlight=False)
    head = ["Level", "Sessions", "Session p50", f"{currency}/session", "tok/s", f"{currency}/M output"]
    rows = [[p.level, f"{p.sessions_finished}/{p.sessions}", f"{seconds(p.session_p50_s * 1000)} s"
             if p.session_p50_s is not None else "—", money(p.cost_per_session),
             f"{p.output_tps:,.1f}" if p.output_tps else "—", money(p.cost_per_mtok)] for p in points]
    if any(p.slo_met is not None for p in points):  # a level past an SLO (a search's) is no price to pay for it
        head.append("SLO")
        for row, p in zip(rows, points):
            row.append("—" if p.slo_met is None else "pass" if p.slo_met else "FAIL")
    print_table(console, head, rows, fmt, numeric=True)
    if any(p.past_cache_cliff for p in points):
        console.print("*: more agents than the box's cache keeps warm (predicted; 'tokenbench show' names the "
                      "cliff): the warm rate assumes every session stays warm", markup=False, highlight=False)
    said = [f"{vs} at {p.level}" for p in points if (vs := p.vs_api())]
    if api is not None and said:
        console.print(f"API {api:.2f} {currency}/M output tokens: the box is " + ", ".join(said), markup=False,
                      highlight=False)
