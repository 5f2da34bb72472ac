"""The lean send path: HTTP/1.1 over plain TCP with asyncio protocols, for streamed completions only.

Why it exists: the client's own wait is inside every TTFT it reports. aiohttp takes about 80 µs to put one request on the wire on the 2-core development
machine, and writes its body from a task of its own, one turn of the event loop later. A wave of 256 re-sent
requests thus waits for the whole wave's work before any body reaches a socket (a send queue of 16 ms at p99),
and that wait is inside every request's TTFT. Here a request is one ``transport.write`` of bytes built ahead
(``RequestHead``), done synchronously from the start of the send: nothing waits behind the other sends of a wave.

Reading: every ``data_received`` is stamped (``perf_counter_ns``) before anything else, the chunked framing is
taken off, and the body bytes are kept with that stamp, nothing more; the client decodes them later
(``decoder.StreamDecoder.replay``), as on the aiohttp path. One timer per request checks both the total timeout and
the stall (no bytes for ``stall_s``), re-armed only when it fires.

Only what a streaming completion needs: plain ``http://`` (``https://`` stays on aiohttp), no redirects, no
compression asked for, a ``Content-Length`` or chunked or connection-closed body, keep-alive with a pool.
``LeanTransport`` is this path behind ``transport.Transport``. It runs on any asyncio event loop (uvloop's
included: see ``ByteStream``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import urlsplit

from .transport import REPLAY_BYTES, Stream, error_message, merged_headers

if TYPE_CHECKING:
    from .decoder import StreamDecoder

#: A response head longer than this is refused (no server of completions sends one near it).
MAX_HEAD_BYTES = 64 * 1024
#: The bytes of an error response's body kept (its message is in the first few hundred).
ERROR_BODY_BYTES = 4096
_HEX = b"0123456789abcdefABCDEF"

Spill = Callable[[list[bytes], list[int]], bool]


class ByteStream(Protocol):
    """What this path and tokenbench's loopback servers use of a connection's transport: its behaviour, never its
    class. uvloop's transports are no ``asyncio.Transport`` (not even a ``BaseTransport``) and behave as one; Ray's
    async actors run uvloop wherever it is installed, and a check of the class there stopped every send."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...

    def is_closing(self) -> bool: ...


def byte_stream(transport: asyncio.BaseTransport) -> ByteStream:
    """``connection_made``'s transport as what it is used for, on any event loop (see ByteStream)."""
    return cast(ByteStream, transport)


def next_request(buf: bytes) -> tuple[str, bytes, bytes] | None:
    """The server side's framing, for tokenbench's own loopback servers (the lean emitter, the send-cost sink):
    the first whole request in ``buf`` as (its head, decoded as latin-1, its body by Content-Length, the bytes
    after it), or None until it has all come in."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buf[:end].decode("latin-1")
    length = 0
    for line in head.split("\r\n")[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == "content-length":
            length = int(v)
    if len(buf) < end + 4 + length:
        return None
    return head, buf[end + 4:end + 4 + length], buf[end + 4 + length:]


class HttpError(Exception):
    """A response this path cannot read, or a connection that failed. ``kind`` names it as records do."""

    def __init__(self, kind: str, message: str, retry: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry = retry  # the server never answered a byte: the request may be sent again


class RequestHead:
    """The bytes before a request's body, built once per client: only Content-Length changes per request. A
    request with headers of its own gets a head built for it (the client's headers, its own over them)."""

    __slots__ = ("host", "port", "path", "headers", "_start", "_head")

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        u = urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"the lean path sends plain http only, not {url!r}")
        self.host, self.port = u.hostname, u.port or 80
        self.path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        host = u.netloc.rsplit("@", 1)[-1]
        self.headers = dict(headers)
        self._start = [f"POST {self.path} HTTP/1.1", f"Host: {host}", "User-Agent: tokenbench"]
        self._head = self._built(self.headers)

    def _built(self, headers: dict[str, str]) -> bytes:
        lines = [*self._start, *(f"{k}: {v}" for k, v in headers.items())]
        for line in lines:
            if "\r" in line or "\n" in line:
                raise ValueError("a header with a line break")
        return ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")

    @property
    def closes(self) -> bool:
        return b"\r\nConnection: close" in self._head

    def request(self, body: bytes, headers: dict[str, str] | None = None) -> bytes:
        head = self._head if not headers else self._built(merged_headers(self.headers, headers))
        return b"%s%d\r\n\r\n%s" % (head, len(body), body)


