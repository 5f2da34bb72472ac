"""``tokenbench recommend``'s options: the grammar ``--help`` is built from. What the command does is in
``cli/recommend.py``, imported only when it runs."""
from __future__ import annotations

from typing import Any

from ... import registry
from ...money import DEFAULT_CURRENCY, DEFAULT_KWH_PRICE
from ..options import UNIT, CURRENCY, LATENCY, NONNEG, POSITIVE_INT, add_db, add_json, add_latest
from .predicting import add_session_options

#: A request's lengths when none is given: the agentic shape (4096 in, 512 out).
DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN = 4096, 512


def add_recommend_parser(sub: Any) -> None:
    """``tokenbench recommend``'s options."""
    rc = sub.add_parser("recommend", help="rank boxes by cost per million tokens among those that fit and meet SLOs",
                        description="Rank boxes by cost per million output tokens among those that fit and meet the "
                        "SLOs. When none meets them, list the closest, by how far each missed its worst SLO (a box "
                        "that does not fit in memory is further than any miss). Exit 0 either way: no box meeting "
                        "the SLOs is an answer (--json: 'ranked' empty, 'closest' filled), not an error.")
    rc.add_argument("--model", required=True, help="the catalog model to serve ('tokenbench models' lists them)")
    rc.add_argument("--agents", type=POSITIVE_INT, default=16,
                    help="the agents to serve (--capacity: the team's agents, to say how many boxes it needs)")
    rc.add_argument("--input-len", help=f"prompt tokens (default {DEFAULT_INPUT_LEN}; with --sessions, the task of "
                    "turn 1, default 128 as sweep --sessions, or a draw such as uniform:512-2048)")
    rc.add_argument("--output-len", help=f"output tokens (default {DEFAULT_OUTPUT_LEN}; with --sessions, each "
                    "answer, default 128 as sweep --sessions, or a draw)")
    rc.add_argument("--ttft-p99", type=LATENCY, help="SLO on the p99 of TTFT, e.g. 2s " + UNIT)
    rc.add_argument("--tpot", type=LATENCY, help="SLO on the median TPOT, e.g. 50ms " + UNIT)
    rc.add_argument("--currency", default=DEFAULT_CURRENCY, type=CURRENCY,
                    help="of every price; a catalog price in another currency is left out, with a note")
    rc.add_argument("--price", action="append", default=[], metavar="ID=PER_HOUR",
                    help="a rental price (repeat); ID: a box's id or alias ('tokenbench hardware'), or a run of --runs")
    rc.add_argument("--owned", action="append", default=[], metavar="ID=PURCHASE:YEARS:WATTS",
                    help="an owned box (repeat): its price, years of service and watts under load")
    rc.add_argument("--kwh-price", type=NONNEG, default=DEFAULT_KWH_PRICE,
                    help=f"electricity price for owned boxes, per kWh in --currency (default {DEFAULT_KWH_PRICE:g}, "
                    "as cost takes)")
    rc.add_argument("--parallel", type=POSITIVE_INT, metavar="N",
                    help="llama.cpp's server slots (-np N) on the boxes it runs on (default: its own, "
                    f"{registry.AUTO_SLOTS}, or as many as the memory holds); said in the Engine column")
    rc.add_argument("--runs", nargs="*", action="extend", default=[],
                    help="measured runs (ids or labels) to rank beside the predictions (repeatable)")
    rc.add_argument("--capacity", action="store_true",
                    help="rank by cost per agent-hour at the SLOs: each box's capacity (the most agents it serves "
                    "within --ttft-p99/--tpot), measured from a run's levels (tokenbench capacity) or PREDICTED")
    rc.add_argument("--parity-with", metavar="LABEL",
                    help="keep only measured boxes whose quality runs (tokenbench quality --label BOX) are the "
                    "same within noise as, or better than, this box's")
    add_session_options(rc, "rank on agent sessions, the prefix cache on, by cost per agent-hour at each box's "
                        "capacity within the SLOs (measured session runs and PREDICTED boxes side by side); no N: "
                        "--agents is the team")
    rc.add_argument("--format", choices=["table", "markdown"], default="table")
    add_json(rc, "the ranking and the exclusions")
    add_latest(rc)
    add_db(rc)
