"""A deterministic OpenAI-compatible SSE server with a settable schedule and settable faults, on
``/v1/completions``, ``/v1/chat/completions``, Anthropic's ``/v1/messages`` and OpenAI's ``/v1/responses``
(``emitter_apis``: each API's events, as vLLM streams them).

It tests the tool, never the product: the client's parser and metrics against known timings (TTFT, ITL,
tokens per chunk), the faults a real server will not produce on demand (a stall, a 500, a broken
stream, malformed events, a prompt truncated), and the client's own overhead at high chunk rates
(``benchmarks/client_overhead.py``). Run it alone with ``python -m tokenbench.emitter --port 8999``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, cast

from aiohttp import web

from .emitter_apis import Frames, api_of, frames_for, prompt_tokens as count_prompt
from .emitter_chunks import MODEL
from .lean_emitter import lean_loop, serve_lean


@dataclass(slots=True)
class EmitterConfig:
    ttft_s: float = 0.0  # delay before the first token-bearing chunk
    itl_s: float = 0.0  # delay between token-bearing chunks
    tokens_per_chunk: int = 1
    usage: bool = True  # send a final usage chunk when asked with stream_options.include_usage
    role_first: bool = True  # chat: an empty role-only chunk right away, as vLLM and Transformers do
    reasoning_tokens: int = 0  # first tokens sent as reasoning_content
    keepalive: bool = False  # ": keep-alive" comments between chunks
    fault: str | None = None  # stall | http500 | broken | malformed | early_stop | truncate | error_event | poison
    fault_after: int = 2  # chunks sent before a stall/broken/malformed fault
    early_stop_tokens: int = 3  # early_stop: stop after this many tokens with finish_reason "stop"
    truncate_to: int = 16  # truncate: report this many prompt tokens
    stall_s: float = 3600.0
    owned_by: str = "emitter"
    burst: bool = False  # write all token chunks at once (measures how fast a client can ingest)
    fault_from: int = 0  # the fault hits requests from this one on (0-based), so a preflight can pass
    exit_after: int | None = None  # the process exits after serving this many requests (run it as a process)
    metrics: bool = True  # serve a vLLM-shaped /metrics
    #: Close the connection this long after each stream while advertising keep-alive, as llama.cpp's
    #: llama-server does: a client that reuses the pooled connection sends into a socket about to close.
    close_after_stream_s: float | None = None
    models_status: int = 200  # /v1/models answers this (Transformers serve without an HF cache: 500)
    slot_ctx: int | None = None  # serve llama-server's /props with this context per slot (it then looks like one)
    #: vLLM's context a request: listed in /v1/models, and a longer request refused with HTTP 400, as vLLM does
    max_model_len: int | None = None
    metrics_fail_first: int = 0  # answer this many /metrics GETs with 500 (a server busy or restarting)
    poison: str = "{}"  # fault "poison": this event data is sent in place of a token chunk, then the stream goes on
    #: A server that saturates: at most ``slots`` streams generate at once (the rest wait, their TTFT growing with
    #: the queue), each stream's gap between tokens grows by ``itl_per_stream_s`` for every other stream
    #: generating (a batch that slows as it fills), and every delay is scaled by a seeded normal factor of relative
    #: spread ``jitter`` (a noisy server).
    slots: int | None = None
    itl_per_stream_s: float = 0.0
    jitter: float = 0.0
    jitter_seed: int = 0
    #: A chat request that offers tools is answered with a call of its first tool, streamed as vLLM streams one:
    #: the call's id and name first, then its arguments in pieces, then finish_reason "tool_calls".
    tool_calls: bool = False


class Emitter:
    def __init__(self, config: EmitterConfig | None = None) -> None:
        self.config = config or EmitterConfig()
        self.requests_seen: list[dict[str, Any]] = []
        self.headers_seen: list[dict[str, str]] = []  # each request's HTTP headers, in the order they came
        self.vocab: dict[str, int] = {}
        # prompt -> (received, first token chunk written, last chunk written), perf_counter_ns; the clock is
        # CLOCK_MONOTONIC, shared by every process of the machine, so a client on it can compare.
        self.stamps: dict[str, tuple[int, int, int]] = {}
        self.app = web.Application()
        self.app.router.add_get("/v1/models", self.models)
        self.app.router.add_post("/v1/completions", self.complete)
        self.app.router.add_post("/v1/chat/completions", self.complete)
        self.app.router.add_post("/v1/messages", self.complete)
        self.app.router.add_post("/v1/responses", self.complete)
        self.app.router.add_post("/tokenize", self.tokenize)
        self.app.router.add_post("/detokenize", self.detokenize)
        self.app.router.add_get("/version", self.version)
        self.app.router.add_get("/stats", self.stats)
        self.app.router.add_get("/metrics", self.metrics)
        self.app.router.add_get("/props", self.props)
        self.generated = 0
        self.running = 0
        self.generating = 0  # streams holding a slot (EmitterConfig.slots)
        self._slots: tuple[int, asyncio.Semaphore] | None = None  # (slots, its semaphore), made on first use
        self._rng = random.Random(self.config.jitter_seed)

    async def metrics(self, request: web.Request) -> web.Response:
        """vLLM-shaped Prometheus counters; speculative decoding proposes 3 tokens per step and 2 are accepted."""
        if not self.config.metrics:
            raise web.HTTPNotFound()
        if self.config.metrics_fail_first > 0:
            self.config = replace(self.config, metrics_fail_first=self.config.metrics_fail_first - 1)
            raise web.HTTPInternalServerError()
        steps = self.generated // 3
        text = (
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} {self.running}\n'
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f'vllm:kv_cache_usage_perc{{engine="0",model_name="{MODEL}"}} {min(1.0, self.running / 8)}\n'
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
            "# TYPE vllm:generation_tokens_total counter\n"
            f'vllm:generation_tokens_total{{engine="0",model_name="{MODEL}"}} {self.generated}.0\n'
            "# TYPE vllm:spec_decode_num_drafts_total counter\n"
            f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{MODEL}"}} {steps}.0\n'
            "# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
            f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="{MODEL}"}} {3 * steps}.0\n'
            "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="{MODEL}"}} {2 * steps}.0\n'
            # what every real page carries beside the engine's series, and tokenbench does not read
            "# TYPE python_gc_objects_collected_total counter\n"
            'python_gc_objects_collected_total{generation="0"} 1234.0\n'
            "# TYPE process_resident_memory_bytes gauge\n"
            "process_resident_memory_bytes 1.5e+09\n"
        )
        return web.Response(text=text, content_type="text/plain")

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response({"stamps": self.stamps})

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "emitter-1"})

    async def props(self, request: web.Request) -> web.Response:
        if self.config.slot_ctx is None:
            raise web.HTTPNotFound()
        return web.json_response({"default_generation_settings": {"n_ctx": self.config.slot_ctx},
                                  "total_slots": 1, "build_info": "emitter"})

    async def models(self, request: web.Request) -> web.Response:
        if self.config.models_status != 200:
            return web.json_response({"detail": "no cache"}, status=self.config.models_status)
        entry: dict[str, Any] = {"id": MODEL, "object": "model", "owned_by": self.config.owned_by}
        if self.config.max_model_len is not None:
            entry["max_model_len"] = self.config.max_model_len
        return web.json_response({"object": "list", "data": [entry]})

    # One "token" per whitespace-separated word: the emitter's tokenizer, served like vLLM's /tokenize.
    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        text = body.get("prompt", body.get("content", ""))  # vLLM's field, llama-server's
        if isinstance(body.get("messages"), list):  # vLLM's chat form: the words _count_prompt counts
            text = " ".join(str(m.get("content", "")) for m in body["messages"])
        ids = [self.vocab.setdefault(w, len(self.vocab)) for w in str(text).split()]
        return web.json_response({"tokens": ids, "count": len(ids), "max_model_len": 1_000_000})

    async def detokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        words = {i: w for w, i in self.vocab.items()}
        text = " ".join(words[i] for i in body.get("tokens", []))
        return web.json_response({"prompt": text, "content": text})

    async def complete(self, request: web.Request) -> web.StreamResponse:
        c = self.config
        t_recv = time.perf_counter_ns()
        body = await request.json()
        self.requests_seen.append(body)
        self.headers_seen.append(dict(request.headers))
        if c.exit_after is not None and len(self.requests_seen) > c.exit_after:
            os._exit(1)  # a server that dies mid-level
        if len(self.requests_seen) <= c.fault_from:
            c = replace(c, fault=None)
        if c.fault == "http500":
            return web.json_response({"error": {"message": "boom: injected failure"}}, status=500)
        model = body.get("model")
        if model not in (None, MODEL):
            return web.json_response({"error": {"message": f"model {model} not found"}}, status=404)
        api = api_of(request.path)
        max_tokens = int(body.get("max_output_tokens" if api == "responses" else "max_tokens") or 16)
        n_tokens = min(max_tokens, c.early_stop_tokens) if c.fault == "early_stop" else max_tokens
        prompt_tokens = c.truncate_to if c.fault == "truncate" else count_prompt(body, api)
        if c.max_model_len is not None and prompt_tokens + max_tokens > c.max_model_len:
            return web.json_response({"error": {
                "message": f"This model's maximum context length is {c.max_model_len} tokens. However, you "
                           f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
                           f"{max_tokens} in the completion).", "type": "BadRequestError", "code": 400}}, status=400)
        # usage: where chat and completions ask for it (stream_options.include_usage); always on the others
        usage = c.usage and (api in ("messages", "responses") or bool((body.get("stream_options") or {})
                                                                       .get("include_usage")))
        frames = frames_for(api, c.role_first, prompt_tokens, usage)
        headers = {"Content-Type": "text/event-stream"}
        if c.close_after_stream_s is not None:
            headers["Keep-Alive"] = "timeout=5, max=100"
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        self.running += 1
        try:
            if not c.slots:
                return await self._generate(request, resp, body, c, frames, n_tokens, max_tokens, prompt_tokens,
                                            usage, t_recv)
            if self._slots is None or self._slots[0] != c.slots:
                self._slots = (c.slots, asyncio.Semaphore(c.slots))
            async with self._slots[1]:  # queued until a slot is free, as a saturated server's requests wait
                return await self._generate(request, resp, body, c, frames, n_tokens, max_tokens, prompt_tokens,
                                            usage, t_recv)
        except ConnectionResetError:  # the client went away mid-stream (an interrupted run): nothing to answer
            return resp
        finally:
            self.running -= 1

    async def _generate(self, request: web.Request, resp: web.StreamResponse, body: dict[str, Any],
                        c: EmitterConfig, frames: Frames, n_tokens: int, max_tokens: int, prompt_tokens: int,
                        usage: bool, t_recv: int) -> web.StreamResponse:
        self.generating += 1
        try:
            return await self._stream(request, resp, body, c, frames, n_tokens, max_tokens, prompt_tokens, usage,
                                      t_recv)
        finally:
            self.generating -= 1

    def _delay(self, base_s: float) -> float:
        """A delay as configured: scaled by the jitter's seeded normal factor (never below zero)."""
        if not self.config.jitter or base_s <= 0:
            return base_s
        return max(0.0, base_s * (1 + self._rng.gauss(0, self.config.jitter)))

    async def _stream(self, request: web.Request, resp: web.StreamResponse, body: dict[str, Any], c: EmitterConfig,
                      frames: Frames, n_tokens: int, max_tokens: int, prompt_tokens: int, usage: bool,
                      t_recv: int) -> web.StreamResponse:
        head = frames.open()
        if head:
            await resp.write(head)
        if frames.tools and c.tool_calls and body.get("tools"):
            return await self._call_tool(resp, body, c, frames, prompt_tokens, usage, t_recv)
        start = time.perf_counter()
        sent = 0
        n_chunks = 0
        t_first = 0
        if c.burst:
            data, sent = frames.burst(n_tokens, c.tokens_per_chunk)
            t_first = time.perf_counter_ns()
            await resp.write(data)
        due = start + self._delay(c.ttft_s)
        while sent < n_tokens:
            k = min(c.tokens_per_chunk, n_tokens - sent)
            if n_chunks:
                due += self._delay(c.itl_s + c.itl_per_stream_s * max(0, self.generating - 1))
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if n_chunks == c.fault_after and await _inject_fault(request, resp, c, frames):
                return resp
            text = "".join(f" w{sent + i}" for i in range(k))
            if not t_first:
                t_first = time.perf_counter_ns()
            await resp.write(frames.token(text, sent < c.reasoning_tokens))
            if c.keepalive:
                await resp.write(b": keep-alive\n\n")
            sent += k
            self.generated += k
            n_chunks += 1
        t_last = time.perf_counter_ns()
        self.stamps[str(body.get("prompt", ""))[:64]] = (t_recv, t_first, t_last)
        for part in frames.close("length" if sent >= max_tokens else "stop", prompt_tokens, sent, c.reasoning_tokens,
                                 usage):
            await resp.write(part)
        await resp.write_eof()
        if c.close_after_stream_s is not None and request.transport is not None:
            asyncio.get_running_loop().call_later(c.close_after_stream_s, request.transport.close)
        return resp

    async def _call_tool(self, resp: web.StreamResponse, body: dict[str, Any], c: EmitterConfig, frames: Frames,
                         prompt_tokens: int, usage: bool, t_recv: int) -> web.StreamResponse:
        """A call of the request's first tool: its arguments name the request's place in the emitter's log."""
        await asyncio.sleep(self._delay(c.ttft_s))
        t_first = time.perf_counter_ns()
        tool = body["tools"][0] if isinstance(body["tools"][0], dict) else {}
        name = str((tool.get("function") or {}).get("name") or tool.get("name") or "tool")  # chat's, or flat
        n = len(self.requests_seen)
        pieces = ['{"task": ', f'"step {n} of the work', ' to do"}']
        await resp.write(frames.tool_start(f"call_{n}", name))
        for piece in pieces:
            await asyncio.sleep(self._delay(c.itl_s))
            await resp.write(frames.tool_args(piece))
        self.generated += len(pieces)
        self.stamps[str(body.get("prompt", ""))[:64]] = (t_recv, t_first, time.perf_counter_ns())
        for part in frames.close("tool_calls", prompt_tokens, len(pieces), 0, usage):
            await resp.write(part)
        await resp.write_eof()
        return resp


