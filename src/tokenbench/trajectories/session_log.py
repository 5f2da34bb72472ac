"""A session log: the chat requests of agent sessions in the order they ran, as a recording proxy in front of an
OpenAI-compatible server writes them (``tokenbench record``) and as a proxy's request log holds them. tokenbench's own
format; JSON lines, UTF-8, one header line and then one line per request.

Header (line 1)::

    {"format": "tokenbench-session-log", "version": 1, "lengths_only": false,
     "started_at": "2026-05-01T09:00:00Z"}

``lengths_only`` (required): true for the variant that keeps token counts and hash ids instead of text; it then
also names ``block_size`` (tokens a hash id covers, at least 1) and ``rounding``: ``"floor"`` (the ids cover
``floor(prompt_tokens / block_size)`` whole blocks; the rest is an unhashed tail) or ``"ceil"`` (the partial last
block has an id too). ``started_at`` (optional): the wall-clock time (ISO 8601) of the log's clock 0.

Request lines, one per request, written when its answer ended (so ``end`` never goes back from line to line)::

    {"session": "s1", "parent": null,
     "request": {"messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}],
                 "tools": [{"type": "function", "function": {...}}], "tool_choice": "auto"},
     "sent": 12.5, "first_byte": 13.1, "end": 15.0, "pause": 3.2,
     "usage": {"prompt_tokens": 1834, "completion_tokens": 57, "cached_tokens": 1792},
     "response": {"role": "assistant", "content": null, "reasoning_content": "...",
                  "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "...", "arguments": "{}"}}]}}

- ``session``: the session's id (text). ``parent``: the session this one is a subagent of (null for a top-level
  session); that session must be in the log, and no session descends from itself.
- ``request``: the body as sent, model-independent: ``messages`` (OpenAI chat messages: roles system, developer,
  user, assistant, tool; ``tool_calls`` each with an ``id``; a tool message's ``tool_call_id``;
  ``reasoning_content`` as sent), ``tools`` and ``tool_choice`` where sent. The model's name and sampling settings
  are not kept (the replay sets its own); other keys are ignored.
- ``sent``, ``first_byte``, ``end``: seconds on the log's clock (a monotonic clock, 0 at the log's start) when the
  request was sent, its first byte came back and its answer ended: ``sent <= first_byte <= end``.
- ``pause``: seconds from the end of the session's previous request (by ``sent``) to this send, never below 0 (a
  request sent before the previous one ended: 0); null for a session's first request, and where the previous
  request had not ended when this line was written (two requests of one session in flight at once). Where it is a
  number it must agree with the times to the millisecond; the loader takes the pause from the times either way.
- ``usage``: the server's counts: ``prompt_tokens`` (at least 1), ``completion_tokens``, ``cached_tokens`` (prompt
  tokens served from its cache, at most ``prompt_tokens``), each null where the server said nothing (a stream the
  client did not ask usage of); a replay counts the request itself then. The lengths-only variant always has
  ``prompt_tokens`` and ``completion_tokens`` (its hash ids are counted from them).
- ``response``: the assistant message answered (optional), for a replay that sends recorded answers.
- The lengths-only variant has no ``request`` and no ``response``; it has ``hash_ids`` instead: one id per block of
  the prompt as the header's ``rounding`` counts them from ``usage.prompt_tokens``; two requests that list the same
  leading ids sent the same leading tokens. Ids are per log (a replay salts each session tree).

A session log never holds secrets: no headers, no keys. A line with a key named ``headers``, ``authorization``,
``api_key``, ``x-api-key`` or ``cookie`` (at its top level or in ``request``) is refused. A failed request is not
logged.

Loading: a session's calls are in ``sent`` order; a subagent's anchor comes from the times: it starts after the
parent's last call that ended before its first send; the parent's first call sent after it started waits for it
(``joined_by``) when that call was sent after the subagent's last answer ended, and that call's pause then counts
from the subagent's return. A last line with no newline that is not JSON, the mark of a write a crash or a full
disk cut short, is left out and counted (the replay's heading says so); any other line that is not a request is
refused.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .boundary import (Refusal, as_hash_ids, as_list, as_obj, as_optional_seconds, as_seconds, as_text, as_tokens,
                       json_lines, parse_json, refuse, rounding_of)
from .messages import MessageCache, message
from .model import JSON, Blocks, Call, HashIdChain, PauseFrom, Rounding, Subagent, Trajectory

FORMAT = "tokenbench-session-log"
VERSION = 1
SECRET_KEYS = frozenset({"headers", "authorization", "api_key", "x-api-key", "cookie"})
#: How far a recorded ``pause`` may differ from what the times say, seconds.
PAUSE_TOLERANCE = 1e-3


@dataclass(frozen=True, slots=True)
class Header:
    lengths_only: bool
    block_size: int | None
    rounding: Rounding | None
    started_at: float | None  # POSIX seconds of the log's clock 0


@dataclass(slots=True)
class _Line:
    line: int
    sent: float
    first_byte: float
    end: float
    pause: float | None
    call: Call  # pause and index set once the session is ordered


@dataclass(slots=True)
class _Session:
    id: str
    parent: str | None
    line: int
    lines: list[_Line] = field(default_factory=list)
    cache: MessageCache = field(default_factory=MessageCache)
    chain: HashIdChain = field(default_factory=HashIdChain)
    tools: dict[str, tuple[JSON, ...]] = field(default_factory=dict)


def header(obj: dict[str, Any]) -> Header:
    if "format" not in obj and {"session", "sent"} <= obj.keys():
        raise Refusal("format", f"this line is a call, not the header a session log starts with (naming {FORMAT!r}, "
                                "as record writes it first): was the header line removed?")
    if obj.get("format") != FORMAT:
        raise Refusal("format", f"{obj.get('format')!r}: a session log starts with a header naming {FORMAT!r}")
    if obj.get("version") != VERSION:
        raise Refusal("version", f"{obj.get('version')!r}: this tokenbench reads version {VERSION}")
    lengths = obj.get("lengths_only")
    if not isinstance(lengths, bool):
        raise Refusal("lengths_only", f"{lengths!r} is not true or false")
    size = rounding = None
    if lengths:
        size = as_tokens(obj.get("block_size"), "block_size")
        if obj.get("rounding") not in ("floor", "ceil"):
            raise Refusal("rounding", f"{obj.get('rounding')!r} is not floor or ceil")
        rounding = obj["rounding"]
    started = obj.get("started_at")
    if started is not None:
        try:
            dt = datetime.fromisoformat(as_text(started, "started_at").replace("Z", "+00:00"))
        except ValueError:
            raise Refusal("started_at", f"{started!r} is not an ISO 8601 time") from None
        started = (dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)).timestamp()
    return Header(lengths, size, rounding, started)


#: Why a log's last line is left out: the writer writes each line whole, with its newline, so a last line with no
#: newline that is not JSON is one a crash or a full disk cut in the middle of its write.
CUT_LAST_LINE = "cut short in its write (the log's last line, with no newline)"


def _whole_lines(text: str) -> tuple[str, Counter[str]]:
    """The log's text up to its last whole line, and what was left out."""
    head, _, last = text.rpartition("\n")
    if not head.strip() or not last.strip():
        return text, Counter()
    try:
        parse_json(last, "line")  # the boundary's own test of a line: a RecursionError is a refusal there too
    except Refusal:
        return head + "\n", Counter({CUT_LAST_LINE: 1})
    return text, Counter()


