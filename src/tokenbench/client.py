"""Streaming client for ``/v1/completions``, ``/v1/chat/completions``, Anthropic's ``/v1/messages`` and OpenAI's
``/v1/responses`` (``apis.py``: what each sends).

What a request is and how often it is sent: its body (a level's template with the prompt spliced in), the retry
of a send whose connection died unanswered, and the record's token counts. How it goes on the wire is a send
path's (``transport.Transport``: ``http1.LeanTransport`` for plain http, ``aiohttp_path.AiohttpTransport`` else);
each network read is stamped with ``time.perf_counter_ns()`` as it returns, before any parsing, and every event it
completes shares that stamp (``decoder.StreamDecoder``: where TTFT is stamped).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from .aiohttp_path import AiohttpTransport
from .apis import ANTHROPIC_VERSION, PATHS, messages_body, responses_body
from .apis import Api as Api
from .decoder import DeferredDecoding, StreamDecoder
from .http1 import LeanTransport
from .records import RequestRecord
from .transport import Transport
from .wire import Usage

class TokenCounter(Protocol):
    def count(self, text: str) -> int: ...


@dataclass(slots=True)
class PreparedRequest:
    prompt: str
    max_tokens: int
    expected_input_tokens: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    #: chat, messages and responses requests: the turns to send (a dataset's conversation), in the OpenAI chat
    #: shape (each API's body converts them, apis.py); None sends ``prompt`` as one user message
    messages: list[dict[str, Any]] | None = None
    #: HTTP headers of this request's own (an agent session's ``X-Session-ID``), sent beside the client's; None: none
    headers: dict[str, str] | None = None


#: Where a template's prompt goes (client.payload): a string no prompt or field holds, checked once per template.
_PROMPT_MARK = "\x00tokenbench prompt\x00"

#: Sends of one request when its connection dies before the server answered a byte (the server never saw it).
SEND_ATTEMPTS = 3

#: Headers a request cannot set of its own: the send paths write them (the body's framing, the server's address).
_FRAMING = frozenset({"host", "content-length", "transfer-encoding"})


def refused_header(headers: dict[str, str]) -> str | None:
    """Why a request's own headers cannot be sent as they are (None: they can): a name that is not a token, a value
    with a line break or outside Latin-1 (what HTTP/1.1 carries), or a header the send path writes itself."""
    for k, v in headers.items():
        if not isinstance(k, str) or not isinstance(v, str):
            return f"header {k!r}: names and values are strings"
        if not k or any(c in k for c in " \t\r\n:") or k.lower() in _FRAMING:
            return f"header {k!r}: not a name a request may set"
        if "\r" in v or "\n" in v or not v.isascii() and any(ord(c) > 255 for c in v):
            return f"header {k!r}: a value with a line break or a character outside Latin-1"
    return None


OnDecoded = Callable[[RequestRecord], None]


@dataclass(slots=True)
class StreamClient:
    """One endpoint, one model. ``body_extras`` are the server-specific fields (ignore_eos, ...)."""

    http: aiohttp.ClientSession
    base_url: str  # ends in /v1
    model: str
    api: Api = "completions"
    api_key: str | None = None
    temperature: float | None = 0.0
    body_extras: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 600.0
    stall_timeout_s: float = 60.0
    counter: TokenCounter | None = None
    one_token_per_chunk: bool = False  # the server streams one token per chunk (its adapter says)
    stream_options: dict[str, bool] = field(default_factory=lambda: {"include_usage": True})  # its adapter's
    #: A fresh connection per request, for servers that close after every stream although they advertise
    #: keep-alive (llama.cpp's llama-server): reusing the pooled connection would lose the request.
    fresh_connection: bool = False
    #: Where a stream sent with an ``on_done`` callback is decoded after it ends (run_phase's sends).
    deferred: DeferredDecoding = field(default_factory=DeferredDecoding)
    #: Send plain-http requests on the lean path (http1.py: bodies from a template, one write, no aiohttp);
    #: False, or an https URL, sends through ``http``. Whoever makes the client calls ``close`` when done.
    lean: bool = True
    _lean: LeanTransport | None = field(default=None, init=False, repr=False)
    #: Bodies without a request's own fields, per max_tokens: the JSON before and after the prompt. Valid while
    #: ``_made_for`` is what they were made from (``body_extras`` is replaced, never changed in place).
    _templates: dict[int, tuple[bytes, bytes] | None] = field(default_factory=dict, init=False, repr=False)
    _made_for: tuple[Any, ...] = field(default=(), init=False, repr=False)

    @property
    def url(self) -> str:
        return f"{self.base_url}/{PATHS[self.api]}"

    def headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        if self.api == "messages":  # Anthropic's own key header (llama-server reads it too) and API version
            if self.api_key:
                h["x-api-key"] = self.api_key
            h["anthropic-version"] = ANTHROPIC_VERSION
        if self.fresh_connection:
            h["Connection"] = "close"
        return h

    def body(self, req: PreparedRequest) -> dict[str, Any]:
        if self.api == "messages":
            return messages_body(self.model, req.prompt, req.messages, req.max_tokens, self.temperature,
                                 self.body_extras, req.extra_body)
        if self.api == "responses":
            return responses_body(self.model, req.prompt, req.messages, req.max_tokens, self.temperature,
                                  self.body_extras, req.extra_body)
        b: dict[str, Any] = {
            "model": self.model,
            "stream": True,
            "stream_options": dict(self.stream_options),
            "max_tokens": req.max_tokens,
        }
        if self.api == "chat":
            b["messages"] = req.messages if req.messages is not None else [{"role": "user", "content": req.prompt}]
        else:
            b["prompt"] = req.prompt
        if self.temperature is not None:
            b["temperature"] = self.temperature
        b.update(self.body_extras)
        b.update(req.extra_body)
        return b

    def payload(self, req: PreparedRequest) -> bytes:
        """``json.dumps(self.body(req)).encode()``, byte for byte; a request with no fields of its own is its
        level's template with only the prompt spliced in: 1.1 µs against json.dumps's 3.4 µs for a short prompt on
        the 2-core machine, where the whole lean send is about 15 µs."""
        if req.extra_body or req.messages is not None:
            return json.dumps(self.body(req)).encode()
        # by identity: an equal value can be another body (a dict in another order; 0 and 0.0 and False), a miss
        # only rebuilds, and what is held here cannot be freed, so its id is never another object's
        made_for = (self.body_extras, self.stream_options, self.model, self.api, self.temperature)
        was = self._made_for
        if not was or any(a is not b for a, b in zip(was, made_for)):
            self._templates.clear()
            self._made_for = made_for
        if req.max_tokens in self._templates:
            t = self._templates[req.max_tokens]
        else:
            t = self._templates[req.max_tokens] = self._template(req.max_tokens)
        if t is None:
            return json.dumps(self.body(req)).encode()
        return t[0] + json.dumps(req.prompt).encode() + t[1]

    def _template(self, max_tokens: int) -> tuple[bytes, bytes] | None:
        """The body around its prompt, or None where the prompt's place is not one clear spot."""
        text = json.dumps(self.body(PreparedRequest(_PROMPT_MARK, max_tokens)))
        mark = json.dumps(_PROMPT_MARK)
        if text.count(mark) != 1:
            return None
        head, tail = text.split(mark)
        return head.encode(), tail.encode()

    def _lean_path(self) -> LeanTransport | None:
        """The lean path, made at the first send (the URL and headers are fixed by then). None: aiohttp sends
        (https, ``lean=False``, or a header the lean path cannot write, such as a non-Latin-1 key)."""
        if self._lean is None and self.lean and self.url.startswith("http://"):
            try:
                self._lean = LeanTransport(self.url, self.headers(), self.timeout_s, self.stall_timeout_s)
            except (ValueError, UnicodeError):  # aiohttp's path then says what is wrong with it, as before
                self.lean = False
                return None
        return self._lean if self.lean else None

    def _transport(self) -> Transport:
        """The send path of the next request: the lean one where it can, else aiohttp's with the headers now."""
        lean = self._lean_path()
        if lean is not None:
            return lean
        return AiohttpTransport(self.http, self.url, self.headers(), self.timeout_s, self.stall_timeout_s)

    async def close(self) -> None:
        """Close the lean path's connections (the aiohttp session is its owner's to close)."""
        if self._lean is not None:
            await self._lean.close()
            self._lean = None

    def flush(self) -> None:
        """Decode every stream still waiting (see DeferredDecoding); their ``on_done`` callbacks run."""
        self.deferred.flush()

    async def send(self, req: PreparedRequest, record: RequestRecord,
                   on_done: OnDecoded | None = None) -> RequestRecord:
        """Send one streaming request and fill ``record``. Never raises for server faults: they are recorded.

        Without ``on_done`` the record is complete when this returns. With it, a stream that ended normally is
        decoded later (``DeferredDecoding``: its timings are already stamped) and ``on_done`` gets the record then;
        call ``flush`` before reading such records.

        A send whose connection dies before the server answered a byte is, almost always, a connection kept
        alive from an earlier request that the server has closed meanwhile (llama-server does after every
        stream): the server never saw it. It is sent once more on a fresh connection, its clock restarted, and
        counted in ``connection_retries``; only SEND_ATTEMPTS such failures in a row are recorded as the server's."""
        record.expected_input_tokens = req.expected_input_tokens
        record.expected_output_tokens = req.max_tokens
        headers = req.headers or None
        if headers is not None and (bad := refused_header(headers)) is not None:
            record.sent_ns = record.end_ns = time.perf_counter_ns()
            record.error_kind, record.error = "invalid_header", bad
            if on_done is not None:
                on_done(record)
            return record
        payload = self.payload(req)
        path = self._transport()
        chat, api = self.api == "chat", self.api
        deferred = False
        for attempt in range(SEND_ATTEMPTS):
            decoder = StreamDecoder(record, chat, api)
            done, stream = await path.send(payload, decoder, attempt > 0, headers)
            if stream is not None:
                deferred = self._finish(decoder, *stream, on_done)
            if done or attempt == SEND_ATTEMPTS - 1:
                break
            record.connection_retries += 1
            record.error_kind = record.error = None
            record.written_ns = None  # the retry is written anew, or not at all (its connection may not open)
            # let the loop see the closes already on the wire, so the pool drops those connections too (at
            # concurrency 4, several pooled connections can die at once: one retry once met a second dead one)
            await asyncio.sleep(0)
        if record.end_ns is None:
            record.end_ns = time.perf_counter_ns()
        if on_done is not None and not deferred:
            on_done(record)
        return record

    def _finish(self, decoder: StreamDecoder, reads: list[bytes], stamps: list[int], end: int,
                on_done: OnDecoded | None) -> bool:
        """A stream read to its end: decoded now, or later with ``on_done`` (True: deferred)."""
        record = decoder.record
        record.end_ns = end
        if on_done is None:
            self._decode(decoder, reads, stamps, end)
            return False

        def job() -> None:
            self._decode(decoder, reads, stamps, end)
            on_done(record)

        self.deferred.put(job)
        return True

    def _decode(self, decoder: StreamDecoder, reads: list[bytes], stamps: list[int], end: int) -> None:
        decoder.replay(reads, stamps)
        if decoder.close(end):
            self._count_tokens(decoder.record, decoder.usage)

    def _count_tokens(self, record: RequestRecord, usage: Usage | None) -> None:
        timings = record.server_timings or {}
        if usage is not None and usage.completion_tokens is not None:
            record.output_tokens = usage.completion_tokens
            record.output_tokens_source = "usage"
            record.reasoning_tokens = usage.reasoning_tokens
        elif timings.get("predicted_n") is not None:
            record.output_tokens = int(timings["predicted_n"])
            record.output_tokens_source = "server_timings"
        elif self.counter is not None and not self.one_token_per_chunk:
            record.output_tokens = self.counter.count(record.reasoning_text + record.answer_text)
            record.output_tokens_source = "tokenizer"
        else:
            record.output_tokens = len(record.chunk_ns)
            record.output_tokens_source = "chunks"
        if record.reasoning_tokens is None and record.reasoning_text:
            if self.counter is not None:
                record.reasoning_tokens = self.counter.count(record.reasoning_text)
            else:
                record.reasoning_tokens = record.reasoning_chunks
        cache_n = timings.get("cache_n")
        if usage is not None and usage.prompt_tokens is not None:
            record.input_tokens = usage.prompt_tokens
            record.input_tokens_source = "usage"
        elif timings.get("prompt_n") is not None:
            # llama.cpp: prompt_n is what it prefilled, cache_n what its slot already held
            record.input_tokens = int(timings["prompt_n"]) + int(cache_n or 0)
            record.input_tokens_source = "server_timings"
        elif record.expected_input_tokens is not None:
            record.input_tokens = record.expected_input_tokens
            record.input_tokens_source = "tokenizer"
        if usage is not None and usage.cached_tokens is not None:
            record.cached_tokens = usage.cached_tokens
            record.cached_tokens_source = "usage"
        elif cache_n is not None:
            record.cached_tokens = int(cache_n)
            record.cached_tokens_source = "server_timings"
