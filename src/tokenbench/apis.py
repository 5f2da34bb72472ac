"""The four APIs a request can be sent on, and the body each one sends.

- ``completions``: ``POST {base}/completions``, the prompt as ``prompt``.
- ``chat``: ``POST {base}/chat/completions``, OpenAI chat ``messages``.
- ``messages``: ``POST {base}/messages``, Anthropic's Messages API (Claude Code's): ``system`` at the top, the turns
  as content blocks, a tool call as a ``tool_use`` block and its result as a ``tool_result`` block in the next
  user turn, tools as ``{name, description, input_schema}``, the output limit as ``max_tokens``.
- ``responses``: ``POST {base}/responses``, OpenAI's Responses API (Codex CLI's): the leading system turns as
  ``instructions``, the turns as ``input`` items, a tool call as a ``function_call`` item and its result as a
  ``function_call_output`` item, tools as ``{type: function, name, parameters}``, the output limit as
  ``max_output_tokens``, and ``store: false`` (a benchmark keeps nothing on the server).

A request's turns are written once, in the OpenAI chat shape tokenbench builds (``dataset.Message.to_wire``:
system, user, assistant with ``tool_calls``, tool results); ``messages_body`` and ``responses_body`` convert them
faithfully. A plain prompt is one user turn on each. What each server accepts on each endpoint is in
docs/sweep.md.
"""

from __future__ import annotations

import json
from typing import Any, Literal

Api = Literal["completions", "chat", "messages", "responses"]
APIS: tuple[Api, ...] = ("completions", "chat", "messages", "responses")
#: Each API's path under the base URL (…/v1).
PATHS: dict[str, str] = {"completions": "completions", "chat": "chat/completions", "messages": "messages",
                         "responses": "responses"}
#: The APIs that send a conversation (turns), not a bare prompt: a dataset's chat items and agent sessions go on
#: any of them.
CONVERSATIONAL: frozenset[str] = frozenset({"chat", "messages", "responses"})
#: The Anthropic API version the ``messages`` requests say they speak (its ``anthropic-version`` header).
ANTHROPIC_VERSION = "2023-06-01"

_SYSTEM = ("system", "developer")


def _text(content: Any) -> str:
    """A turn's text: a string as it is, text parts joined (as the servers join them), nothing for None."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def _calls(turn: dict[str, Any]) -> list[tuple[str, str, str]]:
    """An assistant turn's tool calls as (id, name, arguments)."""
    out = []
    for c in turn.get("tool_calls") or ():
        fn = c.get("function") if isinstance(c, dict) else None
        if isinstance(fn, dict):
            args = fn.get("arguments", "")
            out.append((str(c.get("id", "")), str(fn.get("name", "")),
                        args if isinstance(args, str) else json.dumps(args)))
    return out


