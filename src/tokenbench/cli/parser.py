"""The command line's grammar: every command and option, in one declarative place."""
from __future__ import annotations

import argparse
from typing import Any, NoReturn
from .. import __version__, redact
from ..cost import DEFAULT_CURRENCY
from ..registry import known
from .options import (CURRENCY, NONNEG, NONNEG_INT, POSITIVE, POSITIVE_INT, SHARE, add_db, add_endpoint, add_json,
                      add_latest)
from .quality import add_quality_parser


EXIT_CODES = """exit codes:
  0    done: every level measured
  1    guard: the bench is dirty
  2    bad arguments or input (one line says what to do)
  3    the endpoint cannot be used (unreachable, wrong model, refused, died)
  4    the embedded engine could not be built or started
  5    a level failed (error rate above --max-error-rate, truncated prompts);
       its results are kept and marked
  70   a bug in tokenbench (TOKENBENCH_DEBUG=1 shows the traceback)
  130  interrupted (Ctrl-C, SIGTERM, SIGHUP); finished levels kept"""


#: Help for options that mean the same in every command that takes them.
SHARED_HELP = {
    "--format": "table for a terminal, markdown to paste",
    "--model": "the served model name (default: the first the server lists)",
    "--api-key": "bearer key (default: $OPENAI_API_KEY); sent, never stored",
    "--tokenizer": "a local tokenizer.json or Hugging Face directory of the served model (default: the "
                   "server's own tokenize endpoint, else a local estimate)",
    "--label": "a name for this run, to find it again (default: this hostname)",
    "--seed": "workload seed (default: random, recorded)",
    "--currency": "currency code of the prices",
    "--repetitions": "passes at each depth; the rate's mean and spread are over them",
    "--guard": "strict: refuse on a dirty bench; warn: record it; off: do not check",
    "--guard-config": "guard thresholds TOML (default: packaged, then the user config dir)",
    "--no-metrics": "do not sample the server's /metrics",
    "--timeout": "how long to wait for the server to come up",
    "--limit": "list at most this many runs, newest first",
    "--arrival": "open loop: poisson (random gaps) or constant gaps",
    "--input-len": "prompt tokens per request",
    "--output-len": "output tokens per request",
    "--agents": "concurrent agents the box must serve",
    "--purchase": "owned: purchase price of the box",
    "--life-years": "owned: years to write the purchase off over",
    "--kwh-price": "owned: electricity price per kWh",
    "--title": "the report's title",
}


