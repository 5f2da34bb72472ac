"""Agent sessions: what coding agents send. A session grows turn by turn: turn k re-sends the whole conversation
(a system prompt shared by every agent, the session's task, every earlier answer and tool result) plus a new tool
result, so most of each prompt can be served from the server's prefix cache. Agents pause between turns while
their tools run (think time), and a session that reaches the context cap ends or is compacted, as agents do.

Closed loop over agents, as ``--concurrency`` is: each of N agents runs one session after another until the
level's sessions have all started. Nothing is sent that would bust a cache (the conversation is re-sent token for
token), and what an engine needs to keep the cache warm is asked for (``Adapter.session_fields``: llama.cpp's
``cache_prompt`` and ``id_slot``, so an agent keeps its slot). The baseline runs the same sessions with a unique
marker at the start of every turn, which no prefix cache can serve: the two together say what the cache bought.

Every turn is a chat request (an agent's conversation is messages); its record carries the session, the turn and
the think time before it, and the cached prompt tokens the server reported (``usage.prompt_tokens_details``,
llama.cpp ``timings.cache_n``). ``metrics.session_stats`` summarises them.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from .client import PreparedRequest, StreamClient
from .draws import Draw
from .grace import DEFAULT_GRACE_S, INTERRUPTED, Waiting, mark_unfinished, within_grace
from .records import RequestRecord
from .slo import SLO
from .soak_totals import Keeper
from .tenants import Background
from .workload import PromptBuilder

CacheMode = Literal["warm", "busted"]
OnCap = Literal["end", "compact"]

#: The header that names an agent's conversation to the server (as MLCommons' agentic benchmark and AIPerf's
#: --session-header send it): a router or a cache may keep a session's turns together by it.
SESSION_HEADER = "X-Session-ID"
#: The turns a soak keeps in memory, about: past them it keeps a uniform sample of its ended sessions and folds
#: the rest into exact totals and latency sketches (soak_totals.py), so an hour's soak holds what a few minutes'
#: did (a turn's record is 2-4 KiB; the store keeps every turn).
KEEP_TURNS = 10_000
#: Tokens a chat template adds per message ("role: ", a newline, special tokens), counted toward the context cap
#: before the server has said what a turn's prompt came to.
TEMPLATE_TOKENS_PER_MESSAGE = 8


@dataclass(slots=True, frozen=True)
class SessionPlan:
    """The session workload of a level: how many sessions, how long, and what each turn adds."""

    sessions: int  # sessions per level, run by the level's agents (its concurrency)
    turns: int  # turns per session, unless the context cap ends it first
    shared_prefix: int  # tokens of the system prompt every agent shares (0: no system prompt)
    task: Draw  # the session's first user message (--input-len)
    tool: Draw  # the tool result each later turn appends (--tool-len)
    output: Draw  # answer tokens per turn (--output-len)
    think: Draw  # seconds an agent waits between an answer and its next turn (--think-time)
    max_context: int | None = None  # a turn whose prompt would pass this ends or compacts its session
    on_cap: OnCap = "end"
    baseline: bool = True  # also run every level with the cache busted
    #: a cache-cliff search's levels: each agent runs one session, so a level of N agents keeps N sessions live
    #: (``sessions`` is then the most agents), and no agent is pinned to a slot (agents in the field are not)
    per_agent: bool = False
    background: Background | None = None  # a batch load beside the sessions (tenants.py)

    def to_dict(self) -> dict[str, Any]:
        """What a run's manifest records as its workload."""
        return {"kind": "sessions", "sessions": self.sessions, "turns": self.turns,
                "shared_prefix": self.shared_prefix, "task": self.task.to_dict(), "tool": self.tool.to_dict(),
                "output": self.output.to_dict(), "think": self.think.to_dict(), "max_context": self.max_context,
                "on_cap": self.on_cap, "baseline": self.baseline, **({"per_agent": True} if self.per_agent else {}),
                **({"background": self.background.to_dict()} if self.background else {})}

    def describe(self) -> str:
        """One line for the table's heading."""
        parts = [f"one session per agent x {self.turns} turns" if self.per_agent else
                 f"{self.sessions} sessions x {self.turns} turns",
                 f"system prompt {self.shared_prefix} shared" if self.shared_prefix else "no shared prompt",
                 f"task {self.task.describe()}", f"tool {self.tool.describe()}",
                 f"output {self.output.describe()}"]
        if not (self.think.is_fixed and self.think.value == 0):
            parts.append(f"think {self.think.describe()}")
        if self.max_context:
            parts.append(f"cap {self.max_context} ({self.on_cap})")
        if self.background:
            parts.append(self.background.describe())
        return ", ".join(parts)

    def first_turn(self) -> int:
        """The most tokens a session's first turn can send and get back (what any cap must leave room for)."""
        return self.shared_prefix + int(self.task.maximum()) + int(self.output.maximum()) + \
            2 * TEMPLATE_TOKENS_PER_MESSAGE

    def longest_context(self) -> int:
        """The most tokens a session's last turn can send and get back, whatever the cap (what a slot must hold)."""
        per_turn = int(self.tool.maximum() + self.output.maximum()) + 2 * TEMPLATE_TOKENS_PER_MESSAGE
        full = self.shared_prefix + int(self.task.maximum()) + 2 * TEMPLATE_TOKENS_PER_MESSAGE + \
            self.turns * per_turn
        return min(full, self.max_context + int(self.output.maximum())) if self.max_context else full


