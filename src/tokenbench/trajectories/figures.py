"""The figures a run's manifest records of a set of trajectories: how many trees, calls and subagents, how many
subagents ran at once, the tokens sent and answered, and what an unbounded prefix cache could have served.

The ideal cached share follows ``trace.Trace.ideal_cached_share``: a call's leading blocks whose whole prefix of
hash ids an earlier call of the same tree already sent (a partial block as far as the earlier one went), over all
prompt tokens. Calls are taken in the order they were sent across the tree (a subagent's calls between its parent's).
Hash ids are per tree (a Weka trace's ids are ``local``), so no two trees share a block; a floor-rounded call's
unhashed tail is never served. A set whose ids are shared (``shared``: a session log's, keyed once for the
recording) has one cache: a call may be served what any tree sent before it, the calls taken in the order of
their recorded times across the set. Only a call's blocks beyond the prefix it shares with its own trajectory's call
before are looked up, so the work follows the distinct blocks, not the re-sent ones.

A full-text set (MLCommons' rows, a session log that keeps the text) has no tokens counted per block, so its ideal
share is of characters (``ideal_basis``): a call's tool schemas and leading messages that its trajectory's call
before sent, with that call's answer after them, or, where more, the tool schemas and messages before its first
user message that any call before it sent (an agent's system prompt, which a replay's salt leaves shared), over
all the characters its calls send. A template and a
tokenizer turn both into tokens alike, so the shares agree but for the template's own words; a subagent's first
call is served only what calls before sent ahead of their first user message, so the share is a floor where
subagents share more of their parent's prompt.
"""

from __future__ import annotations

import json
import statistics
from array import array
from dataclasses import asdict, dataclass
from typing import Any

from ..chat import Message
from .model import Blocks, Call, Trajectory


@dataclass(frozen=True, slots=True)
class Figures:
    trajectories: int  # session trees
    calls: int  # every call, subagents' included
    subagents: int  # nested ones included
    max_concurrent_subagents: int  # most subagents of one tree running at one time (by recorded times)
    median_calls: float  # calls per tree, subagents' included
    input_tokens: int | None  # None: the format records no token counts
    output_tokens: int | None
    median_input_tokens: float | None  # per call
    distinct_block_tokens: int | None  # tokens in distinct blocks (None: no hash ids)
    ideal_cached_share: float | None  # None: neither hash ids nor messages
    ideal_basis: str | None = None  # "tokens" (hash-id blocks) or "characters" (full text)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.ideal_cached_share is not None:
            d["ideal_cached_share"] = round(self.ideal_cached_share, 4)
        return d


def figures(trees: tuple[Trajectory, ...], shared: bool = False) -> Figures:
    calls = [c for t in trees for _, sub in t.walk() for c in sub.calls]
    ins = [c.input_tokens for c in calls if c.input_tokens is not None]
    outs = [c.output_tokens for c in calls if c.output_tokens is not None]
    served, total, distinct, blocked = _set_cache(trees, shared)
    ideal, basis = _ideal(trees, calls, served, total, blocked)
    return Figures(
        trajectories=len(trees), calls=len(calls),
        subagents=sum(1 for t in trees for _ in t.walk()) - len(trees),
        max_concurrent_subagents=max((_max_concurrent(t) for t in trees), default=0),
        median_calls=statistics.median(sum(len(s.calls) for _, s in t.walk()) for t in trees) if trees else 0.0,
        input_tokens=sum(ins) if ins else None, output_tokens=sum(outs) if outs else None,
        median_input_tokens=statistics.median(ins) if ins else None,
        distinct_block_tokens=distinct if blocked else None, ideal_cached_share=ideal, ideal_basis=basis)


def _set_cache(trees: tuple[Trajectory, ...], shared: bool) -> tuple[int, int, int, bool]:
    """``_cache`` of a set: one cache for every tree where they share blocks (``shared``), each call in its
    recorded order across the trees; else one per tree, summed."""
    if shared:
        merged = sorted(((t.epoch_s or 0.0) + at, i, k, f"{i}/{sub.id}", c)
                        for i, t in enumerate(trees) for k, (at, sub, c) in enumerate(t.timeline()))
        return _cache([(key, c) for *_, key, c in merged])
    served = total = distinct = 0
    blocked = False
    for t in trees:
        s, n, d, b = _cache([(sub.id, c) for _, sub, c in t.timeline()])
        served, total, distinct, blocked = served + s, total + n, distinct + d, blocked or b
    return served, total, distinct, blocked


def _ideal(trees: tuple[Trajectory, ...], calls: list[Call], served: int, total: int, blocked: bool
           ) -> tuple[float | None, str | None]:
    """The ideal cached share and what it is of: tokens where the set has hash ids, else characters where it has
    messages, else none."""
    if blocked:
        return (served / total if total else 0.0), "tokens"
    if not any(c.messages for c in calls):
        return None, None
    lead: set[int] = set()  # what every call sent before its first user message, across the set (_text_cache)
    same, chars = map(sum, zip(*(_text_cache(t, lead) for t in trees)))
    return (same / chars if chars else 0.0), "characters"


def _chars(m: Message) -> int:
    return sum(len(t) for t in m.texts())


