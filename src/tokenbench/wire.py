"""The one boundary where a server's streamed bytes become typed values.

Every ``data:`` payload of an OpenAI-compatible stream goes through :func:`parse_chunk` (the events of Anthropic's
Messages and OpenAI's Responses APIs through ``wire_apis``, on the same types and rules), which returns a
:class:`Chunk` holding only values of the right type and range, or raises :class:`WireError` with a kind the client
counts (``malformed_event``: not JSON, not an object, a field of the wrong shape; ``invalid_usage``: a token count
or timing that is not a finite, non-negative number). Nothing past this module indexes raw server JSON, so a
hostile or broken server makes counted errors, never an exception in the client.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import msgspec

MAX_EVENT_BYTES = 8 << 20  # one event larger than 8 MiB is not a token chunk
MAX_COUNT = 2**53  # no token count or timing is larger; a 400-digit integer would overflow a float downstream


class WireError(ValueError):
    """An event the client cannot use. ``kind`` names it for the error record."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(slots=True, frozen=True)
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens: served from the prefix cache


@dataclass(slots=True)
class Chunk:
    """What one event says, typed. Absent fields are None. Not frozen: one is made per streamed chunk, and a frozen
    dataclass's ``__init__`` (``object.__setattr__`` per field) cost about a quarter of the decode (benchmarks/client_overhead.py).
    Nothing changes one once made.

    Whether a chunk carried a generated token is not whether its text is empty: an engine streams a token whose
    text it holds back (part of a multi-byte character) as a chunk with empty text. The chunk rule (docs/metrics.md),
    as ``vllm bench serve`` counts chunks: choice 0 with a delta (or a completion's text) is a token,
    visible or not, except a delta that only opens the message (``role``) and an empty closing one (only a
    ``finish_reason``). Where the server says how many tokens a chunk carried, that count decides instead:
    ``tokens`` here (logprobs entries, token ids), or a running ``usage``/``timings`` count (client.py)."""

    text: str | None = None  # answer content of choice 0
    reasoning: str | None = None  # reasoning content of choice 0
    finish_reason: str | None = None
    usage: Usage | None = None
    timings: dict[str, float] | None = None  # llama.cpp's "timings": numeric fields only
    error: str | None = None  # an error event's message
    choice: bool = False  # the event has choice 0: it may carry a token, and a running count on it is per chunk
    token: bool = False  # the chunk rule without counts says choice 0 carried a token (with text or held back)
    tokens: int | None = None  # tokens choice 0 says it carried (its logprobs entries or token ids); None: unsaid
    tool: bool = False  # the token chunk carried a tool call (its name or arguments)