class SessionTexts:
    """The texts of a level's sessions, each of an exact token count: the shared system prompt (built once), each
    session's task and each turn's tool result (seeded by the run, the level, the session and the turn, so a run
    is reproducible and no two sessions share more than the system prompt)."""

    def __init__(self, builder: PromptBuilder, plan: SessionPlan, seed: int, tag: str) -> None:
        self.builder, self.plan, self.seed, self.tag = builder, plan, seed, tag
        self._system: tuple[str, int] | None = None

    async def system(self) -> tuple[str, int]:
        if self._system is None:
            self._system = await self.builder.exact("", self.plan.shared_prefix, random.Random(f"{self.seed}/system"))
        return self._system

    async def text(self, what: str, key: str, session: int, turn: int, n: int) -> tuple[str, int]:
        rng = random.Random(f"{self.seed}/{self.tag}/{what}/{key}/{session}/{turn}")
        return await self.builder.exact("", n, rng)


@dataclass(slots=True)
class Conversation:
    """One session's messages and what this client counted of them (the server's count wins once it has said)."""

    messages: list[dict[str, str]]
    tokens: int  # our count of the contents, for the request's expected prompt length
    server_context: int | None = None  # the prompt tokens the server counted for the last turn, plus its answer

    def context_estimate(self) -> int:
        templated = self.tokens + TEMPLATE_TOKENS_PER_MESSAGE * len(self.messages)
        return max(templated, self.server_context or 0)


LevelRecords = list[RequestRecord]
OnDone = Callable[[RequestRecord], None]


