"""An OpenAI chat message and its tool calls, as typed values: what a dataset's conversation holds
(``dataset.py``), what a recorded agent trajectory re-sends (``trajectories/``), and what both put on the wire.

``content``: text; or the content parts as the wire carries them (objects with a ``type``; text parts' ``text``
is what ``texts`` reads); or None for an assistant message that only calls tools. ``reasoning_content``: the
reasoning an assistant message carried, where recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Role = Literal["system", "developer", "user", "assistant", "tool"]
ROLES: tuple[Role, ...] = ("system", "developer", "user", "assistant", "tool")


@dataclass(frozen=True, slots=True)
class ToolCall:
    """An assistant message's call of a tool (``arguments``: JSON text as written)."""

    id: str
    name: str
    arguments: str

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    content: str | tuple[Any, ...] | None
    reasoning_content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None  # a tool message: the call it answers
    name: str | None = None

    def texts(self) -> list[str]:
        """The text this message puts in the prompt: its text and text parts, its tool calls' names and arguments."""
        if isinstance(self.content, str):
            out = [self.content]
        else:
            out = [p["text"] for p in self.content or () if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return out + [t for c in self.tool_calls for t in (c.name, c.arguments)]

    def to_wire(self, reasoning: bool = True) -> dict[str, Any]:
        """The message as /v1/chat/completions takes it (``reasoning``: send ``reasoning_content`` back too)."""
        out: dict[str, Any] = {"role": self.role,
                               "content": list(self.content) if isinstance(self.content, tuple) else self.content}
        if reasoning and self.reasoning_content is not None:
            out["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            out["tool_calls"] = [c.to_wire() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out
