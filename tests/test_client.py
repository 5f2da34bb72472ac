"""The streaming client against the deterministic emitter: known schedules and injected faults."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tokenbench import findings
from tokenbench.client import PreparedRequest, StreamClient
from tokenbench.emitter import BackgroundEmitter
from tokenbench.metrics import summarize
from tokenbench.records import RequestRecord

MS = 1_000_000


async def _send(url: str, api: str = "completions", max_tokens: int = 8, prompt: str = "a b c d",
                counter: Any = None, **kw: Any) -> RequestRecord:
    async with aiohttp.ClientSession() as session:
        client = StreamClient(http=session, base_url=url, model="emitter", api=api, counter=counter, **kw)  # type: ignore[arg-type]
        rec = RequestRecord(index=0)
        return await client.send(PreparedRequest(prompt, max_tokens, len(prompt.split())), rec)


def send(url: str, **kw: Any) -> RequestRecord:
    return asyncio.run(_send(url, **kw))


def test_role_only_first_chunk_is_not_a_token(emitter: BackgroundEmitter) -> None:
    # An empty role-only chunk arrives at once; the first token at 500 ms: TTFT ≈ 500 ms, never 0.
    emitter.configure(ttft_s=0.5, role_first=True)
    r = send(emitter.url, api="chat", max_tokens=3)
    assert r.ok, r.error
    assert r.first_byte_ns is not None and (r.first_byte_ns - r.sent_ns) / MS < 200
    assert 480 <= (r.ttft_ns or 0) / MS <= 700
    assert r.output_tokens == 3 and r.output_tokens_source == "usage"


def test_reasoning_then_content_separates_ttft_and_time_to_first_answer(emitter: BackgroundEmitter) -> None:
    # Reasoning tokens for 2 s, then content: TTFT at the first reasoning token, first answer at ≈ 2 s.
    emitter.configure(ttft_s=0.0, itl_s=0.5, reasoning_tokens=4)
    r = send(emitter.url, api="chat", max_tokens=6)
    assert r.ok, r.error
    assert (r.ttft_ns or 0) / MS < 200
    assert r.first_answer_ns is not None
    assert 1950 <= (r.first_answer_ns - r.sent_ns) / MS <= 2300
    assert r.reasoning_tokens == 4 and r.reasoning_chunks == 4
    assert r.reasoning_text.strip().startswith("w0") and "w4" in r.answer_text


def test_stream_with_no_content_at_all_does_not_crash(emitter: BackgroundEmitter) -> None:
    emitter.configure(reasoning_tokens=100)
    r = send(emitter.url, api="chat", max_tokens=3)
    assert r.ok and r.first_answer_ns is None and r.answer_text == ""
    s = summarize([r], concurrency=1, rate=None, window_start_ns=r.sent_ns)
    assert s.time_to_first_answer_ms.n == 0 and s.ttft_ms.n == 1


def test_several_tokens_per_chunk_tpot_from_usage(emitter: BackgroundEmitter) -> None:
    # 100 chunks 10 ms apart carrying 4 tokens each, usage 400: TPOT ≈ 990/399 ≈ 2.5 ms.
    emitter.configure(itl_s=0.010, tokens_per_chunk=4)
    r = send(emitter.url, max_tokens=400)
    assert r.ok and r.output_tokens == 400 and len(r.chunk_ns) == 100
    s = summarize([r], concurrency=1, rate=None, window_start_ns=r.sent_ns)
    assert s.tpot_ms.p50 == pytest.approx(2.5, rel=0.08)
    assert s.itl_ms.p50 == pytest.approx(10, rel=0.2)


def test_usage_absent_is_labelled_estimated(emitter: BackgroundEmitter) -> None:
    emitter.configure(usage=False)

    class WordCounter:
        def count(self, text: str) -> int:
            return len(text.split())

    r = send(emitter.url, max_tokens=5, counter=WordCounter())
    assert r.output_tokens == 5 and r.output_tokens_source == "tokenizer"
    r2 = send(emitter.url, max_tokens=5)
    assert r2.output_tokens == 5 and r2.output_tokens_source == "chunks"
    s = summarize([r2], concurrency=1, rate=None, window_start_ns=r2.sent_ns)
    assert "usage_absent" in [f.code for f in findings.assess(findings.LevelFacts([r2], s, 1))]


def test_server_that_echoes_ignore_eos_but_stops_early_is_flagged(emitter: BackgroundEmitter) -> None:
    emitter.configure(fault="early_stop", early_stop_tokens=3)
    r = send(emitter.url, max_tokens=16, body_extras={"ignore_eos": True})
    assert r.ok and r.output_tokens == 3 and r.finish_reason == "stop"
    assert emitter.emitter.requests_seen[-1]["ignore_eos"] is True
    s = summarize([r], concurrency=1, rate=None, window_start_ns=r.sent_ns)
    assert "output_short" in [f.code for f in findings.assess(findings.LevelFacts([r], s, 1))]


def test_keepalive_comments_between_chunks(emitter: BackgroundEmitter) -> None:
    emitter.configure(keepalive=True)
    r = send(emitter.url, max_tokens=5)
    assert r.ok and len(r.chunk_ns) == 5


def test_http_500_recorded_with_server_message(emitter: BackgroundEmitter) -> None:
    emitter.configure(fault="http500")
    r = send(emitter.url)
    assert r.error_kind == "http_500" and "injected failure" in (r.error or "")


def test_stall_detected(emitter: BackgroundEmitter) -> None:
    emitter.configure(fault="stall", fault_after=2, itl_s=0.01)
    r = send(emitter.url, stall_timeout_s=0.5)
    assert r.error_kind == "stall" and len(r.chunk_ns) == 2


def test_total_timeout(emitter: BackgroundEmitter) -> None:
    emitter.configure(itl_s=0.2)
    r = send(emitter.url, max_tokens=50, timeout_s=0.5)
    assert r.error_kind == "timeout"


def test_broken_stream(emitter: BackgroundEmitter) -> None:
    emitter.configure(fault="broken", fault_after=2)
    r = send(emitter.url)
    assert r.error_kind in ("stream_broken", "stream_incomplete"), r.error_kind
    assert not r.ok


def test_malformed_event(emitter: BackgroundEmitter) -> None:
    emitter.configure(fault="malformed", fault_after=1)
    r = send(emitter.url)
    assert r.error_kind == "malformed_event" and r.malformed_events == 1


def test_error_event_mid_stream(emitter: BackgroundEmitter) -> None:
    emitter.configure(fault="error_event", fault_after=1)
    r = send(emitter.url)
    assert r.error_kind == "server_error_event" and "out of memory" in (r.error or "")


def test_unreachable_endpoint_is_a_connection_error() -> None:
    r = send("http://127.0.0.1:9/v1")
    assert r.error_kind == "connection"


def test_body_asks_for_usage_and_carries_extras(emitter: BackgroundEmitter) -> None:
    send(emitter.url, api="chat", body_extras={"ignore_eos": True, "min_tokens": 8})
    body = emitter.emitter.requests_seen[-1]
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"][0]["content"] == "a b c d"
    assert body["min_tokens"] == 8 and body["stream"] is True


def test_api_key_sent_as_bearer(emitter: BackgroundEmitter) -> None:
    async def go() -> dict[str, str]:
        async with aiohttp.ClientSession() as session:
            c = StreamClient(http=session, base_url=emitter.url, model="emitter", api_key="sk-secret")
            return c.headers()

    assert asyncio.run(go())["Authorization"] == "Bearer sk-secret"


def test_a_sweep_says_how_much_of_the_output_was_reasoning(emitter: BackgroundEmitter,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Reasoning tokens count as output, so a level's tok/s overstates the answers: 6 of 8 tokens reasoning
    leave a quarter of the rate for answers (about 80% reasoning halved useful throughput)."""
    import json

    from tokenbench.cli import main

    emitter.configure(reasoning_tokens=6)
    assert main(["sweep", "--url", emitter.url, "--api", "chat", "--input-len", "8", "--output-len", "8",
                 "--concurrency", "2", "--requests", "4", "--guard", "off", "--no-metrics", "--json", "-"]) == 0
    cap = capsys.readouterr()
    lv = json.loads(cap.out)["levels"][0]
    assert lv["reasoning_share"] == pytest.approx(6 / 8)
    assert lv["answer_throughput_tps"] == pytest.approx(lv["output_throughput_tps"] / 4)
    assert "reasoning took 75% of the output tokens" in cap.err


