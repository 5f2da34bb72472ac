"""The send path on any asyncio event loop, uvloop's above all.

uvloop's transports are no ``asyncio.Transport`` (not even a ``BaseTransport``): they behave as one, and that is all
the send path may rely on. Ray's async actors run on uvloop wherever it is installed (vLLM's environment installs
it), and the lean path once asserted the class: ``sweep --ray`` against the emitter stopped every worker with an
AssertionError and measured nothing. tests/test_ray.py runs the same in a real Ray actor."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import aiohttp
import pytest
import uvloop  # in the test extra

from test_send_path import _both, _same
from tokenbench.client import PreparedRequest, StreamClient
from tokenbench.emitter import BackgroundEmitter, EmitterConfig
from tokenbench.lean_emitter import LeanServer
from tokenbench.records import RequestRecord

T = TypeVar("T")


def on_uvloop(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a uvloop event loop, as a Ray actor runs its calls."""
    async def checked() -> T:
        assert type(asyncio.get_running_loop()).__module__.startswith("uvloop")
        return await coro

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(checked())


@pytest.mark.parametrize("config", [{}, {"itl_s": 0.002}, {"fault": "http500"}, {"fault": "broken", "fault_after": 2},
                                    {"close_after_stream_s": 0.0}, {"burst": True}])
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_on_uvloop_the_lean_path_records_what_the_aiohttp_path_records(emitter: BackgroundEmitter,
                                                                      config: dict[str, Any], api: str) -> None:
    emitter.configure(**config)
    old1, old2, new1, new2 = on_uvloop(_both(emitter.url, api=api))
    assert _same(new1) == _same(old1) and _same(new2) == _same(old2)
    if not config or "itl_s" in config or "burst" in config:
        assert new1.ok and new2.ok and new1.output_tokens == 6 and new2.connection_retries == 0
    for r in (new1, new2):
        assert r.written_ns is not None and r.sent_ns <= r.written_ns
        assert r.first_byte_ns is None or r.written_ns <= r.first_byte_ns <= (r.end_ns or 0)


def test_on_uvloop_the_lean_path_times_out_and_stalls(emitter: BackgroundEmitter) -> None:
    import time

    emitter.configure(fault="stall", fault_after=2, itl_s=0.01, stall_s=0.6)
    recs = on_uvloop(_both(emitter.url, stall_timeout_s=0.3))
    assert [r.error_kind for r in recs] == ["stall"] * 4 and {len(r.chunk_ns) for r in recs} == {2}
    emitter.configure(itl_s=0.1)
    recs = on_uvloop(_both(emitter.url, timeout_s=0.3))
    assert [r.error_kind for r in recs] == ["timeout"] * 4
    time.sleep(0.4)  # the emitter's streams end before the next test's


def test_on_uvloop_a_refused_connection_is_recorded() -> None:
    async def send() -> RequestRecord:
        async with aiohttp.ClientSession() as session:
            c = StreamClient(http=session, base_url="http://127.0.0.1:9/v1", model="m")
            try:
                return await c.send(PreparedRequest("a", 2), RequestRecord(index=0))
            finally:
                await c.close()

    rec = on_uvloop(send())
    assert rec.error_kind == "connection" and not rec.ok


def test_on_uvloop_the_lean_emitter_serves_the_lean_client() -> None:
    """Both of tokenbench's own asyncio protocols on one uvloop loop: the lean emitter (``emitter --lean``) and the
    lean send path, many streams at once on pooled connections."""
    async def run() -> tuple[list[RequestRecord], dict[str, Any]]:
        stamps: dict[str, tuple[int, int, int]] = {}
        config = EmitterConfig(ttft_s=0.01, itl_s=0.001)
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: LeanServer(config, stamps), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, aiohttp.ClientSession() as session:
            c = StreamClient(http=session, base_url=f"http://127.0.0.1:{port}/v1", model="emitter")
            try:
                recs = []
                for wave in range(2):  # the second wave on the first's pooled connections
                    recs += await asyncio.gather(*(c.send(PreparedRequest(f"p{wave}-{i}", 5), RequestRecord(index=i))
                                                   for i in range(8)))
            finally:
                await c.close()
        return recs, stamps

    recs, stamps = on_uvloop(run())
    assert all(r.ok and r.output_tokens == 5 and r.answer_text == " w0 w1 w2 w3 w4" for r in recs), \
        [(r.error_kind, r.error) for r in recs]
    assert len(stamps) == 16