#: One or two examples per command, printed at the end of its --help (a test parses every one of them).
EXAMPLES: dict[str, list[str]] = {
    "sweep": ["tokenbench sweep                      # the embedded engine, concurrency 1,2,4,8",
              "tokenbench sweep --url http://gpu-box:8000/v1 --concurrency 1,4,16 --requests 64 --label h100",
              "tokenbench sweep --engine llama-server --sessions 8 --turns 20 --think-time uniform:1s-5s"],
    "capacity": ["tokenbench capacity --slo ttft_p99=2s,agent_tps=5   # the embedded engine, 1:16 agents",
                 "tokenbench capacity --url http://gpu-box:8000/v1 --slo ttft_p99=2s,tpot_p90=50ms --concurrency 1:64 "
                 "--requests 128 --budget 20m --price-per-hour 2.5"],
    "depth": ["tokenbench depth                      # embedded llama-server, depths 0,1k,4k",
              "tokenbench depth --url http://strix:8080/v1 --depths 0,8k,32k,65k --repetitions 3"],
    "guard": ["tokenbench guard", "tokenbench guard --url http://127.0.0.1:8080/v1 --json guard.json"],
    "coldstart": ['tokenbench coldstart --cmd "llama-server -m model.gguf --port {port}" '
                  "--url http://127.0.0.1:8080/v1"],
    "engines": ["tokenbench engines", "tokenbench engines build vllm llama-server"],
    "runs": ["tokenbench runs", "tokenbench runs --limit 5 --json -"],
    "show": ["tokenbench show h100 --format markdown", "tokenbench show h100 --guard 2"],
    "fit": ["tokenbench fit --hardware nvidia-a30 --model gpt-oss-20b --weights Q4_K_M --context 65536"],
    "predict": ["tokenbench predict --hardware nvidia-h100-sxm --model qwen3.6-27b --weights FP8 --concurrency 1,16",
                "tokenbench predict --hardware amd-ryzen-ai-max-395 --model gpt-oss-20b --engine llama.cpp "
                "--test depth --depth 0,32k",
                "tokenbench predict --hardware amd-ryzen-ai-max-395 --model gpt-oss-20b --engine llama.cpp --sessions "
                "--turns 20 --shared-prefix 2000 --input-len 1000 --tool-len 800 --output-len 400 --think-time 5s"],
    "hardware": ["tokenbench hardware"],
    "models": ["tokenbench models"],
    "calibrate": ["tokenbench calibrate --out my-efficiency.toml   # the shipped published measurements",
                  "tokenbench calibrate --runs strix-depth --hardware amd-ryzen-ai-max-395 --model gpt-oss-20b "
                  "--weights Q4_K_M --out strix.toml"],
    "compare": ["tokenbench compare h100 strix --agents 16 --tokens 200"],
    "cost": ["tokenbench cost h100 --price-per-hour 1.79 --currency EUR",
             "tokenbench cost --tps 684 --price-per-hour 1.79 --api-price 14"],
    "import": ["tokenbench import vllm-result.json llama-bench.json --label a30"],
    "report": ["tokenbench report h100 strix --html report.html --md BENCHMARKS.md"],
    "recommend": ["tokenbench recommend --model qwen3.6-35b-a3b --agents 16 --ttft-p99 2s --currency EUR",
                  "tokenbench recommend --model llama-3.1-8b --capacity --ttft-p99 2s --tpot 50ms --runs h100-cap"],
    "quality": ["tokenbench quality --tasks niah,agreement       # the embedded engine, offline",
                "tokenbench quality --url http://strix:8080/v1 --label strix --tasks niah,agreement --contexts 4k,16k",
                "tokenbench quality --url http://a30:8080/v1 --label a30 --tasks gsm8k --limit 200",
                "tokenbench quality compare strix a30",
                "tokenbench quality knob --url http://strix:8080/v1 --param reasoning_effort=low,medium,high"],
}


class HelpFormatter(argparse.HelpFormatter):
    """Every option says its default, unless its help already does."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "default" not in text and action.option_strings:
            text += (" " if text else "") + "(default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """argparse without abbreviations ("--api-ke sk-…" would be read as --api-key and slip past the redaction of
    secrets), and with a one-line error that shows the user's own words but never a secret among them
    (``redact.arguments``: "--concurrency 8 --slo tpot=50ms" as typed, "--api-ke ***")."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def format_help(self) -> str:
        for action in self._actions:  # argument groups' options are here too
            if not action.help and action.option_strings:
                action.help = SHARED_HELP.get(action.option_strings[-1])
        # a command's examples, and a subcommand's (`quality compare`) only its own
        words = self.prog.split()
        examples = [e for e in EXAMPLES.get(words[1], []) if e == self.prog or e.startswith(self.prog + " ")] \
            if len(words) > 1 else []
        text = super().format_help()
        return text + ("\nexamples:\n" + "".join(f"  {e}\n" for e in examples) if examples else "")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        # argparse's own would join the refused words into its message, where a value can no longer be told
        # from the option before it: they are shown here from the list
        parsed, refused = self.parse_known_args(args, namespace)
        if refused:
            self._fail("unrecognized arguments: " + redact.arguments(refused, self._options()))
        return parsed

    def _options(self) -> frozenset[str]:
        """Every option of this parser and its subcommands'."""
        found: set[str] = set()
        for action in self._actions:
            found.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    found |= sub._options() if isinstance(sub, Parser) else set()
        return frozenset(found)

    def error(self, message: str) -> NoReturn:
        self._fail(redact.keys(message))  # e.g. "invalid choice: 'sk-…'" where a key was typed for a command

    def _fail(self, message: str) -> NoReturn:
        self.exit(2, f"tokenbench: error: {message}; see {self.prog} --help\n")