async def _inject_fault(request: web.Request, resp: web.StreamResponse, c: EmitterConfig, frames: Frames) -> bool:
    """The configured mid-stream fault, at its chunk; True when it ends the stream."""
    if c.fault == "stall":
        await asyncio.sleep(c.stall_s)
    elif c.fault == "broken":
        assert request.transport is not None
        request.transport.close()
        return True
    elif c.fault == "malformed":
        await resp.write(b'data: {"choices": [ {"text": \n\n')
    elif c.fault == "poison":
        await resp.write(b"data: " + c.poison.encode() + b"\n\n")
    elif c.fault == "error_event":
        await resp.write(frames.error("out of memory"))
        return True
    return False


class BackgroundEmitter:
    """The emitter on its own thread and event loop, so its schedule does not share the client's loop."""

    def __init__(self, config: EmitterConfig | None = None, port: int = 0) -> None:
        self.emitter = Emitter(config)
        self._port = port
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.port = 0

    @property
    def config(self) -> EmitterConfig:
        return self.emitter.config

    @config.setter
    def config(self, c: EmitterConfig) -> None:
        self.emitter.config = c

    def configure(self, **kw: Any) -> None:
        self.emitter.config = replace(self.emitter.config, **kw)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _start(self) -> None:
        self._runner = web.AppRunner(self.emitter.app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self._port)
        await site.start()
        server = cast(asyncio.base_events.Server, site._server)  # a TCP site's server has sockets
        assert server is not None and server.sockets
        self.port = server.sockets[0].getsockname()[1]

    def __enter__(self) -> BackgroundEmitter:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


