"""The lean send path (``http1.py``) held to the old one: the same body bytes, the same stream bytes with
the same stamps, the same records, against generated responses cut anywhere and against the emitter's faults."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_hot_path import CLIENT, EXAMPLES, _bytes, frame
from tokenbench import http1
from tokenbench.client import PreparedRequest, StreamClient
from tokenbench.decoder import StreamDecoder
from tokenbench.emitter import BackgroundEmitter
from tokenbench.records import RequestRecord


# ---- the body: a template with the prompt spliced in is json.dumps of the whole body ------------------------------

json_value = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                                    st.text(max_size=6)),
                          lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                  st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                          max_leaves=5)


@settings(max_examples=EXAMPLES // 10, deadline=None, suppress_health_check=list(HealthCheck))
@given(prompts=st.lists(st.text(), min_size=1, max_size=4), max_tokens=st.integers(1, 3),
       api=st.sampled_from(["completions", "chat"]), temperature=st.sampled_from([None, 0.0, 0.7, 0, False]),
       extras=st.dictionaries(st.sampled_from(["ignore_eos", "min_tokens", "prompt", "max_tokens", "stop", "x"]),
                              json_value, max_size=3),
       own=st.one_of(st.just({}), st.dictionaries(st.sampled_from(["min_tokens", "seed"]), json_value, max_size=2)),
       replaced=st.dictionaries(st.sampled_from(["ignore_eos", "prompt"]), json_value, max_size=2))
def test_a_templated_body_is_the_body_json_dumps_writes(prompts: list[str], max_tokens: int, api: Any,
                                                        temperature: float | None, extras: dict[str, Any],
                                                        own: dict[str, Any], replaced: dict[str, Any]) -> None:
    c = StreamClient(http=None, base_url="http://127.0.0.1:9/v1", model="m", api=api,  # type: ignore[arg-type]
                     temperature=temperature, body_extras=extras)
    for body_extras, t in ((extras, temperature), (replaced, temperature), (replaced, 0.0)):
        c.body_extras = body_extras  # a sweep replaces the extras between the preflight and the levels
        c.temperature = t
        for p in prompts:
            req = PreparedRequest(p, max_tokens, extra_body=own)
            assert c.payload(req) == json.dumps(c.body(req)).encode()


# ---- the response: the lean parser's reads and stamps give the record the old path gives --------------------------

def _chunked(body: bytes, sizes: list[int], ext: bool, trailer: bool) -> tuple[bytes, list[int]]:
    """``body`` as a chunked HTTP/1.1 response, and for each byte of it how much of the body it completes."""
    out = bytearray(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    done = [0] * len(out)
    pos, i = 0, 0
    while pos < len(body):
        n = max(1, sizes[i % len(sizes)] if sizes else len(body))
        i += 1
        data = body[pos:pos + n]
        line = b"%x%s\r\n" % (len(data), b";x=1" if ext else b"")
        out += line
        done += [pos] * len(line)
        out += data
        done += list(range(pos + 1, pos + len(data) + 1))
        pos += len(data)
        out += b"\r\n"
        done += [pos] * 2
    tail = b"0\r\n" + (b"X-T: 1\r\n" if trailer else b"") + b"\r\n"
    out += tail
    done += [pos] * len(tail)
    return bytes(out), done


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False
        self.written: list[bytes] = []

    def write(self, data: Any) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def _lean(raw: bytes, cuts: list[int]) -> tuple[http1.Exchange, list[int], bool]:
    """Feed ``raw`` to a connection in reads cut at ``cuts``; the exchange, each read's stamp, and whether the
    connection is still fit to reuse."""
    pool = http1.Pool("127.0.0.1", 9)
    conn = http1.Connection(pool)
    conn.connection_made(_Transport())
    ex = http1.Exchange(None, 1 << 30)
    conn.start(ex, b"")
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(raw)}), len(raw)]
    seen = []
    for a, b in zip(bounds, bounds[1:]):
        conn.data_received(raw[a:b])
        seen.append(ex.last_ns)
    return ex, seen, pool.take() is conn


def _record(reads: list[bytes], stamps: list[int], end: int, chat: bool, replay: bool) -> RequestRecord:
    rec = RequestRecord(index=0)
    dec = StreamDecoder(rec, chat)
    if replay:
        dec.replay(reads, stamps)
    else:
        for d, t in zip(reads, stamps):
            dec.feed(d, t)
    if dec.close(end):
        CLIENT._count_tokens(rec, dec.usage)
    return rec


@settings(max_examples=EXAMPLES // 10, deadline=None, suppress_health_check=list(HealthCheck))
@given(frames=st.lists(frame, max_size=8), chat=st.booleans(), sizes=st.lists(st.integers(1, 300), max_size=4),
       ext=st.booleans(), trailer=st.booleans(), cuts=st.lists(st.integers(0, 6000), max_size=10))
def test_the_lean_parser_gives_the_record_the_old_path_gives(frames: list[tuple[str, Any]], chat: bool,
                                                            sizes: list[int], ext: bool, trailer: bool,
                                                            cuts: list[int]) -> None:
    body = _bytes(frames, chat, False) + b"data: [DONE]\n\n"
    raw, done = _chunked(body, sizes, ext, trailer)
    ex, seen, reusable = _lean(raw, cuts)
    assert ex.done and ex.error is None and ex.status == 200 and reusable
    assert b"".join(ex.reads) == body and all(ex.reads)
    # the old path: each read's body bytes (as aiohttp's parser hands them over) with that read's stamp
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(raw)}), len(raw)]
    old_reads, old_stamps = [], []
    for (a, b), t in zip(zip(bounds, bounds[1:]), seen):
        lo, hi = done[a - 1] if a else 0, done[b - 1]
        if hi > lo:
            old_reads.append(body[lo:hi])
            old_stamps.append(t)
    assert ex.reads == old_reads and ex.stamps == old_stamps
    end = ex.end_ns or 0
    assert (_record(ex.reads, ex.stamps, end, chat, replay=True).to_dict(keep_text=True)
            == _record(old_reads, old_stamps, end, chat, replay=False).to_dict(keep_text=True))


@given(body=st.binary(max_size=300), cuts=st.lists(st.integers(0, 400), max_size=5), by_length=st.booleans())
@settings(deadline=None)
def test_a_body_by_length_or_by_close_is_read_whole(body: bytes, cuts: list[int], by_length: bool) -> None:
    head = (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) if by_length
            else b"HTTP/1.0 200 OK\r\n\r\n")
    conn = http1.Connection()
    conn.connection_made(_Transport())
    ex = http1.Exchange(None, 1 << 30)
    conn.start(ex, b"")
    raw = head + body
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(raw)}), len(raw)]
    for a, b in zip(bounds, bounds[1:]):
        conn.data_received(raw[a:b])
    if not by_length:
        assert not ex.done
        conn.connection_lost(None)
    assert ex.done and ex.error is None and b"".join(ex.reads) == body


def test_a_response_without_a_body_ends_at_its_head() -> None:
    conn = http1.Connection()
    conn.connection_made(_Transport())
    ex = http1.Exchange(None, 1 << 30)
    conn.start(ex, b"")
    conn.data_received(b"HTTP/1.1 204 No Content\r\n\r\n")
    assert ex.done and ex.error is None and ex.status == 204 and ex.reads == []


@pytest.mark.parametrize("raw, kind, retry", [
    (b"", "disconnected", True),  # a pooled connection the server had closed: sent again
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\ndata:", "stream_broken", False),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", "stream_broken", False),
])
def test_a_connection_lost_early_is_an_error_of_its_kind(raw: bytes, kind: str, retry: bool) -> None:
    conn = http1.Connection()
    conn.connection_made(_Transport())
    ex = http1.Exchange(None, 1 << 30)
    conn.start(ex, b"")
    if raw:
        conn.data_received(raw)
    conn.connection_lost(ConnectionResetError("reset"))
    assert ex.done and ex.error is not None and ex.error.kind == kind and ex.error.retry == retry


@pytest.mark.parametrize("raw", [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                                 b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x1\r\n",
                                 b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
                                 b"SSH-2.0-OpenSSH\r\n\r\n"])
def test_a_response_it_cannot_read_is_refused_not_guessed(raw: bytes) -> None:
    conn = http1.Connection()
    conn.connection_made(_Transport())
    ex = http1.Exchange(None, 1 << 30)
    conn.start(ex, b"")
    conn.data_received(raw)
    assert ex.done and ex.error is not None and "unreadable response" in str(ex.error) and conn.closed


# ---- the two paths against the emitter: the same records, faults included ----------------------------------------

async def _both(url: str, **kw: Any) -> list[RequestRecord]:
    out = []
    async with aiohttp.ClientSession() as session:
        for lean in (False, True):
            c = StreamClient(http=session, base_url=url, model="emitter", lean=lean, **kw)
            try:
                for i in range(2):  # the second on the pooled connection
                    rec = RequestRecord(index=i)
                    out.append(await c.send(PreparedRequest("a b c d", 6, 4), rec))
            finally:
                await c.close()
    return out


def _same(r: RequestRecord) -> tuple[Any, ...]:
    return (r.ok, r.error_kind, r.http_status, len(r.chunk_ns), list(r.chunk_chars), r.answer_text, r.output_tokens,
            r.output_tokens_source, r.input_tokens, r.finish_reason, r.malformed_events, r.connection_retries)


@pytest.mark.parametrize("config", [{}, {"itl_s": 0.002}, {"fault": "http500"}, {"fault": "malformed", "fault_after": 1},
                                    {"fault": "error_event", "fault_after": 1}, {"fault": "broken", "fault_after": 2},
                                    {"keepalive": True}, {"close_after_stream_s": 0.0}, {"burst": True}])
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_the_lean_path_records_what_the_aiohttp_path_records(emitter: BackgroundEmitter, config: dict[str, Any],
                                                             api: str) -> None:
    emitter.configure(**config)
    old1, old2, new1, new2 = asyncio.run(_both(emitter.url, api=api))
    assert _same(new1) == _same(old1) and _same(new2) == _same(old2)
    for r in (new1, new2):
        assert r.written_ns is not None and r.sent_ns <= r.written_ns
        assert r.first_byte_ns is None or r.written_ns <= r.first_byte_ns <= (r.end_ns or 0)


def test_the_lean_path_times_out_and_stalls_as_the_old_one(emitter: BackgroundEmitter) -> None:
    emitter.configure(fault="stall", fault_after=2, itl_s=0.01, stall_s=0.6)  # the emitter's handlers end too
    recs = asyncio.run(_both(emitter.url, stall_timeout_s=0.3))
    assert [r.error_kind for r in recs] == ["stall"] * 4 and {len(r.chunk_ns) for r in recs} == {2}
    emitter.configure(itl_s=0.1)
    recs = asyncio.run(_both(emitter.url, timeout_s=0.3))
    assert [r.error_kind for r in recs] == ["timeout"] * 4
    time.sleep(0.4)  # the emitter's streams end before the next test's


def test_an_https_url_or_an_unwritable_header_stays_on_aiohttp() -> None:
    c = StreamClient(http=None, base_url="https://example.invalid/v1", model="m")  # type: ignore[arg-type]
    assert c._lean_path() is None
    c = StreamClient(http=None, base_url="http://127.0.0.1:9/v1", model="m", api_key="clé\u2603")  # type: ignore[arg-type]
    assert c._lean_path() is None and not c.lean
    c = StreamClient(http=None, base_url="http://127.0.0.1:9/v1", model="m", api_key="k")  # type: ignore[arg-type]
    assert c._lean_path() is not None


def test_the_loopback_servers_frame_requests_by_content_length() -> None:
    """http1.next_request, the framing the lean emitter and the send-cost sink share: nothing until a request has
    all come in, then each of two pipelined requests whole, the rest kept."""
    from tokenbench.http1 import next_request

    one = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\ncontent-LENGTH: 5\r\n\r\nhello"
    two = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    for cut in range(len(one)):
        assert next_request(one[:cut]) is None
    got = next_request(one + two + b"POST")
    assert got is not None and got[0].startswith("POST /v1/completions") and got[1] == b"hello"
    rest = got[2]
    assert next_request(rest) == ("GET /v1/models HTTP/1.1\r\nHost: x", b"", b"POST")
