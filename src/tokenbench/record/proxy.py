"""The forwarding side: a lean HTTP/1.1 forwarder on asyncio protocols. It reads each request from the agent
(any method and path), sends it on to the upstream (the headers but the hop-by-hop ones, the body's bytes), and
writes every byte of the answer back to the agent as it arrives, before anything else is done with it: the
answer's bytes, head and framing included, are the upstream's own (a compressed answer stays compressed). Only then
is the read parsed (``http1.Connection``'s state machine: the head, the chunked framing, the end), to know where
the answer ends and to keep, for the APIs that are recorded (``exchange.api_of``), the request's bytes and the
answer's body with the clock's readings, handed to the log writer once the answer ended.

Why not aiohttp on both sides: a proxy in front of a server adds its own time to every TTFT it forwards, and an
agent's turn waits for it. aiohttp's server and client each take their turn of the event loop and their copy of
every chunk; on a 16-core machine, with a core each, they added 0.73 ms at p50 with one stream and 3.1 ms at p99
with 32, where a bare TCP relay added 0.30 ms (``benchmarks/record_overhead.py``).

What a client sees when the upstream fails: a 502 with a one-line reason where it cannot be reached (one retry
first where a kept-alive connection was closed under the request before any answer, as llama-server closes one
after each stream); an error status and body as the upstream sent them; a connection cut where the upstream cut
its answer (a stream that ends early, never one made to look complete). A client that gives up closes the
proxy's upstream connection with it; one that goes after its stream's last event (as SDKs do, at ``[DONE]``) had
its whole answer, which is recorded. None of these is logged; each is counted by why."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import urlsplit

from .. import redact
from ..http1 import ByteStream, Connection, HttpError, Pool, byte_stream
from ..http1 import Exchange as Answer
from .exchange import PARENT_HEADER, SESSION_HEADER, Api, Exchange, api_of
from .inbound import BadRequest, Request, read_body, read_head
from .parsed import MAX_ANSWER_BYTES, stream_ended

#: Headers for one hop only (RFC 9110 7.6.1), and those written here for the next hop (Host, Content-Length).
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
                        "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length", "expect"})
#: The headers that carry a client's key: held for the upstream's tokenizer in a lengths-only log, never written.
KEY_HEADERS = ("Authorization", "x-api-key", "api-key")
CONNECT_TIMEOUT_S = 10.0
#: How long an answer whose client went after its stream's last event may take to reach its body's end.
END_GRACE_S = 5.0
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class UpstreamDown(Exception):
    """The upstream could not be reached; the message is the 502's one line."""


class Relay(Connection):
    """A connection to the upstream whose every read goes on to the client (``sink``) as it comes, then is parsed."""

    def __init__(self, pool: Pool) -> None:
        super().__init__(pool)
        self.sink: ByteStream | None = None
        self.head_only = False  # a HEAD request: the answer ends with its head
        self.paused = False  # reading paused while the client's writes are behind

    def data_received(self, data: bytes) -> None:
        if self.sink is not None:
            self.sink.write(data)
        super().data_received(data)

    def _head(self, ex: Answer, data: bytes, now: int) -> bytes:
        rest = super()._head(ex, data, now)
        if self.head_only and ex.status is not None and not ex.done:
            self._end(ex, now)
            return b""
        return rest

    def pause(self, paused: bool) -> None:
        t = cast(Any, self.transport)
        if t is not None and not t.is_closing() and paused != self.paused:
            self.paused = paused
            t.pause_reading() if paused else t.resume_reading()


class Upstream(Pool):
    """Kept-alive connections to the upstream, with what a request's head needs of its URL."""

    def __init__(self, root: str) -> None:
        u = urlsplit(root)
        https = u.scheme == "https"
        super().__init__(u.hostname or "", u.port or (443 if https else 80))
        self.netloc = u.netloc.rsplit("@", 1)[-1]
        self.prefix = u.path.rstrip("/")
        self.where = redact.url(root)
        self.tls = ssl.create_default_context() if https else None

    async def connect(self) -> Relay:
        loop = asyncio.get_running_loop()
        try:
            _, proto = await asyncio.wait_for(loop.create_connection(
                lambda: Relay(self), self.host, self.port, ssl=self.tls), CONNECT_TIMEOUT_S)
        except (asyncio.TimeoutError, TimeoutError):
            raise UpstreamDown(f"the upstream {self.where} did not accept a connection within "
                               f"{CONNECT_TIMEOUT_S:g} s") from None
        except ssl.SSLError as e:
            raise UpstreamDown(f"the upstream {self.where} failed the TLS handshake ({e.reason or e})") from None
        except OSError as e:
            raise UpstreamDown(f"cannot reach the upstream {self.where} ({e.strerror or type(e).__name__}): "
                               "is it running?") from None
        self.open.add(proto)
        return proto


