"""The plainest workload: independent requests of fixed or drawn lengths, unique prompts no prefix cache can serve
(unless ``--prefix-len`` asks for a shared start), closed loop at each concurrency or open loop at each rate.

Its prompt pool (``RequestPrompts``) serves the dataset kind too: there each request takes the next item of the
file instead of a built prompt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..apis import CONVERSATIONAL
from ..client import PreparedRequest
from ..dataset import PromptItem, measure
from ..draws import Draw
from ..offered_load import Level
from ..records import RequestRecord
from ..workload import PromptBuilder, WorkloadRecord
from .base import Binding, LevelWork, OnDone, RequestLevel, SweepOptions, plain_slot, request_levels

LengthFields = Callable[[int], dict[str, Any]]


class RequestPrompts:
    """Unique prompts, built ahead of the level so building never delays a send. Request ``i`` has its own lengths
    (``WorkloadRecord.request_lengths``: the same seed draws the same lengths), or from a dataset the next of its
    ``items`` (in the run's shuffled order) with the output length it gives, else the drawn one. ``fields`` gives
    the request fields that fix one output length, put in each request when lengths vary (None: every request's
    are the client's ``body_extras``). ``context``: the most tokens the server gives a request, where it says; the
    first item that passes it is warned of, as the server will refuse it."""

    def __init__(self, builder: PromptBuilder, workload: WorkloadRecord, extra: dict[str, Any],
                 fields: LengthFields | None = None, items: list[PromptItem] | None = None,
                 warn: Callable[[str], None] | None = None, context: int | None = None) -> None:
        self.builder = builder
        self.workload = workload
        self.extra = extra
        self.fields = fields
        self.items = items or []
        self.warn = warn
        self.pool: list[tuple[int, PreparedRequest]] = []
        self.counter = 0
        self.longest = 0  # the most tokens (prompt and output) of a request prepared so far
        self.context = context
        self.over_context = False  # an item that passes the server's context was warned of

    async def prepare(self, n: int) -> None:
        for k in range(n - len(self.pool)):
            self.pool.append((self.counter, await self._one(self.counter)))
            self.counter += 1
            if k % 64 == 63:  # a local tokenizer never waits: let an interrupt (Ctrl-C, SIGTERM) through
                await asyncio.sleep(0)

    async def _one(self, i: int) -> PreparedRequest:
        n_in, n_out = self.workload.request_lengths(i)
        messages = None
        if self.items:
            item = self.items[i % len(self.items)]
            if i == len(self.items) and self.warn is not None:
                self.warn(f"the dataset's {len(self.items):,} items are used up: from request {i + 1:,} on they "
                          "repeat, and a server's prefix cache can serve a repeated prompt")
            count, reply = await measure(item, self.builder.tok)
            n_out = item.output_len or reply or n_out
            if self.context and count + n_out > self.context and not self.over_context and self.warn is not None:
                self.over_context = True
                self.warn(f"a dataset item of {count:,} prompt tokens and {n_out:,} out passes the "
                          f"{self.context:,} tokens of context the server gives a request: the server will refuse "
                          "it, and such items count as failed requests (the level is flagged slots_exceeded)")
            text = item.text()
            messages = item.wire_messages() if self.workload.api in CONVERSATIONAL else None
        else:
            text, count = await self.builder.one(i, n_in, self.workload.prefix_len)
        self.longest = max(self.longest, count + n_out)
        extra = self.extra if self.fields is None else self.fields(n_out)
        return PreparedRequest(text, n_out, count, extra, messages)

    async def next(self) -> tuple[int, PreparedRequest]:
        if not self.pool:
            await self.prepare(1)
        return self.pool.pop(0)

    async def take(self, n: int) -> list[tuple[int, PreparedRequest]]:
        """The next ``n`` prompts, for a worker (workers.WorkerPool)."""
        await self.prepare(n)
        out, self.pool = self.pool[:n], self.pool[n:]
        return out


def recorded(extras: dict[str, Any], fields: LengthFields | None) -> dict[str, Any]:
    """The request fields a manifest records: a field whose value follows each request's length says so."""
    if fields is None:
        return extras
    one, two = fields(1), fields(2)
    return extras | {k: v if one.get(k) == v else "per request" for k, v in two.items()}


class BoundRequests:
    """Independent requests bound to a run: fixed lengths ride on the client's body, varying ones on each request."""

    def __init__(self, b: Binding, workload: WorkloadRecord, items: list[PromptItem] | None = None) -> None:
        self.b, self.workload, self.items = b, workload, items
        ep, opts = b.endpoint, b.opts
        self.fields: LengthFields | None = b.length_fields if workload.varies and opts.fixed_output else None
        fixed = ep.info.adapter.output_length_fields(workload.output_len, ep.eos_token_id, opts.api) \
            if opts.fixed_output and not workload.varies else {}
        extras = fixed | opts.extra_body
        self.body_extras = extras
        self.recorded_fields = recorded(extras, self.fields)

    def workload_entry(self) -> dict[str, Any]:
        return self.workload.to_dict()

    def prompts(self) -> RequestPrompts:
        return RequestPrompts(self.b.builder, self.workload, {}, self.fields, self.items,
                              self.b.warn if self.items else None, self.b.endpoint.info.slot_ctx)

    def level(self, level: Level, repetition: int, records: list[RequestRecord], on_done: OnDone) -> LevelWork:
        return RequestLevel(self.b.opts.requests, level, timed=self.b.opts.duration_s is not None)


@dataclass(frozen=True, slots=True)
class LengthsKind:
    """Requests of ``input``/``output`` tokens (each drawn per request where a distribution is given)."""

    input: Draw
    output: Draw
    shape: str | None = None
    prefix_len: int = 0  # tokens shared by every request (0: every prompt unique from its first token)

    name = "lengths"
    splits = True
    outgrows_slots = False

    @classmethod
    def fixed(cls, input_len: int = 128, output_len: int = 128, **kw: Any) -> LengthsKind:
        return cls(Draw.fixed(input_len), Draw.fixed(output_len), **kw)

    def refuse(self, opts: SweepOptions) -> None:
        pass

    def levels(self, opts: SweepOptions) -> list[Level]:
        return request_levels(opts)

    def longest_request(self) -> int:
        return int(self.input.maximum()) + int(self.output.maximum())

    def typical_input(self) -> int:
        return int(self.input.maximum())

    def for_search(self) -> LengthsKind:
        return self

    def for_slot(self, limit: int) -> tuple[int, LengthsKind]:
        ctx, _ = plain_slot(self)
        return ctx, self

    def record(self, api: str, seed: int) -> WorkloadRecord:
        """What the run sends, as its manifest records it: a distribution by its expected lengths and itself."""
        draw_in = None if self.input.is_fixed else self.input
        draw_out = None if self.output.is_fixed else self.output
        return WorkloadRecord(round(self.input.expected()), round(self.output.expected()), self.shape, api,
                        self.prefix_len, seed, draw_in, draw_out)

    def bind(self, b: Binding) -> BoundRequests:
        return BoundRequests(b, self.record(b.opts.api, b.seed))
