"""Recorded agent trajectories replayed as agents behave (``sweep --trace`` of a trajectory file: Weka, MLCommons
agentic, TraceLab, a session log; ``trajectories/`` reads them into one typed model).

A session tree's calls go in order: each waits for the answer before it, then its recorded pause, capped
(``max_think_s``, 10 s by default as AgentX caps idle gaps: a recorded minute of a human reading the screen says
nothing of the box). A subagent starts beside its parent's lane once the parent call it was spawned after has
answered (after its recorded delay, capped alike), and the parent call that waited for its return waits for it.

Closed loop (``--concurrency N``): N lanes, each replaying one tree after another until every tree of the set has
been replayed once in the level (or ``--requests`` calls were measured, or ``--duration`` ran out); with more lanes
than trees, every tree as many times as gives each lane one, each time a user of its own (a salt of its own), as
AgentX re-salts a trajectory it reuses. A lane's first tree starts at a random call, drawn from the level's seed,
after one uncounted call that warms the call before it, so lanes do not move in lock-step (AgentX starts each lane
mid-trajectory the same way). Open loop (``--trace-speed``): each tree starts at its recorded start (a stretch in
which no recorded tree was running cut to the cap), the calls at their recorded times divided by the speed, never
before the answer before them; a recorded pause over the cap waits the cap, and the tree's later calls keep their
times after it.

What is sent:
- length-only formats (Weka, TraceLab, a lengths-only session log): each hash id is a block of text of exactly its
  tokens, built once per tree replayed and salted by it, so two lanes replaying one trace share only what two real
  users would (nothing: the salt is counted in the lengths, as its own words). A session log's ids name one block
  whichever session sent it (its recorder keys them once): its blocks and salt are each pass over the set's, so its
  sessions share what they were recorded sharing (an agent's system prompt), and a second pass shares nothing
  with the first. A floor-rounded call's unhashed tail is text of its own; a prefix cache serves a call up to its
  last block the tree (or, in a session log, any session of its pass) sent before.
- full-text formats (MLCommons, a session log): the recorded messages, tool schemas (``tools``), tool calls,
  ``tool`` results and ``tool_choice``; the salt at the start of the first user message, so the system prompt and
  tools stay shared as they are between real users of one agent. ``answers="recorded"`` re-sends the recorded
  history, so every engine sees the same tokens (MLCommons' rule); ``"live"`` puts the server's own answers of
  this replay in the history instead.
- each call's output length fixed to the recorded one where the server allows; ``scale`` divides every length
  (and block size) to replay a trace's shape on a small model or box.

Every call is a ``RequestRecord`` with its tree (``session``), its place (``turn``), its parent tree for a subagent
(``parent``) and the pause waited (``think_ms``).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from .client import PreparedRequest, StreamClient
from .grace import DEFAULT_GRACE_S, INTERRUPTED, Waiting, mark_unfinished, within_grace
from .records import RequestRecord
from .sessions import SESSION_HEADER
from .trajectories.model import Call, Trajectory, TrajectorySet
from .workload import PromptBuilder, Tokenizer
from .replay_table import replay_heading

Answers = Literal["recorded", "live"]
#: AgentX's cap on a recorded pause between turns, seconds.
DEFAULT_MAX_THINK_S = 10.0
#: Words that encode to one token each after a space are looked for among this many of the word list at most.
_ONE_TOKEN_SAMPLE = 400
#: Fewer one-token words than this: blocks are built by trial instead (``PromptBuilder.exact``).
_MIN_ONE_TOKEN_WORDS = 32
#: Tokens of the salt that starts every prompt of a tree replayed (words of its own, counted in its lengths).
SALT_TOKENS = 4


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """How a set of trajectories is replayed."""

    trajectories: TrajectorySet
    max_think_s: float | None = DEFAULT_MAX_THINK_S  # a recorded pause or delay above this waits this (None: as recorded)
    answers: Answers = "recorded"
    speed: float | None = None  # open loop at the recorded times, this many times as fast (None: closed loop)
    scale: float = 1.0  # every length divided by this

    @property
    def full_text(self) -> bool:
        return self.trajectories.format == "mlcommons" or any(
            c.messages for t in self.trajectories.trajectories for c in t.calls[:1])

    def caps(self, seconds: float) -> bool:
        """Whether a recorded pause is over the cap, and waits the cap instead."""
        return self.max_think_s is not None and seconds > self.max_think_s

    def pause(self, seconds: float) -> float:
        """A recorded pause as replayed: capped, then divided by the speed of an open-loop replay."""
        capped = seconds if self.max_think_s is None else min(seconds, self.max_think_s)
        return capped / (self.speed or 1.0)

    def tokens(self, n: int) -> int:
        return max(1, math.ceil(n / self.scale))

    def starts(self) -> list[float]:
        """Open loop: each tree's start, seconds after the set's first, before the speed divides it (in the set's
        order). As recorded, but a stretch in which no tree of the recording was running (from its first call sent
        to its last answered, subagents' included) is cut to the pause cap, as AgentX caps idle gaps: the day
        between two recorded sessions says nothing of the box, and waited out would make a replay of hours."""
        trees = self.trajectories.trajectories
        epochs = [t.epoch_s for t in trees]
        first = min((e for e in epochs if e is not None), default=0.0)
        at = [(e if e is not None else first) - first for e in epochs]
        if self.max_think_s is None:
            return at
        out = list(at)
        removed, busy = 0.0, None  # recorded idle time cut so far; when the recording's running trees end
        for i in sorted(range(len(trees)), key=lambda i: at[i]):
            if busy is not None and at[i] - busy > self.max_think_s:
                removed += at[i] - busy - self.max_think_s
            out[i] = at[i] - removed
            end = at[i] + _recorded_span(trees[i])
            busy = end if busy is None else max(busy, end)
        return out

    def longest_call(self) -> int:
        """The most tokens (prompt and output) one call sends and gets back, as scaled (0 where not recorded)."""
        most = 0
        for tree in self.trajectories.trajectories:
            for _, t in tree.walk():
                for c in t.calls:
                    if c.input_tokens is not None:
                        most = max(most, self.tokens(c.input_tokens) + self.tokens(c.output_tokens or 1))
        return most

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "replay", "trajectories": self.trajectories.describe(), "max_think_s": self.max_think_s,
                "answers": self.answers, "speed": self.speed, "scale": self.scale, "full_text": self.full_text}

    def describe(self) -> str:
        """One line for the table's heading: the set, how pauses were capped, lengths and times as scaled, the lines
        left out (replay_table.replay_heading, from what the manifest stores)."""
        return replay_heading(self.to_dict())


class ReplayTexts:
    """The text of a replay's calls: blocks of exact token counts for length-only calls (each distinct block of a
    tree built once), the recorded messages for full-text ones; every tree replayed has a salt of its own."""

    def __init__(self, builder: PromptBuilder, plan: ReplayPlan) -> None:
        self.builder, self.plan = builder, plan
        self.words: list[str] | None = None  # words of one token each after a space (None: not looked for yet)
        self.blocks: dict[str, dict[int, str]] = {}  # salt -> hash id -> block text, for the trees in flight
        self.built = 0  # block tokens built so far

    async def start(self) -> None:
        """Find the words that are one token each after a space, so a block of n tokens is n of them; where the
        tokenizer has too few, blocks are built by trial."""
        if self.words is not None:
            return
        tok: Tokenizer = self.builder.tok
        one = [w for w in self.builder.words[:_ONE_TOKEN_SAMPLE]
               if w.split() == [w] and len(await tok.encode(" " + w)) == 1]
        sample = "".join(" " + one[i % len(one)] for i in range(97)) if one else ""
        self.words = one if len(one) >= _MIN_ONE_TOKEN_WORDS and len(await tok.encode(sample)) == 97 else []

    async def block(self, salt: str, h: int, size: int, n: int | None = None) -> str:
        """Hash id ``h``'s block of ``size`` tokens in the tree salted ``salt`` (the same text wherever the tree
        sends it), or its first ``n`` tokens: a partial block is the start of the whole one, as a prefix cache
        sees it grow."""
        tree = self.blocks.setdefault(salt, {})
        if h not in tree:
            tree[h] = await self.words_of(size, random.Random(f"{self.builder.seed}/{salt}/block/{h}"))
            self.built += size
        text = tree[h]
        if n is None or n >= size:
            return text
        if self.words:  # one token a word
            return "".join(" " + w for w in text.split()[:n])
        return await self.words_of(n, random.Random(f"{self.builder.seed}/{salt}/block/{h}/{n}"))

    def forget(self, salt: str) -> None:
        """Drop a finished tree's blocks: memory follows the trees in flight."""
        self.blocks.pop(salt, None)

    async def salt(self, salt: str) -> str:
        """The tree's salt as text: ``SALT_TOKENS`` words of its own."""
        return await self.block(salt, -1, SALT_TOKENS)

    async def words_of(self, n: int, rng: random.Random) -> str:
        """Text of ``n`` tokens, each word after a space."""
        if n <= 0:
            return ""
        if self.words:
            return "".join(" " + w for w in rng.choices(self.words, k=n))
        text, _ = await self.builder.exact(" ", n, rng)
        return text if text.startswith(" ") else " " + text

    async def prompt(self, salt: str, call: Call, where: str) -> tuple[str, int]:
        """A length-only call's prompt and its tokens: the salt in place of its first tokens (so the length is the
        recorded one), its blocks, its unhashed tail."""
        blocks = call.blocks
        assert blocks is not None and blocks.input_tokens is not None
        scale = self.plan.tokens
        parts: list[str] = []
        count = 0
        size = scale(blocks.size)
        tree = self.blocks.setdefault(salt, {})
        for h, t in zip(blocks.hash_ids, blocks.block_tokens()):
            n = size if t == blocks.size else min(size, scale(t))
            whole = tree.get(h) if n == size else None  # most blocks: sent before, whole (no await for them)
            parts.append(whole if whole is not None else await self.block(salt, h, size, n))
            count += n
        tail = blocks.partial if blocks.rounding == "floor" else 0
        if tail:
            parts.append(await self.words_of(scale(tail), random.Random(f"{self.builder.seed}/{salt}/tail/{where}")))
            count += scale(tail)
        return await self._salted(salt, "".join(parts), count)

    async def _salted(self, salt: str, text: str, count: int) -> tuple[str, int]:
        """The salt's words in place of the prompt's first ones (one token a word); a prompt too short for that,
        or a tokenizer without such words, gets the salt before it, its tokens counted."""
        head = await self.salt(salt)
        if self.words and count > SALT_TOKENS:
            # The text is words of no whitespace, each after one space: the salt's words end where the word after
            # them starts. Found by its space, not by splitting the prompt: a replay's calls send billions of
            # words, and splitting and re-joining each prompt cost most of a replay's preparation.
            cut = -1
            for _ in range(SALT_TOKENS + 1):
                cut = text.find(" ", cut + 1)
            return head + text[cut:], count
        return head + text, count + SALT_TOKENS

    async def messages(self, salt: str, call: Call, live: dict[int, str]) -> list[dict[str, Any]]:
        """A full-text call's messages as sent: the salt before the first user message's text, the server's own
        answers in place of recorded ones where the replay feeds them back (``live``: by the recorded answer's
        identity), every text cut to its share of ``scale``."""
        out: list[dict[str, Any]] = []
        salted = False
        for m in call.messages:
            wire = m.to_wire()
            if m.role == "assistant" and id(m) in live:
                wire["content"] = live[id(m)]
            if isinstance(wire.get("content"), str):
                wire["content"] = self._cut(wire["content"])
            if m.role == "user" and not salted:
                wire["content"] = _salted((await self.salt(salt)).strip(), wire.get("content"))
                salted = True
            out.append(wire)
        return out

    def _cut(self, text: str) -> str:
        return text if self.plan.scale == 1 else text[: max(1, math.ceil(len(text) / self.plan.scale))]