class Kept(Answer):
    """The upstream's answer to one request: its body kept in ``reads`` where it is recorded (``keep``), with the
    time of its first byte; ``flight.ended`` is called once it ends, whole or not."""

    __slots__ = ("flight", "keep", "first_ns", "over")

    def __init__(self, flight: Flight, keep: bool) -> None:
        super().__init__(None, MAX_ANSWER_BYTES)
        self.flight, self.keep = flight, keep
        self.first_ns: int | None = None
        self.over = False  # past MAX_ANSWER_BYTES: forwarded, not kept

    def add(self, data: bytes, now: int) -> bool:
        if self.first_ns is None:
            self.first_ns = now
        if self.keep:
            self.reads.append(data)
            self.held += len(data)
            if self.held > MAX_ANSWER_BYTES:
                self.keep, self.over, self.reads = False, True, []
        return True  # forwarded whole, whatever is kept

    def finish(self, now: int, error: HttpError | None = None) -> None:
        if not self.done:
            super().finish(now, error)
            self.flight.ended(self)


class Flight:
    """One request from its read to its answer's end, on one upstream connection (a second, once, where a kept-alive
    one was closed under it before any answer)."""

    def __init__(self, proxy: Proxy, client: Client, req: Request, body: bytes, api: Api | None) -> None:
        self.proxy, self.client, self.req, self.body, self.api = proxy, client, req, body, api
        self.payload = proxy.request_bytes(req, body)
        self.sid = req.header(SESSION_HEADER) or None if api else None
        self.sent = proxy.clock()
        self.conn: Relay | None = None
        self.answer: Kept | None = None
        self.reused = False
        self.retried = False
        self.left = False  # the client went before the answer ended
        self.whole = False  # ... after reading its stream's last event: its answer is whole
        self.late: asyncio.TimerHandle | None = None  # when a whole answer's end stops being waited for
        self.over = False  # this flight has ended
        self.task: asyncio.Future[None] | None = None

    def start(self, conn: Relay, reused: bool) -> None:
        self.conn, self.reused = conn, reused
        conn.sink = self.client.transport
        conn.head_only = self.req.method == "HEAD"
        self.answer = Kept(self, self.api is not None)
        conn.start(self.answer, self.payload)

    async def connect(self) -> None:
        try:
            conn = await self.proxy.pool.connect()
        except UpstreamDown as e:
            if not self.over:
                self.client.answer("502 Bad Gateway", f"tokenbench record: {e}\n")
                self._end("the upstream could not be reached")
            return
        if self.over:  # the client went while the connection was opened
            self.proxy.pool.give_back(conn)
            return
        self.start(conn, reused=False)

    def ended(self, ans: Kept) -> None:
        """The answer ended: whole, cut by the upstream, or cut here because the client went."""
        assert self.conn is not None
        self.conn.sink = None
        self.conn.pause(False)  # back to the pool reading, whatever the client's pace was
        if self.late is not None:
            self.late.cancel()
        if self.left and not self.whole:
            self._end(self._why_cut("the client gave up"))
            return
        err = ans.error
        if err is not None and err.retry:  # closed before any byte of an answer
            if self.reused and not self.retried:
                self.retried = True
                self.task = asyncio.ensure_future(self.connect())
                return
            where = self.proxy.pool.where
            self.client.answer("502 Bad Gateway", f"tokenbench record: the upstream {where} closed the connection "
                                                  "before answering\n")
            self._end("the upstream could not be reached")
        elif err is not None:  # the answer was cut: so is the client's, never made to look whole
            self.client.close()
            self._end(self._why_cut("the upstream cut its answer"))
        else:
            if not ans.keep_alive or self.req.closes:
                self.client.close()
            self._end(self._why_done(ans))

    @staticmethod
    def _unkept(ans: Kept | None) -> str | None:
        """Why an answer is not recorded whatever became of it: an error status, or a size past the log's."""
        if ans is not None and ans.status is not None and not 200 <= ans.status < 300:
            return f"the upstream answered HTTP {ans.status}"
        if ans is not None and ans.over:
            return f"an answer over {MAX_ANSWER_BYTES >> 20} MiB"
        return None

    def _why_cut(self, why: str) -> str | None:
        """Why an answer was not recorded; a stop's cut says so, where the client's connection was cut by it, or
        where the client had gone with its whole answer, and the upstream's cut was the stop's."""
        stopped = self.proxy.stopping and (why == "the client gave up" or self.whole)
        return self._unkept(self.answer) or ("cut by the stop" if stopped else why)

    def _why_done(self, ans: Kept) -> str | None:
        """None where the answer was whole and is recorded (handed to the writer here)."""
        if (why := self._unkept(ans)) is not None or ans.status is None:
            return why or f"the upstream answered HTTP {ans.status}"
        if self.api is not None:
            self.proxy.hand(self._exchange(ans))
        return None

    def client_left(self) -> None:
        if self.over or self.left:
            return
        self.left = True
        ans = self.answer
        if self.conn is None or ans is None or ans.done:
            self._end(self._why_cut("the client gave up"))
        elif self.api is not None and ans.keep and stream_ended(self.api, ans.headers.get("content-type", ""),
                                                                ans.headers.get("content-encoding", ""), ans.reads):
            # an SDK closes its connection at the stream's last event, before the chunked body's own end: the
            # answer is whole, and recorded once that end comes (the upstream's read no longer waits on the client)
            self.whole = True
            self.conn.sink = None
            self.conn.pause(False)
            self.late = asyncio.get_running_loop().call_later(END_GRACE_S, self._not_ended)
        else:
            self.conn.close()  # the upstream sees its client go; its connection_lost ends the answer

    def _not_ended(self) -> None:
        """A whole stream whose body did not end within END_GRACE_S: cut, as a client that gave up."""
        self.whole = False
        if self.conn is not None:
            self.conn.close()

    def _end(self, why: str | None) -> None:
        if self.over:
            return
        self.over = True
        if why is not None and self.api is not None:
            self.proxy.failed[why] += 1
        self.proxy.landed(self)

    def _exchange(self, ans: Kept) -> Exchange:
        p = self.proxy
        end = p.clock()
        first = (ans.first_ns / 1e9 - p.clock0) if ans.first_ns is not None else end
        overlapped = self.sid is not None and any(t < self.sent for t in p.sessions.get(self.sid, ()))
        auth = {k: v for k in KEY_HEADERS if (v := self.req.header(k))} if p.keys else {}
        assert self.api is not None
        return Exchange(self.api, self.body, self.sent, first, end, ans.status or 0,
                        ans.headers.get("content-type", ""), ans.headers.get("content-encoding", ""), ans.reads,
                        self.sid, self.req.header(PARENT_HEADER) or None, overlapped, auth)


