"""``tokenbench agent``'s options: the grammar ``--help`` is built from. What the command does is in
``cli/agent.py``, imported only when it runs."""
from __future__ import annotations

import argparse
from typing import Any

from ..options import NONNEG_INT, POSITIVE, POSITIVE_INT
from .power import add_power_sources


def PORT(text: str) -> int:
    v = NONNEG_INT(text)
    if v > 65535:
        raise argparse.ArgumentTypeError(f"'{text}' is not a port from 0 (any free one) to 65535")
    return int(v)


def SERVER_PORT(text: str) -> int:
    """A port a server listens on: 0 names none (a server asked for any free one has one of its own)."""
    v = PORT(text)
    if v == 0:
        raise argparse.ArgumentTypeError("'0' names no server: give the port the model server listens on, 1 to 65535")
    return v


#: The agent's port unless --port says otherwise (hostagent.server.DEFAULT_PORT, not imported for --help's sake).
DEFAULT_PORT = 8765


def add_agent_parser(sub: Any) -> None:
    """``tokenbench agent``'s options."""
    p = sub.add_parser("agent", help="serve this host's guard checks, power and snapshot to a bench run from "
                       "another machine (read-only, token required)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on; 0.0.0.0 for every interface (anyone who reaches the port and holds "
                        "the token reads this host's state)")
    p.add_argument("--port", type=PORT, default=DEFAULT_PORT, help="port to listen on (0: any free one)")
    tok = p.add_mutually_exclusive_group()
    tok.add_argument("--token-file", metavar="FILE",
                     help="read the token from FILE; where FILE does not exist a new token is made there (0600) "
                          "and printed")
    tok.add_argument("--token", metavar="TOKEN",
                     help="the token every request must carry as a bearer token (other users see it in ps: prefer "
                          "--token-file)")
    p.add_argument("--pid", type=POSITIVE_INT, action="append", metavar="PID",
                   help="a process of the model server (repeat): the guard does not count it as other work")
    p.add_argument("--port-of-server", type=SERVER_PORT, metavar="PORT",
                   help="the model server's port on this host: the processes listening on it are the server")
    add_power_sources(p, default="all")
    p.add_argument("--interval", type=POSITIVE, default=0.5, help="seconds between power readings")
    p.add_argument("--guard-config", help="guard thresholds TOML (default: packaged, then the user config dir)")
