"""MLCommons Agentic Inference JSONL: full-text agent conversations, one row per message, as the MLPerf Inference
Endpoints benchmark reads them (mlcommons/endpoints, scripts/agentic_inference_dataset_schema.json; the loader
src/inference_endpoint/dataset_manager/agentic_inference_dataset.py; the edge agentic example of 20 SWE-bench
conversations, examples/11_Edge_Agentic_Example/agentic_coding_2.5h.jsonl).

    {"conversation_id": "c1", "turn": 1, "role": "user", "system": "...", "content": "...", "tools": [...]}
    {"conversation_id": "c1", "turn": 2, "role": "assistant", "reasoning_content": "...",
     "tool_calls": [{"id": "functions.bash:0", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}
    {"conversation_id": "c1", "turn": 3, "role": "tool", "delay_seconds": 0.37,
     "tool_results": [{"tool_call_id": "functions.bash:0", "content": "..."}]}

A conversation's rows are together in the file, its ``turn`` 1, 2, 3, ... with no gap (refused otherwise: the
schema's rule). Roles follow the schema's state machine: a user row first; user -> assistant; assistant -> tool or
user; tool -> assistant or user. A user or tool row is a call (what the client sends), an assistant row the
recorded answer to the call before it. Each call's messages are the ``system`` prompt (the first row's that has
one; later ones are ignored, as the MLCommons loader does), every earlier row's messages, then its own: a tool row
becomes one tool message per ``tool_results`` entry. ``reasoning_content`` stays on the assistant message it came
with (the benchmark asks servers to keep reasoning in the history). A call's ``tools`` are its row's, else the
conversation's first user row's (as the MLCommons loader propagates them). ``delay_seconds`` is the pause before a
client row (0 where absent). The file records no token counts and no times: ``Call.input_tokens``,
``output_tokens`` and ``start_s`` are None.

Checked beyond the schema: every tool call has a non-empty ``id``, and every tool result answers a tool call of the
assistant row before it (an OpenAI-compatible server may refuse one that does not). Other keys are ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .boundary import Refusal, as_list, as_obj, as_optional_text, as_seconds, as_text, json_lines, refuse
from .messages import tool_call
from ..chat import Message
from .model import JSON, Call, Trajectory

_NEXT = {None: ("user",), "user": ("assistant",), "assistant": ("tool", "user"), "tool": ("assistant", "user")}


@dataclass(slots=True)
class _Conversation:
    id: str
    line: int
    system: str | None = None
    tools: tuple[JSON, ...] | None = None  # the first user row's, for rows without their own
    history: list[Message] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    role: str | None = None
    turn: int = 0
    open_calls: frozenset[str] = frozenset()  # ids of the tool calls the last assistant row made


class _Tools:
    """Tool schemas interned by their JSON text, so calls that carry the same schemas share one tuple."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[JSON, ...]] = {}

    def get(self, value: Any) -> tuple[JSON, ...]:
        schemas = as_list(value, "tools", allow_empty=True)
        for i, s in enumerate(schemas):
            as_obj(s, f"tools[{i}]")
        key = json.dumps(schemas, sort_keys=True)
        return self._seen.setdefault(key, tuple(schemas))


def load_mlcommons(path: Path, text: str) -> tuple[Trajectory, ...]:
    done: dict[str, _Conversation] = {}
    conv: _Conversation | None = None
    tools = _Tools()
    for line, row in json_lines(path, text):
        try:
            cid = as_text(row.get("conversation_id"), "conversation_id", allow_empty=False)
            if conv is None or cid != conv.id:
                if cid in done:
                    raise Refusal("conversation_id", f"{cid!r} again after other conversations (a conversation's "
                                                     f"rows are together, from line {done[cid].line})")
                conv = _Conversation(cid, line)
                done[cid] = conv
            _row(conv, row, line, tools)
        except Refusal as r:
            raise refuse(path, r.at(line)) from None
    out = []
    for c in done.values():
        if not c.calls:  # unreachable: a conversation starts with a user row
            continue
        out.append(Trajectory(c.id, "mlcommons", path, f"line {c.line}", tuple(c.calls)))
    return tuple(out)


def _row(conv: _Conversation, row: dict[str, Any], line: int, tools: _Tools) -> None:
    turn = row.get("turn")
    if isinstance(turn, bool) or not isinstance(turn, int):
        raise Refusal("turn", f"{turn!r} is not a whole number")
    if turn != conv.turn + 1:
        raise Refusal("turn", f"{turn} where turn {conv.turn + 1} comes next (turns run 1, 2, 3, ... in order)")
    role = row.get("role")
    if role not in ("user", "assistant", "tool"):
        raise Refusal("role", f"{role!r} is not user, assistant or tool")
    if role not in _NEXT[conv.role]:
        raise Refusal("role", f"{role} after {conv.role or 'the start'} (the order is user, assistant, then tool "
                              "or user)")
    conv.turn, conv.role = turn, role
    if conv.system is None and row.get("system") is not None:
        conv.system = as_text(row["system"], "system")
        conv.history.insert(0, Message("system", conv.system))
    if role == "assistant":
        answer = _assistant(row)
        conv.open_calls = frozenset(c.id for c in answer.tool_calls)
        conv.history.append(answer)
        if conv.calls and conv.calls[-1].answer is None:
            conv.calls[-1] = replace(conv.calls[-1], answer=answer)
        return
    own = tools.get(row["tools"]) if row.get("tools") is not None else None
    if role == "user":
        msgs = [Message("user", as_text(row.get("content"), "content"))]
        if conv.tools is None and own is not None:
            conv.tools = own
    else:
        msgs = _tool_results(row.get("tool_results"), conv.open_calls)
    conv.history += msgs
    pause = as_seconds(row["delay_seconds"], "delay_seconds") if row.get("delay_seconds") is not None else 0.0
    conv.calls.append(Call(len(conv.calls), f"line {line}", None, None, pause,
                           "start" if not conv.calls else "answer", messages=tuple(conv.history),
                           tools=own if own is not None else conv.tools))


def _assistant(row: dict[str, Any]) -> Message:
    content = row.get("content")
    content = None if content is None else as_text(content, "content")
    calls = tuple(tool_call(c, f"tool_calls[{i}]") for i, c in enumerate(
        as_list(row["tool_calls"], "tool_calls", allow_empty=True) if row.get("tool_calls") is not None else ()))
    if content is None and not calls:
        raise Refusal("content", "missing, and no tool_calls (an assistant row says or calls something)")
    return Message("assistant", content, as_optional_text(row.get("reasoning_content"), "reasoning_content"), calls)


def _tool_results(value: Any, open_calls: frozenset[str]) -> list[Message]:
    out = []
    for i, r in enumerate(as_list(value, "tool_results")):
        name = f"tool_results[{i}]"
        res = as_obj(r, name)
        cid = as_text(res.get("tool_call_id"), f"{name}.tool_call_id", allow_empty=False)
        if cid not in open_calls:
            raise Refusal(f"{name}.tool_call_id", f"{cid!r} answers no tool call of the assistant row before it")
        out.append(Message("tool", as_text(res.get("content"), f"{name}.content"), tool_call_id=cid))
    return out
