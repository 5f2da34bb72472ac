"""Anthropic messages (``/v1/messages``: Claude Code and other Anthropic-speaking agents), converted to the log's
chat shape as a server that takes both would read them:

- ``system`` (text or text blocks) is a system message;
- a user message's ``tool_result`` blocks are tool messages (``tool_call_id``: the block's ``tool_use_id``), before
  the rest of its blocks as a user message; text blocks are text parts, an image block an ``image_url`` part;
- an assistant message's text blocks are its content, ``thinking`` blocks its ``reasoning_content``, ``tool_use``
  blocks its ``tool_calls`` (the input as JSON text); redacted thinking and server tool blocks are dropped;
- a tool (``name``, ``description``, ``input_schema``) is a function tool; ``tool_choice`` auto, any, tool and
  none are chat's auto, required, the named function and none;
- the counts: prompt tokens are ``input_tokens`` plus ``cache_read_input_tokens`` plus
  ``cache_creation_input_tokens`` (Anthropic counts the three apart), cached tokens the cache reads, answered
  tokens ``output_tokens`` (the stream's last count).

``cache_control`` marks are not kept: they steer Anthropic's cache, not what the model reads."""

from __future__ import annotations

import json
from typing import Any

from .parsed import (Answer, Counts, Request, Unrecordable, assistant, counts, events, is_stream, json_object, obj,
                     scope_of, text_of, typed_messages)


def request(body: bytes) -> Request:
    req = json_object(body, "the request")
    raws = req.get("messages")
    if not isinstance(raws, list):
        raise Unrecordable("a messages request without a list of messages")
    out: list[dict[str, Any]] = []
    system = _text_blocks(req.get("system"))
    if system:
        out.append({"role": "system", "content": system})
    for m in raws:
        m = obj(m)
        if m.get("role") == "assistant":
            out.append(_assistant(m.get("content")))
        elif m.get("role") == "user":
            out.extend(_user(m.get("content")))
        else:
            raise Unrecordable(f"a message of role {str(m.get('role'))[:20]!r}")
    tools = [_tool(obj(t)) for t in req.get("tools") or [] if isinstance(t, dict)]
    return Request(typed_messages(out), tuple(tools) if tools else None, _tool_choice(req.get("tool_choice")),
                   scope_of(req, "metadata.user_id"), model=text_of(req.get("model")) or "")


def _text_blocks(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(b["text"] for b in value if isinstance(b, dict) and isinstance(b.get("text"), str))
    return None


def _part(block: dict[str, Any]) -> dict[str, Any] | None:
    """A user block as a chat content part (None: one the model does not read as content)."""
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": str(block.get("text", ""))}
    if kind == "image":
        src = obj(block.get("source"))
        url = (f"data:{src.get('media_type')};base64,{src.get('data')}" if src.get("type") == "base64"
               else str(src.get("url", "")))
        return {"type": "image_url", "image_url": {"url": url}}
    if kind == "document" and obj(block.get("source")).get("type") == "text":
        return {"type": "text", "text": str(obj(block.get("source")).get("data", ""))}
    return None


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Parts as chat content: one text part is its text."""
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts


def _user(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for b in content if isinstance(content, list) else []:
        b = obj(b)
        if b.get("type") == "tool_result":
            inner = b.get("content")
            blocks = [obj(x) for x in inner] if isinstance(inner, list) else []
            result = inner if isinstance(inner, str) else _content([p for x in blocks if (p := _part(x))] or
                                                                   [{"type": "text", "text": ""}])
            out.append({"role": "tool", "tool_call_id": str(b.get("tool_use_id", "")), "content": result})
        elif (p := _part(b)) is not None:
            parts.append(p)
    if parts:
        out.append({"role": "user", "content": _content(parts)})
    return out


def _assistant(content: Any) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    text, thinking, calls = [], [], []
    for b in content if isinstance(content, list) else []:
        b = obj(b)
        if b.get("type") == "text":
            text.append(str(b.get("text", "")))
        elif b.get("type") == "thinking":
            thinking.append(str(b.get("thinking", "")))
        elif b.get("type") == "tool_use":
            calls.append(_call(str(b.get("id", "")), str(b.get("name", "")), json.dumps(b.get("input", {}))))
    out: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text or not calls else None}
    if thinking:
        out["reasoning_content"] = "".join(thinking)
    if calls:
        out["tool_calls"] = calls
    return out


def _call(id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _tool(t: dict[str, Any]) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": str(t.get("name", t.get("type", "tool")))}
    if isinstance(t.get("description"), str):
        fn["description"] = t["description"]
    fn["parameters"] = t["input_schema"] if isinstance(t.get("input_schema"), dict) else {"type": "object",
                                                                                          "properties": {}}
    return {"type": "function", "function": fn}


def _tool_choice(choice: Any) -> Any:
    c = obj(choice)
    kind = c.get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": str(c.get("name", ""))}}
    return {"auto": "auto", "any": "required", "none": "none"}.get(str(kind)) if kind else None


def answer(data: bytes, content_type: str) -> Answer:
    if not is_stream(content_type):
        whole = json_object(data, "the answer")
        if whole.get("type") == "error":
            raise Unrecordable("the answer is an error")
        m = _assistant(whole.get("content"))
        return Answer(assistant(m.get("content"), m.get("reasoning_content"), m.get("tool_calls") or []),
                      _counts(obj(whole.get("usage")), {}))
    blocks: dict[int, dict[str, Any]] = {}
    start: dict[str, Any] = {}
    last: dict[str, Any] = {}
    for _, ev in events(data):
        kind = ev.get("type")
        if kind == "error":
            raise Unrecordable("the stream carried an error")
        if kind == "message_start":
            start = obj(obj(ev.get("message")).get("usage"))
        elif kind == "message_delta":
            last = {**last, **obj(ev.get("usage"))}
        elif kind == "content_block_start" and isinstance(ev.get("index"), int):
            blocks[ev["index"]] = dict(obj(ev.get("content_block")), partial="")
        elif kind == "content_block_delta":
            _delta(blocks.get(ev.get("index")), obj(ev.get("delta")))  # type: ignore[arg-type]
    text = "".join(str(b.get("text", "")) for _, b in sorted(blocks.items()) if b.get("type") == "text")
    thinking = "".join(str(b.get("thinking", "")) for _, b in sorted(blocks.items()) if b.get("type") == "thinking")
    calls = [_call(str(b.get("id", "")), str(b.get("name", "")), _input(b)) for _, b in sorted(blocks.items())
             if b.get("type") == "tool_use"]
    return Answer(assistant(text, thinking, calls), _counts(start, last))


def _delta(block: dict[str, Any] | None, d: dict[str, Any]) -> None:
    if block is None:
        raise Unrecordable("a content block delta before its block started")
    for key, into in (("text", "text"), ("thinking", "thinking"), ("partial_json", "partial")):
        if isinstance(d.get(key), str):
            block[into] = str(block.get(into, "")) + d[key]


def _input(block: dict[str, Any]) -> str:
    """A streamed tool call's input as JSON text: its pieces joined (``{}`` where none came)."""
    partial = str(block.get("partial") or "")
    if not partial:
        return json.dumps(block.get("input") or {})
    try:
        return json.dumps(json.loads(partial))
    except ValueError:
        raise Unrecordable("a tool call whose input is not JSON") from None


def _counts(start: dict[str, Any], last: dict[str, Any]) -> Counts:
    usage = {**start, **{k: v for k, v in last.items() if v is not None}}
    parts = [usage.get(k) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
    prompt = sum(p for p in parts if isinstance(p, int)) if isinstance(parts[0], int) else None
    return counts(prompt, usage.get("output_tokens"), usage.get("cache_read_input_tokens"))
