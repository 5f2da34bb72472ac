"""``tokenbench import``'s and ``export``'s options: the grammar ``--help`` is built from. What the command does is in
``cli/import_export.py``, imported only when it runs."""
from __future__ import annotations

from typing import Any

from ..options import LABEL, RUN_REF, add_db, add_latest


def add_export_parser(sub: Any) -> None:
    """``tokenbench export``'s options."""
    from ...exports import FORMATS

    ex = sub.add_parser("export", help="a stored run as published.csv rows or a llama-bench Markdown table, which "
                        "import reads back")
    ex.add_argument("run", help=f"the run: {RUN_REF}")
    ex.add_argument("--as", dest="as_", choices=FORMATS, required=True,
                    help="published-csv: the rows calibrate reads, with the engine build, each level's guard verdict, "
                    "flags, requests and errors in its rows' note, and the machine snapshot; llama-bench-md: "
                    "llama-bench's Markdown table (depth and llama-bench runs)")
    ex.add_argument("--out", help="write here (default: stdout)")
    place = ex.add_argument_group("published-csv: what the rows say of the box (default: what the run says)")
    place.add_argument("--hardware", help="the catalog box it ran on ('tokenbench hardware' lists ids)")
    place.add_argument("--model", help="the catalog model it served")
    place.add_argument("--engine", help="engine and backend, e.g. 'llama.cpp vulkan', vllm")
    place.add_argument("--weights", help="weight format, e.g. Q4_K_M, FP8")
    place.add_argument("--kv", help="KV cache format")
    add_latest(ex)
    add_db(ex)


def add_import_parser(sub: Any) -> None:
    """``tokenbench import``'s options."""
    im = sub.add_parser("import", help="vllm bench serve, llama-bench, llama-benchy, AIPerf, inference-perf, InferenceX, "
                        "GuideLLM or published.csv results into the store")
    im.add_argument("files", nargs="+", metavar="FILE", help="a result file of vllm bench serve, llama-bench, "
                    "llama-benchy, AIPerf, inference-perf, InferenceX or GuideLLM, or a published.csv (the format is "
                    "read from the file)")
    im.add_argument("--label", type=LABEL, help="label for the imported runs (default: from the file)")
    add_db(im)
