"""OpenAI chat messages and tool calls from raw JSON into ``Message`` and ``ToolCall``, for the formats that record
request bodies (a session log's, an MLCommons row's tool calls), refused field by field: an unknown role, a tool
call without an id, a tool message that names no call. ``MessageCache`` shares the ``Message`` objects of a
session's history between its calls: a message that equals the one at its place in the call before (or that call's
answer) is that same object.
"""

from __future__ import annotations

from typing import Any

from .boundary import Refusal, as_list, as_obj, as_optional_text, as_text
from ..chat import ROLES, Message, ToolCall


def tool_call(value: Any, name: str) -> ToolCall:
    c = as_obj(value, name)
    if not c.get("id"):
        raise Refusal(f"{name}.id", "missing (every tool call has an id its result names)")
    if c.get("type", "function") != "function":
        raise Refusal(f"{name}.type", f"{c['type']!r} is not function")
    fn = as_obj(c.get("function"), f"{name}.function")
    return ToolCall(as_text(c["id"], f"{name}.id"), as_text(fn.get("name"), f"{name}.function.name", allow_empty=False),
                    as_text(fn.get("arguments"), f"{name}.function.arguments"))


def message(value: Any, name: str) -> Message:
    m = as_obj(value, name)
    role = m.get("role")
    if role not in ROLES:
        raise Refusal(f"{name}.role", f"{role!r} is not {', '.join(ROLES[:-1])} or {ROLES[-1]}")
    content = m.get("content")
    if isinstance(content, list):
        parts = tuple(as_obj(p, f"{name}.content[{i}]") for i, p in enumerate(content))
        body: str | tuple[Any, ...] | None = parts
    else:
        body = None if content is None else as_text(content, f"{name}.content")
    calls = tuple(tool_call(c, f"{name}.tool_calls[{i}]") for i, c in enumerate(
        as_list(m["tool_calls"], f"{name}.tool_calls", allow_empty=True) if m.get("tool_calls") is not None else ()))
    if calls and role != "assistant":
        raise Refusal(f"{name}.tool_calls", f"on a {role} message (only an assistant calls tools)")
    if body is None and not (role == "assistant" and calls):
        raise Refusal(f"{name}.content", "missing (only an assistant message that calls tools has none)")
    call_id = m.get("tool_call_id")
    if role == "tool":
        call_id = as_text(call_id, f"{name}.tool_call_id", allow_empty=False) if call_id is not None else None
        if call_id is None:
            raise Refusal(f"{name}.tool_call_id", "missing (a tool message names the call it answers)")
    return Message(role, body, as_optional_text(m.get("reasoning_content"), f"{name}.reasoning_content"), calls,
                   call_id if role == "tool" else None, as_optional_text(m.get("name"), f"{name}.name"))


class MessageCache:
    """One session's last request's raw messages and typed ones (and its answer), to share what the next re-sends."""

    __slots__ = ("raw", "typed")

    def __init__(self) -> None:
        self.raw: list[Any] = []
        self.typed: list[Message] = []

    def messages(self, value: Any, name: str) -> tuple[Message, ...]:
        raws = as_list(value, name)
        out = []
        for i, m in enumerate(raws):
            if i < len(self.raw) and self.raw[i] == m:
                out.append(self.typed[i])
            else:
                out.append(message(m, f"{name}[{i}]"))
        self.raw, self.typed = list(raws), list(out)
        return tuple(out)

    def answered(self, raw: Any, answer: Message) -> None:
        """The answer the next request will re-send after this one's messages."""
        self.raw.append(raw)
        self.typed.append(answer)
