"""Streaming client for OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions``.

Every network read is timestamped with ``time.perf_counter_ns()`` as it returns, before any parsing,
and every event it completes shares that timestamp: that is when those bytes reached the client.
"""

from __future__ import annotations

import asyncio
import json
import time
from bisect import bisect_right
from itertools import accumulate
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import aiohttp

from . import http1
from .records import RequestRecord
from .sse import SSEParser
from .wire import MAX_EVENT_BYTES, Chunk, Usage, WireError, loads, parse_event

Api = Literal["completions", "chat"]


class TokenCounter(Protocol):
    def count(self, text: str) -> int: ...


@dataclass(slots=True)
class PreparedRequest:
    prompt: str
    max_tokens: int
    expected_input_tokens: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    #: chat requests: the turns to send (a dataset's conversation); None sends ``prompt`` as one user message
    messages: list[dict[str, Any]] | None = None


_BLANK = " \t\n\r\x0b\x0c"
_BLANK_B = _BLANK.encode()
#: Where a template's prompt goes (client.payload): a string no prompt or field holds, checked once per template.
_PROMPT_MARK = "\x00tokenbench prompt\x00"

#: Bytes of a stream held unparsed before they are decoded (a long stream's memory stays bounded by this).
REPLAY_BYTES = 1 << 20

#: Sends of one request when its connection dies before the server answered a byte (the server never saw it).
SEND_ATTEMPTS = 3


async def _stamp_written(session: aiohttp.ClientSession, ctx: Any, params: Any) -> None:
    record = ctx.trace_request_ctx
    if isinstance(record, RequestRecord):  # the last chunk of the body wins: the request is on the wire
        record.written_ns = time.perf_counter_ns()


def trace_config() -> aiohttp.TraceConfig:
    """Stamps when each request's body is handed to the socket, so the time a request waited in the client
    (building it, a busy event loop, the connection pool) is reported apart from the server's TTFT
    (``send_queue_ms``). A session measuring requests is made with ``trace_configs=[trace_config()]``."""
    tc = aiohttp.TraceConfig()
    tc.on_request_chunk_sent.append(_stamp_written)
    return tc


OnDecoded = Callable[[RequestRecord], None]


class DeferredDecoding:
    """Streams whose bytes are decoded after they end, one stream per turn of the event loop.

    When a wave of streams ends together (a deterministic server, or vLLM's lock-step batches), decoding them all
    at once would hold the loop for milliseconds while new requests wait to be sent and first tokens wait to be
    read. Here each decode yields the loop to whatever is ready (reads, sends) before the next one runs. ``flush``
    decodes what is left at once: a phase calls it before it reads its records."""

    __slots__ = ("jobs", "_task", "error")

    def __init__(self) -> None:
        self.jobs: deque[Callable[[], None]] = deque()
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None

    def put(self, job: Callable[[], None]) -> None:
        self.jobs.append(job)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while self.jobs:
            self._one()
            await asyncio.sleep(0)

    def _one(self) -> None:
        job = self.jobs.popleft()
        try:
            job()
        except Exception as e:  # a caller's callback failed: kept for flush to raise where it can be handled
            self.error = self.error or e

    def flush(self) -> None:
        while self.jobs:
            self._one()
        if self.error is not None:
            err, self.error = self.error, None
            raise err


