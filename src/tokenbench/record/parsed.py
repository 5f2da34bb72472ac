"""The typed values a recorded request and its answer become, whatever API carried them, and what the three API
modules (``chat``, ``anthropic``, ``responses``) share to get there: the answer's bytes as JSON or as
Server-Sent Events, token counts checked as counts, and the loader's own check of each chat message
(``trajectories.messages.message``), so that what the writer writes is what ``load_trajectories`` reads.

Every API becomes OpenAI chat's shape here (the session log's): ``Request.messages`` and ``Answer.message`` are
``Message`` values, tools OpenAI function tools."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..sse import SSEParser
from ..trajectories.boundary import Refusal
from ..trajectories.messages import message
from ..chat import Message
from ..trajectories.model import JSON
from ..wire import WireError, count, loads

#: The most bytes of one answer kept for the log (a bigger one is forwarded whole, and not recorded).
MAX_ANSWER_BYTES = 256 << 20


class Unrecordable(Exception):
    """A request or answer the log cannot hold; the message says why, in a few words (counted in the summary)."""


@dataclass(frozen=True, slots=True)
class Counts:
    """The server's token counts of one request, each None where it said nothing."""

    prompt: int | None = None
    completion: int | None = None
    cached: int | None = None


@dataclass(frozen=True, slots=True)
class Request:
    """A request in chat's shape. ``scope``: an id the body names its user or conversation by (OpenAI ``user``,
    ``metadata``, ``prompt_cache_key``; Anthropic ``metadata.user_id``); ``previous``: the Responses API's
    ``previous_response_id``, whose conversation this request's ``messages`` continue."""

    messages: tuple[Message, ...]
    tools: tuple[JSON, ...] | None = None
    tool_choice: JSON = None
    scope: str | None = None
    previous: str | None = None
    model: str = ""  # the model asked for: not logged, but a tokenizer endpoint may need it


@dataclass(frozen=True, slots=True)
class Answer:
    message: Message
    counts: Counts
    response_id: str | None = None  # the Responses API's id of this answer


def body_text(chunks: list[bytes], encoding: str) -> bytes:
    """The answer's bytes, decompressed where the upstream compressed them (the client got them as sent)."""
    raw = b"".join(chunks)
    enc = encoding.strip().lower()
    try:
        if enc in ("", "identity"):
            return raw
        if enc in ("gzip", "x-gzip"):
            return gzip.decompress(raw)
        if enc == "deflate":
            try:
                return zlib.decompress(raw)
            except zlib.error:
                return zlib.decompress(raw, -zlib.MAX_WBITS)
    except (OSError, EOFError, zlib.error):
        raise Unrecordable(f"an answer that is not {enc} as its Content-Encoding says") from None
    raise Unrecordable(f"an answer in {enc} encoding")


def json_object(data: bytes | str, what: str) -> dict[str, Any]:
    try:
        obj = loads(data, what, max_bytes=None)
    except WireError as e:
        raise Unrecordable(str(e)) from None
    if not isinstance(obj, dict):
        raise Unrecordable(f"{what} is not a JSON object")
    return obj


def events(data: bytes) -> Iterator[tuple[str, dict[str, Any]]]:
    """A Server-Sent Events answer's (event name, JSON object) pairs; ``[DONE]`` and comments skipped."""
    parser = SSEParser()
    for ev in [*parser.feed(data), *parser.feed(b"\n\n")]:
        if ev.data.strip() == "[DONE]":
            continue
        yield ev.event, json_object(ev.data, "an event of the answer")


def is_stream(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "text/event-stream"


#: The events after which a stream's client has its whole answer, by API (chat's is the ``[DONE]`` line).
LAST_EVENTS = {"messages": ("message_stop",), "responses": ("response.completed", "response.incomplete")}


def stream_ended(api: str, content_type: str, encoding: str, chunks: list[bytes]) -> bool:
    """Whether a streamed answer's body so far ends with its API's last event, a whole one: what a client reads as
    its answer's end, and may close its connection at, before the body's own end (the chunked framing's last
    chunk) reaches the proxy."""
    if not is_stream(content_type):
        return False
    try:
        data = body_text(chunks, encoding)
    except Unrecordable:
        return False
    last = None
    for last in SSEParser().feed(data):  # whole events only: one still being sent is no end
        pass
    if last is None:
        return False
    if api == "chat":
        return last.data.strip() == "[DONE]"
    try:
        return json_object(last.data, "an event").get("type") in LAST_EVENTS.get(api, ())
    except Unrecordable:
        return False


def counts(prompt: Any, completion: Any, cached: Any) -> Counts:
    """Counts as the log takes them: a prompt of at least one token, cached tokens no more than the prompt's;
    anything else the server said is not a count and is left out (None)."""
    def one(v: Any, what: str) -> int | None:
        try:
            return count(v, what)
        except WireError:
            return None

    p, c, k = one(prompt, "prompt"), one(completion, "completion"), one(cached, "cached")
    if p is not None and p < 1:
        p = None
    if k is not None and (p is None or k > p):
        k = None
    return Counts(p, c, k)


def obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def text_of(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def typed(raw: dict[str, Any], where: str) -> Message:
    """One chat message through the loader's own check."""
    try:
        return message(raw, where)
    except Refusal as r:
        raise Unrecordable(f"{r.field}: {r.why}") from None


def typed_messages(raws: list[dict[str, Any]]) -> tuple[Message, ...]:
    if not raws:
        raise Unrecordable("a request with no messages")
    return tuple(typed(m, f"messages[{i}]") for i, m in enumerate(raws))


def assistant(content: str | None, reasoning: str | None, calls: list[dict[str, Any]]) -> Message:
    """An answer as a chat assistant message: no text beside tool calls is null, as OpenAI writes it."""
    raw: dict[str, Any] = {"role": "assistant", "content": content if content or not calls else None}
    if reasoning:
        raw["reasoning_content"] = reasoning
    if calls:
        raw["tool_calls"] = calls
    return typed(raw, "the answer")


def scope_of(body: dict[str, Any], *keys: str) -> str | None:
    """The first of ``keys`` (``user``, ``metadata.user_id``) the body holds as non-empty text."""
    for key in keys:
        v: Any = body
        for part in key.split("."):
            v = obj(v).get(part)
        if isinstance(v, str) and v:
            return f"{key}={v}"
    return None
