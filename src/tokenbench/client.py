"""Streaming client for OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions``.

Every network read is timestamped with ``time.perf_counter_ns()`` as it returns, before any parsing,
and every event it completes shares that timestamp: that is when those bytes reached the client.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import aiohttp

from .records import RequestRecord
from .sse import SSEParser

Api = Literal["completions", "chat"]


class TokenCounter(Protocol):
    def count(self, text: str) -> int: ...


@dataclass(slots=True)
class PreparedRequest:
    prompt: str
    max_tokens: int
    expected_input_tokens: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class StreamClient:
    """One endpoint, one model. ``body_extras`` are the server-specific fields (ignore_eos, ...)."""

    session: aiohttp.ClientSession
    base_url: str  # ends in /v1
    model: str
    api: Api = "completions"
    api_key: str | None = None
    temperature: float | None = 0.0
    body_extras: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 600.0
    stall_timeout_s: float = 60.0
    counter: TokenCounter | None = None
    one_token_per_chunk: bool = False  # the server streams one token per chunk (see servers.ONE_TOKEN_PER_CHUNK)

    @property
    def url(self) -> str:
        return f"{self.base_url}/{'chat/completions' if self.api == 'chat' else 'completions'}"

    def headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def body(self, req: PreparedRequest) -> dict[str, Any]:
        b: dict[str, Any] = {
            "model": self.model,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": req.max_tokens,
        }
        if self.api == "chat":
            b["messages"] = [{"role": "user", "content": req.prompt}]
        else:
            b["prompt"] = req.prompt
        if self.temperature is not None:
            b["temperature"] = self.temperature
        b.update(self.body_extras)
        b.update(req.extra_body)
        return b

    async def send(self, req: PreparedRequest, record: RequestRecord) -> RequestRecord:
        """Send one streaming request and fill ``record``. Never raises for server faults: they are recorded."""
        record.expected_input_tokens = req.expected_input_tokens
        record.expected_output_tokens = req.max_tokens
        payload = json.dumps(self.body(req)).encode()
        timeout = aiohttp.ClientTimeout(total=self.timeout_s, sock_read=self.stall_timeout_s)
        record.sent_ns = time.perf_counter_ns()
        try:
            async with self.session.post(self.url, data=payload, headers=self.headers(), timeout=timeout) as resp:
                record.http_status = resp.status
                if resp.status != 200:
                    text = (await resp.text(errors="replace"))[:500]
                    record.end_ns = time.perf_counter_ns()
                    record.error_kind = f"http_{resp.status}"
                    record.error = _error_message(text) or resp.reason or ""
                    return record
                await self._consume(resp, record)
        except aiohttp.ServerTimeoutError:
            record.error_kind = "stall"
            record.error = f"no bytes for {self.stall_timeout_s:g} s"
        except (asyncio.TimeoutError, TimeoutError):
            record.error_kind = "timeout"
            record.error = f"request exceeded {self.timeout_s:g} s"
        except aiohttp.ClientPayloadError as e:
            record.error_kind = "stream_broken"
            record.error = str(e)[:300]
        except aiohttp.ServerDisconnectedError as e:
            record.error_kind = "stream_broken" if record.first_byte_ns else "disconnected"
            record.error = str(e)[:300] or "server closed the connection"
        except aiohttp.ClientConnectorError as e:
            record.error_kind = "connection"
            record.error = str(e)[:300]
        except aiohttp.ClientError as e:
            record.error_kind = "client_error"
            record.error = f"{type(e).__name__}: {e}"[:300]
        if record.end_ns is None:
            record.end_ns = time.perf_counter_ns()
        return record

    async def _consume(self, resp: aiohttp.ClientResponse, record: RequestRecord) -> None:
        parser = SSEParser()
        answer: list[str] = []
        reasoning: list[str] = []
        usage: dict[str, Any] | None = None
        done = False
        chat = self.api == "chat"
        content = resp.content
        perf = time.perf_counter_ns
        while True:
            data = await content.readany()
            now = perf()
            if not data:
                break
            if record.first_byte_ns is None:
                record.first_byte_ns = now
            for ev in parser.feed(data):
                if ev.data == "[DONE]":
                    done = True
                    continue
                try:
                    obj = json.loads(ev.data)
                except ValueError:
                    record.malformed_events += 1
                    continue
                if not isinstance(obj, dict):
                    record.malformed_events += 1
                    continue
                if obj.get("usage"):
                    usage = obj["usage"]
                if "timings" in obj:
                    record.server_timings = obj["timings"]
                if "error" in obj and not obj.get("choices"):
                    err = obj["error"]
                    record.error_kind = "server_error_event"
                    record.error = (err.get("message") if isinstance(err, dict) else str(err))[:300]
                    continue
                for choice in obj.get("choices") or ():
                    if choice.get("index", 0) != 0:
                        continue
                    if chat:
                        delta = choice.get("delta") or {}
                        text = delta.get("content")
                        think = delta.get("reasoning_content") or delta.get("reasoning")
                    else:
                        text = choice.get("text")
                        think = choice.get("reasoning_content") or choice.get("reasoning")
                    if choice.get("finish_reason"):
                        record.finish_reason = choice["finish_reason"]
                    if not text and not think:
                        continue  # role-only or empty chunk: not a token
                    if record.first_token_ns is None:
                        record.first_token_ns = now
                    record.chunk_ns.append(now)
                    n = 0
                    if think:
                        record.reasoning_chunks += 1
                        reasoning.append(think)
                        n += len(think)
                    if text:
                        if record.first_answer_ns is None:
                            record.first_answer_ns = now
                        answer.append(text)
                        n += len(text)
                    record.chunk_chars.append(n)
        for ev in parser.close():
            if ev.data == "[DONE]":
                done = True
        record.end_ns = perf()
        record.answer_text = "".join(answer)
        record.reasoning_text = "".join(reasoning)
        if record.error_kind:
            return
        if record.malformed_events:
            record.error_kind = "malformed_event"
            record.error = f"{record.malformed_events} events were not valid JSON"
            return
        if not done and record.finish_reason is None:
            record.error_kind = "stream_incomplete"
            record.error = "the stream ended without [DONE] or a finish_reason"
            return
        self._count_tokens(record, usage)

    def _count_tokens(self, record: RequestRecord, usage: dict[str, Any] | None) -> None:
        timings = record.server_timings or {}
        if usage and usage.get("completion_tokens") is not None:
            record.output_tokens = int(usage["completion_tokens"])
            record.output_tokens_source = "usage"
            details = usage.get("completion_tokens_details") or {}
            if details.get("reasoning_tokens") is not None:
                record.reasoning_tokens = int(details["reasoning_tokens"])
        elif timings.get("predicted_n") is not None:
            record.output_tokens = int(timings["predicted_n"])
            record.output_tokens_source = "server_timings"
        elif self.counter is not None and not self.one_token_per_chunk:
            record.output_tokens = self.counter.count(record.reasoning_text + record.answer_text)
            record.output_tokens_source = "tokenizer"
        else:
            record.output_tokens = len(record.chunk_ns)
            record.output_tokens_source = "chunks"
        if record.reasoning_tokens is None and record.reasoning_text:
            if self.counter is not None:
                record.reasoning_tokens = self.counter.count(record.reasoning_text)
            else:
                record.reasoning_tokens = record.reasoning_chunks
        if usage and usage.get("prompt_tokens") is not None:
            record.input_tokens = int(usage["prompt_tokens"])
            record.input_tokens_source = "usage"
        elif timings.get("prompt_n") is not None and not timings.get("cache_n"):
            record.input_tokens = int(timings["prompt_n"])
            record.input_tokens_source = "server_timings"
        elif record.expected_input_tokens is not None:
            record.input_tokens = record.expected_input_tokens
            record.input_tokens_source = "tokenizer"


def _error_message(text: str) -> str:
    """The server's own words from an error body (OpenAI ``{"error": {"message"}}``, FastAPI ``detail``)."""
    try:
        obj = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:300]
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("detail", obj.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            return " ".join(str(err).split())[:300]
    return " ".join(text.split())[:300]
