"""The aiohttp send path: ``https://``, ``StreamClient(lean=False)``, and a header the lean path cannot write.

aiohttp puts a request on the wire in about 80 µs on the 2-core development machine and writes its body from a
task of its own, one turn of the event loop later, so plain-http requests take the lean path (``http1.py``)
instead. What the client waited here is measured all the same: ``trace_config`` stamps when the body reached the
socket (``send_queue_ms``).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import aiohttp

from .records import RequestRecord
from .transport import REPLAY_BYTES, Stream, error_message, merged_headers

if TYPE_CHECKING:
    from .decoder import StreamDecoder


async def _stamp_written(http: aiohttp.ClientSession, ctx: Any, params: Any) -> None:
    record = ctx.trace_request_ctx
    if isinstance(record, RequestRecord):  # the last chunk of the body wins: the request is on the wire
        record.written_ns = time.perf_counter_ns()


def trace_config() -> aiohttp.TraceConfig:
    """Stamps when each request's body is handed to the socket, so the time a request waited in the client
    (building it, a busy event loop, the connection pool) is reported apart from the server's TTFT
    (``send_queue_ms``). An HTTP session measuring requests is made with ``trace_configs=[trace_config()]``."""
    tc = aiohttp.TraceConfig()
    tc.on_request_chunk_sent.append(_stamp_written)
    return tc


class AiohttpTransport:
    """``transport.Transport`` through an aiohttp session: made for one send (its headers as the client has them
    then); the session is its owner's."""

    __slots__ = ("http", "url", "headers", "timeout_s", "stall_timeout_s")

    def __init__(self, http: aiohttp.ClientSession, url: str, headers: dict[str, str], timeout_s: float,
                 stall_timeout_s: float) -> None:
        self.http, self.url, self.headers = http, url, headers
        self.timeout_s, self.stall_timeout_s = timeout_s, stall_timeout_s

    async def close(self) -> None:
        pass

    async def send(self, payload: bytes, decoder: StreamDecoder, fresh: bool,
                   headers: dict[str, str] | None = None) -> tuple[bool, Stream | None]:
        record = decoder.record
        headers = merged_headers(self.headers, headers) if headers else self.headers
        if fresh:
            headers = {**headers, "Connection": "close"}
        timeout = aiohttp.ClientTimeout(total=self.timeout_s, sock_read=self.stall_timeout_s)
        record.sent_ns = time.perf_counter_ns()
        try:
            async with self.http.post(self.url, data=payload, headers=headers, timeout=timeout,
                                         trace_request_ctx=record) as resp:
                record.http_status = resp.status
                if resp.status != 200:
                    text = (await resp.content.read(4096)).decode("utf-8", "replace")[:500]  # never the whole body
                    record.end_ns = time.perf_counter_ns()
                    record.error_kind = f"http_{resp.status}"
                    record.error = error_message(text) or resp.reason or ""
                    return True, None
                return True, await _read(resp, decoder)
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
            return record.http_status is not None, None
        except aiohttp.ClientConnectorError as e:
            record.error_kind = "connection"
            record.error = str(e)[:300]
        except aiohttp.ClientOSError as e:  # "Can not write request body": a socket the server had closed
            record.error_kind = "client_error"
            record.error = f"{type(e).__name__}: {e}"[:300]
            return record.http_status is not None, None
        except aiohttp.ClientError as e:
            record.error_kind = "client_error"
            record.error = f"{type(e).__name__}: {e}"[:300]
        return True, None


async def _read(resp: aiohttp.ClientResponse, decoder: StreamDecoder) -> Stream:
    """The timing path: each read is stamped and kept as bytes, nothing more. The bytes become events and the
    record later, in batches (``StreamDecoder.replay``): every REPLAY_BYTES (which bounds the memory of a long
    stream), then at the end of the stream, or after it (the client's DeferredDecoding). A read's stamp is when its
    bytes arrived, so decoding later changes no timing; it keeps the parse out of the way of the other streams'
    reads and sends."""
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
    return reads, stamps, perf()
