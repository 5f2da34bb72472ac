"""A timestamped request trace (``sweep --trace``: Mooncake JSONL or CSV, read by ``trace.py``), replayed once in
open loop at its own times and lengths: one level, its requests' prompts built block by block so the requests that
share hash ids share tokens, and a prefix cache allowed to serve them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .. import redact
from ..errors import UsageError
from ..offered_load import Level
from ..records import RequestRecord
from ..trace import Trace, TracePrompts
from ..workload import WorkloadRecord
from .base import Binding, LevelWork, OnDone, RequestLevel, SweepOptions, plain_slot, warmups


class BoundTrace:
    def __init__(self, kind: TraceKind, b: Binding) -> None:
        self.kind, self.b = kind, b
        adapter = b.endpoint.info.adapter
        # the prefix cache may serve shared blocks (llama.cpp's cache_prompt, off for every other sweep)
        self.body_extras = adapter.warm_context_fields() | b.opts.extra_body
        self.recorded_fields = self.body_extras

    def fields(self, output_len: int) -> dict[str, Any]:
        """A trace request's own fields, by its output length: that length fixed as the server allows, the prefix
        cache allowed to serve shared blocks, the user's --extra-body on top."""
        ep, opts = self.b.endpoint, self.b.opts
        fixed = ep.info.adapter.output_length_fields(output_len, ep.eos_token_id, opts.api) if opts.fixed_output else {}
        return fixed | ep.info.adapter.warm_context_fields() | opts.extra_body

    def workload_entry(self) -> dict[str, Any]:
        trace, first = self.kind.trace, self.kind.trace.requests[0].output_length
        record = WorkloadRecord(trace.max_input, trace.max_output, None, self.b.opts.api, 0, self.b.seed)
        return record.to_dict() | {"trace": trace.describe(self.kind.speed) | {
            "request_fields": f"per request, by its output_length: for {first}, "
                              f"{json.dumps(redact.body(self.fields(first)))}"}}

    def prompts(self) -> TracePrompts:
        """Its warm-ups first (prompts of its first requests' lengths that share no block), then the trace."""
        first = self.kind.levels(self.b.opts)[0]
        return TracePrompts(self.b.builder, self.kind.trace, self.fields, warmups(self.b.opts, first))

    def level(self, level: Level, repetition: int, records: list[RequestRecord], on_done: OnDone) -> LevelWork:
        return RequestLevel(len(level.schedule or ()), level)


#: A capacity search of a request trace, refused before any option that goes with it is looked at.
NO_SEARCH = ("a request trace is replayed once at its own times: there is no load to search (search lengths, "
             "sessions or agent trajectories)")


@dataclass(frozen=True, slots=True)
class TraceKind:
    """``trace`` as replayed (its first N requests where asked: ``Trace.head``), ``speed`` times as fast."""

    trace: Trace
    speed: float = 1.0

    name = "trace"
    splits = False  # one schedule, its prompts in order: one process replays it
    outgrows_slots = False

    def refuse(self, opts: SweepOptions) -> None:
        if opts.repetitions > 1 or opts.ray or (opts.workers or 1) > 1:
            raise UsageError("--trace is replayed once, by one process: drop --repetitions, --workers and --ray")

    def levels(self, opts: SweepOptions) -> list[Level]:
        return [Level(schedule=self.trace.schedule(self.speed), max_concurrency=opts.max_concurrency)]

    def longest_request(self) -> int:
        return self.trace.max_input + self.trace.max_output

    def typical_input(self) -> int:
        return self.trace.max_input

    def for_search(self) -> TraceKind:
        raise UsageError(NO_SEARCH)

    def for_slot(self, limit: int) -> tuple[int, TraceKind]:
        ctx, _ = plain_slot(self)
        return ctx, self

    def bind(self, b: Binding) -> BoundTrace:
        return BoundTrace(self, b)