def load_session_log(path: Path, text: str, block: int | None) -> tuple[tuple[Trajectory, ...], int | None,
                                                                        Counter[str]]:
    """The log's sessions as trees, the block size of a lengths-only log, and the lines left out (a last line
    cut in its write: ``CUT_LAST_LINE``); any other line that is not a request is refused."""
    sessions: dict[str, _Session] = {}
    head: Header | None = None
    last_end = 0.0
    text, skipped = _whole_lines(text)
    for line, obj in json_lines(path, text):
        try:
            if head is None:
                head = header(obj)
                if block is not None and head.block_size is not None and block != head.block_size:
                    raise Refusal("block_size", f"the log's {head.block_size} disagrees with the block size "
                                                f"asked for ({block})")
                continue
            entry = _request(obj, line, head, sessions)
            if entry.end < last_end:
                raise Refusal("end", f"{entry.end:g} s is before the line before's {last_end:g} s (lines are "
                                     "written as answers end)")
            last_end = entry.end
        except Refusal as r:
            raise refuse(path, r.at(line)) from None
    if head is None or not sessions:
        raise refuse(path, Refusal("file", "a session log with no request in it", 1))
    try:
        return _trees(path, sessions, head), head.block_size, skipped
    except Refusal as r:
        raise refuse(path, r) from None


