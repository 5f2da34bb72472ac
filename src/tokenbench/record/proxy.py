"""The forwarding side: an aiohttp server that sends every request on to the upstream as it came (any method and
path, the body's bytes, the headers but the hop-by-hop ones) and streams the answer back chunk by chunk as it
arrives, its bytes unchanged (a compressed answer stays compressed). Nothing is parsed here: for the APIs that are
recorded (``exchange.api_of``) the request's and the answer's bytes are kept as they pass, with the clock's
readings, and handed to the log writer once the answer ended.

What a client sees when the upstream fails: a 502 with a one-line reason where it cannot be reached (one retry
first where a kept-alive connection was closed under the request before any answer, as llama-server closes one
after each stream); an error status and body as the upstream sent them; a connection cut where the upstream cut
its answer (a stream that ends early, never one made to look complete). A client that gives up closes the
proxy's upstream connection with it. None of these is logged; each is counted by why."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from .. import redact
from .exchange import PARENT_HEADER, SESSION_HEADER, Api, Exchange, api_of
from .parsed import MAX_ANSWER_BYTES

#: Headers for one hop only (RFC 9110 7.6.1), and those aiohttp writes itself for the next hop.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
                        "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length"})
#: What aiohttp's client would add to a request unasked: the client's own, or none, is sent instead.
SKIP_AUTO = frozenset({"Accept", "Accept-Encoding", "User-Agent", "Content-Type"})
#: The headers that carry a client's key: held for the upstream's tokenizer in a lengths-only log, never written.
KEY_HEADERS = ("Authorization", "x-api-key", "api-key")
CONNECT_TIMEOUT_S = 10.0


class UpstreamDown(Exception):
    """The upstream could not be reached; the message is the 502's one line."""


def _forwarded(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    named = {h.strip().lower() for h in headers.get("Connection", "").split(",")}
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in HOP_BY_HOP and k.lower() not in named)


class Proxy:
    """``handle`` is the aiohttp handler of every path. ``hand`` receives each recorded exchange as its answer
    ends; ``counts``: forwarded requests, and the recorded APIs' failures by why."""

    def __init__(self, upstream: str, clock0: float, hand: Callable[[Exchange], None], keys: bool = False) -> None:
        self.upstream = upstream.rstrip("/")
        self.clock0 = clock0
        self.hand = hand
        self.keys = keys  # keep the client's key headers for the writer (a lengths-only log's tokenizer)
        self.counts: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.stopping = False
        self._in_flight: dict[str, list[float]] = {}  # X-Session-ID -> sent times of its requests in flight
        self.http: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
            auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar())

    async def close(self) -> None:
        if self.http is not None:
            await self.http.close()

    def clock(self) -> float:
        return time.perf_counter() - self.clock0

    def _fail(self, api: str | None, why: str) -> None:
        if api is not None:
            self.failed["cut by the stop" if self.stopping and why == "the client gave up" else why] += 1

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.counts["forwarded"] += 1
        api = api_of(request.method, request.path)
        if api is None:
            self.counts["not recorded"] += 1
        body = await request.read()
        headers = _forwarded(request.headers)
        sid = request.headers.get(SESSION_HEADER) if api else None
        sent = self.clock()
        if sid is not None:
            self._in_flight.setdefault(sid, []).append(sent)
        try:
            try:
                up = await self._send(request.method, request.raw_path, headers, body)
            except UpstreamDown as e:
                self._fail(api, "the upstream could not be reached")
                return web.Response(status=502, text=f"tokenbench record: {e}\n")
            except asyncio.CancelledError:
                self._fail(api, "the client gave up")
                raise
            try:
                return await self._relay(request, up, api, body, sent, sid)
            finally:
                up.close()
        finally:
            if sid is not None:
                self._done(sid, sent)

    def _done(self, sid: str, sent: float) -> None:
        times = self._in_flight[sid]
        times.remove(sent)
        if not times:
            del self._in_flight[sid]

    async def _send(self, method: str, path: str, headers: CIMultiDict[str], body: bytes) -> aiohttp.ClientResponse:
        assert self.http is not None
        url = URL(self.upstream + path, encoded=True)
        for attempt in (1, 2):
            try:
                return await self.http.request(method, url, headers=headers, data=body or None,
                                                  allow_redirects=False, skip_auto_headers=SKIP_AUTO)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
                if attempt == 2 or isinstance(e, aiohttp.ClientConnectorError):
                    raise UpstreamDown(self._why(e)) from None
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
                raise UpstreamDown(self._why(e)) from None
        raise AssertionError("unreachable")

    def _why(self, e: BaseException) -> str:
        where = redact.url(self.upstream)
        if isinstance(e, asyncio.TimeoutError):
            return f"the upstream {where} did not accept a connection within {CONNECT_TIMEOUT_S:g} s"
        if isinstance(e, aiohttp.ClientConnectorError):
            return f"cannot reach the upstream {where} ({e.os_error.strerror or type(e.os_error).__name__}): is it running?"
        return f"the upstream {where} closed the connection before answering ({type(e).__name__})"

    async def _relay(self, request: web.Request, up: aiohttp.ClientResponse, api: Api | None, body: bytes, sent: float,
                     sid: str | None) -> web.StreamResponse:
        resp = web.StreamResponse(status=up.status, reason=up.reason, headers=_forwarded(up.headers))
        if up.headers.get("Content-Length") is not None and "Transfer-Encoding" not in up.headers:
            resp.content_length = up.content_length
        keep = api is not None and 200 <= up.status < 300
        if api is not None and not keep:
            self._fail(api, f"the upstream answered HTTP {up.status}")
        chunks: list[bytes] = []
        size = 0
        first: float | None = None
        try:
            await resp.prepare(request)
            while True:
                try:
                    data = await up.content.readany()
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    return self._cut(request, resp, api if keep else None)
                if not data:
                    break
                if first is None:
                    first = self.clock()
                await resp.write(data)
                if keep:
                    chunks.append(data)
                    size += len(data)
                    if size > MAX_ANSWER_BYTES:
                        keep, chunks = False, []
                        self._fail(api, f"an answer over {MAX_ANSWER_BYTES >> 20} MiB")
            await resp.write_eof()
        except (ConnectionError, aiohttp.ClientConnectionResetError):
            self._fail(api if keep else None, "the client gave up")
            return resp
        except asyncio.CancelledError:
            self._fail(api if keep else None, "the client gave up")
            raise
        end = self.clock()
        if keep and api is not None:
            self.hand(self._exchange(request, api, up, body, chunks, sent, first, end, sid))
        return resp

    def _cut(self, request: web.Request, resp: web.StreamResponse, api: Api | None) -> web.StreamResponse:
        """The upstream cut its answer: the client's is cut the same way (its connection closed before the
        answer's end), never ended as if it were whole."""
        self._fail(api, "the upstream cut its answer")
        if request.transport is not None:
            request.transport.close()
        return resp

    def _exchange(self, request: web.Request, api: Api, up: aiohttp.ClientResponse, body: bytes,
                  chunks: list[bytes], sent: float, first: float | None, end: float, sid: str | None) -> Exchange:
        overlapped = sid is not None and any(t < sent for t in self._in_flight.get(sid, ()))
        auth = {k: request.headers[k] for k in KEY_HEADERS if k in request.headers} if self.keys else {}
        return Exchange(api, body, sent, first if first is not None else end, end, up.status,
                        up.headers.get("Content-Type", ""), up.headers.get("Content-Encoding", ""), chunks,
                        sid, request.headers.get(PARENT_HEADER), overlapped, auth)
