"""What the emitter streams on each API, one stream at a time (``frames_for``): OpenAI chunks on
``/v1/completions`` and ``/v1/chat/completions`` (``emitter_chunks``), Anthropic's events on ``/v1/messages`` and
OpenAI Responses' events on ``/v1/responses``, shaped as vLLM 0.32 streams them (``event:`` and ``data:`` lines,
compact JSON): the message's or response's opening, a content block (or output item) per kind of text or tool call,
each token a delta, the closing with its stop reason and usage, and an error event for the ``error_event`` fault."""

from __future__ import annotations

import functools
import json
from typing import Any, Protocol

from .emitter_chunks import MODEL, burst, chunk, count_prompt, text_chunk, tool_chunk, usage_chunk


class Frames(Protocol):
    """One stream's bytes on one API."""

    #: it can stream a tool call (every API but completions)
    tools: bool

    def open(self) -> bytes:
        """What the stream starts with, before the first token (b"": nothing)."""
        ...

    def token(self, text: str, reasoning: bool) -> bytes:
        """One token chunk: answer text, or reasoning."""
        ...

    def burst(self, n_tokens: int, tokens_per_chunk: int) -> tuple[bytes, int]:
        """Every answer chunk of a stream of ``n_tokens`` at once, and the tokens they carry."""
        ...

    def tool_start(self, call_id: str, name: str) -> bytes:
        """A tool call's opening: its id and name."""
        ...

    def tool_args(self, piece: str) -> bytes:
        """A piece of the open tool call's arguments."""
        ...

    def close(self, finish: str, prompt_tokens: int, completion_tokens: int, reasoning_tokens: int,
              usage: bool) -> list[bytes]:
        """The stream's last writes: its finish (chat's word: ``length``, ``stop`` or ``tool_calls``), the usage
        when ``usage``."""
        ...

    def error(self, message: str) -> bytes:
        """An error event in the middle of the stream."""
        ...


