"""What the driver and a worker send each other: the client to build, a phase's share, and what comes back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp

from ..client import Api, PreparedRequest, StreamClient
from ..offered_load import Level
from ..records import Phase, RequestRecord


@dataclass(slots=True, frozen=True)
class ClientSpec:
    """What a worker needs to build the same client as the driver's (an HTTP session is not sent across)."""

    base_url: str
    model: str
    api: Api
    api_key: str | None
    temperature: float | None
    body_extras: dict[str, Any]
    timeout_s: float
    stall_timeout_s: float
    one_token_per_chunk: bool
    fresh_connection: bool
    counter_path: str | None = None  # a local tokenizer to count tokens with, where the server gives no usage
    stream_options: tuple[tuple[str, bool], ...] = (("include_usage", True),)
    lean: bool = True  # the lean send path (client.StreamClient.lean)

    @classmethod
    def of(cls, client: StreamClient, counter_path: str | None) -> ClientSpec:
        return cls(client.base_url, client.model, client.api, client.api_key, client.temperature,
                   dict(client.body_extras), client.timeout_s, client.stall_timeout_s, client.one_token_per_chunk,
                   client.fresh_connection, counter_path, tuple(client.stream_options.items()), client.lean)

    def build(self, http: aiohttp.ClientSession) -> StreamClient:
        counter = None
        if self.counter_path:
            from ..workload import LocalTokenizer

            counter = LocalTokenizer(self.counter_path)
        return StreamClient(http=http, base_url=self.base_url, model=self.model, api=self.api,
                            api_key=self.api_key, temperature=self.temperature, body_extras=dict(self.body_extras),
                            timeout_s=self.timeout_s, stall_timeout_s=self.stall_timeout_s, counter=counter,
                            one_token_per_chunk=self.one_token_per_chunk, fresh_connection=self.fresh_connection,
                            stream_options=dict(self.stream_options), lean=self.lean)


@dataclass(slots=True)
class PhaseTask:
    """One worker's share of one phase."""

    level: Level
    phase: Phase
    requests: int | None
    duration_s: float | None
    seed: int
    start_at_wall_ns: int
    prompts: list[tuple[int, PreparedRequest]]
    offset_s: float = 0.0
    watch: bool = False
    grace_s: float | None = None  # with a duration: requests in flight this long after its end are cancelled


@dataclass(slots=True)
class Drained:
    records: list[RequestRecord]
    prompts_left: int
    done: bool
    in_flight: int = 0  # requests sent and not yet ended
    #: a warm-up's: when its longest-waiting request in flight was sent (the worker's perf_counter_ns)
    waiting_since_ns: int | None = None


@dataclass(slots=True)
class WorkerReport:
    records: list[RequestRecord]  # the phase's records not drained before
    start_ns: int
    end_ns: int
    client: dict[str, Any]
    reasons: list[str]
    error: str | None = None
