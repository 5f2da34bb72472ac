"""A streamed response's bytes become its record here: where TTFT is stamped.

A send path (``transport.py``) stamps each network read with ``perf_counter_ns`` as it returns and keeps its bytes,
nothing more. ``StreamDecoder`` turns those bytes into events (SSE framing) and typed values (``wire.parse_event``;
the events of Anthropic's Messages and OpenAI's Responses APIs, ``wire_apis``), and every event takes the stamp of
the read that brought its last byte: the first event that carries a token (the chunk rule, ``wire.Chunk``) sets
``first_token_ns``, TTFT's end; the first with visible text, the first with an answer, the first with a tool call's
tokens (``first_tool_ns``), and each token-bearing chunk (``chunk_ns``, ITL and TPOT) are stamped the same way.
Decoding after the stream ended changes no timing, so ``DeferredDecoding`` does it one stream per turn of the event
loop, out of the way of the sends and first-token reads of the other streams.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from itertools import accumulate

from .layout import plural
from .records import RequestRecord
from .sse import SSEParser
from .wire import MAX_EVENT_BYTES, Chunk, Usage, WireError, parse_event
from .wire_apis import api_events

_BLANK = " \t\n\r\x0b\x0c"
_BLANK_B = _BLANK.encode()


class StreamDecoder:
    """One streamed response's bytes in, its record filled: SSE framing, then the typed wire boundary (wire.py).

    Pure and synchronous, so the whole path from bytes to record is tested without a server. Never raises for
    what a server sends: an event it cannot use is counted and makes the request an error of that kind.

    Two ways in, same result: ``feed`` one read at a time (the general SSE parser), or ``replay`` a batch of
    reads with their stamps. ``replay`` splits the joined bytes on blank lines and gives each event the stamp of
    the read that brought its last byte; an event that is not a lone ``data:`` line, and any stream with a CR in
    it, goes through the general parser."""

    __slots__ = ("record", "chat", "usage", "_parse", "_parser", "_answer", "_reasoning", "_refused", "_done",
                 "_tail", "_general", "_counted", "_uncounted")

    def __init__(self, record: RequestRecord, chat: bool, api: str | None = None) -> None:
        self.record = record
        self.chat = chat
        #: the events of Anthropic's Messages or OpenAI's Responses API (wire_apis.py); None: OpenAI chunks
        self._parse = api_events(api)
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
            elif block[:7] == b"event: " and (i := block.find(b"\ndata: ")) > 0 and b"\n" not in block[i + 7:]:
                event(block[i + 7:], now)  # a named event's one data line (Anthropic, Responses): its name is unused
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

    def _no_event(self, data: bytes | str) -> bool:
        """Data that is no event to parse: [DONE] (noted), or "data:" with nothing (ASCII blanks, as JSON counts
        them), a keep-alive some proxies send."""
        if data == b"[DONE]" or data == "[DONE]":
            self._done = True
            return True
        return not (data.strip(_BLANK_B) if isinstance(data, bytes) else data.strip(_BLANK))

    def _event(self, data: bytes | str, now: int) -> None:
        record = self.record
        # an event's JSON object, the common case, is neither [DONE] nor blank
        if data[:1] != b"{" and self._no_event(data):
            return
        try:
            c = parse_event(data, self.chat) if self._parse is None else self._parse(data)
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
        if c.tool and record.first_tool_ns is None:
            record.first_tool_ns = now
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
        record.pack()
        if record.error_kind:
            return False
        if self._refused is not None:
            record.error_kind = self._refused.kind
            record.error = f"{plural(record.malformed_events, 'unusable event')}, the first: {self._refused}"
            return False
        if not self._done and record.finish_reason is None and not (self._parse is not None and self._parse.done):
            record.error_kind = "stream_incomplete"
            record.error = ("the stream ended without [DONE] or a finish_reason" if self._parse is None else
                            "the stream ended before its last event (message_delta's stop_reason, response.completed)")
            return False
        return True


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
