"""``tokenbench cost``'s options: the grammar ``--help`` is built from. What the command does is in
``cli/cost.py``, imported only when it runs."""
from __future__ import annotations

from typing import Any

from ...money import DEFAULT_CURRENCY, DEFAULT_KWH_PRICE
from ..options import CURRENCY, NONNEG, POSITIVE, RUN_REF, add_db, add_json, add_latest


def add_cost_parser(sub: Any) -> None:
    """``tokenbench cost``'s options."""
    co = sub.add_parser("cost", help="price per million output tokens at each operating point")
    co.add_argument("run", nargs="?", help=f"the run: {RUN_REF}; or give --tps")
    co.add_argument("--tps", type=POSITIVE, help="an aggregate output rate instead of a run")
    co.add_argument("--price-per-hour", type=POSITIVE, help="rented: price per hour")
    co.add_argument("--busy-hours", type=POSITIVE,
                    help="rented: hours a day it does this work (default 24; the rent of the idle hours is paid too)")
    co.add_argument("--owned", action="store_true",
                    help="an owned box: --purchase and --watts (and --life-years, --kwh-price, --hours-per-day)")
    co.add_argument("--purchase", type=POSITIVE, help="owned: what the box cost")
    co.add_argument("--life-years", type=POSITIVE, help="owned: years of service the purchase is spread over "
                    "(default 3)")
    co.add_argument("--watts", type=NONNEG, help="owned: power draw under this load (required; 0 leaves power out)")
    co.add_argument("--kwh-price", type=NONNEG, help=f"owned: electricity price per kWh in --currency (default "
                    f"{DEFAULT_KWH_PRICE:g}, as recommend takes)")
    co.add_argument("--hours-per-day", type=POSITIVE, help="owned: hours a day it does this work (default 24)")
    co.add_argument("--currency", default=None, type=CURRENCY, help=f"the box's currency (default: the run's, else {DEFAULT_CURRENCY})")
    co.add_argument("--api-price", type=POSITIVE, help="an API's price per million output tokens, to compare")
    co.add_argument("--api-currency", type=CURRENCY, help="the API price's currency (default: --currency)")
    co.add_argument("--exchange-rate", type=POSITIVE, help="units of --currency per 1 --api-currency")
    co.add_argument("--format", choices=["table", "markdown"], default="table")
    add_json(co, "the cost per operating point")
    add_latest(co)
    add_db(co)
