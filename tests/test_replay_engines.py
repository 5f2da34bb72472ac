"""Agent replays on real servers: the packaged Claude Code traces on llama-server (its prompt cache serving what the
trace shares, each tree in a slot of its own), calls longer than a slot's context counted and flagged, and a
session recorded through `tokenbench record` in front of llama-server replayed on vLLM with the same token counts.

Needs llama.cpp's tools and vLLM's environment (`make engines`): skips without them, fails instead under CI."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from conftest import need_engine, need_modules
from servers import Serving
from tokenbench.cli import main
from tokenbench.engines import launch, tiny
from tokenbench.engines.launch import RunningEngine
from tokenbench.record import BackgroundRecording, RecordConfig
from tokenbench.store import Store

pytestmark = pytest.mark.engine
need_modules("torch")

AGENTS = Path(__file__).resolve().parents[1] / "examples" / "trajectories" / "agents"


@pytest.fixture(autouse=True)
def _cache(model_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKENBENCH_CACHE", str(model_cache))


@pytest.fixture
def llama(llama_tiny_4: Serving) -> RunningEngine:
    return llama_tiny_4.server


def sweep(url: str, *argv: str, json_out: Path) -> dict[str, Any]:
    code = main(["sweep", "--url", url, "--guard", "off", "--quiet", "--json", str(json_out), *argv])
    doc: dict[str, Any] = json.loads(json_out.read_text())
    assert code == 0, doc.get("error")
    return doc


def test_the_packaged_traces_replay_on_llama_server_from_its_cache(llama: RunningEngine, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    doc = sweep(llama.base_url, "--trace", str(AGENTS), "--concurrency", "4", "--trace-scale", "8",
                "--max-think", "0s", "--requests", "40", "--seed", "4", json_out=tmp_path / "r.json")
    out = capsys.readouterr().out
    lv = doc["levels"][0]
    replay, ideal = lv["replay"], doc["manifest"]["workload"]["trajectories"]["ideal_cached_share"]
    print(f"llama-server replay: cached {lv['cached_share']:.3f} ({lv['cached_source']}), ideal {ideal:.3f}, "
          f"trees {replay['trees_finished']}/{replay['trees']}, p90 rate {replay['agent_tps_p90']}")
    assert lv["completed"] == 40 and lv["failed"] == 0 and replay["overflowed"] == 0
    # each tree keeps its slot and its prompt cache: the server serves about what the trace shares
    assert lv["cached_source"] in ("usage", "server_timings") and lv["cached_share"] > 0.8 * ideal
    assert replay["by_context"] and all(b["ttft_ms"]["n"] for b in replay["by_context"])
    assert max(len(line) for line in out.splitlines()) <= 80 and "trees finished" in out
    # the server's own hit share counts the lanes' uncounted warm-up calls, and says so beside the cached share
    hits = " ".join(out.split())
    assert "the server's prefix-cache hits" not in hits or "(/metrics: every call it served, the lanes' warm-up " \
        "calls too)" in hits, out


def test_calls_past_a_slots_context_are_counted_and_flag_the_level(tmp_path: Path, model_cache: Path) -> None:
    """A trace whose calls grow past the slot's 2,048 tokens: llama-server refuses them, and the level counts them
    and, over 1% of its calls, says the replay is invalid for the box."""
    need_engine("llama-server")
    folder = tmp_path / "long"
    folder.mkdir()
    reqs = [{"t": float(k), "type": "n", "in": 64 * (8 + 12 * k), "out": 4, "hash_ids": list(range(1, 9 + 12 * k)),
             "think_time": 0.0, "api_time": 0.5} for k in range(5)]  # 512, 1,280, 2,048, ... tokens
    (folder / "t.json").write_text(json.dumps({"id": "long", "block_size": 64, "requests": reqs}))
    with launch.start("llama-server", tiny.ensure(model_cache), parallel=1, ctx=2048) as server:
        code = main(["sweep", "--url", server.base_url, "--trace", str(folder), "--concurrency", "1",
                     "--max-think", "0s", "--warmup", "0", "--guard", "off", "--quiet", "--no-metrics",
                     "--json", str(tmp_path / "r.json")])
    doc = json.loads((tmp_path / "r.json").read_text())
    lv = doc["levels"][0]
    # the second call (1,280 tokens and 4 out) fits; the third (2,048) does not, and the tree ends there
    assert lv["replay"]["overflowed"] == 1 and lv["completed"] == 2
    assert "context_overflow" in lv["flags"] and lv["replay"]["overflow_share"] == pytest.approx(1 / 3)
    assert any("did not fit the server's context" in w and "invalid" in w for w in lv["warnings"])
    assert code != 0 or doc["status"] in ("complete", "partial")


# ---- recorded on one engine, replayed on the other ---------------------------------------------------------------

READ = {"type": "function", "function": {"name": "read", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}}}}


async def agent(url: str, model: str) -> None:
    """Three turns of a terse agent with a tool, each re-sending the conversation, answers of 6 tokens."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful coding agent."},
                                  {"role": "user", "content": "Read the configuration and say what it sets."}]
    async with aiohttp.ClientSession() as s:
        for turn in range(3):
            body = {"model": model, "messages": msgs, "tools": [READ], "stream": True, "max_tokens": 6,
                    "stream_options": {"include_usage": True}}
            text = ""
            async with s.post(url + "/chat/completions", json=body) as r:
                assert r.status == 200, await r.text()
                for line in (await r.read()).decode().splitlines():
                    if line.startswith("data: {"):
                        for ch in json.loads(line[6:]).get("choices") or []:
                            text += (ch.get("delta") or {}).get("content") or ""
            msgs += [{"role": "assistant", "content": text}, {"role": "user", "content": f"And then step {turn}?"}]
            await asyncio.sleep(0.1)


