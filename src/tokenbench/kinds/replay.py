"""Recorded agent trajectories (``sweep --trace`` of a Weka, MLCommons agentic, TraceLab or session-log file),
replayed as agents behave (``replay.py``): closed loop over lanes (``--concurrency``), or open loop at the recorded
start times (``--trace-speed``), each level salted apart; subagents beside their parent, pauses capped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..apis import CONVERSATIONAL
from ..engines.embedded import slot_context
from ..errors import UsageError
from ..layout import plural
from ..offered_load import Level
from ..metrics import session_stats, whole_sessions
from ..records import RequestRecord
from ..replay import ReplayLevel, ReplayPlan, ReplayTexts
from ..replay_stats import replay_stats, tree_sessions, validity_check
from ..workload import WorkloadRecord
from .base import Binding, LevelLoad, OnDone, SweepOptions, sent_since

if TYPE_CHECKING:
    from ..levels import ServingLevel
    from .lengths import RequestPrompts

#: Tokens a chat message's template adds, counted where a full-text call's length is estimated from its bytes.
TEMPLATE_TOKENS = 8


class ReplayWork:
    """One level of a replay."""

    stoppable: bool = False  # trees end as they end: a search runs the level whole

    def __init__(self, run: ReplayLevel, planned: int | None, ideal: float | None, basis: str | None = None) -> None:
        self.run, self.ideal, self.basis = run, ideal, basis
        self.planned: int | None = planned

    def prepare(self, warm: int) -> int:
        return warm

    async def measure(self, load: LevelLoad, level: Level, duration_s: float | None, seed: int,
                      records: list[RequestRecord], on_done: OnDone) -> None:
        await load.agents(self.run, level, records)

    def attach(self, summary: ServingLevel, records: list[RequestRecord]) -> None:
        """The session view of the trees replayed (each tree a session, its subagents in it; a tree the level's
        end cut is cut)."""
        calls, cut = tree_sessions(records, self.run.finished)
        summary.session = session_stats(calls, "warm", cut)
        if not summary.concurrency:  # at the recorded times: the schedule's rate is of trajectories, not requests
            summary.rate = None
        summary.replay = replay_stats(records, self.ideal, self.planned, self.run.finished, self.basis)
        check = validity_check(summary.replay)
        if check is not None and summary.slo_met is not None:
            summary.slo_checks.append(check)
            summary.slo_met = summary.slo_met and check.met

    def counted(self, records: list[RequestRecord], since_ns: int) -> tuple[int, int]:
        return sent_since(records, since_ns)

    def whole(self, records: list[RequestRecord]) -> list[list[RequestRecord]] | None:
        return whole_sessions(*tree_sessions(records, self.run.finished))


class BoundReplay:
    def __init__(self, plan: ReplayPlan, b: Binding) -> None:
        self.plan, self.b = plan, b
        self.texts = ReplayTexts(b.builder, plan)
        self.body_extras: dict[str, Any] = {}  # each call carries its own
        # a field that follows each call's length or tree says so
        one, two = self.fields(0, 1), self.fields(1, 2)
        self.recorded_fields = {k: v if one.get(k) == v else "per request" for k, v in two.items()}
        empty = sum(c.sent_for_one for tree in plan.trajectories.trajectories for _, t in tree.walk() for c in t.calls)
        if empty:
            b.warn(f"{plural(empty, 'recorded call')} answered nothing (0 tokens: cut off or failed where recorded): "
                   f"{'each is' if empty > 1 else 'it is'} sent for 1 token, the least a server generates")

    def fields(self, agent: int, out_len: int) -> dict[str, Any]:
        """A call's fields: its output length fixed as the server allows, the cache kept warm for its tree (a slot
        of its own where the server has slots, but for a set with subagents: see ``pins``), the user's
        --extra-body on top."""
        ep, opts = self.b.endpoint, self.b.opts
        fixed = ep.info.adapter.output_length_fields(out_len, ep.eos_token_id, opts.api) if opts.fixed_output else {}
        slots = ep.info.slots if self.pins else None
        return fixed | ep.info.adapter.session_fields(agent, slots) | opts.extra_body

    @property
    def pins(self) -> bool:
        """Whether each tree names its slot (llama-server's ``id_slot``). Not where the set has subagents: they run
        beside their parents, so more calls are in flight than there are slots, and a call named to a slot busy
        with a long prompt's prefill wedged llama.cpp's server (3 lanes of one kv-cache-tester trace at 3 slots:
        no progress in 150 s; unnamed, 30 calls in 21 s with 90% of prompt tokens cached). Unnamed, llama-server
        gives a call the idle slot whose cache holds most of its prompt."""
        return not self.plan.trajectories.figures.subagents

    def workload_entry(self) -> dict[str, Any]:
        """The plan, the seed, and the API the calls went to (a length-only set's completions, a full-text set's
        chat or messages), which the run's heading states as a sweep's does."""
        return self.plan.to_dict() | {"seed": self.b.seed, "api": self.b.opts.api}

    def prompts(self) -> RequestPrompts:
        """The warm-ups' prompts: unique, of the set's median call, so an engine's one-time costs are paid there."""
        from .lengths import RequestPrompts

        f = self.plan.trajectories.figures
        median = self.plan.tokens(int(f.median_input_tokens)) if f.median_input_tokens else 128
        return RequestPrompts(self.b.builder, WorkloadRecord(median, 16, None, self.b.opts.api, 0, self.b.seed), {})

    def level(self, level: Level, repetition: int, records: list[RequestRecord], on_done: OnDone) -> ReplayWork:
        counter = self.b.endpoint.counter
        run = ReplayLevel(self.b.client, self.texts, self.plan, f"{level.concurrency or 'open'}/{repetition}",
                          level.concurrency or 1, self.fields, records, on_done, self.b.opts.requests,
                          self.b.opts.duration_s, counter.count if counter is not None else None,
                          self.b.opts.grace_s)
        f = self.plan.trajectories.figures
        return ReplayWork(run, self.b.opts.requests, f.ideal_cached_share, f.ideal_basis)


@dataclass(frozen=True, slots=True)
class ReplayKind:
    plan: ReplayPlan

    name = "replay"
    splits = False  # each call waits for the answer before it: one process runs the lanes
    outgrows_slots = False

    def refuse(self, opts: SweepOptions) -> None:
        if opts.rates:
            raise UsageError("a replay's agents are lanes (--concurrency) or its recorded times (--trace-speed): "
                             "drop --rate")
        if (opts.workers or 1) > 1 or opts.ray:
            raise UsageError("a replay runs in one process (each call waits for the answer before it): "
                             "drop --workers and --ray")
        if self.plan.answers == "live" and not self.plan.full_text:
            raise UsageError(f"--answers live: {self.plan.trajectories.path.name} records lengths only, no answers to "
                             "replace with the server's: drop it")
        if self.plan.full_text and opts.api not in CONVERSATIONAL:
            raise UsageError(f"{self.plan.trajectories.path.name} holds chat messages: drop --api {opts.api}")
        if self.plan.speed is not None and any(t.epoch_s is None for t in self.plan.trajectories.trajectories):
            what = "folder of" if self.plan.trajectories.path.is_dir() else "file of"
            raise UsageError(f"--trace-speed replays at the recorded start times, and {self.plan.trajectories.path.name} "
                             f"({what} {self.plan.trajectories.format} traces) records none: give --concurrency N lanes "
                             "instead")

    def levels(self, opts: SweepOptions) -> list[Level]:
        if self.plan.speed is None:
            return [Level(concurrency=c, cache="warm") for c in opts.concurrency]
        return [Level(schedule=tuple(s / self.plan.speed for s in sorted(self.plan.starts())), cache="warm")]

    def longest_request(self) -> int:
        """The longest call recorded, as scaled; for full text, its bytes (a byte-level tokenizer's most)."""
        return max(self.plan.longest_call(), self._text_bound())

    def _text_bound(self) -> int:
        most = 0
        for tree in self.plan.trajectories.trajectories:
            for _, t in tree.walk():
                for c in t.calls:
                    if c.messages:
                        size = sum(len(str(m.content or "").encode()) + TEMPLATE_TOKENS for m in c.messages)
                        most = max(most, self.plan.tokens(size) + self.plan.tokens(c.output_tokens or 256))
        return most

    def typical_input(self) -> int:
        f = self.plan.trajectories.figures
        return self.plan.tokens(int(f.median_input_tokens)) if f.median_input_tokens else 1024

    def for_search(self) -> ReplayKind:
        """A search runs lanes (one level an agent count); a replay at the recorded times has no load to search."""
        if self.plan.speed is not None:
            raise UsageError("a replay at the recorded times has one load: search lanes instead (--concurrency "
                             "LOW:HIGH with agent trajectories)")
        return self

    def for_slot(self, limit: int) -> tuple[int, ReplayKind]:
        """A slot holds the longest call, up to what the model holds: a longer call overflows the context, and the
        level says how many did."""
        return slot_context(min(self.longest_request(), limit - 64)), self

    def bind(self, b: Binding) -> BoundReplay:
        return BoundReplay(self.plan, b)

