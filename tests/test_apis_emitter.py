"""The Messages and Responses APIs end to end against the emitter (which streams them as vLLM does), on both send
paths, and a request's own HTTP headers: sent by both paths, beside the client's, never slowing a request that has
none, and refused (not sent) where HTTP cannot carry them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from test_send_path import _both, _same
from tokenbench.cli import main
from tokenbench.client import PreparedRequest, StreamClient
from tokenbench.emitter import BackgroundEmitter
from tokenbench.http1 import RequestHead
from tokenbench.metrics import summarize
from tokenbench.records import RequestRecord

NEW_APIS = ["messages", "responses"]


@pytest.mark.parametrize("config", [{}, {"itl_s": 0.002}, {"fault": "http500"}, {"fault": "malformed", "fault_after": 1},
                                    {"fault": "error_event", "fault_after": 1}, {"fault": "broken", "fault_after": 2},
                                    {"keepalive": True}, {"close_after_stream_s": 0.0}, {"burst": True},
                                    {"reasoning_tokens": 3}, {"tokens_per_chunk": 4}])
@pytest.mark.parametrize("api", NEW_APIS)
def test_both_paths_record_the_same_on_the_new_apis(emitter: BackgroundEmitter, config: dict[str, Any],
                                                    api: str) -> None:
    emitter.configure(**config)
    old1, old2, new1, new2 = asyncio.run(_both(emitter.url, api=api))
    assert _same(new1) == _same(old1) and _same(new2) == _same(old2)
    if not config:  # a plain stream: the prompt's 4 words, 6 tokens out, each its own event
        assert [(r.ok, r.input_tokens, r.output_tokens, len(r.chunk_ns)) for r in (old1, new1)] == [(True, 4, 6, 6)] * 2
    if config.get("fault") == "error_event":
        assert new1.error_kind == "server_error_event" and new1.error == "out of memory"


async def _sends(url: str, api: str, lean: bool, requests: list[PreparedRequest], **kw: Any) -> list[RequestRecord]:
    async with aiohttp.ClientSession() as session:
        c = StreamClient(http=session, base_url=url, model="emitter", api=api, lean=lean, **kw)  # type: ignore[arg-type]
        try:
            return [await c.send(req, RequestRecord(index=i)) for i, req in enumerate(requests)]
        finally:
            await c.close()


@pytest.mark.parametrize("lean", [True, False])
def test_a_requests_own_headers_are_sent_beside_the_clients(emitter: BackgroundEmitter, lean: bool) -> None:
    reqs = [PreparedRequest("a b", 2, headers={"X-Session-ID": "agent-7"}),
            PreparedRequest("a b", 2),  # the next request on the same client has none
            PreparedRequest("a b", 2, headers={"x-session-id": "agent-8", "accept": "*/*"})]
    recs = asyncio.run(_sends(emitter.url, "messages", lean, reqs, api_key="k"))
    assert all(r.ok for r in recs), [r.error for r in recs]
    seen = [{k.lower(): v for k, v in h.items()} for h in emitter.emitter.headers_seen]
    assert seen[0]["x-session-id"] == "agent-7" and "x-session-id" not in seen[1]
    assert seen[2]["x-session-id"] == "agent-8" and seen[2]["accept"] == "*/*"  # the request's value wins
    for h in seen:  # the client's own headers stay on every request
        assert (h["authorization"], h["x-api-key"], h["anthropic-version"]) == ("Bearer k", "k", "2023-06-01")
        assert h["content-type"] == "application/json"


@pytest.mark.parametrize("lean", [True, False])
@pytest.mark.parametrize("headers", [{"X-Bad": "a\r\nInjected: 1"}, {"Bad Name": "x"}, {"Content-Length": "1"},
                                     {"X-Snow": "\u2603"}, {"": "x"}])
def test_a_header_http_cannot_carry_is_refused_not_sent(emitter: BackgroundEmitter, lean: bool,
                                                        headers: dict[str, str]) -> None:
    (rec,) = asyncio.run(_sends(emitter.url, "chat", lean, [PreparedRequest("a", 2, headers=headers)]))
    assert rec.error_kind == "invalid_header" and rec.http_status is None
    assert emitter.emitter.requests_seen == []


def test_the_lean_head_is_built_once_and_a_requests_headers_only_for_it() -> None:
    head = RequestHead("http://127.0.0.1:9/v1/messages", {"Content-Type": "application/json", "Accept": "x"})
    plain = head.request(b"{}")
    assert head.request(b"{}", None) == head.request(b"{}", {}) == plain
    assert plain.startswith(b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:9\r\n") and plain.endswith(b"\r\n\r\n{}")
    own = head.request(b"{}", {"X-Session-ID": "s", "ACCEPT": "y"})
    assert b"\r\nX-Session-ID: s\r\n" in own and b"\r\nACCEPT: y\r\n" in own and b"Accept: x" not in own
    assert own.count(b"Content-Length: 2\r\n") == 1 and head.request(b"{}") == plain  # nothing kept


@pytest.mark.parametrize("api", NEW_APIS)
def test_a_sweep_on_each_api(emitter: BackgroundEmitter, api: str, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.json"
    assert main(["sweep", "--url", emitter.url, "--api", api, "--input-len", "16", "--output-len", "8",
                 "--concurrency", "1,2", "--requests", "6", "--json", str(out), "--quiet"]) == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    for lv in doc["levels"]:
        assert (lv["completed"], lv["failed"], lv["output_tokens_mean"]) == (6, 0, 8)
        assert lv["output_tokens_source"] == "usage" and lv["input_tokens_source"] == "usage"
        assert lv["ttft_ms"]["n"] == 6 and lv["time_to_first_tool_ms"]["n"] == 0
    bodies = emitter.emitter.requests_seen
    limit = "max_tokens" if api == "messages" else "max_output_tokens"
    assert bodies and all(b[limit] in (2, 8) for b in bodies)  # the check request asks for 2
    assert all(("messages" in b) == (api == "messages") and ("input" in b) == (api == "responses") for b in bodies)


@pytest.mark.parametrize("api", ["chat", *NEW_APIS])
def test_the_time_to_the_first_tool_call_on_each_api(emitter: BackgroundEmitter, api: str) -> None:
    """The emitter answers a request that offers tools with a call of the first one: its id and name after TTFT,
    then its arguments; the first tool call is stamped at its opening, the level summarises it like TTFT."""
    emitter.configure(tool_calls=True, ttft_s=0.02, itl_s=0.005)
    tool = {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
    reqs = [PreparedRequest("read a", 16, extra_body={"tools": [tool]}) for _ in range(3)]
    recs = asyncio.run(_sends(emitter.url, api, True, reqs))
    for r in recs:
        assert r.ok, r.error
        assert r.first_tool_ns is not None and r.first_tool_ns == r.first_token_ns
        assert r.finish_reason == {"chat": "tool_calls", "messages": "tool_use", "responses": "completed"}[api]
        assert len(r.chunk_ns) == 4 and r.output_tokens == 3
    s = summarize(recs, concurrency=1, rate=None, window_start_ns=min(r.sent_ns for r in recs))
    assert s.time_to_first_tool_ms is not None and s.time_to_first_tool_ms.n == 3
    assert s.time_to_first_tool_ms.p50 == pytest.approx(s.ttft_ms.p50)
    offered = emitter.emitter.requests_seen[0]["tools"][0]
    assert offered == {"chat": tool, "messages": {"name": "read_file", "input_schema": {"type": "object"}},
                       "responses": {"type": "function", "name": "read_file", "parameters": {"type": "object"}}}[api]
