"""Agent sessions (``sweep --sessions``; ``sessions.py`` runs them): at each agent count the same sessions with the
prefix cache warm, then (the baseline) busted; every turn a chat request that re-sends the conversation, each
agent's fields keeping its slot where the server has slots. Closed loop over agents, in this process (each turn
waits for the answer before it)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..grace import CUT_KINDS
from ..apis import CONVERSATIONAL
from ..engines.embedded import slot_context
from ..errors import UsageError
from ..offered_load import Level
from ..background import cancel_and_wait
from ..metrics import session_stats, soak_windows, whole_sessions
from ..records import RequestRecord
from ..soak_totals import apply
from ..sessions import CacheMode, SessionLevel, SessionPlan, SessionTexts
from ..tenants import BackgroundLoad
from ..workload import WorkloadRecord
from .base import Binding, LevelLoad, OnDone, SweepOptions, sent_since

if TYPE_CHECKING:
    from ..client import StreamClient
    from ..levels import ServingLevel
    from .lengths import RequestPrompts


class SessionsWork:
    """One level of agent sessions."""

    planned: int | None = None
    stoppable: bool = False  # its records arrive as sessions go: a search runs it whole

    def __init__(self, run: SessionLevel, cache: CacheMode, background: BackgroundLoad | None = None) -> None:
        self.run, self.cache, self.background = run, cache, background

    def prepare(self, warm: int) -> int:
        # one request of a first turn's size per agent, on prompts of their own (no session's text, so no cache is
        # warmed for the sessions): an engine's first batch of that shape pays its one-time costs there (vLLM
        # compiled again for 2 x 2,079 tokens and a busted turn read 43 s, a "175x gain" of the cache)
        return warm

    async def measure(self, load: LevelLoad, level: Level, duration_s: float | None, seed: int,
                      records: list[RequestRecord], on_done: OnDone) -> None:
        self.run.duration_s = duration_s  # a soak: sessions back to back until the time is up
        self.run.spill = load.spill  # ... holding a sample of its ended sessions, the rest stored and folded
        if self.background is None:
            await load.agents(self.run, level, records)
            return
        await self.background.prepare()
        beside = asyncio.create_task(self.background.run())
        try:
            await load.agents(self.run, level, records)
        finally:
            await cancel_and_wait(beside)

    def attach(self, summary: ServingLevel, records: list[RequestRecord]) -> None:
        """The session view, with what the runner alone knows (compactions, caps, a soak's sessions let go)."""
        cut = self._cut(records)
        stats = session_stats(records, self.cache, cut)
        stats.compactions, stats.capped = self.run.compactions, self.run.capped
        if self.run.duration_s:
            stats.over_time = soak_windows(records, self.run.duration_s)
        if self.background is not None:
            stats.background = self.background.stats()
        summary.session = stats
        keeper = self.run.keeper
        if keeper is not None and keeper.finish(cut):  # a soak that let sessions go: its figures over every turn
            stats.sampled_sessions = keeper.kept_sessions()
            apply(keeper.folded, summary)

    def counted(self, records: list[RequestRecord], since_ns: int) -> tuple[int, int]:
        """The sessions' turns (a soak's from its totals, the turns it let go included), and the background
        load's requests: unique prompts the server counted among its cache's lookups."""
        keeper = self.run.keeper
        cached, prompt = (keeper.folded.cached, keeper.folded.prompt_said) if keeper is not None and keeper.let_go \
            else sent_since(records, since_ns)
        if self.background is not None:
            cached, prompt = cached + self.background.cached, prompt + self.background.prompt
        return cached, prompt

    def whole(self, records: list[RequestRecord]) -> list[list[RequestRecord]] | None:
        return whole_sessions(records, self._cut(records))

    def _cut(self, records: list[RequestRecord]) -> frozenset[int]:
        """Cut short, not failed: the sessions a soak's end let send no next turn or cancelled after its grace, and
        those an interrupt caught in a turn or between two."""
        return frozenset(self.run.cut | {r.session for r in records
                                         if r.error_kind in CUT_KINDS and r.session is not None})


class BoundSessions:
    def __init__(self, plan: SessionPlan, b: Binding, client: StreamClient) -> None:
        self.plan, self.b, self.client = plan, b, client
        ep, opts = b.endpoint, b.opts
        fixed = ep.info.adapter.output_length_fields(int(plan.output.maximum()), ep.eos_token_id, opts.api) \
            if opts.fixed_output else {}
        self.recorded_fields = fixed | opts.extra_body
        self.body_extras: dict[str, Any] = {}  # each turn carries its own
        self.texts = SessionTexts(b.builder, plan, b.seed, b.builder.run_tag)

    def fields(self, agent: int, out_len: int) -> dict[str, Any]:
        """A turn's fields: its output length fixed as the server allows, the cache kept warm for its agent, the
        user's --extra-body on top."""
        ep, opts = self.b.endpoint, self.b.opts
        fixed = ep.info.adapter.output_length_fields(out_len, ep.eos_token_id, opts.api) if opts.fixed_output else {}
        slots = None if self.plan.per_agent else ep.info.slots  # a cliff search pins no agent to a slot
        return fixed | ep.info.adapter.session_fields(agent, slots) | opts.extra_body

    def workload_entry(self) -> dict[str, Any]:
        return self.plan.to_dict() | {"seed": self.b.seed}

    def prompts(self) -> RequestPrompts:
        """The warm-ups' prompts: a first turn's size, unique."""
        from .lengths import RequestPrompts

        first = WorkloadRecord(self.plan.shared_prefix + int(self.plan.task.maximum()), int(self.plan.output.maximum()),
                         None, self.b.opts.api, 0, self.b.seed)
        return RequestPrompts(self.b.builder, first, {})

    def level(self, level: Level, repetition: int, records: list[RequestRecord], on_done: OnDone) -> SessionsWork:
        """A level's agents; warm and busted at one agent count and repetition run the same sessions."""
        assert level.cache is not None
        counter = self.b.endpoint.counter
        run = SessionLevel(self.client, self.texts, self.plan, f"{level.concurrency}/{repetition}",
                           level.concurrency or 1, level.cache, self.fields, records, on_done,
                           counter.count if counter is not None else None)
        run.grace_s = self.b.opts.grace_s  # a soak's turns in flight past its end get this long
        run.slo = self.b.opts.slo  # a soak's goodput counts every turn within its limits
        bg = self.plan.background
        return SessionsWork(run, level.cache, None if bg is None else BackgroundLoad(
            bg, self.client, self.b.builder, self.background_fields, self.b.seed, run.key))

    def background_fields(self, out_len: int) -> dict[str, Any]:
        """A background request's fields: its length fixed as the server allows, no slot of an agent's."""
        ep, opts = self.b.endpoint, self.b.opts
        fixed = ep.info.adapter.output_length_fields(out_len, ep.eos_token_id, opts.api) if opts.fixed_output else {}
        return fixed | opts.extra_body


#: The options a sessions run cannot take, as the sweep's options hold them: (flag, given).
def _clashes(opts: SweepOptions) -> list[str]:
    return [flag for flag, given in (("--rate", bool(opts.rates)), ("--requests", opts.requests is not None),
                                     ("--ray", bool(opts.ray))) if given]


@dataclass(frozen=True, slots=True)
class SessionsKind:
    plan: SessionPlan

    name = "sessions"
    splits = False  # each turn waits for the answer before it: one process runs the agents

    @property
    def outgrows_slots(self) -> bool:
        """A cache-cliff search grows live sessions past the engine's slots to find where its cache stops."""
        return self.plan.per_agent

    def refuse(self, opts: SweepOptions) -> None:
        if clash := _clashes(opts):
            raise UsageError(f"--sessions runs whole sessions, closed loop over agents: drop {', '.join(clash)} "
                             "(--shared-prefix sets the shared system prompt; --duration runs them as a soak)")
        if opts.api not in CONVERSATIONAL:
            raise UsageError(f"--sessions sends conversations: drop --api {opts.api}")
        if (opts.workers or 1) > 1:
            raise UsageError("--sessions runs in one process (each turn waits for the answer before it): drop --workers")
        if max(opts.concurrency) > self.plan.sessions:
            raise UsageError(f"--sessions {self.plan.sessions} gives {max(opts.concurrency)} agents nothing to do: "
                             "run at least as many sessions as agents")
        if self.plan.max_context is not None and self.plan.max_context < self.plan.first_turn():
            raise UsageError(f"--max-context {self.plan.max_context}: a first turn alone can need "
                             f"{self.plan.first_turn()} tokens (the shared prompt, the longest task and answer): "
                             "raise it")

    def levels(self, opts: SweepOptions) -> list[Level]:
        modes: list[CacheMode] = ["warm", "busted"] if self.plan.baseline else ["warm"]
        return [Level(concurrency=c, cache=m) for c in opts.concurrency for m in modes]

    def longest_request(self) -> int:
        return self.plan.longest_context()

    def typical_input(self) -> int:
        return self.plan.shared_prefix + int(self.plan.task.maximum())

    def for_search(self) -> SessionsKind:
        """A search runs the sessions at each agent count with the cache warm, as agents run them: no baseline."""
        return SessionsKind(replace(self.plan, baseline=False))

    def for_cache_search(self) -> SessionsKind:
        """A cache-cliff search: every agent one live session, no agent pinned to a slot, the cache warm."""
        return SessionsKind(replace(self.plan, baseline=False, per_agent=True))

    def for_slot(self, limit: int) -> tuple[int, SessionsKind]:
        """Each slot holds a session's longest turn, up to what the model was trained for; a plan without a cap is
        capped there."""
        ctx = min(limit, slot_context(self.plan.longest_context()))
        if self.plan.max_context is None:
            return ctx, SessionsKind(replace(self.plan, max_context=ctx - 64 - int(self.plan.output.maximum())))
        if self.plan.max_context > ctx:
            raise UsageError(f"--max-context {self.plan.max_context}: the embedded model holds {limit} tokens")
        return ctx, self

    def bind(self, b: Binding) -> BoundSessions:
        """A session ends where the context the server gives a request would overflow (llama.cpp's slot, vLLM's
        max_model_len: either answers a longer prompt with an error)."""
        plan, slot_ctx = self.plan, b.endpoint.info.slot_ctx
        if plan.max_context is None and slot_ctx:
            plan = replace(plan, max_context=slot_ctx - int(plan.output.maximum()))
        return BoundSessions(plan, b, b.client)