def _secrets(obj: dict[str, Any], where: str) -> None:
    for k in obj:
        if isinstance(k, str) and k.lower() in SECRET_KEYS:
            raise Refusal(f"{where}{k}", "a session log holds no headers or keys")


def _request(obj: dict[str, Any], line: int, head: Header, sessions: dict[str, _Session]) -> _Line:
    _secrets(obj, "")
    sid = as_text(obj.get("session"), "session", allow_empty=False)
    parent = obj.get("parent")
    parent = None if parent is None else as_text(parent, "parent", allow_empty=False)
    s = sessions.setdefault(sid, _Session(sid, parent, line))
    if s.parent != parent:
        raise Refusal("parent", f"{parent!r}, where line {s.line} gave session {sid!r} the parent {s.parent!r}")
    sent, first, end = (as_seconds(obj.get(k), k) for k in ("sent", "first_byte", "end"))
    if not sent <= first <= end:  # the field named is the first out of order
        raise Refusal("first_byte" if first < sent else "end",
                      f"sent {sent:g}, first_byte {first:g}, end {end:g} s are not in that order")
    pause = as_optional_seconds(obj.get("pause"), "pause")
    n_in, n_out, cached = _usage(as_obj(obj.get("usage"), "usage"), head.lengths_only)
    call = Call(0, f"line {line}", n_in, n_out, 0.0, "start", duration_s=end - sent, ttft_s=first - sent,
                cached_tokens=cached)
    call = _lengths(obj, call, head, s) if head.lengths_only else _body(obj, call, s)
    entry = _Line(line, sent, first, end, pause, call)
    s.lines.append(entry)
    return entry


def _usage(usage: dict[str, Any], lengths_only: bool) -> tuple[int | None, int | None, int | None]:
    """(prompt, completion, cached) tokens; the first two may be null in a log that keeps the text."""
    n_in = usage.get("prompt_tokens")
    n_out = usage.get("completion_tokens")
    if n_in is not None or lengths_only:
        n_in = as_tokens(n_in, "usage.prompt_tokens")
    if n_out is not None or lengths_only:
        n_out = as_tokens(n_out, "usage.completion_tokens", minimum=0)
    cached = usage.get("cached_tokens")
    if cached is not None:
        as_tokens(cached, "usage.cached_tokens", minimum=0)
        if n_in is None or cached > n_in:
            raise Refusal("usage.cached_tokens", f"{cached} is more than the {n_in} prompt tokens" if n_in else
                          f"{cached} where the prompt tokens are not said")
    return n_in, n_out, cached


def _lengths(obj: dict[str, Any], call: Call, head: Header, s: _Session) -> Call:
    if "hash_ids" not in obj:
        raise Refusal("hash_ids", "missing (a lengths-only log lists each request's hash ids)")
    ids = as_hash_ids(obj["hash_ids"], "hash_ids")
    size, rounding = head.block_size or 1, head.rounding or "floor"
    rounding_of(len(ids), call.input_tokens or 0, size, "hash_ids", (rounding,))
    return replace(call, blocks=Blocks(s.chain.add(ids), size, rounding, call.input_tokens or 0))