def test_the_socket_write_is_stamped_and_the_clients_wait_reported_apart(emitter: BackgroundEmitter,
                                                                          tmp_path: Path) -> None:
    """TTFT starts when tokenbench starts a request; the request reaches the socket later. That wait is the
    client's (41-128 ms at 512 streams), reported as send_queue_ms and judged client_bound when
    large, so it can never pass as the server's time unnoticed."""
    import asyncio as aio

    from tokenbench.loadgen import SEND_QUEUE_P90_MS, ClientWatch

    from tokenbench.offered_load import Level
    from tokenbench.store import Store
    from tokenbench.sweep import SweepConfig, run_sweep
    from tokenbench.kinds.lengths import LengthsKind

    emitter.configure(ttft_s=0.05, itl_s=0.001)
    res = aio.run(run_sweep(SweepConfig(url=emitter.url, workload=LengthsKind.fixed(8, 4), concurrency=[2], requests=6,
                                        warmup=0, guard="off"), Store(tmp_path / "r.db")))
    recs = Store(tmp_path / "r.db").requests(res.run_id)
    assert recs and all(r.written_ns is not None and r.sent_ns <= r.written_ns <= (r.first_byte_ns or 0)
                        for r in recs)
    q = res.outcomes[0].summary.send_queue_ms
    assert q is not None and q.n == 6 and 0 <= (q.p50 or 0) < 50  # the emitter answers after 50 ms
    watch = ClientWatch()
    assert watch.verdict(Level(concurrency=2), None, SEND_QUEUE_P90_MS + 5)[0].startswith("requests waited")
    assert watch.verdict(Level(concurrency=2), None, SEND_QUEUE_P90_MS / 2) == []
