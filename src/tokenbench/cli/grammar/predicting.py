"""The options of ``fit``, ``predict``, ``calibrate``, ``hardware`` and ``models``, and the session a prediction
describes: grammar only. What the commands do is in ``cli/predicting.py``, imported only when one runs."""
from __future__ import annotations

import argparse
from typing import Any

from ...registry import known
from ..options import CACHE_RAM, LABEL, POSITIVE, POSITIVE_INT, SHARE, UNIT, add_db, add_json, add_latest

#: llama-bench's tests each --test shows: pp512 the prompt's columns, tg128 generation's, depth both.
TESTS = {"pp512": ("pp",), "tg128": ("tg",), "depth": ("pp", "tg")}


def add_flash_attn(p: argparse.ArgumentParser, off_means: str) -> None:
    p.add_argument("--flash-attn", choices=["on", "off"], default="on",
                   help=f"llama.cpp flash attention (-fa 1 / -fa 0; default on, llama.cpp's auto): off writes every "
                   f"score to memory, {off_means}")


def add_setup(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--hardware", required=required, help="hardware id ('tokenbench hardware' lists them)")
    p.add_argument("--model", required=required, help="model id, or a config.json / .gguf path")
    p.add_argument("--weights", help="weight format: BF16, FP8, AWQ, Q4_K_M, Q8_0, ... (default BF16, "
                   "or Q4_K_M for llama.cpp)")
    p.add_argument("--kv", default="auto", help="KV-cache format: auto (model dtype), fp8, q8_0, q4_0, f16")
    p.add_argument("--engine", help=f"one of {known()} (default: the box's usual one, as fit, predict and recommend "
                   "all take it: vLLM on a GPU, llama.cpp on a unified-memory box such as Strix Halo or a Mac)")
    p.add_argument("--engine-version", metavar="V",
                   help="the engine's build the prediction assumes: a year (2025), a llama.cpp build (b6918) or a "
                        "vLLM release (0.21); its constants are those fitted on builds of that year or the newest "
                        "before it (default: the newest the data has; a newer one widens the bands)")
    p.add_argument("--tp", type=POSITIVE_INT, default=1,
                   help="tensor parallelism: GPUs of the box sharing every layer (vLLM/SGLang --tensor-parallel-size)")


def add_hardware_parser(sub: Any) -> None:
    """``tokenbench hardware``'s options."""
    hw = sub.add_parser("hardware", help="list the hardware catalog, with sources")
    hw.add_argument("--format", choices=["table", "markdown"], default="table")
    add_json(hw, "every entry with all its fields")


def add_models_parser(sub: Any) -> None:
    """``tokenbench models``'s options."""
    md = sub.add_parser("models", help="list the model catalog, with sources")
    md.add_argument("--format", choices=["table", "markdown"], default="table")
    add_json(md, "every entry with all its fields")


def add_fit_parser(sub: Any) -> None:
    """``tokenbench fit``'s options."""
    fp = sub.add_parser("fit", help="does a model and its KV cache fit a box? largest context and concurrency",
                        description="Whether a model's weights and KV cache fit a box's memory at a context and "
                        "concurrency, the largest context and concurrency that do, and otherwise llama.cpp's hybrid "
                        "split (-ngl) and its speed. Exit 0 when it fits, 1 when it does not (a hybrid split "
                        "included) or when --context passes the model's own (its config's max_position_embeddings, "
                        "where known: vLLM refuses a longer --max-model-len), as guard exits 1 on a dirty bench: a "
                        "script can ask `tokenbench fit ... && ...`; --json is written either way.")
    add_setup(fp)
    fp.add_argument("--context", default="8192", help="tokens per sequence, e.g. 65536 or 64k")
    fp.add_argument("--concurrency", type=POSITIVE_INT, default=1, help="sequences held at once")
    add_flash_attn(fp, "its F32 score buffer takes memory")
    add_json(fp, "the verdict (fits) and the memory budget, in GiB")


def add_predict_parser(sub: Any) -> None:
    """``tokenbench predict``'s options."""
    pp = sub.add_parser("predict", help="predicted speed (roofline ceiling and calibrated estimate)")
    add_setup(pp, required=False)
    pp.add_argument("--input-len",
                    help="prompt tokens (default 4096 when serving; with --test, the pp length, default 512; with "
                    "--sessions, the task of turn 1, default 128 as sweep --sessions, or a draw such as "
                    "uniform:512-2048)")
    pp.add_argument("--output-len",
                    help="output tokens (default 512 when serving; with --test, the tg length, default 128; with "
                    "--sessions, each answer, default 128 as sweep --sessions, or a draw)")
    pp.add_argument("--ubatch", type=POSITIVE_INT, help="llama.cpp micro-batch (-ub) for prompt processing (default 512)")
    pp.add_argument("--max-num-batched-tokens", type=POSITIVE_INT,
                    help="vLLM's token budget per step (SGLang's --chunked-prefill-size) (default: the engine's for "
                    "the box: vLLM 8192 on GPUs of 70 GB or more but the A100, else 2048)")
    pp.add_argument("--arrivals", choices=["together", "spread"],
                    help="vLLM/SGLang closed loop: together, all agents start at once and fixed-length answers keep "
                    "them in step (vllm bench serve --ignore-eos, tokenbench sweep); spread, their prompts spread over "
                    "the cycle (answers of varying length) (default: together)")
    pp.add_argument("--concurrency", help="serving levels, e.g. 1,4,8,16,32 (default 1)")
    add_flash_attn(pp, "slower at depth")
    pp.add_argument("--parallel", type=POSITIVE_INT,
                    help="llama.cpp server slots (-np N): up to N sequences decode in one batch (default: its own, 4 in "
                    "builds since November 2025 and 1 before, or as many as the memory holds)")
    pp.add_argument("--cache-ram", type=CACHE_RAM, metavar="MIB",
                    help="llama-server's host prompt cache (its --cache-ram; default on, 8192): each request waits "
                    "while it saves the slot the one before left; 0: off; -1: no limit but the box's memory")
    pp.add_argument("--test", choices=list(TESTS), help="llama-bench's tests at --depth: tg128 generation (-p 0), "
                    "pp512 the prompt (-n 0), depth both")
    pp.add_argument("--depth", help="with --test: tokens already in the cache, e.g. 0,8k,32k,65536 (default 0)")
    pp.add_argument("--spec-tokens", type=POSITIVE_INT, help="speculative decoding / MTP: drafted tokens per step")
    pp.add_argument("--acceptance", type=SHARE, help="per-token acceptance rate (0..1)")
    pp.add_argument("--acceptance-length", type=POSITIVE, help="mean acceptance length (vLLM's τ)")
    pp.add_argument("--draft-cost", type=POSITIVE, help="draft cost per token relative to the target (default: MTP 1/layers)")
    add_session_options(pp, "predict an agent's session turn by turn, with and without the prefix cache; N: "
                        "sessions in all (default one per agent, --concurrency)")
    pp.add_argument("--against", help="predict every row of a file in the published.csv layout; with --calibration, "
                    "each row before (the packaged calibration) and after (yours)")
    pp.add_argument("--calibration", help="efficiency TOML to use instead of the packaged one")
    pp.add_argument("--json", help="write the predictions to this JSON file; - for stdout")
    pp.add_argument("--save", type=LABEL, metavar="LABEL", help="store the predictions as a run (provenance 'predicted')")
    add_db(pp)
    pp.add_argument("--format", choices=["table", "markdown"], default="table")


def add_session_options(p: argparse.ArgumentParser, what: str) -> None:
    """The options of an agent's session, named and defaulted as sweep --sessions's (predict, recommend)."""
    from ...predict import session as ps

    ss = p.add_argument_group("agent sessions (as sweep --sessions measures them, with its defaults)")
    ss.add_argument("--sessions", nargs="?", type=POSITIVE_INT, const=0, metavar="N", help=what)
    ss.add_argument("--turns", type=POSITIVE_INT, help=f"turns per session (default {ps.DEFAULT_TURNS})")
    ss.add_argument("--shared-prefix", metavar="T",
                    help=f"system-prompt tokens every session shares (default {ps.DEFAULT_SHARED_PREFIX})")
    ss.add_argument("--tool-len", metavar="DRAW", help=f"tokens of each tool result (default {ps.DEFAULT_TOOL_LEN})")
    ss.add_argument("--think-time", metavar="DRAW", help="the agent's time between an answer and its next turn, "
                    f"e.g. 5s or uniform:1s-10s (default {ps.DEFAULT_THINK_TIME}) " + UNIT)
    ss.add_argument("--max-context", metavar="T",
                    help="the session ends at the first turn whose prompt and answer pass T tokens")


def add_calibrate_parser(sub: Any) -> None:
    """``tokenbench calibrate``'s options."""
    cp = sub.add_parser("calibrate", help="fit per-backend efficiencies on published measurements")
    cp.add_argument("file", nargs="*", help="measurements in the published.csv layout (every source is fitted; "
                    "default: the published measurements the package ships)")
    cp.add_argument("--out", required=True, help="efficiency TOML to write (predict --calibration FILE uses it)")
    own = cp.add_argument_group("your own runs (anchor the fit on the box you measured)")
    own.add_argument("--runs", nargs="+", action="extend", default=[], metavar="RUN",
                     help="stored sweep, depth or llama-bench runs (ids or labels) of one box, model and weights")
    own.add_argument("--hardware", help="with --runs: the box they ran on ('tokenbench hardware' lists ids)")
    own.add_argument("--model", help="with --runs: the catalog model they served")
    own.add_argument("--weights", help="with --runs: weight format, e.g. Q4_K_M, FP8 (default: the runs' own)")
    own.add_argument("--kv", help="with --runs: KV cache format (default: the runs' own, else F16)")
    own.add_argument("--engine", help="with --runs: engine and backend, e.g. 'llama.cpp vulkan', vllm "
                     "(default: the runs' own, with the box's backend)")
    add_latest(cp)
    add_db(cp)