class SessionLevel:
    """One level of sessions: ``agents`` agents run ``plan.sessions`` sessions, the cache warm or busted. ``key``
    seeds its texts and lengths: a warm level and its busted baseline share one, so the baseline runs the same
    sessions (a marker apart); another agent count or repetition has its own, so no level finds another's cached."""

    def __init__(self, client: StreamClient, texts: SessionTexts, plan: SessionPlan, key: str, agents: int,
                 cache: CacheMode, fields: Callable[[int, int], dict[str, Any]], records: LevelRecords,
                 on_done: OnDone, counter: Callable[[str], int] | None = None) -> None:
        self.client, self.texts, self.plan, self.key, self.agents = client, texts, plan, key, agents
        self.cache, self.fields, self.records, self.on_done = cache, fields, records, on_done
        self.count = counter
        self.next_session = 0
        self.compactions = 0
        self.capped = 0
        #: a soak (--duration): agents start sessions back to back until this long after the level's start, and no
        #: turn is sent after it; the sessions it cut are not whole (``cut``)
        self.duration_s: float | None = None
        self.deadline_ns: int | None = None
        #: a soak's turns still in flight this long after its end are cancelled, cut by it (None: wait for them)
        self.grace_s: float | None = DEFAULT_GRACE_S
        self.cut: set[int] = set()
        #: where a soak's records go once their session is let go (the store's requests table); with it a soak
        #: keeps a sample of its ended sessions in ``records`` and the rest folded (soak_totals.Keeper)
        self.spill: Callable[[list[RequestRecord]], None] | None = None
        self.slo: SLO | None = None
        self.keeper: Keeper | None = None
        self._sent = 0  # the index of the level's next record
        self._open: set[int] = set()  # sessions an agent took up and has not finished (or given up on)

    async def run(self, waiting: Waiting | None = None) -> tuple[int, int]:
        """Every session of the level, closed loop over the agents; returns the window (first send, last byte).
        ``waiting``: told, past a soak's end, of the turns still in flight (grace.within_grace)."""
        start = time.perf_counter_ns()
        self._sent = len(self.records)
        if self.duration_s is not None:
            self.deadline_ns = start + int(self.duration_s * 1e9)
            if self.spill is not None:
                keep = max(1, KEEP_TURNS // max(1, self.plan.turns))
                self.keeper = Keeper(self.records, keep, (start, int(self.duration_s * 1e9)),
                                     f"{self.texts.seed}/{self.key}/{self.cache}", self.spill, self.slo)
        agents = asyncio.gather(*(self._agent(a) for a in range(self.agents)))
        try:
            if await within_grace(agents, self.records, self.deadline_ns, self.grace_s, waiting):
                self.cut |= self._cut_short()  # the sessions the soak's end cancelled mid-turn or thinking
        except asyncio.CancelledError:  # Ctrl-C: turns in flight end as interrupted; finished ones are kept
            # a session the interrupt caught between two turns (thinking) has only finished turns, and is cut too
            self.cut |= self._cut_short()
            mark_unfinished(self.records, INTERRUPTED, "the run was interrupted")
            raise
        ends = [r.end_ns for r in self.records if r.end_ns is not None]  # a turn the soak's end cut: at the cut
        if self.deadline_ns is not None:  # a soak runs to its end, its agents thinking till then: its window too
            ends.append(min(self.deadline_ns, time.perf_counter_ns()))
        return start, max(ends, default=time.perf_counter_ns())

    def _cut_short(self) -> set[int]:
        """The sessions taken up and not ended that sent a turn: one caught while its opening was built, before its
        first send, is no session of the level's (a soak read 2 sessions, 2 finished and 2 cut)."""
        sent = {r.session for r in self.records if r.session is not None}
        return self._open & sent

    async def _agent(self, agent: int) -> None:
        total = self.agents if self.plan.per_agent else self.plan.sessions
        while (self.next_session < total) if self.deadline_ns is None else not self._over():
            session = self.next_session
            self.next_session += 1
            self._open.add(session)
            await self._session(agent, session)
            self._open.discard(session)
            if self.keeper is not None:
                self.keeper.ended(session, session in self.cut)

    def _thinking(self, seconds: float) -> float:
        """An agent's pause between turns, to a soak's end at most: no turn is sent after it, so a longer pause
        only held the level past its end."""
        if self.deadline_ns is None:
            return seconds
        return min(seconds, max(0.0, (self.deadline_ns - time.perf_counter_ns()) / 1e9))

    def _over(self) -> bool:
        return self.deadline_ns is not None and time.perf_counter_ns() >= self.deadline_ns

    async def _opening(self, session: int, what: str = "task", turn: int = 0, n: int | None = None) -> Conversation:
        """The shared system prompt (if any), then one user message: the session's task, or at the cap the summary
        that replaces the history."""
        msgs: list[dict[str, str]] = []
        tokens = 0
        if self.plan.shared_prefix:
            system, k = await self.texts.system()
            msgs.append({"role": "system", "content": system})
            tokens += k
        if n is None:
            n = self.plan.task.draw(random.Random(f"{self.texts.seed}/task/{self.key}/{session}"))
        text, k = await self.texts.text(what, self.key, session, turn, n)
        msgs.append({"role": "user", "content": text})
        return Conversation(msgs, tokens + k)

    async def _session(self, agent: int, session: int) -> None:
        plan = self.plan
        conv = await self._opening(session)
        rng = random.Random(f"{self.texts.seed}/draws/{self.key}/{session}")
        think_ms: float | None = None
        for turn in range(plan.turns):
            if turn and self._over():  # a soak's end: no new turn; the session was cut, not finished
                self.cut.add(session)
                return
            out_len = plan.output.draw(rng)
            if turn:
                tool_len = plan.tool.draw(rng)
                if plan.max_context and conv.context_estimate() + tool_len + out_len + \
                        2 * TEMPLATE_TOKENS_PER_MESSAGE > plan.max_context:
                    if plan.on_cap == "end":
                        self.capped += 1
                        return
                    conv = await self._compacted(session, turn)
                tool, n = await self.texts.text("tool", self.key, session, turn, tool_len)
                conv.messages.append({"role": "user", "content": tool})
                conv.tokens += n
            rec = await self._turn(agent, session, turn, conv, out_len, think_ms)
            if not rec.ok:
                return  # an agent whose turn failed has no answer to go on with
            answer = rec.answer_text
            conv.messages.append({"role": "assistant", "content": answer})
            conv.tokens += self.count(answer) if self.count is not None else len(answer.split())
            rec.release_text()  # the conversation has it; the record would keep it until the level ends
            if rec.input_tokens is not None and rec.output_tokens is not None:
                conv.server_context = rec.input_tokens + rec.output_tokens
            think_ms = plan.think.sample(rng) * 1000.0
            if think_ms and turn + 1 < plan.turns:
                await asyncio.sleep(self._thinking(think_ms / 1000.0))

    async def _compacted(self, session: int, turn: int) -> Conversation:
        """The session's history replaced by a summary as long as a task (what agents do at the cap): the system
        prompt is still cached, the summary is new."""
        self.compactions += 1
        return await self._opening(session, "summary", turn, max(1, round(self.plan.task.expected())))

    async def _turn(self, agent: int, session: int, turn: int, conv: Conversation, out_len: int,
                    think_ms: float | None) -> RequestRecord:
        messages = conv.messages
        busted = self.cache == "busted"
        if busted:  # a marker no cache has seen, from its first character: nothing of the prompt can be served
            # (a marker that began with the run's tag shared its first tokens between turns: llama.cpp served 19)
            marker = f"{random.Random(f'{self.texts.tag}/{self.key}/{session}/{turn}').getrandbits(64):016x} "
            first = dict(messages[0], content=marker + messages[0]["content"])
            messages = [first, *messages[1:]]
        req = PreparedRequest("", out_len, conv.tokens, self.fields(agent, out_len), messages=list(messages),
                              headers={SESSION_HEADER: f"{self.texts.tag}-{self.key}-{session}-{self.cache}"})
        rec = RequestRecord(index=self._sent, session=session, turn=turn, think_ms=think_ms, cache_busted=busted)
        self._sent += 1
        self.records.append(rec)
        if self.keeper is not None:
            self.keeper.add(rec)
        await self.client.send(req, rec)
        self.on_done(rec)
        return rec
