"""``tokenbench engines``' options: the grammar ``--help`` is built from. What the command does is in
``cli/engines.py``, imported only when it runs."""
from __future__ import annotations

from typing import Any

from ..options import NONNEG_INT, POSITIVE_INT, SERVE_PARALLEL, add_json
from .record import PORT

#: A served engine's slots and each slot's context unless --parallel and --ctx say: room for a few agents.
SERVE_CTX = 4096


def add_engines_parser(sub: Any) -> None:
    """``tokenbench engines``'s options."""
    en = sub.add_parser("engines", help="the embedded engines: which are ready, what each needs; build them, "
                                        "or serve one on its own")
    en.add_argument("names", nargs="*", metavar="[build|serve] ENGINE",
                    help="the engines: transformers, vllm, llama-server, llama-cpp-python, aiperf (a reference "
                         "tool), or all; build first: make them ready now; serve first: start one on the embedded "
                         "model until Ctrl-C")
    add_json(en, "each engine's state")
    s = en.add_argument_group("serve")
    s.add_argument("--model-size", choices=["tiny", "small", "small-utf8"], default="tiny",
                   help="the embedded model served (as sweep's --model-size)")
    s.add_argument("--quant", help="llama engines: a llama-quantize type for the embedded GGUF, e.g. Q8_0")
    s.add_argument("--parallel", type=POSITIVE_INT, default=SERVE_PARALLEL, metavar="N",
                   help=f"requests served at once (llama-server's slots, vLLM's sequences; Transformers serve: its KV cache "
                        f"holds this many contexts; default {SERVE_PARALLEL})")
    s.add_argument("--ctx", type=POSITIVE_INT, default=SERVE_CTX, metavar="N",
                   help=f"tokens of context each request may hold (default {SERVE_CTX})")
    s.add_argument("--port", type=PORT, default=0, help="port to listen on, on 127.0.0.1 (default 0: any free one)")
    s.add_argument("--cache-ram", type=NONNEG_INT, metavar="MIB",
                   help="llama-server's host prompt cache, in MiB (its --cache-ram; 0: off, the server's default: "
                        "on), which keeps sessions evicted from its slots: off, the slots alone hold them")
    s.add_argument("--kv-blocks", type=POSITIVE_INT, metavar="N",
                   help="vLLM's KV cache pool, in blocks of 128 tokens (its --num-gpu-blocks-override; default: as "
                        "much as its memory holds): a small pool shows where sessions stop staying warm "
                        "(capacity --cache-cliff)")
