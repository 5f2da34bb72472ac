"""OpenAI chat completions (``/v1/chat/completions``), the session log's own shape: the request's messages, tools
and tool choice as sent; the answer rebuilt from its stream (content, reasoning, tool calls joined by their index)
or read whole, and its counts from ``usage`` (llama.cpp's ``timings`` where a stream carries no usage: its
``prompt_n`` plus ``cache_n`` prompt tokens, ``predicted_n`` answered, as the server counted them)."""

from __future__ import annotations

from typing import Any

from .parsed import (Answer, Counts, Request, Unrecordable, assistant, counts, events, is_stream, json_object, obj,
                     scope_of, text_of, typed_messages)

#: The keys of ``metadata`` that name a conversation.
METADATA_KEYS = ("metadata.session_id", "metadata.conversation_id", "metadata.thread_id")


def request(body: bytes) -> Request:
    req = json_object(body, "the request")
    raws = req.get("messages")
    if not isinstance(raws, list):
        raise Unrecordable("a chat request without a list of messages")
    msgs = typed_messages([_normal(m) for m in raws])
    tools = req.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise Unrecordable("tools that are not a list of objects")
    return Request(msgs, tuple(tools) if tools else None, req.get("tool_choice"),
                   scope_of(req, *METADATA_KEYS, "user", "metadata.user_id"), model=text_of(req.get("model")) or "")


def _normal(m: Any) -> Any:
    """An assistant message as servers take it and the log reads it: an empty tool-call list is none, and no
    content beside no tool call is empty text."""
    if not isinstance(m, dict) or m.get("role") != "assistant":
        return m
    m = dict(m)
    if m.get("tool_calls") == []:
        del m["tool_calls"]
    if m.get("content") is None and not m.get("tool_calls"):
        m["content"] = ""
    return m


def answer(data: bytes, content_type: str) -> Answer:
    if is_stream(content_type):
        return _streamed(data)
    whole = json_object(data, "the answer")
    choices = whole.get("choices")
    first = obj(choices[0]) if isinstance(choices, list) and choices else {}
    msg = obj(first.get("message"))
    calls = [c for c in msg.get("tool_calls") or [] if isinstance(c, dict)]
    return Answer(assistant(text_of(msg.get("content")), _reasoning(msg), calls), _counts(whole))


def _reasoning(d: dict[str, Any]) -> str | None:
    return text_of(d.get("reasoning_content")) or text_of(d.get("reasoning"))


def _usage(ev: dict[str, Any]) -> Counts | None:
    usage = obj(ev.get("usage"))
    if not usage:
        return None
    return counts(usage.get("prompt_tokens"), usage.get("completion_tokens"),
                  obj(usage.get("prompt_tokens_details")).get("cached_tokens"))


def _timings(ev: dict[str, Any]) -> Counts | None:
    timings = obj(ev.get("timings"))
    n, cached = timings.get("prompt_n"), timings.get("cache_n")
    if not isinstance(n, int) or not isinstance(cached, int):
        return None
    return counts(n + cached, timings.get("predicted_n"), cached)


def _counts(ev: dict[str, Any]) -> Counts:
    return _usage(ev) or _timings(ev) or Counts()


def _streamed(data: bytes) -> Answer:
    text: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    usage = timings = None
    for _, ev in events(data):
        if "error" in ev:
            raise Unrecordable("the stream carried an error")
        usage, timings = _usage(ev) or usage, _timings(ev) or timings
        choices = ev.get("choices")
        if not isinstance(choices, list) or not choices:
            continue
        first = obj(choices[0])
        if first.get("index", 0) != 0:
            continue  # n > 1: the first answer is the one recorded
        delta = obj(first.get("delta"))
        if (t := text_of(delta.get("content"))) is not None:
            text.append(t)
        if (r := _reasoning(delta)) is not None:
            reasoning.append(r)
        for piece in delta.get("tool_calls") or []:
            _join_call(calls, obj(piece))
    joined = [calls[i] for i in sorted(calls)]
    return Answer(assistant("".join(text), "".join(reasoning), joined), usage or timings or Counts())


def _join_call(calls: dict[int, dict[str, Any]], piece: dict[str, Any]) -> None:
    """A streamed piece of a tool call, into the call of its index: the id and name once, the arguments in
    pieces."""
    i = piece.get("index", len(calls))
    if not isinstance(i, int):
        raise Unrecordable("a tool call whose index is not a number")
    call = calls.setdefault(i, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
    fn = obj(piece.get("function"))
    if isinstance(piece.get("id"), str) and piece["id"]:
        call["id"] = piece["id"]
    if isinstance(fn.get("name"), str) and fn["name"]:
        call["function"]["name"] = fn["name"]
    if isinstance(fn.get("arguments"), str):
        call["function"]["arguments"] += fn["arguments"]
    if not call["id"]:
        call["id"] = f"call_{i}"  # a server that names no call: the index, so the answer still loads
