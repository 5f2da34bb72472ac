"""Server adapters: detection from typed probes, the per-engine facts, and the llama-server connection fault
(a close after every stream, advertised as keep-alive) reproduced by the emitter."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from tokenbench import adapters
from tokenbench.adapters import Probes
from tokenbench.adapters.llama_server import LlamaServer
from tokenbench.cli import main
from tokenbench.client import PreparedRequest, StreamClient
from tokenbench.emitter import BackgroundEmitter
from tokenbench.records import RequestRecord
from tokenbench.telemetry import parse, summarize

# /props of llama-server as built from the llama-cpp-python 0.3.36 sdist (tools/server/server-context.cpp).
LLAMA_PROPS = {"default_generation_settings": {"n_ctx": 4096, "params": {}}, "total_slots": 4,
               "build_info": "b1-0c1e570", "model_path": "m.gguf"}


def probes(**kw: object) -> Probes:
    return Probes.of(kw.get("models"), str(kw.get("server", "")), kw.get("version"), kw.get("props"),
                     kw.get("sgl"), kw.get("ollama"), kw.get("openapi"))


@pytest.mark.parametrize("kw, name", [
    ({"props": LLAMA_PROPS, "models": {"data": [{"id": "m", "owned_by": "llamacpp"}]}}, "llama.cpp"),
    ({"models": {"data": [{"id": "m", "owned_by": "vllm"}]}, "version": {"version": "0.32.0"}}, "vllm"),
    ({"sgl": {"version": "0.5"}}, "sglang"),
    ({"ollama": {"version": "0.12"}}, "ollama"),
    ({"openapi": {"paths": {"/extras/tokenize": {}}}}, "llama-cpp-python"),
    ({"openapi": {"paths": {"/v1/responses": {}}}, "server": "uvicorn"}, "transformers"),
    ({}, "openai-compatible"),
    # wrong types from a hostile or odd server are no match, never a crash
    ({"props": ["x"], "version": "0.1", "models": {"data": "nope"}, "openapi": {"paths": []}}, "openai-compatible"),
])
def test_detection(kw: dict, name: str) -> None:  # type: ignore[type-arg]
    assert adapters.detect(probes(**kw)).name == name


def test_llamacpp_facts_and_batching_come_from_its_slots() -> None:
    a = adapters.detect(probes(props=LLAMA_PROPS))
    f = a.facts(probes(props=LLAMA_PROPS))
    assert (f.version, f.slots, f.slot_ctx) == ("b1-0c1e570", 4, 4096)
    # -np N slots are decoded together; one slot is one stream at a time; unknown says unknown
    assert a.batches(4) is True and a.batches(1) is False and a.batches(None) is None
    bad = a.facts(probes(props={"total_slots": "four", "default_generation_settings": {"n_ctx": -1}}))
    assert bad.slots is None and bad.slot_ctx is None
    # built outside a git checkout (the engines build from the sdist's tree: `llama-server --version` says
    # "build 0, commit unknown"), it names no build: the run records none rather than "b0-unknown"
    assert a.facts(probes(props={**LLAMA_PROPS, "build_info": "b0-unknown"})).version is None


#: /v1/models of vLLM 0.32 (vllm/entrypoints/openai/protocol.py's ModelCard), serving with --max-model-len 2048.
VLLM_MODELS = {"object": "list", "data": [
    {"id": "m", "object": "model", "created": 1765100000, "owned_by": "vllm", "root": "/models/m", "parent": None,
     "max_model_len": 2048, "permission": [{"id": "modelperm-1", "object": "model_permission"}]}]}


def test_vllm_says_the_context_a_request_may_fill_in_its_model_list() -> None:
    a = adapters.detect(probes(models=VLLM_MODELS, version={"version": "0.32.0"}))
    f = a.facts(probes(models=VLLM_MODELS, version={"version": "0.32.0"}))
    assert (a.name, f.version, f.slots, f.slot_ctx) == ("vllm", "0.32.0", None, 2048)
    entry = VLLM_MODELS["data"][0]  # type: ignore[index]
    for odd in ("2048", True, -1, 0, None, 2048.5):
        assert a.facts(probes(models={"data": [{**entry, "max_model_len": odd}]})).slot_ctx is None, odd
    # a LoRA adapter is listed beside its base with the base's length; entries that disagree say nothing sure
    assert a.facts(probes(models={"data": [entry, {**entry, "id": "lora"}]})).slot_ctx == 2048
    assert a.facts(probes(models={"data": [entry, {**entry, "max_model_len": 4096}]})).slot_ctx is None
    # a request longer than it is warned of, with vLLM's own flag named
    said = a.slot_warnings(None, 2048, 4, 3000)
    assert len(said) == 1 and "3000 tokens" in said[0] and "--max-model-len" in said[0]
    assert a.slot_warnings(None, 2048, 4, 2048) == [] and a.slot_warnings(None, None, 4, 10**6) == []


def test_check_request_does_not_generate_the_full_length() -> None:
    # llama-server gives n_predict priority over max_tokens: the 2-token check must carry its own n_predict.
    a = LlamaServer()
    assert a.output_length_fields(64, 2, "completions")["n_predict"] == 64
    check = a.check_fields(2, 2, "completions")
    assert check["n_predict"] == 2 and "min_tokens" not in check
    assert adapters.by_name("vllm").check_fields(2, 2, "completions") == {"ignore_eos": True}


def test_server_tg_counts_the_steps_after_the_first_token() -> None:
    # predicted_ms spans the n-1 decode steps after the first token (which comes out of the prompt's pass)
    pp, tg = LlamaServer().server_rates({"prompt_n": 512, "prompt_ms": 256.0, "predicted_n": 129, "predicted_ms": 1000.0})
    assert pp == pytest.approx(2000.0) and tg == pytest.approx(128.0)
    assert LlamaServer().server_rates({"predicted_n": True, "predicted_ms": float("nan")}) == (None, None)


def test_names_and_aliases() -> None:
    assert adapters.by_name("llama.cpp cuda").name == "llama.cpp"
    assert adapters.by_name("llama-server").name == "llama.cpp"
    assert adapters.by_name("llamacpp").name == "llama-cpp-python"
    assert adapters.by_name("something else") is adapters.GENERIC
    names = {a.name for a in adapters.ADAPTERS}
    assert len(names) == len(adapters.ADAPTERS)  # one module, one name


LLAMACPP_METRICS_2026 = """\
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total {p}
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total {c}
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total {g}
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total {dt}
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total {acc}
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total {d}
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode 1.5
"""


def test_current_llamacpp_metric_names_are_read() -> None:
    # The names llama.cpp exports since 2026 (server-task.cpp); the pre-2026 tokens_drafted_total still read.
    a = parse(LLAMACPP_METRICS_2026.format(p=100, c=0, g=0, dt=0, acc=0, d=0))
    b = parse(LLAMACPP_METRICS_2026.format(p=400, c=100, g=600, dt=522, acc=300, d=180))
    s = summarize([(0.0, a), (1.0, b)])
    assert s["counters"]["drafts"] == 180 and s["counters"]["draft_tokens"] == 522
    assert s["spec_acceptance_rate"] == pytest.approx(300 / 522)
    assert s["spec_mean_acceptance_length"] == pytest.approx(1 + 300 / 180)
    assert s["prefix_cache_hit_rate"] == pytest.approx(100 / (100 + 300))
    assert s["busy_slots_per_decode_max"] == 1.5 and s["running_max"] == 2
    old = parse("# TYPE llamacpp:tokens_drafted_total counter\nllamacpp:tokens_drafted_total 7\n")
    old2 = parse("# TYPE llamacpp:tokens_drafted_total counter\nllamacpp:tokens_drafted_total 17\n")
    assert summarize([(0.0, old), (1.0, old2)])["counters"]["draft_tokens"] == 10


async def _back_to_back(url: str, n: int, fresh: bool) -> list[RequestRecord]:
    async with aiohttp.ClientSession() as session:
        client = StreamClient(http=session, base_url=url, model="emitter", fresh_connection=fresh)
        out = []
        for i in range(n):
            rec = RequestRecord(index=i)
            out.append(await client.send(PreparedRequest("a b c", 4, 3), rec))
        return out


def test_a_server_that_closes_after_each_stream_loses_no_request(emitter: BackgroundEmitter) -> None:
    # Like llama-server: keep-alive advertised, the connection closed right after each stream. The next request
    # goes into the dead pooled connection (here every other one, as 3 of 6 did against llama-server); it never
    # reached the server, so it is sent again, not lost.
    emitter.configure(close_after_stream_s=0.0)
    recs = asyncio.run(_back_to_back(emitter.url, 8, fresh=False))
    assert all(r.ok for r in recs), [r.error for r in recs if not r.ok]
    retried = sum(r.connection_retries for r in recs)
    assert retried >= 1  # the fault was real: without the retry these requests were lost
    # The server mostly never saw the lost sends (8 seen); on a loaded machine it may have read one before
    # closing, never more than were resent.
    assert 8 <= len(emitter.emitter.requests_seen) <= 8 + retried
    # With a fresh connection per request (what the llama.cpp adapter asks for) nothing needs a retry.
    emitter.emitter.requests_seen.clear()
    recs = asyncio.run(_back_to_back(emitter.url, 8, fresh=True))
    assert all(r.ok for r in recs) and sum(r.connection_retries for r in recs) == 0
    assert len(emitter.emitter.requests_seen) == 8


def test_a_server_that_always_drops_the_connection_is_a_failure_after_one_retry(emitter: BackgroundEmitter) -> None:
    emitter.configure(close_after_stream_s=0.0, fault="broken", fault_after=0)
    recs = asyncio.run(_back_to_back(emitter.url, 2, fresh=False))
    assert not any(r.ok for r in recs)


def test_sweep_against_a_closing_server_completes_every_level(emitter: BackgroundEmitter, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    emitter.configure(close_after_stream_s=0.0, itl_s=0.001)
    out = tmp_path / "r.json"
    code = main(["sweep", "--url", emitter.url, "--input-len", "8", "--output-len", "8", "--concurrency", "1,4",
                 "--requests", "16", "--json", str(out), "--quiet", "--guard", "off", "--no-metrics"])
    assert code == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert [lv["failed"] for lv in doc["levels"]] == [0, 0]
    assert [lv["completed"] for lv in doc["levels"]] == [16, 16]


def test_model_given_means_no_dependence_on_the_model_list(emitter: BackgroundEmitter, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # Transformers serve without a Hugging Face cache answers 500 at /v1/models.
    emitter.configure(models_status=500)
    args = ["sweep", "--url", emitter.url, "--input-len", "8", "--output-len", "4", "--concurrency", "1",
            "--requests", "2", "--quiet", "--guard", "off", "--no-metrics"]
    assert main(args) != 0
    assert "pass --model" in capsys.readouterr().err
    out = tmp_path / "r.json"
    assert main([*args, "--model", "emitter", "--json", str(out)]) == 0
    err = capsys.readouterr().err
    assert "answered HTTP 500" in err
    doc = json.loads(out.read_text())
    assert doc["levels"][0]["completed"] == 2 and doc["manifest"]["server"]["models_error"]


def test_a_level_that_never_reached_its_concurrency_is_flagged(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    emitter.configure(itl_s=0.002)
    out = tmp_path / "r.json"
    assert main(["sweep", "--url", emitter.url, "--input-len", "8", "--output-len", "8", "--concurrency", "4,32",
                 "--requests", "16", "--json", str(out), "--quiet", "--guard", "off", "--no-metrics"]) == 0
    c4, c32 = json.loads(out.read_text())["levels"]
    assert "concurrency_not_reached" not in c4["flags"]
    assert "concurrency_not_reached" in c32["flags"]
    assert any("never had 32 requests in flight" in w for w in c32["warnings"])


def test_one_failed_metrics_get_does_not_stop_sampling(emitter: BackgroundEmitter) -> None:
    from tokenbench.telemetry import MetricsSampler

    async def go(fail_first: int) -> MetricsSampler:
        emitter.configure(metrics_fail_first=fail_first)
        async with aiohttp.ClientSession() as session:
            m = MetricsSampler(session, emitter.url[:-3], interval_s=0.05)
            m.start()
            await asyncio.sleep(0.4)
            await m.stop()
            return m

    m = asyncio.run(go(1))
    assert m.available is True and m.failed == 1 and len(m.samples) >= 3
    # each sample keeps the series a summary reads, not the page's others (a soak keeps one every interval)
    from tokenbench.telemetry import KEPT

    assert all(set(s) <= KEPT and "vllm:num_requests_running" in s for _, s in m.samples)
    assert not any("process_resident_memory_bytes" in s for _, s in m.samples)
    m = asyncio.run(go(10))  # never answered: taken as no /metrics, and said
    assert m.available is False and m.failed == 3


class _ClosingServer:
    """A server that answers each connection's first request, kept alive, and closes it at the second as it comes
    in, unanswered: what a real server does when a reused connection and its idle close cross (uvicorn and
    llama.cpp's server close one idle for 5 s), which no real one does on demand. ``answer_first=False``: it
    closes every connection unanswered. Answers by path; 404 elsewhere."""

    def __init__(self, answers: dict[str, bytes], answer_first: bool = True) -> None:
        self.answers, self.answer_first, self.connections = answers, answer_first, 0

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *_: object) -> None:
        self.server.close()

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = False
        while True:
            try:
                head = await r.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            size = head.lower().split(b"content-length:")[1].split(b"\r\n")[0] if b"content-length:" in \
                head.lower() else b"0"
            await r.readexactly(int(size))
            if answered or not self.answer_first:
                break  # closed as the request came: no answer
            body = self.answers.get(head.split(b" ")[1].decode())
            status = b"200 OK" if body is not None else b"404 Not Found"
            body = body if body is not None else b"{}"
            w.write(b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                    % (status, len(body), body))
            await w.drain()
            answered = True
        w.close()


def test_the_servers_tokenizer_tries_again_once_where_the_server_closed_a_kept_alive_connection() -> None:
    """A capacity search on vLLM through its /tokenize ended with "the server's tokenizer ... failed (Server
    disconnected)", exit 3: uvicorn closes a connection idle for 5 s, and the next call reused it as it closed.
    The tokenizer asks again on a new connection. A server that closes every connection unanswered still fails,
    in one line."""
    from tokenbench.adapters.vllm import VLLM
    from tokenbench.errors import EndpointError
    from tokenbench.servers import ServerInfo, ServerTokenizer

    async def run(answer_first: bool) -> tuple[list[list[int]] | str, int]:
        fake = _ClosingServer({"/tokenize": b'{"tokens": [5, 6, 7], "count": 3}'}, answer_first)
        async with fake as root, aiohttp.ClientSession() as http:
            tok = ServerTokenizer(http, ServerInfo(base_url=f"{root}/v1", models=["m"], adapter=VLLM()), "m", None)
            try:
                return [await tok.encode("a b c") for _ in range(3)], fake.connections
            except EndpointError as e:
                return str(e), fake.connections

    got, connections = asyncio.run(run(True))
    assert got == [[5, 6, 7]] * 3 and connections == 3, (got, connections)  # one new connection for each reuse
    said, connections = asyncio.run(run(False))
    assert isinstance(said, str) and "the server's tokenizer at" in said and "Server disconnected" in said, said
    assert connections == 2  # asked twice, not more


def test_discovery_tries_again_where_a_kept_alive_connection_was_closed() -> None:
    """The same crossing in the check between levels whether a server is still up (discovery, on the run's pooled
    connections): it would read a closed kept-alive connection as the server gone, and end the run. Its probes, sent
    together, leave several connections in the pool, which a server's idle close takes together: the second try
    goes on a connection of its own."""
    from tokenbench.errors import EndpointError
    from tokenbench.servers import discover

    models = b'{"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "vllm"}]}'

    async def found(answer_first: bool) -> list[list[str]] | str:
        async with _ClosingServer({"/v1/models": models}, answer_first) as root, aiohttp.ClientSession() as http:
            try:
                return [(await discover(http, f"{root}/v1", timeout=5)).models for _ in range(3)]
            except EndpointError as e:
                return str(e)

    assert asyncio.run(found(True)) == [["m"]] * 3
    said = asyncio.run(found(False))
    assert isinstance(said, str) and said.startswith("cannot talk to") and "Server disconnected" in said, said


def test_the_recorders_tokenizer_tries_again_where_a_kept_alive_connection_was_closed() -> None:
    """The same crossing in a lengths-only recording's count of a call's tokens through the upstream's tokenizer:
    it would leave the call out ("not counted: the upstream's /tokenize failed")."""
    from tokenbench.record.tokens import UpstreamTokenizer

    async def counted() -> tuple[list[dict[str, object]], int]:
        fake = _ClosingServer({"/tokenize": b'{"tokens": [1, 2], "count": 2}'})
        async with fake as root:
            tok = UpstreamTokenizer(root)
            tok._http = aiohttp.ClientSession()
            try:
                return [await tok._post("/tokenize", {"prompt": "a b"}, {}) for _ in range(3)], fake.connections
            finally:
                await tok.close()

    got, connections = asyncio.run(counted())
    assert got == [{"tokens": [1, 2], "count": 2}] * 3 and connections == 3, (got, connections)


def test_the_metrics_sampler_tries_again_where_a_kept_alive_connection_was_closed() -> None:
    """The same crossing in /metrics, sampled every 5 s by default: as often as uvicorn closes an idle connection.
    A sample sent as the close came was lost, counted failed, where the run's pool held other idle connections
    (aiohttp's own second try of a GET takes one of them)."""
    from tokenbench.telemetry import MetricsSampler

    page = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"

    async def sampled() -> MetricsSampler:
        async with _ClosingServer({"/metrics": page}) as root, aiohttp.ClientSession() as http:
            async def get() -> None:
                async with http.get(f"{root}/metrics") as r:
                    await r.read()

            await asyncio.gather(*(get() for _ in range(4)))  # four connections in the pool, each answered once
            m = MetricsSampler(http, root)
            for _ in range(3):
                await m.sample()
            return m

    m = asyncio.run(sampled())
    assert m.failed == 0 and [s.get("vllm:num_requests_running") for _, s in m.samples] == [3.0] * 3, \
        (m.failed, m.samples)


def test_the_host_agents_client_tries_again_where_a_kept_alive_connection_was_closed() -> None:
    """`--agent`: the power and guard reads go to `tokenbench agent` (or a proxy in front of it) over kept-alive
    connections, and a read sent as the other end closed one was lost, ending the read with an error (aiohttp's
    own second try of a GET takes another connection of the pool, closing too)."""
    from tokenbench.hostagent.client import AgentClient

    async def read() -> list[object]:
        async with _ClosingServer({"/mark": b'{"t": 1.5}'}) as root, aiohttp.ClientSession() as http:
            agent = AgentClient(root, "secret", http=http)
            await asyncio.gather(*(agent.get("/mark") for _ in range(4)))  # four connections in the pool
            return [await agent.get("/mark") for _ in range(3)]

    assert asyncio.run(read()) == [{"t": 1.5}] * 3