@dataclass(slots=True)
class StreamClient:
    """One endpoint, one model. ``body_extras`` are the server-specific fields (ignore_eos, ...)."""

    session: aiohttp.ClientSession
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
    #: False, or an https URL, sends through ``session``. Whoever makes the client calls ``close`` when done.
    lean: bool = True
    _lean: tuple[http1.Pool, http1.RequestHead] | None = field(default=None, init=False, repr=False)
    #: Bodies without a request's own fields, per max_tokens: the JSON before and after the prompt. Valid while
    #: ``_made_for`` is what they were made from (``body_extras`` is replaced, never changed in place).
    _templates: dict[int, tuple[bytes, bytes] | None] = field(default_factory=dict, init=False, repr=False)
    _made_for: tuple[Any, ...] = field(default=(), init=False, repr=False)

    @property
    def url(self) -> str:
        return f"{self.base_url}/{'chat/completions' if self.api == 'chat' else 'completions'}"

    def headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        if self.fresh_connection:
            h["Connection"] = "close"
        return h

    def body(self, req: PreparedRequest) -> dict[str, Any]:
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

    def _lean_path(self) -> tuple[http1.Pool, http1.RequestHead] | None:
        """The pool and the request head, made at the first send (the URL and headers are fixed by then). None:
        aiohttp sends (https, ``lean=False``, or a header the lean path cannot write, such as a non-Latin-1 key)."""
        if self._lean is None and self.lean and self.url.startswith("http://"):
            try:
                head = http1.RequestHead(self.url, self.headers())
            except (ValueError, UnicodeError):  # aiohttp's path then says what is wrong with it, as before
                self.lean = False
                return None
            self._lean = (http1.Pool(head.host, head.port), head)
        return self._lean if self.lean else None

    async def close(self) -> None:
        """Close the lean path's connections (the aiohttp session is its owner's to close)."""
        if self._lean is not None:
            self._lean[0].close()
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
        payload = self.payload(req)
        lean = self._lean_path()
        headers = self.headers() if lean is None else {}
        deferred = False
        for attempt in range(SEND_ATTEMPTS):
            if lean is not None:
                done, deferred = await self._send_lean(lean, payload, record, on_done, fresh=attempt > 0)
            else:
                done, deferred = await self._send_once(payload, headers, record, on_done)
            if done or attempt == SEND_ATTEMPTS - 1:
                break
            record.connection_retries += 1
            record.error_kind = record.error = None
            headers = {**headers, "Connection": "close"}
            # let the loop see the closes already on the wire, so the pool drops those connections too (at
            # concurrency 4, several pooled connections can die at once: one retry once met a second dead one)
            await asyncio.sleep(0)
        if record.end_ns is None:
            record.end_ns = time.perf_counter_ns()
        if on_done is not None and not deferred:
            on_done(record)
        return record

    async def _send_once(self, payload: bytes, headers: dict[str, str], record: RequestRecord,
                         on_done: OnDecoded | None = None) -> tuple[bool, bool]:
        """One attempt: (False when its connection died before the server answered, True when the stream's
        decoding was deferred)."""
        timeout = aiohttp.ClientTimeout(total=self.timeout_s, sock_read=self.stall_timeout_s)
        record.sent_ns = time.perf_counter_ns()
        try:
            async with self.session.post(self.url, data=payload, headers=headers, timeout=timeout,
                                         trace_request_ctx=record) as resp:
                record.http_status = resp.status
                if resp.status != 200:
                    text = (await resp.content.read(4096)).decode("utf-8", "replace")[:500]  # never the whole body
                    record.end_ns = time.perf_counter_ns()
                    record.error_kind = f"http_{resp.status}"
                    record.error = _error_message(text) or resp.reason or ""
                    return True, False
                return True, await self._consume(resp, record, on_done)
        except aiohttp.ServerTimeoutError:
            record.error_kind = "stall"
            record.error = f"no bytes for {self.stall_timeout_s:g} s"
        except (asyncio.TimeoutError, TimeoutError):
            record.error_kind = "timeout"
            record.error = f"request exceeded {self.timeout_s:g} s"
        except aiohttp.ClientPayloadError as e:
            record.error_kind = "stream_broken"
            record.error = str(e)[:300]
        except aiohttp.ServerDisconnectedError as e:
            record.error_kind = "stream_broken" if record.first_byte_ns else "disconnected"
            record.error = str(e)[:300] or "server closed the connection"
            return record.http_status is not None, False
        except aiohttp.ClientConnectorError as e:
            record.error_kind = "connection"
            record.error = str(e)[:300]
        except aiohttp.ClientOSError as e:  # "Can not write request body": a socket the server had closed
            record.error_kind = "client_error"
            record.error = f"{type(e).__name__}: {e}"[:300]
            return record.http_status is not None, False
        except aiohttp.ClientError as e:
            record.error_kind = "client_error"
            record.error = f"{type(e).__name__}: {e}"[:300]
        return True, False

    async def _consume(self, resp: aiohttp.ClientResponse, record: RequestRecord,
                       on_done: OnDecoded | None = None) -> bool:
        """The timing path: each read is stamped and kept as bytes, nothing more. The bytes become events and
        the record later, in batches (``StreamDecoder.replay``): every REPLAY_BYTES (which bounds the memory of a
        long stream), then at the end of the stream, or with ``on_done`` after it (DeferredDecoding; True is
        returned). A read's stamp is when its bytes arrived, so decoding later changes no timing; it keeps the
        parse out of the way of the other streams' reads and sends."""
        decoder = StreamDecoder(record, chat=self.api == "chat")
        read = resp.content.readany
        perf = time.perf_counter_ns
        reads: list[bytes] = []
        stamps: list[int] = []
        held = 0
        try:
            while True:
                data = await read()
                if not data:
                    break
                stamps.append(perf())
                reads.append(data)
                held += len(data)
                if held > REPLAY_BYTES:
                    decoder.replay(reads, stamps)
                    reads, stamps, held = [], [], 0
                    if decoder.overflowed:
                        break
        except BaseException:  # a stream that broke, timed out or was interrupted keeps the events it delivered
            decoder.replay(reads, stamps)
            raise
        return self._finish(decoder, reads, stamps, perf(), on_done)

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

    async def _send_lean(self, lean: tuple[http1.Pool, http1.RequestHead], payload: bytes, record: RequestRecord,
                         on_done: OnDecoded | None, fresh: bool) -> tuple[bool, bool]:
        """``_send_once`` on the lean path (http1.py), same results and error kinds. From the send's start to the
        socket write nothing awaits unless a connection must be opened, so a wave's sends never queue behind each
        other; each read is stamped in the protocol as it arrives."""
        pool, head = lean
        record.sent_ns = sent = time.perf_counter_ns()
        loop = asyncio.get_running_loop()
        start_s = loop.time()
        conn = None if fresh or head.closes else pool.take()
        if conn is None:
            try:
                conn = await asyncio.wait_for(pool.connect(), self.timeout_s)
            except http1.HttpError as e:
                record.error_kind, record.error = e.kind, str(e)[:300]
                return True, False
            except (asyncio.TimeoutError, TimeoutError):
                record.error_kind, record.error = "timeout", f"request exceeded {self.timeout_s:g} s"
                return True, False
        decoder = StreamDecoder(record, chat=self.api == "chat")
        ex = http1.Exchange(decoder.spill, REPLAY_BYTES)
        ex.last_ns = sent
        conn.start(ex, head.request(payload), reuse=not (fresh or head.closes))
        record.written_ns = time.perf_counter_ns()
        dog = http1.Watchdog(conn, ex, start_s, self.timeout_s, self.stall_timeout_s)
        try:
            await ex.wait()
        except BaseException:  # interrupted: the record keeps the events that arrived
            dog.cancel()
            conn.close()
            decoder.replay(ex.reads, ex.stamps)
            raise
        dog.cancel()
        record.http_status = ex.status
        if ex.error is not None:
            decoder.replay(ex.reads, ex.stamps)
            record.error_kind, record.error = ex.error.kind, str(ex.error)[:300]
            return not ex.error.retry, False
        if ex.status != 200:
            text = b"".join(ex.reads)[:http1.ERROR_BODY_BYTES].decode("utf-8", "replace")[:500]
            record.end_ns = time.perf_counter_ns()
            record.error_kind = f"http_{ex.status}"
            record.error = _error_message(text) or ex.reason
            return True, False
        assert ex.end_ns is not None
        return True, self._finish(decoder, ex.reads, ex.stamps, ex.end_ns, on_done)

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


