"""The bytes the emitter streams, the same for its aiohttp server and its lean one: OpenAI chunks as SSE events
(a chat delta or a completions text choice, the usage, a burst of every token at once), and its tokenizer's count
of a prompt (one token per whitespace-separated word)."""

from __future__ import annotations

import functools
import json
from typing import Any

MODEL = "emitter"


def count_prompt(body: dict[str, Any]) -> int:
    if "prompt" in body:
        return len(str(body["prompt"]).split())
    return sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))


@functools.lru_cache(maxsize=64)
def burst(chat: bool, n_tokens: int, tokens_per_chunk: int) -> tuple[bytes, int]:
    """Every token chunk of a burst stream, written at once, and the tokens they carry: the same bytes for every
    stream of a length, so built once (the emitter's own CPU was the ceiling of the client's ingest benchmark)."""
    parts, sent = [], 0
    while sent < n_tokens:
        k = min(tokens_per_chunk, n_tokens - sent)
        parts.append(chunk(chat, text="".join(f" w{sent + i}" for i in range(k))))
        sent += k
    return b"".join(parts), sent


@functools.lru_cache(maxsize=8192)
def text_chunk(chat: bool, text: str) -> bytes:
    """A paced stream's token chunk: the same text at the same position of every stream, so built once."""
    return chunk(chat, text=text)


def chunk(chat: bool, text: str | None = None, reasoning: str | None = None, finish: str | None = None,
           role: bool = False) -> bytes:
    """One SSE event: a chat delta (role, content, reasoning) or a completions text choice."""
    if chat:
        delta: dict[str, Any] = {}
        if role:
            delta["role"] = "assistant"
            delta["content"] = ""
        if text is not None:
            delta["content"] = text
        if reasoning is not None:
            delta["reasoning_content"] = reasoning
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text or "", "finish_reason": finish}
    obj = {"id": "x", "object": "chat.completion.chunk" if chat else "text_completion",
           "model": MODEL, "choices": [choice]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def usage_chunk(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int) -> bytes:
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                             "total_tokens": prompt_tokens + completion_tokens}
    if reasoning_tokens:
        usage["completion_tokens_details"] = {"reasoning_tokens": min(reasoning_tokens, completion_tokens)}
    return b"data: " + json.dumps({"id": "x", "choices": [], "usage": usage}).encode() + b"\n\n"


def tool_chunk(call: dict[str, Any]) -> bytes:
    """A chat delta that carries a piece of a tool call (its id and name first, then its arguments)."""
    obj = {"id": "x", "object": "chat.completion.chunk", "model": MODEL,
           "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"
