"""The command line's top-level grammar: the commands in the order ``--help`` lists them (each command's options
are in its ``grammar/`` module's ``add_NAME_parser``), the help shared by options of one meaning, the examples, the
exit codes, and the parser that turns a bad argument into one line."""
from __future__ import annotations

import argparse
import difflib
import re
import shlex
import sys
from typing import Any, NoReturn
from .. import __version__, redact
from .grammar.agent import add_agent_parser
from .grammar.import_export import add_export_parser, add_import_parser
from .grammar.report import add_report_parser
from .grammar.capacity import add_capacity_parser
from .grammar.coldstart import add_coldstart_parser
from .grammar.compare import add_compare_parser
from .grammar.cost import add_cost_parser
from .grammar.depth import add_depth_parser
from .grammar.engines import add_engines_parser
from .grammar.guard import add_guard_parser
from .grammar.predicting import add_calibrate_parser, add_fit_parser, add_hardware_parser, add_models_parser, add_predict_parser
from .grammar.recommend import add_recommend_parser
from .grammar.record import add_record_parser
from .grammar.runs import add_runs_parser, add_show_parser
from .grammar.sweep import add_sweep_parser
from .grammar.quality import add_quality_parser


EXIT_CODES = """exit codes:
  0    done: every level measured (an --slo objective missed is a result, not
       a failure: a script reads each level's slo_met in --json); record and
       engines serve: stopped by Ctrl-C
  1    guard: the bench is dirty; record: nothing recorded; fit: the model
       does not fit the box (its hybrid split, if any, is said), or the
       context passes the model's own; predict: no level fits, so none was
       predicted
  2    bad arguments or input (one line says what to do)
  3    the endpoint cannot be used (unreachable, wrong model, refused, died)
  4    the embedded engine could not be built or started
  5    a level failed (error rate above --max-error-rate, truncated prompts);
       its results are kept and marked
  6    --guard strict found the bench dirty before a run or a level
  70   a bug in tokenbench (TOKENBENCH_DEBUG=1 shows the traceback)
  130  interrupted (Ctrl-C, SIGTERM, SIGHUP); finished levels kept"""


#: Help for options that mean the same in every command that takes them.
SHARED_HELP = {
    "--format": "table for a terminal, markdown to paste",
    "--model": "the served model name (default: the first the server lists)",
    "--api-key": "bearer key (default: $OPENAI_API_KEY; on /v1/messages also sent as x-api-key); sent, never "
                 "stored",
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
              "tokenbench sweep --engine llama-server --sessions 8 --turns 20 --think-time uniform:1s-5s",
              "tokenbench sweep --url http://gpu-box:8000/v1 --sessions 16 --turns 20 --think-time uniform:1s-5s "
              "--duration 1h --no-baseline   # a soak: does the cache keep holding?"],
    "capacity": ["tokenbench capacity --slo ttft_p99=2s,agent_tps=5   # embedded, 1:16 agents",
                 "tokenbench capacity --url http://gpu-box:8000/v1 --slo ttft_p99=2s,tpot_p90=50ms --concurrency 1:64 "
                 "--requests 128 --budget 20m --price-per-hour 2.5",
                 "tokenbench capacity --url http://gpu-box:8000/v1 --cache-cliff --concurrency 1:32 --turns 20 "
                 "--think-time 2s --slo ttft_p90=10s   # how many agents stay warm"],
    "depth": ["tokenbench depth                      # embedded llama-server, depths 0,1k,4k",
              "tokenbench depth --url http://strix:8080/v1 --depths 0,8k,32k,65k --repetitions 3"],
    "guard": ["tokenbench guard", "tokenbench guard --url http://127.0.0.1:8080/v1 --json guard.json"],
    "agent": ["tokenbench agent --token-file agent.token --port-of-server 8000   # on the server host",
              "tokenbench agent --host 0.0.0.0 --token-file agent.token --power-url http://127.0.0.1:9400/metrics"],
    "coldstart": ['tokenbench coldstart --cmd "llama-server -m model.gguf --port {port}" '
                  "--url http://127.0.0.1:8080/v1"],
    "engines": ["tokenbench engines", "tokenbench engines build vllm llama-server",
                "tokenbench engines serve llama-server --port 8080   # until Ctrl-C: for record, or any client"],
    "runs": ["tokenbench runs", "tokenbench runs --limit 5 --json -"],
    "show": ["tokenbench show h100 --format markdown", "tokenbench show h100 --guard 2",
             "tokenbench show agents-demo --trees   # a replay's trees one by one"],
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
    "import": ["tokenbench import vllm-result.json llama-bench.json --label a30",
               "tokenbench import aiperf-artifacts/profile_export.jsonl --label h100-aiperf"],
    "export": ["tokenbench export strix-depth --as llama-bench-md",
               "tokenbench export h100 --as published-csv --hardware nvidia-h100-sxm --model qwen3.6-27b --out h100.csv"],
    "report": ["tokenbench report h100 strix --html report.html --md BENCHMARKS.md"],
    "recommend": ["tokenbench recommend --model qwen3.6-35b-a3b --agents 16 --ttft-p99 2s --currency EUR",
                  "tokenbench recommend --model llama-3.1-8b --capacity --ttft-p99 2s --tpot 50ms --runs h100-cap"],
    "record": ["tokenbench record --upstream http://gpu-box:8000 --out my-agents.jsonl",
               "tokenbench record --upstream http://gpu-box:8000 --out a.jsonl --lengths-only"],
    "quality": ["tokenbench quality --tasks niah,agreement       # the embedded engine, offline",
                "tokenbench quality --url http://strix:8080/v1 --label strix --tasks niah,agreement --contexts 4k,16k",
                "tokenbench quality --url http://a30:8080/v1 --label a30 --tasks gsm8k --limit 200",
                "tokenbench quality compare strix a30",
                "tokenbench quality knob --url http://strix:8080/v1 --param reasoning_effort=low,medium,high"],
}