def _body(obj: dict[str, Any], call: Call, s: _Session) -> Call:
    req = as_obj(obj.get("request"), "request")
    _secrets(req, "request.")
    msgs = s.cache.messages(req.get("messages"), "request.messages")
    tools = None
    if req.get("tools") is not None:
        schemas = as_list(req["tools"], "request.tools", allow_empty=True)
        key = repr(schemas)
        tools = s.tools.setdefault(key, tuple(as_obj(t, f"request.tools[{i}]") for i, t in enumerate(schemas)))
    answer = None
    if obj.get("response") is not None:
        answer = message(obj["response"], "response")
        if answer.role != "assistant":
            raise Refusal("response.role", f"{answer.role!r}: an answer is an assistant message")
        s.cache.answered(obj["response"], answer)
    return replace(call, messages=msgs, tools=tools, tool_choice=req.get("tool_choice"), answer=answer)


def _trees(path: Path, sessions: dict[str, _Session], head: Header) -> tuple[Trajectory, ...]:
    for s in sessions.values():
        s.lines.sort(key=lambda x: x.sent)
        seen = {s.id}
        p = s.parent
        while p is not None:
            if p not in sessions:
                raise Refusal("parent", f"{p!r} is no session of this log", s.line)
            if p in seen:
                raise Refusal("parent", f"session {s.id!r} descends from itself", s.line)
            seen.add(p)
            p = sessions[p].parent
    children: dict[str, list[_Session]] = {}
    for s in sessions.values():
        if s.parent is not None:
            children.setdefault(s.parent, []).append(s)
    return tuple(_tree(path, s, children, head) for s in sessions.values() if s.parent is None)


def _tree(path: Path, s: _Session, children: dict[str, list[_Session]], head: Header) -> Trajectory:
    t0 = s.lines[0].sent
    kids = sorted(children.get(s.id, []), key=lambda k: k.lines[0].sent)
    subs = [_anchor(s, k, _tree(path, k, children, head)) for k in kids]
    calls = []
    for i, ln in enumerate(s.lines):
        joined = [k.lines[-1].end for k, sub in zip(kids, subs) if sub.joined_by == i]
        prev = s.lines[i - 1] if i else None
        since: PauseFrom
        if prev is None:
            pause, since = 0.0, "start"
        elif joined:
            pause, since = max(0.0, ln.sent - max(joined)), "subagents"
        else:
            pause, since = max(0.0, ln.sent - prev.end), "answer"
        _check_pause(ln, prev)
        calls.append(replace(ln.call, index=i, pause_s=pause, pause_from=since, start_s=ln.sent - t0))
    epoch = head.started_at + t0 if head.started_at is not None else None
    return Trajectory(s.id, "session-log", path, f"line {s.line}", tuple(calls), tuple(subs), epoch_s=epoch)


def _check_pause(ln: _Line, prev: _Line | None) -> None:
    if ln.pause is None:
        return
    want = 0.0 if prev is None else max(0.0, ln.sent - prev.end)
    if abs(ln.pause - want) > PAUSE_TOLERANCE:
        raise Refusal("pause", f"{ln.pause:g} s where the times say {want:g} s", ln.line)


def _anchor(parent: _Session, kid: _Session, child: Trajectory) -> Subagent:
    start, ret = kid.lines[0].sent, kid.lines[-1].end
    before = [i for i, ln in enumerate(parent.lines) if ln.end <= start]
    after = before[-1] if before else None
    delay = start - (parent.lines[after].end if after is not None else parent.lines[0].sent)
    nxt = next((i for i, ln in enumerate(parent.lines) if ln.sent >= start), None)
    joined = nxt if nxt is not None and parent.lines[nxt].sent >= ret else None
    t0 = parent.lines[0].sent
    return Subagent(child, after, start - t0, max(0.0, delay), joined, ret - t0)
