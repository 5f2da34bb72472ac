"""The client's own cost of one send, measured on this machine: what ``--workers auto`` sizes its pool by
(``split.auto_workers``).

A wave of requests is sent at once, the way a closed loop re-sends when its streams end together, by the same
client the run uses (its send path, its body template, its headers) to a sink on the loopback that answers each
with an empty stream. The sends of a wave share one event loop, so the last reaches its socket when the whole
wave has been sent: the wave's span over its size is the cost of one send. The first wave opens the connections
and is not counted; the median of the others is the answer.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import replace

import aiohttp

from ..aiohttp_path import trace_config
from ..client import PreparedRequest
from ..http1 import ByteStream, byte_stream, next_request
from ..records import RequestRecord
from .messages import ClientSpec

#: Requests in a calibration wave, and the waves counted (after one that opens the connections).
WAVE = 64
WAVES = 3
_EMPTY_STREAM = b'data: {"choices":[{"index":0,"text":"","finish_reason":"length"}]}\n\ndata: [DONE]\n\n'
_ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: "
           + str(len(_EMPTY_STREAM)).encode() + b"\r\n\r\n" + _EMPTY_STREAM)


class _Sink(asyncio.Protocol):
    """Reads each request (its head, then its body by Content-Length) and answers it with an empty stream."""

    def __init__(self) -> None:
        self.buf = b""
        self.transport: ByteStream | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = byte_stream(transport)  # its behaviour, not its class: uvloop's is no asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (got := next_request(self.buf)) is not None:
            head, _body, self.buf = got
            assert self.transport is not None
            self.transport.write(_ANSWER)
            if "connection: close" in head.lower():
                self.transport.close()
                return


def sink_spec(spec: ClientSpec, url: str) -> ClientSpec:
    """The run's client pointed at the sink: the same send path (an https endpoint is sent by aiohttp, so its
    calibration is too, less the TLS), body and headers; no tokenizer (nothing is counted)."""
    return replace(spec, base_url=url, counter_path=None, lean=spec.lean and spec.base_url.startswith("http://"))


async def send_cost_us(spec: ClientSpec, prompt_chars: int = 512, wave: int = WAVE,
                       waves: int = WAVES) -> float | None:
    """Microseconds the client described by ``spec`` spends on each send of a wave (see the module's
    docstring); None where no wave reached its sockets whole."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Sink, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    req = PreparedRequest("x" * max(1, prompt_chars), 1)
    costs = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     trace_configs=[trace_config()]) as http:
        client = sink_spec(spec, f"http://127.0.0.1:{port}/v1").build(http)
        try:
            for k in range(waves + 1):
                records = [RequestRecord(index=i, phase="warmup") for i in range(wave)]
                start = time.perf_counter_ns()
                await asyncio.gather(*(client.send(req, r) for r in records))
                written = [r.written_ns for r in records if r.written_ns is not None]
                if k and len(written) == wave:
                    costs.append((max(written) - start) / wave / 1000)
        finally:
            await client.close()
            server.close()
            await server.wait_closed()
    return statistics.median(costs) if costs else None
