"""``tokenbench capacity``'s options: the grammar ``--help`` is built from. What the command does is in
``cli/capacity.py``, imported only when it runs."""
from __future__ import annotations

from typing import Any

from ..options import add_endpoint, add_load, add_output
from .power import add_power_options
from .workloads import add_trace_options, add_workload_options

#: A level fails once its cached share is below this share of the warm (lowest) level's, where --cache-cliff gives
#: no share.
DEFAULT_DROP = 0.5


def add_capacity_parser(sub: Any) -> None:
    """``tokenbench capacity``'s options."""
    cap = sub.add_parser("capacity", help="search the most agents (or requests/s) a box serves within an SLO",
                         description="Bracket, then bisect, the concurrency (or rate) at which the server still "
                                     "meets every objective of --slo. Each level stops early once its verdict "
                                     "cannot change; every level is stored. Prints how many agents the box "
                                     "serves, between which levels, how sure each verdict was, and the cost per "
                                     "agent-hour with --price-per-hour.")
    add_endpoint(cap.add_argument_group("endpoint"), "transformers", "completions", "exact prompt lengths")
    add_workload_options(cap)
    add_trace_options(cap)
    add_load(cap, search=True)
    cap.add_argument("--tiers", metavar="TOK_S,...",
                     help="search once per per-agent speed: at least 90%% of requests read at that many tok/s or "
                          "faster (agent_tps_p90), beside --slo's other objectives; AA-AgentPerf's tiers are 20,60")
    cap.add_argument("--cache-cliff", type=float, nargs="?", const=DEFAULT_DROP, metavar="SHARE",
                     help="search how many live agent sessions the server's cache keeps warm: one session per agent, "
                          "a level failing once its cached share of prompt tokens falls below SHARE (default "
                          f"{DEFAULT_DROP:g}) of the lowest level's, or when --slo (still needed: the turn TTFT you "
                          "accept) breaks; prints the working set against the engine's KV pool (docs/capacity.md)")
    add_output(cap)
    add_power_options(cap.add_argument_group("the box under test: power and its host's guard (docs/power.md)"))
    cap.set_defaults(duration=None, repetitions=1)