class OpenAIFrames:
    """``/v1/completions`` and ``/v1/chat/completions``: the emitter's chunks as they always were."""

    def __init__(self, chat: bool, role_first: bool) -> None:
        self.chat, self.role_first = chat, role_first
        self.tools = chat

    def open(self) -> bytes:
        return chunk(True, role=True) if self.chat and self.role_first else b""

    def token(self, text: str, reasoning: bool) -> bytes:
        return chunk(self.chat, reasoning=text) if reasoning else text_chunk(self.chat, text)

    def burst(self, n_tokens: int, tokens_per_chunk: int) -> tuple[bytes, int]:
        return burst(self.chat, n_tokens, tokens_per_chunk)

    def tool_start(self, call_id: str, name: str) -> bytes:
        return tool_chunk({"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}})

    def tool_args(self, piece: str) -> bytes:
        return tool_chunk({"index": 0, "function": {"arguments": piece}})

    def close(self, finish: str, prompt_tokens: int, completion_tokens: int, reasoning_tokens: int,
              usage: bool) -> list[bytes]:
        out = [chunk(self.chat, finish=finish)]
        if usage:
            out.append(usage_chunk(prompt_tokens, completion_tokens, reasoning_tokens))
        return [*out, b"data: [DONE]\n\n"]

    def error(self, message: str) -> bytes:
        return b"data: " + json.dumps({"error": {"message": message}}).encode() + b"\n\n"


def event(name: str, data: dict[str, Any]) -> bytes:
    """One named SSE event, its data as compact JSON (as vLLM writes it)."""
    return b"event: %s\ndata: %s\n\n" % (name.encode(), json.dumps(data, separators=(",", ":")).encode())


@functools.lru_cache(maxsize=8192)
def _anthropic_delta(index: int, kind: str, text: str) -> bytes:
    field = "thinking" if kind == "thinking" else "text"
    return event("content_block_delta", {"type": "content_block_delta", "index": index,
                                         "delta": {"type": f"{field}_delta", field: text}})


class MessagesFrames:
    """``/v1/messages``: ``message_start`` (the prompt's count), a ``thinking`` then a ``text`` content block of
    deltas, ``message_delta`` (stop reason, counts), ``message_stop``."""

    tools = True

    def __init__(self, prompt_tokens: int, usage: bool) -> None:
        self.prompt_tokens, self.usage = prompt_tokens, usage
        self.block: str | None = None  # the open block's kind
        self.index = -1

    def open(self) -> bytes:
        message: dict[str, Any] = {"id": "msg_emitter", "type": "message", "role": "assistant", "content": [],
                                   "model": MODEL, "stop_reason": None, "stop_sequence": None}
        if self.usage:
            message["usage"] = {"input_tokens": self.prompt_tokens, "output_tokens": 0}
        return event("message_start", {"type": "message_start", "message": message})

    def _switch(self, kind: str, block: dict[str, Any] | None = None) -> bytes:
        if self.block == kind and block is None:
            return b""
        out = self._stop()
        self.block, self.index = kind, self.index + 1
        return out + event("content_block_start", {"type": "content_block_start", "index": self.index,
                                                   "content_block": block or {"type": kind, kind: ""}})

    def _stop(self) -> bytes:
        if self.block is None:
            return b""
        out = b""
        if self.block == "thinking":
            out = event("content_block_delta", {"type": "content_block_delta", "index": self.index,
                                                "delta": {"type": "signature_delta", "signature": "emitter"}})
        self.block = None
        return out + event("content_block_stop", {"type": "content_block_stop", "index": self.index})

    def token(self, text: str, reasoning: bool) -> bytes:
        kind = "thinking" if reasoning else "text"
        return self._switch(kind) + _anthropic_delta(self.index, kind, text)

    def burst(self, n_tokens: int, tokens_per_chunk: int) -> tuple[bytes, int]:
        parts, sent = [self._switch("text")], 0
        while sent < n_tokens:
            k = min(tokens_per_chunk, n_tokens - sent)
            parts.append(_anthropic_delta(self.index, "text", "".join(f" w{sent + i}" for i in range(k))))
            sent += k
        return b"".join(parts), sent

    def tool_start(self, call_id: str, name: str) -> bytes:
        return self._switch("tool_use", {"type": "tool_use", "id": call_id, "name": name, "input": {}})

    def tool_args(self, piece: str) -> bytes:
        return event("content_block_delta", {"type": "content_block_delta", "index": self.index,
                                             "delta": {"type": "input_json_delta", "partial_json": piece}})

    def close(self, finish: str, prompt_tokens: int, completion_tokens: int, reasoning_tokens: int,
              usage: bool) -> list[bytes]:
        stop = {"length": "max_tokens", "tool_calls": "tool_use"}.get(finish, "end_turn")
        delta: dict[str, Any] = {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}}
        if usage:
            delta["usage"] = {"input_tokens": prompt_tokens, "output_tokens": completion_tokens}
        return [self._stop() + event("message_delta", delta), event("message_stop", {"type": "message_stop"})]

    def error(self, message: str) -> bytes:
        return event("error", {"type": "error", "error": {"type": "overloaded_error", "message": message}})


class ResponsesFrames:
    """``/v1/responses``: ``response.created`` and ``response.in_progress``, a reasoning item then a message item of
    deltas (each item opened and closed with its own events), ``response.completed`` with the usage (status
    ``incomplete``, reason ``max_output_tokens``, where the output reached its limit)."""

    tools = True

    def __init__(self) -> None:
        self.seq = 0
        self.item: str | None = None  # the open item's kind: "reasoning", "message" or "function_call"
        self.texts: list[str] = []
        self.call: dict[str, Any] = {}  # the open function call's item
        self.output: list[dict[str, Any]] = []

    def _event(self, name: str, data: dict[str, Any]) -> bytes:
        out = event(name, {"type": name, **data, "sequence_number": self.seq})
        self.seq += 1
        return out

    def _response(self, status: str, **more: Any) -> dict[str, Any]:
        return {"id": "resp_emitter", "object": "response", "created_at": 0, "model": MODEL, "status": status,
                "output": list(self.output), **more}

    def open(self) -> bytes:
        created = self._response("in_progress", usage=None)
        return (self._event("response.created", {"response": created})
                + self._event("response.in_progress", {"response": created}))

    def _item_id(self) -> str:
        return f"{ {'reasoning': 'rs', 'function_call': 'fc'}.get(self.item or '', 'msg')}_{len(self.output)}"

    def _switch(self, kind: str) -> bytes:
        if self.item == kind:
            return b""
        out = self._done()
        self.item, self.texts = kind, []
        where = {"output_index": len(self.output)}
        if kind == "reasoning":
            return out + self._event("response.output_item.added", {**where, "item": {
                "id": self._item_id(), "type": "reasoning", "summary": [], "content": [], "status": "in_progress"}})
        return (out + self._event("response.output_item.added", {**where, "item": {
                    "id": self._item_id(), "type": "message", "role": "assistant", "status": "in_progress",
                    "content": []}})
                + self._event("response.content_part.added", {**where, "item_id": self._item_id(), "content_index": 0,
                                                              "part": {"type": "output_text", "text": "",
                                                                       "annotations": []}}))

    def _done(self) -> bytes:
        if self.item is None:
            return b""
        text, where = "".join(self.texts), {"output_index": len(self.output), "item_id": self._item_id()}
        if self.item == "function_call":
            item = {**self.call, "arguments": text, "status": "completed"}
            out = self._event("response.function_call_arguments.done", {**where, "arguments": text})
        elif self.item == "reasoning":
            item = {"id": self._item_id(), "type": "reasoning", "summary": [], "status": "completed",
                    "content": [{"type": "reasoning_text", "text": text}]}
            out = self._event("response.reasoning_text.done", {**where, "content_index": 0, "text": text})
        else:
            part = {"type": "output_text", "text": text, "annotations": []}
            item = {"id": self._item_id(), "type": "message", "role": "assistant", "status": "completed",
                    "content": [part]}
            out = (self._event("response.output_text.done", {**where, "content_index": 0, "text": text})
                   + self._event("response.content_part.done", {**where, "content_index": 0, "part": part}))
        out += self._event("response.output_item.done", {"output_index": len(self.output), "item": item})
        self.output.append(item)
        self.item = None
        return out

    def token(self, text: str, reasoning: bool) -> bytes:
        kind = "reasoning" if reasoning else "message"
        out = self._switch(kind)
        self.texts.append(text)
        where = {"item_id": self._item_id(), "output_index": len(self.output), "content_index": 0, "delta": text}
        if reasoning:
            return out + self._event("response.reasoning_text.delta", where)
        return out + self._event("response.output_text.delta", {**where, "logprobs": []})

    def burst(self, n_tokens: int, tokens_per_chunk: int) -> tuple[bytes, int]:
        parts, sent = [], 0
        while sent < n_tokens:
            k = min(tokens_per_chunk, n_tokens - sent)
            parts.append(self.token("".join(f" w{sent + i}" for i in range(k)), False))
            sent += k
        return b"".join(parts), sent

    def tool_start(self, call_id: str, name: str) -> bytes:
        out = self._done()
        self.item, self.texts = "function_call", []
        self.call = {"id": self._item_id(), "type": "function_call", "call_id": call_id, "name": name,
                     "arguments": "", "status": "in_progress"}
        return out + self._event("response.output_item.added", {"output_index": len(self.output), "item": self.call})

    def tool_args(self, piece: str) -> bytes:
        self.texts.append(piece)
        return self._event("response.function_call_arguments.delta", {"item_id": self._item_id(),
                                                                      "output_index": len(self.output), "delta": piece})

    def close(self, finish: str, prompt_tokens: int, completion_tokens: int, reasoning_tokens: int,
              usage: bool) -> list[bytes]:
        out = self._done()
        length = finish == "length"
        counts = {"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": completion_tokens,
                  "output_tokens_details": {"reasoning_tokens": min(reasoning_tokens, completion_tokens)},
                  "total_tokens": prompt_tokens + completion_tokens} if usage else None
        response = self._response("incomplete" if length else "completed", usage=counts,
                                  incomplete_details={"reason": "max_output_tokens"} if length else None)
        return [out + self._event("response.completed", {"response": response})]

    def error(self, message: str) -> bytes:
        return self._event("error", {"code": "server_error", "message": message, "param": None})


def api_of(path: str) -> str:
    """The API a request's path is on."""
    for api, end in (("chat", "/chat/completions"), ("messages", "/messages"), ("responses", "/responses")):
        if path.endswith(end):
            return api
    return "completions"


def frames_for(api: str, role_first: bool, prompt_tokens: int, usage: bool) -> Frames:
    if api == "messages":
        return MessagesFrames(prompt_tokens, usage)
    if api == "responses":
        return ResponsesFrames()
    return OpenAIFrames(api == "chat", role_first)


def _words(value: Any) -> int:
    """The emitter's tokens (whitespace-separated words) in every string of a request's turns."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_words(v) for v in value)
    if isinstance(value, dict):
        return sum(_words(v) for k, v in value.items() if k not in ("type", "role", "id", "tool_use_id", "call_id"))
    return 0


def prompt_tokens(body: dict[str, Any], api: str) -> int:
    """The prompt's tokens as the emitter counts them: one per word of its text (on the Messages and Responses APIs
    the system text and every turn's text, tool calls and results included)."""
    if api == "messages":
        return _words(body.get("system")) + _words(body.get("messages"))
    if api == "responses":
        return _words(body.get("instructions")) + _words(body.get("input"))
    return count_prompt(body)