class Client(asyncio.Protocol):
    """One agent's connection: its requests read one at a time (a second sent before the first's answer waits in
    the buffer), each forwarded as a ``Flight``."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.transport: ByteStream | None = None
        self.buf = bytearray()
        self.head: Request | None = None
        self.flight: Flight | None = None
        self.continued = False
        self.gone = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = byte_stream(transport)
        self.proxy.clients.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = True
        self.proxy.clients.discard(self)
        if self.flight is not None:
            self.flight.client_left()

    def eof_received(self) -> bool:
        return False  # a client that half-closes has gone: its connection closes, as aiohttp's server does

    def pause_writing(self) -> None:  # a client slower than its upstream: the upstream waits for it
        if self.flight is not None and self.flight.conn is not None:
            self.flight.conn.pause(True)

    def resume_writing(self) -> None:
        if self.flight is not None and self.flight.conn is not None:
            self.flight.conn.pause(False)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.flight is None:
            self.next()

    def next(self) -> None:
        """Forward the next whole request in the buffer, if one is there and none is in flight."""
        while self.flight is None and not self.gone and self.buf:
            try:
                if self.head is None:
                    self.head = read_head(self.buf)
                    if self.head is None:
                        return
                got = read_body(self.head, self.buf)
            except BadRequest as e:
                self.answer(e.status, f"tokenbench record: {e}\n")
                self.close()
                return
            if got is None:
                if not self.continued and self.head.header("expect").lower() == "100-continue":
                    self.continued = True
                    self.write(CONTINUE)
                return
            body, used = got
            req, self.head, self.continued = self.head, None, False
            del self.buf[:used]
            self.proxy.forward(self, req, body)

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def answer(self, status: str, text: str) -> None:
        """An answer of this forwarder's own (a 502, a 400): one line of text."""
        body = text.encode()
        self.write(f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}"
                   f"\r\n\r\n".encode() + body)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            cast(Any, self.transport).abort()