class Exchange:
    """One request and its response on one connection: the status, then the body's bytes with their stamps."""

    __slots__ = ("status", "reason", "headers", "reads", "stamps", "held", "spill", "limit", "end_ns", "error",
                 "last_ns", "done", "keep_alive", "_waiter")

    def __init__(self, spill: Spill | None, limit: int) -> None:
        self.status: int | None = None
        self.reason = ""
        self.headers: dict[str, str] = {}  # the response's, names in lower case
        self.reads: list[bytes] = []
        self.stamps: list[int] = []
        self.held = 0
        self.spill = spill  # called with the held reads once they pass ``limit`` bytes; True: stop reading
        self.limit = limit
        self.end_ns: int | None = None
        self.error: HttpError | None = None
        self.last_ns = 0
        self.done = False
        self.keep_alive = True
        self._waiter: asyncio.Future[None] | None = None

    def add(self, data: bytes, now: int) -> bool:
        """Keep a read's body bytes; False when the reader asked to stop (its spill said so)."""
        self.reads.append(data)
        self.stamps.append(now)
        self.held += len(data)
        if self.held > self.limit:
            if self.status != 200:
                return False  # an error body: its first bytes are enough (the limit is ERROR_BODY_BYTES)
            if self.spill is not None:
                reads, stamps = self.reads, self.stamps
                self.reads, self.stamps, self.held = [], [], 0
                if self.spill(reads, stamps):
                    return False
        return True

    def finish(self, now: int, error: HttpError | None = None) -> None:
        if self.done:
            return
        self.done = True
        self.end_ns = now
        self.error = error
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self) -> None:
        if not self.done:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter


class Connection(asyncio.Protocol):
    """One keep-alive TCP connection; one exchange at a time. The response parser is a small state machine:
    the head, then the body by its framing (chunked, a length, or the connection's close)."""

    def __init__(self, pool: Pool | None = None) -> None:
        self.pool = pool
        self.reuse = True  # False: the request asked the server to close (Connection: close)
        self.transport: ByteStream | None = None
        self.exchange: Exchange | None = None
        self.closed = False
        self._buf = b""  # head bytes, or chunk framing split across reads
        self._mode = 0  # 0 head, 1 chunked, 2 by length, 3 until close
        self._left = 0  # chunked: data bytes left in this chunk (-1: its CRLF is next, -2: trailers); length: bytes
        self._parts: list[bytes] = []

    # ---- asyncio.Protocol -------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = byte_stream(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.pool is not None:
            self.pool.forget(self)
        ex = self.exchange
        if ex is None or ex.done:
            return
        now = time.perf_counter_ns()
        if self._mode == 3:  # a body that ends with the connection ended normally
            ex.finish(now)
        elif ex.status is None and not self._buf:
            ex.finish(now, HttpError("disconnected", str(exc or "") or "server closed the connection", retry=True))
        else:
            ex.finish(now, HttpError("stream_broken", "the server closed the connection before the response ended"
                                     + (f": {exc}" if exc else "")))

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        ex = self.exchange
        if ex is None or ex.done:  # bytes no request asked for: this connection cannot be trusted again
            self.close()
            return
        ex.last_ns = now
        if self._mode == 0:
            data = self._head(ex, data, now)
            if not data or ex.done:
                return
        if self._mode == 1:
            body = self._dechunk(ex, data, now)
        elif self._mode == 2:
            body = data[:self._left]
            self._left -= len(body)
            if len(data) > len(body):
                ex.keep_alive = False  # bytes past the response: not a connection to reuse
        else:
            body = data
        if body and not ex.add(body, now):
            self.close()
            ex.finish(now)
            return
        if self._mode == 2 and self._left == 0:
            self._end(ex, now)

    # ---- the exchange -----------------------------------------------------------------------------------------

    def start(self, ex: Exchange, request: bytes, reuse: bool = True) -> None:
        assert self.transport is not None
        self.exchange = ex
        self.reuse = reuse
        self._buf, self._mode, self._left, self._parts = b"", 0, 0, []
        self.transport.write(request)

    def close(self) -> None:
        self.closed = True
        if self.pool is not None:
            self.pool.forget(self)
        if self.transport is not None:
            self.transport.close()

    def abort(self, error: HttpError) -> None:
        """A timeout: the exchange ends with ``error`` and the connection is dropped."""
        ex = self.exchange
        self.close()
        if ex is not None:
            ex.finish(time.perf_counter_ns(), error)

    def _end(self, ex: Exchange, now: int) -> None:
        ex.finish(now)
        self.exchange = None
        if ex.keep_alive and self.pool is not None and not self.closed:
            self.pool.give_back(self)
        else:
            self.close()

    def _head(self, ex: Exchange, data: bytes, now: int) -> bytes:
        """Parse the head once it is whole; the bytes after it are returned (the body's first)."""
        buf = self._buf + data if self._buf else data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD_BYTES:
                self._fail(ex, now, "a response head over 64 KiB")
            self._buf = buf
            return b""
        self._buf = b""
        lines = buf[:end].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit() or len(parts[1]) != 3:
            self._fail(ex, now, f"not an HTTP/1.x status line: {lines[0][:80]!r}")
            return b""
        status = int(parts[1])
        rest = buf[end + 4:]
        if 100 <= status < 200:  # an interim response (100 Continue): the real one follows
            return self._head(ex, rest, now) if rest else b""
        headers: dict[str, str] = {}
        for line in lines[1:]:
            k, sep, v = line.partition(":")
            if not sep:
                self._fail(ex, now, f"a header line without a colon: {line[:80]!r}")
                return b""
            headers[k.strip().lower()] = v.strip()
        ex.status, ex.reason, ex.headers = status, parts[2] if len(parts) > 2 else "", headers
        if status != 200:
            ex.limit = ERROR_BODY_BYTES
        conn = headers.get("connection", "").lower()
        ex.keep_alive = self.reuse and (parts[0] == "HTTP/1.1" and "close" not in conn or "keep-alive" in conn)
        if status in (204, 304):  # no body, whatever the headers say (RFC 9112, 6.3)
            self._end(ex, now)
            return b""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._mode, self._left = 1, 0
        elif "content-length" in headers and headers["content-length"].isdigit():
            self._mode, self._left = 2, int(headers["content-length"])
            if self._left == 0:
                self._end(ex, now)
                return b""
        else:
            self._mode, ex.keep_alive = 3, False
        return rest

    def _dechunk(self, ex: Exchange, data: bytes, now: int) -> bytes:
        """This read's body bytes, the chunked framing taken off; the end of the body ends the exchange."""
        buf = self._buf + data if self._buf else data
        self._buf = b""
        parts = self._parts
        pos, n = 0, len(buf)
        while pos < n:
            left = self._left
            if left > 0:  # inside a chunk's data
                take = min(left, n - pos)
                parts.append(buf[pos:pos + take])
                pos += take
                self._left = left - take or -1
            elif left == -1:  # the CRLF after a chunk's data
                if n - pos < 2:
                    break
                if buf[pos:pos + 2] != b"\r\n":
                    self._fail(ex, now, "a chunk not followed by CRLF")
                    return b""
                pos += 2
                self._left = 0
            else:  # a size line (left 0) or a trailer line (left -2)
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    if n - pos > 4096:
                        self._fail(ex, now, "a chunk-size line over 4 KiB")
                        return b""
                    break
                line = buf[pos:eol]
                pos = eol + 2
                if left == -2:
                    if not line:  # the blank line after the trailers: the body is whole
                        self._left = 0
                        body = b"".join(parts)
                        parts.clear()
                        if pos < n:
                            ex.keep_alive = False
                        if body and not ex.add(body, now):
                            self.close()
                        self._end(ex, now)
                        return b""
                    continue
                size = line.split(b";", 1)[0].strip(b" \t")
                if not size or size.strip(_HEX) or len(size) > 16:
                    self._fail(ex, now, f"a bad chunk size: {line[:40]!r}")
                    return b""
                self._left = int(size, 16) or -2
        self._buf = buf[pos:]
        if not parts:
            return b""
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        parts.clear()
        return body

    def _fail(self, ex: Exchange, now: int, why: str) -> None:
        self.close()
        ex.finish(now, HttpError("stream_broken" if ex.status is not None else "client_error",
                                 f"unreadable response: {why}"))


