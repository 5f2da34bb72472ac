"""``tokenbench sweep``'s options: the grammar ``--help`` is built from. What the command does is in
``cli/sweep.py``, imported only when it runs."""
from __future__ import annotations

from typing import Any

from ..options import add_endpoint, add_load, add_output
from .power import add_power_options
from .workloads import add_trace_options, add_workload_options


def add_sweep_parser(sub: Any) -> None:
    """``tokenbench sweep``'s options."""
    s = sub.add_parser("sweep", help="load-test an OpenAI-compatible endpoint over concurrency or rate levels")
    add_endpoint(s.add_argument_group("endpoint"), "transformers", "completions", "exact prompt lengths")
    add_workload_options(s)
    add_load(s, search=False)
    add_trace_options(s)
    add_output(s)
    add_power_options(s.add_argument_group("the box under test: power and its host's guard (docs/power.md)"))