def _object(value: Any, what: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise WireError("malformed_event", f"{what} is {type(value).__name__}, not an object")
    return value


def _text(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise WireError("malformed_event", f"{what} is {type(value).__name__}, not a string")


def count(value: Any, what: str) -> int | None:
    """A token count: a non-negative integer (a float with no fraction is accepted), or None when absent."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WireError("invalid_usage", f"{what} is {value!r}, not a count")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise WireError("invalid_usage", f"{what} is {value!r}, not a count")
    if value < 0:
        raise WireError("invalid_usage", f"{what} is {value!r}, a negative count")
    if value > MAX_COUNT:
        raise WireError("invalid_usage", f"{what} is larger than any count can be")
    return int(value)


def _usage(value: Any) -> Usage | None:
    obj = _object(value, "usage")
    if not obj:
        return None
    details = _object(obj.get("completion_tokens_details"), "usage.completion_tokens_details") or {}
    prompt_details = _object(obj.get("prompt_tokens_details"), "usage.prompt_tokens_details") or {}
    return Usage(count(obj.get("prompt_tokens"), "usage.prompt_tokens"),
                 count(obj.get("completion_tokens"), "usage.completion_tokens"),
                 count(details.get("reasoning_tokens"), "usage.completion_tokens_details.reasoning_tokens"),
                 count(prompt_details.get("cached_tokens"), "usage.prompt_tokens_details.cached_tokens"))


#: llama.cpp's timings keys, one string each for every record that keeps them (a JSON parse makes its keys anew:
#: nine of them took half a kilobyte of each turn a soak keeps until its level ends)
_TIMINGS_KEYS = {k: k for k in ("cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second",
                                 "predicted_n", "predicted_ms", "predicted_per_token_ms", "predicted_per_second",
                                 "draft_n", "draft_n_accepted")}


def _timings(value: Any) -> dict[str, float] | None:
    """llama.cpp's timings: its numbers, each finite and non-negative. Non-numeric fields are dropped."""
    obj = _object(value, "timings")
    if obj is None:
        return None
    out: dict[str, float] = {}
    for key, v in obj.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if v < 0 or v > MAX_COUNT or not math.isfinite(v):  # the bound first: a 400-digit int overflows isfinite
            raise WireError("invalid_usage", f"timings.{key} is out of range")
        out[_TIMINGS_KEYS.get(key) or str(key)] = v
    return out


def _error_text(err: Any) -> str:
    if isinstance(err, dict):
        msg = err.get("message")
        if isinstance(msg, str):
            return msg[:300]
        return json.dumps(err, default=str)[:300]
    return str(err)[:300]


def _reject_constant(name: str) -> Any:
    raise WireError("invalid_usage", f"{name} is not a number JSON allows")


def loads(data: str | bytes, what: str = "event", max_bytes: int | None = MAX_EVENT_BYTES) -> Any:
    """JSON, strictly: NaN and Infinity are refused, and so is nesting too deep to parse (and, for what a server
    streams, a document over ``max_bytes``)."""
    if max_bytes is not None and len(data) > max_bytes:
        raise WireError("malformed_event", f"{what} is {len(data):,} bytes")
    try:
        return json.loads(data, parse_constant=_reject_constant)
    except RecursionError:
        raise WireError("malformed_event", f"{what} is nested too deep") from None
    except ValueError as e:
        if isinstance(e, WireError):
            raise
        raise WireError("malformed_event", f"{what} is not valid JSON") from None


def parse_chunk(data: str, chat: bool) -> Chunk:
    """One streamed event's ``data`` (not ``[DONE]``) as a :class:`Chunk`, or :class:`WireError`."""
    obj = loads(data)
    if not isinstance(obj, dict):
        raise WireError("malformed_event", f"event is {type(obj).__name__}, not an object")
    usage = _usage(obj.get("usage"))
    timings = _timings(obj.get("timings"))
    choices = obj.get("choices")
    if choices is not None and not isinstance(choices, list):
        raise WireError("malformed_event", f"choices is {type(choices).__name__}, not a list")
    if obj.get("error") is not None and not choices:
        return Chunk(usage=usage, timings=timings, error=_error_text(obj["error"]))
    for choice in choices or ():
        choice = _object(choice, "a choice")
        if choice is None or choice.get("index", 0) not in (0, None):
            continue
        return _choice_chunk(choice, chat, usage, timings)
    return Chunk(None, None, None, usage, timings)


def _held(text: str | None, thought: str | None, named: Any, finish: str | None, role: Any) -> bool:
    """A part with a text field that is present and empty, neither the message's opening (a role) nor its
    closing (a finish_reason): a token whose text the server holds back."""
    return (text == "" or thought == "" or named == "") and not finish and role is None


def _choice_chunk(choice: dict[str, Any], chat: bool, usage: Usage | None,
                  timings: dict[str, float] | None) -> Chunk:
    part = (_object(choice.get("delta"), "delta") or {}) if chat else choice
    text = _text(part.get("content") if chat else part.get("text"), "the token text")
    thought = _text(part.get("reasoning_content"), "reasoning_content")
    reasoning = thought or _text(part.get("reasoning"), "reasoning")
    finish = _text(choice.get("finish_reason"), "finish_reason")
    calls = part.get("tool_calls") if chat else None
    held = _held(text, thought, part.get("reasoning"), finish, part.get("role") if chat else None)
    tool = bool(isinstance(calls, list) and calls)
    token = bool(text or reasoning or held or tool)
    return Chunk(text or None, reasoning or None, finish or None, usage, timings, choice=True, token=token,
                 tokens=_tokens_said(choice, chat), tool=tool)


def _tokens_said(choice: dict[str, Any], chat: bool) -> int | None:
    """Tokens a choice says it carried: its logprobs entries (chat: ``logprobs.content``; completions:
    ``logprobs.tokens``), else its ``token_ids`` (vLLM's return_token_ids). None where it says nothing."""
    logprobs = choice.get("logprobs")
    entries = logprobs.get("content" if chat else "tokens") if isinstance(logprobs, dict) else None
    if isinstance(entries, list):
        return len(entries)
    ids = choice.get("token_ids")
    return len(ids) if isinstance(ids, list) else None


# The fast path for the one event shape servers send thousands of times per second: a single choice with text
# or a delta, and at most a plain running usage count (vLLM's continuous_usage_stats). msgspec checks the types in
# C (about 1 µs an event against 5 µs for json.loads and the checks above). Anything else (usage with details,
# timings, an error, logprobs, token ids, tool calls, several choices, a wrong type, invalid UTF-8, NaN, deep
# nesting) takes parse_chunk, so the two paths cannot disagree: the fast one only ever returns what parse_chunk
# would for the events it accepts.
class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    role: str | None = None
    tool_calls: Any = None


class _Choice(msgspec.Struct):
    index: int | None = 0
    text: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    delta: _Delta | None = None
    finish_reason: str | None = None
    logprobs: Any = None
    token_ids: Any = None


class _Usage(msgspec.Struct, forbid_unknown_fields=True):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    completion_tokens_details: None = None
    prompt_tokens_details: None = None


class _Event(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    timings: Any = None
    error: Any = None


_decode_event = msgspec.json.Decoder(_Event).decode
_FAST_FAILS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError)


def _fast_usage(u: _Usage) -> Usage | None:
    """A plain running count as parse_chunk reads it, or None where parse_chunk must look (no count, out of range)."""
    p, c = u.prompt_tokens, u.completion_tokens
    if c is None or not 0 <= c <= MAX_COUNT or p is not None and not 0 <= p <= MAX_COUNT:
        return None
    return Usage(p, c)


def _fast_choice(choice: _Choice, chat: bool, usage: Usage | None) -> Chunk | None:
    """The chunk of a lone choice 0 as :func:`parse_chunk` reads it, or None where parse_chunk must look."""
    if choice.logprobs is not None or choice.token_ids is not None:
        return None
    finish = choice.finish_reason
    if not chat:
        text, thought, named, role = choice.text, choice.reasoning_content, choice.reasoning, None
    elif choice.delta is None:
        return Chunk(None, None, finish or None, usage, choice=True)
    elif choice.delta.tool_calls is not None:
        return None
    else:
        d = choice.delta
        text, thought, named, role = d.content, d.reasoning_content, d.reasoning, d.role
    reasoning = thought or named
    return Chunk(text or None, reasoning or None, finish or None, usage, choice=True,
                 token=bool(text or reasoning or _held(text, thought, named, finish, role)))


def parse_event(data: bytes | str, chat: bool) -> Chunk:
    """:func:`parse_chunk` for an event's raw ``data`` bytes, through the fast path when the event is the common
    token chunk. Same result, same errors."""
    if len(data) <= MAX_EVENT_BYTES:
        try:
            ev = _decode_event(data)
        except _FAST_FAILS:
            ev = None
        usage = None if ev is None or ev.usage is None else _fast_usage(ev.usage)
        if ev is not None and (ev.usage is None or usage is not None) and ev.timings is None and ev.error is None:
            choices = ev.choices
            if not choices or len(choices) == 1 and choices[0].index not in (0, None):
                return Chunk(usage=usage) if usage is not None else _EMPTY
            if len(choices) == 1 and (c := _fast_choice(choices[0], chat, usage)) is not None:
                return c
    if isinstance(data, bytes):
        data = data.decode("utf-8", errors="replace")
    return parse_chunk(data, chat)


_EMPTY = Chunk()