def vllm_count(base_url: str, request: dict[str, Any]) -> int:
    """vLLM's own count of a recorded request's prompt (its /tokenize, with the chat template and the tools)."""
    import urllib.request

    body = {"messages": request["messages"], "tools": request.get("tools"), "add_generation_prompt": True}
    req = urllib.request.Request(base_url.removesuffix("/v1") + "/tokenize", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return int(json.loads(r.read())["count"])


@pytest.mark.timeout(900)
def test_a_session_recorded_on_llama_server_replays_on_vllm_with_its_token_counts(
        llama: RunningEngine, vllm_tiny: Serving, tmp_path: Path) -> None:
    """The log's prompt counts are llama-server's; replayed on vLLM (the same model, tokenizer and template) with
    the recorded history, each call's prompt is the recorded one, as vLLM counts it, plus the tree's salt: the
    same few tokens for every call; and each answer the recorded length. The two servers count the recorded
    prompts alike within a token: llama.cpp's tokenizer and Hugging Face's split the tiny model's own odd text
    (the answers re-sent) differently now and then (a CI run: llama-server 51, 81, 112; vLLM, salt and all, 55,
    85, 115)."""
    log = tmp_path / "agents.jsonl"
    with BackgroundRecording(RecordConfig(llama.base_url[:-3], log, port=0)) as rec:
        asyncio.run(agent(rec.url, llama.model))
    assert rec.summary.recorded == 3
    recorded = [json.loads(x) for x in log.read_text().splitlines()[1:]]
    doc = sweep(vllm_tiny.server.base_url, "--trace", str(log), "--concurrency", "1", "--max-think", "0s",
                "--warmup", "0", "--no-metrics", json_out=tmp_path / "r.json")
    calls = sorted((r for r in Store().requests(doc["run_id"]) if r.phase == "measured"), key=lambda r: r.turn or 0)
    sent = [r.input_tokens or 0 for r in calls]
    said = [ln["usage"]["prompt_tokens"] for ln in recorded]
    counted = [vllm_count(vllm_tiny.server.base_url, ln["request"]) for ln in recorded]
    salt = {a - b for a, b in zip(sent, counted)}
    print(f"prompt tokens recorded on llama-server {said}, the same prompts counted by vLLM {counted}, replayed on "
          f"vLLM {sent}")
    assert len(calls) == 3 and len(salt) == 1 and 0 < salt.pop() <= 12
    assert all(abs(a - b) <= 1 for a, b in zip(counted, said)), (counted, said)
    assert [r.output_tokens for r in calls] == [ln["usage"]["completion_tokens"] for ln in recorded]
