"""``tokenbench depth``'s options: the grammar ``--help`` is built from. What the command does is in
``cli/depth.py``, imported only when it runs."""
from __future__ import annotations

from typing import Any

from ..options import LABEL, NONNEG_INT, POSITIVE_INT, add_db, add_endpoint


def add_depth_parser(sub: Any) -> None:
    """``tokenbench depth``'s options."""
    dp = sub.add_parser("depth", help="llama-bench style pp/tg at context depths, over HTTP")
    add_endpoint(dp, "llama-server")
    dp.add_argument("--depths", help="tokens of context, e.g. 0,8k,32k,65k (default 0,8k,32k; embedded 0,1k,4k)")
    dp.add_argument("--pp", type=POSITIVE_INT, default=512, help="prompt tokens processed on top of the depth")
    dp.add_argument("--tg", type=POSITIVE_INT, default=128, help="tokens generated on top of the depth")
    dp.add_argument("--repetitions", type=POSITIVE_INT, default=3)
    dp.add_argument("--label", type=LABEL, help="a name for this run, to find it again (default: this hostname; "
                    "embedded-ENGINE on the embedded engine, the model file's name with --llama-bench)")
    dp.add_argument("--seed", type=int)
    dp.add_argument("--json", help="write the run to this JSON file; - for stdout")
    dp.add_argument("--llama-bench", metavar="PATH", nargs="?", const="built",
                    help="drive llama-bench instead and import its JSON (no PATH: the one tokenbench builds)")
    dp.add_argument("--model-file", help="with --llama-bench: the GGUF to bench (default: the embedded model's)")
    lb = dp.add_argument_group("llama.cpp options", "passed to llama-bench, or to the embedded llama-server, "
                                                    "and recorded")
    lb.add_argument("-t", "--threads", type=POSITIVE_INT, help="CPU threads")
    lb.add_argument("-fa", "--flash-attn", choices=["0", "1"], help="flash attention off/on")
    lb.add_argument("-b", "--batch-size", type=POSITIVE_INT, help="logical batch size")
    lb.add_argument("-ub", "--ubatch-size", type=POSITIVE_INT, help="physical batch size")
    lb.add_argument("-ctk", "--cache-type-k", help="KV cache type for K (f16, q8_0, ...)")
    lb.add_argument("-ctv", "--cache-type-v", help="KV cache type for V (f16, q8_0, ...)")
    lb.add_argument("-ngl", "--n-gpu-layers", type=NONNEG_INT, help="layers offloaded to the GPU")
    dp.add_argument("--format", choices=["table", "markdown"], default="table")
    dp.add_argument("--guard", choices=["strict", "warn", "off"], default="warn")
    dp.add_argument("--guard-config")
    dp.add_argument("--no-metrics", action="store_true")
    add_db(dp)