def _salted(salt: str, content: Any) -> Any:
    if isinstance(content, list):
        return [{"type": "text", "text": f"{salt} "}, *content]
    return f"{salt} {content or ''}"


def _recorded_span(tree: Trajectory) -> float:
    """A tree's recorded length: its first call's start to its last call's end (or start), subagents' included."""
    return max(((at + (c.duration_s or 0.0)) for at, _, c in tree.timeline()), default=0.0)


def passes(lanes: int, trees: int) -> int:
    """How many times a closed-loop level replays its set: once, or as often as gives each of its lanes a tree."""
    return max(1, -(-lanes // max(1, trees)))


Fields = Callable[[int, int], dict[str, Any]]  # (lane, output tokens) -> the request's fields
OnDone = Callable[[RequestRecord], None]


@dataclass(slots=True)
class _Tree:
    """One tree being replayed: its salt, its agent (the lane's for a lane's tree; one of its own for a subagent,
    so a server with slots keeps each one's history apart), its number in the level, its parent's."""

    salt: str
    agent: int
    session: int
    parent: int | None
    blocks: str = ""  # the salt its blocks' text is built with: its own, or its pass's where trees share blocks


class ReplayLevel:
    """One level of a replay: ``lanes`` lanes in closed loop, or (``plan.speed``) every tree at its recorded
    start; ``key`` salts its trees, so no level finds another's cached. ``requests``/``duration_s``: stop sending
    once this many calls were measured, or after this long."""

    def __init__(self, client: StreamClient, texts: ReplayTexts, plan: ReplayPlan, key: str, lanes: int,
                 fields: Fields, records: list[RequestRecord], on_done: OnDone, requests: int | None = None,
                 duration_s: float | None = None, counter: Callable[[str], int] | None = None,
                 grace_s: float | None = DEFAULT_GRACE_S) -> None:
        self.client, self.texts, self.plan, self.key, self.lanes = client, texts, plan, key, lanes
        self.fields, self.records, self.on_done = fields, records, on_done
        self.requests, self.duration_s, self.count = requests, duration_s, counter
        self.grace_s = grace_s  # calls in flight this long after the level's time are cancelled (None: waited for)
        self.rng = random.Random(f"{texts.builder.seed}/{key}/starts")
        self.next_tree = 0
        self.sessions = 0
        self.measured = 0
        self.subagents = 0
        self.finished: set[int] = set()  # trees (a subagent's its own) whose every call was sent and answered
        self.stop_ns: int | None = None
        self.full = asyncio.Event()  # the level's count sent: a call waiting for its time sends nothing

    def more(self) -> bool:
        """Whether another call may be sent: within the level's count and time."""
        if self.requests is not None and self.measured >= self.requests:
            return False
        return self.stop_ns is None or time.perf_counter_ns() < self.stop_ns

    async def run(self, waiting: Waiting | None = None) -> tuple[int, int]:
        """Every tree of the level; returns the window (first send, last byte). ``waiting``: told, past the
        level's time, of the calls still in flight (grace.within_grace)."""
        await self.texts.start()  # before the level's time starts: the recorded times count from its first send
        start = time.perf_counter_ns()
        self.stop_ns = start + int(self.duration_s * 1e9) if self.duration_s else None
        runs = [self._open(start)] if self.plan.speed is not None else [self._lane(i) for i in range(self.lanes)]
        try:
            await within_grace(asyncio.gather(*runs), self.records, self.stop_ns, self.grace_s, waiting)
        except asyncio.CancelledError:  # Ctrl-C: calls in flight end as interrupted; finished ones are kept
            mark_unfinished(self.records, INTERRUPTED, "the run was interrupted")
            raise
        finally:
            if self.plan.trajectories.shared_blocks:  # a pass's blocks, its trees': none is sent after the level
                for k in range(passes(self.lanes, len(self.plan.trajectories.trajectories))):
                    self.texts.forget(self._pass_salt(k))
        # a call the level's end cut ends at the cut: the level held it till then
        ends = [r.end_ns for r in self.records if r.end_ns is not None and r.phase == "measured"]
        if self.stop_ns is not None:  # its lanes ran to its end, pausing between calls till then: its window too
            ends.append(min(self.stop_ns, time.perf_counter_ns()))
        return start, max(ends, default=time.perf_counter_ns())

    def _take(self) -> Trajectory | None:
        """The next tree to replay: the set in order, as many times over as gives every lane a tree (each time
        salted anew by ``_tree``)."""
        trees = self.plan.trajectories.trajectories
        if self.next_tree >= passes(self.lanes, len(trees)) * len(trees) or not self.more():
            return None
        self.next_tree += 1
        return trees[(self.next_tree - 1) % len(trees)]

    def _tree(self, agent: int, parent: int | None = None, pass_no: int = 0) -> _Tree:
        """A tree replayed anew, salted apart from every other; where the set's trees share blocks, its blocks are
        its pass's (``pass_no``: which time over the set this is)."""
        self.sessions += 1
        salt = f"{self.texts.builder.run_tag}-{self.key}-{self.sessions - 1}"
        blocks = self._pass_salt(pass_no) if self.plan.trajectories.shared_blocks else salt
        return _Tree(salt, agent, self.sessions - 1, parent, blocks)

    def _pass_salt(self, pass_no: int) -> str:
        """The salt of a pass over a set whose trees share blocks: its blocks' text and its prompts' first words."""
        return f"{self.texts.builder.run_tag}-{self.key}-pass{pass_no}"

    async def _lane(self, lane: int) -> None:
        first = True
        while (t := self._take()) is not None:
            start = self.rng.randrange(len(t.calls)) if first and self.lanes > 1 and len(t.calls) > 1 else 0
            pass_no = (self.next_tree - 1) // len(self.plan.trajectories.trajectories)
            await self._replay(t, self._tree(lane, pass_no=pass_no), start)
            first = False

    async def _open(self, origin_ns: int) -> None:
        """Every tree at its recorded start (its epoch), relative to the set's first, idle stretches cut to the cap
        (``ReplayPlan.starts``), divided by the speed."""
        trees = self.plan.trajectories.trajectories
        starts = self.plan.starts()
        speed = self.plan.speed or 1.0

        async def one(i: int, t: Trajectory) -> None:
            delay = starts[i] / speed - (time.perf_counter_ns() - origin_ns) / 1e9
            await self._wait(delay)
            if self.more():
                await self._replay(t, self._tree(i), 0, origin_ns=time.perf_counter_ns())

        await asyncio.gather(*(one(i, t) for i, t in enumerate(trees)))

    async def _replay(self, t: Trajectory, tree: _Tree, start: int, origin_ns: int | None = None) -> None:
        """One tree's calls from ``start`` (the call before it sent first, uncounted, to warm it), its subagents
        beside it. Ends at a failed call: an agent with no answer has nothing to go on."""
        children: dict[int, list[asyncio.Task[None]]] = {}
        live: dict[int, str] = {}
        spawned: list[asyncio.Task[None]] = []
        if start:
            await self._send(t, t.calls[start - 1], tree, live, "warmup", None)
        self._spawn(t, start - 1 if start else None, tree, children, spawned, start)
        skipped_s = 0.0  # open loop: the recorded time the cap took out of the tree's pauses so far
        try:
            for k in range(start, len(t.calls)):
                call = t.calls[k]
                if children.get(k):
                    await asyncio.gather(*children.pop(k))
                pause = self.plan.pause(call.pause_s) if k > start else 0.0
                if origin_ns is not None and call.start_s is not None:
                    # at its recorded time, never before the answer before it; a recorded pause over the cap
                    # waits the cap, and the tree's later calls keep their times after it
                    until = origin_ns / 1e9 + call.start_s / (self.plan.speed or 1) - skipped_s - time.perf_counter()
                    if k > start and self.plan.caps(call.pause_s):
                        skipped_s += max(0.0, until - pause)  # waits the cap, as in closed loop
                    else:
                        pause = max(pause, until)
                await self._wait(pause)
                if not self.more():
                    break
                rec = await self._send(t, call, tree, live, "measured", pause * 1000.0 if k > start else None)
                if not rec.ok:
                    break
                self._spawn(t, k, tree, children, spawned, start)
            else:  # not cut by the level's count or time, a failed call or an interrupt
                self.finished.add(tree.session)
        except asyncio.CancelledError:  # the level's end or an interrupt: the subagents stop with their tree
            for task in spawned:
                task.cancel()
            raise
        finally:
            if spawned:
                await asyncio.gather(*spawned, return_exceptions=True)
            if tree.parent is None and tree.blocks == tree.salt:
                self.texts.forget(tree.blocks)  # the tree is done: its blocks are not sent again (a pass's may be)

    def _spawn(self, t: Trajectory, after: int | None, tree: _Tree, children: dict[int, list[asyncio.Task[None]]],
               spawned: list[asyncio.Task[None]], start: int) -> None:
        """Start the subagents spawned after call ``after`` (None: before the first), each after its delay; the
        parent call that waits for one is told. A subagent spawned before the replay's start call is skipped."""
        for sub in t.subagents:
            if sub.after_call != after or (after is not None and after < start - 1) or \
                    (after is None and start > 0):
                continue
            self.subagents += 1
            child = self._tree(self.lanes + self.subagents - 1, tree.session)
            child.salt = tree.salt  # a subagent's hash ids are its tree's: the blocks it shares with its parent, shared
            child.blocks = tree.blocks
            task = asyncio.get_running_loop().create_task(self._child(sub.trajectory, child, self.plan.pause(sub.delay_s)))
            spawned.append(task)
            if sub.joined_by is not None:
                children.setdefault(sub.joined_by, []).append(task)

    async def _child(self, t: Trajectory, tree: _Tree, delay: float) -> None:
        await self._wait(delay)
        await self._replay(t, tree, 0)

    async def _wait(self, seconds: float) -> None:
        """Sleep ``seconds``, or less where the level ends first (its count sent, its time up): a tree waiting for
        its recorded time after the last call was sent held the level 2.0 s where its calls took 0.56 s."""
        if self.stop_ns is not None:
            seconds = min(seconds, max(0.0, (self.stop_ns - time.perf_counter_ns()) / 1e9))
        if seconds <= 0 or self.full.is_set():
            return
        try:
            await asyncio.wait_for(self.full.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    async def _send(self, t: Trajectory, call: Call, tree: _Tree, live: dict[int, str], phase: Any,
                    think_ms: float | None) -> RequestRecord:
        req = await self._request(call, tree, live)
        rec = RequestRecord(index=len(self.records), phase=phase, session=tree.session, turn=call.index,
                            think_ms=think_ms, parent=tree.parent)
        self.records.append(rec)
        if phase == "measured":
            self.measured += 1
            if self.requests is not None and self.measured >= self.requests:
                self.full.set()
        await self.client.send(req, rec)
        if phase == "measured":
            self.on_done(rec)
        if rec.ok and self.plan.answers == "live" and call.answer is not None:
            live[id(call.answer)] = rec.answer_text
        rec.release_text()  # what the tree's later calls re-send is in ``live``; no metric reads it
        return rec

    async def _request(self, call: Call, tree: _Tree, live: dict[int, str]) -> PreparedRequest:
        out = self.plan.tokens(call.output_tokens) if call.output_tokens else await self._answer_tokens(call)
        fields = self.fields(tree.agent, out)
        if call.blocks is not None:
            text, count = await self.texts.prompt(tree.blocks, call, f"{tree.session}/{call.index}")
            return PreparedRequest(text, out, count, fields, headers=self._header(tree))
        extra = dict(fields)
        if call.tools is not None:
            extra["tools"] = list(call.tools)
        if call.tool_choice is not None:
            extra["tool_choice"] = call.tool_choice
        messages = await self.texts.messages(tree.salt, call, live)
        # no expected count: the recording server's template and tokenizer counted the recorded one, and this
        # server's own count is what the level reports
        return PreparedRequest("", out, None, extra, messages, headers=self._header(tree))

    @staticmethod
    def _header(tree: _Tree) -> dict[str, str]:
        """The session a call belongs to, as agents' servers read it: the tree replayed, a subagent its own."""
        return {SESSION_HEADER: f"{tree.salt}-{tree.session}"}

    async def _answer_tokens(self, call: Call) -> int:
        """A call whose output length is not recorded: its recorded answer's tokens as the run's tokenizer counts
        them (``Call.answer_text``), at least 1."""
        text = call.answer_text
        n = len(await self.texts.builder.tok.encode(text)) if text else 1
        return self.plan.tokens(max(1, n))