class StreamDecoder:
    """One streamed response's bytes in, its record filled: SSE framing, then the typed wire boundary (wire.py).

    Pure and synchronous, so the whole path from bytes to record is tested without a server. Never raises for
    what a server sends: an event it cannot use is counted and makes the request an error of that kind.

    Two ways in, same result: ``feed`` one read at a time (the general SSE parser), or ``replay`` a batch of
    reads with their stamps. ``replay`` splits the joined bytes on blank lines and gives each event the stamp of
    the read that brought its last byte; an event that is not a lone ``data:`` line, and any stream with a CR in
    it, goes through the general parser."""

    __slots__ = ("record", "chat", "usage", "_parser", "_answer", "_reasoning", "_refused", "_done", "_tail",
                 "_general", "_counted", "_uncounted")

    def __init__(self, record: RequestRecord, chat: bool) -> None:
        self.record = record
        self.chat = chat
        self.usage: Usage | None = None
        self._parser = SSEParser()
        self._answer: list[str] = []
        self._reasoning: list[str] = []
        self._refused: WireError | None = None  # the first event the wire boundary refused
        self._done = False
        self._tail = b""  # replay: the bytes of an event not finished yet
        self._general = False  # replay: this stream needs the general parser (a CR, or fed read by read)
        self._counted: int | None = None  # the server's running count of generated tokens, as its chunks said
        self._uncounted = 0  # chunks taken for tokens by the chunk rule, with no running count on them

    @property
    def overflowed(self) -> bool:
        """A line or event past MAX_EVENT_BYTES: the rest of the stream is not read (memory stays bounded)."""
        return self._parser.pending_bytes > MAX_EVENT_BYTES or len(self._tail) > MAX_EVENT_BYTES

    def feed(self, data: bytes, now: int) -> None:
        record = self.record
        if record.first_byte_ns is None:
            record.first_byte_ns = now
        if self._tail:  # a replay left half an event: the general parser takes it from here
            tail, self._tail = self._tail, b""
            for ev in self._parser.feed(tail):
                self._event(ev.data, now)
        self._general = True
        for ev in self._parser.feed(data):
            self._event(ev.data, now)
        if self.overflowed:
            self._refuse_oversized()

    def replay(self, reads: list[bytes], stamps: list[int]) -> None:
        if not reads:
            return
        data = self._tail + (reads[0] if len(reads) == 1 else b"".join(reads))
        if self._general or b"\r" in data:
            for d, t in zip(reads, stamps):
                self.feed(d, t)
            return
        record = self.record
        if record.first_byte_ns is None:
            record.first_byte_ns = stamps[0]
        ends = list(accumulate(map(len, reads), initial=len(self._tail)))[1:]  # offset after each read
        blocks = data.split(b"\n\n")
        self._tail = blocks.pop()
        pos = 0
        event = self._event
        for block in blocks:
            pos += len(block) + 2
            now = stamps[bisect_right(ends, pos - 1)]
            if block[:6] == b"data: " and b"\n" not in block:
                event(block[6:], now)
            elif len(block) > MAX_EVENT_BYTES:
                self._refuse_oversized()
            else:
                for ev in SSEParser().feed(block + b"\n\n"):
                    event(ev.data, now)
        if self.overflowed:
            self._refuse_oversized()

    def spill(self, reads: list[bytes], stamps: list[int]) -> bool:
        """``replay`` for a reader that holds too many bytes; True once the stream is past what is kept."""
        self.replay(reads, stamps)
        return self.overflowed

    def _refuse_oversized(self) -> None:
        if self._refused is None:
            self.record.malformed_events += 1
            self._refused = WireError("malformed_event", f"an event over {MAX_EVENT_BYTES >> 20} MiB")

    def _event(self, data: bytes | str, now: int) -> None:
        record = self.record
        if data[:1] != b"{":  # an event's JSON object, the common case, is neither [DONE] nor blank
            if data == b"[DONE]" or data == "[DONE]":
                self._done = True
                return
            if not (data.strip(_BLANK_B) if isinstance(data, bytes) else data.strip(_BLANK)):
                return  # "data:" with nothing (ASCII blanks, as JSON counts them): a keep-alive some proxies send
        try:
            c = parse_event(data, self.chat)
        except (ValueError, OverflowError) as e:  # WireError is a ValueError; the others, a backstop
            e = e if isinstance(e, WireError) else WireError("malformed_event", f"{type(e).__name__}: {e}"[:200])
            record.malformed_events += 1
            self._refused = self._refused or e
            return
        if c.usage is not None:
            self.usage = c.usage
        if c.timings is not None:
            record.server_timings = c.timings
        if c.error is not None:
            record.error_kind = "server_error_event"
            record.error = c.error
            return
        if c.finish_reason:
            record.finish_reason = c.finish_reason
        if not c.choice:
            return  # usage, timings or nothing: no choice, no token
        text, think = c.text, c.reasoning
        carried = self._carried(c)  # always: it keeps the running count
        if not (text or think or carried):
            return  # the message's opening (role), a closing finish_reason, or a count that did not move
        if record.first_token_ns is None:
            record.first_token_ns = now
        record.chunk_ns.append(now)
        n = 0
        if think:
            record.reasoning_chunks += 1
            self._reasoning.append(think)
            n += len(think)
        if text:
            if record.first_answer_ns is None:
                record.first_answer_ns = now
            self._answer.append(text)
            n += len(text)
        if n and record.first_text_ns is None:
            record.first_text_ns = now
        record.chunk_chars.append(n)

    def _carried(self, c: Chunk) -> int:
        """Tokens choice 0 carried: what the chunk says (logprobs, token ids), else how far the server's running
        count moved (vLLM's continuous_usage_stats, llama.cpp's timings_per_token), else the chunk rule's one or
        none. A count that first appears after chunks that had none is a total, not a running count."""
        if c.tokens is not None:
            return c.tokens
        total = c.usage.completion_tokens if c.usage is not None else None
        if total is None and c.timings is not None and "predicted_n" in c.timings:
            total = int(c.timings["predicted_n"])
        if total is not None and (self._counted is not None or not self._uncounted):
            moved = max(total - (self._counted or 0), 0)
            self._counted = total
            return moved
        if c.token:
            self._uncounted += 1
            return 1
        return 0

    def close(self, now: int) -> bool:
        """End of the stream. True when the request succeeded and its tokens are to be counted."""
        record = self.record
        if self._tail:  # a last event with no blank line after it is still an event, as the parser says
            tail, self._tail = self._tail, b""
            for ev in self._parser.feed(tail):
                self._event(ev.data, now)
        for ev in self._parser.close():
            self._event(ev.data, now)
        record.end_ns = now
        record.answer_text = "".join(self._answer)
        record.reasoning_text = "".join(self._reasoning)
        if record.error_kind:
            return False
        if self._refused is not None:
            record.error_kind = self._refused.kind
            record.error = f"{record.malformed_events} unusable event(s), the first: {self._refused}"
            return False
        if not self._done and record.finish_reason is None:
            record.error_kind = "stream_incomplete"
            record.error = "the stream ended without [DONE] or a finish_reason"
            return False
        return True


def _error_message(text: str) -> str:
    """The server's own words from an error body (OpenAI ``{"error": {"message"}}``, FastAPI ``detail``)."""
    try:
        obj = loads(text, "error body")
    except WireError:
        return " ".join(text.split())[:300]
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("detail", obj.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            return " ".join(str(err).split())[:300]
    return " ".join(text.split())[:300]
