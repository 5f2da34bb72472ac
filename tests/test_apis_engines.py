"""The Messages and Responses APIs on the real servers: the same prompts sent on /v1/chat/completions, /v1/messages
and /v1/responses come back with the same token counts, in and out, on llama-server and on vLLM 0.32 (the
session's one vLLM, conftest.py), and a sweep runs on each.

What the servers do (their source, and these tests): both convert a Messages or Responses request to a chat request
and render it with the same chat template, so the prompt is the same tokens. Neither Messages conversion keeps a
field that fixes the output length (vLLM's request model drops unknown fields; llama-server keeps only
temperature, top_p, top_k, stream and chat_template_kwargs), so an output ends where the model ends it there:
the comparisons here sample greedily, without ignore_eos, on every API. vLLM's Responses request has ignore_eos
(no min_tokens); llama-server keeps every field of a Responses body.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from conftest import need_modules
from servers import Serving
from tokenbench.cli import main
from tokenbench.client import PreparedRequest
from tokenbench.endpoint import stream_client
from tokenbench.engines import launch
from tokenbench.engines.launch import RunningEngine
from tokenbench.records import RequestRecord
from tokenbench.store import Store

pytestmark = pytest.mark.engine
need_modules("torch", "gguf")

#: The prompts: a bare one (one user turn), a system prompt and a task, and an agent's history with a tool call
#: and its result (its arguments as Python's json.dumps writes them, as vLLM re-writes a tool_use block's input).
CONVERSATIONS: list[list[dict[str, Any]] | None] = [
    None,
    [{"role": "system", "content": "You are a careful coding agent. Answer briefly."},
     {"role": "user", "content": "Which file holds the parser, and why does it fail on empty input?"}],
    [{"role": "system", "content": "You are a careful coding agent."},
     {"role": "user", "content": "Fix the failing test in a.py"},
     {"role": "assistant", "content": "Let me read it.", "tool_calls": [
         {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": json.dumps({"path": "a.py"})}}]},
     {"role": "tool", "tool_call_id": "call_1", "content": "def f(x):\n    return x[0]\n"},
     {"role": "user", "content": "Go on."}],
]
PROMPT = "Tell me a short story about a lighthouse keeper and the sea."


@pytest.fixture(autouse=True)
def _cache(model_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKENBENCH_CACHE", str(model_cache))


async def _counts(server: RunningEngine, api: str, max_tokens: int, extra: dict[str, Any] | None = None
                  ) -> list[RequestRecord]:
    """Each conversation once on ``api``, greedy, through the client as a sweep makes it."""
    out = []
    async with aiohttp.ClientSession() as http:
        c = stream_client(http, server.base_url, server.model, launch.adapter(server.engine), api=api,
                          body_extras=extra or {})
        try:
            for i, turns in enumerate(CONVERSATIONS):
                rec = RequestRecord(index=i)
                await c.send(PreparedRequest(PROMPT, max_tokens, messages=turns, headers={"X-Session-ID": f"s{i}"}),
                             rec)
                out.append(rec)
        finally:
            await c.close()
    return out


def _same_counts(base: list[RequestRecord], other: list[RequestRecord], api: str) -> None:
    table = [(b.input_tokens, o.input_tokens, b.output_tokens, o.output_tokens) for b, o in zip(base, other)]
    print(f"chat vs {api} (in, in, out, out):", table)
    for b, o in zip(base, other):
        assert b.ok and o.ok, (b.error, o.error)
        assert o.input_tokens_source == o.output_tokens_source == "usage"
        assert (o.input_tokens, o.output_tokens) == (b.input_tokens, b.output_tokens), table
        assert o.first_token_ns is not None and o.end_ns is not None and o.first_token_ns <= o.end_ns
        assert o.answer_text == b.answer_text


def test_llama_server_counts_the_same_tokens_on_chat_messages_and_responses(
        llama_tiny_1: Serving, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = llama_tiny_1.server
    chat = asyncio.run(_counts(server, "chat", 24))
    messages = asyncio.run(_counts(server, "messages", 24))
    responses = asyncio.run(_counts(server, "responses", 24))
    _same_counts(chat, messages, "messages")
    _same_counts(chat, responses, "responses")
    # its prompt cache stays on for /v1/messages (the conversion drops cache_prompt): the repeated prompts
    # came from it, and the Anthropic usage says so (cache_read_input_tokens)
    assert all(r.cached_tokens and r.cached_tokens_source == "usage" for r in messages)
    # on /v1/responses every field of the body is kept: llama-server's own length fields fix the output
    fixed = asyncio.run(_counts(server, "responses", 12, {"ignore_eos": True, "n_predict": 12}))
    assert [r.output_tokens for r in fixed] == [12] * len(CONVERSATIONS)
    # a sweep on each API: the check request, warm-ups, two levels, nothing lost
    for api in ("messages", "responses"):
        out = tmp_path / f"{api}.json"
        assert main(["sweep", "--url", server.base_url, "--api", api, "--input-len", "32", "--output-len", "8",
                     "--concurrency", "1,2", "--requests", "4", "--json", str(out), "--quiet",
                     "--guard", "off"]) == 0, capsys.readouterr().err
        doc = json.loads(out.read_text())
        assert [(lv["completed"], lv["failed"]) for lv in doc["levels"]] == [(4, 0), (4, 0)]
        recs = Store().requests(doc["run_id"])
        assert all(r.ok and r.input_tokens_source == "usage" for r in recs)
        if api == "responses":  # n_predict and ignore_eos hold there
            assert all(lv["output_tokens_mean"] == 8 for lv in doc["levels"])
            assert doc["manifest"]["request_fields"]["n_predict"] == 8
        else:
            assert "n_predict" not in (doc["manifest"].get("request_fields") or {})


@pytest.mark.timeout(900)
def test_vllm_counts_the_same_tokens_on_chat_messages_and_responses(
        vllm_utf8: Serving, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    server, model = vllm_utf8
    chat = asyncio.run(_counts(server, "chat", 16))
    messages = asyncio.run(_counts(server, "messages", 16))
    responses = asyncio.run(_counts(server, "responses", 16))
    _same_counts(chat, messages, "messages")
    _same_counts(chat, responses, "responses")
    # vLLM runs with --enable-prompt-tokens-details: each API says what its prefix cache served
    assert all(r.cached_tokens is not None for r in chat + messages + responses)
    # ignore_eos on /v1/responses: the output is exactly as long as asked
    fixed = asyncio.run(_counts(server, "responses", 12, {"ignore_eos": True}))
    assert [r.output_tokens for r in fixed] == [12] * len(CONVERSATIONS)
    out = tmp_path / "responses.json"
    assert main(["sweep", "--url", server.base_url, "--api", "responses", "--tokenizer", str(model.hf_dir),
                 "--input-len", "64", "--output-len", "16", "--concurrency", "1,4", "--requests", "8",
                 "--json", str(out), "--quiet", "--guard", "off", "--no-metrics"]) == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert [(lv["completed"], lv["failed"]) for lv in doc["levels"]] == [(8, 0), (8, 0)]
    assert all(lv["output_tokens_mean"] == 16 and lv["input_tokens_mean"] > 64 for lv in doc["levels"])
    assert doc["manifest"]["request_fields"] == {"ignore_eos": True}
    out = tmp_path / "messages.json"
    assert main(["sweep", "--url", server.base_url, "--api", "messages", "--tokenizer", str(model.hf_dir),
                 "--input-len", "64", "--output-len", "16", "--concurrency", "2", "--requests", "4",
                 "--json", str(out), "--quiet", "--guard", "off", "--no-metrics"]) == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert doc["levels"][0]["completed"] == 4 and doc["levels"][0]["failed"] == 0