def answers(root: str, tries: int = 200) -> bool:
    """Whether an emitter at ``root`` (http://host:port) answers /v1/models within ``tries`` x 50 ms."""
    import urllib.request

    for _ in range(tries):
        try:
            urllib.request.urlopen(root + "/v1/models", timeout=1)
            return True
        except OSError:
            time.sleep(0.05)
    return False


class EmitterProcess:
    """The emitter in a process of its own (``python -m tokenbench.emitter``): it can die, be killed, or run
    beside a client without sharing its event loop. ``url`` is the OpenAI base (…/v1)."""

    def __init__(self, *args: str) -> None:
        import socket
        import subprocess
        import sys

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.root = f"http://127.0.0.1:{port}"
        self.url = self.root + "/v1"
        self.proc = subprocess.Popen([sys.executable, "-m", "tokenbench.emitter", "--port", str(port), *args])
        if not answers(self.root):
            self.close()
            raise RuntimeError("the emitter process did not start")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def __enter__(self) -> EmitterProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="deterministic OpenAI-compatible SSE emitter")
    ap.add_argument("--port", type=int, default=8999)
    ap.add_argument("--ttft", type=float, default=0.0, help="seconds")
    ap.add_argument("--itl", type=float, default=0.0, help="seconds")
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--burst", action="store_true", help="write all token chunks at once")
    ap.add_argument("--exit-after", type=int, help="exit after serving this many requests (a dying server)")
    ap.add_argument("--api-key", help="accepted and ignored (as a real server's would be checked)")
    ap.add_argument("--close-after-stream", type=float, metavar="S",
                    help="close each connection S seconds after its stream, as llama-server does")
    ap.add_argument("--slots", type=int, help="at most this many streams generate at once; the rest wait")
    ap.add_argument("--itl-per-stream", type=float, default=0.0,
                    help="seconds added to each gap between tokens per other stream generating")
    ap.add_argument("--jitter", type=float, default=0.0, help="relative spread of every delay (seeded)")
    ap.add_argument("--lean", action="store_true",
                    help="the paced or burst schedule on a bare asyncio server (LeanServer: the client overhead "
                         "benchmark's; no faults)")
    ap.add_argument("--no-usage", action="store_true",
                    help="never send a usage chunk (as servers without stream_options do): a client counting prompts "
                         "with a tokenizer of its own then has nothing to compare them with")
    ap.add_argument("--reuse-port", action="store_true",
                    help="with --lean: share --port with other emitter processes (SO_REUSEPORT)")
    ap.add_argument("--own-port", type=int, help="with --lean: also answer on this port (this process's /stats)")
    a = ap.parse_args(argv)
    if (a.reuse_port or a.own_port is not None) and not a.lean:
        ap.error("--reuse-port and --own-port go with --lean")
    config = EmitterConfig(ttft_s=a.ttft, itl_s=a.itl, tokens_per_chunk=a.tokens_per_chunk,
                           burst=a.burst, exit_after=a.exit_after, close_after_stream_s=a.close_after_stream,
                           slots=a.slots, itl_per_stream_s=a.itl_per_stream, jitter=a.jitter, usage=not a.no_usage)
    if a.lean:
        with asyncio.Runner(loop_factory=lean_loop) as runner:
            runner.run(serve_lean(config, a.port, a.reuse_port, a.own_port))
        return
    em = Emitter(config)
    web.run_app(em.app, host="127.0.0.1", port=a.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
