"""``tokenbench quality``'s options, and its subcommands': the grammar ``--help`` is built from. What the command
does is in ``cli/quality.py``, imported only when it runs."""
from __future__ import annotations

import argparse
from typing import Any

from ..options import LABEL, UNIT, NONNEG, POSITIVE_INT, RUN_REF, add_db, add_endpoint, add_json, add_latest

#: Embedded defaults: the tiny model's 8K positions, and the 2-core machines tests run on.
EMBEDDED_CONTEXTS = "1k,2k,4k"
REMOTE_CONTEXTS = "4k,16k,32k"


def _endpoint(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("endpoint")
    add_endpoint(g, "transformers", "chat", "what instruction-tuned models answer", apis=("completions", "chat"))
    g.add_argument("--timeout", default="300s", help="per item: longer is recorded as a timeout (default 300s) " + UNIT)


def _items(p: argparse.ArgumentParser) -> None:
    p.add_argument("--items", type=POSITIVE_INT, default=16, help="prompts of agreement and knob checks (default 16)")
    p.add_argument("--max-tokens", type=POSITIVE_INT, default=64, help="output tokens per item at most (default 64)")
    p.add_argument("--temperature", type=NONNEG, default=0.0, help="sampling temperature (default 0: greedy)")
    p.add_argument("--seed", type=int, default=0,
                   help="item seed; two runs pair their items only with the same seed (default 0)")
    p.add_argument("--label", type=LABEL, help="a name for this run (default: this hostname, or embedded-ENGINE)")
    add_json(p, "the run")
    add_db(p)


def add_quality_parser(sub: Any) -> None:
    q = sub.add_parser("quality", help="quality parity: needle in a haystack, agreement, lm-eval tasks; compare, "
                       "knob check")
    _endpoint(q)
    q.add_argument("--tasks", default="niah,agreement",
                   help="niah, agreement, tokenbench_arith (shipped) or any lm-eval task, comma-separated "
                        "(default niah,agreement)")
    q.add_argument("--contexts", help=f"needle contexts in tokens (default {REMOTE_CONTEXTS}; embedded "
                   f"{EMBEDDED_CONTEXTS})")
    q.add_argument("--depths", default="10,50,90", help="needle depths, percent of the context (default 10,50,90)")
    q.add_argument("--limit", type=POSITIVE_INT, help="lm-eval tasks: items per task (default: all)")
    q.add_argument("--extra-body", help="JSON object merged into every request body")
    q.add_argument("--format", choices=["table", "markdown"], default="table")
    _items(q)
    qs = q.add_subparsers(dest="quality_command", metavar="{compare,knob}")  # of q's class: Parser
    c = qs.add_parser("compare", help="two quality runs item by item: difference, 95%% interval, p-value, verdict")
    c.add_argument("a", metavar="RUN_A", help=f"the first run: {RUN_REF}")
    c.add_argument("b", metavar="RUN_B", help=f"the second run: {RUN_REF}")
    c.add_argument("--floor", metavar="RUN",
                   help="a second run of A's host (or B's): how often the same host's outputs differ is the noise "
                        "floor agreement is judged against (default: the newest run in the store with A's label, "
                        "server, model and settings, else B's; none: greedy outputs are judged against an "
                        "assumed floor of every output identical)")
    c.add_argument("--format", choices=["table", "markdown"], default="table")
    add_json(c, "the comparison")
    add_latest(c)
    add_db(c)
    k = qs.add_parser("knob", help="does a request parameter change the outputs more than sampling noise?")
    _endpoint(k)
    k.add_argument("--param", required=True, metavar="NAME=V1,V2,...", action="append",
                   help="one parameter and its values, e.g. reasoning_effort=low,medium,high or "
                        "chat_template_kwargs.enable_thinking=true,false")
    _items(k)
