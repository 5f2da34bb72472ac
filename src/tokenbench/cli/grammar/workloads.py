"""The workload options ``sweep`` and ``capacity`` share (lengths, a dataset, sessions, a trace, a replay): grammar
only. The workload they make is in ``cli/workloads.py``, imported only when a command runs."""
from __future__ import annotations

import argparse

from ...trajectories.model import TRACE_FORMATS
from ..options import NONNEG, NONNEG_INT, POSITIVE, POSITIVE_INT

#: The most --trace-scale divides a replay's lengths by. Lengths are rounded up to whole tokens, one at least:
#: by 1,024 every block of the formats read (64 to 512 tokens) is long since one token and a 100K-token call, an
#: agent's longest near a 128K context, is 98; past it a trace's lengths say nothing of its shape.
MAX_TRACE_SCALE = 1024


def trace_scale(text: str) -> float:
    """--trace-scale: from 1 (the trace as recorded) to ``MAX_TRACE_SCALE``. Below 1 it would lengthen every call
    past the recorded one (0.001: a 100K-token call as 100M tokens, which no model holds, and text that takes
    minutes to build); nan and inf are no scale."""
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not 1 <= v <= MAX_TRACE_SCALE:  # nan fails both sides
        raise argparse.ArgumentTypeError(
            f"'{text}' is no scale: give a number from 1 (the trace as recorded) to {MAX_TRACE_SCALE:,}, which "
            "every length is divided by (--trace-scale 16 replays a 100K-token call as 6,250 tokens)")
    return v


def add_workload_options(s: argparse.ArgumentParser) -> None:
    """What each request sends (fixed or drawn lengths, a dataset), and agent sessions."""
    g = s.add_argument_group("workload")
    g.add_argument("--shape", help="agentic (4096/512), short (128/128), pp512, tg128 (default short; the "
                   "embedded engine's 128/64)")
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
                        "(default: the context the server gives a request where it says, else the embedded model's)")
    g.add_argument("--on-cap", choices=["end", "compact"], default="end",
                   help="at the cap: end the session, or replace its history by a summary and go on")
    g.add_argument("--no-baseline", action="store_true",
                   help="skip the baseline: the same sessions with a marker at each turn's start that busts the cache")
    g.add_argument("--background", metavar="RATE[,IN,OUT]",
                   help="a batch load beside the sessions: unique prompts sent open loop at RATE requests/s, IN "
                        "tokens in and OUT out (default 1024, 128); compare the run with the same sessions alone "
                        "(same --seed)")


def add_trace_options(s: argparse.ArgumentParser) -> None:
    g = s.add_argument_group("trace replay", "a request trace at its own times and lengths; recorded agents as "
                                             "they behaved")
    g.add_argument("--trace", metavar="FILE",
                   help="replay this trace: Mooncake JSONL (timestamp ms, input_length, output_length, hash_ids "
                        "of shared prompt blocks) or CSV with the header timestamp,input_length,output_length, one "
                        "open-loop level (--requests N: its first N); or recorded agent trajectories (Weka/AgentX "
                        "traces or a folder of them, MLCommons agentic JSONL, TraceLab rows, a tokenbench record "
                        "log), replayed as agents: --concurrency N lanes, or at the recorded times")
    g.add_argument("--trace-format", choices=TRACE_FORMATS, metavar="FORMAT",
                   help=f"the trace's format: {', '.join(TRACE_FORMATS)} (default: read from its content)")
    g.add_argument("--trace-speed", type=POSITIVE, default=1.0,
                   help="replay this many times as fast (2: twice); for trajectories, at their recorded start "
                        "times (the default where they record them and no --concurrency is given)")
    g.add_argument("--trace-block", type=POSITIVE_INT, default=512,
                   help="prompt tokens per hash id (default 512, as Mooncake's traces; a Weka trace says its own, "
                        "TraceLab rows 64)")
    g.add_argument("--trace-scale", type=trace_scale, default=1.0,
                   help="trajectories: divide every length by this, to replay a trace's shape on a small model or "
                        f"box (stated in the table's heading): from 1 (as recorded) to {MAX_TRACE_SCALE:,}, as "
                        "lengths are rounded up to whole tokens and by then every block is one token and a "
                        "100K-token call 98 (below 1 it would lengthen calls past any recorded)")
    g.add_argument("--max-think", default="10s",
                   help="trajectories: a recorded pause or subagent delay longer than this waits this long "
                        "(default 10s, as AgentX caps idle gaps; 0s: no pauses; none: as recorded)")
    g.add_argument("--answers", choices=["recorded", "live"], default="recorded",
                   help="trajectories with text: re-send the recorded history, so every engine sees the same tokens "
                        "(default), or feed back the server's own answers")
