"""``tokenbench coldstart``'s options: the grammar ``--help`` is built from. What the command does is in
``cli/coldstart.py``, imported only when it runs."""
from __future__ import annotations

from typing import Any

from ..options import LABEL, UNIT, POSITIVE_INT, add_db


def add_coldstart_parser(sub: Any) -> None:
    """``tokenbench coldstart``'s options."""
    cs = sub.add_parser("coldstart", help="time a server from start to healthy and to its first token, repeatedly")
    cs.add_argument("--cmd", required=True, help="the server's command line; {port} is replaced by --url's port")
    cs.add_argument("--url", required=True, help="its OpenAI-compatible base URL, with the port it listens on")
    cs.add_argument("--health", help="the URL that answers 200 when it is up (default: URL/models); {port} is "
                    "replaced by --url's port")
    cs.add_argument("--model")
    cs.add_argument("--api-key")
    cs.add_argument("--repeat", type=POSITIVE_INT, default=3, help="boots; the first is the cold one")
    cs.add_argument("--timeout", default="600s", help="how long a boot may take (default 600s) " + UNIT)
    cs.add_argument("--label", type=LABEL)
    cs.add_argument("--json", help="write the boots to this JSON file; - for stdout")
    cs.add_argument("--log", help="append the server's output to this file")
    add_db(cs)