def _text_cache(tree: Trajectory, lead: set[int]) -> tuple[int, int]:
    """(characters a prefix cache could serve, characters sent) of one full-text tree: each call against its own
    trajectory's call before, that call's answer after its messages; the tool schemas first, as templates put them.
    And against every call sent before it, of this tree or another, as far as the tools and the messages before
    its first user message go, which a replay's salt leaves shared (an agent's system prompt): ``lead`` holds
    those prefixes, chained, as the calls are taken."""
    before: dict[str, tuple[Any, tuple[Message, ...]]] = {}  # trajectory id -> (tools, messages and answer)
    same = total = 0
    for _, t, c in tree.timeline():
        schemas = json.dumps(c.tools) if c.tools else ""
        sizes = [_chars(m) for m in c.messages]
        total += len(schemas) + sum(sizes)
        own = 0
        prev = before.get(t.id)
        if prev is not None and prev[0] == c.tools:
            own = len(schemas)
            for m, old, n in zip(c.messages, prev[1], sizes):
                if m != old:
                    break
                own += n
        key = hash(schemas)
        seen = key in lead
        shared = len(schemas) if seen else 0
        lead.add(key)
        for m, n in zip(c.messages, sizes):
            if m.role == "user":
                break
            key = hash((key, repr(m)))
            seen = seen and key in lead
            shared += n if seen else 0
            lead.add(key)
        same += max(own, shared)
        before[t.id] = (c.tools, c.messages + ((c.answer,) if c.answer is not None else ()))
    return same, total


def _max_concurrent(tree: Trajectory) -> int:
    """The most subagents of the tree whose recorded [start, return] overlap (one that returns as another starts
    does not overlap it)."""
    events: list[tuple[float, int]] = []

    def visit(t: Trajectory, offset: float) -> None:
        for sub in t.subagents:
            if sub.start_s is None:
                continue
            start = offset + sub.start_s
            end = offset + sub.end_s if sub.end_s is not None else start + _span(sub.trajectory)
            events.extend([(start, 1), (max(start, end), -1)])
            visit(sub.trajectory, start)

    visit(tree, 0.0)
    now = most = 0
    for _, delta in sorted(events):
        now += delta
        most = max(most, now)
    return most


def _span(t: Trajectory) -> float:
    """A trajectory's recorded length where its return is not recorded: its last call's end (or start)."""
    ends = [(c.start_s or 0.0) + (c.duration_s or 0.0) for c in t.calls]
    return max(ends, default=0.0)


class _Trie:
    """Blocks a tree has sent: (parent node, hash id) -> node; a partial block's node keeps the tokens sent."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.nodes: dict[tuple[int, int], int] = {}
        self.partial: dict[int, int] = {}  # node -> tokens sent, where fewer than a block
        self.distinct = 0

    def send(self, parent: int, h: int, tokens: int) -> tuple[int, int]:
        """Send ``tokens`` of block ``h`` after node ``parent``: (its node, tokens of it already sent before)."""
        node = self.nodes.get((parent, h))
        if node is None:
            node = self.nodes[(parent, h)] = len(self.nodes) + 1
            sent = 0
        else:
            sent = self.partial.get(node, self.size)
        if tokens > sent:
            self.distinct += tokens - sent
            if tokens < self.size:
                self.partial[node] = tokens
            else:
                self.partial.pop(node, None)
        return node, sent


def _cache(calls: list[tuple[str, Call]]) -> tuple[int, int, int, bool]:
    """(tokens an unbounded prefix cache could serve, prompt tokens, distinct block tokens, any hash ids) of calls
    sent in this order (one tree's, or a shared set's), each with its trajectory's key."""
    tries: dict[int, _Trie] = {}
    last: dict[str, tuple[array[int], array[int], int]] = {}  # trajectory key -> (ids, node path, full blocks)
    served = total = 0
    blocked = False
    for key, c in calls:
        total += c.input_tokens or 0
        if c.blocks is None:
            continue
        blocked = True
        if not len(c.blocks.hash_ids):
            continue
        trie = tries.setdefault(c.blocks.size, _Trie(c.blocks.size))
        got, last[key] = _send(trie, c, last.get(key))
        served += got
    return served, total, sum(t.distinct for t in tries.values()), blocked


def _send(trie: _Trie, call: Call, before: tuple[array[int], array[int], int] | None
          ) -> tuple[int, tuple[array[int], array[int], int]]:
    """Send one call's blocks: (tokens served, its (ids, node path, full blocks) for the next call)."""
    b: Blocks = call.blocks  # type: ignore[assignment]
    ids = b.hash_ids.array()
    tokens = b.block_tokens()
    full = len(ids) - (1 if tokens and tokens[-1] < b.size else 0)
    keep = _common_prefix(ids, before[0]) if before else 0
    keep = min(keep, full, before[2]) if before else 0
    path = before[1][:keep] if before else array("q")
    served = keep * b.size  # the call before sent these whole blocks
    serving = True
    for i in range(keep, len(ids)):
        node, sent = trie.send(path[-1] if path else 0, ids[i], tokens[i])
        if serving:
            got = min(tokens[i], sent)
            served += got
            serving = got == tokens[i]
        path.append(node)
    return served, (ids, path, full)


def _common_prefix(a: array[int], b: array[int]) -> int:
    """Length of the common prefix of two id arrays, by halving (each comparison at C speed)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo]; a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo
