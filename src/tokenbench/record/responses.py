"""OpenAI responses (``/v1/responses``: Codex CLI and other Responses-speaking agents), converted to the log's chat
shape:

- ``instructions`` is a system message; ``input`` text a user message;
- an input message item (user, system, developer, assistant) is that chat message, its ``input_text`` and
  ``output_text`` parts text, an ``input_image`` an ``image_url`` part;
- ``function_call`` and ``custom_tool_call`` items are tool calls of one assistant message (a custom call's input
  as its arguments), ``reasoning`` items that message's ``reasoning_content`` (their summaries' text);
  ``function_call_output`` and ``custom_tool_call_output`` items are tool messages;
- function tools are chat function tools, custom tools function tools of one text parameter ``input``; built-in
  tools (web search, file search) are not kept, as a chat server has none;
- a request that names ``previous_response_id`` continues that response's conversation: the writer puts the
  earlier messages before its input;
- the counts: ``usage.input_tokens``, ``output_tokens``, ``input_tokens_details.cached_tokens`` of the completed
  response."""

from __future__ import annotations

from typing import Any

from .parsed import (Answer, Request, Unrecordable, assistant, counts, events, is_stream, json_object, obj, scope_of,
                     text_of, typed_messages)

#: Item types that are tool calls, and their outputs.
CALLS = ("function_call", "custom_tool_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output")


def request(body: bytes) -> Request:
    req = json_object(body, "the request")
    out: list[dict[str, Any]] = []
    if isinstance(req.get("instructions"), str) and req["instructions"]:
        out.append({"role": "system", "content": req["instructions"]})
    items = req.get("input")
    if isinstance(items, str):
        out.append({"role": "user", "content": items})
    elif isinstance(items, list):
        _items(out, [obj(i) for i in items])
    else:
        raise Unrecordable("a responses request without input")
    tools = [t for t in (_tool(obj(t)) for t in req.get("tools") or []) if t is not None]
    previous = req.get("previous_response_id")
    msgs = typed_messages(out) if out or not previous else ()
    return Request(msgs, tuple(tools) if tools else None, _tool_choice(req.get("tool_choice")),
                   scope_of(req, "prompt_cache_key", "metadata.session_id", "metadata.conversation_id", "user"),
                   previous if isinstance(previous, str) and previous else None, text_of(req.get("model")) or "")


def _items(out: list[dict[str, Any]], items: list[dict[str, Any]]) -> None:
    turn: dict[str, Any] | None = None  # the assistant message the calls and reasoning in a row make
    for item in items:
        kind = item.get("type", "message")
        if kind in CALLS or kind == "reasoning":
            if turn is None:
                turn = {"role": "assistant", "content": None}
                out.append(turn)
            if kind == "reasoning":
                turn["reasoning_content"] = (turn.get("reasoning_content") or "") + _summary(item)
            else:
                turn.setdefault("tool_calls", []).append(_call(item))
            continue
        turn = None
        if kind in OUTPUTS:
            output = item.get("output")
            out.append({"role": "tool", "tool_call_id": str(item.get("call_id", "")),
                        "content": output if isinstance(output, str) else _parts(output)})
        elif kind == "message":
            role = item.get("role")
            content = item.get("content")
            out.append({"role": role, "content": content if isinstance(content, str) else _parts(content)})
    for m in out:
        if m["role"] == "assistant" and m.get("content") is None and not m.get("tool_calls"):
            m["content"] = ""  # reasoning alone


def _summary(item: dict[str, Any]) -> str:
    return "".join(str(obj(s).get("text", "")) for s in item.get("summary") or [])


def _call(item: dict[str, Any]) -> dict[str, Any]:
    args = item.get("arguments") if item.get("type") == "function_call" else item.get("input")
    return {"id": str(item.get("call_id", "")), "type": "function",
            "function": {"name": str(item.get("name", "")), "arguments": args if isinstance(args, str) else ""}}


def _parts(content: Any) -> str | list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for p in content if isinstance(content, list) else []:
        p = obj(p)
        if p.get("type") in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": str(p.get("text", ""))})
        elif p.get("type") == "input_image":
            parts.append({"type": "image_url", "image_url": {"url": str(p.get("image_url", ""))}})
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts or ""


def _tool(t: dict[str, Any]) -> dict[str, Any] | None:
    if t.get("type") == "function":
        fn = {k: t[k] for k in ("name", "description", "parameters", "strict") if k in t}
        return {"type": "function", "function": fn}
    if t.get("type") == "custom":
        return {"type": "function", "function": {
            "name": str(t.get("name", "")), "description": str(t.get("description", "")),
            "parameters": {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}}}
    return None


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, str):
        return choice
    c = obj(choice)
    if c.get("type") == "function":
        return {"type": "function", "function": {"name": str(c.get("name", ""))}}
    return None


def answer(data: bytes, content_type: str) -> Answer:
    if is_stream(content_type):
        done: dict[str, Any] | None = None
        for _, ev in events(data):
            kind = ev.get("type")
            if kind in ("error", "response.failed"):
                raise Unrecordable("the stream carried an error")
            if kind in ("response.completed", "response.incomplete"):
                done = obj(ev.get("response"))
        if done is None:
            raise Unrecordable("a stream that never completed its response")
        resp = done
    else:
        resp = json_object(data, "the answer")
    if resp.get("error"):
        raise Unrecordable("the answer is an error")
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in resp.get("output") or []:
        item = obj(item)
        if item.get("type") == "message":
            text.extend(str(obj(p).get("text", "")) for p in item.get("content") or []
                        if obj(p).get("type") == "output_text")
        elif item.get("type") == "reasoning":
            reasoning.append(_summary(item))
        elif item.get("type") in CALLS:
            calls.append(_call(item))
    usage = obj(resp.get("usage"))
    said = counts(usage.get("input_tokens"), usage.get("output_tokens"),
                  obj(usage.get("input_tokens_details")).get("cached_tokens"))
    return Answer(assistant("".join(text), "".join(reasoning), calls), said, text_of(resp.get("id")))