class Pool:
    """Keep-alive connections to one host: the one used last is reused first (its socket is warmest)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.idle: list[Connection] = []
        self.open: set[Connection] = set()

    def take(self) -> Connection | None:
        while self.idle:
            c = self.idle.pop()
            if not c.closed and c.transport is not None and not c.transport.is_closing():
                return c
        return None

    async def connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        try:
            _, proto = await loop.create_connection(lambda: Connection(self), self.host, self.port)
        except OSError as e:
            raise HttpError("connection", f"cannot connect to {self.host}:{self.port}: {e}") from e
        self.open.add(proto)
        return proto

    def give_back(self, c: Connection) -> None:
        self.idle.append(c)

    def forget(self, c: Connection) -> None:
        self.open.discard(c)

    def close(self) -> None:
        for c in list(self.open):
            c.close()
        self.idle.clear()


class Watchdog:
    """One timer per request for both limits: the total time, and the longest wait for a byte."""

    __slots__ = ("conn", "ex", "total_at", "stall_s", "total_s", "_handle")

    def __init__(self, conn: Connection, ex: Exchange, start_s: float, total_s: float, stall_s: float) -> None:
        self.conn, self.ex = conn, ex
        self.total_s, self.stall_s = total_s, stall_s
        self.total_at = start_s + total_s
        loop = asyncio.get_running_loop()
        self._handle: Any = loop.call_at(loop.time() + min(total_s, stall_s), self._check)

    def _check(self) -> None:
        if self.ex.done:
            return
        loop = asyncio.get_running_loop()
        now_s = loop.time()
        if now_s >= self.total_at - 1e-4:
            self.conn.abort(HttpError("timeout", f"request exceeded {self.total_s:g} s"))
            return
        quiet_s = (time.perf_counter_ns() - self.ex.last_ns) / 1e9
        if quiet_s >= self.stall_s - 1e-4:
            self.conn.abort(HttpError("stall", f"no bytes for {self.stall_s:g} s"))
            return
        self._handle = loop.call_at(min(self.total_at, now_s + self.stall_s - quiet_s), self._check)

    def cancel(self) -> None:
        self._handle.cancel()


class LeanTransport:
    """``transport.Transport`` on this path: the request head built once, a pool of keep-alive connections, the
    limits (total and stall) as the client had them at its first send, as its URL and headers."""

    __slots__ = ("pool", "head", "timeout_s", "stall_timeout_s")

    def __init__(self, url: str, headers: dict[str, str], timeout_s: float, stall_timeout_s: float) -> None:
        self.head = RequestHead(url, headers)  # ValueError, UnicodeError: a URL or header this path cannot write
        self.pool = Pool(self.head.host, self.head.port)
        self.timeout_s, self.stall_timeout_s = timeout_s, stall_timeout_s

    async def close(self) -> None:
        self.pool.close()

    async def send(self, payload: bytes, decoder: StreamDecoder, fresh: bool,
                   headers: dict[str, str] | None = None) -> tuple[bool, Stream | None]:
        """From the send's start to the socket write nothing awaits unless a connection must be opened, so a wave's
        sends never queue behind each other; each read is stamped in the protocol as it arrives."""
        pool, head, record = self.pool, self.head, decoder.record
        record.sent_ns = sent = time.perf_counter_ns()
        loop = asyncio.get_running_loop()
        start_s = loop.time()
        conn = None if fresh or head.closes else pool.take()
        if conn is None:
            try:
                conn = await asyncio.wait_for(pool.connect(), self.timeout_s)
            except HttpError as e:
                record.error_kind, record.error = e.kind, str(e)[:300]
                return True, None
            except (asyncio.TimeoutError, TimeoutError):
                record.error_kind, record.error = "timeout", f"request exceeded {self.timeout_s:g} s"
                return True, None
        ex = Exchange(decoder.spill, REPLAY_BYTES)
        ex.last_ns = sent
        conn.start(ex, head.request(payload, headers), reuse=not (fresh or head.closes))
        record.written_ns = time.perf_counter_ns()
        dog = Watchdog(conn, ex, start_s, self.timeout_s, self.stall_timeout_s)
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
            return not ex.error.retry, None
        if ex.status != 200:
            text = b"".join(ex.reads)[:ERROR_BODY_BYTES].decode("utf-8", "replace")[:500]
            record.end_ns = time.perf_counter_ns()
            record.error_kind = f"http_{ex.status}"
            record.error = error_message(text) or ex.reason
            return True, None
        assert ex.end_ns is not None
        return True, (ex.reads, ex.stamps, ex.end_ns)
