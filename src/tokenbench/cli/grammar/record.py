"""``tokenbench record``'s options: the grammar ``--help`` is built from. What the command does is in
``cli/record.py``, imported only when it runs."""
from __future__ import annotations

import argparse
from typing import Any

from ..options import POSITIVE_INT

DEFAULT_PORT = 8100
DEFAULT_BLOCK = 64


def PORT(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"'{text}' is not a port from 1 to 65535 (0: any free one)")
    return v


def add_record_parser(sub: Any) -> None:
    """``tokenbench record``'s options."""
    r = sub.add_parser("record", help="record your own agents' requests through a proxy, to replay them elsewhere",
                       description="A proxy in front of your server: point your agents at it, work as usual, and "
                                   "their chat requests are written to a session log that `tokenbench sweep --trace` "
                                   "replays on another box. Everything is forwarded unchanged; keys and headers are "
                                   "never written. Runs until Ctrl-C.")
    r.add_argument("--upstream", required=True, metavar="URL",
                   help="the server the agents use now, e.g. http://gpu-box:8000 (its /v1 may be given or not)")
    r.add_argument("--out", required=True, metavar="FILE", help="the session log to write (a new file)")
    r.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: other machines' agents too)")
    r.add_argument("--port", type=PORT, default=DEFAULT_PORT, help="port to listen on (0: any free one)")
    r.add_argument("--lengths-only", action="store_true",
                   help="keep token counts and hash ids of the prompts instead of their text, to share a log "
                        "without the code in it")
    r.add_argument("--block-size", type=POSITIVE_INT, metavar="N",
                   help=f"lengths-only: tokens per hash id (default {DEFAULT_BLOCK})")
    r.add_argument("--tokenizer", metavar="PATH",
                   help="lengths-only: a tokenizer.json or Hugging Face folder of the served model (default: the "
                        "upstream's own tokenize endpoint)")
