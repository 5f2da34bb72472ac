"""The client overhead benchmark's lean emitter (``lean_emitter.LeanServer``, ``--lean``): several processes share one
port and each keeps its own stamps, its paced stream is what the lean client reads, and its timers are not rounded
up to whole milliseconds."""

from __future__ import annotations

import asyncio
import json
import selectors
import subprocess
import sys
import urllib.request
from typing import Any

import aiohttp
import pytest

from tokenbench.client import PreparedRequest, StreamClient
from tokenbench.emitter import EmitterProcess, answers
from tokenbench.lean_emitter import _FineEpoll
from tokenbench.engines.launch import free_port
from tokenbench.records import RequestRecord


def _stamps(root: str) -> dict[str, Any]:
    with urllib.request.urlopen(root + "/stats", timeout=10) as r:
        stamps: dict[str, Any] = json.loads(r.read())["stamps"]
    return stamps


async def _send(url: str, n: int) -> list[int]:
    """``n`` paced streams, each on a connection of its own; the tokens each read."""
    async def one(i: int) -> int:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s, \
                s.post(url + "/v1/completions", json={"prompt": f"p{i} x", "max_tokens": 3, "stream": True}) as r:
            body = (await r.read()).decode()
        return sum(1 for line in body.splitlines() if line.startswith("data: {") and '"text": " w' in line)
    return list(await asyncio.gather(*[one(i) for i in range(n)]))


def test_lean_emitters_share_a_port_and_each_keeps_its_own_stamps() -> None:
    port, own = free_port(), [free_port(), free_port()]
    procs = [subprocess.Popen([sys.executable, "-m", "tokenbench.emitter", "--lean", "--port", str(port),
                               "--ttft", "0.005", "--itl", "0.001", "--reuse-port", "--own-port", str(p)])
             for p in own]
    try:
        roots = [f"http://127.0.0.1:{p}" for p in own]
        assert all(answers(root) for root in roots)
        read = asyncio.run(_send(f"http://127.0.0.1:{port}", 40))
        assert read == [3] * 40
        stamps = [_stamps(root) for root in roots]
        # the kernel spread 40 connections over both (all on one: a chance of 2 in 2**40), and no request is
        # stamped twice or lost
        assert all(stamps), [len(s) for s in stamps]
        assert sorted(k for s in stamps for k in s) == sorted(f"p{i} x" for i in range(40))
        for s in stamps:  # received, first token, last token: in order, the first 5 ms after the request
            assert all(recv + 5_000_000 <= first <= last for recv, first, last in s.values())
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_reuse_port_needs_the_lean_emitter() -> None:
    p = subprocess.run([sys.executable, "-m", "tokenbench.emitter", "--reuse-port"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "--reuse-port and --own-port go with --lean" in p.stderr, p.stderr


@pytest.mark.skipif(not hasattr(selectors, "EpollSelector"), reason="epoll is Linux's")
@pytest.mark.parametrize(("asked", "waits"), [(0.0025, 0.002), (0.0004, 0.0), (0.001, 0.001), (1.0, 1.0),
                                              (0.0, 0.0), (None, None)])
def test_the_lean_emitter_waits_whole_milliseconds_down_not_up(asked: float | None, waits: float | None,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """epoll waits in whole milliseconds and EpollSelector rounds up, so a timer due in 2.5 ms fired after 3; the
    emitter's selector waits 2 and polls the rest (asyncio runs a timer only once it is due)."""
    seen: list[float] = []

    class Epoll:  # what EpollSelector.select hands epoll_wait, in seconds
        def poll(self, timeout: float = -1, maxevents: int = -1) -> list[Any]:
            seen.append(timeout)
            return []

        def close(self) -> None:
            pass

    sel = _FineEpoll()
    monkeypatch.setattr(sel, "_selector", Epoll())
    sel.select(asked)
    assert seen == [-1 if waits is None else pytest.approx(waits, abs=1e-9)]
    sel.close()


def test_the_lean_client_reads_the_lean_emitter_paced() -> None:
    """The two lean halves together: the stream's tokens, and a TTFT no shorter than the schedule's."""
    async def run(url: str) -> list[Any]:
        async with aiohttp.ClientSession() as session:
            c = StreamClient(http=session, base_url=url, model="emitter", lean=True)
            try:
                return [await c.send(PreparedRequest(f"q{i} x", 5, 2), RequestRecord(index=i)) for i in range(3)]
            finally:
                await c.close()
    with EmitterProcess("--lean", "--ttft", "0.02", "--itl", "0.002") as em:
        records = asyncio.run(run(em.url))
    assert [r.ok for r in records] == [True] * 3, [r.error for r in records]
    assert all(len(r.chunk_ns) == 5 and r.ttft_ns is not None and r.ttft_ns >= 20_000_000 for r in records)


@pytest.mark.parametrize("flag", [[], ["--no-usage"]])
def test_no_usage_leaves_the_usage_chunk_out(flag: list[str]) -> None:
    """--no-usage: the emitter answers as a server without stream_options would, so a client counting prompts with
    a tokenizer of its own (not the emitter's words) has no count to call truncated."""
    async def one(url: str) -> str:
        async with aiohttp.ClientSession() as s, s.post(
                url + "/completions", json={"prompt": "a b c", "max_tokens": 2, "stream": True,
                                            "stream_options": {"include_usage": True}}) as r:
            return (await r.read()).decode()
    with EmitterProcess("--lean", *flag) as em:
        body = asyncio.run(one(em.url))
    assert body.count('"text": " w') == 2 and "[DONE]" in body
    assert ('"usage"' in body) is (not flag), body
