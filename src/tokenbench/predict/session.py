"""An agent session predicted turn by turn: the measured workload is ``sweep --sessions``, this is the
same session on a box you do not own.

A coding agent's turn k re-sends the whole conversation (the shared system prompt, the task, every earlier answer
and tool result) plus a new tool result. With a prefix cache (vLLM's automatic prefix caching, llama.cpp's slot
and host-memory prompt cache) only the new tokens are prefilled: the previous answer and the new tool result, at
the depth of the cached history, which costs attention over it. Without one the whole context is prefilled. Both
come from the depth-aware estimates ``--test depth`` uses (``Setup.prefill``, ``Setup.decode``): one agent's TTFT
is the prefill of its new tokens, its decode rate is the step at the middle of its answer; N agents go through
the serving prediction's closed loop (``Setup.serve``: ``serving.one_stream``, ``serving.serve_queue``) with each
prompt's cached depth. No second roofline.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

from ..draws import Draw, parse
from ..errors import UsageError
from . import roofline as rf
from . import serving
from .setup import Setup
from ..layout import plural

#: A session when nothing else is given: ``sweep --sessions``'s defaults, so that predict and recommend predict what
#: it measures (a test holds them equal to sweep's options): turns, the shared system prompt, the task of turn 1 and
#: each answer (sweep's default request, 128 in and 128 out), each tool result, the think time.
DEFAULT_TURNS = 10
DEFAULT_SHARED_PREFIX = 512
DEFAULT_INPUT_LEN = 128
DEFAULT_OUTPUT_LEN = 128
DEFAULT_TOOL_LEN = "uniform:64-192"
DEFAULT_THINK_TIME = "0s"


@dataclass(frozen=True, slots=True)
class SessionShape:
    """One agent's session, in ``sweep --sessions``'s terms: ``turns`` turns; turn 1 sends the shared prefix
    (``shared_prefix`` tokens, the same for every session) and the task (``input_len``); every later turn adds
    the previous answer (``output_len``) and a tool result (``tool_len``); the agent thinks ``think_time`` between
    an answer and its next turn. A turn is sent while its prompt and its answer fit ``max_context`` (what the
    server's context must hold); the session ends at the first that does not. A prediction takes each draw at
    its mean."""

    turns: int = DEFAULT_TURNS
    shared_prefix: int = DEFAULT_SHARED_PREFIX
    input_len: Draw = field(default_factory=lambda: Draw.fixed(DEFAULT_INPUT_LEN))
    tool_len: Draw = field(default_factory=lambda: parse(DEFAULT_TOOL_LEN, "--tool-len"))
    output_len: Draw = field(default_factory=lambda: Draw.fixed(DEFAULT_OUTPUT_LEN))
    think_time: Draw = field(default_factory=lambda: parse(DEFAULT_THINK_TIME, "--think-time", "s"))
    max_context: int | None = None

    @property
    def task(self) -> int:
        return round(self.input_len.expected())

    @property
    def tool(self) -> int:
        return round(self.tool_len.expected())

    @property
    def output(self) -> int:
        return max(1, round(self.output_len.expected()))

    @property
    def think_s(self) -> float:
        return self.think_time.expected()

    @property
    def drawn(self) -> list[str]:
        """The options whose lengths or times are drawn, not fixed (a prediction takes their means)."""
        return [name for name, d in (("--input-len", self.input_len), ("--tool-len", self.tool_len),
                                     ("--output-len", self.output_len), ("--think-time", self.think_time))
                if not d.is_fixed]

    def workload(self, sessions: int | None = None) -> dict[str, Any]:
        """What a prediction's manifest records of the session: the lengths it used (means) and the draws given."""
        return {"kind": "sessions", "task": self.input_len.to_dict(), "tool": self.tool_len.to_dict(),
                "output": self.output_len.to_dict(), "think": self.think_time.to_dict(),  # as a measured run's
                "sessions": sessions, "turns": self.turns, "shared_prefix": self.shared_prefix,
                "input_len": self.task, "tool_len": self.tool, "output_len": self.output, "think_time_s": self.think_s,
                "max_context": self.max_context,
                "draws": {k: d.to_dict() for k, d in (("input_len", self.input_len), ("tool_len", self.tool_len),
                                                       ("output_len", self.output_len),
                                                       ("think_time", self.think_time))}}

    def context(self, turn: int) -> int:
        """The prompt turn ``turn`` (1: the first) sends: prefix, task, and every earlier answer and tool result."""
        return self.shared_prefix + self.task + (turn - 1) * (self.output + self.tool)

    def cached(self, turn: int) -> int:
        """Of it, what the prefix cache holds: the previous turn's prompt (its answer and the new tool result are
        new); at turn 1 the shared prefix, which other sessions (or this box's earlier ones) put there."""
        return self.shared_prefix if turn == 1 else self.context(turn - 1)

    def sent(self) -> int:
        """Turns sent: all of them, or those before the first whose prompt and answer pass ``max_context``."""
        if self.max_context is None:
            return self.turns
        fit = (self.max_context - self.output - self.shared_prefix - self.task) // (self.output + self.tool) + 1
        return max(0, min(self.turns, fit))

    def longest(self) -> int:
        """The most tokens one session's sequence holds: its last turn sent, prompt and answer."""
        return self.context(max(1, self.sent())) + self.output

    def check(self) -> None:
        if self.max_context is not None and self.sent() == 0:
            first = self.context(1) + self.output
            raise UsageError(f"--max-context {self.max_context:,}: the first turn already needs {first:,} tokens "
                             f"(prefix {self.shared_prefix:,} + task {self.task:,} + answer {self.output:,})")


@dataclass(slots=True)
class TurnPrediction:
    """One turn, with the prefix cache (``ttft_s``, ``tpot_s``: only the new tokens prefilled, at the depth of the
    cached ones) and without it (``cold_*``: the whole context prefilled). ``fits``: every agent's context and
    answer fit the box's memory beside the weights; ``offload``: else llama.cpp's hybrid split, which one agent's
    estimates include."""

    turn: int  # 1: the first
    context: int
    cached: int
    ttft_s: rf.Estimate
    tpot_s: rf.Estimate
    cold_ttft_s: rf.Estimate
    cold_tpot_s: rf.Estimate
    fits: bool = True
    offload: bool = False
    ttft_worst_s: rf.Estimate | None = None  # the turn's slowest prompt (its median alone, for one agent)

    @property
    def uncached(self) -> int:
        return self.context - self.cached


def _sum(parts: list[rf.Estimate]) -> rf.Estimate:
    return rf.Estimate(sum(p.ceiling for p in parts), sum(p.estimate for p in parts))


@dataclass(slots=True)
class SessionTime:
    """A session's time and its parts: every turn's TTFT, every answer's decoding after its first token (output −
    1 steps of TPOT, as a measured E2E is TTFT + (output − 1)·TPOT), and the think times between turns."""

    ttft: rf.Estimate
    decode: rf.Estimate
    think_s: float

    @property
    def total(self) -> rf.Estimate:
        return rf.Estimate(self.ttft.ceiling + self.decode.ceiling + self.think_s,
                           self.ttft.estimate + self.decode.estimate + self.think_s)


@dataclass(slots=True)
class SessionPrediction:
    agents: int
    shape: SessionShape
    turns: list[TurnPrediction]
    kind: str  # the engine's: "batching" or "sequential"
    notes: list[str] = field(default_factory=list)

    def time(self, cache: bool = True) -> SessionTime:
        """The session with the prefix cache (``cache``) or without it."""
        steps = self.shape.output - 1
        ttft = _sum([t.ttft_s if cache else t.cold_ttft_s for t in self.turns])
        decode = _sum([rf.Estimate(steps * p.ceiling, steps * p.estimate)
                       for p in (t.tpot_s if cache else t.cold_tpot_s for t in self.turns)])
        return SessionTime(ttft, decode, max(0, len(self.turns) - 1) * self.shape.think_s)

    @property
    def capped(self) -> bool:
        """The session ended before its turns, at ``max_context``."""
        return len(self.turns) < self.shape.turns

    @property
    def output_tokens(self) -> int:
        return len(self.turns) * self.shape.output

    @property
    def prompt_tokens(self) -> int:
        return sum(t.context for t in self.turns)

    @property
    def prefilled_tokens(self) -> int:
        return sum(t.uncached for t in self.turns)

    def throughput(self, cache: bool = True) -> tuple[float, float]:
        """Aggregate output tokens per second of ``agents`` agents each running sessions back to back: (ceiling,
        estimate)."""
        total = self.time(cache).total
        out = self.agents * self.output_tokens
        return (out / total.ceiling if total.ceiling else 0.0, out / total.estimate if total.estimate else 0.0)


def _turn_costs(s: Setup, agents: int, context: int, cached: int, output: int,
                first: bool = False) -> tuple[rf.Estimate, rf.Estimate, rf.Estimate]:
    """TTFT, TPOT and the slowest TTFT of a turn whose ``context`` tokens hold ``cached`` ones already in the cache.
    One agent: the depth estimates (the prefill of the new tokens after the cached ones, as --test depth predicts
    pp at depth; the decode step at the middle of the answer, as it predicts tg). N agents: the serving closed
    loop; its ``first`` turn is sent by every agent at once (sessions start together), so its prompts queue through
    the slots and the step budget behind each other (the loop's start: its median and slowest request); later turns
    come as each agent's answer ends, spread by that queue (the loop's steady state)."""
    if agents == 1:
        t = s.prefill(context - cached, cached)
        return t, s.decode(context + output // 2), t
    p = s.serve(agents, context - cached, output, cached)
    if first and p.ttft_start_s is not None:
        return p.ttft_start_s, p.tpot_s, p.ttft_worst_s or p.ttft_start_s
    return p.ttft_s, p.tpot_s, p.ttft_s


def probe_turns(shape: SessionShape) -> list[int]:
    """The turns a quick look at a session predicts (``probe``): the first (every agent at once), the middle and
    the last (the deepest context)."""
    last = max(1, shape.sent())
    return sorted({1, (1 + last) // 2, last})


def probe(s: Setup, shape: SessionShape, agents: int) -> tuple[rf.Estimate, rf.Estimate, rf.Estimate]:
    """A session's slowest TTFT, median TTFT and median TPOT over ``probe_turns`` (seconds, each at the ceiling
    and estimated): what a capacity search checks the SLOs on at each count of agents, a third of the work of
    every turn."""
    worst, ttfts, tpots = [], [], []
    for k in probe_turns(shape):
        ttft, tpot, slowest = _turn_costs(s, agents, shape.context(k), shape.cached(k), shape.output, k == 1)
        worst += [slowest, ttft]
        ttfts.append(ttft)
        tpots.append(tpot)
    return _across(worst, max), _across(ttfts, statistics.median), _across(tpots, statistics.median)


def _across(es: list[rf.Estimate], how: Callable[[list[float]], float]) -> rf.Estimate:
    """The estimates' max or median, of their ceilings and of their estimates apart: a figure's floor stays at or
    under the figure, as each turn's does."""
    return rf.Estimate(how([e.ceiling for e in es]), how([e.estimate for e in es]))


def held(s: Setup, agents: int) -> int:
    """Contexts the box's memory holds at once: every agent's on a batching engine (for its history to stay in the
    prefix cache between turns), one per slot on llama.cpp (the other agents' wait in its host prompt cache)."""
    return agents if s.kind == "batching" else min(agents, s.parallel)


def predict_session(s: Setup, shape: SessionShape, agents: int = 1, cold: bool = True) -> SessionPrediction:
    """Every turn of one agent's session, with ``agents`` agents running the same session on the box at once;
    ``cold``: also without the prefix cache (else the cold figures are the cached ones: a ranking that reads only
    the cached ones need not predict both)."""
    shape.check()
    out = shape.output
    turns = []
    for k in range(1, shape.sent() + 1):
        ctx, cached = shape.context(k), shape.cached(k)
        ttft, tpot, worst = _turn_costs(s, agents, ctx, cached, out, k == 1)
        cold_ttft, cold_tpot, _ = _turn_costs(s, agents, ctx, 0, out, k == 1) if cold else (ttft, tpot, worst)
        # without the cache a turn does the cached turn's work and more, but the closed loop times each apart: it
        # spreads the long uncached prompts one a step where the short cached ones arrive in waves of several a
        # step, and read the uncached turn as faster (an H100 at 19 agents: 663 ms against 733)
        cold_ttft, cold_tpot = _across([cold_ttft, ttft], max), _across([cold_tpot, tpot], max)
        f = s.fit(ctx + out, held(s, agents))
        turns.append(TurnPrediction(k, ctx, cached, ttft, tpot, cold_ttft, cold_tpot, f.fits,
                                    not f.fits and s.kind == "sequential" and agents == 1, worst))
    pred = SessionPrediction(agents, shape, turns, s.kind)
    pred.notes = assumptions(s, pred)
    return pred


def assumptions(s: Setup, p: SessionPrediction) -> list[str]:
    """What the prediction assumed, in words, for the lines under its table."""
    sh = p.shape
    out = []
    if p.agents == 1:
        out.append("1 agent: TTFT is the prefill of the uncached tokens after the cached ones (as --test depth "
                   "predicts pp at depth), decode the step at the middle of each answer (as it predicts tg)")
    elif s.kind == "sequential" and s.parallel < p.agents:
        slots = "one slot" if s.parallel == 1 else f"{s.parallel} slots"
        out.append(f"{p.agents} agents on {slots}: turn 1 is sent by every agent at once and waits for the turns "
                   "ahead of it; a later turn waits for the other agents' turns (their prefills and answers) as the "
                   "serving prediction queues requests; think time is not used to spread them out (the waits are "
                   "an upper bound)")
    else:
        out.append(f"{p.agents} agents through the engine's scheduler ({s.budget:,} tokens per step): turn 1 is sent "
                   f"by all {p.agents} at once, so its prompts queue through the step budget behind each other (its "
                   "median waits for half of them, its slowest for all); later turns arrive as each answer ends, "
                   f"spread by that queue (the closed loop's steady state); decode steps batch the {p.agents} "
                   "sequences, and the steps that carry prompt chunks slow everyone's decode (TPOT); think time is "
                   "not used to spread them out (the waits are an upper bound)")
    out.append("cached: turn 1 finds the shared prefix in the cache (other sessions sent it); every later turn "
               "prefills only the previous answer and the new tool result; uncached: the whole context, every turn")
    if p.agents > 1 and s.slot_save(1):
        out.append("each turn waits while llama-server saves the slot of the turn before it (its whole context's KV "
                   f"cache, at {serving.LLAMA_SAVE_GBS:g} GB/s) to its host prompt cache (--cache-ram, on by default), "
                   "no slot running meanwhile")
    if s.kind == "sequential" and p.agents > s.parallel:
        out.append("llama-server keeps one conversation per slot: with more agents than slots, cached assumes its "
                   "host-memory prompt cache (--cache-ram, default 8192 MiB) swaps each history back in (the copy "
                   "is not counted)")
    if sh.drawn:
        out.append(f"{', '.join(sh.drawn)}: drawn lengths and times taken at their means")
    if p.capped:
        nxt = sh.context(len(p.turns) + 1) + sh.output
        out.append(f"the session ends after turn {len(p.turns)} of {sh.turns}: turn {len(p.turns) + 1} would need "
                   f"{nxt:,} tokens, past --max-context {sh.max_context:,}")
    unfit = [t for t in p.turns if not t.fits]
    if unfit:
        if s.kind == "batching":
            how = "the engine preempts sequences and evicts cached prefixes: the cached figures are not reached"
        elif p.agents == 1:
            how = "llama.cpp's hybrid split (layers in host memory, run in sequence) is in the estimates"
        else:
            how = "the estimates for several agents leave out llama.cpp's hybrid split: they are optimistic"
        n = held(s, p.agents)
        out.append(f"from turn {unfit[0].turn} the box cannot hold {plural(n, 'context')} of "
                   f"{unfit[0].context + sh.output:,} tokens beside the weights (as fit counts memory): {how}")
    return out


def rounds(sessions: int, agents: int) -> int:
    """Sessions run back to back by ``agents`` agents: how many each runs at most."""
    return math.ceil(sessions / agents)
