"""The emitter's paced and burst schedules on a bare asyncio protocol (``python -m tokenbench.emitter --lean``), for
the client overhead benchmark only: no faults, no tokenizer, no /metrics. Its process runs on an event loop whose
timers fire on time (``_FineEpoll``) and without cyclic garbage collection, pinned to a core of its own."""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import selectors
import time
from typing import TYPE_CHECKING, Any

from .emitter_chunks import MODEL, burst, chunk, count_prompt, text_chunk, usage_chunk
from .http1 import ByteStream, byte_stream, next_request

if TYPE_CHECKING:
    from .emitter import EmitterConfig


class LeanServer(asyncio.Protocol):
    """The emitter's paced and burst schedules on a bare asyncio protocol (``--lean``), for the client overhead
    benchmark only: no faults, no tokenizer, no /metrics. aiohttp's web server takes about 70 µs to take in one
    request on the 2-core machine, so a wave of 256 requests waited up to 19 ms (p99) in the emitter before its
    50 ms began, and that wait read as the client's TTFT excess, the very figure the benchmark measures. Here a
    request is parsed in a few µs and every chunk is a prebuilt frame written from a timer. Stamps as
    ``Emitter.stamps``."""

    def __init__(self, config: EmitterConfig, stamps: dict[str, tuple[int, int, int]]) -> None:
        self.config, self.stamps = config, stamps
        self.transport: ByteStream | None = None
        self.buf = b""
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = byte_stream(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (got := next_request(self.buf)) is not None:
            head, body, self.buf = got
            self._answer(head.split(" ", 2), body)

    def _send(self, status: str, ctype: str, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
                                 % (status.encode(), ctype.encode(), len(data), data))

    def _answer(self, line: list[str], body: bytes) -> None:
        t_recv = time.perf_counter_ns()
        method, path = line[0], line[1] if len(line) > 1 else "/"
        if method == "GET" and path.startswith("/v1/models"):
            self._send("200 OK", "application/json", json.dumps({"object": "list", "data": [
                {"id": MODEL, "object": "model", "owned_by": self.config.owned_by}]}).encode())
        elif method == "GET" and path.startswith("/stats"):
            self._send("200 OK", "application/json", json.dumps({"stamps": self.stamps}).encode())
        elif method == "POST" and path.endswith("/completions"):
            self._stream(json.loads(body), path.endswith("chat/completions"), t_recv)
        else:
            self._send("404 Not Found", "text/plain", b"not served by the lean emitter")

    def _stream(self, req: dict[str, Any], chat: bool, t_recv: int) -> None:
        assert self.transport is not None
        c, transport = self.config, self.transport
        n = int(req.get("max_tokens") or 16)
        key = str(req.get("prompt", ""))[:64]
        usage = bool(c.usage and (req.get("stream_options") or {}).get("include_usage"))
        tail = _lean_tail(chat, count_prompt(req) if usage else -1, n)
        transport.write(_lean_head(chat and c.role_first))
        if c.burst:
            data, _ = burst(chat, n, 1)
            t_first = time.perf_counter_ns()
            transport.write(_frame(data) + tail)
            self.stamps[key] = (t_recv, t_first, time.perf_counter_ns())
            return
        start = self.loop.time()
        first = [0]

        def tick(i: int) -> None:
            if transport.is_closing():
                return
            now = time.perf_counter_ns()
            if i == 0:
                first[0] = now
            transport.write(_frame(text_chunk(chat, f" w{i}")))
            if i + 1 < n:
                self.loop.call_at(start + c.ttft_s + (i + 1) * c.itl_s, tick, i + 1)
            else:
                self.stamps[key] = (t_recv, first[0], now)
                transport.write(tail)

        self.loop.call_at(start + c.ttft_s, tick, 0)


@functools.lru_cache(maxsize=1024)
def _lean_tail(chat: bool, prompt_tokens: int, n: int) -> bytes:
    """A lean stream's last frames: the finish, the usage (prompt_tokens -1: not asked for), [DONE], the body's end."""
    tail = _frame(chunk(chat, finish="length"))
    if prompt_tokens >= 0:
        tail += _frame(usage_chunk(prompt_tokens, n, 0))
    return tail + _frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"


@functools.lru_cache(maxsize=2)
def _lean_head(role: bool) -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            + (_frame(chunk(True, role=True)) if role else b""))


def _frame(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class _FineEpoll(selectors.EpollSelector):
    """epoll with the event loop's timers on time: ``EpollSelector`` rounds a wait up to whole milliseconds
    (epoll_wait's unit), so every timer of the schedule fired up to 1 ms late, and that lateness read as the client's
    TTFT excess (1.2 ms at p99 on the 16-core machine). Here a wait is rounded down instead and its last
    fraction of a millisecond is polled: the emitter's core spins up to 1 ms before each due timer, which is what it
    is pinned for."""

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout > 0:
            whole_ms = int(timeout * 1000)
            timeout = whole_ms / 1000 - 1e-7 if whole_ms else 0  # just under: the base class rounds up
        return super().select(timeout)


def lean_loop() -> asyncio.AbstractEventLoop:
    return asyncio.SelectorEventLoop(_FineEpoll()) if hasattr(selectors, "EpollSelector") else asyncio.new_event_loop()


async def serve_lean(config: EmitterConfig, port: int, reuse_port: bool = False, own_port: int | None = None) -> None:
    """``reuse_port``: several emitter processes share ``port`` (SO_REUSEPORT: the kernel spreads connections over
    them), each on its own core, for more streams than one core paces; each also answers on ``own_port``, so its
    /stats (its own stamps) can be read."""
    # No cyclic garbage collection in this process: it lives for one measurement and its garbage (requests,
    # frames) is freed by reference counting; a collection once stopped it for ~12 ms in the middle of a wave of
    # 256 requests, which read as 12 ms of TTFT excess at p99: the client's overhead, as the benchmark saw it.
    gc.disable()
    stamps: dict[str, tuple[int, int, int]] = {}
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: LeanServer(config, stamps), "127.0.0.1", port, reuse_port=reuse_port)
    own = (await loop.create_server(lambda: LeanServer(config, stamps), "127.0.0.1", own_port)
           if own_port is not None else None)
    async with server:
        if own is not None:
            await own.start_serving()
        await server.serve_forever()