class Proxy:
    """The forwarder: ``serve`` listens, ``stop`` ends it. ``hand`` receives each recorded exchange as its answer
    ends; ``counts``: forwarded requests, and the recorded APIs' failures (``failed``) by why."""

    def __init__(self, upstream: str, clock0: float, hand: Callable[[Exchange], None], keys: bool = False) -> None:
        self.pool = Upstream(upstream.rstrip("/"))
        self.clock0 = clock0
        self.hand = hand
        self.keys = keys  # keep the client's key headers for the writer (a lengths-only log's tokenizer)
        self.counts: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.stopping = False
        self.clients: set[Client] = set()
        self.flights: set[Flight] = set()
        self.sessions: dict[str, list[float]] = {}  # X-Session-ID -> sent times of its requests in flight
        self.server: asyncio.base_events.Server | None = None
        self.drained: asyncio.Event | None = None  # set by stop: the last flight's landing sets it

    async def serve(self, host: str, port: int) -> int:
        """Listen on ``host:port``; the port it listens on (OSError where it cannot)."""
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: Client(self), host or None, port)
        return int(self.server.sockets[0].getsockname()[1])

    def clock(self) -> float:
        return time.perf_counter() - self.clock0

    def request_bytes(self, req: Request, body: bytes) -> bytes:
        """The request as the upstream gets it: its own Host and Content-Length, the hop-by-hop headers left out
        (those RFC 9110 names, and those the client's Connection header names); in the client's version where that
        is HTTP/1.0, so the upstream answers in framing the client reads (no chunks: the body ends with the
        connection), which the agent then gets unchanged."""
        named = {t.strip().lower() for t in req.header("connection").split(",")}
        version = "HTTP/1.0" if req.version == "HTTP/1.0" else "HTTP/1.1"
        lines = [f"{req.method} {self.pool.prefix}{req.target} {version}", f"Host: {self.pool.netloc}"]
        lines += [f"{k}: {v}" for k, v in req.headers if k.lower() not in HOP_BY_HOP and k.lower() not in named]
        if body or req.method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    def forward(self, client: Client, req: Request, body: bytes) -> None:
        """Send the request on: at once on a kept-alive connection, else once one is opened."""
        self.counts["forwarded"] += 1
        api = api_of(req.method, req.path)
        if api is None:
            self.counts["not recorded"] += 1
        fl = Flight(self, client, req, body, api)
        client.flight = fl
        self.flights.add(fl)
        if fl.sid is not None:
            self.sessions.setdefault(fl.sid, []).append(fl.sent)
        conn = self.pool.take()
        if conn is not None:
            fl.start(cast(Relay, conn), reused=True)
        else:
            fl.task = asyncio.ensure_future(fl.connect())

    def landed(self, fl: Flight) -> None:
        """A flight ended: its session's count of requests in flight falls, and its client reads on."""
        self.flights.discard(fl)
        if fl.sid is not None:
            times = self.sessions[fl.sid]
            times.remove(fl.sent)
            if not times:
                del self.sessions[fl.sid]
        client = fl.client
        client.flight = None
        if self.drained is not None and not self.flights:
            self.drained.set()
        if self.stopping:
            client.close()
        elif client.buf:
            client.next()

    async def stop(self, grace_s: float) -> None:
        """Stop listening; requests in flight get ``grace_s`` to end, then are cut (counted so); idle connections
        close."""
        self.stopping = True
        if self.server is not None:
            self.server.close()
        for c in list(self.clients):
            if c.flight is None:
                c.close()
        self.drained = asyncio.Event()
        if self.flights:
            try:  # woken by the last flight's landing, not a poll
                await asyncio.wait_for(self.drained.wait(), grace_s)
            except asyncio.TimeoutError:
                pass
        for fl in list(self.flights):
            fl.client.abort()
            fl.client_left()
        self.pool.close()
        await asyncio.sleep(0)  # the closed transports' callbacks run