def _system_split(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """The leading system (or developer) turns' text, and the turns after them."""
    i = 0
    while i < len(messages) and messages[i].get("role") in _SYSTEM:
        i += 1
    head = [_text(m.get("content")) for m in messages[:i]]
    return ("\n\n".join(head) if head else None), messages[i:]


# ---- Anthropic Messages ---------------------------------------------------------------------------------------

def _tool_input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the object a ``tool_use`` block holds; arguments that are no JSON object are kept
    whole under ``arguments`` (their tokens stay in the prompt)."""
    try:
        parsed = json.loads(arguments) if arguments else {}
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"arguments": arguments}


def _anthropic_content(content: Any) -> str | list[dict[str, Any]]:
    if isinstance(content, list):
        return [{"type": "text", "text": str(p.get("text", ""))} for p in content if isinstance(p, dict)]
    return _text(content)


def to_anthropic(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """(system, turns) for the Messages API. Leading system turns become ``system``; a later one too (the API has
    no system turn; its text is added to ``system``). Consecutive tool results become one user turn of
    ``tool_result`` blocks, right after the assistant turn whose ``tool_use`` blocks they answer."""
    system, rest = _system_split(messages)
    later = [_text(m.get("content")) for m in rest if m.get("role") in _SYSTEM]
    if later:
        system = "\n\n".join([*([system] if system else []), *later])
    out: list[dict[str, Any]] = []
    for m in rest:
        role = m.get("role")
        if role in _SYSTEM:
            continue
        if role == "tool":
            block = {"type": "tool_result", "tool_use_id": str(m.get("tool_call_id") or ""),
                     "content": _text(m.get("content"))}
            last = out[-1] if out else None
            if last is not None and last["role"] == "user" and isinstance(last["content"], list) and \
                    last["content"] and last["content"][-1].get("type") == "tool_result":
                last["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif role == "assistant" and m.get("tool_calls"):
            text = _text(m.get("content"))
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            blocks += [{"type": "tool_use", "id": i, "name": n, "input": _tool_input(a)} for i, n, a in _calls(m)]
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": "assistant" if role == "assistant" else "user",
                        "content": _anthropic_content(m.get("content"))})
    return system, out


def _anthropic_tool(tool: Any) -> Any:
    fn = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
    if not isinstance(fn, dict):
        return tool  # already another API's shape: sent as it is
    out: dict[str, Any] = {"name": fn.get("name", "")}
    if fn.get("description") is not None:
        out["description"] = fn["description"]
    out["input_schema"] = fn.get("parameters") or {"type": "object", "properties": {}}
    return out


def _anthropic_tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none"):
        return {"type": choice}
    if choice == "required":
        return {"type": "any"}
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        return {"type": "tool", "name": choice["function"].get("name", "")}
    return choice


def messages_body(model: str, prompt: str, messages: list[dict[str, Any]] | None, max_tokens: int,
                  temperature: float | None, *extras: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic Messages request: the turns (or ``prompt`` as one user turn), streamed, at most
    ``max_tokens``; ``extras`` (the server's fields, the request's own) over it, their OpenAI chat ``tools`` and
    ``tool_choice`` converted."""
    system, turns = to_anthropic(messages) if messages is not None else (None, [{"role": "user", "content": prompt}])
    b: dict[str, Any] = {"model": model, "stream": True, "max_tokens": max_tokens}
    if system is not None:
        b["system"] = system
    b["messages"] = turns
    if temperature is not None:
        b["temperature"] = temperature
    for e in extras:
        b.update(e)
    if isinstance(b.get("tools"), list):
        b["tools"] = [_anthropic_tool(t) for t in b["tools"]]
    if "tool_choice" in b:
        b["tool_choice"] = _anthropic_tool_choice(b["tool_choice"])
    return b


# ---- OpenAI Responses -----------------------------------------------------------------------------------------

def to_responses(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """(instructions, input items) for the Responses API. Leading system turns become ``instructions``; later
    ones stay input messages of their role. An assistant turn is an output message (``type: message``) and one
    ``function_call`` item per tool call; a tool result is a ``function_call_output`` item."""
    instructions, rest = _system_split(messages)
    items: list[dict[str, Any]] = []
    for m in rest:
        role = m.get("role")
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": str(m.get("tool_call_id") or ""),
                          "output": _text(m.get("content"))})
        elif role == "assistant":
            text = _text(m.get("content"))
            if text or not m.get("tool_calls"):
                items.append({"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": text}]})
            items += [{"type": "function_call", "call_id": i, "name": n, "arguments": a} for i, n, a in _calls(m)]
        else:
            content = m.get("content")
            items.append({"role": role if role in _SYSTEM else "user", "content": (
                [{"type": "input_text", "text": str(p.get("text", ""))} for p in content if isinstance(p, dict)]
                if isinstance(content, list) else _text(content))})
    return instructions, items


def _responses_tool(tool: Any) -> Any:
    fn = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
    if not isinstance(fn, dict):
        return tool
    out: dict[str, Any] = {"type": "function", "name": fn.get("name", "")}
    if fn.get("description") is not None:
        out["description"] = fn["description"]
    out["parameters"] = fn.get("parameters") or {"type": "object", "properties": {}}
    if "strict" in fn:
        out["strict"] = fn["strict"]
    return out


def _responses_tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        return {"type": "function", "name": choice["function"].get("name", "")}
    return choice


def responses_body(model: str, prompt: str, messages: list[dict[str, Any]] | None, max_tokens: int,
                   temperature: float | None, *extras: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI Responses request: the turns as input items (or ``prompt`` as the text input, one user turn),
    streamed, at most ``max_tokens`` output tokens, not stored; ``extras`` over it, their OpenAI chat ``tools``
    and ``tool_choice`` converted."""
    instructions, items = to_responses(messages) if messages is not None else (None, None)
    b: dict[str, Any] = {"model": model, "stream": True, "max_output_tokens": max_tokens, "store": False}
    if instructions is not None:
        b["instructions"] = instructions
    b["input"] = items if items is not None else prompt
    if temperature is not None:
        b["temperature"] = temperature
    for e in extras:
        b.update(e)
    if isinstance(b.get("tools"), list):
        b["tools"] = [_responses_tool(t) for t in b["tools"]]
    if "tool_choice" in b:
        b["tool_choice"] = _responses_tool_choice(b["tool_choice"])
    return b