def example_lines(example: str, width: int) -> str:
    """One example as a shell would take it, within ``width`` columns where its words allow: its comment on a line
    of its own above it where the two do not fit on one, and the command broken before an option (with its
    values) with a backslash, its continuations indented."""
    command, _, comment = example.partition("   # ")
    command, comment = command.rstrip(), comment.strip()
    if len(command) + 2 + (len(comment) + 5 if comment else 0) <= width:
        return f"  {command}{'   # ' + comment if comment else ''}\n"
    units: list[str] = []  # the command's words, each option with its values
    for word in shlex.split(command, posix=False):  # a quoted word stays one, quotes kept
        if word.startswith("-") or not units:
            units.append(word)
        else:
            units[-1] += " " + word
    out = [f"  # {comment}"] if comment else []
    line = "  " + units[0]
    for unit in units[1:]:
        if len(line) + 1 + len(unit) + 2 > width:
            out.append(line + " \\")
            line = "      " + unit
        else:
            line += " " + unit
    return "\n".join([*out, line]) + "\n"


class HelpFormatter(argparse.HelpFormatter):
    """Every option says its default, unless its help already does."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        empty = isinstance(action.default, list) and not action.default  # a repeated option given no time: none
        if action.default not in (None, False, argparse.SUPPRESS) and not empty and "default" not in text \
                and action.option_strings:
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
        width = self._get_formatter()._width  # argparse's: the terminal's columns less two
        return text + ("\nexamples:\n" + "".join(example_lines(e, width + 2) for e in examples) if examples else "")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        # argparse's own would join the refused words into its message, where a value can no longer be told
        # from the option before it: they are shown here from the list
        parsed, refused = self.parse_known_args(args, namespace)
        if refused:
            command = self._command(getattr(parsed, "command", None))
            told = "unrecognized arguments: " + redact.arguments(refused, self._options())
            command._fail(told + _did_you_mean(refused, command._options()))
        return parsed

    def _command(self, name: str | None) -> Parser:
        """The subcommand's parser, whose options and help a refused word is measured against (else this one)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and name in action.choices:
                sub = action.choices[name]
                return sub if isinstance(sub, Parser) else self
        return self

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
        if message.endswith("required: COMMAND"):  # bare ``tokenbench``: what it can do, not only that it needs more
            self.print_help(sys.stderr)
        if "--format: invalid choice: 'json'" in message:
            message += "; JSON is --json FILE (- for stdout)"
        self._fail(_command_meant(message, self) or redact.keys(message))  # a key typed for a command: "sk-…"


    def _fail(self, message: str) -> NoReturn:
        self.exit(2, f"tokenbench: error: {message}; see {self.prog} --help\n")


def _command_meant(message: str, parser: argparse.ArgumentParser) -> str | None:
    """"unknown command 'swep' (did you mean 'sweep'?)" for a misspelt command; None for anything else (a word
    near no command keeps argparse's list of them)."""
    m = re.search(r"argument COMMAND: invalid choice: '([^']*)'", message)
    commands = [c for a in parser._actions if isinstance(a, argparse._SubParsersAction) for c in a.choices]
    near = difflib.get_close_matches(m.group(1), commands, n=1, cutoff=0.75) if m and len(m.group(1)) <= 20 else []
    return f"unknown command '{m.group(1)}' (did you mean '{near[0]}'?)" if m and near else None


def _did_you_mean(refused: list[str], options: frozenset[str]) -> str:
    """" (did you mean --hardware?)" for a misspelt option among the refused words; "" for none. Only a near
    miss (a ratio of 0.9): --concurrency, an option of other commands, is 0.87 like recommend's --currency."""
    near = [m[0] for w in refused if w.startswith("--")
            if (m := difflib.get_close_matches(w.split("=", 1)[0], sorted(options), n=1, cutoff=0.9))]
    return f" (did you mean {', '.join(dict.fromkeys(near))}?)" if near else ""


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="tokenbench", description="Measure LLM serving stacks, with numbers you can trust.", epilog=EXIT_CODES,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"tokenbench {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=Parser, metavar="COMMAND")

    add_sweep_parser(sub)
    add_capacity_parser(sub)
    add_record_parser(sub)
    add_guard_parser(sub)
    add_agent_parser(sub)
    add_engines_parser(sub)
    add_runs_parser(sub)
    add_depth_parser(sub)
    add_coldstart_parser(sub)
    add_hardware_parser(sub)
    add_models_parser(sub)
    add_fit_parser(sub)
    add_predict_parser(sub)
    add_calibrate_parser(sub)
    add_compare_parser(sub)
    add_cost_parser(sub)
    add_import_parser(sub)
    add_export_parser(sub)
    add_report_parser(sub)
    add_recommend_parser(sub)
    add_show_parser(sub)
    add_quality_parser(sub)
    return ap


