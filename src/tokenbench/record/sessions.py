"""Which session a recorded request belongs to, and whose subagent a new session is: decided from what the
requests say, in the order their answers ended (the order the log is written in).

A request's session, by the first rule that applies:

1. The ``X-Session-ID`` header, where the client sends one: that session, whatever its messages. The header
   groups, and is not written: every session is named ``s1``, ``s2``... in the order it began (a client's id may
   name a person or a machine).
2. The Responses API's ``previous_response_id``: the session of that response.
3. Its conversation: a request whose messages begin with a session's last request's messages and go on (with
   that request's answer, or in place of the answer another message, as an agent that rewrites what it re-sends
   does) continues that session, if that answer had ended when it was sent. The same messages sent again are a
   new session: two runs of one task are two sessions. Where several sessions could be continued, the longest
   shared beginning wins, then the session that answered last. A body id (OpenAI ``user``,
   ``metadata.session_id``, ``prompt_cache_key``; Anthropic ``metadata.user_id``) scopes this: a request only
   continues a session of the same id. Messages compare by role, text, tool call ids and names, and the call a
   tool message answers; white space at either end of a text, reasoning and key order do not matter.
4. Otherwise it starts a new session (a fork of a conversation, or a compacted one, is a new session).

A new session's parent: the ``X-Parent-Session-ID`` header where it names a session already in the log; else the
session that handed it its task: one waiting on a tool call when the new session's first request was sent (an
answer of it that called tools had ended, and its next request was not sent yet) whose call's arguments hold a
text of at least ``HANDOFF_CHARS`` characters that the new session's first request's user messages contain. That is how a
coding agent starts a subagent (Claude Code's Task tool, a ``spawn_agent`` call): the words of its task are in the
call and in the subagent's first prompt. Waiting on a tool alone is not enough: sessions of several people, or
of several agents, wait on tools while others start. No match: the parent is null.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..chat import Message

#: The shortest argument text that names a subagent's task (shorter ones, a path or a flag, are everywhere).
HANDOFF_CHARS = 16
#: The latest tool-calling answers of a session whose calls a new session may be handed its task by.
WAITS_KEPT = 8
#: The most answers whose conversation a later ``previous_response_id`` may name.
RESPONSES_KEPT = 4096


@dataclass(frozen=True, slots=True)
class Turn:
    """One recorded request, as grouping needs it."""

    sent: float
    end: float
    messages: tuple[Message, ...]
    answer: Message
    header: str | None = None  # X-Session-ID
    parent_header: str | None = None  # X-Parent-Session-ID
    scope: str | None = None
    previous: str | None = None  # previous_response_id
    response_id: str | None = None
    overlapped: bool = False


@dataclass(frozen=True, slots=True)
class Placed:
    """Where a turn goes: its session, that session's parent, and the end of the session's request sent before
    it (None: its first; ``known`` False: that request had not ended when this one did)."""

    session: str
    parent: str | None
    previous_end: float | None
    known: bool = True


@dataclass(slots=True)
class _Session:
    name: str
    parent: str | None
    scope: str | None
    times: list[tuple[float, float]] = field(default_factory=list)  # (sent, end) of its requests, by sent
    keys: tuple[bytes, ...] = ()  # its last request's index keys
    #: its latest answers that called tools: [answer's end, the texts the calls hand on, the next request's send]
    waits: deque[list[Any]] = field(default_factory=lambda: deque(maxlen=WAITS_KEPT))
    last_end: float = 0.0
    last_sent: float = 0.0

    def waiting(self, t: float) -> list[tuple[str, ...]]:
        """The texts of the tool calls this session was waiting on at ``t``: an answer ended before, its next
        request not sent yet."""
        return [texts for end, texts, nxt in self.waits if end <= t and (nxt is None or nxt >= t)]


def fingerprint(m: Message) -> bytes:
    if isinstance(m.content, str) or m.content is None:
        text = (m.content or "").strip()
    else:
        text = "\x1f".join(p["text"].strip() if isinstance(p.get("text"), str) else json.dumps(p, sort_keys=True)
                           for p in m.content)
    calls = "\x1f".join(f"{c.id}\x1e{c.name}" for c in m.tool_calls)
    return "\x00".join((m.role, text, calls, m.tool_call_id or "")).encode("utf-8", "surrogatepass")


def prefix_keys(messages: tuple[Message, ...], scope: str | None) -> Iterator[bytes]:
    """A key for each leading run of messages (1, 2, ... all of them), in that scope: equal keys, equal runs."""
    h = hashlib.blake2b((scope or "").encode("utf-8", "surrogatepass"), digest_size=16).digest()
    for m in messages:
        h = hashlib.blake2b(h + fingerprint(m), digest_size=16).digest()
        yield h


def handoff_texts(answer: Message) -> tuple[str, ...]:
    """The texts an answer's tool calls hand on: every string in their arguments' JSON (the whole arguments where
    they are not JSON), long enough to name a task."""
    out: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str):
            if len(v.strip()) >= HANDOFF_CHARS:
                out.append(" ".join(v.split()))
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    for c in answer.tool_calls:
        try:
            walk(json.loads(c.arguments))
        except (ValueError, RecursionError):
            walk(c.arguments)
    return tuple(out)


def _user_text(messages: tuple[Message, ...]) -> str:
    parts: list[str] = []
    for m in messages:
        if m.role != "user":
            continue
        if isinstance(m.content, str):
            parts.append(m.content)
        elif m.content:
            parts.extend(p["text"] for p in m.content if isinstance(p.get("text"), str))
    return " ".join(" ".join(parts).split())


class Sessions:
    """The sessions seen so far; ``place`` each turn in the order answers ended."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Session] = {}
        self._by_header: dict[str, str] = {}
        self._index: dict[bytes, list[tuple[str, bool]]] = {}  # key -> (session, the key includes its answer)
        self._responses: OrderedDict[str, tuple[str, tuple[Message, ...]]] = OrderedDict()
        self._made = 0

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def subagents(self) -> int:
        return sum(1 for s in self._sessions.values() if s.parent is not None)

    def history(self, response_id: str) -> tuple[Message, ...] | None:
        """The messages and answer of a recorded response, which a request naming it as its previous continues."""
        got = self._responses.get(response_id)
        return got[1] if got else None

    def place(self, turn: Turn) -> Placed:
        keys = list(prefix_keys(turn.messages, turn.scope))
        s = self._find(turn, keys)
        if s is None:
            s = self._new(turn)
        i = bisect.bisect_left(s.times, (turn.sent, turn.end))
        prev = s.times[i - 1][1] if i else None
        s.times.insert(i, (turn.sent, turn.end))
        self._advance(s, turn, keys)
        return Placed(s.name, s.parent, prev, not turn.overlapped)

    def _find(self, turn: Turn, keys: list[bytes]) -> _Session | None:
        if turn.header is not None:
            name = self._by_header.get(turn.header)
            return self._sessions[name] if name else None
        if turn.previous is not None and turn.previous in self._responses:
            return self._sessions[self._responses[turn.previous][0]]
        for k in range(len(keys), 0, -1):
            hits = [self._sessions[n] for n, answered in self._index.get(keys[k - 1], ()) if answered or k < len(keys)]
            hits = [s for s in hits if s.last_end <= turn.sent and s.scope == turn.scope]
            if hits:
                return max(hits, key=lambda s: s.last_end)
        return None

    def _new(self, turn: Turn) -> _Session:
        self._made += 1
        name = f"s{self._made}"
        if turn.header is not None:
            self._by_header[turn.header] = name
        parent = self._by_header.get(turn.parent_header) if turn.parent_header is not None else None
        s = _Session(name, parent or self._handed(turn), turn.scope)
        self._sessions[name] = s
        return s

    def _handed(self, turn: Turn) -> str | None:
        """The session that handed this new one its task (the module's rule), or None."""
        asked = _user_text(turn.messages)
        if not asked:
            return None
        found = [s for s in self._sessions.values() if s.waits
                 and any(t in asked for texts in s.waiting(turn.sent) for t in texts)]
        return max(found, key=lambda s: s.last_end).name if found else None

    def _advance(self, s: _Session, turn: Turn, keys: list[bytes]) -> None:
        """The session's last request is now this turn (where it is the latest sent): its keys replace the old."""
        for w in s.waits:  # an answer this request follows is no longer waited on from this send
            if w[0] <= turn.sent and (w[2] is None or w[2] > turn.sent):
                w[2] = turn.sent
        texts = handoff_texts(turn.answer)
        if texts:
            s.waits.append([turn.end, texts, None])
        if turn.sent < s.last_sent:
            return
        for k in s.keys:
            entries = self._index.get(k, [])
            entries[:] = [e for e in entries if e[0] != s.name]
            if not entries:
                self._index.pop(k, None)
        asked = keys[-1] if keys else b""
        with_answer = hashlib.blake2b(asked + fingerprint(turn.answer), digest_size=16).digest()
        s.keys = (asked, with_answer)
        if turn.header is None:
            self._index.setdefault(asked, []).append((s.name, False))
            self._index.setdefault(with_answer, []).append((s.name, True))
        s.last_end, s.last_sent = turn.end, turn.sent
        if turn.response_id is not None:
            self._responses[turn.response_id] = (s.name, (*turn.messages, turn.answer))
            while len(self._responses) > RESPONSES_KEPT:
                self._responses.popitem(last=False)