def _add_workload(s: argparse.ArgumentParser) -> None:
    """The endpoint, what each request sends, and agent sessions: a sweep's and a capacity search's."""
    add_endpoint(s.add_argument_group("endpoint"), "transformers", "completions", "exact prompt lengths")
    g = s.add_argument_group("workload")
    g.add_argument("--shape", help="agentic (4096/512), short (128/128), pp512, tg128")
    g.add_argument("--input-len", metavar="N|DIST",
                   help="prompt tokens per request: N, or drawn per request from uniform:LOW-HIGH, "
                        "normal:MEAN,SD or file:PATH (a list of lengths)")
    g.add_argument("--output-len", metavar="N|DIST",
                   help="output tokens per request (fixed where the server allows), N or a distribution as "
                        "--input-len; with --dataset, for items that give no length")
    g.add_argument("--dataset", metavar="FILE",
                   help="prompts from a file, shuffled by --seed: JSON lines of {\"prompt\"} (and max_tokens) or "
                        "{\"messages\"} (--api chat), or ShareGPT conversations (JSON lines or a JSON list)")
    g.add_argument("--prefix-len", type=NONNEG_INT, default=0, help="tokens shared by all prompts (default 0: all unique)")
    g.add_argument("--no-fixed-output", action="store_true", help="let the model stop at EOS")
    g.add_argument("--temperature", type=NONNEG, default=0.0, help="sampling temperature (default 0: greedy)")
    g.add_argument("--extra-body", help="JSON object merged into every request body")
    g.add_argument("--seed", type=int, help="workload seed (default: random, recorded)")
    g = s.add_argument_group("agent sessions (a conversation that grows turn by turn, the prefix cache on)")
    g.add_argument("--sessions", type=POSITIVE_INT,
                   help="run agent sessions: this many per level, by --concurrency agents (default: one each); "
                        "--input-len is the task, --output-len each answer")
    g.add_argument("--turns", type=POSITIVE_INT, default=10, help="turns per session")
    g.add_argument("--shared-prefix", type=NONNEG_INT, default=512,
                   help="tokens of the system prompt every agent shares")
    g.add_argument("--tool-len", default="uniform:64-192",
                   help="tokens of the tool result each turn appends: a number, uniform:LOW-HIGH, normal:MEAN,SD "
                        "or file:PATH")
    g.add_argument("--think-time", default="0s", help="an agent's pause between turns, e.g. 2s or uniform:1s-5s")
    g.add_argument("--max-context", type=POSITIVE_INT,
                   help="a session whose next turn would pass this many tokens ends (or is compacted: --on-cap) "
                        "(default: the server's slot context where it says, else none)")
    g.add_argument("--on-cap", choices=["end", "compact"], default="end",
                   help="at the cap: end the session, or replace its history by a summary and go on")
    g.add_argument("--no-baseline", action="store_true",
                   help="skip the baseline: the same sessions with a marker at each turn's start that busts the cache")


def _add_load(s: argparse.ArgumentParser, search: bool) -> None:
    """The load options: a sweep's levels, or a capacity search's range (``search``), and what both share."""
    g = s.add_argument_group("search" if search else "load")
    if search:
        g.add_argument("--slo", required=True,
                       help="the objectives every level must meet, e.g. ttft_p99=2s,agent_tps=30: ttft/tpot/itl/e2e "
                            "with _p50/_p90/_p95/_p99, agent_tps (tok/s each, at least), errors (share, e.g. 1%%), "
                            "session_p90 (agent sessions)")
        g.add_argument("--concurrency", metavar="LOW:HIGH",
                       help="search the agents (closed loop) in this range (default 1:16)")
        g.add_argument("--rate", metavar="LOW:HIGH",
                       help="search the requests/s (open loop) in this range instead, e.g. 0.5:20")
        g.add_argument("--resolution", type=POSITIVE, default=0.1,
                       help="stop when the first failing level is within this share of the last passing one "
                            "(concurrency: or the next whole agent)")
        g.add_argument("--budget", help="spend at most this long searching, e.g. 20m (default: no limit)")
    else:
        g.add_argument("--concurrency", help="closed-loop levels, e.g. 1,4,8,16,32")
        g.add_argument("--rate", help="open-loop levels in requests/s, e.g. 0.5,1,2 (instead of --concurrency)")
    g.add_argument("--arrival", choices=["poisson", "constant"], default="poisson")
    g.add_argument("--max-concurrency", type=POSITIVE_INT, help="open loop: cap on requests in flight")
    g.add_argument("--requests", type=POSITIVE_INT, help="measured requests per level (default 32)")
    if not search:
        g.add_argument("--duration", help="measure each level for this long instead, e.g. 60s")
    g.add_argument("--warmup", type=NONNEG_INT, help="uncounted full-length requests per level (default: one per slot)")
    if not search:
        g.add_argument("--repetitions", type=POSITIVE_INT, default=1, help="repeat each level; report median and CV")
    g.add_argument("--timeout", default="600s", help="per-request timeout (default 600s)")
    g.add_argument("--stall-timeout", default="60s", help="fail a request after this long without a byte")
    if not search:
        g.add_argument("--slo", help="e.g. ttft_p99=2s,tpot=50ms: goodput and pass/fail per level")
    g.add_argument("--max-error-rate", type=SHARE, default=0.1,
                   help="a level with a larger share of failed requests is failed, and the run exits 5 "
                        "(default 0.1)")
    g.add_argument("--workers", default="auto",
                   help="load-generating processes, each with its own event loop; auto (default): one per 64 "
                        "streams of the busiest level, at most one per core")
    g.add_argument("--ray", metavar="ADDRESS",
                   help="place the workers on a Ray cluster (its address, or auto on a node of it): one per node "
                        "unless --workers says how many; needs pip install 'tokenbench[ray]'")


def _add_output(s: argparse.ArgumentParser) -> None:
    """Where the run goes and how it is shown, and the clean-bench guard."""
    g = s.add_argument_group("output")
    g.add_argument("--label", help="host label (default: this hostname, or embedded-ENGINE)")
    g.add_argument("--price-per-hour", type=POSITIVE, help="box price for cost per million output tokens")
    g.add_argument("--currency", default=DEFAULT_CURRENCY, type=CURRENCY)
    g.add_argument("--json", help="write the run to this JSON file (DESIGN.md's result contract); - for stdout")
    g.add_argument("--format", choices=["table", "markdown"], default="table")
    g.add_argument("--quiet", action="store_true", help="no progress bars")
    g = s.add_argument_group("clean bench")
    g.add_argument("--guard", choices=["strict", "warn", "off"], default="warn",
                   help="strict: refuse to start, and stop before a level, on a dirty bench; warn: record it; "
                        "off: do not check")
    g.add_argument("--guard-config", help="guard thresholds TOML (default: packaged, then the user config dir)")
    g.add_argument("--no-metrics", action="store_true", help="do not sample the server's /metrics")
    g.add_argument("--metrics-interval", default="5s",
                   help="sample /metrics this often (default 5s; each sample costs the server a page: on 2 CPU "
                        "cores one vLLM /metrics GET stalled every stream for 70-145 ms)")
    add_db(s)


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="tokenbench", description="Measure LLM serving stacks you can trust.", epilog=EXIT_CODES,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"tokenbench {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=Parser, metavar="COMMAND")

    s = sub.add_parser("sweep", help="load-test an OpenAI-compatible endpoint over concurrency or rate levels")
    _add_workload(s)
    _add_load(s, search=False)
    g = s.add_argument_group("trace replay (one open-loop level at the trace's own times and lengths)")
    g.add_argument("--trace", metavar="FILE",
                   help="replay this trace: Mooncake JSONL (timestamp ms, input_length, output_length, hash_ids "
                        "of shared prompt blocks) or CSV with the header timestamp,input_length,output_length; "
                        "--requests N replays its first N")
    g.add_argument("--trace-speed", type=POSITIVE, default=1.0, help="replay this many times as fast (2: twice)")
    g.add_argument("--trace-block", type=POSITIVE_INT, default=512,
                   help="prompt tokens per hash id (default 512, as Mooncake's traces)")
    _add_output(s)

    cap = sub.add_parser("capacity", help="search the most agents (or requests/s) a box serves within an SLO",
                         description="Bracket, then bisect, the concurrency (or rate) at which the server still "
                                     "meets every objective of --slo. Each level stops early once its verdict "
                                     "cannot change; every level is stored. Prints how many agents the box "
                                     "serves, between which levels, how sure each verdict was, and the cost per "
                                     "agent-hour with --price-per-hour.")
    _add_workload(cap)
    _add_load(cap, search=True)
    _add_output(cap)
    cap.set_defaults(duration=None, repetitions=1, trace=None, trace_speed=1.0, trace_block=512)

    gd = sub.add_parser("guard", help="check the machine is clean enough to measure (exit 1 if not)")
    gd.add_argument("--guard-config", help="thresholds TOML")
    gd.add_argument("--url", help="the server to be measured, if on this machine (not counted against the bench)")
    gd.add_argument("--root", default="/", help=argparse.SUPPRESS)
    gd.add_argument("--json", help="write the snapshot to this JSON file; - for stdout")

    en = sub.add_parser("engines", help="the embedded engines: which are ready, what each needs; build them")
    en.add_argument("build", nargs="?", choices=["build"], help="make the named engines ready now")
    en.add_argument("names", nargs="*", metavar="ENGINE",
                    help="transformers, vllm, llama-server, llama-cpp-python, aiperf (a reference tool), or all")
    add_json(en, "each engine's state")

    r = sub.add_parser("runs", help="list saved runs")
    r.add_argument("--limit", type=POSITIVE_INT, default=30, help="the newest this many runs (default 30)")
    add_json(r, "the list")
    add_db(r)

    dp = sub.add_parser("depth", help="llama-bench style pp/tg at context depths, over HTTP")
    add_endpoint(dp, "llama-server")
    dp.add_argument("--depths", help="tokens of context, e.g. 0,8k,32k,65k (embedded default 0,1k,4k)")
    dp.add_argument("--pp", type=POSITIVE_INT, default=512, help="prompt tokens processed on top of the depth")
    dp.add_argument("--tg", type=POSITIVE_INT, default=128, help="tokens generated on top of the depth")
    dp.add_argument("--repetitions", type=POSITIVE_INT, default=3)
    dp.add_argument("--label")
    dp.add_argument("--seed", type=int)
    dp.add_argument("--json", help="write the run to this JSON file; - for stdout")
    dp.add_argument("--llama-bench", metavar="PATH", nargs="?", const="built",
                    help="drive llama-bench instead and import its JSON (no PATH: the one tokenbench builds)")
    dp.add_argument("--model-file", help="with --llama-bench: the GGUF to bench (default: the embedded model's)")
    lb = dp.add_argument_group("llama.cpp options: passed to llama-bench, or to the embedded llama-server, and "
                               "recorded")
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

    cs = sub.add_parser("coldstart", help="time a server from start to healthy and to its first token, repeatedly")
    cs.add_argument("--cmd", required=True, help="the server's command line; {port} is replaced by --url's port")
    cs.add_argument("--url", required=True, help="its OpenAI-compatible base URL")
    cs.add_argument("--health", help="the URL that answers 200 when it is up (default: URL/models)")
    cs.add_argument("--model")
    cs.add_argument("--repeat", type=POSITIVE_INT, default=3, help="boots; the first is the cold one")
    cs.add_argument("--timeout", default="600s")
    cs.add_argument("--label")
    cs.add_argument("--json", help="write the boots to this JSON file; - for stdout")
    cs.add_argument("--log", help="append the server's output to this file")
    add_db(cs)

    hw = sub.add_parser("hardware", help="list the hardware catalog, with sources")
    hw.add_argument("--format", choices=["table", "markdown"], default="table")
    add_json(hw, "every entry with all its fields")
    md = sub.add_parser("models", help="list the model catalog, with sources")
    md.add_argument("--format", choices=["table", "markdown"], default="table")
    add_json(md, "every entry with all its fields")

    fp = sub.add_parser("fit", help="does a model and its KV cache fit a box? largest context and concurrency")
    add_setup(fp, default_engine="llama.cpp")
    fp.add_argument("--context", default="8192", help="tokens per sequence, e.g. 65536 or 64k")
    fp.add_argument("--concurrency", type=POSITIVE_INT, default=1, help="sequences held at once")
    add_flash_attn(fp, "its F32 score buffer takes memory")
    add_json(fp, "the memory budget, in GiB")

    pp = sub.add_parser("predict", help="predicted speed (roofline ceiling and calibrated estimate)")
    add_setup(pp, default_engine="vllm", required=False)
    pp.add_argument("--input-len",
                    help="prompt tokens (default 4096 when serving; with --test, the pp length, default 512; with "
                    "--sessions, the task of turn 1, default 1024, or a draw such as uniform:512-2048)")
    pp.add_argument("--output-len",
                    help="output tokens (default 512 when serving; with --test, the tg length, default 128; with "
                    "--sessions, each answer, default 256, or a draw)")
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
                    help="llama.cpp server slots (-np N): up to N sequences decode in one batch (default 1)")
    pp.add_argument("--test", choices=["tg128", "pp512", "depth"], help="llama-bench style tests at --depth")
    pp.add_argument("--depth", help="with --test: tokens already in the cache, e.g. 0,8k,32k,65536 (default 0)")
    pp.add_argument("--spec-tokens", type=POSITIVE_INT, help="speculative decoding / MTP: drafted tokens per step")
    pp.add_argument("--acceptance", type=SHARE, help="per-token acceptance rate (0..1)")
    pp.add_argument("--acceptance-length", type=POSITIVE, help="mean acceptance length (vLLM's τ)")
    pp.add_argument("--draft-cost", type=POSITIVE, help="draft cost per token relative to the target (default: MTP 1/layers)")
    ss = pp.add_argument_group("agent sessions (as sweep --sessions measures them)")
    ss.add_argument("--sessions", nargs="?", type=POSITIVE_INT, const=0, metavar="N",
                    help="predict an agent's session turn by turn, with and without the prefix cache; N: sessions "
                    "in all (default one per agent, --concurrency)")
    ss.add_argument("--turns", type=POSITIVE_INT, help="turns per session (default 10)")
    ss.add_argument("--shared-prefix", metavar="T", help="system-prompt tokens every session shares (default 0)")
    ss.add_argument("--tool-len", metavar="DRAW", help="tokens of each tool result (default 512)")
    ss.add_argument("--think-time", metavar="DRAW", help="the agent's time between an answer and its next turn, "
                    "e.g. 5s or uniform:1s-10s (default 0)")
    ss.add_argument("--max-context", metavar="T",
                    help="the session ends at the first turn whose prompt and answer pass T tokens")
    pp.add_argument("--against", help="predict every row of a file in the published.csv layout")
    pp.add_argument("--calibration", help="efficiency TOML to use instead of the packaged one")
    pp.add_argument("--json", help="write the predictions to this JSON file; - for stdout")
    pp.add_argument("--save", metavar="LABEL", help="store the predictions as a run (provenance 'predicted')")
    add_db(pp)
    pp.add_argument("--format", choices=["table", "markdown"], default="table")

    cp = sub.add_parser("calibrate", help="fit per-backend efficiencies on published measurements")
    cp.add_argument("file", nargs="*", help="measurements in the published.csv layout (every source is fitted; "
                    "default: the published measurements the package ships)")
    cp.add_argument("--out", required=True, help="efficiency TOML to write (predict --calibration FILE uses it)")
    own = cp.add_argument_group("your own runs (anchor the fit on the box you measured)")
    own.add_argument("--runs", nargs="+", default=[], metavar="RUN",
                     help="stored sweep, depth or llama-bench runs (ids or labels) of one box, model and weights")
    own.add_argument("--hardware", help="with --runs: the box they ran on ('tokenbench hardware' lists ids)")
    own.add_argument("--model", help="with --runs: the catalog model they served")
    own.add_argument("--weights", help="with --runs: weight format, e.g. Q4_K_M, FP8 (default: the runs' own)")
    own.add_argument("--kv", help="with --runs: KV cache format (default: the runs' own, else F16)")
    own.add_argument("--engine", help="with --runs: engine and backend, e.g. 'llama.cpp vulkan', vllm "
                     "(default: the runs' own, with the box's backend)")
    add_latest(cp)
    add_db(cp)

    c = sub.add_parser("compare", help="two runs side by side: ratios with 95%% intervals, the faster side where it is "
                       "significant, crossovers, effective serving")
    c.add_argument("a", help="run id, id prefix or label")
    c.add_argument("b", help="run id, id prefix or label")
    c.add_argument("--agents", type=POSITIVE_INT, default=16, help="effective-serving line: this many agents ... (default 16)")
    c.add_argument("--tokens", type=POSITIVE_INT, default=200, help="... each asking for this many tokens (default 200)")
    c.add_argument("--format", choices=["table", "markdown"], default="table")
    add_json(c, "the comparison")
    add_latest(c)
    add_db(c)

    co = sub.add_parser("cost", help="price per million output tokens at each operating point")
    co.add_argument("run", nargs="?", help="run id, id prefix or label (or give --tps)")
    co.add_argument("--tps", type=POSITIVE, help="an aggregate output rate instead of a run")
    co.add_argument("--price-per-hour", type=POSITIVE, help="rented: price per hour")
    co.add_argument("--busy-hours", type=NONNEG, default=24.0, help="rented: hours a day it does this work")
    co.add_argument("--owned", action="store_true", help="an owned box: --purchase, --life-years, --watts, --kwh-price")
    co.add_argument("--purchase", type=POSITIVE)
    co.add_argument("--life-years", type=POSITIVE, default=3.0)
    co.add_argument("--watts", type=NONNEG, default=0.0, help="power draw under this load")
    co.add_argument("--kwh-price", type=NONNEG, default=0.0)
    co.add_argument("--hours-per-day", type=NONNEG, default=24.0, help="owned: hours a day it does this work")
    co.add_argument("--currency", default=None, type=CURRENCY, help=f"the box's currency (default: the run's, else {DEFAULT_CURRENCY})")
    co.add_argument("--api-price", type=POSITIVE, help="an API's price per million output tokens, to compare")
    co.add_argument("--api-currency", type=CURRENCY, help="the API price's currency (default: --currency)")
    co.add_argument("--exchange-rate", type=POSITIVE, help="units of --currency per 1 --api-currency")
    co.add_argument("--format", choices=["table", "markdown"], default="table")
    add_json(co, "the cost per operating point")
    add_latest(co)
    add_db(co)

    im = sub.add_parser("import", help="vllm bench serve / llama-bench / GuideLLM / published.csv results into the store")
    im.add_argument("files", nargs="+")
    im.add_argument("--label", help="label for the imported runs (default: from the file)")
    add_db(im)

    rp = sub.add_parser("report", help="Markdown (BENCHMARKS.md), a self-contained HTML report with plots, PNGs, JSON")
    rp.add_argument("runs", nargs="+", help="run ids, id prefixes or labels (predicted runs are drawn dashed)")
    rp.add_argument("--html", help="write the HTML report here")
    rp.add_argument("--md", help="append or rewrite each run's section of this Markdown file")
    rp.add_argument("--png", help="write each plot as a PNG into this directory")
    rp.add_argument("--json", help="write the runs, the plotted series and each pair compared as JSON here")
    rp.add_argument("--price-per-hour", type=POSITIVE,
                    help="price per hour for the cost columns and plot (default: each run's own price, if it has one)")
    rp.add_argument("--currency", type=CURRENCY)
    rp.add_argument("--title", default="tokenbench report")
    add_latest(rp)
    add_db(rp)

    rc = sub.add_parser("recommend", help="rank boxes by cost per million tokens among those that fit and meet SLOs",
                        description="Rank boxes by cost per million output tokens among those that fit and meet the "
                        "SLOs. When none meets them, list the closest, by how far each missed its worst SLO (a box "
                        "that does not fit in memory is further than any miss). Exit 0 either way: no box meeting "
                        "the SLOs is an answer (--json: 'ranked' empty, 'closest' filled), not an error.")
    rc.add_argument("--model", required=True, help="the catalog model to serve ('tokenbench models' lists them)")
    rc.add_argument("--agents", type=POSITIVE_INT, default=16,
                    help="the agents to serve (--capacity: the team's agents, to say how many boxes it needs)")
    rc.add_argument("--input-len", type=POSITIVE_INT, default=4096)
    rc.add_argument("--output-len", type=POSITIVE_INT, default=512)
    rc.add_argument("--ttft-p99", help="SLO, e.g. 2s")
    rc.add_argument("--tpot", help="SLO, e.g. 50ms")
    rc.add_argument("--currency", default=DEFAULT_CURRENCY, type=CURRENCY,
                    help="of every price; a catalog price in another currency is left out, with a note")
    rc.add_argument("--price", action="append", default=[], metavar="ID=PER_HOUR", help="a rental price (repeat)")
    rc.add_argument("--owned", action="append", default=[], metavar="ID=PURCHASE:YEARS:WATTS", help="an owned box (repeat)")
    rc.add_argument("--kwh-price", type=NONNEG, default=0.30, help="electricity price for owned boxes")
    rc.add_argument("--runs", nargs="*", default=[], help="measured runs (ids or labels) to rank beside the predictions")
    rc.add_argument("--capacity", action="store_true",
                    help="rank by cost per agent-hour at the SLOs: each box's capacity (the most agents it serves "
                    "within --ttft-p99/--tpot), measured from a run's levels (tokenbench capacity) or PREDICTED")
    rc.add_argument("--parity-with", metavar="LABEL",
                    help="keep only measured boxes whose quality runs (tokenbench quality --label BOX) are the "
                    "same within noise as, or better than, this box's")
    rc.add_argument("--format", choices=["table", "markdown"], default="table")
    add_json(rc, "the ranking and the exclusions")
    add_latest(rc)
    add_db(rc)

    sh = sub.add_parser("show", help="print a saved run again")
    sh.add_argument("run", help="run id, unique id prefix, or label")
    sh.add_argument("--json", help="also write it to this JSON file (every level); - for stdout")
    sh.add_argument("--all", action="store_true", help="print every level (default: the first 200)")
    sh.add_argument("--guard", nargs="?", const=0, type=POSITIVE_INT, metavar="LEVEL",
                    help="print the guard's snapshot taken before each level, or before level LEVEL (1 is the first)")
    sh.add_argument("--format", choices=["table", "markdown"], default="table")
    add_latest(sh)
    add_db(sh)

    add_quality_parser(sub)
    return ap


def add_flash_attn(p: argparse.ArgumentParser, off_means: str) -> None:
    p.add_argument("--flash-attn", choices=["on", "off"], default="on",
                   help=f"llama.cpp flash attention (-fa 1 / -fa 0; default on, llama.cpp's auto): off writes every "
                   f"score to memory, {off_means}")


def add_setup(p: argparse.ArgumentParser, default_engine: str, required: bool = True) -> None:
    p.add_argument("--hardware", required=required, help="hardware id ('tokenbench hardware' lists them)")
    p.add_argument("--model", required=required, help="model id, or a config.json / .gguf path")
    p.add_argument("--weights", help="weight format: BF16, FP8, AWQ, Q4_K_M, Q8_0, ... (default BF16, "
                   "or Q4_K_M for llama.cpp)")
    p.add_argument("--kv", default="auto", help="KV-cache format: auto (model dtype), fp8, q8_0, q4_0, f16")
    p.add_argument("--engine", default=default_engine, help=f"one of {known()}")
    p.add_argument("--engine-version", metavar="V",
                   help="the engine's build the prediction assumes: a year (2025), a llama.cpp build (b6918) or a "
                        "vLLM release (0.21); its constants are those fitted on builds of that year or the newest "
                        "before it (default: the newest the data has; a newer one widens the bands)")
    p.add_argument("--tp", type=POSITIVE_INT, default=1,
                   help="tensor parallelism: GPUs of the box sharing every layer (vLLM/SGLang --tensor-parallel-size)")
